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

use std::time::{Duration, Instant};

/// How one node's latest answer about a lease went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// It holds our token and applied the TTL.
    Confirmed,
    /// Our token is gone there.
    Refused,
    /// It answered with an error, or the connection failed.
    Failed,
}

/// One node's part of a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct NodeBound {
    /// The key lives there at least until this instant (drift subtracted);
    /// `None`: not known to hold our token.
    until: Option<Instant>,
    /// The latest answer, if any came since the lease was taken.
    last: Option<Answer>,
    /// The shortest TTL of a request whose fate is unknown.
    doubt: Option<Duration>,
    /// The latest renewal round it confirmed (0: the acquire).
    round: u64,
}

/// The per-node expiry bounds of one lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExpiryBounds {
    quorum: usize,
    nodes: Vec<NodeBound>,
    /// The earliest end a request sent to every node may have set (see
    /// [`sending_to_all`](Self::sending_to_all)): a late answer to the
    /// acquire promises no more than this.
    cap: Option<Instant>,
}

impl ExpiryBounds {
    /// A lease just granted by `granted` (node indexes) out of `nodes`, for
    /// requests sent at `start`: each granting node holds it until `until`
    /// (`start + ttl - drift`).
    /// Bounds over `nodes` nodes, of which `quorum` must hold the lease
    /// (a majority, or a permit's quorum), `granted` holding it `until`.
    pub(crate) fn new(
        nodes: usize,
        quorum: usize,
        granted: impl IntoIterator<Item = usize>,
        until: Instant,
    ) -> Self {
        let mut bounds = ExpiryBounds {
            quorum,
            nodes: vec![
                NodeBound {
                    until: None,
                    last: None,
                    doubt: None,
                    round: 0,
                };
                nodes
            ],
            cap: None,
        };
        for i in granted {
            if let Some(node) = bounds.nodes.get_mut(i) {
                node.until = Some(until);
            }
        }
        bounds
    }

    /// How many nodes the lease is on.
    pub(crate) fn nodes(&self) -> usize {
        self.nodes.len()
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
        let node = &mut self.nodes[i];
        node.round = node.round.max(round);
        // An unknown request with a shorter TTL may still land after this one.
        let ttl = node.doubt.map_or(ttl, |d| d.min(ttl));
        node.until = Some(sent + ttl.saturating_sub(drift));
        node.last = Some(Answer::Confirmed);
    }

    /// Node `i` said yes to the acquire after the quorum had decided it:
    /// it holds the key until `until`, the acquire's bound (capped by what
    /// any shorter TTL sent since may have set). An answer it gave since
    /// is newer: a confirmation already moved its bound, and after a
    /// refusal the key may have gone again, so either way this is ignored.
    pub(crate) fn granted_late(&mut self, i: usize, until: Instant) {
        let cap = self.cap;
        if let Some(node) = self.nodes.get_mut(i) {
            if node.until.is_none() && node.last != Some(Answer::Refused) {
                node.until = Some(cap.map_or(until, |c| c.min(until)));
            }
        }
    }

    /// Node `i` answered that our token is gone.
    pub(crate) fn refused(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        node.until = None;
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
        let node = &mut self.nodes[i];
        // If applied, whenever that is, the key lives at least this long.
        let if_applied = sent + ttl.saturating_sub(drift);
        node.until = node.until.map(|u| u.min(if_applied));
        node.doubt = Some(node.doubt.map_or(ttl, |d| d.min(ttl)));
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
        let cap = now + ttl.saturating_sub(drift);
        for node in &mut self.nodes {
            node.until = node.until.map(|u| u.min(cap));
        }
        self.cap = Some(self.cap.map_or(cap, |c| c.min(cap)));
    }

    /// Until when a quorum holds the key: the quorum-th latest node bound.
    /// `None` if fewer than a quorum are known to hold it.
    pub(crate) fn valid_until(&self) -> Option<Instant> {
        // The latest bound that at least a quorum of bounds reach. No
        // allocation: this runs for every lease on every node's answer,
        // and there are few nodes.
        let untils = || self.nodes.iter().filter_map(|n| n.until);
        untils()
            .filter(|&u| untils().filter(|&v| v >= u).count() >= self.quorum)
            .max()
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
        let latest = self.nodes.iter().filter_map(|n| n.until).max();
        Some(latest.map_or(current, |l| l.min(current)))
    }

    /// Whether a quorum of nodes that still hold the key confirmed renewal
    /// round `round` or a later one.
    pub(crate) fn confirmed_by_quorum(&self, round: u64) -> bool {
        let confirmed = self
            .nodes
            .iter()
            .filter(|n| n.until.is_some() && n.round >= round)
            .count();
        confirmed >= self.quorum
    }

    /// Whether refusals alone rule out a quorum: the lock is not ours.
    pub(crate) fn refused_by_quorum(&self) -> bool {
        let refused = self
            .nodes
            .iter()
            .filter(|n| n.last == Some(Answer::Refused))
            .count();
        refused > self.nodes.len() - self.quorum
    }

    /// Whether nodes whose latest answer was an error alone rule out a
    /// quorum (as opposed to nodes that are merely slow or silent).
    pub(crate) fn failed_by_quorum(&self) -> bool {
        let failed = self
            .nodes
            .iter()
            .filter(|n| n.last == Some(Answer::Failed))
            .count();
        failed > self.nodes.len() - self.quorum
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
}
