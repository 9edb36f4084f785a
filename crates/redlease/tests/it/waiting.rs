//! Waiting without polling: a waiter takes a released lock within a round
//! trip or two of the release, shares one subscription per lock and node
//! with the other waiters, and leaves nothing behind when cancelled.

use std::time::{Duration, Instant};

use rand::Rng;
use redlease::{Error, Locker, RetryPolicy};
use redlease_testkit::RedisNodes;

use crate::support::*;

/// Waiters whose fallback timer is 5 s: only a notification can wake them
/// sooner.
fn patient_locker(nodes: &RedisNodes) -> Locker {
    Locker::builder(nodes.urls())
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .ttl(Duration::from_secs(10))
        .node_timeout(200 * MS)
        .retry(
            RetryPolicy::within(Duration::from_secs(30))
                .delay(Duration::from_secs(5), Duration::from_secs(5)),
        )
        .build()
        .unwrap()
}

fn channel(locker: &Locker, resource: &str) -> String {
    format!("{}:released", locker.admin().key(resource))
}

/// "job" held through one Locker, and a task of another (as two processes
/// would be: the wake-up has to come from Redis) waiting for it, subscribed
/// on every node. The task returns when it got the lock, and the lease.
async fn held_and_awaited(
    nodes: &RedisNodes,
) -> (
    redlease::Lease,
    tokio::task::JoinHandle<(Instant, Result<redlease::Lease, redlease::Error>)>,
    String,
) {
    let holder = locker(nodes).try_lock("job").await.unwrap();
    let waiter_side = patient_locker(nodes);
    let chan = channel(&waiter_side, "job");
    let waiter = spawn_lock(waiter_side, "job");
    let subscribed = wait_numsub(nodes, &chan, 1, Duration::from_secs(3)).await;
    assert_eq!(subscribed, vec![1; nodes.len()]);
    (holder, waiter, chan)
}

async fn waiter_takes_a_released_lock_at_once(n: usize) {
    let nodes = RedisNodes::start(n);
    let (holder, waiter, chan) = held_and_awaited(&nodes).await;
    // Let the waiter finish its post-subscription retry and go to sleep.
    tokio::time::sleep(100 * MS).await;

    let released = Instant::now();
    holder.release().await.unwrap();
    let (acquired, lease) = waiter.await.unwrap();
    let lease = lease.expect("the waiter gets the lock");
    let gap = acquired - released;
    assert!(
        gap < 100 * MS,
        "handoff took {gap:?}; the fallback timer is 5 s"
    );
    lease.release().await.unwrap();
    assert_eq!(
        wait_numsub(&nodes, &chan, 0, Duration::from_secs(2)).await,
        vec![0; n]
    );
}

#[tokio::test]
async fn one_node_waiter_takes_a_released_lock_at_once() {
    waiter_takes_a_released_lock_at_once(1).await;
}

#[tokio::test]
async fn five_nodes_waiter_takes_a_released_lock_at_once() {
    waiter_takes_a_released_lock_at_once(5).await;
}

async fn crashed_holder_costs_at_most_the_ttl(n: usize) {
    let nodes = RedisNodes::start(n);
    let holder_side = locker_with_timeout(&nodes, 20 * MS);
    let waiter_side = patient_locker(&nodes);
    let ttl = 500 * MS;
    let taken = Instant::now();
    let holder = holder_side.try_lock("job").ttl(ttl).await.unwrap();
    // The holder dies without releasing: nothing will ever be published.
    std::mem::forget(holder);
    let lease = waiter_side
        .lock("job")
        .await
        .expect("acquired after expiry");
    let waited = taken.elapsed();
    assert!(waited >= ttl - 20 * MS, "acquired while held: {waited:?}");
    assert!(waited < ttl + 100 * MS, "took {waited:?} for a {ttl:?} TTL");
    lease.release().await.unwrap();
}

