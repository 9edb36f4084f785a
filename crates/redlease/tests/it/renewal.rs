//! Leases that stay alive: automatic renewal, the lost-lease signal, and
//! running work under a lock (`with`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlease::{Error, Locker, LostReason};
use redlease_testkit::RedisNodes;

use crate::support::*;

const TTL: Duration = Duration::from_secs(1);

fn renewing_locker(nodes: &RedisNodes) -> Locker {
    locker_with_timeout(nodes, 50 * MS)
}

async fn renewal_keeps_a_short_lease(n: usize) {
    let nodes = RedisNodes::start(n);
    let locker = renewing_locker(&nodes);
    let other = renewing_locker(&nodes);
    let lease = locker.lock("job").ttl(TTL).keep_alive().await.unwrap();
    // Five TTLs, checking twice per TTL that nobody else can take it.
    for round in 0..10 {
        if round == 5 {
            // Renewal reloads its script after a SCRIPT FLUSH (or restart).
            flush_scripts(&nodes).await;
        }
        tokio::time::sleep(500 * MS).await;
        assert!(!lease.is_lost(), "lost after {:?}", lease.lost_reason());
        assert!(
            lease.remaining() > 300 * MS,
            "renewed well ahead: {:?}",
            lease.remaining()
        );
        assert!(matches!(
            other.try_lock("job").await,
            Err(Error::Taken { .. })
        ));
    }
    assert_eq!(locker.admin().renewal_stats().leases, 1);
    lease.release().await.expect("still ours after 5 s");
    assert_eq!(locker.admin().renewal_stats().leases, 0);
}

#[tokio::test]
async fn one_node_renewal_keeps_a_1s_lease_for_5s() {
    renewal_keeps_a_short_lease(1).await;
}

#[tokio::test]
async fn five_nodes_renewal_keeps_a_1s_lease_for_5s() {
    renewal_keeps_a_short_lease(5).await;
}

#[tokio::test]
async fn losing_the_quorum_fires_the_signal_before_valid_until() {
    let mut nodes = RedisNodes::start(5);
    let locker = renewing_locker(&nodes);
    let lease = locker.lock("job").ttl(TTL).keep_alive().await.unwrap();
    let lost = lease.lost();
    for i in [0, 2, 4] {
        nodes.node_mut(i).kill();
    }
    let killed = Instant::now();
    let why = tokio::time::timeout(2 * TTL, lost)
        .await
        .expect("the signal fires");
    let fired = Instant::now();
    // Killed nodes refuse connections: errors, not silence.
    assert_eq!(why, LostReason::NodeErrors);
    assert!(lease.is_lost());
    assert!(
        fired <= lease.valid_until(),
        "fired {:?} after valid_until",
        fired - lease.valid_until()
    );
    assert!(
        fired - killed <= TTL,
        "fired {:?} after the kill",
        fired - killed
    );
}

#[tokio::test]
async fn a_paused_node_fires_the_signal_and_waking_it_does_not_resurrect() {
    let mut nodes = RedisNodes::start(1);
    let locker = renewing_locker(&nodes);
    let other = renewing_locker(&nodes);
    let lease = locker.lock("job").ttl(TTL).keep_alive().await.unwrap();
    tokio::time::sleep(100 * MS).await;
    nodes.node_mut(0).pause();
    let why = tokio::time::timeout(2 * TTL, lease.lost())
        .await
        .expect("the signal fires");
    let fired = Instant::now();
    assert_eq!(why, LostReason::Expired);
    assert!(fired <= lease.valid_until());
    nodes.node_mut(0).resume();
    tokio::time::sleep(500 * MS).await;
    assert!(lease.is_lost(), "a lost lease stays lost");
    assert_eq!(
        locker.admin().renewal_stats().leases,
        0,
        "and is no longer renewed"
    );
    // The key expired while the node slept: the lock is free for others.
    let taken = other
        .lock("job")
        .wait(2 * TTL)
        .await
        .expect("free after expiry");
    taken.release().await.unwrap();
    assert!(matches!(lease.release().await, Err(Error::NotHeld { .. })));
}

