//! [`Ownership`]: one acquisition's claim, token and state, the record
//! every party to a lease shares (the acquire, the holder, the renewer,
//! the release), with the per-node steps on it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::coord::background::{HoldsInFlight, InFlight};
use crate::coord::fanout::{self, Replies};
use crate::core::claim::Claim;
use crate::core::lease_state::{HoldsState, LeaseState, StateCell};
use crate::core::mode::Hold;
use crate::core::node_error::NodeError;
use crate::core::token::{LockerTag, Token};
use crate::core::validity::Timing;
use crate::protocol::claim::InLine;
use crate::transport::node::Node;

/// One acquisition's claim on its names: what it claims (each name with
/// its hold), the token, and which nodes may hold it; once granted, the
/// lease's state too. The lease's one shared record.
pub(crate) struct Ownership {
    pub(crate) claim: Claim,
    pub(crate) token: Token,
    pub(crate) written: Written,
    /// The waiter's place in line and its ticket, for an attempt it made
    /// in line: its cleanup keeps the waiter's turn (see release.lua).
    /// Boxed: only a waiter in line has one.
    pub(crate) in_line: Option<Box<(Arc<str>, u64)>>,
    /// Requests for this token still run in the background (the acquire's
    /// to slower nodes): a release waits for them.
    pub(crate) in_flight: InFlight,
    /// The acquire's node timeout in whole milliseconds, rounded up, for
    /// a closing Locker's release (see [`release_timeout`](Self::release_timeout)).
    /// Kept here, in what would be padding, rather than beside every
    /// record of the lease.
    release_timeout_ms: u32,
    /// What the holder sees of the lease (validity, loss), once granted:
    /// kept here, in the one record every party shares, rather than in an
    /// allocation of its own.
    pub(crate) state: StateCell,
}

impl HoldsState for Ownership {
    fn state(&self) -> &StateCell {
        &self.state
    }
}

/// A release waiting for a slow node's acquire sleeps on the lease's own
/// notifier, so no other lease's requests wake it.
impl HoldsInFlight for Ownership {
    fn in_flight(&self) -> &InFlight {
        &self.in_flight
    }

    fn in_flight_wake(&self) -> &tokio::sync::Notify {
        self.state.notifier()
    }
}

/// `timeout` in whole milliseconds, rounded up (saturating).
fn whole_ms(timeout: Duration) -> u32 {
    u32::try_from(timeout.as_micros().div_ceil(1_000)).unwrap_or(u32::MAX)
}

impl Ownership {
    /// A claim with a fresh token, not yet sent to any of `nodes` nodes,
    /// whose requests may each take `node_timeout`.
    /// Its token names `owner` (a checked label) to anyone who looks.
    pub(crate) fn new(
        claim: Claim,
        nodes: usize,
        tag: &LockerTag,
        owner: Option<&str>,
        lock_delay: Duration,
        node_timeout: Duration,
    ) -> Self {
        let token = Token::generate(tag, owner, lock_delay);
        Ownership::adopted(claim, nodes, token, node_timeout)
    }

    /// A claim on a lease exported by another Locker (see
    /// `Lease::export`): its token, on every node that may hold it.
    pub(crate) fn adopted(
        claim: Claim,
        nodes: usize,
        token: Token,
        node_timeout: Duration,
    ) -> Self {
        Ownership {
            claim,
            token,
            written: Written::new(nodes),
            in_line: None,
            in_flight: InFlight::default(),
            release_timeout_ms: whole_ms(node_timeout),
            state: StateCell::new(LeaseState::pending()),
        }
    }

    /// How long a closing Locker's release of this lease gives each node:
    /// the acquire's node timeout. (A dropped lease's release uses the
    /// timing of its latest acquire or extend, which its guard keeps.)
    pub(crate) fn release_timeout(&self) -> Duration {
        Duration::from_millis(self.release_timeout_ms.into())
    }

    /// The first name's lock key.
    pub(crate) fn key(&self) -> &Arc<str> {
        self.claim.key()
    }

    /// The first name's hold (the only one's, for a lease of one name).
    pub(crate) fn hold(&self) -> Hold {
        self.claim.hold()
    }

    /// Every key held, in the claim's order.
    pub(crate) fn each_key(&self) -> impl Iterator<Item = &Arc<str>> {
        self.claim.keys().iter().map(|k| &k.lock)
    }

