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

/// The majority of `nodes`: `nodes / 2 + 1`. Two quorums of the same nodes
/// always share a node, which is what makes the lock exclusive.
pub(crate) fn quorum(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// Whether `refusals` of `nodes` alone rule out a quorum: the lock is held
/// elsewhere (or our token is gone) whatever the other nodes would say.
pub(crate) fn refused(refusals: usize, nodes: usize) -> bool {
    refusals > nodes - quorum(nodes)
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
    pub(crate) fn new(nodes: usize) -> Self {
        Tally {
            nodes,
            quorum: quorum(nodes),
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
        assert!(!refused(2, 5));
        assert!(refused(3, 5));
        assert!(refused(1, 1));
        assert!(!refused(0, 1));
        assert!(refused(2, 4), "4 nodes: quorum 3, two refusals block it");
    }
}
