//! Sending one request to every node at once and stopping as soon as the
//! quorum's outcome is known. The requests still in flight are not dropped:
//! they are handed back so the caller can wait for them (to clean up after
//! a failure) or let them finish in the background (after a success).

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use crate::coord::background::Background;
use crate::core::error::{Op, Shortfall};
use crate::core::node_error::{NodeError, NodeId};
use crate::core::quorum::{quorum, Decision, Tally, Vote};
use crate::core::refusal::Refusal;
use crate::transport::node::{AcquireReply, Node};

type Pending<R> = Pin<Box<dyn Future<Output = Result<R, NodeError>> + Send>>;

/// Requests by node index, each pending, answered but not taken yet, or
/// taken.
///
/// A handful of futures polled together on every wake: cheaper here than
/// `FuturesUnordered`, whose wake-ups cost a measurable round of thread
/// hand-offs per request on a small machine. Every pass polls every request
/// still pending, so each one is on the wire before the caller can act on
/// a decision: a later request to the same node (a release after an
/// acquire, say) then queues behind it on the connection. Answers that come
/// in during a pass wait in their slot (no queue to allocate), and are
/// taken in node order before the next pass.
struct InFlight<R> {
    slots: Vec<Slot<R>>,
}

enum Slot<R> {
    Pending(Pending<R>),
    Answered(Result<R, NodeError>),
    Taken,
}

impl<R> InFlight<R> {
    fn new(requests: impl Iterator<Item = Pending<R>>) -> Self {
        InFlight {
            slots: requests.map(Slot::Pending).collect(),
        }
    }

    /// An answer that came in and was not taken yet, if any.
    fn take_answered(&mut self) -> Option<(usize, Result<R, NodeError>)> {
        let i = self
            .slots
            .iter()
            .position(|slot| matches!(slot, Slot::Answered(_)))?;
        match std::mem::replace(&mut self.slots[i], Slot::Taken) {
            Slot::Answered(answer) => Some((i, answer)),
            _ => unreachable!("the slot was just seen answered"),
        }
    }

    /// The next answer, or `None` when every request has answered.
    async fn next(&mut self) -> Option<(usize, Result<R, NodeError>)> {
        if let Some(answer) = self.take_answered() {
            return Some(answer);
        }
        poll_fn(|cx| {
            let mut pending = false;
            for slot in self.slots.iter_mut() {
                if let Slot::Pending(request) = slot {
                    match request.as_mut().poll(cx) {
                        Poll::Ready(answer) => *slot = Slot::Answered(answer),
                        Poll::Pending => pending = true,
                    }
                }
            }
            match self.take_answered() {
                Some(answer) => Poll::Ready(Some(answer)),
                None if pending => Poll::Pending,
                None => Poll::Ready(None),
            }
        })
        .await
    }

    fn is_empty(&self) -> bool {
        self.slots.iter().all(|slot| matches!(slot, Slot::Taken))
    }

    /// The nodes whose requests have not finished, as bits (node `i`: bit
    /// `i`).
    fn pending_nodes(&self) -> u64 {
        let pending = self.slots.iter().enumerate();
        pending
            .filter(|(_, slot)| matches!(slot, Slot::Pending(_)))
            .fold(0, |bits, (i, _)| bits | 1 << i)
    }
}

/// A node's answer to a quorum request: whether it did what was asked.
pub(crate) trait Answer: Send + 'static {
    /// Did what was asked (took, released or extended the lock, raised the
    /// fencing counter).
    fn agreed(&self) -> bool;

    /// For a refusal by `node`: what it said of the other owner (when its
    /// key expires, how many wait, a fingerprint of the owner), if anything.
    fn refusal(&self, node: NodeId) -> Refusal {
        Refusal::bare(node)
    }
}

/// Release, extend and raising the fencing counter answer yes or no.
impl Answer for bool {
    fn agreed(&self) -> bool {
        *self
    }
}

impl Answer for AcquireReply {
    fn agreed(&self) -> bool {
        matches!(
            self,
            AcquireReply::Acquired { .. } | AcquireReply::AcquiredAll { .. }
        )
    }

    fn refusal(&self, node: NodeId) -> Refusal {
        match self {
            AcquireReply::Held {
                expires_in,
                waiting,
                owner,
                holder,
            } => Refusal::new(node, *expires_in, *waiting, *owner).naming(holder.clone()),
            AcquireReply::Acquired { .. }
            | AcquireReply::AcquiredAll { .. }
            | AcquireReply::PermitsDiffer { .. } => Refusal::bare(node),
        }
    }
}

/// How an answer counts toward the quorum.
fn vote<R: Answer>(answer: &Result<R, NodeError>) -> Vote {
    match answer {
        Ok(a) if a.agreed() => Vote::Yes,
        Ok(_) => Vote::No,
        Err(_) => Vote::Failed,
    }
}

