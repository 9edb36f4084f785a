//! Bad input gets a typed error before any network I/O, and nothing is
//! written.

use std::time::Duration;

use redlease::{Error, Locker, RetryPolicy, MAX_TTL};
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
            .renew_fraction(fraction)
            .drift_factor(drift)
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
        (b().drift_factor(-0.01).build(), "drift_factor"),
        (b().drift_factor(f64::NAN).build(), "drift_factor"),
        (b().drift_factor(1.0).build(), "drift_factor"),
        // Accepted once, and every lease was lost the moment it was taken.
        (b().drift_factor(0.5).build(), "ttl"),
        // Accepted once, and the first renewal came after the loss point.
        (tight(0.9, 0.05), "ttl"),
        (tight(0.8, 0.1), "ttl"),
        (tight(0.5, 0.25), "ttl"),
        (
            b().retry(RetryPolicy::new().attempts(0)).build(),
            "retry.attempts",
        ),
        (b().retry(RetryPolicy::new().no_deadline()).build(), "retry"),
        (
            b().retry(RetryPolicy::new().delay(2 * MS, MS)).build(),
            "retry.delay",
        ),
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
        .restart_quarantine(Duration::ZERO)
        .build()
        .unwrap();
    assert_eq!(field(locker.try_lock("").await), "resource");
    assert_eq!(field(locker.lock("").await), "resource");
    assert_eq!(
        field(locker.try_lock("job").ttl(Duration::ZERO).await),
        "ttl"
    );
    assert_eq!(field(locker.try_lock("job").ttl(MAX_TTL * 2).await), "ttl");
    assert_eq!(
        field(
            locker
                .lock("job")
                .retry(RetryPolicy::new().attempts(0))
                .await
        ),
        "retry.attempts"
    );
    // A per-call TTL that automatic renewal cannot keep: with this
    // Locker's 100 ms node timeout and renew_fraction 0.5, a 150 ms lease
    // is renewed at 75 ms and may answer at 175 ms, after it is lost.
    let tight = Locker::builder([node.url()])
        .restart_quarantine(Duration::ZERO) // a brand-new server
        .node_timeout(100 * MS)
        .renew_fraction(0.5)
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
    let key = locker.key("job");
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
}
