//! TLS on a Redis Cluster (`rediss+cluster://`) and behind Sentinel
//! (`rediss+sentinel://`), with a private CA and client certificates: the
//! TLS settings reach every connection (each shard's, the sentinels', the
//! primary's), and a cluster none of whose nodes passes the handshake says
//! why (or, given as `redis+cluster://`, which scheme to use).

use std::time::{Duration, Instant};

use redlease::{Error, Locker, NodeErrorKind, RetryPolicy, TlsConfig};
use redlease_testkit::cluster::RedisCluster;
use redlease_testkit::sentinel::{SentinelSet, PRIMARY_NAME};
use redlease_testkit::tls::TestPki;
use redlease_testkit::{ClientAuth, RedisNode};

use crate::support::*;

/// A first request connects to several servers (a cluster's seeds and
/// shard, or sentinels and a primary), each with a TLS handshake, and a
/// cluster client that fails a handshake retries before it gives up: room
/// for a debug build on a busy machine.
const TLS_TIMEOUT: Duration = Duration::from_secs(3);

const TTL: Duration = Duration::from_secs(8);

fn tls_locker_at(url: &str, tls: TlsConfig, retry: RetryPolicy) -> Locker {
    Locker::builder([url])
        .advanced(|a| a.restart_quarantine(Duration::ZERO))
        .ttl(TTL)
        .node_timeout(TLS_TIMEOUT)
        .connect_timeout(TLS_TIMEOUT)
        .tls(tls)
        .retry(retry)
        .build()
        .expect("valid TLS settings")
}

/// Tries for a while: the first connections may take longer than a
/// request's timeout on a busy machine.
fn patient() -> RetryPolicy {
    RetryPolicy::within(Duration::from_secs(15))
}

fn identified(pki: &TestPki) -> TlsConfig {
    TlsConfig::new()
        .ca_pem(pki.ca_pem())
        .client_cert_pem(pki.client_cert_pem(), pki.client_key_pem())
}

