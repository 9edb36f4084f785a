//! When to try again after a failed attempt. Pure: the random sample comes in
//! as an argument so the arithmetic can be tested.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use crate::core::error::{Error, Failure};

/// How [`Locker::lock`](crate::Locker::lock) waits for a busy lock: how
/// long or how many attempts it may take, and a random delay between
/// attempts.
///
/// Each constructor fixes the bound, so every policy is one that can be
/// used: [`within`](Self::within) a wait deadline, at most a number of
/// [`attempts`](Self::attempts) (never zero: the count is a
/// [`NonZeroU32`]), [`attempts_within`](Self::attempts_within) for both,
/// or [`forever`](Self::forever), said out loud. The default waits up to
/// 10 s. [`delay`](Self::delay) sets the random delay's range, 10-100 ms
/// by default.
///
/// Waiters retry as soon as the holder's release is announced (see the
/// crate docs). The delay is for a waiter that could miss the announcement
/// (its subscription is not confirmed on a quorum of nodes, or nodes
/// failed); one that will hear it looks again only when the holder's key is
/// due to expire. No waiter sleeps past that expiry, as reported by the
/// failed attempt, or past the wait deadline. A policy with an attempt
/// limit keeps its delay between attempts in every case.
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use redlease::RetryPolicy;
///
/// // Up to 20 attempts within 5 s, 10-50 ms apart.
/// let twenty = NonZeroU32::new(20).unwrap();
/// let policy = RetryPolicy::attempts_within(twenty, Duration::from_secs(5))
///     .delay(Duration::from_millis(10), Duration::from_millis(50));
/// # let _ = policy;
/// ```
///
/// A policy that would never try does not compile:
///
/// ```compile_fail
/// let never = redlease::RetryPolicy::attempts(0); // expects a NonZeroU32
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The attempt limit, never `Some(0)` (set from a [`NonZeroU32`]).
    pub(crate) attempts: Option<u32>,
    /// The wait deadline, from the first attempt. With no attempt limit
    /// either, the policy waits forever: only [`RetryPolicy::forever`]
    /// makes that one.
    pub(crate) wait: Option<Duration>,
    /// At most `max_delay`: [`RetryPolicy::delay`] orders the two.
    min_delay: Duration,
    max_delay: Duration,
}

/// The default delay between attempts: 10-100 ms.
const DEFAULT_DELAY: (Duration, Duration) = (Duration::from_millis(10), Duration::from_millis(100));

impl Default for RetryPolicy {
    /// Wait up to 10 s, any number of attempts, 10-100 ms apart.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redlease::RetryPolicy;
    /// assert_eq!(RetryPolicy::default(), RetryPolicy::within(Duration::from_secs(10)));
    /// ```
    fn default() -> Self {
        RetryPolicy::within(Duration::from_secs(10))
    }
}

impl RetryPolicy {
    /// When a wait that began at `start` is over: `start` plus the wait,
    /// or `None` for no deadline, which is also what a wait too long for
    /// the clock to represent (`Duration::MAX`, say) means: such a wait
    /// ends only by its attempts, success, or the caller dropping it.
    pub(crate) fn deadline(&self, start: Instant) -> Option<Instant> {
        self.wait.and_then(|wait| start.checked_add(wait))
    }

