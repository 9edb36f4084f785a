//! Watching a name (`Locker::watch`): its state now, then each change,
//! told by the servers' notifications, not found by polling.

use std::time::Duration;

use redlease::{LockStatus, Locker, RetryPolicy, Verdict, Watch};
use redlease_testkit::cluster::RedisCluster;
use redlease_testkit::RedisNodes;

use crate::support::{command_calls, MS};

const TOLD_WITHIN: Duration = Duration::from_secs(3);

fn watcher_locker(urls: Vec<String>, owner: &str, ttl: Duration, delay: Duration) -> Locker {
    Locker::builder(urls)
        .advanced(|a| a.restart_quarantine(Duration::ZERO)) // brand-new test servers
        .ttl(ttl)
        .node_timeout(500 * MS)
        .owner(owner)
        .lock_delay(delay)
        .retry(RetryPolicy::within(Duration::from_secs(10)).delay(MS, 5 * MS))
        .build()
        .expect("valid test settings")
}

async fn next(watch: &mut Watch) -> LockStatus {
    tokio::time::timeout(TOLD_WITHIN, watch.changed())
        .await
        .expect("a change is told within 3 s")
        .expect("the watch reads every node")
}

/// Nothing more is told for `quiet`.
async fn nothing_told(watch: &mut Watch, quiet: Duration) {
    if let Ok(told) = tokio::time::timeout(quiet, watch.changed()).await {
        panic!("told with nothing changed: {told:?}");
    }
}

fn owners(status: &LockStatus) -> Vec<String> {
    status.holders().into_iter().map(|h| h.owner).collect()
}

/// How many inspections `node` ran (sent whole, as EVAL).
async fn reads(node: Option<&redlease_testkit::RedisNode>) -> u64 {
    match node {
        Some(n) => command_calls(n, &["eval"]).await,
        None => 0,
    }
}

async fn taken_released_and_waited_for(
    urls: Vec<String>,
    inspect_at: Option<&redlease_testkit::RedisNode>,
) {
    let a = watcher_locker(
        urls.clone(),
        "worker-a",
        Duration::from_secs(5),
        Duration::ZERO,
    );
    let b = watcher_locker(
        urls.clone(),
        "worker-b",
        Duration::from_secs(5),
        Duration::ZERO,
    );
    let watcher = watcher_locker(urls, "watcher", Duration::from_secs(5), Duration::ZERO);
    let mut watch = watcher.watch("job");
    let now = next(&mut watch).await;
    assert!(matches!(now.verdict(), Verdict::Free { .. }), "{now:?}");
    assert!(now.holders().is_empty());

    // Nothing changes: nothing is told, and nothing is read.
    let before = reads(inspect_at).await;
    nothing_told(&mut watch, Duration::from_millis(700)).await;
    assert_eq!(
        reads(inspect_at).await,
        before,
        "read the name with nothing told"
    );

    // Taken and released with nobody waiting (the plain acquire, SET NX,
    // and the release's common case: on a server with DELIFEQ, that
    // command): each told.
    let lease = a.lock("job").await.unwrap();
    assert_eq!(owners(&next(&mut watch).await), ["worker-a"]);
    lease.release().await.unwrap();
    let free = next(&mut watch).await;
    assert!(matches!(free.verdict(), Verdict::Free { .. }), "{free:?}");

    // Taken again: told.
    let lease = a.lock("job").await.unwrap();
    let held = next(&mut watch).await;
    assert!(matches!(held.verdict(), Verdict::Held { .. }), "{held:?}");
    assert_eq!(owners(&held), ["worker-a"]);

    // A waiter comes: told, with the queue.
    let waiter = tokio::spawn(async move {
        let lease = b.lock("job").await.unwrap();
        lease.release().await.unwrap();
    });
    let queued = next(&mut watch).await;
    assert_eq!(queued.queued(), 1, "{queued:?}");
    assert_eq!(owners(&queued), ["worker-a"]);

    // Released: handed to the waiter, who then gives it back. Each state
    // told is one that was: held by b, or free after it.
    lease.release().await.unwrap();
    // (b is told only if a read fell between its take and its release.)
    for _ in 0..4 {
        let s = next(&mut watch).await;
        if matches!(s.verdict(), Verdict::Free { .. }) && s.queued() == 0 {
            break;
        }
        assert_ne!(owners(&s), ["worker-a"], "told a released holder: {s:?}");
    }
    waiter.await.unwrap();
    let last = watcher.admin().inspect("job").await.unwrap();
    assert!(matches!(last.verdict(), Verdict::Free { .. }));
}

