//! Shared helpers: lockers over testkit nodes and direct looks at each node.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redlease::{Lease, Locker, LockerBuilder, RetryPolicy};
use redlease_testkit::{RedisNode, RedisNodes};

pub const MS: Duration = Duration::from_millis(1);

/// A retry policy of exactly one attempt: a Locker whose `lock` never waits.
pub fn once() -> RetryPolicy {
    RetryPolicy::attempts(NonZeroU32::MIN)
}

/// A retry policy of at most `n` attempts (`n` > 0).
pub fn attempts(n: u32) -> RetryPolicy {
    RetryPolicy::attempts(NonZeroU32::new(n).expect("at least one attempt"))
}

/// A Locker over `nodes` with quick retries, so tests that wait do not
/// wait long, and node timeouts that a loaded 2-core machine still meets.
pub fn locker(nodes: &RedisNodes) -> Locker {
    locker_with_timeout(nodes, NODE_TIMEOUT)
}

/// The node timeout of [`locker`].
pub const NODE_TIMEOUT: Duration = Duration::from_millis(500);

/// Like [`locker`], with a node timeout short enough for sub-second TTLs.
///
/// The test Lockers here run without the restart quarantine: each test
/// starts brand-new servers, which would otherwise cast no vote for the
/// first TTL (restarts.rs tests the quarantine).
pub fn locker_with_timeout(nodes: &RedisNodes, node_timeout: Duration) -> Locker {
    builder_with_timeout(nodes, node_timeout)
        .build()
        .expect("valid test settings")
}

/// Like [`locker`], with fencing on: for the tests that read fencing
/// tokens or the fencing counter. The others keep the default (fencing
/// off, the plain-command acquire).
pub fn fenced_locker(nodes: &RedisNodes) -> Locker {
    builder_with_timeout(nodes, NODE_TIMEOUT)
        .fencing(true)
        .build()
        .expect("valid test settings")
}

fn builder_with_timeout(nodes: &RedisNodes, node_timeout: Duration) -> LockerBuilder {
    Locker::builder(nodes.urls())
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .ttl(Duration::from_secs(5))
        .node_timeout(node_timeout)
        .connect_timeout(NODE_TIMEOUT)
        .retry(RetryPolicy::within(Duration::from_secs(20)).delay(MS, 5 * MS))
}

/// The fencing token of a lease taken with fencing on.
pub fn token(lease: &Lease) -> u64 {
    lease
        .fencing_token()
        .expect("a Locker with fencing on draws a token")
}

pub async fn conn(node: &RedisNode) -> MultiplexedConnection {
    node.client()
        .get_multiplexed_async_connection()
        .await
        .expect("test connection to a running node")
}

/// The value at `key` on `node`.
pub async fn get(node: &RedisNode, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut conn(node).await)
        .await
        .expect("GET")
}

/// The remaining TTL of `key` on `node` in ms (-2: missing, -1: no expiry).
pub async fn pttl(node: &RedisNode, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut conn(node).await)
        .await
        .expect("PTTL")
}

/// Waits, at most `within`, until `node` no longer holds `key`, and panics
/// past that. A node's clock jump applies from the server's next clock
/// read; a loaded server may answer a command or two from a time it read
/// before the jump, so a test that needs the jump's effect waits for it.
pub async fn wait_until_gone(node: &RedisNode, key: &str, within: Duration) {
    let start = Instant::now();
    loop {
        let left = pttl(node, key).await;
        if left == -2 {
            return;
        }
        assert!(
            start.elapsed() < within,
            "the node on port {} still holds the key ({left} ms left) after {:?}",
            node.port(),
            start.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub async fn set(node: &RedisNode, key: &str, value: &str) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(&mut conn(node).await)
        .await
        .expect("SET");
}

/// `SET key value PX ms` on `node`: another owner's lock.
pub async fn set_px(node: &RedisNode, key: &str, value: &str, ms: u64) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(ms)
        .query_async(&mut conn(node).await)
        .await
        .expect("SET PX");
}

/// Number of keys on `node`.
pub async fn dbsize(node: &RedisNode) -> i64 {
    redis::cmd("DBSIZE")
        .query_async(&mut conn(node).await)
        .await
        .expect("DBSIZE")
}

/// Values of `key` on every running node, in order (None where missing or
/// the node is down).
pub async fn values(nodes: &RedisNodes, key: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for node in nodes.iter() {
        out.push(if node.is_running() {
            get(node, key).await
        } else {
            None
        });
    }
    out
}

/// Node indices of a list of node ids, sorted.
pub fn indices<'a>(ids: impl IntoIterator<Item = &'a redlease::NodeId>) -> Vec<usize> {
    let mut v: Vec<_> = ids.into_iter().map(|id| id.index()).collect();
    v.sort_unstable();
    v
}

