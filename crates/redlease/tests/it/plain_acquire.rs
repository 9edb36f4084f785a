//! The acquire without a script (fencing and durability off, the default):
//! `SET NX PX GET` with `PEXPIRETIME`, a follow-up only on a refusal, and the
//! release script by `EVALSHA` once the node has run it, or `DELIFEQ` where
//! the server has it (Valkey 9 and later; CI runs these tests on both).

use std::time::Duration;

use redlease::{Error, RetryPolicy};
use redlease_testkit::RedisNodes;

use crate::support::{
    attempts, command, command_calls, conn, get, has_delifeq, locker, once, script_calls,
    spawn_lock, wait_numsub, MS,
};

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
    if has_delifeq(&mut conn(node).await).await {
        // Every release is one DELIFEQ: no script at all.
        assert_eq!(calls(node, "delifeq").await, 3);
        assert_eq!(script_calls(node).await, 0);
    } else {
        // The first release goes whole, the others by digest; no acquire
        // script.
        assert_eq!(calls(node, "eval").await, 1);
        assert_eq!(calls(node, "evalsha").await, 2);
    }
    assert_eq!(calls(node, "pttl").await, 0, "no refusal, no follow-up");
    assert_eq!(get(node, &locker.admin().key("plain")).await, None);
}

/// A lock another Locker's waiter marked holds more than the token: the
/// release's `DELIFEQ` (where the server has it) leaves it alone, and the
/// script deletes it and announces the release to the waiter.
#[tokio::test]
async fn a_marked_release_goes_to_the_script_which_announces_it() {
    let nodes = RedisNodes::start(1);
    let node = nodes.node(0);
    let native = has_delifeq(&mut conn(node).await).await;
    let patient = RetryPolicy::within(Duration::from_secs(30))
        .delay(Duration::from_secs(5), Duration::from_secs(5));
    let build = || {
        redlease::Locker::builder(nodes.urls())
            .advanced(|a| a.restart_quarantine(Duration::ZERO))
            .ttl(Duration::from_secs(10))
            .retry(patient.clone())
            .build()
            .unwrap()
    };
    let (mine, theirs) = (build(), build());
    let key = mine.admin().key("marked");
    let holder = mine.try_lock("marked").await.unwrap();
    let waiter = spawn_lock(theirs, "marked");
    let channel = format!("{key}:released");
    wait_numsub(&nodes, &channel, 1, Duration::from_secs(3)).await;
    let mut value = None;
    for _ in 0..100 {
        value = get(node, &key).await;
        if value.as_deref().is_some_and(|v| v.ends_with('*')) {
            break;
        }
        tokio::time::sleep(20 * MS).await;
    }
    assert!(
        value.as_deref().is_some_and(|v| v.ends_with('*')),
        "marked: {value:?}"
    );
    // The waiter's retry after subscribing is refused too (and runs the
    // follow-up script); then it waits on its 5 s timer.
    tokio::time::sleep(200 * MS).await;
    // Announcements on the release channels (every change is also told on
    // the name's watchers' channel, which this does not count).
    let announced = crate::support::listen(node, &format!("{key}:released*")).await;
    let scripts = script_calls(node).await;
    let released = std::time::Instant::now();
    holder.release().await.unwrap();
    let taken = tokio::time::timeout(Duration::from_secs(3), waiter)
        .await
        .expect("the waiter is woken by the announcement, not its 5 s timer")
        .unwrap()
        .1
        .expect("the waiter gets the lock");
    assert!(released.elapsed() < Duration::from_secs(3));
    assert_eq!(
        crate::support::heard(&announced, 50 * MS).await,
        1,
        "announced once"
    );
    // The release script handed the lock to the waiter, whose acquire
    // script took it: two scripts.
    assert_eq!(script_calls(node).await - scripts, 2);
    if native {
        assert_eq!(calls(node, "delifeq").await, 1, "DELIFEQ was tried first");
    }
    taken.release().await.unwrap();
    assert_eq!(get(node, &key).await, None);
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
    let key = locker.admin().key("hashed");
    command(node, &["HSET", &key, "field", "value"]).await;
    let once = locker.lock("hashed").retry(once());
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
    assert_eq!(get(node, &locker.admin().key("f")).await, None);
    if has_delifeq(&mut conn(node).await).await {
        // No script to lose: both releases were DELIFEQ.
        assert_eq!(calls(node, "delifeq").await, 2);
        assert_eq!(script_calls(node).await, 0);
    } else {
        assert_eq!(calls(node, "eval").await, 2);
    }
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
        let key = locker.admin().key(name);
        command(node, &["SET", &key, &value, "PX", "60000"]).await;
        // Two attempts: the first waits afterwards, so it marks.
        let twice = locker.lock(name).retry(waiting_twice());
        assert!(matches!(twice.await, Err(Error::Taken { .. })), "{name}");
        let expected = if marks { format!("{value}*") } else { value };
        assert_eq!(get(node, &key).await, Some(expected), "{name}");
        // Refused again: marked once only.
        let twice = locker.lock(name).retry(waiting_twice());
        assert!(matches!(twice.await, Err(Error::Taken { .. })), "{name}");
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

/// Two attempts a few milliseconds apart: the first one waits afterwards.
fn waiting_twice() -> RetryPolicy {
    attempts(2).delay(MS, 5 * MS)
}

/// Only an acquire that waits after a refusal marks the holder: a refused
/// `try_lock`, or the last attempt of a bounded wait, gives up, nobody
/// listens for that release, and a marked holder would publish it to
/// nobody. On the plain path (SET NX and refused.lua) and the script path
/// (fencing, acquire.lua).
#[tokio::test]
async fn a_refused_try_lock_leaves_the_holder_unmarked() {
    let nodes = RedisNodes::start(1);
    let node = nodes.node(0);
    for fencing in [false, true] {
        let build = || {
            redlease::Locker::builder(nodes.urls())
                .advanced(|a| a.restart_quarantine(Duration::ZERO))
                .ttl(Duration::from_secs(10))
                .fencing(fencing)
                .build()
                .unwrap()
        };
        let (holder_side, other) = (build(), build());
        let name = if fencing { "fenced" } else { "plain" };
        let key = holder_side.admin().key(name);
        let held = holder_side.try_lock(name).await.unwrap();
        let value = get(node, &key).await.expect("held");
        // The token (48 hex digits), then its owner, unmarked.
        let token_like = |v: &str| {
            v.len() > 49
                && v.bytes().take(48).all(|b| b.is_ascii_hexdigit())
                && v.as_bytes()[48] == b'\t'
                && !v.ends_with('*')
        };
        assert!(token_like(&value), "{name}: {value}");

        let refused = other.try_lock(name).await;
        assert!(matches!(refused, Err(Error::Taken { .. })), "{name}");
        let last = other.lock(name).retry(once());
        assert!(matches!(last.await, Err(Error::Taken { .. })), "{name}");
        let now = get(node, &key).await.expect("still held");
        assert!(token_like(&now), "{name}: marked by a try: {now}");
        let announced = crate::support::listen(node, &format!("{key}:released*")).await;
        held.release().await.unwrap();
        assert_eq!(
            crate::support::heard(&announced, 50 * MS).await,
            0,
            "{name}: a release announced to nobody"
        );

        // A waiting acquire still marks, and the release is published.
        let held = holder_side.try_lock(name).await.unwrap();
        let value = get(node, &key).await.expect("held");
        let twice = other.lock(name).retry(waiting_twice());
        assert!(matches!(twice.await, Err(Error::Taken { .. })), "{name}");
        assert_eq!(get(node, &key).await, Some(format!("{value}*")), "{name}");
        held.release().await.unwrap();
        assert_eq!(
            crate::support::heard(&announced, 50 * MS).await,
            1,
            "{name}"
        );
    }
}
