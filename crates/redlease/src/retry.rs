//! When to try again after a failed attempt. Pure: the random sample comes in
//! as an argument so the arithmetic can be tested.

use std::time::{Duration, Instant};

/// How [`Locker::lock`](crate::Locker::lock) waits: a bound on attempts
/// and/or on the total wait, and a random delay between attempts.
///
/// Waiters retry as soon as the holder's release is announced (see the
/// crate docs); the delay is the fallback for when no announcement comes,
/// and a waiter never sleeps past the time the holder's key is due to
/// expire, as reported by the failed attempt.
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

    pub(crate) fn check(&self) -> Result<(), crate::Error> {
        use crate::Error;
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

    /// The sleep before the next attempt: `min + sample * (max - min)`, cut
    /// short at the holder's expiry (`expires_in`) and at the deadline.
    /// `sample` is uniform in `[0, 1)`.
    pub(crate) fn delay_before_next(
        &self,
        sample: f64,
        expires_in: Option<Duration>,
        now: Instant,
        deadline: Option<Instant>,
    ) -> Duration {
        let mut delay = self.min_delay + (self.max_delay - self.min_delay).mul_f64(sample);
        if let Some(expiry) = expires_in {
            delay = delay.min(expiry);
        }
        if let Some(deadline) = deadline {
            delay = delay.min(deadline.saturating_duration_since(now));
        }
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn policy() -> RetryPolicy {
        RetryPolicy::new().delay(10 * MS, 110 * MS)
    }

    #[test]
    fn delay_spans_min_to_max() {
        let now = Instant::now();
        assert_eq!(policy().delay_before_next(0.0, None, now, None), 10 * MS);
        assert_eq!(policy().delay_before_next(0.5, None, now, None), 60 * MS);
        assert!(policy().delay_before_next(0.999_999, None, now, None) <= 110 * MS);
    }

    #[test]
    fn never_sleeps_past_the_holders_expiry_or_the_deadline() {
        let now = Instant::now();
        let p = policy();
        assert_eq!(p.delay_before_next(0.5, Some(7 * MS), now, None), 7 * MS);
        assert_eq!(
            p.delay_before_next(0.5, None, now, Some(now + 3 * MS)),
            3 * MS
        );
        assert_eq!(
            p.delay_before_next(0.5, Some(20 * MS), now, Some(now - MS)),
            Duration::ZERO,
            "a passed deadline means no sleep"
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