/// The answers gathered so far, and the requests still in flight.
pub(crate) struct Replies<R> {
    /// Answers by node index, in arrival order.
    pub(crate) answers: Vec<(usize, Result<R, NodeError>)>,
    pub(crate) tally: Tally,
    in_flight: InFlight<R>,
}

/// Calls `request` on every node concurrently and returns once the answers
/// decide the quorum either way (or every node has answered). Each request
/// must bound its own time (the node methods take a timeout).
pub(crate) async fn until_decided<R, F, Fut>(nodes: &[Arc<Node>], request: F) -> Replies<R>
where
    R: Answer,
    F: Fn(Arc<Node>) -> Fut,
    Fut: Future<Output = Result<R, NodeError>> + Send + 'static,
{
    until_decided_at(nodes, quorum(nodes.len()), request).await
}

/// [`until_decided`] with a quorum of `quorum` nodes instead of the
/// majority (a semaphore's permit: see [`permit_quorum`](crate::core::quorum::permit_quorum)).
pub(crate) async fn until_decided_at<R, F, Fut>(
    nodes: &[Arc<Node>],
    quorum: usize,
    request: F,
) -> Replies<R>
where
    R: Answer,
    F: Fn(Arc<Node>) -> Fut,
    Fut: Future<Output = Result<R, NodeError>> + Send + 'static,
{
    let mut tally = Tally::with_quorum(nodes.len(), quorum);
    // One node: its answer decides, so the request is awaited where it
    // stands, with nothing to box, collect or poll in turn.
    if let [node] = nodes {
        let answer = request(node.clone()).await;
        tally.record(vote(&answer));
        return Replies {
            answers: vec![(0, answer)],
            tally,
            in_flight: InFlight { slots: Vec::new() },
        };
    }
    let mut in_flight = InFlight::new(
        nodes
            .iter()
            .map(|node| Box::pin(request(node.clone())) as Pending<R>),
    );
    let mut answers = Vec::with_capacity(nodes.len());
    while tally.decision() == Decision::Pending {
        let Some((i, answer)) = in_flight.next().await else {
            break;
        };
        tally.record(vote(&answer));
        answers.push((i, answer));
    }
    Replies {
        answers,
        tally,
        in_flight,
    }
}

impl<R: Answer> Replies<R> {
    /// Waits for the requests still in flight, so every node's answer is known.
    pub(crate) async fn finish(&mut self) {
        while let Some((i, answer)) = self.in_flight.next().await {
            self.tally.record(vote(&answer));
            self.answers.push((i, answer));
        }
    }

    /// Lets the requests still in flight run to completion in the background:
    /// their outcome no longer changes the decision (each is bounded by its
    /// node timeout).
    pub(crate) fn detach(self, background: &Arc<Background>) {
        self.detach_observed(background, |_, _| {});
    }

    /// Like [`detach`](Self::detach), handing each late answer to `observe`
    /// (by node index); `observe` is dropped once they are all in, or with
    /// the task if its runtime shuts down first (a caller whose next request
    /// to the same key must not overtake them moves a
    /// [`Raised`](crate::coord::background::Raised) flag into it).
    pub(crate) fn detach_observed(
        self,
        background: &Arc<Background>,
        mut observe: impl FnMut(usize, &Result<R, NodeError>) + Send + 'static,
    ) {
        if self.in_flight.is_empty() {
            return;
        }
        let mut rest = self.in_flight;
        background.spawn(async move {
            while let Some((i, answer)) = rest.next().await {
                observe(i, &answer);
            }
        });
    }

    /// Whether requests are still in flight.
    pub(crate) fn pending(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// The nodes whose requests have not finished, as bits (node `i`: bit
    /// `i`).
    pub(crate) fn pending_nodes(&self) -> u64 {
        self.in_flight.pending_nodes()
    }

    /// The node errors among the answers.
    pub(crate) fn failures(&self) -> Vec<NodeError> {
        self.answers
            .iter()
            .filter_map(|(_, a)| a.as_ref().err().cloned())
            .collect()
    }

    /// How `op` fell short of a quorum, for the error it returns.
    pub(crate) fn shortfall(&self, op: Op, nodes: &[Arc<Node>]) -> Shortfall {
        Shortfall {
            op,
            succeeded: self.tally.yes,
            nodes: self.tally.nodes,
            quorum: self.tally.quorum,
            refused: self
                .answers
                .iter()
                .filter_map(|(i, a)| match a {
                    Ok(a) if !a.agreed() => Some(a.refusal(nodes[*i].id().clone())),
                    _ => None,
                })
                .collect(),
            failed: self.failures(),
        }
    }
}