/// The one node error of `e`, which must be a TLS failure naming `why`.
fn assert_tls_failure(e: &Error, why: &str) {
    let [failure] = e.node_errors() else {
        panic!("one node error: {e}");
    };
    assert!(
        matches!(failure.kind(), NodeErrorKind::Tls(_)),
        "a TLS kind: {:?} ({e})",
        failure.kind()
    );
    let shown = e.to_string();
    assert!(shown.contains(why), "{shown}");
    assert!(shown.contains("certificate problem"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_takes_locks_with_a_private_ca_and_a_client_certificate() {
    let pki = TestPki::generate();
    let cluster = RedisCluster::start_tls(3, 0, &pki, ClientAuth::Required);
    let url = cluster.cluster_url();
    assert!(url.starts_with("rediss+cluster://"), "{url}");

    let locker = tls_locker_at(&url, identified(&pki), patient());
    // Kept alive past its TTL: the renewal lanes' own connections use the
    // TLS settings too.
    let lease = locker.lock("tls-cluster").keep_alive().await.unwrap();
    let key = locker.admin().key("tls-cluster");
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(&key)
        .query_async(&mut conn(cluster.node(0)).await)
        .await
        .unwrap();
    let owner = cluster.owner_of(slot);
    assert!(pttl(owner, &key).await > 0, "written on the slot's owner");
    tokio::time::sleep(TTL + Duration::from_secs(1)).await;
    assert!(!lease.is_lost(), "renewed: {:?}", lease.lost_reason());
    assert!(locker.admin().renewal_stats().round_trips > 0);
    match locker.try_lock("tls-cluster").await {
        Err(Error::Taken { .. }) => {}
        other => panic!("a held lock is refused, got {other:?}"),
    }
    // A waiter in another Locker is woken by the release through its own
    // (TLS, sharded) subscription, long before its 5 s timer.
    let waiter = Locker::builder([url.as_str()])
        .advanced(|a| a.restart_quarantine(Duration::ZERO))
        .ttl(TTL)
        .node_timeout(TLS_TIMEOUT)
        .connect_timeout(TLS_TIMEOUT)
        .tls(identified(&pki))
        .retry(
            RetryPolicy::within(Duration::from_secs(30))
                .delay(Duration::from_secs(5), Duration::from_secs(5)),
        )
        .build()
        .unwrap();
    let channel = waiter.admin().release_channel("tls-cluster");
    let waiting = tokio::spawn(async move {
        let lease = waiter.lock("tls-cluster").await;
        (lease, waiter)
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut subscribed = false;
    while !subscribed && Instant::now() < deadline {
        let reply: Vec<(String, i64)> = redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(&channel)
            .query_async(&mut conn(owner).await)
            .await
            .unwrap();
        subscribed = reply.first().is_some_and(|(_, n)| *n > 0);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(subscribed, "the waiter subscribed on the lock's shard");
    let released = Instant::now();
    lease.release().await.unwrap();
    let (next, _waiter) = waiting.await.unwrap();
    let next = next.expect("the waiter takes it");
    assert!(
        released.elapsed() < Duration::from_secs(3),
        "woken by the notification: {:?}",
        released.elapsed()
    );
    next.release().await.unwrap();
    assert_eq!(get(owner, &key).await, None, "released");

    // The CA alone: the nodes want the client certificate, and say so.
    let anonymous = tls_locker_at(&url, TlsConfig::new().ca_pem(pki.ca_pem()), once());
    let e = anonymous.try_lock("tls-cluster").await.unwrap_err();
    assert_tls_failure(&e, "CertificateRequired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_on_a_cluster_is_a_tls_error_naming_the_reason() {
    let pki = TestPki::generate();
    let other = TestPki::generate_named("some other CA");
    let cluster = RedisCluster::start_tls(3, 0, &pki, ClientAuth::None);
    let url = cluster.cluster_url();

    let locker = tls_locker_at(&url, TlsConfig::new().ca_pem(other.ca_pem()), once());
    let start = Instant::now();
    let e = locker.try_lock("wrong-ca").await.unwrap_err();
    // The acquire and its clean-up get a node timeout each.
    assert!(
        start.elapsed() < 2 * TLS_TIMEOUT + Duration::from_secs(1),
        "within the node's timeouts: {:?}",
        start.elapsed()
    );
    assert!(matches!(e, Error::NoQuorum { .. }), "{e:?}");
    assert_tls_failure(&e, "UnknownIssuer");
    let status = locker.admin().inspect("wrong-ca").await;
    let shown = match status {
        Err(e) => e.to_string(),
        Ok(status) => format!("{status:?}"),
    };
    assert!(shown.contains("UnknownIssuer"), "inspect says why: {shown}");

    // Given as a plain cluster, the nodes close the connections: the
    // error names the scheme to use.
    let plain_url = url.replacen("rediss+cluster://", "redis+cluster://", 1);
    let locker = Locker::builder([plain_url.as_str()])
        .advanced(|a| a.restart_quarantine(Duration::ZERO))
        .ttl(TTL)
        .node_timeout(TLS_TIMEOUT)
        .connect_timeout(TLS_TIMEOUT)
        .retry(once())
        .build()
        .unwrap();
    let e = locker.try_lock("wrong-ca").await.unwrap_err();
    let [failure] = e.node_errors() else {
        panic!("one node error: {e}");
    };
    assert!(
        matches!(failure.kind(), NodeErrorKind::WrongScheme(_)),
        "{:?} ({e})",
        failure.kind()
    );
    assert!(e.to_string().contains("use rediss+cluster://"), "{e}");

    // With the right CA the same cluster serves.
    let locker = tls_locker_at(&url, TlsConfig::new().ca_pem(pki.ca_pem()), patient());
    let lease = locker.lock("wrong-ca").await.unwrap();
    lease.release().await.unwrap();
}

/// `rediss+sentinel://` over every sentinel of `set`.
fn tls_sentinel_url(set: &SentinelSet) -> String {
    let hosts: Vec<String> = set
        .sentinel_urls()
        .iter()
        .map(|u| u.trim_start_matches("rediss://").to_string())
        .collect();
    format!("rediss+sentinel://{}/{PRIMARY_NAME}", hosts.join(","))
}

/// Whether a client of `sentinel` is subscribed to something (the
/// sentinels' own links to each other never subscribe to a sentinel).
async fn has_subscriber(sentinel: &RedisNode) -> bool {
    let Ok(mut con) = sentinel.client().get_multiplexed_async_connection().await else {
        return false;
    };
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut con)
        .await
        .unwrap_or_default();
    clients
        .lines()
        .any(|l| l.split(' ').any(|f| f.starts_with("sub=") && f != "sub=0"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_sentinel_primary_takes_locks_with_a_client_certificate() {
    let pki = TestPki::generate();
    let set = SentinelSet::start_tls(1, 3, &pki, ClientAuth::Required);
    let url = tls_sentinel_url(&set);
    let locker = tls_locker_at(&url, identified(&pki), patient());

    let lease = locker.lock("tls-sentinel").await.unwrap();
    let key = locker.admin().key("tls-sentinel");
    let primary = set.node_on(set.primary_port()).expect("a data node");
    assert!(pttl(primary, &key).await > 0, "written on the primary");
    lease.release().await.unwrap();
    assert_eq!(get(primary, &key).await, None, "released");

    // The failover listener reaches a sentinel with the same settings.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut heard = false;
    while Instant::now() < deadline && !heard {
        for i in 0..3 {
            if has_subscriber(set.sentinel(i)).await {
                heard = true;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(heard, "a sentinel has our +switch-master subscription");

    // The CA alone: the sentinels want the client certificate.
    let anonymous = tls_locker_at(&url, TlsConfig::new().ca_pem(pki.ca_pem()), once());
    let e = anonymous.try_lock("tls-sentinel").await.unwrap_err();
    let shown = e.to_string();
    assert!(shown.contains("CertificateRequired"), "{shown}");
}