#[tokio::test]
async fn a_refused_renewal_fires_the_signal_at_once() {
    let nodes = RedisNodes::start(1);
    let locker = renewing_locker(&nodes);
    let ttl = 300 * MS;
    let lease = locker.lock("job").ttl(ttl).keep_alive().await.unwrap();
    // Someone deletes the key behind our back (an operator, an eviction).
    command(nodes.node(0), &["DEL", &locker.admin().key("job")]).await;
    let deleted = Instant::now();
    let why = tokio::time::timeout(2 * ttl, lease.lost())
        .await
        .expect("fires");
    assert_eq!(why, LostReason::Refused);
    // At the next renewal, a third of the TTL later at most.
    assert!(
        deleted.elapsed() < ttl / 3 + 100 * MS,
        "{:?}",
        deleted.elapsed()
    );
}

#[tokio::test]
async fn no_renewal_reaches_redis_after_release() {
    let nodes = RedisNodes::start(1);
    let locker = renewing_locker(&nodes);
    let ttl = 300 * MS;
    let lease = locker.lock("job").ttl(ttl).keep_alive().await.unwrap();
    let after_acquire = script_calls(nodes.node(0)).await;
    tokio::time::sleep(350 * MS).await;
    let before_release = script_calls(nodes.node(0)).await;
    assert!(before_release >= after_acquire + 2, "it renewed while held");
    lease.release().await.unwrap();
    // Release does not wait for a batch already on the wire; give one that
    // was sent just before it time to land, then nothing more may come.
    tokio::time::sleep(50 * MS).await;
    let released = script_calls(nodes.node(0)).await;
    tokio::time::sleep(400 * MS).await;
    assert_eq!(
        script_calls(nodes.node(0)).await,
        released,
        "a renewal came after release"
    );
}

#[tokio::test]
async fn a_dropped_lease_stops_renewing() {
    let nodes = RedisNodes::start(1);
    let locker = renewing_locker(&nodes);
    let lease = locker.lock("job").ttl(300 * MS).keep_alive().await.unwrap();
    drop(lease);
    tokio::time::sleep(50 * MS).await;
    let calls = script_calls(nodes.node(0)).await;
    tokio::time::sleep(300 * MS).await;
    assert_eq!(script_calls(nodes.node(0)).await, calls);
    assert_eq!(locker.admin().renewal_stats().leases, 0);
}

#[tokio::test]
async fn with_returns_the_work_and_releases() {
    let nodes = RedisNodes::start(3);
    let locker = renewing_locker(&nodes);
    let key = locker.admin().key("job");
    let out = locker
        .lock("job")
        .with(|lease| async move {
            assert_eq!(lease.resource(), "job");
            tokio::time::sleep(100 * MS).await;
            assert!(!lease.is_lost());
            7
        })
        .await
        .unwrap();
    assert_eq!(out, 7);
    assert_eq!(values(&nodes, &key).await, vec![None; 3]);
}

#[tokio::test]
async fn try_lock_with_runs_the_work_only_when_the_lock_is_free() {
    let nodes = RedisNodes::start(3);
    let locker = renewing_locker(&nodes);
    let key = locker.admin().key("job");
    let ran = Arc::new(AtomicBool::new(false));
    let holder = locker.try_lock("job").await.unwrap();
    let busy = {
        let ran = ran.clone();
        locker
            .try_lock("job")
            .with(|_lease| async move { ran.store(true, Ordering::SeqCst) })
            .await
    };
    assert!(matches!(busy, Err(Error::Taken { .. })), "{busy:?}");
    assert!(!ran.load(Ordering::SeqCst), "no work without the lock");
    holder.release().await.unwrap();
    let out = locker
        .try_lock("job")
        .with(|lease| async move {
            assert!(!lease.is_lost());
            lease.resource().to_string()
        })
        .await
        .unwrap();
    assert_eq!(out, "job");
    assert_eq!(values(&nodes, &key).await, vec![None; 3], "released");
}

