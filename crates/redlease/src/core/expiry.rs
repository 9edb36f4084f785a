//! What a client knows of when each node's copy of a lock key expires, and
//! the validity that knowledge gives the lease. Pure: instants come in as
//! arguments, so every rule is tested without Redis.
//!
//! A node that confirmed a request sent at `sent` with TTL `ttl` holds the
//! key at least until `sent + ttl - drift(ttl)` on our clock: it applied
//! the TTL after `sent`, and its clock may run fast by the drift allowance.
//! The lease is valid while a quorum of nodes hold it, so it is valid until
//! the quorum-th latest of those instants. Each node's bound moves on its
//! own answers only, so leases are decided at quorum: a slow minority never
//! holds a lease back.
//!
//! A node that says our token is gone drops out, but the lock is lost to
//! refusals only when so many nodes refused that no quorum can hold it any
//! more. Short of that, the lease runs until the end it had (unless a
//! quorum confirms it meanwhile): the nodes that would make up a quorum
//! may just not have answered yet, such as one whose yes to the acquire
//! came after the quorum decided it (it counts from the acquire's start).
//!
//! Requests to one node travel in order on one connection, so the latest
//! confirmation is the latest TTL applied. The exception is a request whose
//! fate is unknown (its connection was abandoned): it may still be applied
//! later, after newer ones. With the same TTL that only moves the expiry
//! later; with a shorter one it can move it earlier, so such a request caps
//! what later confirmations of that node may promise (`doubt`).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use smallvec::{smallvec, SmallVec};

/// How one node's latest answer about a lease went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Answer {
    /// It holds our token and applied the TTL.
    Confirmed,
    /// Our token is gone there.
    Refused,
    /// It answered with an error, or the connection failed.
    Failed,
}

/// One node's part of a lease, in 16 bytes: the renewer reads and writes
/// these for every lease on every answer, so they are kept small (an
/// `Option<Instant>` and an `Option<Duration>` alone would take 32).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct NodeBound {
    /// The key lives there at least until this instant (drift subtracted),
    /// as an [`Offset`]; [`NONE`]: not known to hold our token.
    until: Offset,
    /// The shortest TTL of a request whose fate is unknown, in whole
    /// milliseconds (what Redis is told; a TTL beyond `u32::MAX` ms is
    /// counted as that, which only trusts less); [`NO_DOUBT`]: none.
    doubt: u32,
    /// The latest answer, if any came since the lease was taken.
    last: Option<Answer>,
}

/// An instant as signed nanoseconds from [`epoch`]: exact, and wide
/// enough for ±292 years.
type Offset = i64;
const NONE: Offset = Offset::MIN;
const NO_DOUBT: u32 = u32::MAX;

/// What offsets count from: an instant fixed once per process (its value
/// does not matter; instants before it are negative offsets).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn offset(t: Instant) -> Offset {
    let nanos = |d: Duration| Offset::try_from(d.as_nanos()).unwrap_or(Offset::MAX);
    let epoch = epoch();
    match t.checked_duration_since(epoch) {
        Some(after) => nanos(after),
        None => -nanos(epoch - t),
    }
}

fn instant(offset: Offset) -> Option<Instant> {
    if offset == NONE {
        return None;
    }
    let magnitude = Duration::from_nanos(offset.unsigned_abs());
    Some(match offset >= 0 {
        true => epoch() + magnitude,
        false => epoch() - magnitude,
    })
}

/// Nodes whose bounds are kept inline, without an allocation of their
/// own: with 100,000 leases, a separate allocation per lease is a cache
/// miss on every answer, and took most of the renewer's time.
const INLINE: usize = 5;

/// The per-node expiry bounds of one lease.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ExpiryBounds {
    nodes: SmallVec<[NodeBound; INLINE]>,
    /// The earliest end a request sent to every node may have set (see
    /// [`sending_to_all`](Self::sending_to_all)), as an offset; [`NONE`]:
    /// none sent. A late answer to the acquire promises no more than this.
    cap: Offset,
    /// The latest renewal round any node confirmed (0: the acquire), and
    /// the nodes that confirmed it. Rounds only grow, and the renewer asks
    /// about its current round, which no confirmation is newer than: one
    /// round and one set say all it asks.
    round: u64,
    confirmed: u64,
    quorum: u32,
}

