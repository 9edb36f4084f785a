//! [`Lease`]: a held lock, for a thread without an async runtime.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::api::blocking::runtime::Shared;
use crate::api::lease::Lease as AsyncLease;
use crate::core::error::Error;
use crate::core::lease_state::LostReason;

/// A lock we hold, until [`valid_until`](Self::valid_until): the blocking
/// form of [`redlease::Lease`](crate::Lease), from
/// [`blocking::Locker`](crate::blocking::Locker).
///
/// Give it back with [`release`](Self::release). A lease dropped without
/// `release` is released on drop, which waits for the release up to
/// [`DROP_WAIT`](crate::blocking::DROP_WAIT) (1 s) and leaves the rest to
/// the Locker's threads. Ownership is the lease's random token, not a
/// thread: the lease can move to another thread.
///
/// ```
/// use std::time::Duration;
/// # fn main() -> Result<(), redlease::Error> {
/// # let nodes = redlease_testkit::RedisNodes::start(1);
/// # let locker = redlease::blocking::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(Duration::ZERO)).build()?; // brand-new test servers
/// let mut lease = locker.lock("orders:42")?;
/// println!("{} is ours for {:?}", lease.resource(), lease.remaining());
/// lease.extend(Duration::from_secs(10))?;
/// lease.release()?;
/// # Ok(()) }
/// ```
#[must_use = "dropping a Lease releases the lock (waiting up to DROP_WAIT)"]
pub struct Lease {
    /// `None` once released, or while dropped.
    inner: Option<AsyncLease>,
    shared: Arc<Shared>,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Some(inner) => inner.fmt(f),
            None => f.write_str("Lease(released)"),
        }
    }
}

impl Lease {
    pub(super) fn new(inner: AsyncLease, shared: Arc<Shared>) -> Lease {
        Lease {
            inner: Some(inner),
            shared,
        }
    }

    fn inner(&self) -> &AsyncLease {
        self.inner
            .as_ref()
            .expect("a lease is whole until it is given up")
    }

