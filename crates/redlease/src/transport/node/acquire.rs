//! A node's plain acquire (`SET NX`, for the plain lock), the judgement
//! of any acquire's vote (the vote guard, durability), and the fencing
//! write-back.

use std::sync::Arc;
use std::time::Duration;

use crate::core::keys::LockKeys;
use crate::core::node_error::{NodeError, NodeErrorKind};
use crate::core::owner::Holder;
use crate::core::token::Token;
use crate::core::vote_guard::{ClockSample, ServerFacts};
use crate::protocol::acquire::{
    FenceRaised, OnRefusal, RaiseFenceRequest, RefusedReply, RefusedRequest, ServerTime,
};
use crate::protocol::lua::{RAISE_FENCE, REFUSED};
use crate::transport::shard_conn;

use super::{Gate, Node};

/// What the plain acquire's round trips (see [`Node::acquire`]) came to.
enum Plain {
    /// Taken, with the new key's expiry when the clock guard asked for it.
    Taken(Option<u64>),
    /// Refused, with the follow-up's details, the holder's fingerprint
    /// and who its token names.
    Held(RefusedReply, u32, Option<Holder>),
    /// The server does not know `SET ... NX GET`: nothing was written.
    Unsupported,
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
    /// Every name of a claim of several taken by us, with a fencing token
    /// each when drawn.
    AcquiredAll {
        fences: Option<Vec<u64>>,
        replicas: Option<u32>,
    },
    /// The name is a semaphore of this many permits, not the number
    /// asked for: nothing was written.
    PermitsDiffer { permits: u32 },
    /// Held by another owner.
    Held {
        /// How long the owner has left (`None`: no expiry).
        expires_in: Option<Duration>,
        /// How many wait in line for it there.
        waiting: u64,
        /// Who holds it (see [`Owner`](crate::core::refusal::Owner)).
        owner: u32,
        /// Who the holder's token names, if anyone.
        holder: Option<Holder>,
    },
}

impl Node {
    /// The acquire with plain commands; `None` if the server does not know
    /// `SET ... NX GET`.
    pub(super) async fn acquire_plain(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl_ms: u64,
        timeout: Duration,
        on_refusal: OnRefusal,
    ) -> Result<Option<AcquireReply>, NodeError> {
        use crate::protocol::set_nx::{self, SetNx};
        let clock = self.watches_clock();
        let publish = self.pubsub().publish();
        let mut request = set_nx::request(&keys.lock, token.as_str(), ttl_ms, clock, publish);
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
            let _watchers_told = set_nx::told(&mut replies);
            let answer = match set_nx::parse(&replies, clock) {
                Ok(SetNx::Held { owner, holder }) => {
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
                    Ok(Plain::Held(refusal, owner, holder))
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
            Ok(Plain::Held(refusal, owner, holder)) => {
                let held = AcquireReply::Held {
                    expires_in: refusal.expires_in,
                    waiting: refusal.waiting,
                    owner,
                    holder,
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

    /// A scripted acquire's "yes" (with its fencing token or generation),
    /// judged as a vote, with the server's clock it carried (when asked
    /// for) read against `sent`.
    pub(super) fn judge_taken(
        &self,
        sent: std::time::Instant,
        shard: Option<Arc<ServerFacts>>,
        replicas: Option<u32>,
        fence: Option<u64>,
        clock: Option<ServerTime>,
    ) -> Result<AcquireReply, NodeError> {
        let clock = clock.map(|t| {
            let received = std::time::Instant::now();
            ClockSample::new(sent, received, t.secs, t.micros)
        });
        self.judge_grant(shard, clock, fence, replicas)
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
