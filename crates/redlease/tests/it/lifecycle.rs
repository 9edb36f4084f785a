//! A Locker's life: background work that follows the Locker from runtime to
//! runtime, `close`, and stopping when the last handle goes.

use std::time::{Duration, Instant};

use redlease::{Error, LostReason, RetryPolicy};
use redlease_testkit::RedisNodes;

use crate::support::*;

const TTL: Duration = Duration::from_millis(600);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime")
}

/// A Locker built on one runtime that has ended since keeps leases alive
/// and hears releases on the next one: its renewal and notification tasks
/// start again where they are needed.
#[test]
fn background_work_follows_the_locker_to_a_new_runtime() {
    let nodes = RedisNodes::start(3);
    let first = runtime();
    let locker = first.block_on(async {
        let locker = locker_with_timeout(&nodes, 50 * MS);
        // Start both services on the first runtime.
        let lease = locker.lock("a").ttl(TTL).keep_alive().await.unwrap();
        let waiter = locker.lock("a").wait(Duration::from_millis(200));
        assert!(matches!(waiter.await, Err(Error::WaitTimeout { .. })));
        lease.release().await.unwrap();
        locker
    });
    drop(first); // its tasks are gone

    let second = runtime();
    second.block_on(async {
        let lease = locker.lock("b").ttl(TTL).keep_alive().await.unwrap();
        // Three TTLs: without renewal on this runtime it would be lost.
        tokio::time::sleep(3 * TTL).await;
        assert!(!lease.is_lost(), "lost: {:?}", lease.lost_reason());
        assert!(lease.remaining() > TTL / 3, "{:?}", lease.remaining());

        lease.release().await.unwrap();

        // A waiter is woken by the release, long before its timer would:
        // the holder's key has 10 s left and the waiter's delay is 5 s. The
        // holder is another process (Locker), so the waiter can only hear
        // of the release through its subscription.
        let holder = locker_with_timeout(&nodes, 50 * MS);
        let lease = holder.lock("c").ttl(Duration::from_secs(10)).await.unwrap();
        let other = locker.clone();
        let waiting = tokio::spawn(async move {
            other
                .lock("c")
                .retry(RetryPolicy::default().delay(Duration::from_secs(5), Duration::from_secs(5)))
                .wait(Duration::from_secs(20))
                .await
                .expect("taken after the release")
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released_at = Instant::now();
        lease.release().await.unwrap();
        let next = waiting.await.unwrap();
        let handoff = released_at.elapsed();
        assert!(
            handoff < Duration::from_secs(2),
            "woken by the notification, not its 5 s timer: {handoff:?}"
        );
        next.release().await.unwrap();
    });
}

#[tokio::test]
async fn close_releases_every_lease_and_refuses_new_locks() {
    let nodes = RedisNodes::start(3);
    let locker = locker(&nodes);
    let other = crate::support::locker(&nodes);
    let kept = locker.lock("kept").keep_alive().await.unwrap();
    let plain = locker.lock("plain").await.unwrap();
    let lost = kept.lost();
    let key = locker.admin().key("plain");
    assert_eq!(values(&nodes, &key).await.iter().flatten().count(), 3);

    locker.close().await;

    // Holders hear it at once, and the keys are gone on every node.
    let why = tokio::time::timeout(Duration::from_secs(1), lost)
        .await
        .expect("the lost signal fires at close");
    assert_eq!(why, LostReason::Closed);
    assert_eq!(plain.lost_reason(), Some(LostReason::Closed));
    for name in ["kept", "plain"] {
        assert_eq!(
            values(&nodes, &locker.admin().key(name)).await,
            vec![None, None, None],
            "{name} released on every node"
        );
    }
    assert_eq!(locker.admin().renewal_stats().leases, 0);
    // Another client takes them at once.
    other
        .try_lock("kept")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    // The leases close released cannot be released or extended again, and
    // the Locker (and its clones) take no more locks; nothing is sent.
    assert!(matches!(plain.release().await, Err(Error::Closed)));
    let mut kept = kept;
    assert!(matches!(
        kept.extend(Duration::from_secs(5)).await,
        Err(Error::Closed)
    ));
    assert!(matches!(kept.release().await, Err(Error::Closed)));
    let clone = locker.clone();
    assert!(matches!(clone.try_lock("new").await, Err(Error::Closed)));
    assert_eq!(
        values(&nodes, &locker.admin().key("new")).await,
        vec![None, None, None]
    );
}

#[tokio::test]
async fn close_wakes_waiters_with_closed() {
    let nodes = RedisNodes::start(1);
    let locker = locker(&nodes);
    let held = crate::support::locker(&nodes).lock("busy").await.unwrap();
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            locker
                .lock("busy")
                .retry(
                    RetryPolicy::default().delay(Duration::from_secs(10), Duration::from_secs(10)),
                )
                .wait(Duration::from_secs(30))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = Instant::now();
    locker.close().await;
    let outcome = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the waiter ends at close, not after its 10 s timer")
        .unwrap();
    assert!(matches!(outcome, Err(Error::Closed)), "{outcome:?}");
    assert!(start.elapsed() < Duration::from_secs(2));
    held.release().await.unwrap();
}

/// The clients connected to `node`, other than the one asking.
async fn other_clients(node: &redlease_testkit::RedisNode) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut conn(node).await)
        .await
        .expect("CLIENT LIST");
    list.lines().count().saturating_sub(1)
}

