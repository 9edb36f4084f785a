//! Counting node answers toward a quorum. Pure: no I/O, no clocks.

/// How one node answered a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Vote {
    /// Did what was asked (took, released or extended the lock).
    Yes,
    /// Answered, and refused: another owner holds the key, or our token is gone.
    No,
    /// No usable answer: timeout, connection or Redis error.
    Failed,
}

/// Where a tally stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Not yet known: more answers are needed.
    Pending,
    /// A quorum said yes.
    Reached,
    /// Too many refused or failed for a quorum to be possible.
    Impossible,
}

/// The most nodes a Locker takes. Redlock runs on a handful of
/// independent servers (3, 5, 7); the renewer keeps one bit per node for
/// each lease.
pub(crate) const MAX_NODES: usize = 64;

/// A set of node indexes (each below [`MAX_NODES`]), one bit each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct NodeSet(u64);

impl NodeSet {
    pub(crate) fn insert(&mut self, i: usize) {
        debug_assert!(i < MAX_NODES);
        self.0 |= 1 << i;
    }

    pub(crate) fn iter(self) -> impl Iterator<Item = usize> {
        (0..MAX_NODES).filter(move |&i| self.0 & (1 << i) != 0)
    }
}

impl FromIterator<usize> for NodeSet {
    fn from_iter<I: IntoIterator<Item = usize>>(nodes: I) -> Self {
        let mut set = NodeSet::default();
        nodes.into_iter().for_each(|i| set.insert(i));
        set
    }
}

/// The majority of `nodes`: `nodes / 2 + 1`. Two quorums of the same nodes
/// always share a node, which is what makes the lock exclusive.
pub(crate) fn quorum(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// The quorum of `nodes` nodes for one of `permits` permits: the fewest
/// nodes `q` with `(permits + 1) * q > nodes * permits`, that is
/// `nodes * permits / (permits + 1) + 1`.
///
/// Each node admits at most `permits` holders, so `permits + 1` holders
/// registered on `q` nodes each would need `(permits + 1) * q` places
/// where only `nodes * permits` exist: at most `permits` can hold at
/// once. A majority is not enough beyond one permit: with 3 nodes and 2
/// permits, holders A and B on node 1, B and C on node 2, and A and C on
/// node 3 are three holders, each on a majority. One permit gives the
/// majority back.
pub(crate) fn permit_quorum(nodes: usize, permits: u32) -> usize {
    // In u64: `nodes * permits` would overflow a 32-bit usize.
    let (nodes, permits) = (nodes as u64, u64::from(permits));
    (nodes * permits / (permits + 1) + 1) as usize
}

/// Whether `refusals` of `nodes` alone rule out a quorum of `quorum`: the
/// lock is held elsewhere (or our token is gone) whatever the other nodes
/// would say.
pub(crate) fn refused(refusals: usize, nodes: usize, quorum: usize) -> bool {
    refusals > nodes - quorum
}

/// Running count of votes over a fixed set of nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) nodes: usize,
    pub(crate) quorum: usize,
    pub(crate) yes: usize,
    pub(crate) no: usize,
    pub(crate) failed: usize,
}

impl Tally {
    #[cfg(test)]
    pub(crate) fn new(nodes: usize) -> Self {
        Tally::with_quorum(nodes, quorum(nodes))
    }

    /// A tally that needs `quorum` of `nodes` yeses (a semaphore's
    /// permit: see [`permit_quorum`]).
    pub(crate) fn with_quorum(nodes: usize, quorum: usize) -> Self {
        Tally {
            nodes,
            quorum,
            yes: 0,
            no: 0,
            failed: 0,
        }
    }

    pub(crate) fn record(&mut self, vote: Vote) {
        match vote {
            Vote::Yes => self.yes += 1,
            Vote::No => self.no += 1,
            Vote::Failed => self.failed += 1,
        }
        debug_assert!(self.yes + self.no + self.failed <= self.nodes);
    }

