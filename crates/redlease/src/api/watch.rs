//! [`Watch`]: a name's state, told each time it changes.

use std::sync::Arc;

use futures_util::Stream;

use crate::coord::engine::Engine;
use crate::coord::watch::Watching;
use crate::core::error::Error;
use crate::core::lock_status::LockStatus;

/// A name's state as every node tells it, first now and then each time
/// it changes: held (by whom), free, readers and permits in use, waiters
/// in line, a holder in its lock-delay, an election's leader. From
/// [`Locker::watch`](crate::Locker::watch).
///
/// Driven by notifications, not polling: every change the library makes
/// to a name is published on the name's channel, and the watcher reads
/// the name again when told. A hold that ends with no word (its holder
/// died) is read when it is due to end. Renewals are not told: a watcher
/// of a lease kept alive reads the name about once per TTL, and tells
/// nothing when nothing changed. Changes that follow each other faster
/// than a read may be told as one.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redlease::Error> {
/// # let nodes = redlease_testkit::RedisNodes::start(1);
/// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
/// let now = std::time::SystemTime::now;
/// let mut watch = locker.watch("nightly-report");
/// let status = watch.changed().await?; // as it is now: free
/// assert!(status.holders().is_empty());
/// let lease = locker.lock("nightly-report").await?;
/// let status = watch.changed().await?; // told: taken
/// println!("held by {:?}", redlease::Holder::describe_all(&status.holders(), now()));
/// # lease.release().await }
/// ```
///
/// # Cancel safety
///
/// [`changed`](Self::changed) is cancel safe: a change read but not
/// returned is told by the next call. Dropping the `Watch` unsubscribes
/// (a moment later, when no other task of the Locker watches the name).
pub struct Watch {
    inner: Watching,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("resource", &self.inner.resource())
            .finish_non_exhaustive()
    }
}

impl Watch {
    pub(crate) fn new(engine: Arc<Engine>, resource: String) -> Watch {
        Watch {
            inner: Watching::new(engine, resource),
        }
    }

    /// The name watched.
    pub fn resource(&self) -> &str {
        self.inner.resource()
    }

    /// The name's state now, on the first call; then waits for the next
    /// state that differs from the last one returned. An invalid name is
    /// [`Error::InvalidInput`] before any I/O; a closed Locker
    /// [`Error::Closed`]. Nodes that fail are told in the status (its
    /// [`verdict`](LockStatus::verdict) is then unknown), and looked at
    /// again every second.
    pub async fn changed(&mut self) -> Result<LockStatus, Error> {
        self.inner.changed().await
    }

    /// The same as a [`Stream`], which ends after the first error.
    ///
    /// ```
    /// # async fn f(locker: &redlease::Locker) {
    /// use futures_util::StreamExt;
    /// let mut changes = std::pin::pin!(locker.watch("nightly-report").into_stream());
    /// while let Some(Ok(status)) = changes.next().await {
    ///     println!("{:?}", status.verdict());
    /// }
    /// # }
    /// ```
    pub fn into_stream(self) -> impl Stream<Item = Result<LockStatus, Error>> + Send {
        futures_util::stream::unfold(Some(self), |watch| async move {
            let mut watch = watch?;
            let next = watch.changed().await;
            let more = next.is_ok().then_some(watch);
            Some((next, more))
        })
    }
}