/// Runs one command on `node` and checks it succeeded.
pub async fn command(node: &RedisNode, args: &[&str]) {
    let _: redis::Value = redis::cmd(args[0])
        .arg(&args[1..])
        .query_async(&mut conn(node).await)
        .await
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
}

/// How many waiters queue for the lock of `key` on `node` (see
/// `coord::turn`).
pub async fn queue_len(node: &RedisNode, key: &str) -> u64 {
    redis::cmd("ZCARD")
        .arg(format!("{key}:queue"))
        .query_async(&mut conn(node).await)
        .await
        .expect("ZCARD")
}

/// Empties every node's script cache, so the next script call meets NOSCRIPT.
pub async fn flush_scripts(nodes: &RedisNodes) {
    for node in nodes.iter() {
        command(node, &["SCRIPT", "FLUSH"]).await;
    }
}

/// Waits (at most `within`) until no node holds `key`, and returns what the
/// nodes hold then.
pub async fn values_once_gone(
    nodes: &RedisNodes,
    key: &str,
    within: Duration,
) -> Vec<Option<String>> {
    let deadline = Instant::now() + within;
    loop {
        let now = values(nodes, key).await;
        if now.iter().all(Option::is_none) || Instant::now() >= deadline {
            return now;
        }
        tokio::time::sleep(10 * MS).await;
    }
}

/// Takes and releases the lock once: connections open, scripts loaded.
pub async fn warm_up(locker: &Locker) {
    let lease = locker.try_lock("warm-up").await.expect("warm-up lock");
    lease.release().await.expect("warm-up release");
}

