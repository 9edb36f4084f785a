//! A node's acquire: `SET NX` or the acquire script, and the judgement
//! of its vote (the vote guard, durability), and the fencing write-back.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use crate::core::keys::LockKeys;
use crate::core::node_error::{NodeError, NodeErrorKind};
use crate::core::token::Token;
use crate::core::vote_guard::{ClockSample, ServerFacts};
use crate::protocol::lua::{ACQUIRE, RAISE_FENCE, REFUSED};
use crate::transport::shard_conn;

use super::{Gate, Node};

/// What the plain acquire's round trips (see [`Node::acquire`]) came to.
enum Plain {
    /// Taken, with the new key's expiry when the clock guard asked for it.
    Taken(Option<u64>),
    /// Refused, with the follow-up's details and the holder's fingerprint.
    Held(crate::protocol::set_nx::Refusal, u32),
    /// The server does not know `SET ... NX GET`: nothing was written.
    Unsupported,
}

/// A node's answer to an acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// Taken by us, with this node's fencing number (when one was drawn)
    /// and, with durability on, how many replicas acknowledged it.
    Acquired(Option<u64>, Option<u32>),
    /// Held by another owner, who has this long left (`None`: no expiry),
    /// with how many processes (subscriptions) wait for its release there,
    /// and a fingerprint of the owner (see acquire.lua).
    Held(Option<Duration>, u64, u32),
}

/// What a refused acquire does to the holder's value: mark it for waiters
/// (crate docs, "A release is published only when another Locker waits")
/// or leave it alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnRefusal {
    /// The acquire waits for the lock after a refusal: a holder of another
    /// Locker is marked, so that its release is published to the waiter.
    Mark,
    /// The acquire gives up after a refusal (`try_lock`, the last attempt
    /// of a bounded wait): nobody will listen for the release, so the
    /// holder is left as it is and its release publishes nothing.
    LeaveAlone,
}

impl OnRefusal {
    /// The scripts' argument: `"1"` to mark.
    fn flag(self) -> &'static str {
        match self {
            OnRefusal::Mark => "1",
            OnRefusal::LeaveAlone => "0",
        }
    }
}

