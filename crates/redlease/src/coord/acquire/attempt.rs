//! One attempt to take a claim: send it to every node at once, decide at
//! quorum, settle the fencing tokens, and either grant it with validity
//! left or undo everything before saying why not.

use std::sync::Arc;
use std::time::Instant;

use crate::coord::acquire::fence;
use crate::coord::acquire::place::{Place, Spelled};
use crate::coord::engine::Engine;
use crate::coord::fanout;
use crate::coord::guard::ReleaseOnDrop;
use crate::coord::ownership::Ownership;
use crate::coord::release::{release_on, Announce};
use crate::core::claim::Claim;
use crate::core::error::{Error, Failure, Op};
use crate::core::lease_state::LateGrants;
use crate::core::mode::Hold;
use crate::core::quorum::{Decision, NodeSet};
use crate::core::validity::Timing;
use crate::transport::node::{AcquireReply, OnRefusal, Take};

/// A lock a quorum granted, not yet a [`Lease`](crate::Lease).
pub(crate) struct Grant {
    /// Releases the lock if the grant is dropped.
    pub(crate) guard: ReleaseOnDrop,
    pub(crate) valid_until: Instant,
    /// The fencing token, if the Locker draws them: a writer's own, or
    /// the last write generation a reader can see (of the first name, for
    /// several locks taken together).
    pub(crate) fence: Option<u64>,
    /// With several locks taken together: each one's fencing token, in
    /// the order of the keys.
    pub(crate) fences: Option<Vec<u64>>,
    /// The nodes that granted it before the quorum was reached.
    pub(crate) granted_by: NodeSet,
    /// The nodes that grant it later, if requests were still in flight.
    pub(crate) late: Option<Arc<LateGrants>>,
    /// With durability on: the fewest replicas that acknowledged it on a
    /// granting node.
    pub(crate) replicas: Option<u32>,
}