#[tokio::test]
async fn one_node_crashed_holder_costs_at_most_the_ttl() {
    crashed_holder_costs_at_most_the_ttl(1).await;
}

#[tokio::test]
async fn five_nodes_crashed_holder_costs_at_most_the_ttl() {
    crashed_holder_costs_at_most_the_ttl(5).await;
}

#[tokio::test]
async fn waiters_share_one_subscription_per_node() {
    let nodes = RedisNodes::start(3);
    let holder_side = locker(&nodes);
    let waiters = patient_locker(&nodes);
    let chan = channel(&waiters, "job");
    let holder = holder_side.try_lock("job").await.unwrap();

    let mut tasks = Vec::new();
    for _ in 0..4 {
        let waiters = waiters.clone();
        tasks.push(tokio::spawn(async move {
            let lease = waiters
                .lock("job")
                .await
                .expect("each waiter gets its turn");
            tokio::time::sleep(5 * MS).await;
            lease.release().await.expect("release");
        }));
    }
    assert_eq!(
        wait_numsub(&nodes, &chan, 1, Duration::from_secs(3)).await,
        vec![1; 3]
    );
    tokio::time::sleep(50 * MS).await;
    assert_eq!(
        wait_numsub(&nodes, &chan, 1, Duration::ZERO).await,
        vec![1; 3],
        "one SUBSCRIBE for 4 waiters"
    );

    let released = Instant::now();
    holder.release().await.unwrap();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
    }
    // Four handoffs, each woken by the previous release, not by a 5 s timer.
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "took {:?}",
        released.elapsed()
    );
    assert_eq!(
        wait_numsub(&nodes, &chan, 0, Duration::from_secs(2)).await,
        vec![0; 3]
    );
}

#[tokio::test]
async fn dropping_waiters_at_random_points_leaks_nothing() {
    let nodes = RedisNodes::start(5);
    let holder_side = locker(&nodes);
    let waiters = patient_locker(&nodes);
    let key = waiters.admin().key("job");
    let chan = channel(&waiters, "job");
    let mut rng = rand::rng();
    for round in 0..40 {
        // Half the rounds the lock is held (drops hit waiting waiters), half
        // it is free (drops hit acquisitions in flight).
        let holder = if round % 2 == 0 {
            Some(holder_side.lock("job").await.unwrap())
        } else {
            None
        };
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let waiters = waiters.clone();
            let cut = Duration::from_micros(rng.random_range(0..5_000));
            tasks.push(tokio::spawn(async move {
                // Dropped at a random point, or finishes and drops its lease.
                let _ = tokio::time::timeout(cut, waiters.lock("job")).await;
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        if let Some(holder) = holder {
            holder.release().await.unwrap();
        }
    }
    assert_eq!(
        values_once_gone(&nodes, &key, Duration::from_secs(3)).await,
        vec![None; 5]
    );
    assert_eq!(
        wait_numsub(&nodes, &chan, 0, Duration::from_secs(3)).await,
        vec![0; 5]
    );
}

#[tokio::test]
async fn waiting_survives_a_broken_subscription_connection() {
    let nodes = RedisNodes::start(3);
    let (holder, waiter, chan) = held_and_awaited(&nodes).await;

    for node in nodes.iter() {
        command(node, &["CLIENT", "KILL", "TYPE", "pubsub"]).await;
    }
    // The subscription connections come back on their own, subscribed.
    assert_eq!(
        wait_numsub(&nodes, &chan, 1, Duration::from_secs(5)).await,
        vec![1; 3]
    );

    let released = Instant::now();
    holder.release().await.unwrap();
    let (acquired, lease) = waiter.await.unwrap();
    lease.expect("acquired").release().await.unwrap();
    assert!(
        acquired - released < 100 * MS,
        "took {:?}",
        acquired - released
    );
}

/// Tasks of one process take turns: the task that just released does not
/// win the lock straight back while others wait, and a release wakes one
/// waiter, not all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_take_turns() {
    const WORKERS: usize = 4;
    const CYCLES: usize = 50;
    let nodes = RedisNodes::start(1);
    let locker = patient_locker(&nodes);
    let calls_before = script_calls(nodes.node(0)).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for worker in 0..WORKERS {
        let (locker, tx) = (locker.clone(), tx.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..CYCLES {
                let lease = locker.lock("job").await.expect("lock");
                tx.send(worker).unwrap();
                tokio::time::sleep(MS).await;
                lease.release().await.expect("release");
            }
        }));
    }
    drop(tx);
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .unwrap()
            .unwrap();
    }
    let mut order = Vec::new();
    while let Ok(worker) = rx.try_recv() {
        order.push(worker);
    }
    assert_eq!(order.len(), WORKERS * CYCLES);
    let same = order.windows(2).filter(|w| w[0] == w[1]).count();
    let share = same as f64 / (order.len() - 1) as f64;
    let calls = script_calls(nodes.node(0)).await - calls_before;
    let per_cycle = calls as f64 / order.len() as f64;
    println!("same-task share {share:.2}, script calls per cycle {per_cycle:.2}");
    assert!(
        share < 0.5,
        "the releasing task took the lock back {:.0}% of the time",
        share * 100.0
    );
    // A release that hands the lock on, the acquire that takes it, and the
    // releasing task's next attempt, which queues it: not a herd of one
    // retry per waiter per release.
    assert!(
        per_cycle < 3.5,
        "{per_cycle:.2} script calls per cycle: a herd of retries"
    );
}

