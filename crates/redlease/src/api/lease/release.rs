//! [`Lease::release`]: giving a lease back, deciding at quorum, and
//! telling the lock's waiters.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use tracing::Instrument;

use crate::coord::background;
use crate::coord::fanout;
use crate::core::error::{Error, Op};
use crate::core::quorum::Decision;
use crate::core::telemetry;
use crate::core::token::ReleaseId;

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
        if !self.guard.unregister() {
            // `close` released it already.
            return Err(Error::Closed);
        }
        let engine = self.guard.engine.clone();
        let ownership = self.guard.ownership.clone();
        let timeout = self.guard.timing.node_timeout;
        // Nodes whose acquire still runs get the release once it is done
        // there (it must not overtake it), the others at once.
        let deferred = ownership.in_flight.nodes() != 0;
        // Worked out only if a task of this Locker waits, and then once.
        let release_id = std::sync::OnceLock::new();
        let release_id = || *release_id.get_or_init(|| ReleaseId::of(&ownership.token));
        let quorum = ownership.claim.quorum(engine.nodes().len());
        // A task of this Locker that waits for the lock marked it; the
        // first of them, if it waits out of line for this lease alone, goes
        // in line where others wait (see release.lua).
        let notifier = engine.started_notifier();
        let marked = notifier.is_some_and(|n| {
            ownership
                .each_key()
                .any(|key| n.has_waiters(&crate::core::keys::release_channel(key)))
        });
        let next: Option<(Arc<str>, u64)> = match (marked, ownership.claim.alone()) {
            (true, Some(keys)) => {
                notifier.and_then(|n| n.next_place(&crate::core::keys::release_channel(&keys.lock)))
            }
            _ => None,
        };
        let next = Arc::new(next);
        let decided = fanout::until_decided_at(engine.nodes(), quorum, |node| {
            let (ownership, next) = (ownership.clone(), next.clone());
            async move {
                let i = node.id().index();
                background::lowered(&*ownership, 1 << i).await;
                if !ownership.written.may_hold(i) {
                    return Ok(false);
                }
                ownership
                    .release_on_node(&node, true, marked, next.as_ref().as_ref(), timeout)
                    .await
            }
        });
        let mut decided = std::pin::pin!(decided);
        // The first poll writes the release to every node's connection
        // (unless one waits for its acquire): the next waiter of this
        // Locker may send its acquire now, behind it (see
        // `Notifier::released`).
        let first = std::future::poll_fn(|cx| Poll::Ready(decided.as_mut().poll(cx))).await;
        let mut replies = match first {
            Poll::Ready(replies) => replies,
            Poll::Pending if deferred => decided.await,
            Poll::Pending => {
                for key in ownership.each_key() {
                    engine.announce_release(key, release_id);
                }
                decided.await
            }
        };
        let result = match replies.tally.decision() {
            Decision::Reached => {
                replies.detach(engine.background());
                for key in ownership.each_key() {
                    engine.announce_release(key, release_id);
                }
                Ok(())
            }
            Decision::Impossible | Decision::Pending => {
                replies.finish().await;
                let expired = Instant::now() >= self.valid_until_now();
                Err(replies
                    .shortfall(Op::Release, engine.nodes())
                    .into_error(&self.label(), expired))
            }
        };
        self.guard.disarm();
        result
    }
}
