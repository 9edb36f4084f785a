//! A Sentinel-managed primary as a node (`redis+sentinel://`): the lock
//! cycle through the primary the sentinels name, and a failover while a
//! lease is held and renewed.

use std::time::{Duration, Instant};

use redlease::{Error, Locker, RetryPolicy};
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
    Locker::builder([url])
        .ttl(Duration::from_secs(2))
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(NODE_TIMEOUT)
        .retry(
            RetryPolicy::new()
                .wait(Duration::from_secs(20))
                .delay(retry_delay, retry_delay),
        )
        .build()
        .expect("valid test settings")
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
        .nodes()
        .next()
        .unwrap()
        .to_string()
        .contains("sentinel"));

    let lease = locker.try_lock("job").await.expect("a free lock");
    let key = locker.key("job");
    assert!(
        pttl(primary(&set), &key).await > 0,
        "written on the primary"
    );
    match locker.try_lock("job").await {
        Err(Error::Taken { .. }) => {}
        other => panic!("a held lock is refused, got {other:?}"),
    }

    let waiter_side = sentinel_locker(&url, Duration::from_secs(5));
    let channel = waiter_side.release_channel("job");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_held_through_a_failover_moves_to_the_new_primary_or_is_lost() {
    let set = SentinelSet::start(1, 3);
    let url = sentinel_url(&set);
    let locker = sentinel_locker(&url, 5 * MS);
    let lease = locker.try_lock("job").keep_alive().await.unwrap();
    let key = locker.key("job");
    // Let the key reach the replica before the switch.
    tokio::time::sleep(200 * MS).await;
    let old = set.primary_port();
    sentinel_failover(&set).await;
    let new = set.await_failover(old, Duration::from_secs(30));

    // The Locker follows the sentinels to the new primary. Until the old
    // primary is told to follow the new one, it still takes writes: locks
    // taken there are lost when it resyncs (what durability is for).
    let new_primary = set.node_on(new).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut on_deposed = 0;
    for i in 0.. {
        let name = format!("other:{i}");
        let attempt = locker.try_lock(&name).await;
        if i % 20 == 0 {
            eprintln!("{name}: {:?}", attempt.as_ref().map(|l| l.fencing_token()));
        }
        if let Ok(other) = attempt {
            let landed = pttl(new_primary, &locker.key(&name)).await > 0;
            other.release().await.unwrap();
            if landed {
                break;
            }
            on_deposed += 1;
        }
        assert!(Instant::now() < deadline, "never reached the new primary");
        tokio::time::sleep(20 * MS).await;
    }
    eprintln!("{on_deposed} locks were taken on the deposed primary after the switch");

    // Two TTLs after the switch: the held lease is renewed on the new
    // primary, or reported lost; never held here while free there.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let left = pttl(new_primary, &key).await;
    if lease.is_lost() {
        eprintln!(
            "the lease was lost in the failover: {:?}",
            lease.lost_reason()
        );
    } else {
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
}
