//! [`Lease::release`]: giving a lease back (decided at quorum in
//! [`coord::release`](crate::coord::release)).

use std::time::Instant;

use tracing::Instrument;

use crate::core::error::{Error, Op};
use crate::core::telemetry;

use super::Lease;

impl Lease {
    /// Gives the lock back: deletes the key on every node where it still
    /// holds our token (never anyone else's).
    ///
    /// `Ok` means a quorum confirmed the lock was still ours until now. A
    /// lease that expired or was taken over gives [`Error::NotHeld`]: the
    /// protected work may have overlapped with another holder's.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let lease = locker.lock("orders:42").await?;
    /// // ... work ...
    /// if let Err(e) = lease.release().await {
    ///     eprintln!("the lock was not ours to the end: {e}");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes drops the lease, which
    /// releases it again in the background.
    pub async fn release(self) -> Result<(), Error> {
        let span = tracing::debug_span!(
            "redlease.release",
            resource = self.resource(),
            outcome = tracing::field::Empty,
            elapsed_ms = tracing::field::Empty,
        );
        let timed = telemetry::is_timed(&span);
        let release = async {
            let started = timed.then(Instant::now);
            let result = self.release_once().await;
            telemetry::finished(Op::Release, result.as_ref().copied(), started);
            result
        };
        // As for the acquire: a span nobody records is not entered.
        if span.is_disabled() {
            release.await
        } else {
            release.instrument(span).await
        }
    }

    async fn release_once(mut self) -> Result<(), Error> {
        let (guard, _, label) = self.guard_and_label();
        guard.release(label).await
    }
}