/// When a task of this Locker takes the lock from the queue, the next in
/// line knows the lock is held and until when: it does not look at it (a
/// refused SET and a round trip for the holder's expiry, on every node),
/// and still takes it the moment the holder releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_in_line_behind_a_task_of_its_locker_does_not_look() {
    let nodes = RedisNodes::start(1);
    let node = nodes.node(0);
    let locker = patient_locker(&nodes);
    let first = locker.try_lock("job").await.unwrap();
    let second = spawn_lock(locker.clone(), "job");
    // Queued behind the second: both share the Locker's subscription.
    tokio::time::sleep(100 * MS).await;
    let third = spawn_lock(locker.clone(), "job");
    let chan = channel(&locker, "job");
    assert_eq!(
        wait_numsub(&nodes, &chan, 1, Duration::from_secs(3)).await,
        vec![1]
    );
    tokio::time::sleep(200 * MS).await;

    let before = script_calls(node).await + command_calls(node, &["set"]).await;
    first.release().await.unwrap();
    let (_, got) = tokio::time::timeout(Duration::from_secs(2), second)
        .await
        .expect("the second takes the released lock at once")
        .unwrap();
    let second_lease = got.unwrap();
    tokio::time::sleep(500 * MS).await;
    let calls = script_calls(node).await + command_calls(node, &["set"]).await - before;
    // The first's release (a script) and the second's acquire (the plain
    // SET: handed on in the process); the third sent nothing.
    assert_eq!(calls, 2, "the third looked at a lock its Locker holds");
    assert!(!third.is_finished());

    let released = Instant::now();
    second_lease.release().await.unwrap();
    let (acquired, got) = tokio::time::timeout(Duration::from_secs(2), third)
        .await
        .expect("the third takes the lock on the release, not its 5 s timer")
        .unwrap();
    got.unwrap().release().await.unwrap();
    assert!(acquired - released < Duration::from_secs(1));
}