impl Node {
    /// `SET key token NX PX ttl`, or the holder's remaining TTL. A "yes"
    /// from a server that may not vote (see [`VoteGuard`]) is an error: the
    /// key was written there, so a failed attempt still undoes it.
    ///
    /// `fenced`: also draw a fencing token. With it, or with durability on,
    /// or on a server older than Redis 7.0, this is the acquire script;
    /// otherwise plain commands (see [`set_nx`](crate::protocol::set_nx)).
    /// `on_refusal`: whether a refusal marks the holder for waiters.
    pub(crate) async fn acquire(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl_ms: u64,
        timeout: Duration,
        fenced: bool,
        on_refusal: OnRefusal,
    ) -> Result<AcquireReply, NodeError> {
        use std::sync::atomic::Ordering;
        let plain = !fenced
            && self.settings.durability.wait().is_none()
            && self.set_nx_get.load(Ordering::Relaxed);
        if plain {
            match self
                .acquire_plain(keys, token, ttl_ms, timeout, on_refusal)
                .await?
            {
                Some(reply) => return Ok(reply),
                // Nothing was written: the script does it the old way.
                None => self.set_nx_get.store(false, Ordering::Relaxed),
            }
        }
        // Boxed, so that the plain path's futures do not carry its state.
        Box::pin(self.acquire_scripted(keys, token, ttl_ms, timeout, fenced, on_refusal)).await
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
        let (key, numsub) = (keys.lock.clone(), self.numsub_command());
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
                    let call = REFUSED.call(|c| {
                        c.arg(1)
                            .arg(&*key)
                            .arg(tag.as_str())
                            .arg(numsub)
                            .arg(on_refusal.flag());
                    });
                    let reply: Value = conn.eval(&REFUSED, &call).await?;
                    set_nx::parse_refusal(&reply).map(|refusal| Plain::Held(refusal, owner))
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
                let held = AcquireReply::Held(refusal.expires_in, refusal.waiting, owner);
                return self.judge_refusal(shard, held).map(Some);
            }
            Ok(Plain::Unsupported) => return Ok(None),
            Err(set_nx::Reply::Server { code, message }) => {
                return Err(self.error(NodeErrorKind::Redis { code, message }))
            }
            Err(set_nx::Reply::Shape(what)) => {
                return Err(self.error(NodeErrorKind::Protocol(what)))
            }
        };
        self.judge_grant(shard, clock, None, None).map(Some)
    }

    /// The acquire script: with a fencing token, durability, or on a
    /// server older than Redis 7.0.
    async fn acquire_scripted(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl_ms: u64,
        timeout: Duration,
        fenced: bool,
        on_refusal: OnRefusal,
    ) -> Result<AcquireReply, NodeError> {
        let watch_clock = self.watches_clock();
        let call = ACQUIRE.call(|c| {
            c.arg(2).arg(&*keys.lock).arg(keys.fence());
            c.arg(token.as_str())
                .arg(ttl_ms)
                .arg(keys.fence_expiry_ms)
                .arg(self.lineage_flag())
                .arg(if watch_clock { "1" } else { "0" })
                .arg(self.numsub_command())
                .arg(if fenced { "1" } else { "0" })
                .arg(self.settings.tag.as_str())
                .arg(on_refusal.flag());
        });
        let sent = std::time::Instant::now();
        let mut conn = self.conn.clone();
        let durability = self.settings.durability;
        let request = Box::pin(async move { conn.eval_voted(&ACQUIRE, &call, durability).await });
        let (reply, replicas, shard): (Vec<i64>, _, _) = self
            .bounded(timeout, Gate::New, &keys.lock, request)
            .await?;
        // A "yes" carries the server's clock when asked for.
        let (acquired, value, clock, waiting, owner) = match reply[..] {
            [0, pttl, waiting, owner] => (0, pttl, None, waiting.max(0) as u64, owner as u32),
            [1, v] if !watch_clock => (1, v, None, 0, 0),
            [1, v, secs, micros] if watch_clock && secs >= 0 && micros >= 0 => {
                let received = std::time::Instant::now();
                let clock = ClockSample::new(sent, received, secs as u64, micros as u64);
                (1, v, Some(clock), 0, 0)
            }
            _ => {
                return Err(self.error(NodeErrorKind::Protocol(format!(
                    "acquire script returned {reply:?}"
                ))))
            }
        };
        match (acquired, value) {
            (1, fence) if fence > 0 && fenced => {
                self.judge_grant(shard, clock, Some(fence as u64), replicas)
            }
            (1, 0) if !fenced => self.judge_grant(shard, clock, None, replicas),
            (0, pttl) if pttl >= 0 => self.judge_refusal(
                shard,
                AcquireReply::Held(Some(Duration::from_millis(pttl as u64)), waiting, owner),
            ),
            (0, -1) => self.judge_refusal(shard, AcquireReply::Held(None, waiting, owner)),
            other => Err(self.error(NodeErrorKind::Protocol(format!(
                "acquire script returned {other:?}"
            )))),
        }
    }

    /// A "yes", unless this server may not vote (see [`VoteGuard`]) or
    /// too few replicas acknowledged it: then an error (the key was
    /// written, so a failed attempt still undoes it).
    fn judge_grant(
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
        Ok(AcquireReply::Acquired(fence, replicas))
    }

    /// A "no" counts, except from a node that is another node's server:
    /// its answer is that node's.
    fn judge_refusal(
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
        let call = RAISE_FENCE.call(|c| {
            c.arg(1)
                .arg(&fence_key)
                .arg(fence)
                .arg(keys.fence_expiry_ms);
        });
        let (n, _) = self
            .run(&RAISE_FENCE, call, timeout, Gate::New, &fence_key)
            .await?;
        self.as_flag(n, "raise-fence")
    }

    /// Whether acquire replies carry the server's clock: with the guard
    /// on (a cluster's replies say which shard's server sent them).
    fn watches_clock(&self) -> bool {
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
