//! TLS against a real redis-server with `--tls-port` and a throwaway test
//! CA: the whole lock cycle over `rediss://` (the subscription connection
//! too), mutual TLS, and a wrong CA.

use std::time::{Duration, Instant};

use redlease::{Error, Locker, LockerBuilder, NodeErrorKind, RetryPolicy, TlsConfig};
use redlease_testkit::tls::TestPki;
use redlease_testkit::{ClientAuth, NodeConfig, RedisNodes};

use crate::support::*;

fn tls_nodes(n: usize, pki: &TestPki, auth: ClientAuth) -> RedisNodes {
    RedisNodes::start_with(n, NodeConfig::new().tls(pki, auth))
}

fn tls_locker(nodes: &RedisNodes, tls: TlsConfig, retry: RetryPolicy) -> Locker {
    tls_builder(nodes, tls, retry)
        .build()
        .expect("valid TLS settings")
}

/// Like [`tls_locker`], with fencing on.
fn fenced_tls_locker(nodes: &RedisNodes, tls: TlsConfig, retry: RetryPolicy) -> Locker {
    tls_builder(nodes, tls, retry)
        .fencing(true)
        .build()
        .expect("valid TLS settings")
}

fn tls_builder(nodes: &RedisNodes, tls: TlsConfig, retry: RetryPolicy) -> LockerBuilder {
    Locker::builder(nodes.urls())
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        // A first request includes the TLS handshake, within the node
        // timeout: room for a debug build on a busy machine.
        .ttl(Duration::from_millis(1500))
        .node_timeout(300 * MS)
        .connect_timeout(NODE_TIMEOUT)
        .tls(tls)
        .retry(retry)
}

