//! [`Locker`]: the blocking facade's handle on the nodes.

use std::fmt;
use std::sync::Arc;

use crate::api::blocking::acquire::Acquire;
use crate::api::blocking::election::Election;
use crate::api::blocking::lease::Lease;
use crate::api::blocking::runtime::{self, Shared};
use crate::api::blocking::semaphore::Semaphore;
use crate::api::blocking::watch::Watch;
use crate::api::locker::Locker as AsyncLocker;
use crate::core::error::Error;
use crate::core::lock_status::LockStatus;

/// A set of Redis nodes to take locks on, for threads without an async
/// runtime: the blocking form of [`redlease::Locker`](crate::Locker),
/// with the same settings, defaults, guarantees and errors. Each call
/// blocks the calling thread until it is done, within the bound its docs
/// give under "Blocking"; renewal and the lost signal run on the
/// Locker's own threads meanwhile.
///
/// Cheap to clone: clones share the connections and the threads, which
/// stop when the last clone and the last of its leases are dropped. See
/// the [module docs](crate::blocking) for threads, drops and `fork()`.
///
/// ```
/// use std::time::Duration;
/// use redlease::blocking::Locker;
///
/// # fn main() -> Result<(), redlease::Error> {
/// # let nodes = redlease_testkit::RedisNodes::start(3);
/// # let urls = nodes.urls();
/// // Three independent servers, say redis://10.0.0.1:6379 and so on:
/// let locker = Locker::builder(urls)
///     .ttl(Duration::from_secs(30))
/// #   .advanced(|a| a.restart_quarantine(Duration::ZERO)) // brand-new test servers
///     .build()?;
///
/// let lease = locker.lock("invoice:42")?;
/// // ... only one process gets here at a time, until lease.valid_until() ...
/// lease.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Locker {
    shared: Arc<Shared>,
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_async().fmt(f)
    }
}

impl Locker {
    pub(super) fn from_shared(shared: Arc<Shared>) -> Locker {
        Locker { shared }
    }

