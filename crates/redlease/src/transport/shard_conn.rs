//! A Redis Cluster whose every shard connection knows which server process
//! it reached, so that the restart quarantine, the clock-jump guard and
//! the duplicate check (see `vote_guard`) judge each shard's vote as they
//! judge a standalone server's.
//!
//! redis-rs's cluster client keeps one connection per shard and makes a
//! new one, out of our sight, whenever one broke, a redirect (MOVED, ASK)
//! names an address it has no connection to, or a slot-map refresh finds
//! a new node. Every one of those is made by [`ShardConn`]'s
//! [`Connect`] implementation. Before the first vote a connection carries,
//! it asks the server who it is (`INFO server` and `TIME`, one round trip,
//! as a standalone connection does when it connects) and keeps the answer
//! with the connection for as long as it lives. A connection that carries
//! no vote (a replica's, a seed's) never asks, so a stalled replica does
//! not hold up a new cluster connection.
//!
//! A vote learns which connection carried it without a round trip: the
//! acquire's pipeline ends with [`which_shard`], a command that is never
//! sent. The connection that sends the pipeline answers it itself, with
//! its own number, and [`facts_of`] turns that into what the connection
//! learned about its server. redis-rs sends a pipeline whole to one
//! connection, and again whole to another after a redirect or a broken
//! connection, so the answer always comes from the connection that
//! carried the vote. Identity is therefore learned once per shard
//! connection, and never per lock.
//!
//! # Why no restart goes unseen
//!
//! A server process that restarts closes every connection it had, so a
//! restarted shard is only ever reached through a connection made after
//! the restart, whose handshake read the new process's `run_id` and
//! uptime. The handshake runs on a connection before the first vote it
//! carries; a restart between the handshake and a vote breaks that very
//! connection, so the vote is lost with it (an error, which counts as no
//! vote), and
//! the next try goes out on a new connection with a new handshake.
//! redis-rs may make that new connection and resend the pipeline inside
//! one request, with no error we can see; the resent pipeline's answer
//! then names the new connection, so the vote is judged by the new
//! process. What is left: a reply that arrives after its connection was
//! dropped and replaced (its number is then unknown), which counts as no
//! vote; and a server that reports an uptime from a wall clock far ahead
//! of its start (see the crate docs), as for a standalone server.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, RwLock};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::{ClusterConnection, Connect};
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{
    AsyncConnectionConfig, Cmd, IntoConnectionInfo, Pipeline, RedisFuture, RedisResult, Value,
};

use crate::core::vote_guard::ServerFacts;
use crate::transport::server_conn::handshake;

/// The name of the command [`which_shard`] makes; no server has it, and
/// none is ever sent it.
const WHICH_SHARD: &[u8] = b"REDLEASE.WHICH-SHARD";

/// What each live shard connection learned, by its number.
static SHARDS: LazyLock<RwLock<HashMap<u64, Arc<ServerFacts>>>> = LazyLock::new(Default::default);
static NUMBERS: AtomicU64 = AtomicU64::new(1);

/// A command that the shard connection carrying it answers itself with
/// its number (see [`facts_of`]); it goes last in a pipeline, or alone.
pub(crate) fn which_shard() -> Cmd {
    Cmd::new().arg(WHICH_SHARD).to_owned()
}

fn is_which_shard(cmd: &Cmd) -> bool {
    matches!(cmd.args_iter().next(), Some(redis::Arg::Simple(name)) if name == WHICH_SHARD)
}

/// What the shard connection that answered [`which_shard`] with `reply`
/// learned about its server; `None` if the reply is not such an answer, or
/// that connection is gone.
pub(crate) fn facts_of(reply: &Value) -> Option<Arc<ServerFacts>> {
    let Value::Int(number) = reply else {
        return None;
    };
    let shards = SHARDS.read().unwrap_or_else(|p| p.into_inner());
    shards.get(&(*number as u64)).cloned()
}

/// Keeps a shard connection's facts in [`SHARDS`] while any clone of it
/// lives.
#[derive(Debug)]
struct Registered(u64);

impl Drop for Registered {
    fn drop(&mut self) {
        let mut shards = SHARDS.write().unwrap_or_else(|p| p.into_inner());
        shards.remove(&self.0);
    }
}

/// One connection to one shard's server; see the module docs.
#[derive(Clone)]
pub(crate) struct ShardConn {
    conn: MultiplexedConnection,
    registered: Arc<Registered>,
    /// Set once the handshake has read the server's identity on this
    /// connection.
    known: Arc<tokio::sync::OnceCell<()>>,
}

