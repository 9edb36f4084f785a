//! How long a lease may be trusted: TTL minus the time the round trip took
//! minus an allowance for clock drift between nodes. Pure arithmetic.

use std::time::{Duration, Instant};

use crate::core::error::{Error, Op};

/// The largest TTL accepted: 2^53 ms (about 285,000 years), so every
/// millisecond count stays exact in the `f64` drift arithmetic (and in
/// Lua's numbers) and far inside what Redis accepts for `PX` (an expiry,
/// now plus the TTL, up to 2^63 - 1 ms since 1970). It bounds every
/// duration setting of a Locker alike: the TTL (of the Locker, a request,
/// an extend), the node and connect timeouts, the drift floor, the
/// restart quarantine and the fence expiry; a longer one is
/// [`Error::InvalidInput`](crate::Error::InvalidInput) naming the
/// setting, before any I/O. Waits are not bounded by it: a wait too long
/// for the clock to represent is a wait without limit (see
/// [`RetryPolicy::within`](crate::RetryPolicy::within)).
///
/// ```
/// assert!(redlease::MAX_TTL > std::time::Duration::from_secs(100 * 365 * 24 * 3600));
/// ```
pub const MAX_TTL: Duration = Duration::from_millis(1 << 53);

/// Allowance for clocks running at different rates on different nodes:
/// `ttl * factor + floor` (the Redlock default is 1% plus 2 ms).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct DriftModel {
    pub(crate) factor: f64,
    pub(crate) floor: Duration,
}

impl DriftModel {
    pub(crate) const DEFAULT: DriftModel = DriftModel {
        factor: 0.01,
        floor: Duration::from_millis(2),
    };

    pub(crate) fn check(&self) -> Result<(), Error> {
        if !(self.factor >= 0.0 && self.factor < 1.0) {
            return Err(Error::invalid(
                "advanced.drift_factor",
                format!(
                    "{} is not a fraction of the TTL in [0, 1): it must be non-negative, \
                     finite and below 1",
                    self.factor
                ),
            ));
        }
        if self.floor > MAX_TTL {
            return Err(Error::invalid(
                "advanced.drift_floor",
                format!(
                    "{:?} is above the largest supported duration, {MAX_TTL:?} (no TTL could \
                     outlast it)",
                    self.floor
                ),
            ));
        }
        Ok(())
    }

    /// Saturating: a factor or floor out of range ([`check`](Self::check)
    /// refuses them) gives a drift no TTL outlasts, never a panic.
    pub(crate) fn drift(&self, ttl: Duration) -> Duration {
        let share =
            Duration::try_from_secs_f64(ttl.as_secs_f64() * self.factor).unwrap_or(Duration::MAX);
        share.saturating_add(self.floor)
    }
}

/// The timing of one operation with one TTL, checked before any I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Timing {
    /// The TTL, whole milliseconds (what Redis is told).
    pub(crate) ttl: Duration,
    pub(crate) drift: Duration,
    /// How long each node may take to answer one request.
    pub(crate) node_timeout: Duration,
    /// How much longer than the TTL the servers keep a hold that is not
    /// released (the Locker's lock-delay; zero: off): see [`hold_ms`].
    ///
    /// [`hold_ms`]: Timing::hold_ms
    pub(crate) lock_delay: Duration,
}

