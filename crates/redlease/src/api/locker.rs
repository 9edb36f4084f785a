//! [`Locker`]: the nodes and the defaults every lock request starts from.

use std::fmt;
use std::sync::Arc;

use crate::api::acquire::Acquire;
use crate::api::admin::Admin;
use crate::api::semaphore::Semaphore;
use crate::api::try_acquire::TryAcquire;
use crate::coord::engine::Engine;
use crate::core::mode::Hold;
use crate::core::quorum::quorum;

/// The longest Redis key a lock may have, in bytes: the key prefix, the
/// lock name and two braces (`redlease:{name}`). With the default prefix a
/// name may be 4085 bytes long.
///
/// Every call that takes a lock name ([`Locker::lock`],
/// [`Locker::try_lock`], and the [`Admin`] calls) refuses a longer one,
/// and an empty one, with [`Error::InvalidInput`](crate::Error::InvalidInput)
/// before any I/O. Redis would take keys of up to 512 MB, but the key is
/// sent with every request a lock makes and kept on every node: 4 KiB
/// holds any name that is an identifier, a file path or a URL.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redlease::Error> {
/// let locker = redlease::Locker::new(["redis://127.0.0.1:6379"])?;
/// let longest = "n".repeat(redlease::MAX_KEY_LEN - "redlease:{}".len());
/// assert!(locker.admin().check_name(&longest).is_ok());
/// assert!(locker.admin().check_name(&format!("{longest}n")).is_err());
/// # Ok(()) }
/// ```
pub const MAX_KEY_LEN: usize = crate::core::keys::MAX_KEY_LEN;

/// A set of Redis nodes to take locks on, with the defaults for each lock.
///
/// One node gives the classic single-instance lock; `N >= 2` independent
/// nodes give the Redlock quorum of `N / 2 + 1` (use an odd `N`: 4 nodes
/// tolerate one failure, like 3). Cheap to clone: clones share connections.
///
/// Connections are opened lazily and re-opened automatically, so a `Locker`
/// builds and works while a minority of its nodes is down, and uses them
/// again once they are back.
///
/// ```
/// use std::time::Duration;
/// use redlease::Locker;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redlease::Error> {
/// # let nodes = redlease_testkit::RedisNodes::start(3);
/// # let urls = nodes.urls();
/// // Three independent servers, say redis://10.0.0.1:6379 and so on:
/// let locker = Locker::builder(urls)
///     .ttl(Duration::from_secs(30))
/// #   .advanced(|a| a.restart_quarantine(Duration::ZERO)) // brand-new test servers
///     .build()?;
///
/// let lease = locker.lock("invoice:42").await?;
/// // ... only one process gets here at a time, until lease.valid_until() ...
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Locker {
    pub(super) engine: Arc<Engine>,
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.engine.settings();
        let nodes = self.engine.nodes();
        f.debug_struct("Locker")
            .field(
                "nodes",
                &nodes.iter().map(|n| n.id().addr()).collect::<Vec<_>>(),
            )
            .field("quorum", &quorum(nodes.len()))
            .field("ttl", &s.ttl)
            .field("node_timeout", &s.node_timeout)
            .field("drift", &s.drift)
            .field("retry", &s.retry)
            .field("prefix", &s.prefix)
            .field("lock_delay", &s.lock_delay)
            .field("owner", &s.owner)
            .finish()
    }
}