impl Connect for ShardConn {
    fn connect_with_config<'a, T>(info: T, config: AsyncConnectionConfig) -> RedisFuture<'a, Self>
    where
        T: IntoConnectionInfo + Send + 'a,
    {
        Box::pin(async move {
            let conn = MultiplexedConnection::connect_with_config(info, config).await?;
            let number = NUMBERS.fetch_add(1, Ordering::Relaxed);
            Ok(ShardConn {
                conn,
                registered: Arc::new(Registered(number)),
                known: Arc::default(),
            })
        })
    }
}

impl ShardConn {
    /// Reads the server's identity on this connection unless read before:
    /// first thing on the connection that carries a vote, so before any
    /// vote it carries. Not when the connection is made: a connection
    /// that carries no vote (a replica's, a seed's) needs none, and a
    /// stalled replica must not hold up the cluster's first request.
    /// Bounded, like every request, by the request that waits for it; a
    /// failure is that request's, and the next one asks again.
    async fn learn(&self) -> RedisResult<()> {
        let (known, mut conn, number) = (&self.known, self.conn.clone(), self.registered.0);
        known
            .get_or_try_init(|| async move {
                let (facts, _) = handshake(&mut conn).await?;
                SHARDS
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(number, Arc::new(facts));
                Ok::<(), redis::RedisError>(())
            })
            .await
            .map(|_| ())
    }
}

impl ConnectionLike for ShardConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        if is_which_shard(cmd) {
            let number = self.registered.0 as i64;
            return Box::pin(async move {
                self.learn().await?;
                Ok(Value::Int(number))
            });
        }
        self.conn.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let len = pipeline.len();
        let asks = offset + count == len
            && count > 0
            && pipeline.cmd_iter().last().is_some_and(is_which_shard);
        if !asks {
            return self.conn.req_packed_commands(pipeline, offset, count);
        }
        let number = self.registered.0 as i64;
        let mut rest = Pipeline::with_capacity(len - 1);
        for cmd in pipeline.cmd_iter().take(len - 1) {
            rest.add_command(cmd.clone());
        }
        Box::pin(async move {
            self.learn().await?;
            let conn = &mut self.conn;
            let mut replies = if count > 1 {
                conn.req_packed_commands(&rest, offset, count - 1).await?
            } else {
                Vec::new()
            };
            replies.push(Value::Int(number));
            Ok(replies)
        })
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

/// A cluster connection of [`ShardConn`]s, made on first use (no I/O
/// before), and again on the next use if that failed.
#[derive(Clone)]
pub(crate) struct ShardedCluster(Arc<Lazy>);

struct Lazy {
    client: ClusterClient,
    conn: tokio::sync::OnceCell<ClusterConnection<ShardConn>>,
}

impl ShardedCluster {
    pub(crate) fn new(client: ClusterClient) -> ShardedCluster {
        ShardedCluster(Arc::new(Lazy {
            client,
            conn: tokio::sync::OnceCell::new(),
        }))
    }

    /// The connection, made now unless made before.
    pub(crate) async fn get(&self) -> RedisResult<ClusterConnection<ShardConn>> {
        let lazy = &*self.0;
        lazy.conn
            .get_or_try_init(|| lazy.client.get_async_generic_connection::<ShardConn>())
            .await
            .cloned()
    }

    /// What every primary's connection learned about its server (asked of
    /// the connections themselves: no round trip).
    pub(crate) async fn primaries(&self) -> RedisResult<Vec<Arc<ServerFacts>>> {
        let mut conn = self.get().await?;
        let all = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
        let reply = conn.route_command(which_shard(), all).await?;
        let answers: Vec<Value> = match reply {
            Value::Map(pairs) => pairs.into_iter().map(|(_, v)| v).collect(),
            Value::Array(values) => values,
            other => vec![other],
        };
        Ok(answers.iter().filter_map(facts_of).collect())
    }
}

impl ConnectionLike for ShardedCluster {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move { self.get().await?.req_packed_command(cmd).await })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            self.get()
                .await?
                .req_packed_commands(pipeline, offset, count)
                .await
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_question_is_told_apart_from_real_commands() {
        assert!(is_which_shard(&which_shard()));
        assert!(!is_which_shard(&redis::cmd("TIME")));
        let mut get = redis::cmd("GET");
        get.arg("REDLEASE.WHICH-SHARD");
        assert!(!is_which_shard(&get));
    }

    #[test]
    fn an_unknown_number_is_no_answer() {
        assert!(facts_of(&Value::Int(0)).is_none());
        assert!(facts_of(&Value::Nil).is_none());
    }
}