    /// Whether attempt number `attempts` is the last the wait makes: out of
    /// attempts, or past `deadline` already. Only an attempt that may be
    /// followed by waiting marks the holder for waiters: after the last
    /// one nobody listens for the release, and a marked holder would
    /// publish it to nobody.
    pub(crate) fn is_last_attempt(&self, attempts: u32, deadline: Option<Instant>) -> bool {
        self.attempts.is_some_and(|max| attempts >= max)
            || deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// After attempt number `attempts` failed with `failure`: the error
    /// that ends the wait if it is over, out of attempts (the failure's
    /// error as it is) or past `deadline` ([`Error::WaitTimeout`] wrapping
    /// it; the wait began at `start`); otherwise the failure, to go on.
    pub(crate) fn ends_wait(
        &self,
        attempts: u32,
        start: Instant,
        deadline: Option<Instant>,
        resource: &str,
        failure: Failure,
    ) -> Result<Failure, Error> {
        if self.attempts.is_some_and(|max| attempts >= max) {
            return Err(failure.error);
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Err(Error::WaitTimeout {
                resource: resource.to_string(),
                waited: now - start,
                attempts,
                last: Box::new(failure.error),
            });
        }
        Ok(failure)
    }

    fn bounded(attempts: Option<NonZeroU32>, wait: Option<Duration>) -> Self {
        RetryPolicy {
            attempts: attempts.map(NonZeroU32::get),
            wait,
            min_delay: DEFAULT_DELAY.0,
            max_delay: DEFAULT_DELAY.1,
        }
    }

    /// Any number of attempts until `wait` has passed since the first one
    /// began (the attempt running at the deadline still finishes, within
    /// twice the per-node timeout); then [`Error::WaitTimeout`](crate::Error::WaitTimeout).
    /// A `wait` too long for the clock to represent (`Duration::MAX`, or
    /// some hundreds of billions of years on common platforms) is a wait
    /// without limit, as [`forever`](Self::forever).
    ///
    /// ```
    /// let policy = redlease::RetryPolicy::within(std::time::Duration::from_secs(2));
    /// # let _ = policy;
    /// ```
    pub fn within(wait: Duration) -> Self {
        Self::bounded(None, Some(wait))
    }

    /// At most `n` attempts (the first one included), however long they
    /// take; the last attempt's error is returned as it is. One attempt
    /// never waits (what [`Locker::try_lock`](crate::Locker::try_lock)
    /// makes).
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// let policy = redlease::RetryPolicy::attempts(NonZeroU32::new(3).unwrap());
    /// # let _ = policy;
    /// ```
    pub fn attempts(n: NonZeroU32) -> Self {
        Self::bounded(Some(n), None)
    }

    /// At most `n` attempts, and none after `wait` has passed: whichever
    /// runs out first ends the wait. A `wait` too long for the clock to
    /// represent leaves only the attempt limit (see [`within`](Self::within)).
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// let five = NonZeroU32::new(5).unwrap();
    /// let policy = redlease::RetryPolicy::attempts_within(five, Duration::from_secs(2));
    /// # let _ = policy;
    /// ```
    pub fn attempts_within(n: NonZeroU32, wait: Duration) -> Self {
        Self::bounded(Some(n), Some(wait))
    }

    /// Wait as long as it takes: no attempt limit and no deadline. Only for
    /// callers that really mean it (a `flock`-style command, say); dropping
    /// the future still stops the wait at once.
    ///
    /// ```
    /// let policy = redlease::RetryPolicy::forever();
    /// # let _ = policy;
    /// ```
    pub fn forever() -> Self {
        Self::bounded(None, None)
    }

    /// Sleep a uniformly random time between `a` and `b` (in either order:
    /// the shorter is the minimum) between attempts. Any durations are
    /// accepted: no waiter sleeps past the holder's expiry or the wait's
    /// deadline whatever the delay (see above).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redlease::RetryPolicy;
    /// let ms = Duration::from_millis;
    /// let policy = RetryPolicy::default().delay(ms(5), ms(20));
    /// assert_eq!(policy, RetryPolicy::default().delay(ms(20), ms(5)));
    /// ```
    pub fn delay(mut self, a: Duration, b: Duration) -> Self {
        self.min_delay = a.min(b);
        self.max_delay = a.max(b);
        self
    }

    /// The policy's own delay: `min + sample * (max - min)`, cut short at
    /// the holder's expiry (`expires_in`). `sample` is uniform in `[0, 1)`.
    /// ([`fallback_delay`](Self::fallback_delay) applies the deadline.)
    /// Never past `max` however large the two are: the product is
    /// computed in `f64` seconds, which rounds, and is kept in range.
    fn delay_before_next(&self, sample: f64, expires_in: Option<Duration>) -> Duration {
        let span = self.max_delay - self.min_delay;
        let part = Duration::try_from_secs_f64(span.as_secs_f64() * sample.clamp(0.0, 1.0))
            .unwrap_or(span)
            .min(span);
        let delay = self.min_delay.saturating_add(part).min(self.max_delay);
        expires_in.map_or(delay, |expiry| delay.min(expiry))
    }

    /// The sleep of a waiter before it looks at the lock again, unless a
    /// release wakes it first. The policy's short random delay is only for
    /// a waiter that could miss the release: its subscription is not
    /// confirmed by a quorum, or the last attempt failed on node errors
    /// (then the lock may be free and merely unreachable), or its policy
    /// counts attempts (their spacing is what the caller asked for). A
    /// waiter that will hear the release sleeps until the holder's key is due to expire
    /// (a holder that crashed announces nothing), at most [`SAFETY_NET`];
    /// one behind another waiter of its Locker does not try at all until
    /// it is first in line. Never past a quarantined node's return (no use
    /// trying before it votes again), and never past the deadline.
    pub(crate) fn fallback_delay(
        &self,
        sample: f64,
        waiting: &Waiting,
        now: Instant,
        deadline: Option<Instant>,
    ) -> Duration {
        let mut delay = if waiting.behind {
            SAFETY_NET
        } else if waiting.heard && waiting.held_elsewhere && self.attempts.is_none() {
            // At least a millisecond: a key due to expire now may still be
            // there on the server; no busy loop while it goes.
            let until_expiry = waiting
                .expires_in
                .unwrap_or(SAFETY_NET)
                .clamp(MS, SAFETY_NET);
            until_expiry + crowd_spread(sample, waiting.crowd, until_expiry)
        } else {
            self.delay_before_next(sample, waiting.expires_in)
        };
        if let Some(back) = waiting.quarantine_left {
            delay = delay.max(back);
        }
        if let Some(deadline) = deadline {
            delay = delay.min(deadline.saturating_duration_since(now));
        }
        delay
    }
}

const MS: Duration = Duration::from_millis(1);

/// How often, in total, a crowd of waiting processes looks at a held lock
/// they will hear released (see [`crowd_spread`]).
pub(crate) const CROWD_CHECKS_PER_SEC: f64 = 1.5;

/// How many looks per expiry period a crowd may always make: ten waiters
/// never spread, and a crowd on a short TTL still finds a crashed holder's
/// key gone within a tenth of that TTL or so.
const FREE_LOOKS_PER_EXPIRY: f64 = 10.0;

/// More subscribers than any server serves by default (`maxclients`): a
/// count above it is garbage (Valkey 9.1.2 sometimes answers `PUBSUB
/// NUMSUB` with a number in the hundreds of millions), and is ignored.
const MAX_PLAUSIBLE_CROWD: u64 = 10_000;

/// The extra sleep of one waiter among `crowd` waiting processes (each
/// with its own subscription; tasks of one Locker count once, as only the
/// first of them looks). Each process looks at the holder's expiry (or the
/// safety net), then every `until_expiry` as a live holder renews. A crowd
/// of hundreds would look hundreds of times per TTL, so each adds a random
/// sleep, uniform in `[0, 2 * spread]`, with `spread` chosen so that
/// together they look about [`CROWD_CHECKS_PER_SEC`] times per second
/// (`crowd / (until_expiry + spread)`), or [`FREE_LOOKS_PER_EXPIRY`] times
/// per `until_expiry` if that is more. A lone waiter, or a few, adds
/// nothing; after a crashed holder's key expires, the first of a big crowd
/// looks about `2 / rate` later on average (1.3 s at 1.5 looks a second).
fn crowd_spread(sample: f64, crowd: u64, until_expiry: Duration) -> Duration {
    if crowd > MAX_PLAUSIBLE_CROWD {
        return Duration::ZERO;
    }
    let until = until_expiry.as_secs_f64();
    let rate = CROWD_CHECKS_PER_SEC.max(FREE_LOOKS_PER_EXPIRY / until);
    let spread = (crowd as f64 / rate - until).max(0.0);
    // Bounded like any sleep here: no crowd is worth an hour.
    Duration::from_secs_f64((2.0 * spread * sample).min(3_600.0))
}

/// The longest a lone waiter that will hear the release sleeps without
/// looking at the lock: a bound on what an unannounced release (a plain
/// `DEL` by an operator, a holder whose ACL user may not publish) costs it
/// when the holder's key has no expiry to wait for, or a longer one than
/// this. A crowd adds its spread ([`crowd_spread`]): one of its members
/// still looks about 1.5 times a second.
pub(crate) const SAFETY_NET: Duration = Duration::from_secs(30);

/// What a waiter knows when it picks its sleep ([`RetryPolicy::fallback_delay`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Waiting {
    /// Another waiter of this Locker is first in line: it does the trying.
    pub(crate) behind: bool,
    /// Its subscription to the lock's releases is confirmed on a quorum of
    /// nodes, so any release that succeeds is announced on one of them.
    pub(crate) heard: bool,
    /// The last attempt found one owner holding the lock on a quorum of
    /// nodes: not a split vote between contenders (whose partial grants
    /// are undone at once, unannounced), not node errors.
    pub(crate) held_elsewhere: bool,
    /// When the holder's key is due to expire, as the last attempt saw it.
    pub(crate) expires_in: Option<Duration>,
    /// How many processes wait for the lock, as the last attempt saw it.
    pub(crate) crowd: u64,
    /// When the first quarantined node votes again.
    pub(crate) quarantine_left: Option<Duration>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn policy() -> RetryPolicy {
        RetryPolicy::default().delay(10 * MS, 110 * MS)
    }