    /// Decided as soon as the outcome cannot change: the slower nodes'
    /// answers no longer matter for success or failure.
    pub(crate) fn decision(&self) -> Decision {
        let pending = self.nodes - self.yes - self.no - self.failed;
        if self.yes >= self.quorum {
            Decision::Reached
        } else if self.yes + pending < self.quorum {
            Decision::Impossible
        } else {
            Decision::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Decision::*;
    use Vote::*;

    #[test]
    fn a_permit_needs_the_issue_s_quorums() {
        assert_eq!(permit_quorum(1, 1), 1);
        assert_eq!(permit_quorum(1, 50), 1, "one deployment is the plain case");
        assert_eq!(permit_quorum(3, 1), 2, "one permit: the majority");
        assert_eq!(permit_quorum(5, 1), 3);
        assert_eq!(permit_quorum(3, 2), 3, "3 nodes, 2 permits: all 3");
        assert_eq!(permit_quorum(5, 2), 4);
        assert_eq!(permit_quorum(5, 3), 4);
        assert_eq!(permit_quorum(5, 4), 5);
        assert_eq!(permit_quorum(7, 3), 6);
    }

    /// With the quorum, N + 1 holders cannot fit (each node admits N);
    /// with one node fewer, they can: placed round-robin, no node gets
    /// more than N of them. So the bound is needed, not only safe.
    #[test]
    fn the_permit_quorum_is_the_least_that_is_safe() {
        for nodes in 1..=9usize {
            for permits in 1..=8u32 {
                let q = permit_quorum(nodes, permits);
                let n_permits = permits as usize;
                assert!(q <= nodes, "{nodes} nodes, {permits} permits");
                assert!((n_permits + 1) * q > nodes * n_permits);
                if q == 1 {
                    continue;
                }
                let fewer = q - 1;
                let mut load = vec![0usize; nodes];
                for holder in 0..=n_permits {
                    for j in 0..fewer {
                        load[(holder * fewer + j) % nodes] += 1;
                    }
                }
                assert!(
                    load.iter().all(|&l| l <= n_permits),
                    "{nodes} nodes, {permits} permits, q - 1 = {fewer}: {load:?}"
                );
            }
        }
    }

    fn tally(nodes: usize, votes: &[Vote]) -> Tally {
        let mut t = Tally::new(nodes);
        for &v in votes {
            t.record(v);
        }
        t
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        assert_eq!(
            (1..=7).map(quorum).collect::<Vec<_>>(),
            [1, 2, 2, 3, 3, 4, 4]
        );
        // Two quorums always intersect.
        for n in 1..=9 {
            assert!(2 * quorum(n) > n, "{n}");
        }
    }

    #[test]
    fn one_node_decides_on_its_answer() {
        assert_eq!(tally(1, &[]).decision(), Pending);
        assert_eq!(tally(1, &[Yes]).decision(), Reached);
        assert_eq!(tally(1, &[No]).decision(), Impossible);
        assert_eq!(tally(1, &[Failed]).decision(), Impossible);
    }

    #[test]
    fn five_nodes_decide_at_three_either_way() {
        assert_eq!(tally(5, &[Yes, Yes]).decision(), Pending);
        assert_eq!(tally(5, &[Yes, Yes, Yes]).decision(), Reached);
        assert_eq!(tally(5, &[Yes, No, Failed, Yes]).decision(), Pending);
        assert_eq!(tally(5, &[No, Failed, No]).decision(), Impossible);
        assert_eq!(tally(5, &[Yes, Yes, No, No, Yes]).decision(), Reached);
        assert_eq!(tally(5, &[Yes, Yes, No, No, Failed]).decision(), Impossible);
    }

    #[test]
    fn two_nodes_need_both() {
        assert_eq!(tally(2, &[Yes]).decision(), Pending);
        assert_eq!(tally(2, &[Yes, Failed]).decision(), Impossible);
        assert_eq!(tally(2, &[Yes, Yes]).decision(), Reached);
    }

    #[test]
    fn refused_means_refusals_alone_block_a_quorum() {
        assert!(!refused(2, 5, quorum(5)));
        assert!(refused(3, 5, quorum(5)));
        assert!(refused(1, 1, quorum(1)));
        assert!(!refused(0, 1, quorum(1)));
        assert!(
            refused(2, 4, quorum(4)),
            "4 nodes: quorum 3, two refusals block it"
        );
        let permit = permit_quorum(5, 2);
        assert!(
            refused(2, 5, permit),
            "a permit on 4 of 5: two refusals block it"
        );
        assert!(!refused(1, 5, permit));
    }
}
