//! A node's steps of a claim's life, one per step whatever the modes:
//! take it, extend it, give it back, downgrade it, leave its queues. One script call
//! on a server; on a cluster, one per hash slot of its names, sent
//! together. The plain lock (one name, alone, no fencing token, no
//! durability, not in line) is taken with plain commands, and given back
//! with `DELIFEQ` where the server has it.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use crate::core::claim::Claim;
use crate::core::keys::hash_slot;
use crate::core::mode::Hold;
use crate::core::node_error::{NodeError, NodeErrorKind};
use crate::core::token::Token;
use crate::core::vote_guard::ClockSample;
use crate::protocol::acquire::OnRefusal;
use crate::protocol::claim::{
    ClaimAcquire, ClaimAcquireReply, ClaimDowngrade, ClaimLeave, ClaimRelease, ClaimRenew, InLine,
    PerName,
};
use crate::protocol::compare_delete;
use crate::protocol::lease::ReleaseReply;
use crate::protocol::lua::{ACQUIRE, DOWNGRADE, EXTEND, LEAVE, RELEASE};
use crate::transport::deployment::Conn;

use super::{AcquireReply, Gate, Node, Request};

/// One attempt's request to a node: the claim, the token, the TTL, and
/// how a refusal is met.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Take<'a> {
    pub(crate) claim: &'a Claim,
    pub(crate) token: &'a Token,
    pub(crate) ttl_ms: u64,
    pub(crate) timeout: Duration,
    /// Draw fencing tokens.
    pub(crate) fenced: bool,
    pub(crate) on_refusal: OnRefusal,
    /// The waiter's place in line, once it is there.
    pub(crate) in_line: Option<InLine<'a>>,
}

/// Indices of `claim`'s names grouped by hash slot, in the order of their
/// first name (one group of all on a server that is not a cluster).
fn by_slot(cluster: bool, claim: &Claim) -> Vec<Vec<usize>> {
    let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
    for (i, keys) in claim.keys().iter().enumerate() {
        let slot = if cluster { hash_slot(&keys.lock) } else { 0 };
        match groups.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, group)) => group.push(i),
            None => groups.push((slot, vec![i])),
        }
    }
    groups.into_iter().map(|(_, group)| group).collect()
}

/// The lock keys and holds of `claim`'s names at `group` (one of
/// [`by_slot`]'s), in order.
fn keys_and_holds<'a>(claim: &'a Claim, group: &[usize]) -> (Vec<&'a str>, Vec<Hold>) {
    group
        .iter()
        .map(|&i| (&*claim.keys()[i].lock, claim.holds()[i]))
        .unzip()
}

/// Runs one call per hash slot at once; `Ok(true)` only if every call
/// answered `true`, the first error otherwise (once all are done).
async fn every_slot(
    calls: impl IntoIterator<Item = impl std::future::Future<Output = Result<bool, NodeError>>>,
) -> Result<bool, NodeError> {
    let mut all = true;
    for answer in join_all(calls).await {
        all &= answer?;
    }
    Ok(all)
}

impl Node {
    /// Takes the claim on this node, every name in its hold or none, and
    /// draws its fencing tokens; or says who holds the first name that is
    /// not ready (see acquire.lua). A "yes" from a server that may not
    /// vote (see `VoteGuard`), or too few replicas acknowledged, is an
    /// error: the names were written there, so a failed attempt still
    /// undoes them. On a cluster whose names span slots, a refusal may
    /// leave the other slots' names taken: the attempt's cleanup gives them
    /// back (a refusal here does not rule the node out).
    pub(crate) async fn take(&self, take: &Take<'_>) -> Result<AcquireReply, NodeError> {
        use std::sync::atomic::Ordering;
        let plain = take.claim.alone().filter(|_| {
            !take.fenced
                && take.in_line.is_none()
                && self.settings.durability.wait().is_none()
                && self.set_nx_get.load(Ordering::Relaxed)
        });
        if let Some(keys) = plain {
            let reply = self
                .acquire_plain(keys, take.token, take.ttl_ms, take.timeout, take.on_refusal)
                .await?;
            match reply {
                Some(reply) => return Ok(reply),
                // Nothing was written: the script does it the old way.
                None => self.set_nx_get.store(false, Ordering::Relaxed),
            }
        }
        // Boxed, so that the plain path's futures do not carry its state.
        Box::pin(self.take_scripted(take)).await
    }

