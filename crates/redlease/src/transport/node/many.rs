//! A node's requests for several locks taken together: the all-or-none
//! acquire, and the release and extend of every key. One call on a
//! server; on a cluster, one call per hash slot (each a script over the
//! keys of its slot), sent together.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use crate::core::keys::{hash_slot, LockKeys};
use crate::core::mode::Hold;
use crate::core::node_error::{NodeError, NodeErrorKind};
use crate::core::token::Token;
use crate::core::vote_guard::ClockSample;
use crate::protocol::acquire::OnRefusal;
use crate::protocol::lease::{ExtendManyRequest, Renewed};
use crate::protocol::lua::{ACQUIRE_ALL, EXTEND_MANY, READ_EXTEND_MANY, RELEASE_ALL, UNRESERVE};
use crate::protocol::many::{
    AcquireAllReply, AcquireAllRequest, ReleaseAllRequest, UnreserveRequest,
};
use crate::protocol::shared::{Members, ReadExtendManyRequest};

use super::{AcquireReply, Gate, Node};

/// Indices of `keys` grouped by hash slot, groups in the order of their
/// first key (one group of all on a server that is not a cluster).
fn by_slot<'a>(cluster: bool, keys: impl Iterator<Item = &'a str>) -> Vec<Vec<usize>> {
    let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
    for (i, key) in keys.enumerate() {
        let slot = if cluster { hash_slot(key) } else { 0 };
        match groups.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, group)) => group.push(i),
            None => groups.push((slot, vec![i])),
        }
    }
    groups.into_iter().map(|(_, group)| group).collect()
}

