//! One attempt to take a lock: send the acquire script to every node at
//! once, decide at quorum, settle the fencing token, and either grant the
//! lock with validity left or undo everything before saying why not.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::coord::engine::Engine;
use crate::coord::fanout;
use crate::coord::guard::ReleaseOnDrop;
use crate::coord::release::{release_on, Announce, Ownership};
use crate::core::error::{Error, Op};
use crate::core::fencing;
use crate::core::keys::LockKeys;
use crate::core::lease_state::LateGrants;
use crate::core::quorum::{quorum, Decision};
use crate::core::validity::Timing;
use crate::transport::node::{AcquireReply, OnRefusal};

/// A lock a quorum granted, not yet a [`Lease`](crate::Lease).
pub(crate) struct Grant {
    /// Releases the lock if the grant is dropped.
    pub(crate) guard: ReleaseOnDrop,
    pub(crate) valid_until: Instant,
    /// The fencing token, if the Locker draws them.
    pub(crate) fence: Option<u64>,
    /// The nodes that granted it before the quorum was reached.
    pub(crate) granted_by: Vec<usize>,
    /// The nodes that grant it later, if requests were still in flight.
    pub(crate) late: Option<Arc<LateGrants>>,
    /// With durability on: the fewest replicas that acknowledged it on a
    /// granting node.
    pub(crate) replicas: Option<u32>,
}

/// One attempt on `keys` with `timing`. `on_refusal`: whether the caller
/// waits for the lock if this attempt is refused, and so marks the holder
/// for waiters (see [`OnRefusal`]).
///
/// Cancel safe: if the future is dropped mid-flight, the nodes that may
/// hold the new token are released in the background.
pub(crate) async fn attempt(
    engine: &Arc<Engine>,
    resource: &str,
    keys: &LockKeys,
    timing: Timing,
    on_refusal: OnRefusal,
) -> Result<Grant, Error> {
    // One server under two names: refused before anything is written.
    if let Some(e) = engine.same_server() {
        return Err(e);
    }
    let ownership = Arc::new(Ownership::new(
        keys.lock.clone(),
        engine.nodes().len(),
        &engine.settings().tag,
    ));
    let mut guard = ReleaseOnDrop::new(engine.clone(), ownership.clone(), timing);
    let fenced = engine.settings().fencing;
    let start = Instant::now();
    let mut replies = fanout::until_decided(engine.nodes(), |node| {
        let (keys, ownership) = (keys.clone(), ownership.clone());
        async move {
            let reply = node
                .acquire(
                    &keys,
                    &ownership.token,
                    timing.ttl_ms(),
                    timing.node_timeout,
                    fenced,
                    on_refusal,
                )
                .await;
            let unwritten = match &reply {
                Ok(AcquireReply::Held { .. }) => true,
                Err(e) => e.kind().never_sent(),
                Ok(AcquireReply::Acquired { .. }) => false,
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
    let failure = match replies.tally.decision() {
        // One server configured twice: refuse outright rather than take
        // locks on what is not the majority it looks like. Every node that
        // connected has claimed the server it reached by now, whether or
        // not its answer is in.
        _ if engine.same_server().is_some() => {
            replies.finish().await;
            engine.same_server().expect("a pair is never forgotten")
        }
        Decision::Reached => {
            let (granted_by, fences) = granted(&replies);
            let replicas = replies
                .answers
                .iter()
                .filter_map(|(_, a)| match a {
                    Ok(AcquireReply::Acquired { replicas, .. }) => *replicas,
                    _ => None,
                })
                .min();
            let settled = match fenced {
                true => Box::pin(settle_fence(engine, keys, fences, timing, start))
                    .await
                    .map(Some),
                false => usable(timing, start).map(|()| None),
            };
            match settled {
                Ok(fence) => {
                    // The slower nodes' answers cannot change the outcome: let
                    // them finish on their own. The lease waits for them before
                    // its next request, so a release cannot overtake a late SET.
                    // A late yes still counts for a kept-alive lease: that
                    // node holds the key from this acquire's start.
                    let valid_until = timing.valid_until(start);
                    let late = replies.pending().then(|| LateGrants::new(valid_until));
                    let in_flight = match &late {
                        Some(late) => {
                            let recorder = late.recorder();
                            replies.detach_observed(engine.background(), move |i, answer| {
                                if let Ok(AcquireReply::Acquired { .. }) = answer {
                                    recorder.granted(i);
                                }
                            })
                        }
                        None => None,
                    };
                    guard.set_in_flight(in_flight);
                    return Ok(Grant {
                        guard,
                        valid_until,
                        fence,
                        granted_by,
                        late,
                        replicas,
                    });
                }
                Err(failure) => failure.into_error(engine, resource),
            }
        }
        Decision::Impossible | Decision::Pending => {
            // Wait for the stragglers: the cleanup below must reach every
            // node that may have applied the SET, and must not overtake it.
            replies.finish().await;
            engine.same_server().unwrap_or_else(|| {
                replies
                    .shortfall(Op::Acquire, engine.nodes())
                    .into_error(resource, false)
            })
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

/// Why a quorum that granted the lock still gave no lease.
enum Unsettled {
    Expired { elapsed: Duration, timing: Timing },
    WriteBack(fanout::Replies<bool>),
}

impl Unsettled {
    fn into_error(self, engine: &Engine, resource: &str) -> Error {
        match self {
            Unsettled::Expired { elapsed, timing } => Error::ValidityExhausted {
                op: Op::Acquire,
                resource: resource.to_string(),
                elapsed,
                ttl: timing.ttl,
                drift: timing.drift,
            },
            // Raising the counter is never refused: a shortfall there is
            // failures, reported as this acquire's.
            Unsettled::WriteBack(raised) => raised
                .shortfall(Op::Acquire, engine.nodes())
                .into_error(resource, false),
        }
    }
}

/// The fencing token of a granted acquisition: the largest counter the
/// granting nodes reported, stored on a quorum (written back if needed) and
/// all within the lease's validity.
async fn settle_fence(
    engine: &Engine,
    keys: &LockKeys,
    granted: Vec<u64>,
    timing: Timing,
    start: Instant,
) -> Result<u64, Unsettled> {
    let (fence, write_back) = fencing::choose(&granted, quorum(engine.nodes().len()));
    if write_back {
        let mut raised = fanout::until_decided(engine.nodes(), |node| {
            let keys = keys.clone();
            async move { node.raise_fence(&keys, fence, timing.node_timeout).await }
        })
        .await;
        if raised.tally.decision() != Decision::Reached {
            raised.finish().await;
            return Err(Unsettled::WriteBack(raised));
        }
        raised.detach(engine.background());
    }
    usable(timing, start)?;
    Ok(fence)
}

/// Never hand out a lease that would be reported lost at once.
fn usable(timing: Timing, start: Instant) -> Result<(), Unsettled> {
    let elapsed = start.elapsed();
    if !timing.usable(elapsed) {
        return Err(Unsettled::Expired { elapsed, timing });
    }
    Ok(())
}

/// The nodes that granted the lock, and the fencing counters they reported
/// (none when no token is drawn).
fn granted(replies: &fanout::Replies<AcquireReply>) -> (Vec<usize>, Vec<u64>) {
    let mut nodes = Vec::new();
    let mut fences = Vec::new();
    for (i, answer) in &replies.answers {
        if let Ok(AcquireReply::Acquired { fence, .. }) = answer {
            nodes.push(*i);
            fences.extend(*fence);
        }
    }
    (nodes, fences)
}