impl Locker {
    /// Takes the lock, waiting until it is acquired or the Locker's
    /// [`RetryPolicy`](crate::RetryPolicy) gives up: **by default after
    /// 10 s**, with [`Error::WaitTimeout`](crate::Error::WaitTimeout) (set
    /// [`LockerBuilder::retry`](crate::LockerBuilder::retry), or `.wait(..)`
    /// per call; [`RetryPolicy::forever`](crate::RetryPolicy::forever) waits
    /// like `redlease run`, which has no bound unless given `--wait`). A
    /// busy lock is retried as soon as its holder releases it, without
    /// polling (see "Waiting for a busy lock" in the crate docs). An empty
    /// name, or one whose key exceeds [`MAX_KEY_LEN`](crate::MAX_KEY_LEN),
    /// is [`Error::InvalidInput`](crate::Error::InvalidInput) before any I/O
    /// (as in every call that takes a name). Override TTL and wait per call:
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let lease = locker
    ///     .lock("daily-import")
    ///     .ttl(Duration::from_secs(60))
    ///     .wait(Duration::from_secs(5))
    ///     .await?;
    /// # lease.release().await }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future is safe at any point: an attempt that was in
    /// flight is undone in the background, the task leaves the queue of
    /// waiters (unsubscribing if it was the last), and no lease is leaked.
    pub fn lock(&self, resource: impl Into<String>) -> Acquire<'_> {
        self.acquire(resource.into(), Hold::Exclusive)
    }

    /// Takes the lock as a writer: the same request as [`lock`](Self::lock),
    /// under the name that says what it excludes. A writer holds the lock
    /// alone, with no reader; it waits in the name's one line with readers
    /// and writers alike, and readers who come after it wait behind it, so
    /// a stream of readers cannot starve it (see
    /// [`read_lock`](Self::read_lock)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let lease = locker.write_lock("catalog").await?;
    /// // ... rewrite the catalog: no reader and no other writer meanwhile ...
    /// # lease.release().await }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock)'s; a writer that stops waiting leaves the
    /// line (in the background), and the readers behind it that fit go on
    /// at once.
    pub fn write_lock(&self, resource: impl Into<String>) -> Acquire<'_> {
        self.acquire(resource.into(), Hold::Exclusive)
    }

    /// Takes a read (shared) hold on the lock, waiting as
    /// [`lock`](Self::lock) does. Any number of readers hold a name
    /// together, and no writer meanwhile; each reader's hold expires on
    /// its own, by the servers' clocks, whatever the other readers do.
    /// A reader waits while a writer holds the lock, and behind anyone who
    /// came before it and waits (first come, first served: see
    /// [`write_lock`](Self::write_lock)).
    /// The lease is the same [`Lease`](crate::Lease) as a writer's (keep
    /// it alive, extend it, release it), in [`LockMode::Shared`](crate::LockMode::Shared); its
    /// [`fencing_token`](crate::Lease::fencing_token) is the newest write
    /// generation it can see (see "Read-write locks" in the library
    /// manual, `docs/library.md`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let a = locker.read_lock("catalog").await?;
    /// let b = locker.read_lock("catalog").await?; // readers share it
    /// assert!(locker.try_lock("catalog").await.is_err()); // a writer does not
    /// a.release().await?;
    /// b.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock)'s.
    pub fn read_lock(&self, resource: impl Into<String>) -> Acquire<'_> {
        self.acquire(resource.into(), Hold::Shared)
    }

    /// Takes every lock of `names` at once, or none: one lease whose
    /// keep-alive, extend, release and lost signal cover them all (lost
    /// as soon as any one is). The names are taken in one canonical order
    /// (sorted, each once), in one round trip per node (per node and hash
    /// slot on a Cluster), with the validity, drift and quorum rules of
    /// one lock; a partial acquisition is undone on every node. A waiter
    /// is woken by the release of any of them. Each name draws its own
    /// fencing token ([`Lease::fencing_token_of`](crate::Lease::fencing_token_of)).
    /// An empty list is [`Error::InvalidInput`](crate::Error::InvalidInput).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// // Move money between two accounts, whichever order others name them:
    /// let both = locker.lock_all(["account:7", "account:3"]).await?;
    /// // ... debit one, credit the other ...
    /// both.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock)'s: a dropped acquire gives back whatever it
    /// took, on every node, in the background.
    pub fn lock_all<I, S>(&self, names: I) -> Acquire<'_>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let names: Vec<String> = names.into_iter().map(Into::into).collect();
        let retry = self.engine.settings().retry.clone();
        let empty = names.is_empty();
        Acquire::all(&self.engine, names, retry).refused(empty.then(|| {
            crate::core::error::Error::invalid("names", "lock_all needs at least one name")
        }))
    }

    /// Makes exactly one attempt at every lock of `names`, all or none, as
    /// [`try_lock`](Self::try_lock) does for one.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let shard = locker.lock("shard:2").await?;
    /// // One of them is held: none is taken.
    /// assert!(locker.try_lock_all(["shard:1", "shard:2"]).await.is_err());
    /// assert!(locker.try_lock("shard:1").await.is_ok());
    /// # shard.release().await }
    /// ```
    pub fn try_lock_all<I, S>(&self, names: I) -> TryAcquire<'_>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let names: Vec<String> = names.into_iter().map(Into::into).collect();
        let empty = names.is_empty();
        TryAcquire::all(&self.engine, names).refused(empty.then(|| {
            crate::core::error::Error::invalid("names", "try_lock_all needs at least one name")
        }))
    }

    /// A counting semaphore named `resource` with `permits` permits: at
    /// most that many holders at once, fleet-wide, each permit a
    /// [`Lease`](crate::Lease) that expires with its holder. See
    /// [`Semaphore`](crate::Semaphore) for the quorum a permit needs over
    /// several nodes. Building it does no I/O.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let workers = locker.semaphore("api-workers", 2);
    /// let a = workers.acquire().await?;
    /// let b = workers.acquire().await?;
    /// assert!(workers.try_acquire().await.is_err()); // both permits are held
    /// a.release().await?;
    /// b.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, resource: impl Into<String>, permits: u32) -> Semaphore<'_> {
        Semaphore::new(&self.engine, resource.into(), permits)
    }

    /// The election on `name`: campaign for its lead, ask who leads,
    /// observe each change (see [`Election`](crate::Election)). The
    /// election's lock is the lock of that name.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let election = locker.election("scheduler");
    /// assert!(election.leader().await?.is_none());
    /// # Ok(()) }
    /// ```
    pub fn election(&self, name: impl Into<String>) -> crate::Election<'_> {
        crate::Election::new(&self.engine, name.into())
    }

    /// Watches `resource`: its state now, then each time it changes
    /// (see [`Watch`](crate::Watch)). Nothing is sent until the first
    /// [`changed`](crate::Watch::changed).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let mut watch = locker.watch("nightly-report");
    /// println!("{:?}", watch.changed().await?.verdict());
    /// # Ok(()) }
    /// ```
    pub fn watch(&self, resource: impl Into<String>) -> crate::Watch {
        crate::Watch::new(self.engine.clone(), resource.into())
    }

    fn acquire(&self, resource: String, hold: Hold) -> Acquire<'_> {
        let retry = self.engine.settings().retry.clone();
        Acquire::new(&self.engine, resource, retry, hold)
    }

    /// Makes exactly one attempt: returns the lease, or why it could not be
    /// had (typically [`Error::Taken`](crate::Error::Taken)). The request
    /// takes a TTL and keep-alive like [`lock`](Self::lock)'s, but no wait
    /// or retry policy: it never waits.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// match locker.try_lock("cron:cleanup").await {
    ///     Ok(lease) => { /* run the job */ lease.release().await?; }
    ///     Err(redlease::Error::Taken { .. }) => { /* another machine runs it */ }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_lock(&self, resource: impl Into<String>) -> TryAcquire<'_> {
        TryAcquire::new(&self.engine, resource.into(), Hold::Exclusive)
    }

    /// Makes exactly one attempt at a read hold, as
    /// [`try_lock`](Self::try_lock) does for the lock alone: refused
    /// ([`Error::Taken`](crate::Error::Taken)) while a writer holds the
    /// lock or waits for it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let writer = locker.lock("catalog").await?;
    /// assert!(matches!(
    ///     locker.try_read_lock("catalog").await,
    ///     Err(redlease::Error::Taken { .. })
    /// ));
    /// # writer.release().await }
    /// ```
    pub fn try_read_lock(&self, resource: impl Into<String>) -> TryAcquire<'_> {
        TryAcquire::new(&self.engine, resource.into(), Hold::Shared)
    }

    /// Gives back every lease this Locker still holds, stops taking locks,
    /// and waits for its background work: renewal ends, the leases' holders
    /// see [`LostReason::Closed`](crate::LostReason::Closed) at once, each
    /// lease is released on every node that may hold it, requests still
    /// finishing in the background are waited for (each bounded by its node
    /// timeout), and the release notifications stop. Later calls on the
    /// Locker or its clones return [`Error::Closed`](crate::Error::Closed),
    /// as do `release` and `extend` of the leases it released.
    ///
    /// Dropping the last Locker handle and lease stops the background work
    /// too, but does not wait for it or release leases still held elsewhere;
    /// `close` is the orderly shutdown of a process that took locks, and
    /// what to call before a short-lived one exits, so the slowest node is
    /// not left holding a key until its TTL ends.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let lease = locker.lock("worker:7").keep_alive().await?;
    /// // ... a shutdown signal arrives while the work runs ...
    /// locker.close().await;
    /// assert!(lease.is_lost());
    /// assert!(matches!(lease.release().await, Err(redlease::Error::Closed)));
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// The Locker is closed as soon as the call starts; dropping the future
    /// early may leave leases to expire by their TTL instead of being
    /// released.
    pub async fn close(&self) {
        self.engine.close().await;
    }

    /// The operator's tools and the Locker's naming, behind one handle:
    /// what the nodes say of a lock, force release, the check that no two
    /// nodes are one server, renewal statistics, the keys a lock uses, and
    /// waiting for the requests still finishing in the background. See
    /// [`Admin`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let status = locker.admin().inspect("nightly-report").await?;
    /// println!("{:?}", status.verdict());
    /// # Ok(()) }
    /// ```
    pub fn admin(&self) -> Admin<'_> {
        Admin::new(&self.engine)
    }
}