impl Node {
    /// Takes every lock of `keys` with `token`, or none: a "yes" (judged
    /// like an acquire's) only when all of them were taken here. A
    /// refusal names no key's owner beyond the first held one's. On a
    /// cluster whose keys span slots, a refusal may leave the other slots'
    /// keys taken: the attempt's cleanup releases them (a refusal here
    /// does not rule the node out).
    ///
    /// `reserve`: a waiting caller's reservation mark; a refusal after
    /// which it waits reserves the free names before the first held one
    /// and claims that one (see acquire_all.lua), and a grant uses them
    /// up. [`Node::unreserve`] gives them back.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn acquire_all(
        &self,
        keys: &[LockKeys],
        holds: &[Hold],
        token: &Token,
        ttl_ms: u64,
        timeout: Duration,
        fenced: bool,
        on_refusal: OnRefusal,
        reserve: Option<&Token>,
    ) -> Result<AcquireReply, NodeError> {
        let cluster = self.deployment.is_cluster();
        let groups = by_slot(cluster, keys.iter().map(|k| &*k.lock));
        let calls = groups.iter().map(|group| async move {
            let names: Vec<&str> = group.iter().map(|&i| &*keys[i].lock).collect();
            let holds: Vec<Hold> = group.iter().map(|&i| holds[i]).collect();
            let fence_keys: Vec<String> = match fenced {
                true => group.iter().map(|&i| keys[i].fence()).collect(),
                false => Vec::new(),
            };
            let request = AcquireAllRequest {
                keys: &names,
                fence_keys: &fence_keys,
                token: token.as_str(),
                ttl: Duration::from_millis(ttl_ms),
                fence_expiry: Duration::from_millis(keys[group[0]].fence_expiry_ms),
                bind_lineage: self.binds_lineage(),
                watch_clock: self.watches_clock(),
                pubsub: self.pubsub(),
                tag: self.settings.tag.as_str(),
                on_refusal,
                reserve: reserve.map(Token::as_str),
                holds: &holds,
            };
            let call = request.call();
            let mut conn = self.conn.clone();
            let durability = self.settings.durability;
            let sent = std::time::Instant::now();
            let exchange = Box::pin(async move {
                conn.eval_voted::<AcquireAllReply>(&ACQUIRE_ALL, &call, durability)
                    .await
            });
            let (reply, replicas, shard) = self
                .bounded(timeout, Gate::New, &keys[group[0]].lock, exchange)
                .await?;
            let checked = reply
                .with_clock(request.watch_clock)
                .and_then(|reply| request.check(reply));
            Ok::<_, NodeError>((checked, replicas, shard, sent))
        });
        // Every slot's call, together.
        let answers = join_all(calls).await;
        let mut fences = vec![0u64; keys.len()];
        let mut fewest: Option<u32> = None;
        let mut held = None;
        let mut grants = Vec::new();
        for (group, answer) in groups.iter().zip(answers) {
            let (reply, replicas, shard, sent) = answer?;
            match reply.map_err(|what| self.error(NodeErrorKind::Protocol(what)))? {
                AcquireAllReply::Taken { fences: got, clock } => {
                    if got.len() != group.len() {
                        return Err(self.error(NodeErrorKind::Protocol(format!(
                            "the multi-key acquire answered {} fences for {} keys",
                            got.len(),
                            group.len()
                        ))));
                    }
                    for (&i, fence) in group.iter().zip(got) {
                        fences[i] = fence;
                    }
                    let clock = clock.map(|t| {
                        ClockSample::new(sent, std::time::Instant::now(), t.secs, t.micros)
                    });
                    grants.push((shard, clock));
                    fewest = match (fewest, replicas) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                AcquireAllReply::Held {
                    index,
                    expires_in,
                    waiting,
                    owner,
                } if index < group.len() => {
                    held.get_or_insert((
                        shard,
                        AcquireReply::Held {
                            expires_in,
                            waiting,
                            owner,
                            writer_waits: false,
                        },
                    ));
                }
                AcquireAllReply::Held { index, .. } => {
                    return Err(self.error(NodeErrorKind::Protocol(format!(
                        "the multi-key acquire named key {index} of {}",
                        group.len()
                    ))))
                }
            }
        }
        if let Some((shard, refusal)) = held {
            return self.judge_refusal(shard, refusal);
        }
        // Every slot's server may vote: each judged as an acquire's yes.
        for (shard, clock) in grants {
            self.judge_grant(shard, clock, None, fewest)?;
        }
        Ok(AcquireReply::AcquiredAll {
            fences: fenced.then_some(fences),
            replicas: fewest,
        })
    }

    /// Deletes every key of `keys` that holds `token`; `Ok(true)` only if
    /// all of them did. `announce`: publish the releases waiters marked.
    pub(crate) async fn release_all(
        &self,
        keys: &[Arc<str>],
        holds: &[Hold],
        token: &Token,
        announce: bool,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        let groups = by_slot(self.deployment.is_cluster(), keys.iter().map(|k| &**k));
        let calls = groups.iter().map(|group| {
            let names: Vec<&str> = group.iter().map(|&i| &*keys[i]).collect();
            let holds: Vec<Hold> = group.iter().map(|&i| holds[i]).collect();
            let call = ReleaseAllRequest {
                keys: &names,
                token: token.as_str(),
                pubsub: self.pubsub(),
                announce,
                holds: &holds,
            }
            .call();
            let mut conn = self.conn.clone();
            let request = Box::pin(async move { conn.eval::<Renewed>(&RELEASE_ALL, &call).await });
            self.bounded(timeout, Gate::Cleanup, &keys[group[0]], request)
        });
        let mut all = true;
        for (group, answer) in groups.iter().zip(join_all(calls).await) {
            let Renewed(flags) = answer?;
            if flags.len() != group.len() {
                return Err(self.error(NodeErrorKind::Protocol(format!(
                    "the multi-key release answered {} flags for {} keys",
                    flags.len(),
                    group.len()
                ))));
            }
            all &= flags.iter().all(|&deleted| deleted);
        }
        Ok(all)
    }

    /// Gives back the reservations and claims of mark `mark` on `keys`
    /// (see [`Node::acquire_all`]); the number of reservations freed.
    pub(crate) async fn unreserve(
        &self,
        keys: &[Arc<str>],
        mark: &Token,
        timeout: Duration,
    ) -> Result<u64, NodeError> {
        let groups = by_slot(self.deployment.is_cluster(), keys.iter().map(|k| &**k));
        let calls = groups.iter().map(|group| {
            let names: Vec<&str> = group.iter().map(|&i| &*keys[i]).collect();
            let call = UnreserveRequest {
                keys: &names,
                mark: mark.as_str(),
                pubsub: self.pubsub(),
            }
            .call();
            let mut conn = self.conn.clone();
            let request = Box::pin(async move { conn.eval::<u64>(&UNRESERVE, &call).await });
            self.bounded(timeout, Gate::Cleanup, &keys[group[0]], request)
        });
        let mut freed = 0;
        for answer in join_all(calls).await {
            freed += answer?;
        }
        Ok(freed)
    }

    /// Sets a new TTL on every key of `keys` that holds `token`, each in
    /// its hold of `holds`; `Ok(true)` only if all of them did.
    pub(crate) async fn extend_all(
        &self,
        keys: &[Arc<str>],
        holds: &[Hold],
        token: &Token,
        ttl_ms: u64,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        let cluster = self.deployment.is_cluster();
        // One call per slot and mode.
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for group in by_slot(cluster, keys.iter().map(|k| &**k)) {
            let (shared, alone): (Vec<usize>, Vec<usize>) =
                group.into_iter().partition(|&i| holds[i] == Hold::Shared);
            groups.extend([alone, shared].into_iter().filter(|g| !g.is_empty()));
        }
        let ttl = Duration::from_millis(ttl_ms);
        let bind_lineage = self.binds_lineage();
        let calls = groups.iter().map(|group| {
            let leases = group.iter().map(|&i| (&*keys[i], token.as_str(), ttl));
            let shared = holds[group[0]] == Hold::Shared;
            let ((call, len), lua) = match shared {
                false => (
                    ExtendManyRequest {
                        leases,
                        bind_lineage,
                    }
                    .call(),
                    &*EXTEND_MANY,
                ),
                true => (
                    ReadExtendManyRequest {
                        leases,
                        members: Members::Readers,
                        bind_lineage,
                    }
                    .call(),
                    &*READ_EXTEND_MANY,
                ),
            };
            async move {
                let (reply, replicas): (Renewed, _) = self
                    .run(lua, call, timeout, Gate::New, &keys[group[0]])
                    .await?;
                Ok::<_, NodeError>((reply, replicas, len))
            }
        });
        let mut all = true;
        for answer in join_all(calls).await {
            let (Renewed(flags), replicas, len) = answer?;
            if flags.len() != len {
                return Err(self.error(NodeErrorKind::Protocol(format!(
                    "the renewal answered {} flags for {len} keys",
                    flags.len()
                ))));
            }
            let extended = flags.iter().all(|&f| f);
            if extended {
                self.replicated(replicas)?;
            }
            all &= extended;
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::by_slot;

    #[test]
    fn keys_group_by_slot_on_a_cluster_only() {
        let keys = ["p{a}", "p{b}", "p{a}:x", "p{c}"];
        assert_eq!(by_slot(false, keys.into_iter()), vec![vec![0, 1, 2, 3]]);
        let groups = by_slot(true, keys.into_iter());
        assert!(groups.contains(&vec![0, 2]), "{groups:?}");
        assert_eq!(groups.iter().map(Vec::len).sum::<usize>(), 4);
    }
}
