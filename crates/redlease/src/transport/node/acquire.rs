//! A node's acquire: `SET NX` or the acquire script, and the judgement
//! of its vote (the vote guard, durability), and the fencing write-back.

use std::sync::Arc;
use std::time::Duration;

use crate::core::keys::LockKeys;
use crate::core::node_error::{NodeError, NodeErrorKind};
use crate::core::refusal::READERS_OWNER;
use crate::core::token::Token;
use crate::core::vote_guard::{ClockSample, ServerFacts};
use crate::protocol::acquire::{
    AcquireRequest, AcquireScriptReply, FenceRaised, LeaveQueueRequest, OnRefusal, QueuePlace,
    RaiseFenceRequest, RefusedReply, RefusedRequest, ServerTime,
};
use crate::protocol::lua::{ACQUIRE, LEAVE_QUEUE, RAISE_FENCE, REFUSED};
use crate::transport::shard_conn;

use super::{Gate, Node};

/// What the plain acquire's round trips (see [`Node::acquire`]) came to.
enum Plain {
    /// Taken, with the new key's expiry when the clock guard asked for it.
    Taken(Option<u64>),
    /// Refused, with the follow-up's details and the holder's fingerprint.
    Held(RefusedReply, u32),
    /// The server does not know `SET ... NX GET`: nothing was written.
    Unsupported,
}

/// A scripted acquire's reply, before it is judged (see
/// [`Node::judge_scripted`]).
pub(super) enum Scripted {
    /// Taken, with the fencing token or generation, and the server's
    /// clock when asked for.
    Taken {
        fence: Option<u64>,
        clock: Option<ServerTime>,
    },
    /// Refused, as this reply says.
    Refused(AcquireReply),
}

/// A node's answer to an acquire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// Taken by us.
    Acquired {
        /// This node's fencing counter, when a token was drawn.
        fence: Option<u64>,
        /// With durability on, how many replicas acknowledged it.
        replicas: Option<u32>,
    },
    /// Every lock of a multi-key acquire taken by us (see
    /// [`Node::acquire_all`]), with a fencing token each when drawn.
    AcquiredAll {
        fences: Option<Vec<u64>>,
        replicas: Option<u32>,
    },
    /// The name is a semaphore of this many permits, not the number
    /// asked for (see [`Node::permit_acquire`]): nothing was written.
    PermitsDiffer { permits: u32 },
    /// Held by another owner.
    Held {
        /// How long the owner has left (`None`: no expiry).
        expires_in: Option<Duration>,
        /// How many processes (subscriptions) wait for its release there.
        waiting: u64,
        /// Who holds it (see [`Owner`](crate::core::refusal::Owner)).
        owner: u32,
        /// A waiting writer's mark refused a reader: readers may hold it.
        writer_waits: bool,
    },
}