#[tokio::test]
async fn the_whole_lock_cycle_works_over_tls() {
    let pki = TestPki::generate();
    let nodes = tls_nodes(3, &pki, ClientAuth::None);
    assert!(nodes.urls().iter().all(|u| u.starts_with("rediss://")));
    let trust = || TlsConfig::new().ca_pem(pki.ca_pem());
    let quick = RetryPolicy::within(Duration::from_secs(10));
    let holder = fenced_tls_locker(&nodes, trust(), quick.clone());

    // Keep-alive over three TTLs, and fencing.
    let lease = holder.lock("tls-job").keep_alive().await.unwrap();
    let first_token = token(&lease);
    tokio::time::sleep(Duration::from_millis(4500)).await;
    assert!(
        !lease.is_lost(),
        "renewed over TLS: {:?}",
        lease.lost_reason()
    );
    assert!(holder.admin().renewal_stats().round_trips > 0);

    lease.release().await.unwrap();

    // A waiter in another Locker is woken by the release through its own
    // (TLS) subscription, long before its 5 s timer and the holder's 10 s
    // TTL.
    let lease = holder
        .lock("tls-job")
        .ttl(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(token(&lease) > first_token);
    let first_token = token(&lease);
    let waiter = fenced_tls_locker(
        &nodes,
        trust(),
        RetryPolicy::within(Duration::from_secs(20))
            .delay(Duration::from_secs(5), Duration::from_secs(5)),
    );
    let waiting = tokio::spawn(async move {
        let lease = waiter.lock("tls-job").await;
        (lease, waiter)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = Instant::now();
    lease.release().await.unwrap();
    let (next, _waiter) = waiting.await.unwrap();
    let next = next.expect("the waiter takes it");
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "woken by the notification: {:?}",
        released.elapsed()
    );
    assert!(token(&next) > first_token);
    let status = holder.admin().inspect("tls-job").await.unwrap();
    crate::support::assert_fence_stored(&status, token(&next));
    next.release().await.unwrap();
    for node in nodes.iter() {
        assert_eq!(get(node, &holder.admin().key("tls-job")).await, None);
    }
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let pki = TestPki::generate();
    let nodes = tls_nodes(1, &pki, ClientAuth::Required);
    let once = once();

    let anonymous = tls_locker(&nodes, TlsConfig::new().ca_pem(pki.ca_pem()), once.clone());
    let start = Instant::now();
    let refused = anonymous.try_lock("mtls").await.unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(refused.node_errors().len(), 1, "{refused}");
    let shown = refused.to_string();
    assert!(shown.contains("CertificateRequired"), "{shown}");

    let identified = TlsConfig::new()
        .ca_pem(pki.ca_pem())
        .client_cert_pem(pki.client_cert_pem(), pki.client_key_pem());
    let locker = tls_locker(&nodes, identified, once);
    let lease = locker
        .try_lock("mtls")
        .await
        .expect("with the client certificate");
    lease.release().await.unwrap();
}

#[tokio::test]
async fn a_wrong_ca_is_a_certificate_error_naming_the_node() {
    let pki = TestPki::generate();
    let other = TestPki::generate_named("some other CA");
    let nodes = tls_nodes(1, &pki, ClientAuth::None);
    let locker = tls_locker(&nodes, TlsConfig::new().ca_pem(other.ca_pem()), once());
    let start = Instant::now();
    let e = locker.try_lock("wrong-ca").await.unwrap_err();
    assert!(
        start.elapsed() < NODE_TIMEOUT + Duration::from_secs(1),
        "within the connect timeout: {:?}",
        start.elapsed()
    );
    let [failure] = e.node_errors() else {
        panic!("one node error: {e}");
    };
    assert_eq!(failure.node().index(), 0);
    assert!(
        matches!(failure.kind(), NodeErrorKind::Tls(_)),
        "a TLS kind: {:?}",
        failure.kind()
    );
    let shown = format!("{e}");
    assert!(shown.contains("certificate problem"), "{shown}");
    assert_eq!(
        shown.matches("UnknownIssuer").count(),
        1,
        "said once: {shown}"
    );
    assert!(shown.contains(&nodes.node(0).addr()), "{shown}");
    assert!(matches!(e, Error::NoQuorum { .. }), "{e:?}");
    assert_eq!(
        get(nodes.node(0), &locker.admin().key("wrong-ca")).await,
        None
    );
}

#[tokio::test]
async fn tls_settings_that_cannot_work_are_refused_at_build() {
    let nodes = RedisNodes::start(1);
    let e = Locker::builder(nodes.urls())
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .tls(TlsConfig::new())
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::InvalidInput { field: "tls", .. }), "{e}");
    let e = Locker::builder(["redis+cluster://127.0.0.1:7,127.0.0.1:8"])
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .tls(TlsConfig::new())
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::InvalidInput { field: "tls", .. }), "{e}");
    // A TLS cluster or Sentinel node takes the settings (no I/O yet).
    let pki = TestPki::generate();
    for url in [
        "rediss+cluster://127.0.0.1:7,127.0.0.1:8",
        "rediss+sentinel://127.0.0.1:7/locks",
    ] {
        Locker::builder([url])
            .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
            .tls(TlsConfig::new().ca_pem(pki.ca_pem()))
            .build()
            .unwrap_or_else(|e| panic!("{url}: {e}"));
    }
    let e = Locker::builder(["rediss://127.0.0.1:7"])
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .tls(TlsConfig::new().ca_pem("not a certificate"))
        .build()
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidInput {
                field: "tls_ca",
                ..
            }
        ),
        "{e}"
    );
}