/// With the last Locker handle and lease dropped, the background tasks end
/// at once and close their connections: no task lingers to poll for it.
#[tokio::test]
async fn background_work_stops_when_the_last_handle_is_dropped() {
    let nodes = RedisNodes::start(1);
    let node = nodes.node(0);
    assert_eq!(other_clients(node).await, 0);
    let locker = locker_with_timeout(&nodes, 50 * MS);
    let lease = locker.lock("x").ttl(TTL).keep_alive().await.unwrap();
    // A wait starts the notifier's subscription connection.
    let waited = locker.lock("x").wait(Duration::from_millis(100)).await;
    assert!(matches!(waited, Err(Error::WaitTimeout { .. })));
    tokio::time::sleep(TTL).await; // a renewal on the lane's connection
    let busy = other_clients(node).await;
    assert!(
        busy >= 3,
        "request, renewal and subscription connections: {busy}"
    );

    drop(lease);
    locker.admin().wait_for_background().await; // the dropped lease's release
    drop(locker);
    let start = Instant::now();
    let mut left = busy;
    while left > 0 && start.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = other_clients(node).await;
    }
    assert_eq!(
        left,
        0,
        "connections still open after {:?}",
        start.elapsed()
    );
    assert!(
        start.elapsed() < Duration::from_millis(900),
        "closed promptly, not by a poll: {:?}",
        start.elapsed()
    );
}

/// The clients of `node` once `locker` took and released a lock until two
/// were seen, or 50 times (the express connection opens in the background
/// after the first requests).
async fn clients_after(node: &redlease_testkit::RedisNode, locker: &redlease::Locker) -> usize {
    let mut clients = 0;
    for _ in 0..50 {
        let lease = locker.try_lock("express").await.unwrap();
        lease.release().await.unwrap();
        clients = other_clients(node).await;
        if clients >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    clients
}

/// A Locker holds one connection per single-server node for its requests;
/// with `express_connection(true)`, a lone caller's adds the express one.
#[tokio::test]
async fn the_express_connection_opens_when_turned_on() {
    let nodes = RedisNodes::start(1);
    let node = nodes.node(0);
    let quiet = |express: Option<bool>| {
        redlease::Locker::builder(nodes.urls())
            .advanced(|a| {
                let a = a.restart_quarantine(Duration::ZERO);
                match express {
                    Some(on) => a.express_connection(on),
                    None => a,
                }
            })
            .build()
            .unwrap()
    };
    // The default: off.
    let without = quiet(None);
    assert_eq!(clients_after(node, &without).await, 1);
    drop(without);
    for _ in 0..100 {
        if other_clients(node).await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        other_clients(node).await,
        0,
        "the first Locker's connection"
    );
    let with = quiet(Some(true));
    assert_eq!(clients_after(node, &with).await, 2);
}
