//! A Sentinel-managed primary as a node (`redis+sentinel://`): the lock
//! cycle through the primary the sentinels name, and a failover while a
//! lease is held and renewed.

use std::time::{Duration, Instant};

use redlease::{Durability, Error, Locker};
use redlease_testkit::sentinel::{SentinelSet, PRIMARY_NAME};
use redlease_testkit::RedisNode;

use crate::support::*;

/// `redis+sentinel://` over every sentinel of `set`.
pub fn sentinel_url(set: &SentinelSet) -> String {
    let hosts: Vec<String> = set
        .sentinel_urls()
        .iter()
        .map(|u| u.trim_start_matches("redis://").to_string())
        .collect();
    format!("redis+sentinel://{}/{PRIMARY_NAME}", hosts.join(","))
}

fn sentinel_locker(url: &str, retry_delay: Duration) -> Locker {
    locker_at(url, Duration::from_secs(2), retry_delay)
}

fn primary(set: &SentinelSet) -> &RedisNode {
    set.node_on(set.primary_port()).expect("a data node")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_cycle_runs_through_the_sentinels_primary() {
    let set = SentinelSet::start(1, 3);
    let url = sentinel_url(&set);
    let locker = sentinel_locker(&url, 5 * MS);
    assert!(locker
        .admin()
        .nodes()
        .next()
        .unwrap()
        .to_string()
        .contains("sentinel"));

    let lease = locker.try_lock("job").await.expect("a free lock");
    let key = locker.admin().key("job");
    assert!(
        pttl(primary(&set), &key).await > 0,
        "written on the primary"
    );
    match locker.try_lock("job").await {
        Err(Error::Taken { .. }) => {}
        other => panic!("a held lock is refused, got {other:?}"),
    }

    let waiter_side = sentinel_locker(&url, Duration::from_secs(5));
    let channel = waiter_side.admin().release_channel("job");
    let waiter = tokio::spawn(async move {
        let lease = waiter_side.lock("job").await;
        (Instant::now(), lease, waiter_side)
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while numsub(primary(&set), &channel).await != 1 {
        assert!(Instant::now() < deadline, "the waiter never subscribed");
        tokio::time::sleep(10 * MS).await;
    }
    tokio::time::sleep(100 * MS).await;
    let released = Instant::now();
    lease.release().await.unwrap();
    let (acquired, second, waiter_side) = waiter.await.unwrap();
    let second = second.expect("the waiter gets the lock");
    assert!(
        acquired - released < Duration::from_millis(500),
        "handoff took {:?}; the fallback timer is 5 s",
        acquired - released
    );
    second.release().await.unwrap();
    assert_eq!(pttl(primary(&set), &key).await, -2);
    waiter_side.close().await;
    locker.close().await;
}

/// Waits until the replica finished its first sync: one still syncing
/// would be promoted empty.
async fn await_replica_sync(set: &SentinelSet) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn(set.node(1)).await)
            .await
            .unwrap();
        if info.contains("master_link_status:up") {
            break;
        }
        assert!(Instant::now() < deadline, "the replica never synced");
        tokio::time::sleep(50 * MS).await;
    }
}

async fn sentinel_failover(set: &SentinelSet) {
    let sentinel = redis::Client::open(set.sentinel_urls()[0].as_str()).unwrap();
    let mut con = sentinel.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("SENTINEL")
        .arg("FAILOVER")
        .arg(PRIMARY_NAME)
        .query_async(&mut con)
        .await
        .expect("SENTINEL FAILOVER");
}

/// What a `SENTINEL FAILOVER` did to a Locker holding a kept-alive lease.
struct FailoverReport {
    /// Locks taken after the switch on the deposed primary (lost when it
    /// resyncs from the new one).
    on_deposed: usize,
    /// How long after the switch the first lock landed on the new primary.
    reached_new_after: Duration,
    lease_lost: bool,
}

