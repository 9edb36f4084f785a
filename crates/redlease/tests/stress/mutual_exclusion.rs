//! Many tasks, one lock: a non-atomic read-modify-write under the lock must
//! never lose an update.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redlease_testkit::{RedisNode, RedisNodes};

use crate::support::*;

const TASKS: usize = 8;
const ITERATIONS: usize = 200;

/// GET, pause, SET n+1: loses updates whenever two tasks interleave.
async fn increment(db: &mut MultiplexedConnection) {
    let n: Option<i64> = redis::cmd("GET")
        .arg("counter")
        .query_async(db)
        .await
        .unwrap();
    // Widen the race window: without the lock, updates get lost.
    tokio::time::sleep(Duration::from_micros(50)).await;
    let _: () = redis::cmd("SET")
        .arg("counter")
        .arg(n.unwrap_or(0) + 1)
        .query_async(db)
        .await
        .unwrap();
}

async fn counter(data: &RedisNode) -> i64 {
    get(data, "counter").await.map_or(0, |v| v.parse().unwrap())
}

async fn no_lost_updates(nodes: usize) {
    let lock_nodes = RedisNodes::start(nodes);
    // The counter lives on a node of its own that no lock touches.
    let data = RedisNode::start();
    let locker = locker(&lock_nodes);

    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let locker = locker.clone();
        let mut db = conn(&data).await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..ITERATIONS {
                let lease = locker.lock("counter").await.expect("lock");
                increment(&mut db).await;
                assert!(
                    lease.remaining() > Duration::ZERO,
                    "critical section outlived the lease"
                );
                lease.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("tasks finish in time")
            .expect("task did not panic");
    }
    assert_eq!(
        counter(&data).await,
        (TASKS * ITERATIONS) as i64,
        "lost updates"
    );
    let key = locker.admin().key("counter");
    assert_eq!(
        values(&lock_nodes, &key).await,
        vec![None; nodes],
        "a lock key was left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_loses_no_update() {
    no_lost_updates(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_lose_no_update() {
    no_lost_updates(5).await;
}

/// The same workload without the lock does lose updates: the tests above
/// can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lock_updates_are_lost() {
    let data = RedisNode::start();
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let mut db = conn(&data).await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..50 {
                increment(&mut db).await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let n = counter(&data).await;
    assert!(n < (TASKS * 50) as i64, "expected lost updates, got {n}");
}