impl ExpiryBounds {
    /// Bounds over `nodes` nodes, of which `quorum` must hold the lease
    /// (a majority, or a permit's quorum), `granted` (node indexes) holding
    /// it `until` (the acquire's `start + ttl - drift`).
    pub(crate) fn new(
        nodes: usize,
        quorum: usize,
        granted: impl IntoIterator<Item = usize>,
        until: Instant,
    ) -> Self {
        assert!(nodes <= crate::core::quorum::MAX_NODES, "one bit per node");
        let until = offset(until);
        let mut bounds = ExpiryBounds {
            nodes: smallvec![
                NodeBound {
                    until: NONE,
                    doubt: NO_DOUBT,
                    last: None,
                };
                nodes
            ],
            cap: NONE,
            round: 0,
            // Every node is at round 0 (the acquire) from the start.
            confirmed: u64::MAX,
            quorum: u32::try_from(quorum).unwrap_or(u32::MAX),
        };
        for i in granted {
            if let Some(node) = bounds.nodes.get_mut(i) {
                node.until = until;
            }
        }
        bounds
    }

    /// How many nodes the lease is on.
    pub(crate) fn nodes(&self) -> usize {
        self.nodes.len()
    }

    fn quorum(&self) -> usize {
        self.quorum as usize
    }

    /// Node `i` confirmed a request of renewal round `round`, sent at
    /// `sent` with `ttl` and drift allowance `drift`.
    pub(crate) fn confirmed(
        &mut self,
        i: usize,
        sent: Instant,
        ttl: Duration,
        drift: Duration,
        round: u64,
    ) {
        if round > self.round {
            self.round = round;
            self.confirmed = 0;
        }
        if round == self.round {
            self.confirmed |= 1 << i;
        }
        // An unknown request with a shorter TTL may still land after this one.
        let doubt = self.nodes[i].doubt;
        let ttl = match doubt {
            NO_DOUBT => ttl,
            d => Duration::from_millis(d.into()).min(ttl),
        };
        let until = offset(sent + ttl.saturating_sub(drift));
        let node = &mut self.nodes[i];
        node.until = until;
        node.last = Some(Answer::Confirmed);
    }

    /// Node `i` said yes to the acquire after the quorum had decided it:
    /// it holds the key until `until`, the acquire's bound (capped by what
    /// any shorter TTL sent since may have set). An answer it gave since
    /// is newer: a confirmation already moved its bound, and after a
    /// refusal the key may have gone again, so either way this is ignored.
    pub(crate) fn granted_late(&mut self, i: usize, until: Instant) {
        let until = match self.cap {
            NONE => offset(until),
            cap => cap.min(offset(until)),
        };
        if let Some(node) = self.nodes.get_mut(i)
            && node.until == NONE
            && node.last != Some(Answer::Refused)
        {
            node.until = until;
        }
    }

    /// Node `i` answered that our token is gone.
    pub(crate) fn refused(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        node.until = NONE;
        node.last = Some(Answer::Refused);
    }

    /// Node `i` failed a request that may or may not have been applied
    /// (sent at `sent` with `ttl`), or whose connection was abandoned.
    pub(crate) fn unknown(
        &mut self,
        i: usize,
        sent: Instant,
        ttl: Duration,
        drift: Duration,
        failed: bool,
    ) {
        // If applied, whenever that is, the key lives at least this long.
        let if_applied = offset(sent + ttl.saturating_sub(drift));
        let node = &mut self.nodes[i];
        if node.until != NONE {
            node.until = node.until.min(if_applied);
        }
        let ttl = u32::try_from(ttl.as_millis()).unwrap_or(NO_DOUBT - 1);
        node.doubt = node.doubt.min(ttl);
        if failed {
            node.last = Some(Answer::Failed);
        }
    }

    /// A request to node `i` could not even be sent: no connection could
    /// be opened. `failed`: it was refused or broke (an error), rather than
    /// left unanswered (a silent node).
    pub(crate) fn unsent(&mut self, i: usize, failed: bool) {
        if failed {
            self.nodes[i].last = Some(Answer::Failed);
        }
    }