    #[test]
    fn delay_spans_min_to_max() {
        assert_eq!(policy().delay_before_next(0.0, None), 10 * MS);
        assert_eq!(policy().delay_before_next(0.5, None), 60 * MS);
        assert!(policy().delay_before_next(0.999_999, None) <= 110 * MS);
    }

    #[test]
    fn never_sleeps_past_the_holders_expiry_or_the_deadline() {
        let now = Instant::now();
        let p = policy();
        let polling = |expires_in| Waiting {
            expires_in,
            ..Waiting::default()
        };
        assert_eq!(
            p.fallback_delay(0.5, &polling(Some(7 * MS)), now, None),
            7 * MS
        );
        assert_eq!(
            p.fallback_delay(0.5, &polling(None), now, Some(now + 3 * MS)),
            3 * MS
        );
        assert_eq!(
            p.fallback_delay(0.5, &polling(Some(20 * MS)), now, Some(now - MS)),
            Duration::ZERO,
            "a passed deadline means no sleep"
        );
    }

    fn heard_and_held(expires_in: Option<Duration>) -> Waiting {
        Waiting {
            heard: true,
            held_elsewhere: true,
            expires_in,
            ..Waiting::default()
        }
    }

    #[test]
    fn a_waiter_that_will_hear_the_release_sleeps_until_the_holders_expiry() {
        let now = Instant::now();
        let p = policy();
        let ttl = 7_000 * MS;
        assert_eq!(
            p.fallback_delay(0.5, &heard_and_held(Some(ttl)), now, None),
            ttl
        );
        assert_eq!(
            p.fallback_delay(0.5, &heard_and_held(None), now, None),
            SAFETY_NET,
            "a key without expiry: the safety net"
        );
        assert_eq!(
            p.fallback_delay(0.5, &heard_and_held(Some(600 * 1_000 * MS)), now, None),
            SAFETY_NET,
            "never longer than the safety net"
        );
        assert_eq!(
            p.fallback_delay(0.5, &heard_and_held(Some(Duration::ZERO)), now, None),
            MS,
            "an expiry due now still sleeps a millisecond: no busy loop"
        );
        assert_eq!(
            p.fallback_delay(0.5, &heard_and_held(Some(ttl)), now, Some(now + 2 * MS)),
            2 * MS
        );
    }