/// A failed attempt cleans up the keys it wrote, but that is not a release
/// of the lock: it must not wake the waiter that made it (nor any other),
/// or a lock that stays busy turns waiting into a busy loop of attempts.
#[tokio::test]
async fn a_failed_attempts_cleanup_does_not_wake_its_own_waiter() {
    let mut nodes = RedisNodes::start(3);
    let locker = Locker::builder(nodes.urls())
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .ttl(Duration::from_secs(5))
        .node_timeout(NODE_TIMEOUT)
        .retry(RetryPolicy::default().delay(50 * MS, 100 * MS))
        .build()
        .unwrap();
    // Another owner on node 0, node 2 down: each attempt gets node 1 only,
    // writes its token there and deletes it again.
    set_px(
        nodes.node(0),
        &locker.admin().key("split"),
        "someone-else",
        60_000,
    )
    .await;
    nodes.node_mut(2).kill();
    let waited = locker.lock("split").wait(Duration::from_secs(1)).await;
    let Err(Error::WaitTimeout { attempts, .. }) = waited else {
        panic!("the lock stays busy: {waited:?}");
    };
    // One attempt per 50-100 ms delay (and one at once after subscribing).
    assert!(
        (5..=25).contains(&attempts),
        "{attempts} attempts in 1 s with 50-100 ms between them"
    );
}

/// A Locker with the default retry delays (10-100 ms), as most users have:
/// it polls only when it could miss a release.
fn default_delays_locker(nodes: &RedisNodes, ttl: Duration, wait: Duration) -> Locker {
    Locker::builder(nodes.urls())
        .advanced(|a| a.restart_quarantine(Duration::ZERO))
        .ttl(ttl)
        .retry(RetryPolicy::within(wait))
        .build()
        .unwrap()
}

/// Waiters that hear releases do not poll a held lock: each looks when the
/// holder's key is due to expire (the holder renews it), the crowd spread
/// out. With the default retry
/// policy (10-100 ms) they used to make hundreds of attempts here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_do_not_poll_a_held_lock() {
    let nodes = RedisNodes::start(1);
    let node = nodes.node(0);
    let ttl = Duration::from_secs(2);
    let build = || default_delays_locker(&nodes, ttl, Duration::from_secs(30));
    let holder = build();
    let lease = holder.lock("job").keep_alive().await.unwrap();
    // Five "processes" (Lockers of their own), and five tasks of one more.
    let shared = build();
    let mut waiters = Vec::new();
    for i in 0..10 {
        let locker = if i < 5 { build() } else { shared.clone() };
        waiters.push(tokio::spawn(async move {
            let lease = locker.lock("job").await?;
            lease.release().await
        }));
    }
    let chan = channel(&holder, "job");
    assert_eq!(
        wait_numsub(&nodes, &chan, 6, Duration::from_secs(3)).await,
        vec![6]
    );
    tokio::time::sleep(300 * MS).await;

    let before = lock_calls(node).await;
    let window = Duration::from_secs(4);
    tokio::time::sleep(window).await;
    let calls = lock_calls(node).await - before;
    // Six processes looking about once per 1.3-2 s, and the holder's
    // renewals (every 0.67 s): about 20 in all.
    assert!(
        calls <= 40,
        "{calls} scripts ran in {window:?} while the lock was held"
    );
    assert!(!lease.is_lost());
    for waiter in &waiters {
        assert!(!waiter.is_finished(), "nobody got a held lock");
    }
    lease.release().await.unwrap();
    // And the lock still goes round, each handoff woken by its release.
    let started = Instant::now();
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("every waiter gets the lock in turn")
            .unwrap()
            .expect("acquired and released");
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "ten handoffs took {:?}",
        started.elapsed()
    );
}

