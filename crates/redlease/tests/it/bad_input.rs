//! Bad input gets a typed error before any network I/O, and nothing is
//! written.

use std::time::Duration;

use redlease::{Error, Locker, MAX_TTL};
use redlease_testkit::RedisNode;

use crate::support::*;

fn field(result: Result<impl std::fmt::Debug, Error>) -> &'static str {
    match result {
        Err(Error::InvalidInput { field, reason, .. }) => {
            assert!(!reason.is_empty());
            field
        }
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

#[tokio::test]
async fn bad_builder_settings_are_rejected() {
    let node = RedisNode::start();
    let url = node.url();
    let b = || Locker::builder([url.as_str()]);
    let none: [&str; 0] = [];
    let tight = |fraction: f64, drift: f64| {
        b().ttl(1_000 * MS)
            .node_timeout(100 * MS)
            .advanced(|a| a.renew_fraction(fraction).drift_factor(drift))
            .build()
    };
    let cases: Vec<(Result<Locker, Error>, &str)> = vec![
        (Locker::builder(none).build(), "urls"),
        (
            Locker::builder([url.as_str(), url.as_str()]).build(),
            "urls",
        ),
        (
            Locker::builder([
                format!("redis://localhost:{}", node.port()),
                format!("redis://LocalHost:{}/2", node.port()),
            ])
            .build(),
            "urls",
        ),
        (Locker::builder(["not a url"]).build(), "urls"),
        (
            // 65 distinct servers (none of them reached: no I/O here).
            Locker::builder((0..65).map(|i| format!("redis://127.0.0.1:{}", 20_000 + i))).build(),
            "urls",
        ),
        (Locker::builder(["http://127.0.0.1:1"]).build(), "urls"),
        (b().ttl(Duration::ZERO).build(), "ttl"),
        (b().ttl(Duration::from_micros(500)).build(), "ttl"),
        (b().ttl(MAX_TTL + MS).build(), "ttl"),
        (b().ttl(3 * MS).build(), "ttl"),
        (
            b().ttl(100 * MS).node_timeout(100 * MS).build(),
            "node_timeout",
        ),
        (b().node_timeout(Duration::ZERO).build(), "node_timeout"),
        (
            b().connect_timeout(Duration::ZERO).build(),
            "connect_timeout",
        ),
        (
            b().advanced(|a| a.drift_factor(-0.01)).build(),
            "advanced.drift_factor",
        ),
        (
            b().advanced(|a| a.drift_factor(f64::NAN)).build(),
            "advanced.drift_factor",
        ),
        (
            b().advanced(|a| a.drift_factor(1.0)).build(),
            "advanced.drift_factor",
        ),
        (
            b().advanced(|a| a.renew_fraction(0.0)).build(),
            "advanced.renew_fraction",
        ),
        (
            b().advanced(|a| a.renew_fraction(0.95)).build(),
            "advanced.renew_fraction",
        ),
        (
            b().advanced(|a| a.restart_quarantine(MS)).build(),
            "advanced.restart_quarantine",
        ),
        (
            b().fencing(true)
                .advanced(|a| a.fence_expiry(Duration::from_millis(999)))
                .build(),
            "advanced.fence_expiry",
        ),
        // Accepted once, and every lease was lost the moment it was taken.
        (b().advanced(|a| a.drift_factor(0.5)).build(), "ttl"),
        // Accepted once, and the first renewal came after the loss point.
        (tight(0.9, 0.05), "ttl"),
        (tight(0.8, 0.1), "ttl"),
        (tight(0.5, 0.25), "ttl"),
        (b().key_prefix("app:{x}:").build(), "key_prefix"),
    ];
    for (i, (result, expected)) in cases.into_iter().enumerate() {
        assert_eq!(field(result), expected, "case {i}");
    }
    assert!(b().build().is_ok(), "the defaults are valid");
    assert!(tight(0.8, 0.01).is_ok(), "tight but workable");
    assert_eq!(dbsize(&node).await, 0);
}

#[test]
fn building_outside_a_runtime_is_a_typed_error() {
    let err = Locker::new(["redis://127.0.0.1:1"]).unwrap_err();
    assert!(matches!(err, Error::NoRuntime), "{err:?}");
    assert!(err.to_string().contains("Tokio runtime"), "{err}");
}

#[tokio::test]
async fn bad_call_arguments_are_rejected_before_io() {
    let node = RedisNode::start();
    // A brand-new server: without the restart quarantine, which restarts.rs tests.
    let locker = Locker::builder([node.url()])
        .advanced(|a| a.restart_quarantine(Duration::ZERO))
        .build()
        .unwrap();
    assert_eq!(field(locker.try_lock("").await), "resource");
    assert_eq!(field(locker.lock("").await), "resource");
    assert_eq!(
        field(locker.try_lock("job").ttl(Duration::ZERO).await),
        "ttl"
    );
    assert_eq!(field(locker.try_lock("job").ttl(MAX_TTL * 2).await), "ttl");
    // A per-call TTL that automatic renewal cannot keep: with this
    // Locker's 100 ms node timeout and renew_fraction 0.5, a 150 ms lease
    // is renewed at 75 ms and may answer at 175 ms, after it is lost.
    let tight = Locker::builder([node.url()])
        .advanced(|a| a.restart_quarantine(Duration::ZERO)) // a brand-new server
        .node_timeout(100 * MS)
        .advanced(|a| a.renew_fraction(0.5))
        .build()
        .unwrap();
    assert_eq!(
        field(tight.try_lock("job").ttl(150 * MS).keep_alive().await),
        "ttl"
    );
    assert_eq!(dbsize(&node).await, 0, "nothing written");
    let plain = tight.try_lock("job").ttl(150 * MS).await;
    assert!(plain.is_ok(), "without keep-alive the same TTL is fine");
    plain.unwrap().release().await.unwrap();

    let mut lease = locker.try_lock("job").await.unwrap();
    let key = locker.admin().key("job");
    let before = pttl(&node, &key).await;
    // PEXPIRE 0 would delete the key: a silent release. Refused instead.
    assert_eq!(field(lease.extend(Duration::ZERO).await), "ttl");
    assert_eq!(field(lease.extend(Duration::from_micros(10)).await), "ttl");
    assert!(get(&node, &key).await.is_some(), "still locked");
    assert!(pttl(&node, &key).await <= before, "TTL not extended");
    lease.release().await.unwrap();
}

#[tokio::test]
async fn validation_happens_before_any_connection() {
    // Nothing listens on port 1: a connection attempt would fail with a
    // node error, so an InvalidInput proves no I/O came first.
    let locker = Locker::builder(["redis://127.0.0.1:1"]).build().unwrap();
    assert_eq!(field(locker.try_lock("").await), "resource");
    assert_eq!(
        field(locker.try_lock("job").ttl(Duration::ZERO).await),
        "ttl"
    );
}

#[tokio::test]
async fn error_messages_name_the_problem() {
    let err = Locker::builder([
        "redis://u:hunter2@127.0.0.1:7000",
        "redis://127.0.0.1:7000/1",
    ])
    .build()
    .unwrap_err();
    let message = err.to_string();
    assert!(message.contains("fake a majority"), "{message}");
    assert!(!message.contains("hunter2"), "{message}");

    // Typos of a URL say what was typed and what to write, without the
    // password (redis-rs says only "Redis URL did not parse").
    for (url, says) in [
        (
            "127.0.0.1:7300",
            "(127.0.0.1:7300): no scheme: write redis://127.0.0.1:7300",
        ),
        ("localhost", "write redis://localhost"),
        (
            "redis:/u:hunter2@h:1",
            "must be followed by `//`: write redis://***@h:1",
        ),
        ("http://u:hunter2@h:8080/", "a Redis node is redis://h:8080"),
        (
            "redis://u:hunter2@h:99999",
            "the port in `h:99999` is not a port number",
        ),
    ] {
        let err = Locker::builder([url]).build().unwrap_err();
        let message = err.to_string();
        assert!(message.contains(says), "{url}: {message}");
        assert!(!message.contains("hunter2"), "{url}: {message}");
        assert!(matches!(err, Error::InvalidInput { field: "urls", .. }));
    }
}

/// What `node` has been asked so far: its command counts (but INFO's own,
/// which this asks) and how many connections it accepted.
async fn traffic(con: &mut redis::aio::MultiplexedConnection) -> (Vec<String>, String) {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(con)
        .await
        .expect("INFO commandstats");
    let commands = stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:"))
        .map(str::to_string)
        .collect();
    let info: redis::InfoDict = redis::cmd("INFO")
        .arg("stats")
        .query_async(con)
        .await
        .expect("INFO stats");
    let connections = info
        .get("total_connections_received")
        .expect("a connection count");
    (commands, connections)
}

#[tokio::test]
async fn a_name_too_long_for_a_key_is_refused_before_any_io() {
    let node = RedisNode::start();
    let mut admin = conn(&node).await;
    let locker = Locker::builder([node.url()])
        .advanced(|a| a.restart_quarantine(Duration::ZERO)) // a brand-new server
        .build()
        .unwrap();
    let before = traffic(&mut admin).await;

    // Far beyond the limit, as a name read from untrusted input may be:
    // Redis would store it (keys go up to 512 MB).
    let huge = "x".repeat(16 << 20);
    let refused = |result: Result<(), Error>| {
        let err = result.expect_err("a 16 MiB name was accepted");
        let message = err.to_string();
        // Its length and start, not the whole name.
        assert!(message.len() < 400, "{}...", &message[..400]);
        assert!(
            message.contains(&format!("{} bytes", huge.len())),
            "{message}"
        );
        assert_eq!(field(Err::<(), _>(err)), "resource");
    };
    refused(locker.try_lock(huge.as_str()).await.map(drop));
    refused(locker.lock(huge.as_str()).await.map(drop));
    refused(locker.lock(huge.as_str()).with(|_| async {}).await);
    refused(locker.try_lock(huge.as_str()).with(|_| async {}).await);
    refused(locker.admin().inspect(&huge).await.map(drop));
    refused(locker.admin().force_release(&huge).await.map(drop));
    refused(locker.admin().check_name(&huge));

    // One byte over the limit, with a longer prefix taking its share.
    let prefixed = Locker::builder([node.url()])
        .advanced(|a| a.restart_quarantine(Duration::ZERO))
        .key_prefix("billing:locks:")
        .build()
        .unwrap();
    let room = redlease::MAX_KEY_LEN - "billing:locks:{}".len();
    assert_eq!(
        field(prefixed.try_lock("n".repeat(room + 1)).await),
        "resource"
    );
    assert_eq!(
        traffic(&mut admin).await,
        before,
        "no command and no connection reached the server"
    );

    // The longest name still works, and its key is exactly the limit.
    let longest = "n".repeat(room);
    let lease = prefixed.try_lock(longest.as_str()).await.unwrap();
    let key = prefixed.admin().key(&longest);
    assert_eq!(key.len(), redlease::MAX_KEY_LEN);
    assert!(get(&node, &key).await.is_some());
    lease.release().await.unwrap();

    // A prefix that leaves no room for any name is refused when built.
    let no_room = Locker::builder([node.url()])
        .key_prefix("p".repeat(redlease::MAX_KEY_LEN))
        .build();
    assert_eq!(field(no_room), "key_prefix");
}

/// A node that refused the connection (here: it wants a password) is not
/// asked again for a moment; the errors of that back-off still carry the
/// refusal's cause, so a caller can say what is wrong.
#[tokio::test]
async fn a_backed_off_node_still_says_why_it_refused() {
    let node = RedisNode::start_with(redlease_testkit::NodeConfig::new().arg("requirepass", "pw"));
    let locker = Locker::builder([node.url()])
        .advanced(|a| a.restart_quarantine(Duration::ZERO))
        .retry(once())
        .build()
        .unwrap();
    for attempt in ["first", "backed off"] {
        let error = locker.try_lock("job").await.expect_err("no password");
        let Error::NoQuorum { failed, .. } = &error else {
            panic!("{attempt}: expected NoQuorum, got {error:?}");
        };
        let cause = std::error::Error::source(&failed[0])
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            cause.contains("NOAUTH"),
            "{attempt}: the cause is kept: {failed:?} / {cause:?}"
        );
    }
}
