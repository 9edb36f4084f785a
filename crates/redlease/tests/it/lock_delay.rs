//! Lock-delay (`LockerBuilder::lock_delay`): a lease that ends without a
//! release keeps its names from the next holder until the delay after it
//! expired; a clean release frees them at once.

use std::time::{Duration, Instant};

use redlease::{Error, Locker, RetryPolicy, MAX_TTL};
use redlease_testkit::cluster::RedisCluster;
use redlease_testkit::RedisNodes;

use crate::support::{pttl, MS};

const TTL: Duration = Duration::from_millis(600);
const DELAY: Duration = Duration::from_millis(1_200);

/// A Locker over `nodes` whose leases last `TTL`, with lock-delay `delay`.
fn delayed(nodes: &RedisNodes, delay: Duration) -> Locker {
    delayed_at(nodes.urls(), delay)
}

fn delayed_at(urls: Vec<String>, delay: Duration) -> Locker {
    Locker::builder(urls)
        .advanced(|a| a.restart_quarantine(Duration::ZERO)) // brand-new test servers
        .ttl(TTL)
        .node_timeout(100 * MS)
        .lock_delay(delay)
        .retry(RetryPolicy::within(Duration::from_secs(10)).delay(MS, 5 * MS))
        .build()
        .expect("valid test settings")
}

/// The PTTL of `key` on every node, in ms.
async fn pttls(nodes: &RedisNodes, key: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for node in nodes.iter() {
        out.push(pttl(node, key).await);
    }
    out
}

async fn lost(lease: &redlease::Lease) {
    tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .expect("a lease not kept alive is lost within its TTL");
}

/// Once `lease` (taken at `start`) is lost and dropped without a
/// release: `try_now` is refused, and `wait` gets the names no sooner
/// than the TTL and the lock-delay after `start`.
async fn kept_for_the_delay(
    start: Instant,
    lease: redlease::Lease,
    try_now: impl std::future::IntoFuture<Output = Result<redlease::Lease, Error>>,
    wait: impl std::future::IntoFuture<Output = Result<redlease::Lease, Error>>,
) {
    lost(&lease).await;
    drop(lease);
    match try_now.await {
        Err(Error::Taken { .. }) => {}
        other => panic!("granted during the lock-delay: {other:?}"),
    }
    let next = wait.await.unwrap();
    let waited = start.elapsed();
    assert!(
        waited >= TTL + DELAY - 10 * MS,
        "granted {waited:?} after the first acquire, within its TTL and lock-delay"
    );
    next.release().await.unwrap();
}

#[tokio::test]
async fn a_lease_lost_without_a_release_keeps_its_name_for_the_delay() {
    let nodes = RedisNodes::start(3);
    let (holder, other) = (delayed(&nodes, DELAY), delayed(&nodes, Duration::ZERO));
    let key = holder.admin().key("job");
    let start = Instant::now();
    let lease = holder.lock("job").await.unwrap();
    // The servers keep the hold the delay past the lease's TTL.
    let left = pttls(&nodes, &key).await;
    assert!(
        left.iter().all(|&ms| ms > TTL.as_millis() as i64),
        "{left:?}"
    );

    // Its holder gone without a release: nobody else has it yet.
    kept_for_the_delay(start, lease, other.try_lock("job"), other.lock("job")).await;
}

#[tokio::test]
async fn a_clean_release_frees_the_name_at_once() {
    let nodes = RedisNodes::start(3);
    let (holder, other) = (delayed(&nodes, DELAY), delayed(&nodes, DELAY));
    let lease = holder.lock("job").await.unwrap();
    lease.release().await.unwrap();
    let next = other.try_lock("job").await.expect("released: free at once");
    next.release().await.unwrap();
    // Several names and shared holds too.
    let set = holder.lock_all(["a", "b"]).await.unwrap();
    set.release().await.unwrap();
    let reader = holder.read_lock("a").await.unwrap();
    reader.release().await.unwrap();
    let writer = other
        .try_lock_all(["a", "b"])
        .await
        .expect("released: free at once");
    writer.release().await.unwrap();
}