/// One attempt at `claim` with `timing`: its names, all of them or none.
/// `in_line`: the waiter's place in line, once it is there. `on_refusal`:
/// whether the caller waits for the claim if this attempt is refused, and
/// so marks a holder for waiters (see [`OnRefusal`]).
///
/// Cancel safe: if the future is dropped mid-flight, the nodes that may
/// hold the new token are released in the background.
pub(crate) async fn attempt(
    engine: &Arc<Engine>,
    resource: &str,
    claim: &Claim,
    timing: Timing,
    in_line: Option<&Place>,
    on_refusal: OnRefusal,
) -> Result<Grant, Failure> {
    // One server under two names: refused before anything is written.
    if let Some(e) = engine.same_server() {
        return Err(e.into());
    }
    let nodes = engine.nodes().len();
    let (tag, owner) = (&engine.settings().tag, &engine.settings().owner);
    let timeout = timing.node_timeout;
    let mut ownership = Ownership::new(
        claim.clone(),
        nodes,
        tag,
        Some(owner),
        timing.lock_delay,
        timeout,
    );
    let spelled = in_line.map(Place::spelled);
    if let Some(spelled) = &spelled {
        ownership.in_line = Some(Box::new((spelled.member.clone(), spelled.ticket)));
    }
    let ownership = Arc::new(ownership);
    let mut guard = ReleaseOnDrop::new(engine.clone(), ownership.clone(), timing);
    // The keys say whether the claim draws a fencing token.
    let fenced = claim.keys().iter().any(|k| k.fence_expiry_ms > 0);
    let start = Instant::now();
    let quorum = claim.quorum(nodes);
    let many = claim.is_set();
    let mut replies = fanout::until_decided_at(engine.nodes(), quorum, |node| {
        let (ownership, spelled) = (ownership.clone(), spelled.clone());
        async move {
            let take = Take {
                claim: &ownership.claim,
                token: &ownership.token,
                ttl_ms: timing.hold_ms(),
                timeout,
                fenced,
                on_refusal,
                in_line: spelled.as_ref().map(Spelled::in_line),
            };
            let reply = node.take(&take).await;
            let unwritten = match &reply {
                // A claim refused on a cluster may have taken the names of
                // other slots there: only cleanup can tell.
                Ok(AcquireReply::Held { .. }) => !ownership.claim.is_set(),
                Ok(AcquireReply::PermitsDiffer { .. }) => true,
                Err(e) => e.kind().never_sent(),
                Ok(AcquireReply::Acquired { .. } | AcquireReply::AcquiredAll { .. }) => false,
            };
            if unwritten {
                ownership.written.ruled_out(node.id().index());
            }
            reply
        }
    })
    .await;

    // A node that has never reached its server may be a granting node's
    // server under another name (a Locker's first locks, before its
    // connections all came up): hear it out before granting, so one server
    // given twice is refused every time, not only once it is known. This
    // waits only while such a node exists.
    if replies.tally.decision() == Decision::Reached
        && engine.nodes().iter().any(|node| {
            node.server_unknown() && !replies.answers.iter().any(|(i, _)| *i == node.id().index())
        })
    {
        replies.finish().await;
    }
    // A semaphore of another size on some node: refused whatever the
    // others say (its holders count against another limit).
    let differs = |replies: &fanout::Replies<AcquireReply>| {
        replies.answers.iter().find_map(|(i, answer)| match answer {
            Ok(AcquireReply::PermitsDiffer { permits }) => Some((*i, *permits)),
            _ => None,
        })
    };
    let failure: Failure = match replies.tally.decision() {
        _ if differs(&replies).is_some() => {
            replies.finish().await;
            let (node, held) = differs(&replies).expect("seen above");
            let asked = claim
                .holds()
                .iter()
                .find_map(|h| match h {
                    Hold::Permit { permits, .. } => Some(permits.get()),
                    _ => None,
                })
                .unwrap_or(0);
            Failure::from(Error::PermitsDiffer {
                resource: resource.to_string(),
                asked,
                held,
                node: engine.nodes()[node].id().clone(),
            })
        }
        // One server configured twice: refuse outright rather than take
        // locks on what is not the majority it looks like. Every node that
        // connected has claimed the server it reached by now, whether or
        // not its answer is in.
        _ if engine.same_server().is_some() => {
            replies.finish().await;
            engine
                .same_server()
                .expect("a pair is never forgotten")
                .into()
        }
        Decision::Reached => {
            let mut granted_by = NodeSet::default();
            // Per key, the counters the granting nodes drew.
            // (Only drawn with fencing on: none to gather otherwise.)
            let mut fences: Vec<Vec<u64>> = match fenced {
                true => vec![Vec::new(); claim.len()],
                false => Vec::new(),
            };
            let mut replicas: Option<u32> = None;
            for (i, answer) in &replies.answers {
                let acked = match answer {
                    Ok(AcquireReply::Acquired {
                        fence,
                        replicas: acked,
                    }) => {
                        if let Some(first) = fences.first_mut() {
                            first.extend(*fence);
                        }
                        acked
                    }
                    Ok(AcquireReply::AcquiredAll {
                        fences: drawn,
                        replicas: acked,
                    }) => {
                        for (key, fence) in fences.iter_mut().zip(drawn.iter().flatten()) {
                            key.push(*fence);
                        }
                        acked
                    }
                    _ => continue,
                };
                granted_by.insert(*i);
                replicas = match (replicas, *acked) {
                    (Some(fewest), Some(acked)) => Some(fewest.min(acked)),
                    (fewest, acked) => fewest.or(acked),
                };
            }
            // Each name's token settled as one lock's would be (drawn on
            // a quorum, raised where it was behind); a read hold draws
            // nothing: its token is the newest write generation a
            // granting node saw, and any quorum shares a node with the
            // quorum that granted (or was raised to) each earlier writer's
            // token, so none is missed.
            let settled = match fenced {
                true => {
                    let mut settled = Ok(Vec::with_capacity(claim.len()));
                    for (i, (key, drawn)) in claim.keys().iter().zip(&fences).enumerate() {
                        let one = match claim.holds()[i] {
                            Hold::Shared => timing
                                .check_usable(Op::Acquire, resource, start)
                                .map(|()| drawn.iter().copied().max().unwrap_or(0)),
                            _ => {
                                Box::pin(fence::settle(engine, resource, key, drawn, timing, start))
                                    .await
                            }
                        };
                        settled = match (settled, one) {
                            (Ok(mut all), Ok(fence)) => {
                                all.push(fence);
                                Ok(all)
                            }
                            (Err(e), _) | (_, Err(e)) => Err(e),
                        };
                    }
                    settled
                }
                false => timing
                    .check_usable(Op::Acquire, resource, start)
                    .map(|()| Vec::new()),
            };
            match settled {
                Ok(settled) => {
                    let fence = settled.first().copied();
                    let fences = many.then_some(settled).filter(|f| !f.is_empty());
                    // The slower nodes' answers cannot change the outcome: let
                    // them finish on their own. The lease waits for them before
                    // its next request, so a release cannot overtake a late SET.
                    // A late yes still counts for a kept-alive lease: that
                    // node holds the key from this acquire's start.
                    let valid_until = timing.valid_until(start);
                    let late = replies.pending().then(|| LateGrants::new(valid_until));
                    if let Some(late) = &late {
                        let recorder = late.recorder();
                        guard.detach(replies, move |i, answer| {
                            if let Ok(
                                AcquireReply::Acquired { .. } | AcquireReply::AcquiredAll { .. },
                            ) = answer
                            {
                                recorder.granted(i);
                            }
                        });
                    }
                    return Ok(Grant {
                        guard,
                        valid_until,
                        fence,
                        fences,
                        granted_by,
                        late,
                        replicas,
                    });
                }
                Err(failure) => failure.into(),
            }
        }
        Decision::Impossible | Decision::Pending => {
            // Wait for the stragglers: the cleanup below must reach every
            // node that may have applied the SET, and must not overtake it.
            replies.finish().await;
            match engine.same_server() {
                Some(pair) => pair.into(),
                None => replies
                    .shortfall(Op::Acquire, engine.nodes())
                    .into_failure(resource, claim.hold()),
            }
        }
    };
    // Undo on every node that may hold the token: one that timed out or
    // failed may still have applied the SET. Boxed: a cold path, whose
    // state need not weigh on every attempt's future.
    Box::pin(async {
        replies.finish().await;
        release_on(
            engine.nodes(),
            &ownership,
            timing.node_timeout,
            Announce::Nobody,
        )
        .await;
    })
    .await;
    guard.disarm();
    Err(failure)
}