impl Node {
    /// `SET key token NX PX ttl`, or the holder's remaining TTL. A "yes"
    /// from a server that may not vote (see [`VoteGuard`]) is an error: the
    /// key was written there, so a failed attempt still undoes it.
    ///
    /// `fenced`: also draw a fencing token. With it, or with durability on,
    /// or on a server older than Redis 7.0, this is the acquire script;
    /// otherwise plain commands (see [`set_nx`](crate::protocol::set_nx)).
    /// `on_refusal`: whether a refusal marks the holder for waiters; if
    /// it does and readers refused, `mark` (the waiting writer's name) is
    /// set as the writer-waiting mark, so that new readers wait behind it.
    /// `queue`: the waiter's place in the lock's queue, if it queues (see
    /// `coord::turn`): then it runs the script, which knows a lock
    /// reserved for it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn acquire(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl_ms: u64,
        timeout: Duration,
        fenced: bool,
        on_refusal: OnRefusal,
        mark: Option<&Token>,
        queue: Option<QueuePlace<'_>>,
    ) -> Result<AcquireReply, NodeError> {
        use std::sync::atomic::Ordering;
        let plain = !fenced
            && self.settings.durability.wait().is_none()
            && queue.is_none()
            && self.set_nx_get.load(Ordering::Relaxed);
        let mut reply = None;
        if plain {
            match self
                .acquire_plain(keys, token, ttl_ms, timeout, on_refusal)
                .await?
            {
                Some(answer) => reply = Some(answer),
                // Nothing was written: the script does it the old way.
                None => self.set_nx_get.store(false, Ordering::Relaxed),
            }
        }
        let reply = match reply {
            Some(reply) => reply,
            // Boxed, so that the plain path's futures do not carry its state.
            None => {
                let scripted =
                    self.acquire_scripted(keys, token, ttl_ms, timeout, fenced, on_refusal, queue);
                Box::pin(scripted).await?
            }
        };
        if let AcquireReply::Held {
            owner: READERS_OWNER,
            ..
        } = reply
        {
            if let Some(mark) = mark.filter(|_| on_refusal == OnRefusal::Mark) {
                Box::pin(self.mark_writer(keys, mark, ttl_ms, timeout)).await;
            }
        }
        Ok(reply)
    }

    /// After readers refused a writer that will wait: mark it waiting, so
    /// that new readers queue behind it (see `protocol::shared`). A mark
    /// that fails only lets readers in meanwhile; it is logged.
    async fn mark_writer(&self, keys: &LockKeys, mark: &Token, ttl_ms: u64, timeout: Duration) {
        let ttl = Duration::from_millis(ttl_ms);
        if let Err(e) = self.writer_waits(&keys.lock, mark, ttl, timeout).await {
            tracing::debug!(error = %e, "the writer-waiting mark failed");
        }
    }

    /// The acquire with plain commands; `None` if the server does not know
    /// `SET ... NX GET`.
    async fn acquire_plain(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl_ms: u64,
        timeout: Duration,
        on_refusal: OnRefusal,
    ) -> Result<Option<AcquireReply>, NodeError> {
        use crate::protocol::set_nx::{self, SetNx};
        let clock = self.watches_clock();
        let mut request = set_nx::request(&keys.lock, token.as_str(), ttl_ms, clock);
        // On a cluster: which shard's server voted (see `shard_conn`).
        let ask_shard = self.deployment.is_cluster();
        if ask_shard {
            request.add_command(shard_conn::which_shard());
        }
        let (key, pubsub) = (keys.lock.clone(), self.pubsub());
        let tag = self.settings.tag;
        let mut conn = self.conn.clone();
        let sent = std::time::Instant::now();
        // Both round trips under one timeout: the second only on a refusal.
        let exchange = Box::pin(async move {
            let mut replies = conn.query_pipeline(&request).await?;
            let received = std::time::Instant::now();
            let shard = match ask_shard {
                true => replies.pop().as_ref().and_then(shard_conn::facts_of),
                false => None,
            };
            let answer = match set_nx::parse(&replies, clock) {
                Ok(SetNx::Held { owner }) => {
                    // Marks a holder of another Locker for our waiters
                    // if we wait (see refused.lua).
                    let call = RefusedRequest {
                        key: &key,
                        tag: tag.as_str(),
                        pubsub,
                        on_refusal,
                    }
                    .call();
                    let refusal: RefusedReply = conn.eval(&REFUSED, &call).await?;
                    Ok(Plain::Held(refusal, owner))
                }
                Ok(SetNx::Taken(expiry)) => Ok(Plain::Taken(expiry)),
                Ok(SetNx::Unsupported) => Ok(Plain::Unsupported),
                Err(reply) => Err(reply),
            };
            Ok((answer, received, shard))
        });
        let (answer, received, shard) = self
            .bounded(timeout, Gate::New, &keys.lock, exchange)
            .await?;
        let clock = match answer {
            Ok(Plain::Taken(expiry)) => {
                expiry.map(|expiry| ClockSample::from_expiry(sent, received, expiry, ttl_ms))
            }
            Ok(Plain::Held(refusal, owner)) => {
                let held = AcquireReply::Held {
                    expires_in: refusal.expires_in,
                    waiting: refusal.waiting,
                    owner,
                    writer_waits: false,
                };
                return self.judge_refusal(shard, held).map(Some);
            }
            Ok(Plain::Unsupported) => return Ok(None),
            Err(set_nx::Reply::Server(reply)) => return Err(self.error(reply.into_kind())),
            Err(set_nx::Reply::Shape(what)) => {
                return Err(self.error(NodeErrorKind::Protocol(what)))
            }
        };
        self.judge_grant(shard, clock, None, None).map(Some)
    }

    /// The acquire script: with a fencing token, durability, on a server
    /// older than Redis 7.0, or for a waiter that may have a place in the
    /// lock's queue.
    #[allow(clippy::too_many_arguments)]
    async fn acquire_scripted(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl_ms: u64,
        timeout: Duration,
        fenced: bool,
        on_refusal: OnRefusal,
        queue: Option<QueuePlace<'_>>,
    ) -> Result<AcquireReply, NodeError> {
        let fence_key = keys.fence();
        let request = AcquireRequest {
            key: &keys.lock,
            fence_key: &fence_key,
            token: token.as_str(),
            ttl: Duration::from_millis(ttl_ms),
            fence_expiry: Duration::from_millis(keys.fence_expiry_ms),
            bind_lineage: self.binds_lineage(),
            watch_clock: self.watches_clock(),
            pubsub: self.pubsub(),
            fenced,
            tag: self.settings.tag.as_str(),
            on_refusal,
            queue,
        };
        let call = request.call();
        let sent = std::time::Instant::now();
        let mut conn = self.conn.clone();
        let durability = self.settings.durability;
        let exchange = Box::pin(async move { conn.eval_voted(&ACQUIRE, &call, durability).await });
        let (reply, replicas, shard) = self
            .bounded(timeout, Gate::New, &keys.lock, exchange)
            .await?;
        let answer = request.check(reply).map(|reply| match reply {
            AcquireScriptReply::Taken { fence, clock } => Scripted::Taken { fence, clock },
            AcquireScriptReply::Held {
                expires_in,
                waiting,
                owner,
            } => Scripted::Refused(AcquireReply::Held {
                expires_in,
                waiting,
                owner,
                writer_waits: false,
            }),
        });
        self.judge_scripted(sent, shard, replicas, answer)
    }

    /// A scripted acquire's answer (the acquire script's, a read's or a
    /// permit's), judged: a "yes" as a vote, with the server's clock it
    /// carried (when asked for) read against `sent`; a refusal as one; a
    /// reply that does not answer the request as a protocol error.
    pub(super) fn judge_scripted(
        &self,
        sent: std::time::Instant,
        shard: Option<Arc<ServerFacts>>,
        replicas: Option<u32>,
        answer: Result<Scripted, String>,
    ) -> Result<AcquireReply, NodeError> {
        match answer {
            Ok(Scripted::Taken { fence, clock }) => {
                let clock = clock.map(|t| {
                    let received = std::time::Instant::now();
                    ClockSample::new(sent, received, t.secs, t.micros)
                });
                self.judge_grant(shard, clock, fence, replicas)
            }
            Ok(Scripted::Refused(refusal)) => self.judge_refusal(shard, refusal),
            Err(what) => Err(self.error(NodeErrorKind::Protocol(what))),
        }
    }

    /// A "yes", unless this server may not vote (see [`VoteGuard`]) or
    /// too few replicas acknowledged it: then an error (the key was
    /// written, so a failed attempt still undoes it).
    pub(super) fn judge_grant(
        &self,
        shard: Option<Arc<ServerFacts>>,
        clock: Option<ClockSample>,
        fence: Option<u64>,
        replicas: Option<u32>,
    ) -> Result<AcquireReply, NodeError> {
        if let Some(kind) = self.objection(shard, clock) {
            return Err(self.error(kind));
        }
        self.replicated(replicas)?;
        Ok(AcquireReply::Acquired { fence, replicas })
    }

    /// A "no" counts, except from a node that is another node's server:
    /// its answer is that node's.
    pub(super) fn judge_refusal(
        &self,
        shard: Option<Arc<ServerFacts>>,
        held: AcquireReply,
    ) -> Result<AcquireReply, NodeError> {
        match self.objection(shard, None) {
            Some(kind @ NodeErrorKind::SameServer { .. }) => Err(self.error(kind)),
            _ => Ok(held),
        }
    }

    /// Takes the waiter's `place` off the lock's queue, handing the lock on
    /// if it was reserved for it meanwhile (see `coord::turn`).
    pub(crate) async fn leave_queue(
        &self,
        key: &str,
        place: &str,
        timeout: Duration,
    ) -> Result<(), NodeError> {
        let call = LeaveQueueRequest {
            key,
            place,
            pubsub: self.pubsub(),
        }
        .call();
        let (left, _): (i64, _) = self
            .run(&LEAVE_QUEUE, call, timeout, Gate::Cleanup, key)
            .await?;
        debug_assert_eq!(left, 1);
        Ok(())
    }

    /// Raises the fencing counter to at least `fence`.
    pub(crate) async fn raise_fence(
        &self,
        keys: &LockKeys,
        fence: u64,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        let fence_key = keys.fence();
        let call = RaiseFenceRequest {
            fence_key: &fence_key,
            fence,
            expiry: Duration::from_millis(keys.fence_expiry_ms),
        }
        .call();
        let (FenceRaised, _) = self
            .run(&RAISE_FENCE, call, timeout, Gate::New, &fence_key)
            .await?;
        Ok(true)
    }

    /// Whether acquire replies carry the server's clock: with the guard
    /// on (a cluster's replies say which shard's server sent them).
    pub(super) fn watches_clock(&self) -> bool {
        self.settings.clock_suspension.is_some()
    }

    /// Why the server that sent the reply being judged may not vote "yes"
    /// now, if it may not: the same server as another node, restarted or
    /// with a jumped clock. That server is the main connection's, or on a
    /// cluster `shard`, the one the reply's shard connection reached
    /// (`None` there: that connection is gone, and the vote cannot be
    /// judged). `clock` is a reading from the reply.
    fn objection(
        &self,
        shard: Option<Arc<ServerFacts>>,
        clock: Option<ClockSample>,
    ) -> Option<NodeErrorKind> {
        let facts = match self.deployment.is_cluster() {
            true => match shard {
                Some(facts) => facts,
                None => {
                    return Some(NodeErrorKind::Connection(
                        "the shard connection that carried the vote closed before it was \
                         judged; it is not counted"
                            .to_string(),
                    ))
                }
            },
            false => self.conn.server_facts()?,
        };
        let mut claimed = self.claimed.lock().unwrap_or_else(|p| p.into_inner());
        if !claimed.as_ref().is_some_and(|c| Arc::ptr_eq(c, &facts)) {
            if let Err(same_as) = self.settings.registry.claim(&facts.run_id, self.id.index()) {
                return Some(NodeErrorKind::SameServer { same_as });
            }
            *claimed = Some(facts.clone());
        }
        drop(claimed);
        // The reply's arrival stands for now: a few microseconds earlier,
        // so a quarantine is judged, if anything, a little longer.
        let now = clock.map_or_else(std::time::Instant::now, |c| c.received);
        self.guard.objection(&facts, clock, now)
    }
}
