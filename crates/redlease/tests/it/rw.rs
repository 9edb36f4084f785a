//! Read-write locks on real servers: readers together, a writer alone,
//! writer preference, each reader expiring on its own, the quorum with a
//! node down, renewal in the shared batches, waiting without polling.

use std::time::{Duration, Instant};

use redlease::{Error, LockMode};
use redlease_testkit::RedisNodes;

use crate::support::*;

#[tokio::test]
async fn readers_hold_together_and_a_writer_alone() {
    let nodes = RedisNodes::start(1);
    let (a, b) = (locker(&nodes), locker(&nodes));
    let r1 = a.try_read_lock("doc").await.unwrap();
    let r2 = b.try_read_lock("doc").await.unwrap();
    assert_eq!(r1.mode(), LockMode::Shared);
    let refused = b.try_lock("doc").await;
    assert!(matches!(refused, Err(Error::Taken { .. })), "{refused:?}");
    let status = a.admin().inspect("doc").await.unwrap();
    assert_eq!(status.mode(), Some(LockMode::Shared));
    assert_eq!(status.readers(), 2);
    r1.release().await.unwrap();
    assert!(b.try_lock("doc").await.is_err(), "one reader is left");
    r2.release().await.unwrap();
    let w = b.try_lock("doc").await.unwrap();
    assert_eq!(w.mode(), LockMode::Exclusive);
    let refused = a.try_read_lock("doc").await;
    assert!(matches!(refused, Err(Error::Taken { .. })), "{refused:?}");
    let status = a.admin().inspect("doc").await.unwrap();
    assert_eq!(status.mode(), Some(LockMode::Exclusive));
    w.release().await.unwrap();
    // Nothing is left behind.
    assert_eq!(dbsize(nodes.node(0)).await, 0);
}

