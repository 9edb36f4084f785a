//! When to try again after a failed attempt. Pure: the random sample comes in
//! as an argument so the arithmetic can be tested.

use std::time::{Duration, Instant};

/// How [`Locker::lock`](crate::Locker::lock) waits: a bound on attempts
/// and/or on the total wait, and a random delay between attempts.
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
/// use std::time::Duration;
/// use redlease::RetryPolicy;
///
/// // Up to 20 attempts within 5 s, 10-50 ms apart.
/// let policy = RetryPolicy::new()
///     .attempts(20)
///     .wait(Duration::from_secs(5))
///     .delay(Duration::from_millis(10), Duration::from_millis(50));
/// # let _ = policy;
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    pub(crate) attempts: Option<u32>,
    pub(crate) wait: Option<Duration>,
    /// Set by [`RetryPolicy::wait_forever`]: no bound is intended.
    pub(crate) forever: bool,
    pub(crate) min_delay: Duration,
    pub(crate) max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: None,
            wait: Some(Duration::from_secs(10)),
            forever: false,
            min_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(100),
        }
    }
}

impl RetryPolicy {
    /// The default: wait up to 10 s, any number of attempts, 10-100 ms apart.
    ///
    /// ```
    /// let policy = redlease::RetryPolicy::new();
    /// # let _ = policy;
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// At most `n` attempts (the first one included). Zero is rejected when
    /// the [`Locker`](crate::Locker) is built.
    ///
    /// ```
    /// let policy = redlease::RetryPolicy::new().attempts(3);
    /// # let _ = policy;
    /// ```
    pub fn attempts(mut self, n: u32) -> Self {
        self.attempts = Some(n);
        self
    }

    /// No limit on attempts; only the wait deadline bounds the retries.
    ///
    /// ```
    /// let policy = redlease::RetryPolicy::new().unlimited_attempts();
    /// # let _ = policy;
    /// ```
    pub fn unlimited_attempts(mut self) -> Self {
        self.attempts = None;
        self
    }

    /// Give up once `wait` has passed since the first attempt began (the
    /// attempt running at the deadline still finishes, within twice the
    /// per-node timeout).
    ///
    /// ```
    /// let policy = redlease::RetryPolicy::new().wait(std::time::Duration::from_secs(2));
    /// # let _ = policy;
    /// ```
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// No wait deadline; only the attempt count bounds the retries.
    ///
    /// ```
    /// let policy = redlease::RetryPolicy::new().attempts(5).no_deadline();
    /// # let _ = policy;
    /// ```
    pub fn no_deadline(mut self) -> Self {
        self.wait = None;
        self
    }

    /// Wait as long as it takes: no attempt limit and no deadline. Only for
    /// callers that really mean it (a `flock`-style command, say); dropping
    /// the future still stops the wait at once.
    ///
    /// ```
    /// let policy = redlease::RetryPolicy::new().wait_forever();
    /// # let _ = policy;
    /// ```
    pub fn wait_forever(mut self) -> Self {
        self.attempts = None;
        self.wait = None;
        self.forever = true;
        self
    }

    /// Sleep a uniformly random time in `[min, max]` between attempts.
    ///
    /// ```
    /// use std::time::Duration;
    /// let policy = redlease::RetryPolicy::new()
    ///     .delay(Duration::from_millis(5), Duration::from_millis(20));
    /// # let _ = policy;
    /// ```
    pub fn delay(mut self, min: Duration, max: Duration) -> Self {
        self.min_delay = min;
        self.max_delay = max;
        self
    }

    pub(crate) fn check(&self) -> Result<(), crate::core::error::Error> {
        use crate::core::error::Error;
        if self.attempts == Some(0) {
            return Err(Error::invalid(
                "retry.attempts",
                "zero attempts would never try",
            ));
        }
        if self.attempts.is_none() && self.wait.is_none() && !self.forever {
            return Err(Error::invalid(
                "retry",
                "neither an attempt limit nor a wait deadline: waiting could last forever",
            ));
        }
        if self.min_delay > self.max_delay {
            return Err(Error::invalid(
                "retry.delay",
                format!(
                    "the minimum {:?} is above the maximum {:?}",
                    self.min_delay, self.max_delay
                ),
            ));
        }
        Ok(())
    }

    /// The policy's own delay: `min + sample * (max - min)`, cut short at
    /// the holder's expiry (`expires_in`). `sample` is uniform in `[0, 1)`.
    /// ([`fallback_delay`](Self::fallback_delay) applies the deadline.)
    fn delay_before_next(&self, sample: f64, expires_in: Option<Duration>) -> Duration {
        let delay = self.min_delay + (self.max_delay - self.min_delay).mul_f64(sample);
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

    fn policy() -> RetryPolicy {
        RetryPolicy::new().delay(10 * MS, 110 * MS)
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
        let counted = p.clone().attempts(3);
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
    fn check_rejects_policies_that_never_try_or_never_stop() {
        assert!(RetryPolicy::new().attempts(0).check().is_err());
        assert!(RetryPolicy::new().no_deadline().check().is_err());
        assert!(RetryPolicy::new().wait_forever().check().is_ok());
        assert!(RetryPolicy::new().delay(5 * MS, 4 * MS).check().is_err());
        assert!(RetryPolicy::new().attempts(1).no_deadline().check().is_ok());
        assert!(RetryPolicy::new().check().is_ok());
    }
}
