//! Kept-alive leases of different TTLs on one Locker, while a minority of
//! nodes is stalled (SIGSTOP) or blackholed (a proxy that holds every
//! byte): each lease is renewed by the quorum that still answers, on its
//! own clock, and none is lost.
//!
//! The Locker keeps the default node timeout (5% of each lease's TTL), so
//! the 20 s lease's node timeout (1 s) is longer than the 1 s lease's whole
//! slack: a renewal that waited for every node, or applied one lease's
//! timeout to another, loses the short lease here.

use std::time::Duration;

use redlease::{Error, Lease, Locker};
use redlease_testkit::proxy::{Mode, Proxy};
use redlease_testkit::RedisNodes;

use crate::support::*;

const SHORT: Duration = Duration::from_secs(1);
const LONG: Duration = Duration::from_secs(20);
/// How long the minority stays slow: five short TTLs.
const SLOW_FOR: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug)]
enum Slowness {
    /// The redis-server process is stopped: it accepts connections (the
    /// kernel does) but answers nothing.
    Paused,
    /// A proxy in front of the node forwards nothing in either direction.
    Blackholed,
}

async fn mixed_ttls_survive_a_slow_minority(n: usize, slowness: Slowness) {
    let mut nodes = RedisNodes::start(n);
    let slow: Vec<usize> = (0..(n - 1) / 2).collect();
    // Every node behind a proxy, so the blackholed ones differ from the
    // others only in the proxy's mode.
    let proxies: Vec<Proxy> = nodes.iter().map(|nd| Proxy::start(&nd.addr())).collect();
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let locker = Locker::builder(&urls)
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .connect_timeout(NODE_TIMEOUT)
        .build()
        .unwrap();
    let other = Locker::builder(&urls)
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .node_timeout(100 * MS)
        .connect_timeout(NODE_TIMEOUT)
        .build()
        .unwrap();
    let short = locker.lock("short").ttl(SHORT).keep_alive().await.unwrap();
    let long = locker.lock("long").ttl(LONG).keep_alive().await.unwrap();

    for &i in &slow {
        match slowness {
            Slowness::Paused => nodes.node_mut(i).pause(),
            Slowness::Blackholed => proxies[i].set(Mode::Blackhole),
        }
    }
    let checks = (SLOW_FOR.as_millis() / 250) as usize;
    for round in 0..checks {
        tokio::time::sleep(250 * MS).await;
        for (name, lease) in [("short", &short), ("long", &long)] {
            assert!(
                !lease.is_lost(),
                "{n} nodes, {slowness:?}: the {name} lease was lost after {:?} ({:?})",
                250 * MS * (round as u32 + 1),
                lease.lost_reason()
            );
        }
        if round % 4 == 3 {
            assert_taken(&other, "short").await;
            assert_taken(&other, "long").await;
        }
    }
    // The short lease was renewed by the healthy quorum all along: it
    // still has most of its TTL ahead of it.
    assert!(
        short.remaining() > SHORT / 3,
        "short lease renewed late: {:?} left",
        short.remaining()
    );

    for &i in &slow {
        match slowness {
            Slowness::Paused => nodes.node_mut(i).resume(),
            Slowness::Blackholed => proxies[i].set(Mode::Pass),
        }
    }
    // The slow nodes wake to find the short key expired on them: their
    // refusals are a minority, and the lease stays held.
    tokio::time::sleep(SHORT).await;
    assert_alive(&short, "short");
    assert_alive(&long, "long");
    short
        .release()
        .await
        .expect("the short lease is still ours");
    long.release().await.expect("the long lease is still ours");
}

async fn assert_taken(other: &Locker, resource: &str) {
    match other.try_lock(resource).await {
        Err(Error::Taken { .. }) => {}
        Ok(_) => panic!("another Locker took {resource} while it was kept alive"),
        Err(e) => panic!("unexpected error for {resource}: {e}"),
    }
}

fn assert_alive(lease: &Lease, name: &str) {
    assert!(
        !lease.is_lost(),
        "the {name} lease was lost: {:?}",
        lease.lost_reason()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_ttls_on_3_nodes_survive_a_paused_node() {
    mixed_ttls_survive_a_slow_minority(3, Slowness::Paused).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_ttls_on_3_nodes_survive_a_blackholed_node() {
    mixed_ttls_survive_a_slow_minority(3, Slowness::Blackholed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_ttls_on_5_nodes_survive_two_paused_nodes() {
    mixed_ttls_survive_a_slow_minority(5, Slowness::Paused).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_ttls_on_5_nodes_survive_two_blackholed_nodes() {
    mixed_ttls_survive_a_slow_minority(5, Slowness::Blackholed).await;
}

/// A manual extend of a kept-alive lease is confirmed by the quorum that
/// answers, and neither waits for the paused node nor holds back the
/// renewal of other leases (it once held the renewer's lock for a whole
/// round trip, the long lease's 1 s node timeout on the paused node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_extend_neither_waits_for_a_slow_node_nor_holds_back_others() {
    let mut nodes = RedisNodes::start(3);
    let locker = Locker::builder(nodes.urls())
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .connect_timeout(NODE_TIMEOUT)
        .build()
        .unwrap();
    let short = locker.lock("short").ttl(SHORT).keep_alive().await.unwrap();
    let mut long = locker.lock("long").ttl(LONG).keep_alive().await.unwrap();
    nodes.node_mut(0).pause();
    let mut slowest = Duration::ZERO;
    for _ in 0..30 {
        let began = std::time::Instant::now();
        long.extend(LONG).await.expect("a quorum still answers");
        slowest = slowest.max(began.elapsed());
        tokio::time::sleep(100 * MS).await;
        assert_alive(&short, "short");
        assert!(
            short.remaining() > SHORT / 3,
            "the short lease was renewed late: {:?} left",
            short.remaining()
        );
    }
    assert!(
        slowest < 300 * MS,
        "an extend waited {slowest:?}: longer than a healthy quorum takes"
    );
    nodes.node_mut(0).resume();
    short.release().await.unwrap();
    long.release().await.unwrap();
}
