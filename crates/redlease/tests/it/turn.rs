//! Waiting in turn across processes (`coord::turn`): exclusive waiters
//! queue on the servers, a release hands the lock to the first of them and
//! wakes it alone, and a place whose waiter is gone never holds the queue
//! up. Separate Lockers stand for separate processes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redlease::{Error, Locker, RetryPolicy};
use redlease_testkit::cluster::RedisCluster;
use redlease_testkit::{RedisNode, RedisNodes};

use crate::support::*;

/// A process's Locker: waits up to 60 s, and without a handoff would look
/// only at the holder's expiry (TTL 10 s) or after 5 s.
fn process(urls: Vec<String>) -> Locker {
    Locker::builder(urls)
        .advanced(|a| a.restart_quarantine(Duration::ZERO))
        .ttl(Duration::from_secs(10))
        .node_timeout(200 * MS)
        .retry(
            RetryPolicy::within(Duration::from_secs(60))
                .delay(Duration::from_secs(5), Duration::from_secs(5)),
        )
        .build()
        .unwrap()
}

/// Commands `node` has run, script-internal ones included (as Redis counts
/// them), and the INFO that reads the count.
async fn commands_run(node: &RedisNode) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(&mut conn(node).await)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("total_commands_processed")
}

/// Waits until `node` queues `n` waiters for `key`, at most 5 s.
async fn queued(node: &RedisNode, key: &str, n: u64) {
    for _ in 0..250 {
        if queue_len(node, key).await == n {
            return;
        }
        tokio::time::sleep(20 * MS).await;
    }
    panic!("{} waiters queued, not {n}", queue_len(node, key).await);
}

/// Starts `count` waiters on `resource`, each a Locker of its own built by
/// `build`, one after the other: each has queued on `node` before the
/// next asks. Each holds the lock 5 ms, then releases it and ends (its
/// Locker with it). Returns their tasks and the order they got the lock.
async fn queue_up(
    count: usize,
    build: impl Fn() -> Locker,
    resource: &'static str,
    node: &RedisNode,
    key: &str,
) -> (Vec<tokio::task::JoinHandle<()>>, Arc<Mutex<Vec<usize>>>) {
    queue_up_in(count, build, |_| true, resource, node, key).await
}

/// [`queue_up`], where only the arrivals `in_line` says go in line on the
/// servers at once: the others are tasks of a Locker whose earlier task
/// waits already, and wait behind it in their process (given a moment to
/// get there before the next arrival).
async fn queue_up_in(
    count: usize,
    build: impl Fn() -> Locker,
    in_line: impl Fn(usize) -> bool,
    resource: &'static str,
    node: &RedisNode,
    key: &str,
) -> (Vec<tokio::task::JoinHandle<()>>, Arc<Mutex<Vec<usize>>>) {
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    let mut lined_up = 0;
    for arrival in 0..count {
        let (locker, served) = (build(), served.clone());
        tasks.push(tokio::spawn(async move {
            let lease = locker.lock(resource).await.expect("served in turn");
            served.lock().unwrap().push(arrival);
            tokio::time::sleep(5 * MS).await;
            lease.release().await.unwrap();
        }));
        match in_line(arrival) {
            true => {
                lined_up += 1;
                queued(node, key, lined_up).await;
            }
            false => tokio::time::sleep(100 * MS).await,
        }
    }
    (tasks, served)
}

async fn all_done(tasks: Vec<tokio::task::JoinHandle<()>>, limit: Duration) {
    for task in tasks {
        tokio::time::timeout(limit, task)
            .await
            .expect("every waiter is served")
            .unwrap();
    }
}