/// Many processes racing for a released lock on five nodes split the vote
/// at times: each gets a minority, and all undo their partial grants at
/// once, unannounced. A waiter that met such a split must retry at its
/// short delay, not sleep until the contenders' fresh keys would expire
/// (their TTL): the lock goes round thirty processes well within one TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_vote_does_not_put_the_waiters_to_sleep() {
    let nodes = RedisNodes::start(5);
    let ttl = Duration::from_secs(10);
    let build = || default_delays_locker(&nodes, ttl, Duration::from_secs(60));
    let holder = build();
    let lease = holder.lock("job").await.unwrap();
    let mut waiters = Vec::new();
    for _ in 0..30 {
        let locker = build();
        waiters.push(tokio::spawn(async move {
            let lease = locker.lock("job").await?;
            tokio::time::sleep(5 * MS).await;
            lease.release().await
        }));
    }
    let chan = channel(&holder, "job");
    // Let them subscribe. Not asserted: Valkey 9.1.2 sometimes counts a
    // crowd's subscribers wrong (in the hundreds of millions, or a few
    // short), and a waiter not yet subscribed polls anyway.
    wait_numsub(&nodes, &chan, 30, Duration::from_secs(3)).await;
    tokio::time::sleep(200 * MS).await;
    let started = Instant::now();
    lease.release().await.unwrap();
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(60), waiter)
            .await
            .expect("every waiter gets the lock")
            .unwrap()
            .expect("acquired and released");
    }
    let took = started.elapsed();
    assert!(
        took < ttl - Duration::from_secs(2),
        "thirty handoffs took {took:?}"
    );
}

/// A release is published only when a waiter of another Locker marked
/// the lock, and then once, to the waiter it is handed to: a task of the
/// same Locker waits behind its sibling in the process and is woken there
/// by its release, which costs the servers no `PUBLISH` and leaves the
/// holder unmarked; a waiter elsewhere marks the holder (a `*` after its
/// token, its TTL kept) with its refused acquire and hears the release at
/// once. With fencing on the acquire is the script, which marks the
/// holder itself. A marked lease is still its holder's to extend and
/// release; a lease taken in turn is marked (its release hands the lock
/// to the next in line, or announces it), and one taken free is not.
async fn releases_are_published_only_for_waiters_of_other_lockers(fencing: bool) {
    let nodes = RedisNodes::start(1);
    let node = nodes.node(0);
    let build = || {
        Locker::builder(nodes.urls())
            .advanced(|a| a.restart_quarantine(Duration::ZERO))
            .ttl(Duration::from_secs(10))
            .node_timeout(200 * MS)
            .fencing(fencing)
            .retry(
                RetryPolicy::within(Duration::from_secs(30))
                    .delay(Duration::from_secs(5), Duration::from_secs(5)),
            )
            .build()
            .unwrap()
    };
    let mine = build();
    let key = mine.admin().key("job");
    let marked = |value: &Option<String>| value.as_deref().is_some_and(|v| v.ends_with('*'));
    let chan = channel(&mine, "job");
    // Announcements on the release channels, the lock's and each
    // Locker's own (every change is also told on the name's watchers'
    // channel, which this does not count).
    let announced = crate::support::listen(node, &format!("{key}:released*")).await;
    let announcements = || crate::support::heard(&announced, 50 * MS);

    // A lock nobody waits for: taken and released without a PUBLISH.
    mine.try_lock("job").await.unwrap().release().await.unwrap();
    assert_eq!(announcements().await, 0);
    // Tasks of one Locker: the second waits behind its sibling in the
    // process, marks nothing, and is woken by its release there.
    for _ in 1..=3 {
        let holder = mine.try_lock("job").await.unwrap();
        let sibling = spawn_lock(mine.clone(), "job");
        wait_numsub(&nodes, &chan, 1, Duration::from_secs(3)).await;
        tokio::time::sleep(100 * MS).await;
        let value = get(node, &key).await;
        assert!(!marked(&value), "a sibling marks nothing: {value:?}");
        let gap = handoff(holder, sibling).await;
        assert!(gap < Duration::from_secs(1), "handoff took {gap:?}");
        assert_eq!(
            announcements().await,
            0,
            "a handoff in the process publishes nothing"
        );
    }

    // A waiter of another Locker (as another process would be).
    let mut holder = mine.try_lock("job").await.unwrap();
    let unmarked = get(node, &key).await.expect("held");
    let waiter = spawn_lock(build(), "job");
    let mut value = None;
    for _ in 0..100 {
        value = get(node, &key).await;
        if marked(&value) {
            break;
        }
        tokio::time::sleep(20 * MS).await;
    }
    assert_eq!(
        value,
        Some(format!("{unmarked}*")),
        "the refused waiter did not mark the holder"
    );
    let left = pttl(node, &key).await;
    assert!(
        (8_000..=10_000).contains(&left),
        "the mark kept the TTL: {left} ms"
    );
    holder
        .extend(Duration::from_secs(20))
        .await
        .expect("a marked lease is still ours to extend");
    assert!(pttl(node, &key).await > 10_000, "extended");
    wait_numsub(&nodes, &chan, 1, Duration::from_secs(3)).await;
    tokio::time::sleep(100 * MS).await;
    let gap = handoff(holder, waiter).await;
    assert!(
        gap < Duration::from_secs(1),
        "handoff took {gap:?}; the waiter's fallback timer is 5 s"
    );
    // The marked release's handoff, and the waiter's release of its lease
    // taken in turn (marked, so announced to whoever else may wait).
    assert_eq!(
        announcements().await,
        2,
        "releases published: the handoff and the next"
    );
    assert_eq!(get(node, &key).await, None, "both released");
}