/// A TLS node cut off mid-run (a blackhole: nothing forwarded, nothing
/// closed) costs each call at most a node timeout, the other two carry
/// the quorum and keep a lease alive, and the node is used again once the
/// link heals.
#[tokio::test]
async fn a_blackholed_tls_node_is_outvoted_and_used_again_after_the_heal() {
    use redlease_testkit::proxy::{Mode, Proxy};

    let pki = TestPki::generate();
    let nodes = tls_nodes(3, &pki, ClientAuth::None);
    let proxy = Proxy::start(&nodes.node(2).addr());
    let mut urls = nodes.urls();
    urls[2] = format!("rediss://{}", proxy.addr());
    let locker = Locker::builder(&urls)
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .ttl(Duration::from_millis(1500))
        .node_timeout(300 * MS)
        .connect_timeout(NODE_TIMEOUT)
        .tls(TlsConfig::new().ca_pem(pki.ca_pem()))
        .retry(once())
        .build()
        .unwrap();
    // Connections are up (TLS handshakes done) before the cut; on a busy
    // machine a first handshake may take longer than the node timeout.
    let mut warm = None;
    for _ in 0..20 {
        match locker.try_lock("warm").await {
            Ok(lease) => {
                warm = Some(lease);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    warm.expect("warmed up").release().await.unwrap();

    proxy.set(Mode::Blackhole);
    let start = Instant::now();
    let lease = locker.try_lock("cut").keep_alive().await.unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "decided by the two others: {:?}",
        start.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(4500)).await;
    assert!(
        !lease.is_lost(),
        "kept alive by two of three: {:?}",
        lease.lost_reason()
    );
    lease.release().await.unwrap();

    proxy.set(Mode::Pass);
    let healed = locker.try_lock("after").await.unwrap();
    let key = locker.admin().key("after");
    let mut on_node_2 = false;
    for _ in 0..50 {
        if get(nodes.node(2), &key).await.is_some() {
            on_node_2 = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(on_node_2, "the healed node holds the next lock too");
    healed.release().await.unwrap();
}

/// A TLS port given as `redis://`, and a plain port given as `rediss://`:
/// the node error names the scheme to use.
#[tokio::test]
async fn a_scheme_that_does_not_match_the_port_is_named_with_the_fix() {
    let pki = TestPki::generate();
    let tls =
        redlease_testkit::RedisNode::start_with(NodeConfig::new().tls(&pki, ClientAuth::None));
    let plain = redlease_testkit::RedisNode::start();
    let cases = [
        // The server closes a connection whose first bytes are not TLS,
        // and answers the start of a handshake.
        (
            format!("redis://{}", tls.addr()),
            "speaks TLS on this port",
            "use rediss://",
        ),
        // A plain server never completes a handshake, and answers PING.
        (
            format!("rediss://{}", plain.addr()),
            "does not speak TLS",
            "use redis://",
        ),
    ];
    for (url, what, fix) in cases {
        let mut builder = Locker::builder([url.as_str()])
            .advanced(|a| a.restart_quarantine(Duration::ZERO))
            .ttl(Duration::from_secs(10))
            // The handshake's own timeout comes first.
            .node_timeout(Duration::from_secs(2))
            .connect_timeout(NODE_TIMEOUT)
            .retry(once());
        if url.starts_with("rediss://") {
            builder = builder.tls(TlsConfig::new().ca_pem(pki.ca_pem()));
        }
        let locker = builder.build().unwrap();
        let e = locker.try_lock("scheme").await.unwrap_err();
        let [failure] = e.node_errors() else {
            panic!("{url}: one node error: {e}");
        };
        assert!(
            matches!(failure.kind(), NodeErrorKind::WrongScheme(_)),
            "{url}: {:?}",
            failure.kind()
        );
        let shown = e.to_string();
        assert!(shown.contains(what), "{url}: {shown}");
        assert!(shown.contains(fix), "{url}: {shown}");
        // So does a status read.
        let status = locker.admin().inspect("scheme").await.unwrap();
        let shown = format!("{status:?}");
        assert!(shown.contains(fix), "{url}: {shown}");
    }
    // A connection closed before any reply by something that does not
    // speak TLS either (here a proxy that resets every connection) is not
    // told a scheme.
    {
        use redlease_testkit::proxy::{Mode, Proxy};
        let proxy = Proxy::start(&plain.addr());
        proxy.set(Mode::Reset);
        let locker = Locker::builder([format!("redis://{}", proxy.addr())])
            .advanced(|a| a.restart_quarantine(Duration::ZERO))
            .retry(once())
            .build()
            .unwrap();
        let e = locker.try_lock("scheme").await.unwrap_err();
        let [failure] = e.node_errors() else {
            panic!("one node error: {e}");
        };
        assert!(
            matches!(failure.kind(), NodeErrorKind::Connection(_)),
            "{:?} ({e})",
            failure.kind()
        );
        assert!(!e.to_string().contains("TLS"), "{e}");
    }
    // A plain port that nobody serves is refused, not told a scheme.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let locker = Locker::builder([format!("redis://127.0.0.1:{port}")])
        .advanced(|a| a.restart_quarantine(Duration::ZERO))
        .retry(once())
        .build()
        .unwrap();
    let e = locker.try_lock("scheme").await.unwrap_err();
    assert!(!e.to_string().contains("TLS"), "{e}");
}

mod deployments;
