//! Fencing tokens: a number per acquisition that only goes up, so the
//! protected resource can turn away a holder whose lease ran out while it
//! was paused. Pure: the arithmetic of choosing the token.
//!
//! Each node keeps a counter next to the lock key; the acquire script bumps
//! it (or, if it expired while idle, restarts it from the server clock in
//! microseconds) and returns it. With several nodes the counters may differ,
//! so the token is the largest value the granting quorum reported. Any
//! earlier token was stored on a quorum, and two quorums share a node, whose
//! counter therefore already exceeds that earlier token: the new one is
//! larger. To keep that true for the tokens after ours, ours must be stored
//! on a quorum too: if fewer than a quorum reported it, it is written back
//! (`counter = max(counter, token)`) before the lease is handed out.

/// The token for an acquisition, from the counters of the nodes that
/// granted it, and whether it must be written back first: only when fewer
/// than `quorum` of them already hold that value, which is rare once the
/// counters move in step.
pub(crate) fn choose(granted: &[u64], quorum: usize) -> (u64, bool) {
    let token = granted.iter().copied().max().unwrap_or(0);
    let holding = granted.iter().filter(|&&f| f == token).count();
    (token, holding < quorum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_node_never_writes_back() {
        assert_eq!(choose(&[7], 1), (7, false));
    }

    #[test]
    fn counters_in_step_need_no_write_back() {
        assert_eq!(choose(&[42, 42, 42], 3), (42, false));
        assert_eq!(choose(&[42, 42, 42, 41], 3), (42, false));
    }

    #[test]
    fn the_largest_counter_wins_and_is_written_back() {
        // A node that restarted empty starts from its clock.
        assert_eq!(
            choose(&[42, 1_800_000_000_000_000, 42], 3),
            (1_800_000_000_000_000, true)
        );
        assert_eq!(choose(&[10, 11, 12], 2), (12, true));
        assert_eq!(choose(&[12, 11, 12], 2), (12, false));
    }
}