#[tokio::test]
async fn releases_are_published_only_for_waiters_of_other_lockers_plain() {
    releases_are_published_only_for_waiters_of_other_lockers(false).await;
}

#[tokio::test]
async fn releases_are_published_only_for_waiters_of_other_lockers_fenced() {
    releases_are_published_only_for_waiters_of_other_lockers(true).await;
}

/// The release itself hands the lock to the next waiter of the same
/// Locker, which waits in its process, out of line on the servers: while
/// the release waits on a node whose writes are paused (`CLIENT PAUSE
/// WRITE`), the waiter's one acquire waits behind it on the connection,
/// and once the release runs the waiter takes the lock at once, with the
/// plain acquire (one `SET`, no script).
#[tokio::test]
async fn the_release_hands_the_lock_to_the_next_waiter() {
    let nodes = RedisNodes::start(1);
    let node = nodes.node(0);
    let locker = Locker::builder(nodes.urls())
        .advanced(|a| a.restart_quarantine(Duration::ZERO))
        .ttl(Duration::from_secs(10))
        .node_timeout(Duration::from_secs(2))
        .retry(
            RetryPolicy::within(Duration::from_secs(30))
                .delay(Duration::from_secs(5), Duration::from_secs(5)),
        )
        .build()
        .unwrap();
    let key = locker.admin().key("job");
    let holder = locker.try_lock("job").await.unwrap();
    let waiter = spawn_lock(locker.clone(), "job");
    let chan = channel(&locker, "job");
    wait_numsub(&nodes, &chan, 1, Duration::from_secs(3)).await;
    tokio::time::sleep(100 * MS).await;
    assert_eq!(
        queue_len(node, &key).await,
        0,
        "the waiter waits in its process"
    );

    let (scripts, sets) = (
        script_calls(node).await,
        command_calls(node, &["set"]).await,
    );
    command(node, &["CLIENT", "PAUSE", "600", "WRITE"]).await;
    let released = Instant::now();
    let release = tokio::spawn(async move { holder.release().await });
    tokio::time::sleep(200 * MS).await;
    assert!(
        !release.is_finished(),
        "the release ran while writes were paused"
    );
    release.await.unwrap().unwrap();
    let (acquired, got) = tokio::time::timeout(Duration::from_secs(3), waiter)
        .await
        .expect("the waiter takes the lock after the release")
        .unwrap();
    assert!(
        acquired - released < Duration::from_secs(2),
        "woken by the handoff, not its 5 s timer"
    );
    // The release, and the waiter's acquire: nothing sent in between.
    assert_eq!(script_calls(node).await - scripts, 1);
    assert_eq!(command_calls(node, &["set"]).await - sets, 1);
    got.unwrap().release().await.unwrap();
}
