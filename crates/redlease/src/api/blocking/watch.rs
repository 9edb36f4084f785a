//! [`Watch`]: a name's changes, for a thread without an async runtime.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::api::blocking::runtime::Shared;
use crate::core::error::Error;
use crate::core::lock_status::LockStatus;

/// A name's state now, then each time it changes (the blocking face of
/// [`crate::Watch`], with the same rules), from
/// [`Locker::watch`](super::Locker::watch); an iterator too.
///
/// ```
/// use std::time::Duration;
/// # fn main() -> Result<(), redlease::Error> {
/// # let nodes = redlease_testkit::RedisNodes::start(1);
/// # let locker = redlease::blocking::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(Duration::ZERO)).build()?; // brand-new test servers
/// let mut watch = locker.watch("nightly-report");
/// assert!(watch.changed()?.holders().is_empty()); // free now
/// // Nothing changes for 100 ms: nothing is told.
/// assert!(watch.changed_within(Duration::from_millis(100))?.is_none());
/// # Ok(()) }
/// ```
pub struct Watch {
    inner: crate::Watch,
    shared: Arc<Shared>,
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl Watch {
    pub(super) fn new(inner: crate::Watch, shared: Arc<Shared>) -> Self {
        Watch { inner, shared }
    }

    /// The state now on the first call, then the next change.
    ///
    /// # Blocking
    ///
    /// Until the name changes.
    pub fn changed(&mut self) -> Result<LockStatus, Error> {
        self.shared.block_on(self.inner.changed())?
    }

    /// [`changed`](Self::changed), waiting at most `wait`: `Ok(None)` when
    /// nothing changed meanwhile.
    pub fn changed_within(&mut self, wait: Duration) -> Result<Option<LockStatus>, Error> {
        // Made on the facade's runtime: a timer needs one.
        let next = async { tokio::time::timeout(wait, self.inner.changed()).await };
        match self.shared.block_on(next)? {
            Ok(told) => told.map(Some),
            Err(_elapsed) => Ok(None),
        }
    }
}

impl Iterator for Watch {
    type Item = Result<LockStatus, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.changed())
    }
}
