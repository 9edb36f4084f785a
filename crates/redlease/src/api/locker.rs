//! [`Locker`]: the nodes and the defaults every lock request starts from.

use std::fmt;
use std::sync::Arc;

use crate::api::acquire::Acquire;
use crate::coord::engine::Engine;

use crate::api::lease_handle::LeaseHandle;
use crate::core::error::Error;
use crate::core::keys::release_channel;
use crate::core::node_error::NodeId;
use crate::core::quorum::quorum;
use crate::core::retry::RetryPolicy;

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
/// #   .restart_quarantine(Duration::ZERO) // brand-new test servers
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
            .finish()
    }
}

impl Locker {
    /// Takes the lock, waiting until it is acquired or the Locker's
    /// [`RetryPolicy`] gives up: **by default after 10 s**, with
    /// [`Error::WaitTimeout`] (set [`LockerBuilder::retry`](crate::LockerBuilder::retry), or `.wait(..)`
    /// per call; [`RetryPolicy::wait_forever`] waits like `redlease run`,
    /// which has no bound unless given `--wait`). A busy lock is retried as
    /// soon as its holder releases it, without polling (see "Waiting for a
    /// busy lock" in the crate docs). An
    /// empty name, or one whose key exceeds [`MAX_KEY_LEN`](Self::MAX_KEY_LEN),
    /// is [`Error::InvalidInput`] before any I/O (as in every call that takes
    /// a name). Override TTL and wait per call:
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).restart_quarantine(std::time::Duration::ZERO).build()?; // brand-new test servers
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
        Acquire::new(
            &self.engine,
            resource.into(),
            self.engine.settings().retry.clone(),
        )
    }

    /// Takes the lock on `resource` (waiting per the retry policy), keeps it
    /// alive while `work` runs, releases it afterwards, and returns `work`'s
    /// output. If the lease is lost meanwhile, `work` is dropped at once and
    /// the call returns [`Error::Lost`]. See [`Acquire::with`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).restart_quarantine(std::time::Duration::ZERO).build()?; // brand-new test servers
    /// let report = locker
    ///     .with_lock("nightly-report", |lease| async move {
    ///         format!("built while holding {}", lease.resource())
    ///     })
    ///     .await?;
    /// # let _ = report; Ok(()) }
    /// ```
    pub async fn with_lock<F, Fut, T>(
        &self,
        resource: impl Into<String>,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        self.lock(resource).with(work).await
    }

    /// Makes exactly one attempt: returns the lease, or why it could not be
    /// had (typically [`Error::Taken`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).restart_quarantine(std::time::Duration::ZERO).build()?; // brand-new test servers
    /// match locker.try_lock("cron:cleanup").await {
    ///     Ok(lease) => { /* run the job */ lease.release().await?; }
    ///     Err(redlease::Error::Taken { .. }) => { /* another machine runs it */ }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_lock(&self, resource: impl Into<String>) -> Acquire<'_> {
        let once = RetryPolicy {
            attempts: Some(1),
            wait: None,
            ..self.engine.settings().retry.clone()
        };
        Acquire::new(&self.engine, resource.into(), once)
    }

    /// The longest Redis key a lock may have, in bytes: the key prefix, the
    /// lock name and two braces (`redlease:{name}`). With the default
    /// prefix a name may be 4085 bytes long.
    ///
    /// Every call that takes a lock name ([`lock`](Self::lock),
    /// [`try_lock`](Self::try_lock), [`with_lock`](Self::with_lock),
    /// [`inspect`](Self::inspect), [`force_release`](Self::force_release),
    /// [`check_name`](Self::check_name)) refuses a longer one, and an empty
    /// one, with [`Error::InvalidInput`] before any I/O. Redis would take
    /// keys of up to 512 MB, but the key is sent with every request a lock
    /// makes and kept on every node: 4 KiB holds any name that is an
    /// identifier, a file path or a URL.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::new(["redis://127.0.0.1:6379"])?;
    /// let longest = "n".repeat(redlease::Locker::MAX_KEY_LEN - "redlease:{}".len());
    /// assert_eq!(locker.key(&longest).len(), redlease::Locker::MAX_KEY_LEN);
    /// # Ok(()) }
    /// ```
    pub const MAX_KEY_LEN: usize = crate::core::keys::MAX_KEY_LEN;

    /// Checks that `resource` can name a lock of this Locker, as every call
    /// that takes a lock name does first: not empty, and its key no longer
    /// than [`MAX_KEY_LEN`](Self::MAX_KEY_LEN). No I/O; use it to refuse a
    /// name from user input early. The error shows the name's length and
    /// its start, never a whole long name.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::new(["redis://127.0.0.1:6379"])?;
    /// assert!(locker.check_name("invoice:42").is_ok());
    /// assert!(matches!(
    ///     locker.check_name(""),
    ///     Err(redlease::Error::InvalidInput { field: "resource", .. })
    /// ));
    /// assert!(locker.check_name(&"x".repeat(1 << 20)).is_err());
    /// # Ok(()) }
    /// ```
    pub fn check_name(&self, resource: &str) -> Result<(), Error> {
        crate::core::keys::check_resource(&self.engine.settings().prefix, resource)
    }

    /// The Redis key that holds the lock on `resource`: the key prefix, then
    /// the resource in braces (a Redis Cluster hash tag).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::new(["redis://127.0.0.1:6379"])?;
    /// assert_eq!(locker.key("orders"), "redlease:{orders}");
    /// # Ok(()) }
    /// ```
    pub fn key(&self, resource: &str) -> String {
        self.engine.key(resource)
    }

    /// The Redis key of `resource`'s fencing counter: the lock key with
    /// `:fence` appended (same hash slot).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::new(["redis://127.0.0.1:6379"])?;
    /// assert_eq!(locker.fence_key("orders"), "redlease:{orders}:fence");
    /// # Ok(()) }
    /// ```
    pub fn fence_key(&self, resource: &str) -> String {
        self.engine.keys(resource).fence()
    }

    /// The pub/sub channel a release of `resource` is announced on: the
    /// lock key with `:released` appended. Each release publishes a random
    /// id there (never the token).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::new(["redis://127.0.0.1:6379"])?;
    /// assert_eq!(locker.release_channel("orders"), "redlease:{orders}:released");
    /// # Ok(()) }
    /// ```
    pub fn release_channel(&self, resource: &str) -> String {
        release_channel(&self.key(resource))
    }

    /// The nodes, in the order given.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).restart_quarantine(std::time::Duration::ZERO).build()?; // brand-new test servers
    /// for node in locker.nodes() {
    ///     println!("{node}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = &NodeId> {
        self.engine.nodes().iter().map(|n| n.id())
    }

    /// Waits until every request this Locker finishes in the background is
    /// done: those still on their way to slower nodes after a quorum already
    /// answered (`try_lock`, `lock`, `extend` and `release` return at
    /// quorum), and the releases of dropped leases. Each is bounded by its
    /// node timeout. Call it before a short-lived process exits, so the
    /// slowest node is not left holding a key until its TTL ends.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).restart_quarantine(std::time::Duration::ZERO).build()?; // brand-new test servers
    /// let lease = locker.lock("cron:report").await?;
    /// // ... the job ...
    /// lease.release().await?;
    /// locker.flush().await; // then exit
    /// # Ok(()) }
    /// ```
    pub async fn flush(&self) {
        self.engine.background().idle().await;
    }

    /// Gives back every lease this Locker still holds, stops taking locks,
    /// and waits for its background work: renewal ends, the leases' holders
    /// see [`LostReason::Closed`](crate::LostReason::Closed) at once, each
    /// lease is released on every node that may hold it, requests still
    /// finishing in the background are waited for (each bounded by its node
    /// timeout), and the release notifications stop. Later calls on the
    /// Locker or its clones return [`Error::Closed`], as do `release` and
    /// `extend` of the leases it released.
    ///
    /// Dropping the last Locker handle and lease stops the background work
    /// too, but does not wait for it or release leases still held elsewhere;
    /// `close` is the orderly shutdown of a process that holds locks.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).restart_quarantine(std::time::Duration::ZERO).build()?; // brand-new test servers
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

    /// How many nodes must agree: `nodes / 2 + 1`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).restart_quarantine(std::time::Duration::ZERO).build()?; // brand-new test servers
    /// println!("{} of {} nodes must agree", locker.quorum(), locker.nodes().len());
    /// # Ok(()) }
    /// ```
    pub fn quorum(&self) -> usize {
        quorum(self.engine.nodes().len())
    }
}
