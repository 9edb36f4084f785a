//! Fencing tokens only go up: over 10,000 acquisitions by concurrent tasks,
//! and while a minority of nodes is killed and restarted empty.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redlease::{Locker, RetryPolicy};
use redlease_testkit::RedisNodes;

use crate::support::*;

fn fencing_locker(nodes: &RedisNodes) -> Locker {
    Locker::builder(nodes.urls())
        .fencing(true)
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .ttl(Duration::from_secs(5))
        .node_timeout(Duration::from_secs(1))
        .retry(RetryPolicy::within(Duration::from_secs(60)).delay(MS, 5 * MS))
        .build()
        .unwrap()
}

/// Runs `tasks` x `per_task` acquisitions of one lock and returns the
/// tokens in the order the critical sections ran.
async fn tokens_in_order(
    locker: &Locker,
    tasks: usize,
    per_task: usize,
    done: Arc<AtomicUsize>,
) -> Vec<u64> {
    let seen = Arc::new(Mutex::new(Vec::with_capacity(tasks * per_task)));
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (locker, seen, done) = (locker.clone(), seen.clone(), done.clone());
        handles.push(tokio::spawn(async move {
            for _ in 0..per_task {
                let lease = locker.lock("job").await.expect("lock");
                // Recorded inside the critical section: the order is the
                // order in which the lock was held.
                seen.lock().unwrap().push(token(&lease));
                // Under node faults a release may miss its quorum; the key
                // then expires by its TTL. Tokens are what is checked here.
                if let Err(e) = lease.release().await {
                    eprintln!("release: {e}");
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for handle in handles {
        tokio::time::timeout(Duration::from_secs(120), handle)
            .await
            .expect("finishes in time")
            .expect("no panic");
    }
    seen.lock().unwrap().clone()
}

fn assert_strictly_increasing(tokens: &[u64]) {
    for (i, pair) in tokens.windows(2).enumerate() {
        assert!(
            pair[1] > pair[0],
            "token {} = {} after {}",
            i + 1,
            pair[1],
            pair[0]
        );
    }
}

async fn tokens_increase_under_contention(n: usize) {
    let nodes = RedisNodes::start(n);
    let locker = fencing_locker(&nodes);
    let tokens = tokens_in_order(&locker, 8, 1_250, Arc::new(AtomicUsize::new(0))).await;
    assert_eq!(tokens.len(), 10_000);
    assert_strictly_increasing(&tokens);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_tokens_increase_over_10_000_acquisitions() {
    tokens_increase_under_contention(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_tokens_increase_over_10_000_acquisitions() {
    tokens_increase_under_contention(5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_across_a_minority_restarting_empty() {
    const TOTAL: usize = 8 * 600;
    let mut nodes = RedisNodes::start(5);
    let locker = fencing_locker(&nodes);
    let done = Arc::new(AtomicUsize::new(0));
    let run = {
        let (locker, done) = (locker.clone(), done.clone());
        tokio::spawn(async move { tokens_in_order(&locker, 8, TOTAL / 8, done).await })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let wait_for = |n: usize| {
        let done = done.clone();
        async move {
            while done.load(Ordering::Relaxed) < n && Instant::now() < deadline {
                tokio::time::sleep(MS).await;
            }
        }
    };
    wait_for(TOTAL / 4).await;
    tokio::task::block_in_place(|| {
        nodes.node_mut(1).kill();
        nodes.node_mut(3).kill();
    });
    // Restarted halfway, so the second half (over a second) outlasts the
    // backoff a Locker gives a node that refused connections.
    wait_for(TOTAL / 2).await;
    // Back, empty: no persistence. Their counters restart from the clock.
    tokio::task::block_in_place(|| {
        nodes.node_mut(1).restart();
        nodes.node_mut(3).restart();
    });
    let tokens = run.await.unwrap();
    assert_eq!(tokens.len(), TOTAL);
    assert_strictly_increasing(&tokens);
    let fence = format!("{}:fence", locker.admin().key("job"));
    assert!(
        get(nodes.node(1), &fence).await.is_some(),
        "the restarted node took part again"
    );
}