    /// A Locker over `urls` with the default settings.
    ///
    /// ```
    /// # fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::blocking::Locker::new(["redis://127.0.0.1:6379"])?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn new<I, S>(urls: I) -> Result<Locker, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder(urls).build()
    }

    /// A blocking Locker over an async one, sharing its connections and
    /// the leases it holds: for the synchronous part of an async program
    /// (a thread of its own, a library without async). The work started
    /// through this handle runs on its own threads; what the async
    /// Locker started elsewhere stays on the runtime it started on.
    ///
    /// # Panics
    ///
    /// If the system cannot start a thread (as `std::thread::spawn`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::new(["redis://127.0.0.1:6379"])?;
    /// let blocking = redlease::blocking::Locker::from_async(locker.clone());
    /// let worker = std::thread::spawn(move || {
    ///     // let lease = blocking.lock("report")?; ...
    /// #   drop(blocking);
    /// });
    /// # worker.join().unwrap(); Ok(()) }
    /// ```
    pub fn from_async(locker: AsyncLocker) -> Locker {
        Locker::from_shared(Arc::new(Shared::new(runtime::runtime(), locker)))
    }

    /// The async Locker inside, for what the blocking form leaves out
    /// (the key names and quorum of [`admin`](crate::Locker::admin),
    /// renewal statistics) and for async code. Its async calls run on the
    /// caller's runtime, not on this Locker's threads; in a child process
    /// that inherited it across `fork()`, it must not be used at all.
    ///
    /// ```
    /// # fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::blocking::Locker::new(["redis://127.0.0.1:6379"])?;
    /// assert_eq!(locker.as_async().admin().key("report"), "redlease:{report}");
    /// # Ok(()) }
    /// ```
    pub fn as_async(&self) -> &AsyncLocker {
        self.shared.locker()
    }

    /// Takes the lock, waiting until it is acquired or the Locker's retry
    /// policy gives up: **by default after 10 s**, with
    /// [`Error::WaitTimeout`] (set
    /// [`LockerBuilder::retry`](crate::blocking::LockerBuilder::retry), or
    /// per call [`request(name).wait(..)`](Acquire::wait)). A busy lock is
    /// retried as soon as its holder releases it, without polling. As
    /// [`redlease::Locker::lock`](crate::Locker::lock), whose errors it
    /// returns; TTL, wait and keep-alive per call with
    /// [`request`](Self::request).
    ///
    /// # Blocking
    ///
    /// Until the lock is had, or for the wait plus at most one attempt,
    /// whose requests are bounded by the node timeout (and the connect
    /// timeout for a node not connected yet). Inside a Tokio runtime:
    /// [`Error::InsideRuntime`], and nothing is sent.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let lease = locker.lock("invoice:42")?;
    /// // ... work ...
    /// lease.release()?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, resource: impl Into<String>) -> Result<Lease, Error> {
        self.request(resource).lock()
    }

    /// Makes exactly one attempt: the lease, or why it could not be had
    /// (typically [`Error::Taken`]). As
    /// [`redlease::Locker::try_lock`](crate::Locker::try_lock).
    ///
    /// # Blocking
    ///
    /// For one attempt: one round trip to the nodes, each bounded by the
    /// node timeout (and the connect timeout for a node not connected
    /// yet). Inside a Tokio runtime: [`Error::InsideRuntime`].
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// match locker.try_lock("cron:cleanup") {
    ///     Ok(lease) => { /* run the job */ lease.release()?; }
    ///     Err(redlease::Error::Taken { .. }) => { /* another machine runs it */ }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_lock(&self, resource: impl Into<String>) -> Result<Lease, Error> {
        self.request(resource).try_lock()
    }

    /// Takes the lock (waiting as [`lock`](Self::lock) does), keeps it
    /// alive while `work` runs on this thread, releases it, and returns
    /// what `work` returned; [`Error::Lost`] if the lease was lost before
    /// `work` returned (`work` is not interrupted: check
    /// [`Lease::is_lost`] between its steps). See [`Acquire::with`].
    ///
    /// # Blocking
    ///
    /// As [`lock`](Self::lock), then for as long as `work` runs, then as
    /// [`Lease::release`].
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let total = locker.with_lock("ledger", |lease| {
    ///     // ... only this process, fleet-wide, until lease.is_lost() ...
    ///     lease.fencing_token()
    /// })?;
    /// # let _ = total; Ok(()) }
    /// ```
    pub fn with_lock<T>(
        &self,
        resource: impl Into<String>,
        work: impl FnOnce(&Lease) -> T,
    ) -> Result<T, Error> {
        self.request(resource).with(work)
    }

    /// A request for the lock with per-call options (TTL, wait, retry
    /// policy, keep-alive), to end with [`lock`](Acquire::lock),
    /// [`try_lock`](Acquire::try_lock) or [`with`](Acquire::with).
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let lease = locker
    ///     .request("daily-import")
    ///     .ttl(std::time::Duration::from_secs(60))
    ///     .keep_alive()
    ///     .lock()?;
    /// # lease.release() }
    /// ```
    pub fn request(&self, resource: impl Into<String>) -> Acquire<'_> {
        Acquire::one(&self.shared, resource.into(), false)
    }

    /// Takes a read (shared) hold, waiting as [`lock`](Self::lock) does:
    /// any number of readers hold a name together, and no writer
    /// meanwhile ([`redlease::Locker::read_lock`](crate::Locker::read_lock)).
    ///
    /// # Blocking
    ///
    /// As [`lock`](Self::lock).
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let reader = locker.read_lock("catalog")?;
    /// // ... read the catalog, beside other readers ...
    /// reader.release()?;
    /// # Ok(()) }
    /// ```
    pub fn read_lock(&self, resource: impl Into<String>) -> Result<Lease, Error> {
        self.request_read(resource).lock()
    }

    /// Takes the lock as a writer: [`lock`](Self::lock) under the name
    /// that says what it excludes (no reader, no other writer).
    ///
    /// # Blocking
    ///
    /// As [`lock`](Self::lock).
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let writer = locker.write_lock("catalog")?;
    /// // ... rewrite the catalog ...
    /// writer.release()?;
    /// # Ok(()) }
    /// ```
    pub fn write_lock(&self, resource: impl Into<String>) -> Result<Lease, Error> {
        self.lock(resource)
    }

    /// A request for a read hold, with per-call options.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let reader = locker.request_read("catalog").keep_alive().lock()?;
    /// # reader.release() }
    /// ```
    pub fn request_read(&self, resource: impl Into<String>) -> Acquire<'_> {
        Acquire::one(&self.shared, resource.into(), true)
    }

    /// Takes every lock of `names` at once, or none, as one lease
    /// ([`redlease::Locker::lock_all`](crate::Locker::lock_all)).
    ///
    /// # Blocking
    ///
    /// As [`lock`](Self::lock).
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let both = locker.lock_all(["account:7", "account:3"])?;
    /// // ... move money between them ...
    /// both.release()?;
    /// # Ok(()) }
    /// ```
    pub fn lock_all<I, S>(&self, names: I) -> Result<Lease, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.request_all(names).lock()
    }

    /// A request for every lock of `names`, all or none, with per-call
    /// options.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let both = locker.request_all(["shard:1", "shard:2"]).try_lock()?;
    /// # both.release() }
    /// ```
    pub fn request_all<I, S>(&self, names: I) -> Acquire<'_>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Acquire::all(&self.shared, names.into_iter().map(Into::into).collect())
    }

    /// A counting semaphore named `resource` with `permits` permits
    /// ([`redlease::Locker::semaphore`](crate::Locker::semaphore)).
    /// Building it does no I/O.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let permit = locker.semaphore("deploys", 3).acquire()?;
    /// // ... one of at most 3 deploys at once ...
    /// permit.release()?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, resource: impl Into<String>, permits: u32) -> Semaphore<'_> {
        Semaphore::new(&self.shared, self.as_async().semaphore(resource, permits))
    }

    /// The election on `name` ([`crate::Locker::election`]).
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// if let Some(leader) = locker.election("scheduler").leader()? {
    ///     println!("{} leads", leader.value);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn election(&self, name: impl Into<String>) -> Election<'_> {
        Election::new(&self.shared, self.as_async().election(name))
    }

    /// Watches `resource` ([`crate::Locker::watch`]).
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// for status in locker.watch("nightly-report").take(3) {
    ///     println!("{:?}", status?.verdict());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn watch(&self, resource: impl Into<String>) -> Watch {
        Watch::new(self.as_async().watch(resource), self.shared.clone())
    }

    /// What every node says about the lock on `resource`
    /// ([`Admin::inspect`](crate::Admin::inspect)): whether it is held, for
    /// how long, its fencing counter and its waiters; never the token.
    ///
    /// # Blocking
    ///
    /// One round trip per node, at once, each bounded by the node timeout
    /// (and the connect timeout for a node not connected yet).
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// println!("{:?}", locker.inspect("nightly-report")?.verdict());
    /// # Ok(()) }
    /// ```
    pub fn inspect(&self, resource: &str) -> Result<LockStatus, Error> {
        self.shared
            .block_on(self.as_async().admin().inspect(resource))?
    }

    /// Takes over an exported lease ([`Lease::export`], or the async
    /// [`Lease::export`](crate::Lease::export)), as
    /// [`Locker::adopt`](crate::Locker::adopt) does: checked by extending
    /// it by its TTL on a quorum; [`Error::NotHeld`] if it is gone.
    ///
    /// # Blocking
    ///
    /// One round trip per node, at once, each bounded by the node timeout.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker, handle: &str) -> Result<(), redlease::Error> {
    /// let lease = locker.adopt(handle)?.keep_alive()?;
    /// // ... finish the job ...
    /// lease.release()
    /// # }
    /// ```
    pub fn adopt(&self, handle: &str) -> Result<Lease, Error> {
        let lease = self.shared.block_on(self.as_async().adopt(handle))??;
        Ok(Lease::new(lease, self.shared.clone()))
    }

    /// Gives back an exported lease without adopting it, as
    /// [`Locker::release_handle`](crate::Locker::release_handle) does.
    ///
    /// # Blocking
    ///
    /// One round trip per node, at once, each bounded by the node timeout.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker, handle: &str) -> Result<(), redlease::Error> {
    /// locker.release_handle(handle)?;
    /// # Ok(()) }
    /// ```
    pub fn release_handle(&self, handle: &str) -> Result<(), Error> {
        self.shared
            .block_on(self.as_async().release_handle(handle))?
    }

    /// Deletes the lock on `resource` on every node, **whoever holds it**,
    /// and wakes its waiters; returns on how many nodes a key was deleted.
    /// An operator's tool that breaks the lock's promise: see
    /// [`Admin::force_release`](crate::Admin::force_release).
    ///
    /// # Blocking
    ///
    /// One round trip per node, at once, each bounded by the node timeout.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// // The holder is known dead, and its TTL is an hour:
    /// let deleted = locker.force_release("nightly-report")?;
    /// # let _ = deleted; Ok(()) }
    /// ```
    pub fn force_release(&self, resource: &str) -> Result<usize, Error> {
        self.shared
            .block_on(self.as_async().admin().force_release(resource))?
    }

    /// Gives back every lease this Locker still holds, and stops taking
    /// locks ([`redlease::Locker::close`](crate::Locker::close)): their
    /// holders see [`LostReason::Closed`](crate::LostReason::Closed), and
    /// later calls are [`Error::Closed`]. What a short-lived program calls
    /// before it exits. The threads stop when the last handle is dropped.
    ///
    /// # Blocking
    ///
    /// Until each lease is released and the background requests are done,
    /// each bounded by its node timeout. Inside a Tokio runtime:
    /// [`Error::InsideRuntime`], and nothing is closed.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// locker.close()?;
    /// assert!(matches!(locker.lock("more"), Err(redlease::Error::Closed)));
    /// # Ok(()) }
    /// ```
    pub fn close(&self) -> Result<(), Error> {
        self.shared.block_on(self.as_async().close())
    }
}