impl Timing {
    /// Checks `ttl` against the drift model and node timeout. Without an
    /// explicit node timeout it is 5% of the TTL (as redsync does), at least
    /// 1 ms.
    pub(crate) fn new(
        field: &'static str,
        ttl: Duration,
        drift: DriftModel,
        node_timeout: Option<Duration>,
    ) -> Result<Timing, Error> {
        if ttl < Duration::from_millis(1) {
            return Err(Error::invalid(
                field,
                format!(
                    "{ttl:?} is below Redis's 1 ms resolution (a zero TTL would delete the key)"
                ),
            ));
        }
        if ttl > MAX_TTL {
            return Err(Error::invalid(
                field,
                format!("{ttl:?} is above the largest supported TTL, {MAX_TTL:?}"),
            ));
        }
        let ttl = Duration::from_millis(ttl.as_millis() as u64);
        let derived = node_timeout.is_none();
        let node_timeout = node_timeout.unwrap_or_else(|| (ttl / 20).max(Duration::from_millis(1)));
        if derived && node_timeout >= ttl {
            return Err(Error::invalid(
                field,
                format!(
                    "{ttl:?} is too short: the per-node timeout (5% of the TTL, at least 1 ms) \
                     must stay below it"
                ),
            ));
        }
        if node_timeout.is_zero() {
            return Err(Error::invalid(
                "node_timeout",
                "a zero timeout never lets a node answer",
            ));
        }
        if node_timeout >= ttl {
            return Err(Error::invalid(
                "node_timeout",
                format!(
                    "{node_timeout:?} is not below the TTL {ttl:?}: a node could answer after \
                     the lease ended"
                ),
            ));
        }
        let drift = drift.drift(ttl);
        // The lease ends one drift allowance before the TTL, and is reported
        // lost one more allowance before that (so that a late timer still
        // fires in time): a lease must outlive both and one node timeout, or
        // it would be lost the moment it is handed out.
        if ttl <= drift.saturating_mul(2).saturating_add(node_timeout) {
            return Err(Error::invalid(
                field,
                format!(
                    "{ttl:?} leaves no validity after twice the {drift:?} drift allowance (the \
                     lease ends one allowance early and is reported lost one more before that) \
                     and the {node_timeout:?} node timeout: raise the TTL, or lower \
                     node_timeout, advanced.drift_factor or advanced.drift_floor"
                ),
            ));
        }
        Ok(Timing {
            ttl,
            drift,
            node_timeout,
            lock_delay: Duration::ZERO,
        })
    }

    /// What the servers are told a hold lasts, in ms: the TTL plus the
    /// lock-delay. A hold released cleanly is deleted at once; one whose
    /// holder died stays the lock-delay past the lease's end, so that the
    /// dead holder's writes still in flight land before the next holder
    /// starts. The lease's validity is the TTL's alone.
    pub(crate) fn hold_ms(&self) -> u64 {
        (self.ttl + self.lock_delay).as_millis() as u64
    }

    /// When a lease whose requests were first sent at `start` stops being
    /// trustworthy: `start + ttl - drift`. Measured from before the first
    /// request, never from the replies, so slow replies only shorten it.
    pub(crate) fn valid_until(&self, start: Instant) -> Instant {
        start + (self.ttl - self.drift)
    }

    /// `ttl - elapsed - drift` if positive: what is left of a lease whose
    /// quorum answered `elapsed` after the first request.
    pub(crate) fn validity(&self, elapsed: Duration) -> Option<Duration> {
        self.ttl
            .checked_sub(self.drift)
            .and_then(|v| v.checked_sub(elapsed))
            .filter(|v| !v.is_zero())
    }

    /// Whether a lease whose quorum answered `elapsed` after the first
    /// request can still be handed out: it must have validity left beyond
    /// the margin at which it is reported lost (one drift allowance).
    pub(crate) fn usable(&self, elapsed: Duration) -> bool {
        self.validity(elapsed).is_some_and(|v| v > self.drift)
    }

    /// Refuses a lease whose quorum answered too late to hand it out
    /// ([`usable`](Self::usable)), `start` being when its first request
    /// was sent: [`Error::ValidityExhausted`] for `op` on `resource`.
    pub(crate) fn check_usable(&self, op: Op, resource: &str, start: Instant) -> Result<(), Error> {
        let elapsed = start.elapsed();
        if self.usable(elapsed) {
            return Ok(());
        }
        Err(Error::ValidityExhausted {
            op,
            resource: resource.to_string(),
            elapsed,
            ttl: self.ttl,
            drift: self.drift,
        })
    }

    /// How often a kept-alive lease with this timing is renewed.
    pub(crate) fn renew_interval(&self, fraction: f64) -> Duration {
        self.ttl.mul_f64(fraction)
    }

    /// Checks that a kept-alive lease with this timing can be renewed in
    /// time: the first renewal, sent `fraction` of the TTL after the
    /// acquire, must be answered before the lease is reported lost
    /// (`ttl - 2 × drift` after the acquire began). Per kept-alive lease,
    /// the answer is expected within the node timeout.
    pub(crate) fn check_renewal(&self, field: &'static str, fraction: f64) -> Result<(), Error> {
        self.check_renewal_within(field, fraction, self.node_timeout)
    }

