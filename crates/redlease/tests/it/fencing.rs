//! Fencing tokens only go up across expiry of idle fencing state, and the
//! example's fenced store turns away a holder that stalled past its lease.
//! Fencing is opt-in: without it no counter is kept, and a fence expiry is
//! refused. (Tokens under contention and node restarts: the stress tests.)

use std::time::Duration;

use redlease::{Error, Locker, RetryPolicy};
use redlease_testkit::{RedisNode, RedisNodes};

use crate::fenced_store::{late_writer, FencedStore};
use crate::support::*;

fn fencing_locker(nodes: &RedisNodes) -> Locker {
    Locker::builder(nodes.urls())
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .ttl(Duration::from_secs(5))
        .node_timeout(Duration::from_secs(1))
        .fencing(true)
        .advanced(|a| a.fence_expiry(Duration::from_secs(1)))
        .retry(RetryPolicy::within(Duration::from_secs(60)).delay(MS, 5 * MS))
        .build()
        .unwrap()
}

async fn tokens_increase_across_idle_expiry(n: usize) {
    let nodes = RedisNodes::start(n);
    let locker = fencing_locker(&nodes);
    let fence = format!("{}:fence", locker.admin().key("job"));
    let mut last = 0;
    for round in 0..2 {
        let lease = locker.try_lock("job").await.unwrap();
        let drawn = token(&lease);
        assert!(drawn > last, "round {round}: {drawn} after {last}");
        last = drawn;
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
    let drawn = token(&lease);
    assert!(drawn > last, "{drawn} after {last}");
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

/// The server's clock (`TIME`) in microseconds, and its uptime in whole
/// seconds (`INFO server`), read together.
async fn clock_and_uptime(node: &RedisNode) -> (u64, u64) {
    let mut c = conn(node).await;
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut c).await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut c)
        .await
        .unwrap();
    let up = info
        .lines()
        .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("INFO server has the uptime");
    (secs * 1_000_000 + micros, up)
}

/// Where a missing counter restarts (`restart_value` in acquire.lua): on a
/// server up less than a second, the clock whole, so that a server that
/// restarted empty within 100 ms of making the counter it lost does not
/// repeat that counter's tokens (the model checker's finding: see
/// docs/safety.md); on a server up a second or more, the clock cut to
/// 100 ms, so that the nodes' new counters agree.
#[tokio::test]
async fn a_missing_counter_restarts_from_the_whole_clock_on_a_young_server() {
    let nodes = RedisNodes::start(1);
    let node = nodes.iter().next().unwrap();
    let locker = fencing_locker(&nodes);
    let (before, _) = clock_and_uptime(node).await;
    let lease = locker.try_lock("young").await.unwrap();
    let (after, up) = clock_and_uptime(node).await;
    let drawn = token(&lease);
    lease.release().await.unwrap();
    if up == 0 {
        // (The rule before: the clock cut to 100 ms, below `before`
        // unless that fell on a 100 ms mark.)
        assert!(
            (before..=after).contains(&drawn),
            "a young server's counter restarts from its whole clock: {drawn} not in \
             [{before}, {after}]"
        );
    } else {
        // A slow start: the server was already up a second.
        assert_eq!(drawn % 100_000, 0, "{drawn}");
    }
    // Up a second: a new name's counter starts cut to 100 ms.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let (before, up) = clock_and_uptime(node).await;
    assert!(up >= 1, "uptime {up} s after 1.1 s");
    let lease = locker.try_lock("grown").await.unwrap();
    let (after, _) = clock_and_uptime(node).await;
    let drawn = token(&lease);
    lease.release().await.unwrap();
    assert_eq!(drawn % 100_000, 0, "cut to 100 ms: {drawn}");
    assert!(
        drawn <= after && drawn + 100_000 > before,
        "{drawn} is not the clock cut to 100 ms (between {before} and {after})"
    );
}

/// The fencing example's scenario: with tokens the stalled holder's write is
/// turned away; without them the other holder's update is lost.
#[tokio::test]
async fn the_fenced_store_rejects_a_stalled_holder() {
    let nodes = RedisNodes::start(3);
    let data = RedisNode::start();
    let locker = Locker::builder(nodes.urls())
        .fencing(true)
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
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

/// Fencing off (the default): the plain acquire draws no token and leaves
/// no counter behind, while the lock itself works as ever.
#[tokio::test]
async fn without_fencing_no_counter_is_kept() {
    let nodes = RedisNodes::start(3);
    let locker = locker(&nodes);
    let (key, fence) = (locker.admin().key("job"), locker.admin().fence_key("job"));

    let lease = locker.try_lock("job").await.unwrap();
    assert_eq!(lease.fencing_token(), None, "no token with fencing off");
    assert_eq!(lease.handle().fencing_token(), None);
    // The lease is granted at quorum; the last node's SET may land later.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while values(&nodes, &key).await.iter().any(Option::is_none) {
        assert!(
            std::time::Instant::now() < deadline,
            "the lock key never reached every node"
        );
        tokio::time::sleep(10 * MS).await;
    }
    let status = locker.admin().inspect("job").await.unwrap();
    assert_eq!(status.fencing_counter(), None, "{status:?}");
    lease.release().await.unwrap();
    assert_eq!(
        values_once_gone(&nodes, &key, Duration::from_secs(5)).await,
        vec![None; 3],
        "released"
    );

    for node in nodes.iter() {
        let exists: i64 = redis::cmd("EXISTS")
            .arg(&fence)
            .query_async(&mut conn(node).await)
            .await
            .expect("EXISTS");
        assert_eq!(exists, 0, "{}: no {fence} with fencing off", node.addr());
    }
}

/// A fence expiry with fencing off has no counter to expire: a typed
/// error naming the setting, before any I/O; with fencing on it builds.
#[tokio::test]
async fn fence_expiry_without_fencing_is_refused() {
    let node = RedisNode::start();
    let urls = [node.url()];
    let expiry = Duration::from_secs(60);

    match Locker::builder(urls.clone())
        .advanced(|a| a.fence_expiry(expiry))
        .build()
    {
        Err(Error::InvalidInput { field, reason, .. }) => {
            assert_eq!(field, "advanced.fence_expiry");
            assert!(reason.contains("fencing"), "{reason}");
        }
        other => panic!("expected InvalidInput on fence_expiry, got {other:?}"),
    }
    let locker = Locker::builder(urls)
        .fencing(true)
        .advanced(|a| a.fence_expiry(expiry))
        .build();
    assert!(locker.is_ok(), "{:?}", locker.err());
    assert_eq!(dbsize(&node).await, 0, "nothing was written");
}