    #[test]
    fn a_crowd_of_waiters_spreads_its_checks_and_a_few_do_not() {
        let now = Instant::now();
        let p = policy();
        let until = 8_000 * MS;
        let few = Waiting {
            crowd: 10,
            ..heard_and_held(Some(until))
        };
        assert_eq!(
            p.fallback_delay(0.99, &few, now, None),
            until,
            "10 waiters checking every 8 s are below the crowd rate"
        );
        let crowd = Waiting {
            crowd: 100,
            ..heard_and_held(Some(until))
        };
        assert_eq!(p.fallback_delay(0.0, &crowd, now, None), until);
        // Spread 100 / 1.5 - 8 = 58.67 s; uniform over twice that.
        let spread = p.fallback_delay(0.5, &crowd, now, None) - until;
        assert!(
            (spread.as_secs_f64() - (100.0 / 1.5 - 8.0)).abs() < 1e-6,
            "{spread:?}"
        );
        // On average 100 processes look 100 / (8 + 58.67) = 1.5 times a second.
        let mean: f64 = (0..1000)
            .map(|i| {
                p.fallback_delay(i as f64 / 1000.0, &crowd, now, None)
                    .as_secs_f64()
            })
            .sum::<f64>()
            / 1000.0;
        assert!((100.0 / mean - CROWD_CHECKS_PER_SEC).abs() < 0.05, "{mean}");
        assert_eq!(
            p.fallback_delay(0.5, &crowd, now, Some(now + until)),
            until,
            "not past the deadline"
        );
        // A lone waiter on a short TTL adds nothing; a crowd on it looks
        // ten times per expiry period: 100 / 20 - 0.5 = 4.5 s of spread.
        let short = 500 * MS;
        let lone = Waiting {
            crowd: 1,
            ..heard_and_held(Some(short))
        };
        assert_eq!(p.fallback_delay(0.99, &lone, now, None), short);
        let crowd_on_short = Waiting {
            crowd: 100,
            ..heard_and_held(Some(short))
        };
        let spread = p.fallback_delay(0.5, &crowd_on_short, now, None) - short;
        assert!((spread.as_secs_f64() - 4.5).abs() < 1e-6, "{spread:?}");
        // A count no server could have is ignored.
        let garbage = Waiting {
            crowd: 351_783_797,
            ..heard_and_held(Some(until))
        };
        assert_eq!(p.fallback_delay(0.99, &garbage, now, None), until);
    }