/// Twenty processes queue for a held lock; released, it passes from each
/// to the next in arrival order, each handoff costing at most 12 commands
/// on the node in all (the release that hands it on, and the acquire that
/// takes it; two of them tell the name's watchers): draining the queue
/// costs O(N), not a retry per waiter per release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_processes_are_served_in_arrival_order_at_constant_cost() {
    const WAITERS: usize = 20;
    let nodes = RedisNodes::start(1);
    let node = nodes.node(0);
    let holder = process(nodes.urls());
    let key = holder.admin().key("job");
    let lease = holder.lock("job").await.unwrap();
    let (tasks, served) = queue_up(WAITERS, || process(nodes.urls()), "job", node, &key).await;

    let before = commands_run(node).await;
    let released = Instant::now();
    lease.release().await.unwrap();
    all_done(tasks, Duration::from_secs(20)).await;
    let took = released.elapsed();
    let per_handoff = (commands_run(node).await - before) as f64 / WAITERS as f64;
    let order = served.lock().unwrap().clone();
    println!("{WAITERS} handoffs in {took:?}, {per_handoff:.1} commands each");
    assert_eq!(order, (0..WAITERS).collect::<Vec<_>>(), "served in turn");
    assert!(per_handoff <= 12.0, "{per_handoff:.1} commands per handoff");
    // Each woken by its handoff: one 5 s timer would take longer.
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert_eq!(queue_len(node, &key).await, 0);
}

/// Tasks of one Locker and other Lockers queue together: the lock goes
/// round in arrival order across them. The Locker's later tasks wait in
/// their process behind its first, and each release of the Locker puts
/// its next task in line on the servers at its arrival, where others
/// wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_one_locker_take_their_turn_among_processes() {
    let nodes = RedisNodes::start(1);
    let node = nodes.node(0);
    let holder = process(nodes.urls());
    let key = holder.admin().key("job");
    let lease = holder.lock("job").await.unwrap();
    let shared = process(nodes.urls());
    // Arrivals 0, 2, 4 are tasks of one Locker; 1, 3, 5 Lockers of their
    // own.
    let arrival = std::sync::atomic::AtomicUsize::new(0);
    let build = || match arrival.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 2 {
        0 => shared.clone(),
        _ => process(nodes.urls()),
    };
    let in_line = |arrival: usize| arrival == 0 || arrival % 2 == 1;
    let (tasks, served) = queue_up_in(6, build, in_line, "job", node, &key).await;
    lease.release().await.unwrap();
    all_done(tasks, Duration::from_secs(10)).await;
    assert_eq!(*served.lock().unwrap(), [0, 1, 2, 3, 4, 5]);
}

/// Tasks of one Locker that lock, work a moment and release in a loop, on
/// two and on three nodes: the lock keeps going round, each waiter handed
/// it in turn on every node (a handoff that reaches a waiter from one node
/// first wakes it, and one that finds the others still held keeps its
/// place), never two holders at once, and no wait runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_one_locker_keep_the_lock_going_round_on_a_quorum() {
    for n in [2, 3] {
        let nodes = RedisNodes::start(n);
        let locker = Locker::builder(nodes.urls())
            .advanced(|a| a.restart_quarantine(Duration::ZERO))
            .ttl(Duration::from_secs(5))
            .retry(RetryPolicy::within(Duration::from_secs(10)))
            .build()
            .unwrap();
        let inside = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut workers = Vec::new();
        for _ in 0..4 {
            let (locker, inside) = (locker.clone(), inside.clone());
            workers.push(tokio::spawn(async move {
                for _ in 0..25 {
                    let lease = locker.lock("counter").await.expect("no wait runs out");
                    let was = inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    assert_eq!(was, 0, "two holders at once");
                    tokio::time::sleep(MS).await;
                    inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    lease.release().await.unwrap();
                }
            }));
        }
        let started = Instant::now();
        all_done(workers, Duration::from_secs(60)).await;
        println!(
            "{n} nodes: 100 critical sections in {:?}",
            started.elapsed()
        );
    }
}

/// A waiter that stops waiting (out of time, or its future dropped)
/// leaves no place behind, and the lock still goes to the next in line.
#[tokio::test]
async fn a_waiter_that_gives_up_leaves_no_place() {
    let nodes = RedisNodes::start(1);
    let node = nodes.node(0);
    let holder = process(nodes.urls());
    let key = holder.admin().key("job");
    let lease = holder.lock("job").await.unwrap();

    let impatient = process(nodes.urls());
    let timed_out =
        tokio::spawn(async move { impatient.lock("job").wait(Duration::from_millis(400)).await });
    queued(node, &key, 1).await;
    let dropped = tokio::spawn({
        let locker = process(nodes.urls());
        async move { locker.lock("job").await }
    });
    queued(node, &key, 2).await;
    let patient = spawn_lock(process(nodes.urls()), "job");
    queued(node, &key, 3).await;

    assert!(matches!(
        timed_out.await.unwrap(),
        Err(Error::WaitTimeout { .. })
    ));
    dropped.abort();
    assert!(dropped.await.unwrap_err().is_cancelled());
    queued(node, &key, 1).await;

    let released = Instant::now();
    lease.release().await.unwrap();
    let (acquired, got) = tokio::time::timeout(Duration::from_secs(5), patient)
        .await
        .unwrap()
        .unwrap();
    got.unwrap().release().await.unwrap();
    assert!(acquired - released < Duration::from_secs(2));
    assert_eq!(queue_len(node, &key).await, 0);
}