    async fn take_scripted(&self, take: &Take<'_>) -> Result<AcquireReply, NodeError> {
        let claim = take.claim;
        let groups = by_slot(self.deployment.is_cluster(), claim);
        let calls = groups.iter().map(|group| async move {
            let (names, holds) = keys_and_holds(claim, group);
            let fence_keys: Vec<String> = group.iter().map(|&i| claim.keys()[i].fence()).collect();
            let request = ClaimAcquire {
                keys: &names,
                fence_keys: &fence_keys,
                holds: &holds,
                token: take.token.as_str(),
                ttl: Duration::from_millis(take.ttl_ms),
                fence_expiry: Duration::from_millis(claim.keys()[group[0]].fence_expiry_ms),
                bind_lineage: self.binds_lineage(),
                watch_clock: self.watches_clock(),
                pubsub: self.pubsub(),
                fenced: take.fenced,
                tag: self.settings.tag.as_str(),
                on_refusal: take.on_refusal,
                in_line: take.in_line,
            };
            let call = request.call();
            let mut conn = self.conn.clone();
            let durability = self.settings.durability;
            let sent = std::time::Instant::now();
            let exchange = Box::pin(async move {
                conn.eval_voted::<ClaimAcquireReply>(&ACQUIRE, &call, durability)
                    .await
            });
            let (reply, replicas, shard) = self
                .bounded(take.timeout, Gate::New, names[0], exchange)
                .await?;
            let checked = reply
                .with_clock(request.watch_clock)
                .and_then(|reply| request.check(reply));
            Ok::<_, NodeError>((checked, replicas, shard, sent))
        });
        // Every slot's call, together.
        let answers = join_all(calls).await;
        let mut fences = vec![0u64; claim.len()];
        let mut fewest: Option<u32> = None;
        let mut refused = None;
        let mut grants = Vec::new();
        for (group, answer) in groups.iter().zip(answers) {
            let (reply, replicas, shard, sent) = answer?;
            match reply.map_err(|what| self.error(NodeErrorKind::Protocol(what)))? {
                ClaimAcquireReply::Taken { fences: got, clock } => {
                    for (&i, fence) in group.iter().zip(got) {
                        fences[i] = fence;
                    }
                    grants.push((shard, clock, sent));
                    fewest = match (fewest, replicas) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                ClaimAcquireReply::PermitsDiffer { permits } => {
                    return Ok(AcquireReply::PermitsDiffer { permits })
                }
                ClaimAcquireReply::Held {
                    index,
                    expires_in,
                    waiting,
                    owner,
                    holder,
                } => {
                    // The first refusing name in the claim's order.
                    let name = group[index];
                    if refused.as_ref().is_none_or(|&(first, _, _)| name < first) {
                        let held = AcquireReply::Held {
                            expires_in,
                            waiting,
                            owner,
                            holder,
                        };
                        refused = Some((name, shard, held));
                    }
                }
            }
        }
        if let Some((_, shard, held)) = refused {
            return self.judge_refusal(shard, held);
        }
        if claim.is_set() {
            // Every slot's server may vote: each judged as an acquire's yes.
            for (shard, clock, sent) in grants {
                let clock = clock
                    .map(|t| ClockSample::new(sent, std::time::Instant::now(), t.secs, t.micros));
                self.judge_grant(shard, clock, None, fewest)?;
            }
            return Ok(AcquireReply::AcquiredAll {
                fences: take.fenced.then_some(fences),
                replicas: fewest,
            });
        }
        let (shard, clock, sent) = grants.pop().expect("one name, one slot, one grant");
        // A reader's fence is the write generation it saw, never drawn.
        let fence = take.fenced.then(|| fences[0]);
        self.judge_taken(sent, shard, fewest, fence, clock)
    }

    /// Gives the claim back on this node where it still holds `token`
    /// (never anyone else's hold), and serves the names' queues;
    /// `Ok(false)` if some name did not hold it. `announce`: tell the
    /// waiters not in line yet what nobody in line took (not for the
    /// cleanup of a failed attempt). `in_line`: a waiter to put in line
    /// first, the caller's own (the cleanup of its failed attempt, which
    /// keeps its turn) or the next waiter of this Locker, which waits in
    /// the process (see release.lua).
    ///
    /// `marked`: a plain lock's value is known to be marked for waiters
    /// (taken in line, or a task of this Locker waits), so not exactly our
    /// token: the script goes first, not `DELIFEQ` (whose refusal would
    /// cost a round trip). Released past the owed-request gate.
    pub(crate) async fn give_back(
        &self,
        claim: &Claim,
        token: &Token,
        announce: bool,
        marked: bool,
        in_line: Option<(InLine<'_>, bool)>,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        if claim.is_set() {
            return self
                .give_back_set(claim, token, announce, in_line, timeout)
                .await;
        }
        use std::sync::atomic::Ordering;
        let key: Arc<str> = claim.keys()[0].lock.clone();
        let holds = [claim.hold()];
        let request = ClaimRelease {
            keys: &[&key],
            holds: &holds,
            token: token.as_str(),
            bound: self.binds_lineage(),
            pubsub: self.pubsub(),
            announce,
            in_line,
        };
        let call = request.call();
        let cached = self.release_cached.load(Ordering::Relaxed);
        let mut conn = self.conn.clone();
        // A durable lock's value always has its lineage after the token.
        let native = claim.alone().is_some()
            && !marked
            && in_line.is_none()
            && !self.binds_lineage()
            && conn.has_delifeq();
        // The reply, and whether the script ran (so is cached there now).
        let request: Request<(PerName, bool)> = if native {
            let publish = self.pubsub().publish();
            let delifeq = compare_delete::delifeq_told(&key, token.as_str(), publish);
            Box::pin(async move {
                // The DELIFEQ's reply; the watchers' PUBLISH's says nothing.
                let replies = conn.query_pipeline(&delifeq).await?;
                let answer = match replies.into_iter().next() {
                    Some(v) => v.extract_error().and_then(|v| {
                        Ok(<ReleaseReply as redis::FromRedisValue>::from_redis_value(
                            v,
                        )?)
                    }),
                    None => Err(redis::RedisError::from(std::io::Error::other(
                        "no reply to DELIFEQ",
                    ))),
                };
                match answer {
                    // Not exactly our token: marked, bound, or not ours.
                    Ok(ReleaseReply::NotOurs) => {}
                    Ok(ReleaseReply::Released) => return Ok((PerName(vec![true]), false)),
                    Err(e) => match compare_delete::failure(&e) {
                        compare_delete::Failure::NoAnswer => return Err(e),
                        compare_delete::Failure::Refused => conn.refuse_delifeq(),
                        compare_delete::Failure::Other => {}
                    },
                }
                let reply = release_by_script(&mut conn, &call, cached).await?;
                Ok((reply, true))
            })
        } else {
            Box::pin(async move {
                let reply = release_by_script(&mut conn, &call, cached).await?;
                Ok((reply, true))
            })
        };
        let (reply, scripted) = self.bounded(timeout, Gate::Cleanup, &key, request).await?;
        if scripted {
            self.release_cached.store(true, Ordering::Relaxed);
        }
        Ok(reply.all())
    }

    /// [`give_back`](Self::give_back) for several names: one call per
    /// hash slot, together; `Ok(true)` only if every name held `token`.
    async fn give_back_set(
        &self,
        claim: &Claim,
        token: &Token,
        announce: bool,
        in_line: Option<(InLine<'_>, bool)>,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        let groups = by_slot(self.deployment.is_cluster(), claim);
        let calls = groups.iter().map(|group| async move {
            let (names, holds) = keys_and_holds(claim, group);
            let call = ClaimRelease {
                keys: &names,
                holds: &holds,
                token: token.as_str(),
                bound: self.binds_lineage(),
                pubsub: self.pubsub(),
                announce,
                // A failed attempt's cleanup keeps the set's turn on every
                // name it gives back.
                in_line,
            }
            .call();
            let reply: PerName = self
                .unwaited(&RELEASE, call, timeout, Gate::Cleanup, names[0])
                .await?;
            Ok::<_, NodeError>(reply.all())
        });
        every_slot(calls).await
    }

    /// Sets a new TTL on every hold of the claim that is still ours here
    /// (never re-creating one that expired); `Ok(false)` if some hold is
    /// not ours any more. One call per hold and hash slot, together.
    pub(crate) async fn extend(
        &self,
        claim: &Claim,
        token: &Token,
        ttl_ms: u64,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        let cluster = self.deployment.is_cluster();
        let mut groups: Vec<((u16, Hold), Vec<usize>)> = Vec::new();
        for (i, (keys, &hold)) in claim.keys().iter().zip(claim.holds()).enumerate() {
            let slot = if cluster { hash_slot(&keys.lock) } else { 0 };
            match groups.iter_mut().find(|(g, _)| *g == (slot, hold)) {
                Some((_, group)) => group.push(i),
                None => groups.push(((slot, hold), vec![i])),
            }
        }
        let ttl = Duration::from_millis(ttl_ms);
        let calls = groups.iter().map(|((_, hold), group)| async move {
            let holds = group
                .iter()
                .map(|&i| (&*claim.keys()[i].lock, token.as_str(), ttl));
            let (call, _) = ClaimRenew {
                holds,
                hold: *hold,
                bound: self.binds_lineage(),
            }
            .call();
            let first = &claim.keys()[group[0]].lock;
            let (reply, replicas): (PerName, _) =
                self.run(&EXTEND, call, timeout, Gate::New, first).await?;
            if reply.all() {
                self.replicated(replicas)?;
            }
            Ok::<_, NodeError>(reply.all())
        });
        every_slot(calls).await
    }

    /// Turns the claim's holds alone into shared ones of the same token,
    /// atomically (see downgrade.lua); `Ok(true)` only if every name
    /// was ours alone here.
    pub(crate) async fn downgrade(
        &self,
        claim: &Claim,
        token: &Token,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        let groups = by_slot(self.deployment.is_cluster(), claim);
        let calls = groups.iter().map(|group| async move {
            let (names, _) = keys_and_holds(claim, group);
            let call = ClaimDowngrade {
                keys: &names,
                token: token.as_str(),
                bound: self.binds_lineage(),
                pubsub: self.pubsub(),
            }
            .call();
            let (reply, replicas): (PerName, _) = self
                .run(&DOWNGRADE, call, timeout, Gate::New, names[0])
                .await?;
            if reply.all() {
                self.replicated(replicas)?;
            }
            Ok::<_, NodeError>(reply.all())
        });
        every_slot(calls).await
    }

    /// Takes the waiter's `place` out of the claim's queues on this node,
    /// handing on what was reserved for it.
    pub(crate) async fn leave(
        &self,
        claim: &Claim,
        place: &str,
        timeout: Duration,
    ) -> Result<(), NodeError> {
        let groups = by_slot(self.deployment.is_cluster(), claim);
        let calls = groups.iter().map(|group| async move {
            let (names, holds) = keys_and_holds(claim, group);
            let call = ClaimLeave {
                keys: &names,
                holds: &holds,
                place,
                pubsub: self.pubsub(),
            }
            .call();
            let left: i64 = self
                .unwaited(&LEAVE, call, timeout, Gate::Cleanup, names[0])
                .await?;
            debug_assert_eq!(left, 1);
            Ok::<_, NodeError>(())
        });
        for left in join_all(calls).await {
            left?;
        }
        Ok(())
    }
}

impl Node {
    /// Runs `call`, an `EVALSHA` of `lua` whose first key is `key`, with
    /// no durability `WAIT` after it: for requests that give something
    /// back or only steer waiters, which a failover may lose without
    /// harm.
    async fn unwaited<T: redis::FromRedisValue + Send + 'static>(
        &self,
        lua: &'static crate::protocol::lua::Lua,
        call: redis::Cmd,
        timeout: Duration,
        gate: Gate,
        key: &str,
    ) -> Result<T, NodeError> {
        let mut conn = self.conn.clone();
        let request = Box::pin(async move { conn.eval(lua, &call).await });
        self.bounded(timeout, gate, key, request).await
    }
}

/// Runs the release script's `call`: by its hash once it is believed
/// `cached` on the server, else whole, which caches it there.
async fn release_by_script(
    conn: &mut Conn,
    call: &redis::Cmd,
    cached: bool,
) -> Result<PerName, redis::RedisError> {
    if cached {
        conn.eval(&RELEASE, call).await
    } else {
        RELEASE.whole(call).query_async(conn).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::keys::LockKeys;

    #[test]
    fn names_go_by_slot_in_the_order_of_their_first() {
        let keys = |names: &[&str]| {
            names
                .iter()
                .map(|n| LockKeys::new("p:", n, 1000))
                .collect::<Vec<_>>()
        };
        let names = keys(&["a", "b", "c"]);
        let claim = Claim::of(names, vec![Hold::Exclusive; 3]);
        assert_eq!(by_slot(false, &claim), [vec![0, 1, 2]]);
        let groups = by_slot(true, &claim);
        assert_eq!(groups.iter().map(Vec::len).sum::<usize>(), 3);
    }
}
