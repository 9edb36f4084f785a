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

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::core::mode::Hold;
use crate::core::node_error::{NodeError, NodeErrorKind};
use crate::protocol::claim::{ClaimRenew, PerName};
use crate::protocol::lua::{Lua, EXTEND};
use crate::transport::deployment::Conn;
use crate::transport::node::{write_off_after, Node};
use futures_util::stream::{FuturesUnordered, StreamExt};

/// Most leases one script call renews, so no single call keeps a node busy
/// for long; the calls of one batch still share one round trip.
pub(crate) const CHUNK: usize = 1_000;

/// How long the other shards of a cluster may answer after the first did,
/// at least.
const STRAGGLER_GRACE: Duration = Duration::from_millis(50);

/// One script call of a batch: `EVALSHA` over up to [`CHUNK`] leases,
/// encoded once.
pub(crate) struct ExtendMany {
    cmd: Arc<redis::Cmd>,
    len: usize,
    /// The hash slot of every key, when calls are split by slot (a cluster).
    slot: Option<u16>,
    /// The script called, to load it where the node lost it.
    lua: &'static Lua,
}

impl ExtendMany {
    /// A call renewing `(key, token, ttl)` holds of one kind, `hold`, all
    /// in `slot` if given; `bind_lineage`: the holds are bound to their
    /// lineage.
    pub(crate) fn new<'a>(
        holds: impl Iterator<Item = (&'a str, &'a str, Duration)> + Clone,
        hold: Hold,
        slot: Option<u16>,
        bind_lineage: bool,
    ) -> Self {
        let (cmd, len) = ClaimRenew {
            holds,
            hold,
            bound: bind_lineage,
        }
        .call();
        ExtendMany {
            cmd: Arc::new(cmd),
            len,
            slot,
            lua: &EXTEND,
        }
    }

    /// How many leases the call renews.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// What became of one batch.
pub(crate) enum Delivery {
    /// The node answered: per call, one flag per lease (`true`: renewed,
    /// `false`: our token is gone), or the error that call met. An error
    /// leaves the call's fate unknown. `None`: on a cluster, that call's
    /// shard did not answer in time (or still owed an earlier call, so it
    /// was not sent), while others did.
    Answered(Vec<Option<Result<Vec<bool>, NodeError>>>),
    /// No answer within the patience. The connection was dropped; the
    /// batch may still be executed when the node wakes up.
    Abandoned,
    /// No connection could be opened: nothing was sent.
    Unsent(NodeError),
}

/// One node's renewal connection.
pub(crate) struct Lane {
    node: Arc<Node>,
    conn: Option<Conn>,
    /// On a cluster: slots whose last call went unanswered and is still
    /// awaited in the background. Their next calls are not sent, so a
    /// stalled shard gets no pile of renewals, while the connection (to
    /// every shard) stays up for the others.
    owed_slots: Arc<Mutex<HashSet<u16>>>,
}

impl Lane {
    pub(crate) fn new(node: Arc<Node>) -> Self {
        Lane {
            node,
            conn: None,
            owed_slots: Arc::default(),
        }
    }

    pub(crate) fn node(&self) -> &Node {
        &self.node
    }

