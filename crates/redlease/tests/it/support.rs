//! Shared helpers: lockers over testkit nodes and direct looks at each node.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redlease::{Locker, RetryPolicy};
use redlease_testkit::{RedisNode, RedisNodes};

pub const MS: Duration = Duration::from_millis(1);

/// A Locker over `nodes` with short timeouts and quick retries, so tests
/// that wait do not wait long.
pub fn locker(nodes: &RedisNodes) -> Locker {
    locker_with_timeout(nodes, 200 * MS)
}

/// Like [`locker`], with a node timeout short enough for sub-second TTLs.
pub fn locker_with_timeout(nodes: &RedisNodes, node_timeout: Duration) -> Locker {
    Locker::builder(nodes.urls())
        .ttl(Duration::from_secs(5))
        .node_timeout(node_timeout)
        .connect_timeout(200 * MS)
        .retry(
            RetryPolicy::new()
                .wait(Duration::from_secs(20))
                .delay(MS, 5 * MS),
        )
        .build()
        .expect("valid test settings")
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

pub async fn set(node: &RedisNode, key: &str, value: &str) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(&mut conn(node).await)
        .await
        .expect("SET");
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