    #[test]
    fn a_waiter_that_could_miss_the_release_keeps_the_short_delay() {
        let now = Instant::now();
        let p = policy();
        let unheard = Waiting {
            heard: false,
            ..heard_and_held(Some(7_000 * MS))
        };
        assert_eq!(p.fallback_delay(0.5, &unheard, now, None), 60 * MS);
        let node_errors = Waiting {
            held_elsewhere: false,
            ..heard_and_held(Some(7_000 * MS))
        };
        assert_eq!(p.fallback_delay(0.5, &node_errors, now, None), 60 * MS);
        let expiring = Waiting {
            heard: false,
            ..heard_and_held(Some(3 * MS))
        };
        assert_eq!(p.fallback_delay(0.5, &expiring, now, None), 3 * MS);
        let counted = RetryPolicy::attempts(NonZeroU32::new(3).unwrap()).delay(10 * MS, 110 * MS);
        assert_eq!(
            counted.fallback_delay(0.5, &heard_and_held(Some(7_000 * MS)), now, None),
            60 * MS,
            "a policy that counts attempts keeps their spacing"
        );
    }

    #[test]
    fn a_waiter_behind_another_only_looks_again_after_the_safety_net() {
        let now = Instant::now();
        let behind = Waiting {
            behind: true,
            ..Waiting::default()
        };
        assert_eq!(policy().fallback_delay(0.5, &behind, now, None), SAFETY_NET);
        assert_eq!(
            policy().fallback_delay(0.5, &behind, now, Some(now + 5 * MS)),
            5 * MS
        );
    }

    #[test]
    fn nobody_tries_before_a_quarantined_node_votes_again() {
        let now = Instant::now();
        let back = 800 * MS;
        let quarantined = Waiting {
            quarantine_left: Some(back),
            ..Waiting::default()
        };
        assert_eq!(policy().fallback_delay(0.5, &quarantined, now, None), back);
        assert_eq!(
            policy().fallback_delay(0.5, &quarantined, now, Some(now + 100 * MS)),
            100 * MS,
            "but not past the deadline"
        );
    }

    #[test]
    fn each_constructor_fixes_its_bound() {
        let n = |n| NonZeroU32::new(n).unwrap();
        let sec = Duration::from_secs(2);
        let bounds = |p: RetryPolicy| (p.attempts, p.wait);
        assert_eq!(bounds(RetryPolicy::within(sec)), (None, Some(sec)));
        assert_eq!(bounds(RetryPolicy::attempts(n(3))), (Some(3), None));
        assert_eq!(
            bounds(RetryPolicy::attempts_within(n(3), sec)),
            (Some(3), Some(sec))
        );
        assert_eq!(bounds(RetryPolicy::forever()), (None, None));
        assert_eq!(
            bounds(RetryPolicy::attempts(NonZeroU32::MIN)),
            (Some(1), None)
        );
    }

    #[test]
    fn the_default_waits_ten_seconds_ten_to_a_hundred_ms_apart() {
        let p = RetryPolicy::default();
        assert_eq!((p.attempts, p.wait), (None, Some(Duration::from_secs(10))));
        assert_eq!((p.min_delay, p.max_delay), (10 * MS, 100 * MS));
        // Every constructor starts from the same delay.
        assert_eq!(RetryPolicy::forever().min_delay, 10 * MS);
        assert_eq!(RetryPolicy::forever().max_delay, 100 * MS);
    }