    /// The nodes whose latest answer said our token is gone.
    pub(crate) fn refused_nodes(&self) -> impl Iterator<Item = usize> + '_ {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.last == Some(Answer::Refused))
            .map(|(i, _)| i)
    }

    /// A request with `ttl` is about to be sent at `now` to every node: a
    /// node that applies it keeps the key only `ttl` from then, which may
    /// be shorter than what it promised before.
    pub(crate) fn sending_to_all(&mut self, now: Instant, ttl: Duration, drift: Duration) {
        let cap = offset(now + ttl.saturating_sub(drift));
        for node in self.nodes.iter_mut().filter(|n| n.until != NONE) {
            node.until = node.until.min(cap);
        }
        self.cap = match self.cap {
            NONE => cap,
            old => old.min(cap),
        };
    }

    /// The bounds of the nodes known to hold the key.
    fn untils(&self) -> impl Iterator<Item = Offset> + '_ {
        self.nodes.iter().map(|n| n.until).filter(|&u| u != NONE)
    }

    /// Until when a quorum holds the key: the quorum-th latest node bound.
    /// `None` if fewer than a quorum are known to hold it.
    pub(crate) fn valid_until(&self) -> Option<Instant> {
        // The latest bound that at least a quorum of bounds reach. No
        // allocation: this runs for every lease on every node's answer,
        // and there are few nodes.
        let quorum = self.quorum();
        let until = self
            .untils()
            .filter(|&u| self.untils().filter(|&v| v >= u).count() >= quorum)
            .max()?;
        instant(until)
    }

    /// Until when the lease may still be trusted, given the end published
    /// so far (`current`); `None` once refusals alone rule out a quorum
    /// ([`refused_by_quorum`](Self::refused_by_quorum)): the lock is not
    /// ours. While a quorum is known to hold the key, the quorum-th latest
    /// bound ([`valid_until`](Self::valid_until)). A node that refused
    /// while the nodes that would make up a quorum with the others have not
    /// confirmed yet (one whose yes to the acquire never came, or whose
    /// renewals are slower) takes nothing back: the lease runs no later
    /// than `current`, nor than the latest bound of a node known to hold
    /// it, and ends there unless a quorum confirms meanwhile.
    pub(crate) fn trusted_until(&self, current: Instant) -> Option<Instant> {
        if self.refused_by_quorum() {
            return None;
        }
        if let Some(until) = self.valid_until() {
            return Some(until);
        }
        let latest = self.untils().max().and_then(instant);
        Some(latest.map_or(current, |l| l.min(current)))
    }

    /// Whether a quorum of nodes that still hold the key confirmed renewal
    /// round `round` or a later one. `round` is the current round: older
    /// than the latest one confirmed, the answer is no (a quorum of it is
    /// not tracked, and nothing asks).
    pub(crate) fn confirmed_by_quorum(&self, round: u64) -> bool {
        if round != self.round {
            return false;
        }
        let confirmed = self
            .nodes
            .iter()
            .enumerate()
            .filter(|&(i, n)| n.until != NONE && self.confirmed & (1 << i) != 0)
            .count();
        confirmed >= self.quorum()
    }

    /// Whether refusals alone rule out a quorum: the lock is not ours.
    pub(crate) fn refused_by_quorum(&self) -> bool {
        let refused = self
            .nodes
            .iter()
            .filter(|n| n.last == Some(Answer::Refused))
            .count();
        refused > self.nodes.len() - self.quorum()
    }

    /// Whether nodes whose latest answer was an error alone rule out a
    /// quorum (as opposed to nodes that are merely slow or silent).
    pub(crate) fn failed_by_quorum(&self) -> bool {
        let failed = self
            .nodes
            .iter()
            .filter(|n| n.last == Some(Answer::Failed))
            .count();
        failed > self.nodes.len() - self.quorum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const TTL: Duration = Duration::from_millis(1_000);
    const DRIFT: Duration = Duration::from_millis(12);

    fn granted(nodes: usize, by: &[usize], t0: Instant) -> ExpiryBounds {
        let quorum = crate::core::quorum::quorum(nodes);
        ExpiryBounds::new(nodes, quorum, by.iter().copied(), t0 + TTL - DRIFT)
    }

    #[test]
    fn a_fresh_lease_is_valid_until_its_acquire_bound() {
        let t0 = Instant::now();
        assert_eq!(granted(3, &[0, 1], t0).valid_until(), Some(t0 + 988 * MS));
        assert_eq!(granted(3, &[0], t0).valid_until(), None, "no quorum");
    }

    #[test]
    fn a_quorum_of_confirmations_moves_the_end_and_a_slow_minority_does_not_matter() {
        let t0 = Instant::now();
        let mut b = granted(3, &[0, 1, 2], t0);
        // Node 2 is paused: it never answers. Nodes 0 and 1 confirm.
        b.confirmed(0, t0 + 300 * MS, TTL, DRIFT, 1);
        assert_eq!(
            b.valid_until(),
            Some(t0 + 988 * MS),
            "one node is not a quorum"
        );
        b.confirmed(1, t0 + 310 * MS, TTL, DRIFT, 1);
        // The quorum-th latest: node 0's 1288 and node 1's 1298 vs node 2's 988.
        assert_eq!(b.valid_until(), Some(t0 + 1_288 * MS));
    }

    #[test]
    fn five_nodes_take_the_third_latest() {
        let t0 = Instant::now();
        let mut b = granted(5, &[0, 1, 2, 3, 4], t0);
        for (i, at) in [(0, 100), (1, 400), (3, 200)] {
            b.confirmed(i, t0 + at * MS, TTL, DRIFT, 1);
        }
        // Bounds: 1088, 1388, 988, 1188, 988 -> sorted 1388 1188 1088 ...
        assert_eq!(b.valid_until(), Some(t0 + 1_088 * MS));
    }

    #[test]
    fn refusals_drop_a_node_and_a_quorum_of_them_is_final() {
        let t0 = Instant::now();
        let mut b = granted(3, &[0, 1, 2], t0);
        b.refused(0);
        assert!(!b.refused_by_quorum());
        assert_eq!(b.valid_until(), Some(t0 + 988 * MS));
        b.refused(1);
        assert!(b.refused_by_quorum());
        assert_eq!(b.valid_until(), None);
    }

    #[test]
    fn one_refusal_before_the_others_confirm_takes_nothing_back() {
        let t0 = Instant::now();
        // Nodes 0 and 1 granted; node 2's yes to the acquire never came.
        let mut b = granted(3, &[0, 1], t0);
        let current = t0 + 988 * MS;
        b.refused(0);
        assert_eq!(b.valid_until(), None, "one node known to hold it");
        assert!(!b.refused_by_quorum());
        assert_eq!(b.trusted_until(current), Some(current));
        // Nodes 1 and 2 confirm the renewal: a quorum again, later.
        b.confirmed(1, t0 + 300 * MS, TTL, DRIFT, 1);
        assert_eq!(b.trusted_until(current), Some(current), "one of three");
        b.confirmed(2, t0 + 310 * MS, TTL, DRIFT, 1);
        assert!(b.confirmed_by_quorum(1));
        assert_eq!(b.trusted_until(current), Some(t0 + 1_288 * MS));
        // A second refusal leaves no quorum that could hold it.
        b.refused(1);
        assert_eq!(b.trusted_until(current), None);
    }

    #[test]
    fn without_a_quorum_the_lease_runs_no_later_than_its_known_holders() {
        let t0 = Instant::now();
        let mut b = granted(3, &[0, 1], t0);
        b.refused(0);
        // Node 1's bound shrank (a shorter TTL sent to all): the end too.
        b.sending_to_all(t0 + 100 * MS, 300 * MS, 5 * MS);
        assert_eq!(b.trusted_until(t0 + 988 * MS), Some(t0 + 395 * MS));
        // Never later than the end published so far.
        assert_eq!(b.trusted_until(t0 + 200 * MS), Some(t0 + 200 * MS));
    }

    #[test]
    fn a_late_yes_to_the_acquire_counts_from_the_acquires_start() {
        let t0 = Instant::now();
        let mut b = granted(3, &[0, 1], t0);
        b.granted_late(2, t0 + 988 * MS);
        b.refused(0);
        assert_eq!(b.valid_until(), Some(t0 + 988 * MS), "nodes 1 and 2");
        // A late yes never overrides a newer answer of its node.
        let mut b = granted(3, &[0, 1], t0);
        b.refused(2);
        b.granted_late(2, t0 + 988 * MS);
        b.refused(0);
        assert_eq!(b.valid_until(), None);
        let mut b = granted(3, &[0, 1], t0);
        b.confirmed(2, t0 + 300 * MS, TTL, DRIFT, 1);
        b.granted_late(2, t0 + 988 * MS);
        b.refused(0);
        assert_eq!(b.valid_until(), Some(t0 + 988 * MS), "node 1's bound");
        b.confirmed(1, t0 + 310 * MS, TTL, DRIFT, 1);
        assert_eq!(b.valid_until(), Some(t0 + 1_288 * MS), "node 2 kept 1288");
        // A shorter TTL sent since caps what the late yes promises.
        let mut b = granted(3, &[0, 1], t0);
        b.sending_to_all(t0 + 100 * MS, 300 * MS, 5 * MS);
        b.granted_late(2, t0 + 988 * MS);
        b.refused(0);
        assert_eq!(b.valid_until(), Some(t0 + 395 * MS));
    }

    #[test]
    fn errors_are_told_apart_from_silence() {
        let t0 = Instant::now();
        let mut b = granted(3, &[0, 1, 2], t0);
        b.unknown(0, t0, TTL, DRIFT, true);
        assert!(!b.failed_by_quorum());
        b.unknown(1, t0, TTL, DRIFT, true);
        assert!(b.failed_by_quorum());
        // An error does not take back what the node promised before.
        assert_eq!(b.valid_until(), Some(t0 + 988 * MS));
        b.confirmed(1, t0 + 50 * MS, TTL, DRIFT, 1);
        assert!(!b.failed_by_quorum(), "only the latest answer counts");
    }

    #[test]
    fn a_shorter_ttl_in_doubt_caps_later_confirmations() {
        let t0 = Instant::now();
        let mut b = granted(1, &[0], t0);
        // A 200 ms request was abandoned: it may still land at any time.
        b.unknown(0, t0 + 100 * MS, 200 * MS, 4 * MS, false);
        assert_eq!(b.valid_until(), Some(t0 + 296 * MS));
        // A later 1 s confirmation may be overwritten by it: trust 200 ms.
        b.confirmed(0, t0 + 150 * MS, TTL, DRIFT, 1);
        assert_eq!(b.valid_until(), Some(t0 + 338 * MS));
    }

    #[test]
    fn the_same_ttl_in_doubt_costs_nothing() {
        let t0 = Instant::now();
        let mut b = granted(1, &[0], t0);
        b.unknown(0, t0 + 100 * MS, TTL, DRIFT, false);
        assert_eq!(
            b.valid_until(),
            Some(t0 + 988 * MS),
            "the acquire bound is earlier"
        );
        b.confirmed(0, t0 + 300 * MS, TTL, DRIFT, 1);
        assert_eq!(b.valid_until(), Some(t0 + 1_288 * MS));
    }

    #[test]
    fn sending_a_shorter_ttl_shortens_the_bound_at_once() {
        let t0 = Instant::now();
        let mut b = granted(3, &[0, 1, 2], t0);
        b.sending_to_all(t0 + 100 * MS, 300 * MS, 5 * MS);
        assert_eq!(b.valid_until(), Some(t0 + 395 * MS));
        // A longer TTL sent does not lengthen anything before it is confirmed.
        b.sending_to_all(t0 + 100 * MS, 10 * TTL, DRIFT);
        assert_eq!(b.valid_until(), Some(t0 + 395 * MS));
    }

    #[test]
    fn only_a_quorum_of_the_current_round_renews() {
        let t0 = Instant::now();
        let mut b = granted(5, &[0, 1, 2, 3, 4], t0);
        assert!(b.confirmed_by_quorum(0), "the acquire is round 0");
        // Round 2 is being sent; late answers for round 1 arrive first.
        for i in [0, 1, 2] {
            b.confirmed(i, t0 + 100 * MS, TTL, DRIFT, 1);
        }
        assert!(!b.confirmed_by_quorum(2), "older rounds never count");
        b.confirmed(3, t0 + 200 * MS, TTL, DRIFT, 2);
        b.confirmed(4, t0 + 200 * MS, TTL, DRIFT, 2);
        assert!(!b.confirmed_by_quorum(2), "two of five");
        b.confirmed(0, t0 + 200 * MS, TTL, DRIFT, 2);
        assert!(b.confirmed_by_quorum(2));
        // A node that refuses no longer counts, whatever it confirmed.
        b.refused(0);
        assert!(!b.confirmed_by_quorum(2));
    }

    #[test]
    fn instants_on_both_sides_of_the_epoch_are_kept_exactly() {
        const NS: Duration = Duration::from_nanos(1);
        let before = epoch() - 5_000 * MS;
        let mut b = granted(3, &[0, 1, 2], before);
        assert_eq!(b.valid_until(), Some(before + 988 * MS));
        b.confirmed(0, before + 4_900 * MS + NS, TTL, DRIFT, 1);
        b.confirmed(1, before + 4_950 * MS + 7 * NS, TTL, DRIFT, 1);
        assert_eq!(b.valid_until(), Some(before + 5_888 * MS + NS));
        assert!(b.confirmed_by_quorum(1));
    }

    #[test]
    fn an_extend_to_a_shorter_ttl_comes_before_the_acquires_bound() {
        let t0 = Instant::now();
        let mut b = granted(3, &[0, 1, 2], t0);
        // An extend to a TTL far shorter than the acquire's, sent at once:
        // the new end comes before the acquire's bound, which the node
        // instants count from.
        b.sending_to_all(t0 + MS, 100 * MS, 2 * MS);
        assert_eq!(b.valid_until(), Some(t0 + 99 * MS));
        b.confirmed(0, t0 + 2 * MS, 100 * MS, 2 * MS, 1);
        b.confirmed(1, t0 + 3 * MS, 100 * MS, 2 * MS, 1);
        assert_eq!(b.valid_until(), Some(t0 + 100 * MS));
        // A late yes to the acquire is capped by the extend.
        let mut late = granted(3, &[0], t0);
        late.sending_to_all(t0 + MS, 100 * MS, 2 * MS);
        late.granted_late(1, t0 + TTL - DRIFT);
        assert_eq!(late.valid_until(), Some(t0 + 99 * MS));
    }

    #[test]
    fn a_node_bound_takes_16_bytes() {
        assert_eq!(std::mem::size_of::<NodeBound>(), 16);
    }

    #[test]
    fn a_ttl_in_doubt_beyond_the_millisecond_count_trusts_less() {
        let t0 = Instant::now();
        let long = Duration::from_secs(60 * 24 * 3600); // 60 days
        let mut b = granted(1, &[0], t0);
        b.unknown(0, t0, long, DRIFT, false);
        b.confirmed(0, t0, long, DRIFT, 1);
        let counted = Duration::from_millis(u64::from(u32::MAX - 1));
        assert_eq!(b.valid_until(), Some(t0 + counted - DRIFT));
    }

    #[test]
    fn more_nodes_than_kept_inline_work_alike() {
        let t0 = Instant::now();
        let mut b = granted(7, &[0, 1, 2, 3, 4, 5, 6], t0);
        for (i, at) in [(0, 100), (2, 400), (4, 200), (6, 300)] {
            b.confirmed(i, t0 + at * MS, TTL, DRIFT, 1);
        }
        // Quorum 4 of 7: bounds 1088, 988, 1388, 988, 1188, 988, 1288.
        assert_eq!(b.valid_until(), Some(t0 + 1_088 * MS));
        assert!(b.confirmed_by_quorum(1));
        for i in [1, 3, 5, 6] {
            b.refused(i);
        }
        assert!(b.refused_by_quorum());
    }
}