    /// The resource name the lock was taken on.
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::blocking::Lease) {
    /// println!("holding {}", lease.resource());
    /// # }
    /// ```
    pub fn resource(&self) -> &str {
        self.inner().resource()
    }

    /// The fencing token of this acquisition, with fencing on
    /// ([`LockerBuilder::fencing`](crate::blocking::LockerBuilder::fencing)):
    /// pass it with every write to the protected resource, and have the
    /// resource reject a token lower than the highest it has seen. See
    /// [`Lease::fencing_token`](crate::Lease::fencing_token).
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::blocking::Lease) {
    /// let fence = lease.fencing_token().expect("fencing is on");
    /// // UPDATE ledger SET ..., fence = $fence WHERE id = $id AND fence < $fence
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.inner().fencing_token()
    }

    /// Until when the lock is ours (renewals and extends move it later).
    /// After this instant, stop touching the protected resource.
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::blocking::Lease) {
    /// assert!(lease.valid_until() > std::time::Instant::now());
    /// # }
    /// ```
    pub fn valid_until(&self) -> Instant {
        self.inner().valid_until()
    }

    /// Time left until [`valid_until`](Self::valid_until); zero once passed.
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::blocking::Lease) {
    /// if lease.remaining() < std::time::Duration::from_secs(1) {
    ///     // too little time left for another step
    /// }
    /// # }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.inner().remaining()
    }

    /// Whether the lease can no longer be trusted: its validity ran out
    /// (or is about to, within one drift allowance), or a renewal or
    /// extend found that a quorum no longer holds it. Cheap (no I/O, no
    /// waiting); check it between the steps of the work. Once lost, a
    /// lease never comes back. True in a child process that inherited the
    /// lease across `fork()`: the lease is the parent's.
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::blocking::Lease) {
    /// for batch in 0..100 {
    ///     if lease.is_lost() {
    ///         break; // stop before touching the resource again
    ///     }
    ///     // ... import one batch ...
    /// }
    /// # }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.lost_reason().is_some()
    }

    /// Why the lease is lost, if it is. In a child process that inherited
    /// the lease across `fork()`: [`LostReason::Closed`] (the Locker does
    /// not work there).
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::blocking::Lease) {
    /// if let Some(why) = lease.lost_reason() {
    ///     eprintln!("lost {}: {why}", lease.resource());
    /// }
    /// # }
    /// ```
    pub fn lost_reason(&self) -> Option<LostReason> {
        if self.shared.forked() {
            return Some(LostReason::Closed);
        }
        self.inner().lost_reason()
    }

    /// Waits until the lease is lost, or `timeout` passes: `Some(why)` if
    /// it was lost (at once if it already is), `None` if the timeout
    /// passed first. A lease that is not kept alive is lost at the latest
    /// one drift allowance before its `valid_until`. A thread can park
    /// here as a watchdog while others work under the lease.
    ///
    /// # Blocking
    ///
    /// For `timeout` at most. Inside a Tokio runtime:
    /// [`Error::InsideRuntime`]; in a forked child: [`Error::Forked`].
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::blocking::Lease) -> Result<(), redlease::Error> {
    /// // A watchdog thread: wake every second to see if the work is done.
    /// while let None = lease.wait_lost(std::time::Duration::from_secs(1))? {
    ///     # break;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Result<Option<LostReason>, Error> {
        self.shared.usable()?;
        let lost = self.inner().lost();
        Ok(self
            .shared
            .run(async move { tokio::time::timeout(timeout, lost).await.ok() }))
    }

    /// Gives `ttl` more time from now, if a quorum still holds our token:
    /// [`Lease::extend`](crate::Lease::extend), blocking. A lease whose
    /// validity has run out is [`Error::NotHeld`], and nothing is sent.
    ///
    /// # Blocking
    ///
    /// One round trip to the nodes, each bounded by the node timeout
    /// (and the connect timeout for a node not connected yet), and never
    /// past the lease's validity. Inside a Tokio runtime:
    /// [`Error::InsideRuntime`], and the lease is left as it was.
    ///
    /// ```no_run
    /// # fn f(mut lease: redlease::blocking::Lease) -> Result<(), redlease::Error> {
    /// for step in 0..10 {
    ///     // ... one step of the work ...
    ///     lease.extend(std::time::Duration::from_secs(10))?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        self.shared.usable()?;
        let inner = self
            .inner
            .as_mut()
            .expect("a lease is whole until it is given up");
        self.shared.run(inner.extend(ttl))
    }

    /// Gives the lock back: [`Lease::release`](crate::Lease::release),
    /// blocking. `Ok` means a quorum confirmed the lock was ours until
    /// now; a lease that expired or was taken over is [`Error::NotHeld`].
    ///
    /// # Blocking
    ///
    /// One round trip to the nodes, each bounded by the node timeout.
    /// Inside a Tokio runtime: [`Error::InsideRuntime`], and the lease is
    /// released in the background, on the Locker's threads, as a drop
    /// there would.
    ///
    /// ```no_run
    /// # fn f(lease: redlease::blocking::Lease) {
    /// if let Err(e) = lease.release() {
    ///     eprintln!("the lock was not ours to the end: {e}");
    /// }
    /// # }
    /// ```
    pub fn release(mut self) -> Result<(), Error> {
        // Checked before the lease leaves `self`: if the thread may not
        // block, the drop gives it back instead.
        self.shared.usable()?;
        let inner = self
            .inner
            .take()
            .expect("a lease is whole until it is given up");
        self.shared.run(inner.release())
    }

    /// Turns this write lease into a read lease of the same names, token
    /// and validity, atomically on a quorum:
    /// [`Lease::downgrade`](crate::Lease::downgrade), blocking. A lease
    /// that is not held alone is [`Error::InvalidInput`], with nothing
    /// sent; a downgrade a quorum did not confirm gives the lease back.
    ///
    /// # Blocking
    ///
    /// One round trip to the nodes, each bounded by the node timeout.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let writer = locker.lock("catalog")?;
    /// // ... rewrite it ...
    /// let reader = writer.downgrade()?;
    /// // ... read it back, no writer in between ...
    /// reader.release()
    /// # }
    /// ```
    pub fn downgrade(mut self) -> Result<Lease, Error> {
        self.shared.usable()?;
        let inner = self
            .inner
            .take()
            .expect("a lease is whole until it is given up");
        let lease = self.shared.run(inner.downgrade())?;
        Ok(Lease::new(lease, self.shared.clone()))
    }

    /// Refused at once: a read lease does not upgrade (see
    /// [`Lease::upgrade`](crate::Lease::upgrade)).
    ///
    /// ```no_run
    /// # fn f(reader: &redlease::blocking::Lease) {
    /// assert!(reader.upgrade().is_err());
    /// # }
    /// ```
    pub fn upgrade(&self) -> Result<Lease, Error> {
        let refused = self.inner().upgrade()?;
        Ok(Lease::new(refused, self.shared.clone()))
    }

    /// Keeps this lease alive from now on, as if it had been taken with
    /// `.keep_alive()` ([`Lease::keep_alive`](crate::Lease::keep_alive)):
    /// the Locker's threads renew it every third of the TTL while this
    /// thread does anything else. A TTL too short for renewal is
    /// [`Error::InvalidInput`], and the lease is released.
    ///
    /// # Blocking
    ///
    /// No: it hands the lease to the renewal threads and returns.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let lease = locker.lock("job")?;
    /// // ... it turns out the work will take a while ...
    /// let lease = lease.keep_alive()?;
    /// # lease.release() }
    /// ```
    pub fn keep_alive(mut self) -> Result<Lease, Error> {
        self.shared.not_forked()?;
        let inner = self
            .inner
            .take()
            .expect("a lease is whole until it is given up");
        // The renewal tasks start on the facade's runtime, not on one the
        // caller may have entered.
        let _ours = self.shared.enter();
        self.inner = Some(inner.keep_alive()?);
        drop(_ours);
        Ok(self)
    }

    /// Hands the lease over as a handle another Locker (blocking or async,
    /// in this process or another) adopts: see
    /// [`Lease::export`](crate::Lease::export). The lease is off this
    /// Locker's books, not released, and its drop does nothing.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let handle = locker.lock("deploy")?.export();
    /// // ... pass `handle` to the process that finishes the job ...
    /// # let _ = handle; Ok(()) }
    /// ```
    pub fn export(mut self) -> String {
        self.inner
            .take()
            .expect("a lease is whole until it is given up")
            .export()
    }

    /// The async lease inside, for what the blocking form leaves out (its
    /// [`mode`](crate::Lease::mode), a multi-lock's
    /// [`resources`](crate::Lease::resources) and
    /// [`fencing_token_of`](crate::Lease::fencing_token_of), a
    /// [`handle`](crate::Lease::handle) for another thread).
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::blocking::Lease) {
    /// assert_eq!(lease.as_async().mode(), redlease::LockMode::Exclusive);
    /// # }
    /// ```
    pub fn as_async(&self) -> &AsyncLease {
        self.inner()
    }

    /// The end of work done under the lease (`with`): released if it was
    /// ours to the end, [`Error::Lost`] if not.
    pub(super) fn finish<T>(self, out: T) -> Result<T, Error> {
        let resource = self.resource().to_string();
        if let Some(why) = self.lost_reason() {
            return Err(Error::Lost { resource, why });
        }
        match self.release() {
            Ok(()) => Ok(out),
            Err(Error::NotHeld { .. }) => Err(Error::Lost {
                resource,
                why: LostReason::Refused,
            }),
            Err(e) => {
                // The work was protected; only the release failed, and the
                // keys expire by their TTL.
                tracing::warn!(resource, error = %e, "release after the work failed");
                Ok(out)
            }
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            self.shared.drop_lease(inner);
        }
    }
}
