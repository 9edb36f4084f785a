//! The acquire without a script (fencing and durability off, the default):
//! `SET NX PX GET` with `PEXPIRETIME`, a follow-up only on a refusal, and the
//! release script by `EVALSHA` once the node has run it.

use std::time::Duration;

use redlease::{Error, RetryPolicy};
use redlease_testkit::RedisNodes;

use crate::support::{command, command_calls, conn, get, locker, script_calls};

/// Calls of one command so far (INFO commandstats).
async fn calls(node: &redlease_testkit::RedisNode, name: &str) -> u64 {
    command_calls(node, &[name]).await
}

#[tokio::test]
async fn a_lock_is_taken_without_a_script_and_released_by_its_digest() {
    let nodes = RedisNodes::start(1);
    let node = nodes.node(0);
    let locker = locker(&nodes);
    for _ in 0..3 {
        let lease = locker.try_lock("plain").await.unwrap();
        assert_eq!(lease.fencing_token(), None);
        lease.release().await.unwrap();
    }
    assert_eq!(calls(node, "set").await, 3, "one SET per acquire");
    assert_eq!(
        calls(node, "pexpiretime").await,
        3,
        "the clock guard reads each new key's expiry"
    );
    assert_eq!(calls(node, "time").await, 1, "TIME once per connection");
    // The first release goes whole, the others by digest; no acquire script.
    assert_eq!(calls(node, "eval").await, 1);
    assert_eq!(calls(node, "evalsha").await, 2);
    assert_eq!(calls(node, "pttl").await, 0, "no refusal, no follow-up");
    assert_eq!(get(node, &locker.key("plain")).await, None);
}

#[tokio::test]
async fn a_refusal_is_followed_up_with_the_holders_ttl_and_waiters() {
    let nodes = RedisNodes::start(1);
    let node = nodes.node(0);
    let locker = locker(&nodes);
    let held = locker
        .try_lock("busy")
        .ttl(Duration::from_secs(5))
        .await
        .unwrap();
    let before = script_calls(node).await;
    match locker.try_lock("busy").await {
        Err(Error::Taken { held_on, .. }) => {
            let left = held_on[0].expires_in.expect("the holder's key has a TTL");
            assert!(left > Duration::from_secs(4) && left <= Duration::from_secs(5));
        }
        other => panic!("expected Taken, got {other:?}"),
    }
    // The follow-up is a small script (refused.lua): by digest, refused
    // with NOSCRIPT the first time, then whole; by digest after that.
    assert_eq!(calls(node, "pttl").await, 1);
    assert_eq!(calls(node, "pubsub|numsub").await, 1);
    assert_eq!(script_calls(node).await - before, 2);
    assert!(locker.try_lock("busy").await.is_err());
    assert_eq!(calls(node, "pttl").await, 2);
    assert_eq!(script_calls(node).await - before, 3);
    held.release().await.unwrap();
}

#[tokio::test]
async fn a_key_of_another_type_holds_the_lock_and_is_left_alone() {
    let nodes = RedisNodes::start(1);
    let node = nodes.node(0);
    let locker = locker(&nodes);
    let key = locker.key("hashed");
    command(node, &["HSET", &key, "field", "value"]).await;
    let once = locker.lock("hashed").retry(RetryPolicy::new().attempts(1));
    match once.await {
        // Held, without expiry: not a node error.
        Err(Error::Taken { held_on, .. }) => assert_eq!(held_on[0].expires_in, None),
        other => panic!("expected Taken, got {other:?}"),
    }
    let kind: String = redis::cmd("TYPE")
        .arg(&key)
        .query_async(&mut conn(node).await)
        .await
        .unwrap();
    assert_eq!(kind, "hash");
}

#[tokio::test]
async fn a_release_after_the_scripts_were_flushed_still_deletes() {
    let nodes = RedisNodes::start(1);
    let node = nodes.node(0);
    let locker = locker(&nodes);
    locker.try_lock("f").await.unwrap().release().await.unwrap();
    command(node, &["SCRIPT", "FLUSH"]).await;
    // Sent by digest, refused with NOSCRIPT, sent again whole.
    let lease = locker.try_lock("f").await.unwrap();
    lease.release().await.unwrap();
    assert_eq!(get(node, &locker.key("f")).await, None);
    assert_eq!(calls(node, "eval").await, 2);
}

/// A refused acquire marks a holder of another Locker for its waiters by
/// appending `*` to its value, but only a value in redlease's format: a
/// key another program wrote under the lock's name, or a token of a
/// redlease version without marks (32 hex digits), is never changed.
#[tokio::test]
async fn only_a_redlease_value_is_marked() {
    let nodes = RedisNodes::start(1);
    let node = nodes.node(0);
    let locker = locker(&nodes);
    let token48 = "0123456789abcdef".repeat(3);
    let cases = [
        ("foreign", "held-by-another-program".to_string(), false),
        ("old", "0123456789abcdef".repeat(2), false),
        ("bound", format!("{token48}|{}", "f".repeat(40)), true),
        ("current", token48.clone(), true),
    ];
    for (name, value, marks) in cases {
        let key = locker.key(name);
        command(node, &["SET", &key, &value, "PX", "60000"]).await;
        let once = locker.lock(name).retry(RetryPolicy::new().attempts(1));
        assert!(matches!(once.await, Err(Error::Taken { .. })), "{name}");
        let expected = if marks { format!("{value}*") } else { value };
        assert_eq!(get(node, &key).await, Some(expected), "{name}");
        // Refused again: marked once only.
        let once = locker.lock(name).retry(RetryPolicy::new().attempts(1));
        assert!(matches!(once.await, Err(Error::Taken { .. })), "{name}");
        let value = get(node, &key).await.unwrap();
        assert!(!value.ends_with("**"), "{name}: {value}");
        let left: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn(node).await)
            .await
            .unwrap();
        assert!(left > 50_000, "{name}: the TTL is kept ({left} ms)");
    }
}
