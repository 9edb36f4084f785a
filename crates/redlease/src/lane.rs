//! A node's renewal lane: its own connection, with at most one batch of
//! renewals on the wire at a time.
//!
//! Why one at a time: a request the client stops waiting for is still
//! queued on the connection and still executed by Redis. A renewer that
//! sends a new batch every time the last one is late piles stale batches
//! on a slow node, every new batch waits behind them and times out too,
//! and every lease is lost at once (congestion collapse). A lane instead
//! waits for the answer it is owed, while what falls due meanwhile is
//! coalesced into the next batch. If no answer comes within the patience
//! it was given, the connection is dropped (so nothing more queues behind
//! the batch) and the next batch opens a new one.
//!
//! Renewals have a connection of their own so that a large batch never
//! delays an acquire or release in the node's main connection.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Script};

use crate::error::{NodeError, NodeErrorKind};
use crate::node::Node;
use crate::token::Token;

static EXTEND_MANY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/extend_many.lua")));

/// Most leases one script call renews, so no single call keeps a node busy
/// for long; the calls of one batch still share one round trip.
pub(crate) const CHUNK: usize = 1_000;

/// One script call of a batch: `EVALSHA` over up to [`CHUNK`] leases,
/// encoded once.
pub(crate) struct ExtendMany {
    cmd: redis::Cmd,
    len: usize,
}

impl ExtendMany {
    /// A call renewing `(key, token, ttl_ms)` leases.
    pub(crate) fn new<'a>(leases: impl Iterator<Item = (&'a str, &'a Token, u64)> + Clone) -> Self {
        let mut cmd = redis::cmd("EVALSHA");
        let len = leases.clone().count();
        cmd.arg(EXTEND_MANY.get_hash()).arg(len);
        for (key, _, _) in leases.clone() {
            cmd.arg(key);
        }
        for (_, token, ttl_ms) in leases {
            cmd.arg(token.as_str()).arg(ttl_ms);
        }
        ExtendMany { cmd, len }
    }
}

/// What became of one batch.
pub(crate) enum Delivery {
    /// The node answered: per call, one flag per lease (`true`: renewed,
    /// `false`: our token is gone), or the error that call met. An error
    /// leaves the call's fate unknown.
    Answered(Vec<Result<Vec<bool>, NodeError>>),
    /// No answer within the patience. The connection was dropped; the
    /// batch may still be executed when the node wakes up.
    Abandoned,
    /// No connection could be opened: nothing was sent.
    Unsent(NodeError),
}

/// One node's renewal connection.
pub(crate) struct Lane {
    node: Arc<Node>,
    conn: Option<MultiplexedConnection>,
}

impl Lane {
    pub(crate) fn new(node: Arc<Node>) -> Self {
        Lane { node, conn: None }
    }

    pub(crate) fn node(&self) -> &Node {
        &self.node
    }

    /// Sends the calls of one batch in one round trip and waits for the
    /// answer, at most `patience`.
    pub(crate) async fn deliver(&mut self, batch: &[ExtendMany], patience: Duration) -> Delivery {
        let conn = match self.connection().await {
            Ok(conn) => conn,
            Err(e) => return Delivery::Unsent(e),
        };
        let calls = join_all(batch.iter().map(|call| {
            let mut conn = conn.clone();
            async move { run(&mut conn, call).await }
        }));
        match tokio::time::timeout(patience, calls).await {
            Ok(results) => {
                let answers: Vec<_> = results
                    .into_iter()
                    .zip(batch)
                    .map(|(result, call)| self.check(result, call, patience))
                    .collect();
                let broken = answers.iter().any(
                    |a| matches!(a, Err(e) if matches!(e.kind(), NodeErrorKind::Connection(_))),
                );
                if broken {
                    self.conn = None;
                }
                Delivery::Answered(answers)
            }
            Err(_) => {
                // Dropping the last handle closes the socket: nothing more
                // can queue behind the unanswered batch.
                self.conn = None;
                Delivery::Abandoned
            }
        }
    }

    async fn connection(&mut self) -> Result<MultiplexedConnection, NodeError> {
        if let Some(conn) = &self.conn {
            return Ok(conn.clone());
        }
        let timeout = self.node.connect_timeout();
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            // The patience of each batch bounds every request.
            .set_response_timeout(None);
        let connect = self
            .node
            .client()
            .get_multiplexed_async_connection_with_config(&config);
        let conn = match tokio::time::timeout(timeout, connect).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(self.node.redis_error(e, timeout)),
            // A node that accepts the socket but never answers the
            // handshake is silent (paused, overloaded), not broken.
            Err(_) => return Err(self.node.error(NodeErrorKind::Timeout(timeout))),
        };
        self.conn = Some(conn.clone());
        Ok(conn)
    }

    fn check(
        &self,
        result: Result<Vec<u8>, redis::RedisError>,
        call: &ExtendMany,
        patience: Duration,
    ) -> Result<Vec<bool>, NodeError> {
        let flags = result.map_err(|e| self.node.redis_error(e, patience))?;
        if flags.len() != call.len || flags.iter().any(|f| !matches!(f, b'0' | b'1')) {
            return Err(self.node.error(NodeErrorKind::Protocol(format!(
                "renew script returned {} flags for {} leases",
                flags.len(),
                call.len
            ))));
        }
        Ok(flags.into_iter().map(|f| f == b'1').collect())
    }
}

/// Runs one call, loading the script first if the node lost it (a restart
/// or `SCRIPT FLUSH`).
async fn run(conn: &mut MultiplexedConnection, call: &ExtendMany) -> redis::RedisResult<Vec<u8>> {
    match call.cmd.query_async(conn).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            EXTEND_MANY.load_async(conn).await?;
            call.cmd.query_async(conn).await
        }
        other => other,
    }
}
