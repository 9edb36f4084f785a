//! Renewal at scale: a thousand leases kept alive together.

use std::future::IntoFuture;
use std::time::Duration;

use redlease_testkit::RedisNodes;

use crate::support::*;

const TTL: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_leases_are_renewed_together() {
    const LEASES: usize = 1_000;
    let nodes = RedisNodes::start(5);
    // 100 acquisitions at once on cold connections: give nodes time.
    let locker = locker_with_timeout(&nodes, 200 * MS);
    let mut leases = Vec::with_capacity(LEASES);
    for chunk in (0..LEASES).collect::<Vec<_>>().chunks(100) {
        let batch = futures_util::future::join_all(chunk.iter().map(|i| {
            locker
                .try_lock(format!("job-{i}"))
                .ttl(TTL)
                .keep_alive()
                .into_future()
        }))
        .await;
        leases.extend(batch.into_iter().map(|l| l.expect("free lock")));
    }
    let before = locker.admin().renewal_stats();
    assert_eq!(before.leases, LEASES);
    tokio::time::sleep(3 * TTL).await;
    let lost = leases.iter().filter(|l| l.is_lost()).count();
    assert_eq!(lost, 0, "{lost} of {LEASES} leases lost");
    let trips = locker.admin().renewal_stats().round_trips - before.round_trips;
    // Each lease renewed at least every TTL/3: one round trip per lease
    // would be 9 x 5 x 1,000 = 45,000.
    assert!(trips < 500, "{trips} round trips for 3 TTLs");
    println!("{LEASES} leases, 5 nodes, 3 TTLs: {trips} renewal round trips");
    for lease in leases {
        lease.release().await.expect("still held");
    }
}
