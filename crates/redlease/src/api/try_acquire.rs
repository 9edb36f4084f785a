//! [`TryAcquire`]: a lock request that makes one attempt and never waits.

use std::future::{Future, IntoFuture};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use crate::api::acquire::Acquire;
use crate::api::lease::Lease;
use crate::api::lease_handle::LeaseHandle;
use crate::coord::engine::Engine;
use crate::core::error::Error;
use crate::core::mode::Hold;
use crate::core::retry::RetryPolicy;

/// A lock request from [`Locker::try_lock`](crate::Locker::try_lock): one
/// attempt, whose refusal is the answer. Set per-call options, then
/// `.await` it. It has no wait or retry policy to set: that is what
/// [`Locker::lock`](crate::Locker::lock) is for.
///
/// ```
/// use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redlease::Error> {
/// # let nodes = redlease_testkit::RedisNodes::start(1);
/// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
/// match locker.try_lock("cron:cleanup").ttl(Duration::from_secs(60)).await {
///     Ok(lease) => lease.release().await?,
///     Err(redlease::Error::Taken { .. }) => println!("another machine runs it"),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[must_use = "a lock request does nothing until it is awaited"]
pub struct TryAcquire<'a> {
    /// A request whose policy allows exactly one attempt.
    once: Acquire<'a>,
}

impl std::fmt::Debug for TryAcquire<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TryAcquire").field(&self.once).finish()
    }
}

impl<'a> TryAcquire<'a> {
    pub(crate) fn new(engine: &'a Arc<Engine>, resource: String, hold: Hold) -> Self {
        let once = RetryPolicy::attempts(NonZeroU32::MIN);
        TryAcquire {
            once: Acquire::new(engine, resource, once, hold),
        }
    }

    /// One attempt at every name of `names`, all or none.
    pub(crate) fn all(engine: &'a Arc<Engine>, names: Vec<String>) -> Self {
        let once = RetryPolicy::attempts(NonZeroU32::MIN);
        TryAcquire {
            once: Acquire::all(engine, names, once),
        }
    }

    /// A request that fails with `why` before any I/O when awaited.
    pub(crate) fn refused(self, why: Option<Error>) -> Self {
        TryAcquire {
            once: self.once.refused(why),
        }
    }

    /// Takes read holds on `names` too, all or none: see
    /// [`Acquire::and_read`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let writer = locker.lock("rates").await?;
    /// // The rates are being written: nothing is taken.
    /// assert!(locker.try_lock("report").and_read(["rates"]).await.is_err());
    /// assert!(locker.try_lock("report").await?.release().await.is_ok());
    /// # writer.release().await }
    /// ```
    pub fn and_read<I, S>(self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        TryAcquire {
            once: self
                .once
                .reading(names.into_iter().map(Into::into).collect()),
        }
    }

    /// Use this TTL instead of the Locker's.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let lease = locker.try_lock("x").ttl(std::time::Duration::from_millis(500)).await?;
    /// # lease.release().await }
    /// ```
    pub fn ttl(self, ttl: Duration) -> Self {
        TryAcquire {
            once: self.once.ttl(ttl),
        }
    }

    /// Keep the lease alive, as [`Acquire::keep_alive`] does.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let lease = locker.try_lock("long-job").keep_alive().await?;
    /// // ... work for as long as it takes, checking lease.is_lost() ...
    /// # lease.release().await }
    /// ```
    pub fn keep_alive(self) -> Self {
        TryAcquire {
            once: self.once.keep_alive(),
        }
    }

    /// Takes the lock if it is free, keeps it alive while `work` runs with
    /// a [`LeaseHandle`], and releases it afterwards, as [`Acquire::with`]
    /// does. A lock that is taken is the error, and `work` does not run.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// match locker.try_lock("cron:cleanup").with(|_lease| async { /* the job */ }).await {
    ///     Ok(()) => println!("done"),
    ///     Err(redlease::Error::Taken { .. }) => println!("another machine runs it"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `work` and releases the lock in the
    /// background.
    pub async fn with<F, Fut, T>(self, work: F) -> Result<T, Error>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        self.once.with(work).await
    }
}

impl<'a> IntoFuture for TryAcquire<'a> {
    type Output = Result<Lease, Error>;
    type IntoFuture = <Acquire<'a> as IntoFuture>::IntoFuture;

    fn into_future(self) -> Self::IntoFuture {
        self.once.into_future()
    }
}