/// A place whose process ended (no connection listens on its channel:
/// a killed process's is closed at once) is passed over by the release
/// itself, and one whose Locker still listens but whose waiter left is
/// passed on by that Locker: either way the next waiter gets the lock
/// at once, not when its timer runs out.
#[tokio::test]
async fn a_gone_waiter_is_passed_over_at_once() {
    let nodes = RedisNodes::start(1);
    let node = nodes.node(0);
    let holder = process(nodes.urls());
    let key = holder.admin().key("job");
    let lease = holder.lock("job").await.unwrap();
    let listening = process(nodes.urls());
    let waiter = spawn_lock(listening.clone(), "job");
    queued(node, &key, 1).await;
    // The real waiter's Locker's tag, from its channel.
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg(format!("{key}:released:*"))
        .query_async(&mut conn(node).await)
        .await
        .unwrap();
    let tag = channels[0].rsplit(':').next().unwrap().to_string();
    // In front of it: a waiter of a process that ended, and a waiter of
    // the listening Locker that is no longer there.
    let dead = "00000000000000ff:1:250:w";
    let left = format!("{tag}:999999:250:w");
    for (score, place) in [("1", dead), ("2", left.as_str())] {
        command(node, &["ZADD", &format!("{key}:queue"), score, place]).await;
    }

    let released = Instant::now();
    lease.release().await.unwrap();
    let (acquired, got) = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    got.unwrap().release().await.unwrap();
    let gap = acquired - released;
    assert!(gap < Duration::from_secs(1), "handed on after {gap:?}");
    assert_eq!(queue_len(node, &key).await, 0);
}

/// Over three nodes with one down, the two left hand the lock to the same
/// waiter each time (their queues agree: each waiter's ticket is the same
/// number on every node), and waiters are served in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_with_a_node_down_serves_in_turn() {
    let mut nodes = RedisNodes::start(3);
    nodes.node_mut(2).kill();
    let holder = process(nodes.urls());
    let key = holder.admin().key("job");
    let lease = holder.lock("job").await.unwrap();
    let (tasks, served) = queue_up(8, || process(nodes.urls()), "job", nodes.node(0), &key).await;
    queued(nodes.node(1), &key, 8).await;
    let released = Instant::now();
    lease.release().await.unwrap();
    all_done(tasks, Duration::from_secs(20)).await;
    assert_eq!(*served.lock().unwrap(), (0..8).collect::<Vec<_>>());
    assert!(released.elapsed() < Duration::from_secs(5));
    for i in 0..2 {
        // Each waiter left the other node's queue too.
        queued(nodes.node(i), &key, 0).await;
    }
}

/// On a Redis Cluster the queue lives in the lock's slot, the handoff
/// goes by sharded pub/sub, and waiters are served in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_serves_in_turn() {
    let cluster = RedisCluster::start(3);
    let url = vec![crate::cluster::cluster_url(&cluster)];
    let holder = process(url.clone());
    let key = holder.admin().key("job");
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(&key)
        .query_async(&mut conn(cluster.node(0)).await)
        .await
        .unwrap();
    let owner = cluster.owner_of(slot);
    let lease = holder.lock("job").await.unwrap();
    let (tasks, served) = queue_up(6, || process(url.clone()), "job", owner, &key).await;
    lease.release().await.unwrap();
    all_done(tasks, Duration::from_secs(10)).await;
    assert_eq!(*served.lock().unwrap(), (0..6).collect::<Vec<_>>());
}
