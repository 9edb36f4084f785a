//! [`Acquire`]: a blocking lock request, with its per-call options.

use std::fmt;
use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use crate::api::blocking::lease::Lease;
use crate::api::blocking::runtime::Shared;
use crate::api::semaphore::Semaphore as AsyncSemaphore;
use crate::core::error::Error;
use crate::core::retry::RetryPolicy;

/// A lock request with per-call options, from
/// [`Locker::request`](crate::blocking::Locker::request) (and
/// [`request_read`](crate::blocking::Locker::request_read),
/// [`request_all`](crate::blocking::Locker::request_all),
/// [`Semaphore::request`](crate::blocking::Semaphore::request)): set
/// options, then end it with [`lock`](Self::lock) (wait),
/// [`try_lock`](Self::try_lock) (one attempt) or [`with`](Self::with)
/// (run work under the lock). The blocking form of
/// [`redlease::Acquire`](crate::Acquire), whose options it takes.
///
/// ```
/// use std::time::Duration;
/// # fn main() -> Result<(), redlease::Error> {
/// # let nodes = redlease_testkit::RedisNodes::start(1);
/// # let locker = redlease::blocking::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(Duration::ZERO)).build()?; // brand-new test servers
/// let lease = locker
///     .request("daily-import")
///     .ttl(Duration::from_secs(60))
///     .wait(Duration::from_secs(5))
///     .keep_alive()
///     .lock()?;
/// # lease.release() }
/// ```
#[must_use = "a lock request does nothing until lock(), try_lock() or with() is called"]
pub struct Acquire<'a> {
    shared: &'a Arc<Shared>,
    target: Target<'a>,
    ttl: Option<Duration>,
    retry: Option<RetryPolicy>,
    wait: Option<Duration>,
    keep_alive: bool,
    /// Names read with the target, all or none ([`Acquire::and_read`]).
    read: Vec<String>,
}

/// What a request takes.
#[derive(Debug)]
enum Target<'a> {
    /// One name, alone (`read: false`) or shared with other readers.
    One { name: String, read: bool },
    /// Several names, all or none.
    All(Vec<String>),
    /// `k` permits of a semaphore, at once.
    Permit(AsyncSemaphore<'a>, u32),
}

impl fmt::Debug for Acquire<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquire")
            .field("target", &self.target)
            .field("ttl", &self.ttl)
            .field("retry", &self.retry)
            .field("wait", &self.wait)
            .field("keep_alive", &self.keep_alive)
            .field("read", &self.read)
            .finish()
    }
}

impl<'a> Acquire<'a> {
    fn new(shared: &'a Arc<Shared>, target: Target<'a>) -> Self {
        Acquire {
            shared,
            target,
            ttl: None,
            retry: None,
            wait: None,
            keep_alive: false,
            read: Vec::new(),
        }
    }

    pub(super) fn one(shared: &'a Arc<Shared>, name: String, read: bool) -> Self {
        Acquire::new(shared, Target::One { name, read })
    }

    pub(super) fn all(shared: &'a Arc<Shared>, names: Vec<String>) -> Self {
        Acquire::new(shared, Target::All(names))
    }

    pub(super) fn permits(shared: &'a Arc<Shared>, semaphore: AsyncSemaphore<'a>, k: u32) -> Self {
        Acquire::new(shared, Target::Permit(semaphore, k))
    }

    pub(super) fn permit(shared: &'a Arc<Shared>, semaphore: AsyncSemaphore<'a>) -> Self {
        Acquire::new(shared, Target::Permit(semaphore, 1))
    }