    #[test]
    fn a_wait_beyond_the_clock_has_no_deadline() {
        let now = Instant::now();
        assert_eq!(RetryPolicy::within(Duration::MAX).deadline(now), None);
        let half = Duration::from_secs(u64::MAX / 2);
        assert_eq!(RetryPolicy::within(half).deadline(now), None);
        assert_eq!(
            RetryPolicy::within(2 * MS).deadline(now),
            Some(now + 2 * MS)
        );
        assert_eq!(RetryPolicy::forever().deadline(now), None);
        let max = RetryPolicy::default().delay(Duration::MAX, Duration::ZERO);
        assert!(max.delay_before_next(0.999_999_999_999_999_9, None) <= Duration::MAX);
        assert_eq!(max.delay_before_next(0.0, None), Duration::ZERO);
    }

    /// Any duration: `Duration::MAX`, nanoseconds, the edges between.
    fn any_duration() -> impl Strategy<Value = Duration> {
        prop_oneof![
            Just(Duration::ZERO),
            Just(Duration::MAX),
            Just(Duration::from_secs(u64::MAX / 2)),
            (0u64..10_000).prop_map(Duration::from_millis),
            (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        ]
    }

    fn any_policy() -> impl Strategy<Value = RetryPolicy> {
        let n = || (1u32..).prop_map(|n| NonZeroU32::new(n).unwrap());
        let bound = prop_oneof![
            any_duration().prop_map(RetryPolicy::within),
            n().prop_map(RetryPolicy::attempts),
            (n(), any_duration()).prop_map(|(n, d)| RetryPolicy::attempts_within(n, d)),
            Just(RetryPolicy::forever()),
            Just(RetryPolicy::default()),
        ];
        (bound, any_duration(), any_duration()).prop_map(|(p, a, b)| p.delay(a, b))
    }

    fn any_waiting() -> impl Strategy<Value = Waiting> {
        (
            any::<(bool, bool, bool)>(),
            proptest::option::of(any_duration()),
            any::<u64>(),
            proptest::option::of(any_duration()),
        )
            .prop_map(
                |((behind, heard, held_elsewhere), expires_in, crowd, quarantine_left)| Waiting {
                    behind,
                    heard,
                    held_elsewhere,
                    expires_in,
                    crowd,
                    quarantine_left,
                },
            )
    }

    proptest! {
        /// The deadline and delay arithmetic never panics, whatever the
        /// durations, and keeps its promises: a delay within the policy's
        /// range (or the holder's expiry), never past the deadline.
        #[test]
        fn the_wait_arithmetic_takes_any_durations(
            policy in any_policy(),
            waiting in any_waiting(),
            sample in 0.0f64..1.0,
            started_ago in 0u64..100_000,
        ) {
            let now = Instant::now();
            let start = now.checked_sub(Duration::from_millis(started_ago)).unwrap_or(now);
            let deadline = policy.deadline(start);
            match (policy.wait, deadline) {
                (None, d) => prop_assert_eq!(d, None),
                (Some(wait), Some(d)) => prop_assert_eq!(d - start, wait),
                (Some(wait), None) => prop_assert!(start.checked_add(wait).is_none()),
            }
            let own = policy.delay_before_next(sample, waiting.expires_in);
            prop_assert!(own >= policy.min_delay.min(waiting.expires_in.unwrap_or(Duration::MAX)));
            prop_assert!(own <= policy.max_delay);
            let delay = policy.fallback_delay(sample, &waiting, now, deadline);
            if let Some(d) = deadline {
                prop_assert!(delay <= d.saturating_duration_since(now));
            }
            // What the waiting loop asks of it next: no panic either.
            let _ = policy.is_last_attempt(1, deadline);
            let _ = tokio::time::Instant::now().checked_add(delay);
        }
    }

    #[test]
    fn a_delay_given_backwards_is_the_same_range() {
        let backwards = RetryPolicy::default().delay(5 * MS, 4 * MS);
        assert_eq!(backwards, RetryPolicy::default().delay(4 * MS, 5 * MS));
        assert_eq!((backwards.min_delay, backwards.max_delay), (4 * MS, 5 * MS));
        assert_eq!(backwards.delay_before_next(0.0, None), 4 * MS);
        assert!(backwards.delay_before_next(0.999_999, None) <= 5 * MS);
        let fixed = RetryPolicy::default().delay(7 * MS, 7 * MS);
        assert_eq!(fixed.delay_before_next(0.5, None), 7 * MS);
    }
}
