//! When a kept-alive lease is renewed, retried, and how long a renewal may
//! wait for a node. Pure arithmetic on instants.

use std::time::{Duration, Instant};

use crate::core::validity::Timing;

/// The least a lane waits for a batch before dropping its connection, so
/// that a batch of leases about to be lost does not churn connections.
pub(crate) const MIN_PATIENCE: Duration = Duration::from_millis(500);

/// The shortest retry delay: a node that fails at once is not hammered.
const MIN_RETRY: Duration = Duration::from_millis(5);

/// What a kept-alive lease's renewals are timed by: its TTL and drift
/// allowance (what a node's yes promises) and how often it is renewed.
/// The node timeout of [`Timing`] is left out: a renewal waits as long as
/// its lease can use the answer (see [`patience`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cadence {
    pub(crate) ttl: Duration,
    /// What the servers are told each renewed hold lasts
    /// ([`Timing::hold_ms`]).
    pub(crate) hold: Duration,
    pub(crate) drift: Duration,
    pub(crate) interval: Duration,
}

impl Cadence {
    /// `timing`'s, renewed every `fraction` of the TTL.
    pub(crate) fn new(timing: &Timing, fraction: f64) -> Self {
        Cadence {
            ttl: timing.ttl,
            hold: Duration::from_millis(timing.hold_ms()),
            drift: timing.drift,
            interval: timing.renew_interval(fraction),
        }
    }
}

/// The next renewal of a lease that a quorum holds until `valid_until`:
/// one interval after the request that quorum confirmed was sent
/// (`valid_until = sent + ttl - drift`).
pub(crate) fn next_due(valid_until: Instant, cadence: &Cadence) -> Instant {
    let sent = valid_until
        .checked_sub(cadence.ttl - cadence.drift)
        .unwrap_or(valid_until);
    sent + cadence.interval
}

/// When to send a renewal again that a quorum has not confirmed yet: soon,
/// but well inside what is left before the lease is reported lost
/// (`lost_from`), so several tries fit.
pub(crate) fn retry_at(now: Instant, lost_from: Instant, interval: Duration) -> Instant {
    let left = lost_from.saturating_duration_since(now);
    now + (interval / 4).min(left / 4).max(MIN_RETRY)
}

/// Whether a lease not yet queued is renewed in the batch going out now:
/// when due, or nearly (within half its interval), so leases taken at
/// different moments travel together.
pub(crate) fn coalesce(now: Instant, due: Instant, interval: Duration) -> bool {
    due <= now + interval / 2
}

/// Whether one node's renewals keep to their timetable, judged batch by
/// batch by how late each leaves after its most overdue lease was due.
/// Late by more than half an interval, the lane has fallen behind: the
/// leases still have most of their validity (a renewal is due two thirds
/// of a TTL before its lease would be lost, by default), so this is said
/// long before any is lost. Back under a tenth of an interval, it has
/// caught up. The gap between the two keeps a lane near the line from
/// saying both at every batch.
#[derive(Debug, Default)]
pub(crate) struct Lag {
    behind: bool,
}

/// What a batch changed in a lane's [`Lag`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LagChange {
    FellBehind,
    CaughtUp,
}

impl Lag {
    /// The lane has nothing to send: whatever it was behind on is done.
    pub(crate) fn idle(&mut self) -> Option<LagChange> {
        std::mem::take(&mut self.behind).then_some(LagChange::CaughtUp)
    }

    /// A batch left `late` after its most overdue lease was due, for
    /// leases renewed every `interval`.
    pub(crate) fn observe(&mut self, late: Duration, interval: Duration) -> Option<LagChange> {
        if !self.behind && late > interval / 2 {
            self.behind = true;
            Some(LagChange::FellBehind)
        } else if self.behind && late < interval / 10 {
            self.behind = false;
            Some(LagChange::CaughtUp)
        } else {
            None
        }
    }
}

/// How long a lane waits for a batch whose most patient lease is reported
/// lost at `latest_lost_from`: while any lease of it could still use the
/// answer, and never less than [`MIN_PATIENCE`]. A lease's fate never
/// waits on this: it is decided by whichever nodes confirm in time.
pub(crate) fn patience(now: Instant, latest_lost_from: Instant) -> Duration {
    latest_lost_from
        .saturating_duration_since(now)
        .max(MIN_PATIENCE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::validity::DriftModel;

    const MS: Duration = Duration::from_millis(1);

    fn timing() -> Timing {
        Timing::new("ttl", 3_000 * MS, DriftModel::DEFAULT, None).unwrap() // drift 32 ms
    }

    #[test]
    fn a_lane_falls_behind_past_half_an_interval_and_catches_up_under_a_tenth() {
        let interval = 1_000 * MS;
        let mut lag = Lag::default();
        // On time, or a little late: nothing to say.
        assert_eq!(lag.observe(Duration::ZERO, interval), None);
        assert_eq!(lag.observe(500 * MS, interval), None);
        // Past half an interval: said once, not again while it lasts.
        assert_eq!(lag.observe(501 * MS, interval), Some(LagChange::FellBehind));
        assert_eq!(lag.observe(2_000 * MS, interval), None);
        // Between a tenth and a half: still behind, nothing said.
        assert_eq!(lag.observe(300 * MS, interval), None);
        assert_eq!(lag.observe(100 * MS, interval), None);
        // Under a tenth: caught up, said once.
        assert_eq!(lag.observe(99 * MS, interval), Some(LagChange::CaughtUp));
        assert_eq!(lag.observe(Duration::ZERO, interval), None);
        // And it may fall behind again.
        assert_eq!(lag.observe(600 * MS, interval), Some(LagChange::FellBehind));
        // A lane left with nothing to send has caught up.
        assert_eq!(lag.idle(), Some(LagChange::CaughtUp));
        assert_eq!(lag.idle(), None);
    }

    #[test]
    fn the_next_renewal_is_an_interval_after_the_confirmed_request() {
        let sent = Instant::now();
        let t = timing();
        let cadence = Cadence::new(&t, 1.0 / 3.0);
        assert_eq!(cadence.interval, 1_000 * MS);
        assert_eq!(next_due(t.valid_until(sent), &cadence), sent + 1_000 * MS);
    }

    #[test]
    fn retries_come_soon_and_several_fit_before_the_loss() {
        let now = Instant::now();
        assert_eq!(retry_at(now, now + 2_000 * MS, 1_000 * MS), now + 250 * MS);
        assert_eq!(retry_at(now, now + 400 * MS, 1_000 * MS), now + 100 * MS);
        assert_eq!(retry_at(now, now, 1_000 * MS), now + MIN_RETRY);
    }

    #[test]
    fn leases_due_within_half_an_interval_travel_together() {
        let now = Instant::now();
        assert!(coalesce(now, now + 500 * MS, 1_000 * MS));
        assert!(!coalesce(now, now + 501 * MS, 1_000 * MS));
        assert!(coalesce(now, now - MS, 1_000 * MS));
    }

    #[test]
    fn a_lane_waits_as_long_as_its_latest_lease_can_use_the_answer() {
        let now = Instant::now();
        assert_eq!(patience(now, now + 2_500 * MS), 2_500 * MS);
        assert_eq!(patience(now, now + 10 * MS), MIN_PATIENCE);
        assert_eq!(patience(now, now - MS), MIN_PATIENCE);
    }
}