#[tokio::test]
async fn releasing_a_lost_lease_leaves_its_holds_for_the_delay() {
    let nodes = RedisNodes::start(3);
    let holder = delayed(&nodes, DELAY);
    let key = holder.admin().key("job");
    let lease = holder.lock("job").await.unwrap();
    lost(&lease).await;
    match lease.release().await {
        Err(Error::NotHeld { expired: true, .. }) => {}
        other => panic!("a lost lease released: {other:?}"),
    }
    let left = pttls(&nodes, &key).await;
    assert!(left.iter().all(|&ms| ms > 0), "given back: {left:?}");
}

#[tokio::test]
async fn renewals_and_extends_keep_the_delay_on_the_servers() {
    let nodes = RedisNodes::start(3);
    let holder = delayed(&nodes, DELAY);
    let key = holder.admin().key("job");
    let mut lease = holder.lock("job").await.unwrap();
    tokio::time::sleep(TTL / 2).await;
    lease.extend(TTL).await.unwrap();
    let left = pttls(&nodes, &key).await;
    assert!(
        left.iter().all(|&ms| ms > TTL.as_millis() as i64),
        "after extend: {left:?}"
    );
    lease.release().await.unwrap();

    // Kept alive: renewed every third of the TTL, past the first TTL.
    let kept = holder.lock("job").keep_alive().await.unwrap();
    tokio::time::sleep(TTL + TTL / 2).await;
    assert!(!kept.is_lost());
    let left = pttls(&nodes, &key).await;
    assert!(
        left.iter().all(|&ms| ms > TTL.as_millis() as i64),
        "after renewals: {left:?}"
    );
    kept.release().await.unwrap();
}

#[tokio::test]
async fn a_lost_reader_keeps_writers_out_for_the_delay() {
    let nodes = RedisNodes::start(1);
    let (holder, other) = (delayed(&nodes, DELAY), delayed(&nodes, Duration::ZERO));
    let start = Instant::now();
    let reader = holder.read_lock("job").await.unwrap();
    kept_for_the_delay(start, reader, other.try_lock("job"), other.lock("job")).await;
}

#[tokio::test]
async fn a_lock_delay_the_settings_cannot_hold_is_refused() {
    let nodes = RedisNodes::start(1);
    // A quarantine that covers the TTL but not the delay.
    let refused = Locker::builder(nodes.urls())
        .ttl(TTL)
        .lock_delay(DELAY)
        .advanced(|a| a.restart_quarantine(2 * TTL))
        .build()
        .unwrap_err();
    match &refused {
        Error::InvalidInput { field, reason, .. } => {
            assert_eq!(*field, "advanced.restart_quarantine");
            assert!(reason.contains("lock-delay"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // Longer than any hold the servers can be told.
    let refused = Locker::builder(nodes.urls())
        .lock_delay(MAX_TTL)
        .build()
        .unwrap_err();
    assert!(
        matches!(
            refused,
            Error::InvalidInput {
                field: "lock_delay",
                ..
            }
        ),
        "{refused:?}"
    );
    // The default quarantine covers both.
    let locker = Locker::builder(nodes.urls())
        .ttl(TTL)
        .lock_delay(DELAY)
        .build();
    assert!(locker.is_ok(), "{locker:?}");
}

#[tokio::test]
async fn on_a_cluster_a_lost_set_keeps_every_slot_for_the_delay() {
    let cluster = RedisCluster::start(3);
    let url = crate::cluster::cluster_url(&cluster);
    let holder = delayed_at(vec![url.clone()], DELAY);
    let other = delayed_at(vec![url], Duration::ZERO);
    let names = ["a", "b", "c", "d"];
    let start = Instant::now();
    let set = holder.lock_all(names).await.unwrap();
    kept_for_the_delay(start, set, other.try_lock_all(names), other.lock_all(names)).await;
}

#[tokio::test]
async fn a_lost_permit_stays_taken_for_the_delay() {
    let nodes = RedisNodes::start(1);
    let (holder, other) = (delayed(&nodes, DELAY), delayed(&nodes, Duration::ZERO));
    let start = Instant::now();
    let permit = holder.semaphore("slots", 1).acquire().await.unwrap();
    let slots = other.semaphore("slots", 1);
    kept_for_the_delay(start, permit, slots.try_acquire(), slots.acquire()).await;
}
