//! Fencing tokens only go up across expiry of idle fencing state, and the
//! example's fenced store turns away a holder that stalled past its lease.
//! (Tokens under contention and node restarts: the stress tests.)

use std::time::Duration;

use redlease::{Locker, RetryPolicy};
use redlease_testkit::{RedisNode, RedisNodes};

use crate::fenced_store::{late_writer, FencedStore};
use crate::support::*;

fn fencing_locker(nodes: &RedisNodes) -> Locker {
    Locker::builder(nodes.urls())
        .restart_quarantine(std::time::Duration::ZERO)
        .ttl(Duration::from_secs(5))
        .node_timeout(Duration::from_secs(1))
        .fence_expiry(Duration::from_secs(1))
        .retry(
            RetryPolicy::new()
                .wait(Duration::from_secs(60))
                .delay(MS, 5 * MS),
        )
        .build()
        .unwrap()
}

async fn tokens_increase_across_idle_expiry(n: usize) {
    let nodes = RedisNodes::start(n);
    let locker = fencing_locker(&nodes);
    let fence = format!("{}:fence", locker.key("job"));
    let mut last = 0;
    for round in 0..2 {
        let lease = locker.try_lock("job").await.unwrap();
        assert!(
            lease.fencing_token() > last,
            "round {round}: {} after {last}",
            lease.fencing_token()
        );
        last = lease.fencing_token();
        lease.release().await.unwrap();
        assert!(values(&nodes, &fence).await.iter().all(Option::is_some));
        // Idle for longer than the 1 s fence expiry: the counters vanish.
        tokio::time::sleep(Duration::from_millis(1_300)).await;
        assert_eq!(
            values(&nodes, &fence).await,
            vec![None; n],
            "idle fencing state expired"
        );
    }
    let lease = locker.try_lock("job").await.unwrap();
    assert!(
        lease.fencing_token() > last,
        "{} after {last}",
        lease.fencing_token()
    );
    lease.release().await.unwrap();
}

#[tokio::test]
async fn one_node_tokens_increase_across_idle_expiry() {
    tokens_increase_across_idle_expiry(1).await;
}

#[tokio::test]
async fn five_nodes_tokens_increase_across_idle_expiry() {
    tokens_increase_across_idle_expiry(5).await;
}

/// The fencing example's scenario: with tokens the stalled holder's write is
/// turned away; without them the other holder's update is lost.
#[tokio::test]
async fn the_fenced_store_rejects_a_stalled_holder() {
    let nodes = RedisNodes::start(3);
    let data = RedisNode::start();
    let locker = Locker::builder(nodes.urls())
        .restart_quarantine(std::time::Duration::ZERO)
        .ttl(Duration::from_millis(300))
        .node_timeout(30 * MS)
        .build()
        .unwrap();
    let stall = Duration::from_millis(500);

    let mut fenced = FencedStore::new(conn(&data).await, "ledger:fenced");
    let (value, accepted) = late_writer(&locker, &mut fenced, true, stall)
        .await
        .unwrap();
    assert!(!accepted, "the late write got through");
    assert_eq!(value, "B");

    let mut plain = FencedStore::new(conn(&data).await, "ledger:plain");
    let (value, accepted) = late_writer(&locker, &mut plain, false, stall)
        .await
        .unwrap();
    assert!(accepted);
    assert_eq!(value, "A", "without fencing B's update is lost");
}
