//! [`Semaphore`]: at most N holders of one name at once, for threads
//! without an async runtime.

use std::fmt;
use std::sync::Arc;

use crate::api::blocking::acquire::Acquire;
use crate::api::blocking::lease::Lease;
use crate::api::blocking::runtime::Shared;
use crate::api::semaphore::Semaphore as AsyncSemaphore;
use crate::core::error::Error;

/// A counting semaphore from
/// [`Locker::semaphore`](crate::blocking::Locker::semaphore): at most
/// [`permits`](Self::permits) holders of its name at once, fleet-wide,
/// each permit a [`Lease`]. The blocking form of
/// [`redlease::Semaphore`](crate::Semaphore), which says what quorum a
/// permit needs over several nodes.
///
/// ```
/// # fn main() -> Result<(), redlease::Error> {
/// # let nodes = redlease_testkit::RedisNodes::start(1);
/// # let locker = redlease::blocking::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
/// // At most 2 encodes at once, across the fleet:
/// let encoders = locker.semaphore("encoders", 2);
/// let a = encoders.acquire()?;
/// let b = encoders.acquire()?;
/// assert!(matches!(encoders.try_acquire(), Err(redlease::Error::Taken { .. })));
/// a.release()?;
/// b.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore<'a> {
    shared: &'a Arc<Shared>,
    inner: AsyncSemaphore<'a>,
}

impl fmt::Debug for Semaphore<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl<'a> Semaphore<'a> {
    pub(super) fn new(shared: &'a Arc<Shared>, inner: AsyncSemaphore<'a>) -> Self {
        Semaphore { shared, inner }
    }

    /// How many holders it admits at once.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) {
    /// assert_eq!(locker.semaphore("deploys", 3).permits(), 3);
    /// # }
    /// ```
    pub fn permits(&self) -> u32 {
        self.inner.permits()
    }

    /// How many of the Locker's nodes must hold a permit for it to count
    /// ([`Semaphore::quorum`](crate::Semaphore::quorum)).
    ///
    /// ```no_run
    /// # fn f(five_nodes: &redlease::blocking::Locker) {
    /// assert_eq!(five_nodes.semaphore("deploys", 3).quorum(), 4);
    /// # }
    /// ```
    pub fn quorum(&self) -> usize {
        self.inner.quorum()
    }

    /// How many of the Locker's nodes may fail while permits are still
    /// taken ([`Semaphore::tolerates`](crate::Semaphore::tolerates)).
    ///
    /// ```no_run
    /// # fn f(three_nodes: &redlease::blocking::Locker) {
    /// assert_eq!(three_nodes.semaphore("jobs", 1).tolerates(), 1);
    /// # }
    /// ```
    pub fn tolerates(&self) -> usize {
        self.inner.tolerates()
    }

    /// Accept a semaphore on which no node may fail, which is otherwise
    /// refused ([`Semaphore::allow_no_failures`](crate::Semaphore::allow_no_failures)).
    ///
    /// ```no_run
    /// # fn f(three_nodes: &redlease::blocking::Locker) {
    /// let jobs = three_nodes.semaphore("jobs", 2).allow_no_failures();
    /// # let _ = jobs; }
    /// ```
    pub fn allow_no_failures(self) -> Self {
        Semaphore {
            shared: self.shared,
            inner: self.inner.allow_no_failures(),
        }
    }

    /// Waits for a permit, as [`Locker::lock`](crate::blocking::Locker::lock)
    /// waits for a lock. Settings that cannot work (no permits, or no node
    /// that may fail unless accepted) are [`Error::InvalidInput`] before
    /// any I/O.
    ///
    /// # Blocking
    ///
    /// As [`Locker::lock`](crate::blocking::Locker::lock): for the wait
    /// (10 s by default) and at most one more attempt.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let permit = locker.semaphore("deploys", 3).acquire()?;
    /// // ... deploy ...
    /// permit.release()?;
    /// # Ok(()) }
    /// ```
    pub fn acquire(&self) -> Result<Lease, Error> {
        self.request().lock()
    }

    /// Makes one attempt at a permit: the lease, or why not (typically
    /// [`Error::Taken`]: every permit is held).
    ///
    /// # Blocking
    ///
    /// As [`Locker::try_lock`](crate::blocking::Locker::try_lock): one
    /// round trip, bounded by the node timeout.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// if let Ok(permit) = locker.semaphore("slots", 4).try_acquire() {
    ///     permit.release()?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_acquire(&self) -> Result<Lease, Error> {
        self.request().try_lock()
    }

    /// Waits for `k` of the permits at once, all or none, as one lease
    /// (see the async [`Semaphore::acquire_many`](crate::Semaphore::acquire_many)):
    /// waiters take permits in the order they came, whatever their
    /// weights.
    ///
    /// # Blocking
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let three = locker.semaphore("build-slots", 8).acquire_many(3)?;
    /// three.release()?;
    /// # Ok(()) }
    /// ```
    pub fn acquire_many(&self, k: u32) -> Result<Lease, Error> {
        self.request_many(k).lock()
    }

    /// Makes one attempt at `k` of the permits at once.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// if let Ok(two) = locker.semaphore("encoders", 4).try_acquire_many(2) {
    ///     two.release()?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_acquire_many(&self, k: u32) -> Result<Lease, Error> {
        self.request_many(k).try_lock()
    }

    /// A request for `k` permits at once, with per-call options, to end
    /// with `lock`, `try_lock` or `with`.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let two = locker.semaphore("encoders", 4).request_many(2).keep_alive().lock()?;
    /// # two.release() }
    /// ```
    pub fn request_many(&self, k: u32) -> Acquire<'a> {
        Acquire::permits(self.shared, self.inner.clone(), k)
    }

    /// A request for a permit, with per-call options (TTL, wait,
    /// keep-alive), to end with `lock`, `try_lock` or `with`.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let api = locker.semaphore("rate-limited-api", 8);
    /// let status = api.request().keep_alive().with(|_permit| {
    ///     200 // ... one of at most 8 calls in flight, fleet-wide ...
    /// })?;
    /// # let _ = status; Ok(()) }
    /// ```
    pub fn request(&self) -> Acquire<'a> {
        Acquire::permit(self.shared, self.inner.clone())
    }
}