/// Subscribers of `channel` on `node` (PUBSUB NUMSUB).
pub async fn numsub(node: &RedisNode, channel: &str) -> i64 {
    let (_, n): (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(&mut conn(node).await)
        .await
        .expect("PUBSUB NUMSUB");
    n
}

/// Waits (at most `within`) until every running node has `want`
/// subscribers on `channel`; returns the counts seen last.
pub async fn wait_numsub(
    nodes: &RedisNodes,
    channel: &str,
    want: i64,
    within: Duration,
) -> Vec<i64> {
    let deadline = Instant::now() + within;
    loop {
        let mut counts = Vec::new();
        for node in nodes.iter().filter(|n| n.is_running()) {
            counts.push(numsub(node, channel).await);
        }
        if counts.iter().all(|&n| n == want) || Instant::now() >= deadline {
            return counts;
        }
        tokio::time::sleep(10 * MS).await;
    }
}

/// Whether `node`'s server has `DELIFEQ` (Valkey 9 and later), which the
/// library then releases with instead of the release script. Asked with
/// `COMMAND INFO`, not the way the library tells (`INFO server`'s version).
pub async fn has_delifeq(con: &mut MultiplexedConnection) -> bool {
    let info: Vec<redis::Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("DELIFEQ")
        .query_async(con)
        .await
        .expect("COMMAND INFO");
    !matches!(info.as_slice(), [] | [redis::Value::Nil])
}

/// How many times `node` ran EVALSHA and EVAL so far (INFO commandstats).
pub async fn script_calls(node: &RedisNode) -> u64 {
    command_calls(node, &["evalsha", "eval"]).await
}

/// How many lock requests `node` ran so far: the scripts of
/// [`script_calls`], `SET`, with which a Locker with fencing off (the
/// default) takes a lock, and `DELIFEQ`, with which it releases one where
/// the server has it (Valkey 9 and later).
pub async fn lock_calls(node: &RedisNode) -> u64 {
    command_calls(node, &["evalsha", "eval", "set", "delifeq"]).await
}

/// How many times `node` ran `commands` (lowercase, a subcommand as
/// `pubsub|numsub`) so far, in all.
pub async fn command_calls(node: &RedisNode, commands: &[&str]) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn(node).await)
        .await
        .expect("INFO");
    info.lines()
        .filter(|l| {
            l.strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
                .is_some_and(|(name, _)| commands.contains(&name))
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// `ACL LOG` as seen through `con`: (user, reason, object) per entry.
pub async fn acl_log_entries(con: &mut MultiplexedConnection) -> Vec<(String, String, String)> {
    let entries: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("ACL")
        .arg("LOG")
        .query_async(con)
        .await
        .expect("ACL LOG");
    let text = |entry: &std::collections::HashMap<String, redis::Value>, field: &str| {
        entry
            .get(field)
            .and_then(|v| <String as redis::FromRedisValue>::from_redis_value_ref(v).ok())
            .unwrap_or_default()
    };
    entries
        .iter()
        .map(|e| (text(e, "username"), text(e, "reason"), text(e, "object")))
        .collect()
}

/// A Locker over one node `url` (a cluster or sentinel URL) with `ttl`,
/// the test node timeouts, and retries every `retry_delay`.
pub fn locker_at(url: &str, ttl: Duration, retry_delay: Duration) -> Locker {
    builder_at(url, ttl, retry_delay)
        .build()
        .expect("valid test settings")
}

/// Like [`locker_at`], with fencing on (see [`fenced_locker`]).
pub fn fenced_locker_at(url: &str, ttl: Duration, retry_delay: Duration) -> Locker {
    builder_at(url, ttl, retry_delay)
        .fencing(true)
        .build()
        .expect("valid test settings")
}

fn builder_at(url: &str, ttl: Duration, retry_delay: Duration) -> LockerBuilder {
    Locker::builder([url])
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .ttl(ttl)
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(NODE_TIMEOUT)
        .retry(RetryPolicy::within(Duration::from_secs(20)).delay(retry_delay, retry_delay))
}

/// Asserts that a quorum of nodes keeps the lock's fencing counter at
/// `token` or above (the fencing argument's invariant: every later quorum
/// meets a node whose counter is past the token). A node may hold more
/// than the token: outside the granting quorum its counter may have
/// started from its own clock later (a server up less than a second
/// takes the clock whole), and its answer came too late to count.
pub fn assert_fence_stored(status: &redlease::LockStatus, token: u64) {
    let nodes = status.nodes.len();
    let holding = status
        .nodes
        .iter()
        .filter(|(_, answer)| {
            answer
                .as_ref()
                .is_ok_and(|state| state.fencing_counter >= Some(token))
        })
        .count();
    assert!(
        holding > nodes / 2,
        "the counter is at {token} or above on {holding} of {nodes} nodes: {status:?}"
    );
    assert!(status.fencing_counter() >= Some(token), "{status:?}");
}

/// A task that waits for `resource` through `locker` (as another process
/// would), returning when it got the lock, and the result.
pub fn spawn_lock(
    locker: Locker,
    resource: &'static str,
) -> tokio::task::JoinHandle<(Instant, Result<redlease::Lease, redlease::Error>)> {
    tokio::spawn(async move {
        let lease = locker.lock(resource).await;
        (Instant::now(), lease)
    })
}

/// Releases `lease` and waits for `waiter` (from [`spawn_lock`]) to get
/// the lock, which it then releases: how long the handoff took.
pub async fn handoff(
    lease: redlease::Lease,
    waiter: tokio::task::JoinHandle<(Instant, Result<redlease::Lease, redlease::Error>)>,
) -> Duration {
    let released = Instant::now();
    lease.release().await.expect("release");
    let (acquired, got) = waiter.await.unwrap();
    got.expect("the waiter gets the lock")
        .release()
        .await
        .unwrap();
    acquired - released
}

/// Counts the messages published on the channels of `node` that match
/// `pattern` from now on (a pattern subscriber of its own, which no
/// script's count of a channel's subscribers sees; ready once this
/// returns).
pub async fn listen(
    node: &RedisNode,
    pattern: &str,
) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
    use futures_util::StreamExt;
    let heard = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut pubsub = node.client().get_async_pubsub().await.expect("subscriber");
    pubsub.psubscribe(pattern).await.expect("subscribed");
    let count = heard.clone();
    tokio::spawn(async move {
        let mut messages = pubsub.into_on_message();
        while messages.next().await.is_some() {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    heard
}

/// What a [`listen`] counter holds, once `settle` has passed for a
/// message on its way.
pub async fn heard(count: &std::sync::atomic::AtomicU64, settle: Duration) -> u64 {
    tokio::time::sleep(settle).await;
    count.load(std::sync::atomic::Ordering::SeqCst)
}