    /// The hold on each key of [`each_key`](Self::each_key), in order.
    pub(crate) fn holds(&self) -> &[Hold] {
        self.claim.holds()
    }

    /// Gives our claim back on `node` (see [`Node::give_back`]);
    /// `Ok(false)` if the node did not hold it. `announce`: tell the
    /// waiters. `next`: the place and ticket of the next waiter of this
    /// Locker, which waits in the process, put in line where others wait.
    ///
    /// `marked`: the key's value is known to be marked (the lease was
    /// taken in line, or a task of this Locker waits behind it), so the
    /// release goes straight to the script.
    pub(crate) async fn release_on_node(
        &self,
        node: &Node,
        announce: bool,
        marked: bool,
        next: Option<&(Arc<str>, u64)>,
        timeout: std::time::Duration,
    ) -> Result<bool, NodeError> {
        // The cleanup of a failed attempt in line keeps the waiter's turn.
        let own = self
            .in_line
            .as_deref()
            .filter(|_| !announce)
            .map(|(place, ticket)| {
                (
                    InLine {
                        place,
                        ticket: *ticket,
                    },
                    true,
                )
            });
        let next = next.map(|(place, ticket)| {
            let line = InLine {
                place,
                ticket: *ticket,
            };
            (line, false)
        });
        let in_line = own.or(next);
        let marked = marked || self.in_line.is_some();
        node.give_back(&self.claim, &self.token, announce, marked, in_line, timeout)
            .await
    }

    /// Sets `timing`'s TTL on our claim on every node, until a quorum
    /// decided (see [`fanout::until_decided_at`]): the round of an extend
    /// and of an adoption.
    pub(crate) async fn extend_at_quorum(
        self: &Arc<Self>,
        nodes: &[Arc<Node>],
        timing: Timing,
    ) -> Replies<bool> {
        let quorum = self.claim.quorum(nodes.len());
        fanout::until_decided_at(nodes, quorum, |node| {
            let ownership = self.clone();
            async move {
                ownership
                    .extend_on_node(&node, timing.hold_ms(), timing.node_timeout)
                    .await
            }
        })
        .await
    }

    /// Sets a new TTL on our claim on `node`; `Ok(false)` if it is not
    /// ours there any more.
    pub(crate) async fn extend_on_node(
        &self,
        node: &Node,
        ttl_ms: u64,
        timeout: std::time::Duration,
    ) -> Result<bool, NodeError> {
        node.extend(&self.claim, &self.token, ttl_ms, timeout).await
    }
}

/// Per node, whether our token may have been written there. The token is
/// unique to one attempt, so a node that refused the acquire (the key was
/// held) or was never sent it (see [`NodeErrorKind::Unresponsive`]) cannot
/// hold it: a release there is answered "not held" without a request. This
/// keeps releases, which pass the owed-request gate, from piling up on a
/// stalled node that never saw the acquire.
///
/// [`NodeErrorKind::Unresponsive`]: crate::NodeErrorKind::Unresponsive
/// One bit per node (a Locker has at most
/// [`MAX_NODES`](crate::core::quorum::MAX_NODES)), set while it may.
pub(crate) struct Written(AtomicU64);

impl Written {
    fn new(nodes: usize) -> Self {
        debug_assert!(nodes <= crate::core::quorum::MAX_NODES);
        Written(AtomicU64::new(u64::MAX))
    }

    /// Node `i` is known not to hold our token.
    pub(crate) fn ruled_out(&self, i: usize) {
        self.0.fetch_and(!(1 << i), Ordering::Relaxed);
    }

    /// Whether node `i` may hold our token.
    pub(crate) fn may_hold(&self, i: usize) -> bool {
        self.0.load(Ordering::Relaxed) & (1 << i) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_timeouts_round_up_to_whole_milliseconds() {
        assert_eq!(whole_ms(Duration::from_micros(1_500)), 2);
        assert_eq!(whole_ms(Duration::from_millis(3)), 3);
        assert_eq!(whole_ms(Duration::MAX), u32::MAX);
        let tag = LockerTag::generate();
        let timeout = Duration::from_micros(2_001);
        let claim = Claim::one(
            crate::core::keys::LockKeys::new("p:", "k", 1),
            Hold::Exclusive,
        );
        let ownership = Ownership::new(claim, 3, &tag, None, Duration::ZERO, timeout);
        assert_eq!(ownership.release_timeout(), Duration::from_millis(3));
    }
}