#[tokio::test]
async fn a_watch_is_told_each_change_and_reads_nothing_meanwhile() {
    let nodes = RedisNodes::start(1);
    taken_released_and_waited_for(nodes.urls(), Some(nodes.node(0))).await;
    let nodes = RedisNodes::start(3);
    taken_released_and_waited_for(nodes.urls(), Some(nodes.node(0))).await;
}

#[tokio::test]
async fn a_watch_on_a_cluster_is_told_each_change() {
    let cluster = RedisCluster::start(3);
    let url = crate::cluster::cluster_url(&cluster);
    taken_released_and_waited_for(vec![url], None).await;
}

/// A holder that dies says nothing: its hold's end is told when due, and
/// with a lock-delay, the delay first.
#[tokio::test]
async fn a_hold_that_ends_without_a_word_is_told_when_it_ends() {
    let nodes = RedisNodes::start(3);
    let ttl = Duration::from_millis(600);
    let delay = Duration::from_millis(900);
    let dying = watcher_locker(nodes.urls(), "dies", ttl, delay);
    let watcher = watcher_locker(nodes.urls(), "watcher", ttl, Duration::ZERO);
    let mut watch = watcher.watch("job");
    assert!(next(&mut watch).await.holders().is_empty());
    let lease = dying.lock("job").await.unwrap();
    let held = next(&mut watch).await;
    assert_eq!(owners(&held), ["dies"]);
    assert!(held.holders()[0].in_lock_delay().is_none(), "{held:?}");
    // Its process "dies": nothing is released.
    std::mem::forget(lease);
    let started = std::time::Instant::now();
    let delayed = next(&mut watch).await;
    let holder = &delayed.holders()[0];
    let left = holder
        .in_lock_delay()
        .expect("told when it enters its lock-delay");
    assert!(left <= delay, "{left:?}");
    assert!(holder
        .describe(std::time::SystemTime::now())
        .contains("lock-delay"));
    let free = next(&mut watch).await;
    assert!(matches!(free.verdict(), Verdict::Free { .. }), "{free:?}");
    assert!(started.elapsed() < ttl + delay + Duration::from_secs(1));
}

#[tokio::test]
async fn readers_and_permits_are_counted_as_they_come_and_go() {
    let nodes = RedisNodes::start(1);
    let locker = watcher_locker(nodes.urls(), "w", Duration::from_secs(5), Duration::ZERO);
    let mut watch = locker.watch("pool");
    next(&mut watch).await;
    let sem = locker.semaphore("pool", 3);
    let one = sem.acquire().await.unwrap();
    assert_eq!(next(&mut watch).await.readers(), 1);
    let two = sem.acquire_many(2).await.unwrap();
    let s = next(&mut watch).await;
    assert_eq!((s.readers(), s.permits()), (3, Some(3)));
    one.release().await.unwrap();
    assert_eq!(next(&mut watch).await.readers(), 2);
    two.release().await.unwrap();
    assert!(matches!(
        next(&mut watch).await.verdict(),
        Verdict::Free { .. }
    ));
}

#[tokio::test]
async fn a_bad_name_is_refused_before_anything_is_sent() {
    let nodes = RedisNodes::start(1);
    let locker = watcher_locker(nodes.urls(), "w", Duration::from_secs(5), Duration::ZERO);
    let mut watch = locker.watch("");
    assert!(matches!(
        watch.changed().await,
        Err(redlease::Error::InvalidInput { .. })
    ));
}