    /// Sends the calls of one batch in one round trip and waits for the
    /// answer, at most `patience`.
    ///
    /// On a cluster the calls go to different shards. Once one has been
    /// answered, the rest get only a short grace ([`STRAGGLER_GRACE`], or
    /// four times the time the first answer took, when longer): a stalled
    /// shard must not hold back the renewals the others confirmed until
    /// those leases run out. Its calls are still awaited
    /// in the background, and its slots are skipped until they are answered.
    pub(crate) async fn deliver(&mut self, batch: &[ExtendMany], patience: Duration) -> Delivery {
        let conn = match self.connection().await {
            Ok(conn) => conn,
            Err(e) => return Delivery::Unsent(e),
        };
        let by_slot = batch.iter().any(|call| call.slot.is_some());
        let started = tokio::time::Instant::now();
        let mut deadline = started + patience;
        let mut results: Vec<Option<redis::RedisResult<Flags>>> =
            batch.iter().map(|_| None).collect();
        let sent: Vec<bool> = batch
            .iter()
            .map(|call| !call.slot.is_some_and(|slot| self.owes(slot)))
            .collect();
        let mut pending: FuturesUnordered<_> = batch
            .iter()
            .enumerate()
            .filter(|&(k, _)| sent[k])
            .map(|(k, call)| {
                let durability = self.node.durability();
                let request = run(conn.clone(), call.lua, call.cmd.clone(), durability);
                async move { (k, request.await) }
            })
            .collect();
        while !pending.is_empty() {
            match tokio::time::timeout_at(deadline, pending.next()).await {
                Ok(Some((k, result))) => {
                    if by_slot && results.iter().all(Option::is_none) {
                        let grace = STRAGGLER_GRACE.max(4 * started.elapsed());
                        deadline = deadline.min(tokio::time::Instant::now() + grace);
                    }
                    results[k] = Some(result);
                }
                Ok(None) | Err(_) => break,
            }
        }
        if !pending.is_empty() {
            if by_slot {
                let out = (0..batch.len())
                    .filter(|&k| sent[k] && results[k].is_none())
                    .filter_map(|k| batch[k].slot);
                self.await_in_background(pending, batch, out.collect(), patience);
            } else {
                // Dropping the last handle closes the socket: nothing more
                // can queue behind the unanswered batch.
                self.conn = None;
            }
        }
        if results.iter().all(Option::is_none) {
            return Delivery::Abandoned;
        }
        let answers: Vec<_> = results
            .into_iter()
            .zip(batch)
            .map(|(result, call)| result.map(|r| self.check(r, call, patience)))
            .collect();
        let broken = answers
            .iter()
            .any(|a| matches!(a, Some(Err(e)) if matches!(e.kind(), NodeErrorKind::Connection(_))));
        // A cluster connection mends its shards' connections itself.
        if broken && !by_slot {
            self.conn = None;
        }
        Delivery::Answered(answers)
    }

    fn owes(&self, slot: u16) -> bool {
        lock(&self.owed_slots).contains(&slot)
    }

    /// Keeps waiting for the calls a cluster's shard did not answer in time
    /// (until they are written off), and skips their slots meanwhile.
    fn await_in_background<F>(
        &self,
        mut pending: FuturesUnordered<F>,
        batch: &[ExtendMany],
        mut out: HashSet<u16>,
        patience: Duration,
    ) where
        F: std::future::Future<Output = (usize, redis::RedisResult<Flags>)> + Send + 'static,
    {
        let slots: Vec<Option<u16>> = batch.iter().map(|call| call.slot).collect();
        let owed = self.owed_slots.clone();
        lock(&owed).extend(out.iter().copied());
        let write_off = write_off_after(patience);
        tokio::spawn(async move {
            let drain = async {
                while let Some((k, _)) = pending.next().await {
                    if let Some(slot) = slots[k] {
                        lock(&owed).remove(&slot);
                        out.remove(&slot);
                    }
                }
            };
            let _ = tokio::time::timeout(write_off, drain).await;
            let mut owed = lock(&owed);
            for slot in out {
                owed.remove(&slot);
            }
        });
    }

    async fn connection(&mut self) -> Result<Conn, NodeError> {
        if let Some(conn) = &self.conn {
            return Ok(conn.clone());
        }
        let timeout = self.node.connect_timeout();
        let connect = self.node.renewal_connection();
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
        result: Result<Flags, redis::RedisError>,
        call: &ExtendMany,
        patience: Duration,
    ) -> Result<Vec<bool>, NodeError> {
        let (PerName(flags), replicas) = result.map_err(|e| self.node.redis_error(e, patience))?;
        if flags.len() != call.len {
            return Err(self.node.error(NodeErrorKind::Protocol(format!(
                "the renewal script returned {} flags for {} leases",
                flags.len(),
                call.len
            ))));
        }
        let acknowledged = replicas.unwrap_or(0);
        if let Some(wanted) = self.node.durability().shortfall(acknowledged) {
            // Renewed on the primary, not where a failover would look.
            return Err(self.node.error(NodeErrorKind::NotReplicated {
                acknowledged,
                wanted,
            }));
        }
        Ok(flags)
    }
}

/// A call's answer: one flag per lease, and with durability on the replicas
/// that acknowledged it.
type Flags = (PerName, Option<u32>);

/// Runs one call, loading the script first if the node lost it (a restart
/// or `SCRIPT FLUSH`).
async fn run(
    mut conn: Conn,
    lua: &'static Lua,
    cmd: Arc<redis::Cmd>,
    durability: crate::core::durability::Durability,
) -> redis::RedisResult<Flags> {
    conn.eval_waited(lua, &cmd, durability).await
}

fn lock(slots: &Mutex<HashSet<u16>>) -> std::sync::MutexGuard<'_, HashSet<u16>> {
    slots.lock().unwrap_or_else(|p| p.into_inner())
}