    /// The part of [`check_renewal`](Self::check_renewal) that no node
    /// timeout can fix: the first renewal must at least be sent before the
    /// loss point. Checked when a Locker is built, for its default TTL, so
    /// that a Locker meant for short waits (a node timeout close to the
    /// TTL) still builds if it never keeps a lease alive.
    pub(crate) fn check_renewal_schedule(
        &self,
        field: &'static str,
        fraction: f64,
    ) -> Result<(), Error> {
        self.check_renewal_within(field, fraction, Duration::ZERO)
    }

    fn check_renewal_within(
        &self,
        field: &'static str,
        fraction: f64,
        answer: Duration,
    ) -> Result<(), Error> {
        let interval = self.renew_interval(fraction);
        let lost_at = self.ttl - 2 * self.drift;
        if interval + answer >= lost_at {
            let answer = if answer.is_zero() {
                String::new()
            } else {
                format!(" and may take the {answer:?} node timeout to answer")
            };
            return Err(Error::invalid(
                field,
                format!(
                    "a kept-alive lease with a {:?} TTL is renewed after {interval:?} \
                     (advanced.renew_fraction {fraction}){answer}, but is reported lost \
                     {lost_at:?} after it was taken (TTL minus twice the {:?} drift allowance): \
                     lower advanced.renew_fraction, node_timeout or advanced.drift_factor, or \
                     raise the TTL",
                    self.ttl, self.drift
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Duration = Duration::from_millis(1);

    fn timing(ttl_ms: u32) -> Timing {
        Timing::new("ttl", ttl_ms * MS, DriftModel::DEFAULT, None).unwrap()
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms_by_default() {
        assert_eq!(DriftModel::DEFAULT.drift(10_000 * MS), 102 * MS);
        assert_eq!(DriftModel::DEFAULT.drift(100 * MS), 3 * MS);
    }

    #[test]
    fn validity_is_ttl_minus_elapsed_minus_drift() {
        let t = timing(10_000);
        assert_eq!(t.validity(Duration::ZERO), Some(9_898 * MS));
        assert_eq!(t.validity(898 * MS), Some(9_000 * MS));
        assert_eq!(t.validity(9_897 * MS), Some(MS));
        assert_eq!(t.validity(9_898 * MS), None, "zero validity is no validity");
        assert_eq!(t.validity(20_000 * MS), None);
    }

    #[test]
    fn valid_until_counts_from_the_start() {
        let t = timing(1_000);
        let start = Instant::now();
        assert_eq!(t.valid_until(start), start + 988 * MS);
    }

    #[test]
    fn default_node_timeout_is_five_percent() {
        assert_eq!(timing(10_000).node_timeout, 500 * MS);
        assert_eq!(timing(10).node_timeout, MS);
    }

    #[test]
    fn ttl_is_truncated_to_whole_milliseconds() {
        let t = Timing::new(
            "ttl",
            Duration::from_micros(9_999),
            DriftModel::DEFAULT,
            None,
        )
        .unwrap();
        assert_eq!(t.ttl, 9 * MS);
        assert_eq!(t.hold_ms(), 9);
    }

    #[test]
    fn rejects_ttls_that_cannot_work() {
        let bad = |ttl: Duration, node_timeout: Option<Duration>| {
            Timing::new("ttl", ttl, DriftModel::DEFAULT, node_timeout).unwrap_err()
        };
        for (ttl, nt, field) in [
            (Duration::ZERO, None, "ttl"),
            (Duration::from_micros(999), None, "ttl"),
            (MAX_TTL + MS, None, "ttl"),
            (2 * MS, None, "ttl"), // drift 2 ms eats it all
            (100 * MS, Some(100 * MS), "node_timeout"), // timeout == ttl
            (100 * MS, Some(Duration::ZERO), "node_timeout"),
            (100 * MS, Some(97 * MS), "ttl"), // 3 ms drift + 97 ms timeout
            (100 * MS, Some(94 * MS), "ttl"), // lost (2 × 3 ms early) on arrival
        ] {
            match bad(ttl, nt) {
                Error::InvalidInput { field: f, .. } => assert_eq!(f, field, "{ttl:?} {nt:?}"),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(Timing::new("ttl", MAX_TTL, DriftModel::DEFAULT, None).is_ok());
    }

    #[test]
    fn a_lease_is_never_handed_out_already_lost() {
        // drift_factor 0.5: the lease would end at half the TTL and be
        // reported lost at zero.
        let half = DriftModel {
            factor: 0.5,
            floor: 2 * MS,
        };
        assert!(Timing::new("ttl", 2_000 * MS, half, None).is_err());
        let t = timing(1_000); // drift 12 ms
        assert!(t.usable(Duration::ZERO));
        assert!(t.usable(975 * MS));
        assert!(
            !t.usable(976 * MS),
            "976 ms + 12 ms drift + 12 ms early = TTL"
        );
    }

    #[test]
    fn renewal_must_land_before_the_loss_point() {
        let with = |factor: f64, fraction: f64| {
            let drift = DriftModel {
                factor,
                floor: 2 * MS,
            };
            Timing::new("ttl", 1_000 * MS, drift, Some(100 * MS))
                .and_then(|t| t.check_renewal("ttl", fraction))
        };
        // The combinations that used to be accepted and lose every lease.
        assert!(with(0.05, 0.9).is_err());
        assert!(with(0.1, 0.8).is_err());
        assert!(with(0.25, 0.5).is_err());
        // A Locker for short waits (the soak's patient clients: node
        // timeout 90% of a 500 ms TTL) builds, but cannot keep leases alive.
        let patient = Timing::new("ttl", 500 * MS, DriftModel::DEFAULT, Some(450 * MS)).unwrap();
        assert!(patient.check_renewal_schedule("ttl", 1.0 / 3.0).is_ok());
        assert!(patient.check_renewal("ttl", 1.0 / 3.0).is_err());
        // The defaults, and a tight but workable one.
        assert!(with(0.01, 1.0 / 3.0).is_ok());
        assert!(with(0.01, 0.8).is_ok(), "800 + 100 < 1000 - 24");
        match with(0.05, 0.9).unwrap_err() {
            Error::InvalidInput { reason, .. } => {
                assert!(reason.contains("renew_fraction"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    fn any_duration() -> impl Strategy<Value = Duration> {
        prop_oneof![
            Just(Duration::ZERO),
            Just(Duration::MAX),
            Just(MAX_TTL),
            Just(MAX_TTL + MS),
            (0u64..100_000).prop_map(Duration::from_millis),
            (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        ]
    }

    proptest! {
        /// Any TTL, node timeout and drift model: a typed refusal or a
        /// timing whose every derived instant and duration is computable.
        #[test]
        fn any_timing_is_refused_or_sound(
            ttl in any_duration(),
            node_timeout in proptest::option::of(any_duration()),
            factor in prop_oneof![Just(f64::NAN), Just(f64::INFINITY), -1.0f64..2.0],
            floor in any_duration(),
            fraction in 0.001f64..=0.9,
            elapsed in any_duration(),
        ) {
            let drift = DriftModel { factor, floor };
            let checked = drift.check();
            let _ = drift.drift(ttl);
            let Ok(t) = Timing::new("ttl", ttl, drift, node_timeout) else {
                return Ok(());
            };
            prop_assert!(t.ttl <= MAX_TTL && t.node_timeout < t.ttl);
            if checked.is_ok() {
                prop_assert!(t.ttl > 2 * t.drift + t.node_timeout);
            }
            let start = Instant::now();
            prop_assert!(t.valid_until(start) > start || checked.is_err());
            let _ = (t.validity(elapsed), t.usable(elapsed), t.hold_ms());
            let _ = (t.check_renewal("ttl", fraction), t.check_renewal_schedule("ttl", fraction));
        }
    }

    #[test]
    fn a_drift_floor_beyond_any_ttl_is_refused() {
        let d = DriftModel {
            factor: 0.01,
            floor: Duration::MAX,
        };
        assert_eq!(d.drift(MAX_TTL), Duration::MAX);
        match d.check() {
            Err(Error::InvalidInput { field, .. }) => assert_eq!(field, "advanced.drift_floor"),
            other => panic!("{other:?}"),
        }
        assert!(Timing::new("ttl", MAX_TTL, d, None).is_err());
    }

    #[test]
    fn drift_factor_must_be_a_fraction() {
        for factor in [-0.1, 1.0, 2.0, f64::NAN, f64::INFINITY] {
            let d = DriftModel {
                factor,
                floor: 2 * MS,
            };
            assert!(d.check().is_err(), "{factor}");
        }
        assert!(DriftModel {
            factor: 0.0,
            floor: MS
        }
        .check()
        .is_ok());
        assert!(DriftModel {
            factor: 0.5,
            floor: MS
        }
        .check()
        .is_ok());
    }
}