#[tokio::test]
async fn with_drops_the_work_when_the_lease_is_lost() {
    let nodes = RedisNodes::start(1);
    let locker = renewing_locker(&nodes);
    let key = locker.admin().key("job");
    let finished = Arc::new(AtomicBool::new(false));
    let node = nodes.node(0).client();
    let started = Instant::now();
    let result = {
        let finished = finished.clone();
        locker
            .lock("job")
            .ttl(300 * MS)
            .with(|_lease| async move {
                // Another party removes the lock; the work must stop.
                let mut c = node.get_multiplexed_async_connection().await.unwrap();
                let _: () = redis::cmd("DEL")
                    .arg(&key)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_secs(5)).await;
                finished.store(true, Ordering::SeqCst);
            })
            .await
    };
    assert!(
        matches!(
            result,
            Err(Error::Lost {
                why: LostReason::Refused,
                ..
            })
        ),
        "{result:?}"
    );
    assert!(
        !finished.load(Ordering::SeqCst),
        "the work went on unprotected"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

/// A lease that a quorum holds is not lost because one node no longer
/// does. Node 2 answers through a 100 ms delay each way, so its "yes" to
/// the acquire comes after the quorum of nodes 0 and 1 decided it, and its
/// renewals are confirmed well after the others'. Another client
/// overwrites the key on node 0 only: node 0's refusal of each renewal
/// comes first, while nodes 1 and 2 still hold our token. (Before, that
/// refusal alone ended the lease as `Refused`: node 2's late yes was not
/// counted, and one node known to hold it was taken for no quorum.)
#[tokio::test]
async fn one_overwritten_node_and_a_late_yes_do_not_lose_a_quorums_lease() {
    use redlease_testkit::proxy::{Mode, Proxy};
    let nodes = RedisNodes::start(3);
    let slow = Proxy::start(&nodes.node(2).addr());
    slow.set(Mode::Delay {
        fixed: 100 * MS,
        jitter: Duration::ZERO,
    });
    let urls = vec![nodes.node(0).url(), nodes.node(1).url(), slow.url()];
    let locker = Locker::builder(urls)
        .advanced(|a| a.restart_quarantine(Duration::ZERO))
        .node_timeout(400 * MS)
        .connect_timeout(2 * NODE_TIMEOUT)
        .build()
        .unwrap();
    // Every connection up first: a node never reached yet is heard out
    // before a grant, and its yes would not come late.
    locker.admin().check_servers().await.unwrap();
    warm_up(&locker).await;
    let key = locker.admin().key("job");
    let ttl = 1_500 * MS;
    let lease = locker.lock("job").ttl(ttl).keep_alive().await.unwrap();
    set_px(nodes.node(0), &key, "someone-else", 60_000).await;
    // Four TTLs: a dozen renewals, each refused first by node 0.
    for round in 0..12 {
        tokio::time::sleep(500 * MS).await;
        assert!(
            !lease.is_lost(),
            "round {round}: lost ({:?}) while Redis holds {:?}",
            lease.lost_reason(),
            values(&nodes, &key).await
        );
    }
    let held = values(&nodes, &key).await;
    assert_eq!(held[0].as_deref(), Some("someone-else"));
    let ours = held[1].clone().expect("node 1 holds the key");
    assert_eq!(held[2].as_ref(), Some(&ours), "a quorum holds one token");
    assert!(
        ours.bytes().take(48).all(|b| b.is_ascii_hexdigit()) && ours[48..].starts_with('\t'),
        "our token, then our owner: {ours:?}"
    );
    for i in [1, 2] {
        let left = pttl(nodes.node(i), &key).await;
        assert!(left > 500, "node {i} renewed lately: PTTL {left}");
    }
    assert!(lease.remaining() > 500 * MS, "{:?}", lease.remaining());
    lease.release().await.expect("a quorum holds it");
}