#[tokio::test]
async fn a_crashed_reader_expires_alone() {
    let nodes = RedisNodes::start(1);
    let locker = locker(&nodes);
    let short = locker
        .try_read_lock("doc")
        .ttl(Duration::from_millis(600))
        .await
        .unwrap();
    let long = locker.try_read_lock("doc").keep_alive().await.unwrap();
    std::mem::forget(short); // crashed: never released, never renewed
    let writer = tokio::spawn({
        let locker = locker.clone();
        async move {
            let started = Instant::now();
            let w = locker.write_lock("doc").wait(Duration::from_secs(3)).await;
            (w.map(|w| w.mode()), started.elapsed())
        }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let status = locker.admin().inspect("doc").await.unwrap();
    assert_eq!(status.readers(), 1, "the crashed reader expired alone");
    assert!(
        status.writer_waits(),
        "the writer waits behind the live one"
    );
    assert!(!long.is_lost());
    long.release().await.unwrap();
    let (taken, waited) = writer.await.unwrap();
    assert_eq!(taken.unwrap(), LockMode::Exclusive);
    assert!(waited >= Duration::from_millis(1400), "{waited:?}");
}

#[tokio::test]
async fn a_waiting_writer_keeps_new_readers_out() {
    let nodes = RedisNodes::start(1);
    let (a, b) = (locker(&nodes), locker(&nodes));
    let reader = a.read_lock("doc").await.unwrap();
    let writer = tokio::spawn({
        let b = b.clone();
        async move { b.write_lock("doc").wait(Duration::from_secs(5)).await }
    });
    // Bounded: the writer takes its place in the queue within its first
    // attempts.
    let deadline = Instant::now() + Duration::from_secs(3);
    while !a.admin().inspect("doc").await.unwrap().writer_waits() {
        assert!(
            Instant::now() < deadline,
            "the writer never took its place in the queue"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let late = a.try_read_lock("doc").await;
    assert!(matches!(late, Err(Error::Taken { .. })), "{late:?}");
    let late = tokio::spawn({
        let a = a.clone();
        async move { a.read_lock("doc").wait(Duration::from_secs(5)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    reader.release().await.unwrap();
    let w = writer.await.unwrap().unwrap();
    // The writer's place is gone with its acquire: readers now wait only
    // for its release, which wakes them.
    assert!(!a.admin().inspect("doc").await.unwrap().writer_waits());
    assert!(!late.is_finished());
    let released = Instant::now();
    w.release().await.unwrap();
    let r = late.await.unwrap().unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "woken by the release, not a timer: {:?}",
        released.elapsed()
    );
    r.release().await.unwrap();
}

#[tokio::test]
async fn a_writer_that_gives_up_leaves_the_queue() {
    let nodes = RedisNodes::start(1);
    let (a, b) = (locker(&nodes), locker(&nodes));
    let reader = a.read_lock("doc").await.unwrap();
    let gave_up = b.write_lock("doc").wait(Duration::from_millis(400)).await;
    assert!(
        matches!(gave_up, Err(Error::WaitTimeout { .. })),
        "{gave_up:?}"
    );
    b.admin().wait_for_background().await;
    let status = a.admin().inspect("doc").await.unwrap();
    assert!(!status.writer_waits());
    a.try_read_lock("doc")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    reader.release().await.unwrap();
}

#[tokio::test]
async fn readers_behind_a_writer_go_in_together() {
    let nodes = RedisNodes::start(1);
    let (a, b) = (locker(&nodes), locker(&nodes));
    let writer = a.lock("doc").await.unwrap();
    let mut readers = Vec::new();
    for i in 0..6 {
        let locker = if i % 2 == 0 { a.clone() } else { b.clone() };
        readers.push(tokio::spawn(async move {
            locker.read_lock("doc").wait(Duration::from_secs(5)).await
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    writer.release().await.unwrap();
    let mut held = Vec::new();
    for r in readers {
        held.push(r.await.unwrap().unwrap());
    }
    let status = a.admin().inspect("doc").await.unwrap();
    assert_eq!(status.readers(), 6);
    for r in held {
        r.release().await.unwrap();
    }
}

#[tokio::test]
async fn kept_alive_readers_outlive_their_ttl_and_leave_cleanly() {
    let nodes = RedisNodes::start(1);
    let locker = locker_with_timeout(&nodes, Duration::from_millis(200));
    let ttl = Duration::from_millis(600);
    let a = locker.read_lock("doc").ttl(ttl).keep_alive().await.unwrap();
    let b = locker.read_lock("doc").ttl(ttl).keep_alive().await.unwrap();
    let w = locker.lock("other").ttl(ttl).keep_alive().await.unwrap();
    tokio::time::sleep(4 * ttl).await;
    assert!(!a.is_lost() && !b.is_lost() && !w.is_lost());
    assert_eq!(locker.admin().inspect("doc").await.unwrap().readers(), 2);
    let mut a = a;
    a.extend(Duration::from_secs(2)).await.unwrap();
    a.release().await.unwrap();
    b.release().await.unwrap();
    w.release().await.unwrap();
    assert_eq!(dbsize(nodes.node(0)).await, 0);
}

#[tokio::test]
async fn over_a_quorum_with_a_node_down() {
    let mut nodes = RedisNodes::start(3);
    let locker = fenced_locker(&nodes);
    let w = locker.lock("doc").await.unwrap();
    let written = token(&w);
    w.release().await.unwrap();
    nodes.node_mut(2).kill();
    let r = locker.read_lock("doc").await.unwrap();
    assert!(
        r.fencing_token().unwrap() >= written,
        "a reader sees the last write"
    );
    let refused = locker.try_lock("doc").await;
    assert!(matches!(refused, Err(Error::Taken { .. })), "{refused:?}");
    r.release().await.unwrap();
    let w2 = locker.lock("doc").await.unwrap();
    assert!(token(&w2) > written);
    w2.release().await.unwrap();
}

#[tokio::test]
async fn force_release_clears_both_modes() {
    let nodes = RedisNodes::start(1);
    let (a, b) = (locker(&nodes), locker(&nodes));
    let r = a.read_lock("doc").keep_alive().await.unwrap();
    let waiting = b.write_lock("doc").wait(Duration::from_millis(300)).await;
    assert!(waiting.is_err());
    a.admin().force_release("doc").await.unwrap();
    let w = b.try_lock("doc").await.unwrap();
    w.release().await.unwrap();
    // The reader finds its hold gone at its next renewal.
    let lost = tokio::time::timeout(Duration::from_secs(10), r.lost()).await;
    assert!(lost.is_ok());
}

/// A writer that readers kept waiting leaves the queue before it hands
/// out its lease, but never spends the lease on a silent node doing so:
/// with one of 3 nodes blackholed after the writer took its place there,
/// the lease comes back with most of its TTL (the leave waits for a
/// quorum; the silent node's goes on in the background). Before, the
/// writer waited out its node timeout there, 1.5 s of a 2 s TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_does_not_spend_a_waiting_writers_lease() {
    use redlease_testkit::proxy::{Mode, Proxy};
    let nodes = RedisNodes::start(3);
    let proxies: Vec<Proxy> = nodes.iter().map(|nd| Proxy::start(&nd.addr())).collect();
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let build = |node_timeout: Duration| {
        redlease::Locker::builder(&urls)
            .advanced(|a| a.restart_quarantine(Duration::ZERO))
            .ttl(Duration::from_secs(2))
            .node_timeout(node_timeout)
            .connect_timeout(NODE_TIMEOUT)
            .build()
            .unwrap()
    };
    let (readers, writers) = (build(100 * MS), build(1500 * MS));
    let reader = readers.read_lock("doc").await.unwrap();
    let writer = tokio::spawn(async move {
        let lease = writers
            .write_lock("doc")
            .wait(Duration::from_secs(10))
            .await;
        (Instant::now(), lease, writers)
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while !readers.admin().inspect("doc").await.unwrap().writer_waits() {
        assert!(
            Instant::now() < deadline,
            "the writer never took its place in the queue"
        );
        tokio::time::sleep(10 * MS).await;
    }
    // Marked on every node (one inspect of a quorum may miss a slow one).
    tokio::time::sleep(200 * MS).await;
    proxies[2].set(Mode::Blackhole);
    reader.release().await.unwrap();
    let (returned, lease, _writers) = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .unwrap()
        .unwrap();
    let lease = lease.expect("the writer gets the lock");
    let left = lease.valid_until().saturating_duration_since(returned);
    assert!(
        left > Duration::from_secs(1),
        "handed out with {left:?} of its 2 s left"
    );
    proxies[2].set(Mode::Pass);
    lease.release().await.unwrap();
}