    /// Takes read holds on `names` too, all or none with the target
    /// ([`Acquire::and_read`](crate::Acquire::and_read)): a set of names
    /// some written and some only read. The lease's
    /// [`as_async`](Lease::as_async) tells each name's mode and token.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let transfer = locker
    ///     .request_all(["account:7", "account:3"])
    ///     .and_read(["rates"])
    ///     .lock()?;
    /// # transfer.release() }
    /// ```
    pub fn and_read<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.read.extend(names.into_iter().map(Into::into));
        self
    }

    /// Use this TTL instead of the Locker's
    /// ([`Acquire::ttl`](crate::Acquire::ttl)).
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let lease = locker.request("x").ttl(std::time::Duration::from_secs(120)).lock()?;
    /// # lease.release() }
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Keep retrying for at most `wait`, measured from the first attempt
    /// ([`Acquire::wait`](crate::Acquire::wait)), on top of the retry
    /// policy (the Locker's, or [`retry`](Self::retry)'s) whatever the
    /// order they are set in. [`try_lock`](Self::try_lock) ignores it.
    /// One too long for the clock to represent (`Duration::MAX`) waits
    /// without limit.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let lease = locker.request("x").wait(std::time::Duration::from_secs(3)).lock()?;
    /// # lease.release() }
    /// ```
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Use this retry policy instead of the Locker's
    /// ([`Acquire::retry`](crate::Acquire::retry)).
    /// [`try_lock`](Self::try_lock) ignores it.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let lease = locker.request("x").retry(redlease::RetryPolicy::forever()).lock()?;
    /// # lease.release() }
    /// ```
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Keep the lease alive: the Locker's threads renew it (every third
    /// of the TTL by default) until it is released or dropped, while the
    /// caller's thread does anything at all, sleeping included. Watch
    /// [`Lease::is_lost`] or [`Lease::wait_lost`] to learn at once if a
    /// renewal fails.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let lease = locker.request("long-job").keep_alive().lock()?;
    /// // ... work for as long as it takes, checking lease.is_lost() ...
    /// # lease.release() }
    /// ```
    pub fn keep_alive(mut self) -> Self {
        self.keep_alive = true;
        self
    }

    /// Takes the lock, waiting as [`Locker::lock`](crate::blocking::Locker::lock)
    /// does: until it is acquired or the wait ends (10 s by default:
    /// [`Error::WaitTimeout`]). A waiter is woken by the holder's release,
    /// without polling.
    ///
    /// # Blocking
    ///
    /// Until the lock is had, or for the wait (the retry policy's, 10 s
    /// by default, or [`wait`](Self::wait)'s) plus at most one attempt,
    /// whose requests are bounded by the node timeout (and the connect
    /// timeout for a node not connected yet). Inside a Tokio runtime:
    /// [`Error::InsideRuntime`], and nothing is sent.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let lease = locker.request("report").ttl(std::time::Duration::from_secs(60)).lock()?;
    /// # lease.release() }
    /// ```
    pub fn lock(self) -> Result<Lease, Error> {
        let shared = self.shared;
        shared.usable()?;
        let locker = shared.locker();
        let mut request = match self.target {
            Target::One { name, read: false } => locker.lock(name),
            Target::One { name, read: true } => locker.read_lock(name),
            Target::All(names) => locker.lock_all(names),
            Target::Permit(semaphore, k) => semaphore.acquire_many(k),
        };
        if !self.read.is_empty() {
            request = request.and_read(self.read);
        }
        if let Some(policy) = self.retry {
            request = request.retry(policy);
        }
        if let Some(wait) = self.wait {
            request = request.wait(wait);
        }
        if let Some(ttl) = self.ttl {
            request = request.ttl(ttl);
        }
        if self.keep_alive {
            request = request.keep_alive();
        }
        let lease = shared.run(request.into_future())?;
        Ok(Lease::new(lease, shared.clone()))
    }

    /// Makes exactly one attempt, as
    /// [`Locker::try_lock`](crate::blocking::Locker::try_lock) does: the
    /// lease, or why not (typically [`Error::Taken`]). The wait and retry
    /// policy do not apply.
    ///
    /// # Blocking
    ///
    /// For one attempt: one round trip to the nodes, each bounded by the
    /// node timeout (and the connect timeout for a node not connected
    /// yet). Inside a Tokio runtime: [`Error::InsideRuntime`].
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// match locker.request_read("catalog").try_lock() {
    ///     Ok(reader) => reader.release()?,
    ///     Err(redlease::Error::Taken { .. }) => println!("a writer has it"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_lock(mut self) -> Result<Lease, Error> {
        // What the async try_ forms are: the request with one attempt.
        self.retry = Some(RetryPolicy::attempts(std::num::NonZeroU32::MIN));
        self.wait = None;
        self.lock()
    }

    /// Takes the lock as [`lock`](Self::lock) does, kept alive, runs
    /// `work` on this thread with the lease, releases the lock, and
    /// returns what `work` returned.
    ///
    /// `work` is not interrupted if the lease is lost meanwhile (a thread
    /// cannot be stopped from outside): check
    /// [`Lease::is_lost`] between its steps. A lease lost by the time
    /// `work` returns, or found no longer ours by the release, makes the
    /// call [`Error::Lost`] (and drops `work`'s result): the work may not
    /// have been protected to the end. A panic in `work` releases the
    /// lock as a drop does.
    ///
    /// # Blocking
    ///
    /// As [`lock`](Self::lock), then for as long as `work` runs, then as
    /// [`Lease::release`].
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let rows = locker
    ///     .request("nightly-import")
    ///     .wait(std::time::Duration::from_secs(60))
    ///     .with(|lease| {
    ///         let mut rows = 0;
    ///         while rows < 1_000 && !lease.is_lost() {
    ///             rows += 100; // ... import a batch ...
    ///         }
    ///         rows
    ///     })?;
    /// # let _ = rows; Ok(()) }
    /// ```
    pub fn with<T>(self, work: impl FnOnce(&Lease) -> T) -> Result<T, Error> {
        let lease = self.keep_alive().lock()?;
        let out = work(&lease);
        lease.finish(out)
    }
}