/// Holds a lease through a failover, then takes locks until one lands on
/// the new primary. Checks that the held lease is never held here while
/// free on the new primary.
async fn failover_while_held(durability: Durability) -> FailoverReport {
    let set = SentinelSet::start(1, 3);
    await_replica_sync(&set).await;
    let url = sentinel_url(&set);
    let locker = Locker::builder([url.as_str()])
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .ttl(Duration::from_secs(2))
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(NODE_TIMEOUT)
        .durability(durability)
        .build()
        .unwrap();
    // The replica may still be syncing: required durability waits for it.
    let started = Instant::now();
    let lease = loop {
        match locker.try_lock("job").keep_alive().await {
            Ok(lease) => break lease,
            Err(e) if started.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(50 * MS).await;
                let _ = e;
            }
            Err(e) => panic!("no lock before the failover: {e}"),
        }
    };
    let key = locker.admin().key("job");
    // Let the key reach the replica before the switch.
    tokio::time::sleep(200 * MS).await;
    let old = set.primary_port();
    sentinel_failover(&set).await;
    let new = set.await_failover(old, Duration::from_secs(30));
    let switched = Instant::now();

    // Until the old primary is told to follow the new one, it still takes
    // writes: locks taken there are lost when it resyncs.
    let new_primary = set.node_on(new).unwrap();
    let deadline = switched + Duration::from_secs(30);
    let mut on_deposed = 0;
    for i in 0.. {
        let name = format!("other:{i}");
        if let Ok(other) = locker.try_lock(&name).await {
            let landed = pttl(new_primary, &locker.admin().key(&name)).await > 0;
            // One taken on the deposed primary may be gone already.
            let _ = other.release().await;
            if landed {
                break;
            }
            on_deposed += 1;
        }
        assert!(Instant::now() < deadline, "never reached the new primary");
        tokio::time::sleep(20 * MS).await;
    }
    let reached_new_after = switched.elapsed();

    // Two TTLs later: the held lease is renewed on the new primary, or
    // reported lost; never held here while free there.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let lease_lost = lease.is_lost();
    if lease_lost {
        eprintln!("the held lease was lost: {:?}", lease.lost_reason());
    }
    if !lease_lost {
        let left = pttl(new_primary, &key).await;
        assert!(left > 0, "held here, but the new primary has {left} ms");
        let rival = sentinel_locker(&url, 5 * MS);
        assert!(
            matches!(rival.try_lock("job").await, Err(Error::Taken { .. })),
            "nobody else gets it"
        );
        rival.close().await;
    }
    let _ = lease.release().await;
    locker.close().await;
    let report = FailoverReport {
        on_deposed,
        reached_new_after,
        lease_lost,
    };
    eprintln!(
        "{durability:?}: {} lock(s) taken on the deposed primary, the new one reached after {:?}, \
         held lease lost: {}",
        report.on_deposed, report.reached_new_after, report.lease_lost
    );
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_held_through_a_failover_moves_to_the_new_primary_or_is_lost() {
    let report = failover_while_held(Durability::off()).await;
    assert!(report.reached_new_after < Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_required_durability_no_lock_is_taken_on_a_deposed_primary() {
    let report = failover_while_held(Durability::required(1, Duration::from_millis(100))).await;
    assert_eq!(
        report.on_deposed, 0,
        "a deposed primary has no replica left to acknowledge"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_follows_the_primary_through_a_failover() {
    let set = SentinelSet::start(1, 3);
    await_replica_sync(&set).await;
    let url = sentinel_url(&set);
    let holder = Locker::builder([url.as_str()])
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .ttl(Duration::from_secs(10))
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(NODE_TIMEOUT)
        .build()
        .unwrap();
    let lease = holder.try_lock("job").keep_alive().await.unwrap();
    // Subscribed on the old primary, with a 5 s fallback timer.
    let waiter_side = sentinel_locker(&url, Duration::from_secs(5));
    let waiter = tokio::spawn(async move {
        let lease = waiter_side.lock("job").await;
        (Instant::now(), lease, waiter_side)
    });
    let channel = holder.admin().release_channel("job");
    let deadline = Instant::now() + Duration::from_secs(5);
    while numsub(primary(&set), &channel).await != 1 {
        assert!(Instant::now() < deadline, "the waiter never subscribed");
        tokio::time::sleep(10 * MS).await;
    }
    let old = set.primary_port();
    sentinel_failover(&set).await;
    let new = set.await_failover(old, Duration::from_secs(30));
    let new_primary = set.node_on(new).unwrap();
    // The waiter's subscription moves to the new primary.
    let deadline = Instant::now() + Duration::from_secs(5);
    while numsub(new_primary, &channel).await != 1 {
        assert!(
            Instant::now() < deadline,
            "the waiter never subscribed on the new primary"
        );
        tokio::time::sleep(10 * MS).await;
    }
    // The holder's lease lives on there (its key had reached the replica);
    // its release is published there and wakes the waiter.
    assert!(pttl(new_primary, &holder.admin().key("job")).await > 0);
    let released = Instant::now();
    lease.release().await.unwrap();
    let (acquired, second, waiter_side) = waiter.await.unwrap();
    second
        .expect("the waiter gets the lock")
        .release()
        .await
        .unwrap();
    assert!(
        acquired - released < Duration::from_secs(2),
        "woken {:?} after the release; its timer is 5 s",
        acquired - released
    );
    waiter_side.close().await;
    holder.close().await;
}
