//! [`Locker`]: the nodes and the defaults every lock request starts from.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::acquire::Acquire;
use crate::durability::Durability;
use crate::engine::{Engine, Settings};
use futures_util::future::join_all;
use tracing::Instrument;

use crate::error::{Error, NodeError, NodeId, Op};
use crate::keys::release_channel;
use crate::lease::LeaseHandle;
use crate::lock_status::LockStatus;
use crate::node::{self, ConnectSettings, Node};
use crate::node_url::NodeUrl;
use crate::quorum::quorum;
use crate::retry::RetryPolicy;
use crate::telemetry;
use crate::tls::TlsConfig;
use crate::token::LockerTag;
use crate::token::ReleaseId;
use crate::validity::{DriftModel, Timing};

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
    engine: Arc<Engine>,
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
    /// A Locker over `urls` with the default settings (see [`LockerBuilder`]).
    ///
    /// URLs follow redis-rs: `redis://host:port/db`, `redis://user:password@host`,
    /// `rediss://` for TLS (with the `tls-rustls` feature), `redis+unix:///path`.
    /// Must be called inside a Tokio runtime.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::new(["redis://127.0.0.1:6379"])?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn new<I, S>(urls: I) -> Result<Locker, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder(urls).build()
    }

    /// Starts configuring a Locker over `urls`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .key_prefix("myapp:lock:")
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn builder<I, S>(urls: I) -> LockerBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        LockerBuilder {
            urls: urls.into_iter().map(|u| u.as_ref().to_string()).collect(),
            ttl: Duration::from_secs(10),
            node_timeout: None,
            connect_timeout: Duration::from_secs(1),
            drift: DriftModel::DEFAULT,
            retry: RetryPolicy::default(),
            prefix: "redlease:".to_string(),
            renew_fraction: 1.0 / 3.0,
            fence_expiry: None,
            fencing: false,
            tls: None,
            durability: Durability::off(),
            quarantine: None,
            clock_guard: true,
        }
    }

    /// Takes the lock, waiting until it is acquired or the Locker's
    /// [`RetryPolicy`] gives up: **by default after 10 s**, with
    /// [`Error::WaitTimeout`] (set [`LockerBuilder::retry`], or `.wait(..)`
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
    pub const MAX_KEY_LEN: usize = crate::keys::MAX_KEY_LEN;

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
        crate::keys::check_resource(&self.engine.settings().prefix, resource)
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

    /// What every node says about the lock on `resource`: whether its key
    /// exists and for how long, the fencing counter, and how many processes
    /// wait for it. Never the token. Nodes that fail are reported in place;
    /// [`LockStatus::verdict`](crate::LockStatus::verdict) says whether a
    /// quorum holds it. One round trip per node, at once, each bounded by
    /// the node timeout.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).restart_quarantine(std::time::Duration::ZERO).build()?; // brand-new test servers
    /// let status = locker.inspect("nightly-report").await?;
    /// println!("{:?}, fencing counter {:?}", status.verdict(), status.fencing_counter());
    /// for (node, answer) in &status.nodes {
    ///     match answer {
    ///         Ok(state) => println!("{node}: {:?}", state.key),
    ///         Err(e) => println!("{node}: {e}"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, resource: &str) -> Result<LockStatus, Error> {
        let timeout = self.admin_timeout(resource)?;
        let keys = self.engine.keys(resource);
        let answers = join_all(self.engine.nodes().iter().map(|node| {
            let keys = &keys;
            async move { (node.id().clone(), node.inspect(keys, timeout).await) }
        }))
        .await;
        Ok(LockStatus {
            resource: resource.to_string(),
            key: keys.lock.to_string(),
            nodes: answers,
        })
    }

    /// Connects to every node now and checks that no two of them are one
    /// Redis server (by its `run_id`: `localhost:6379` and
    /// `127.0.0.1:6379` look different but are not). Returns the nodes that
    /// could not be reached (and so not checked); they are checked once
    /// their connection reaches a server, and locks fail with the same
    /// error from then on. A cluster node is checked by the servers of the
    /// primaries its client connected to.
    ///
    /// Call it at start-up to fail fast on a configuration that would
    /// count one server's vote twice: a Locker that finds such a pair
    /// takes no lock ([`Error::SameServer`]). Each node is bounded by the
    /// connect timeout plus the node timeout.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let port = nodes.node(0).port();
    /// let one_server_twice = [
    ///     format!("redis://127.0.0.1:{port}"),
    ///     format!("redis://localhost:{port}"),
    /// ];
    /// let locker = redlease::Locker::new(one_server_twice)?;
    /// match locker.check_servers().await {
    ///     Err(redlease::Error::SameServer { node, same_as, .. }) => {
    ///         println!("{node} is {same_as} again")
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn check_servers(&self) -> Result<Vec<NodeError>, Error> {
        let settings = self.engine.settings();
        let timeout =
            settings.connect_timeout + self.engine.timing("ttl", settings.ttl)?.node_timeout;
        let answers = join_all(self.engine.nodes().iter().map(|node| node.connect(timeout))).await;
        if let Some(pair) = self.engine.same_server() {
            return Err(pair);
        }
        Ok(answers.into_iter().filter_map(Result::err).collect())
    }

    /// Deletes the lock on `resource` on every node, **whoever holds it**,
    /// and wakes its waiters. Returns on how many nodes a key was deleted.
    ///
    /// This breaks the lock's promise: a holder that is still working is
    /// not told (it finds out at its next renewal or extend, up to a third
    /// of its TTL later, and its lease reports [`LostReason::Refused`](crate::LostReason::Refused)),
    /// and another client may take the lock at once, so two may work at
    /// the same time. Use it for a lock whose holder is known dead and
    /// whose TTL is too long to wait out (or was set without one), and let
    /// the fencing token protect the resource: the fencing counter is kept,
    /// so the next holder's token is still higher than the old holder's.
    ///
    /// Every node must answer: if one fails, the error says which
    /// ([`Error::NoQuorum`] with [`Op::ForceRelease`](crate::Op::ForceRelease))
    /// and the keys on the others are deleted all the same.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).restart_quarantine(std::time::Duration::ZERO).build()?; // brand-new test servers
    /// let deleted_on = locker.force_release("nightly-report").await?;
    /// eprintln!("force-released: the key was on {deleted_on} nodes");
    /// # Ok(()) }
    /// ```
    pub async fn force_release(&self, resource: &str) -> Result<usize, Error> {
        let span = tracing::info_span!(
            "redlease.force_release",
            resource,
            outcome = tracing::field::Empty,
            elapsed_ms = tracing::field::Empty,
        );
        let timed = telemetry::is_timed(&span);
        async {
            let started = timed.then(Instant::now);
            let result = self.force_release_everywhere(resource).await;
            telemetry::finished(Op::ForceRelease, result.as_ref().map(|_| ()), started);
            result
        }
        .instrument(span)
        .await
    }

    async fn force_release_everywhere(&self, resource: &str) -> Result<usize, Error> {
        let timeout = self.admin_timeout(resource)?;
        let key = self.engine.key(resource);
        let release_id = ReleaseId::new();
        let answers = join_all(
            self.engine
                .nodes()
                .iter()
                .map(|node| node.force_release(&key, release_id.as_str(), timeout)),
        )
        .await;
        let deleted = answers.iter().filter(|a| matches!(a, Ok(true))).count();
        if deleted > 0 {
            // A lock broken by hand: worth a warning wherever logs go.
            tracing::warn!(resource, key, deleted_on = deleted, "lock force-released");
            self.engine.announce_release(&key, || release_id);
        } else {
            tracing::info!(
                resource,
                key,
                "force-release: no node that answered held the lock; nothing was deleted"
            );
        }
        let failed: Vec<_> = answers.into_iter().filter_map(Result::err).collect();
        if failed.is_empty() {
            return Ok(deleted);
        }
        let nodes = self.engine.nodes().len();
        Err(Error::NoQuorum {
            op: Op::ForceRelease,
            resource: resource.to_string(),
            succeeded: nodes - failed.len(),
            quorum: nodes,
            nodes,
            failed,
            refused_by: Vec::new(),
        })
    }

    /// Checks the name an admin call is about, and gives its per-node
    /// timeout: the one a lock with the default TTL gets.
    fn admin_timeout(&self, resource: &str) -> Result<Duration, Error> {
        self.check_name(resource)?;
        let settings = self.engine.settings();
        Ok(self.engine.timing("ttl", settings.ttl)?.node_timeout)
    }

    /// How automatic renewal is doing: leases kept alive and round trips
    /// spent so far.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).restart_quarantine(std::time::Duration::ZERO).build()?; // brand-new test servers
    /// assert_eq!(locker.renewal_stats().leases, 0);
    /// # Ok(()) }
    /// ```
    pub fn renewal_stats(&self) -> crate::RenewalStats {
        self.engine
            .started_renewer()
            .map(|r| r.stats())
            .unwrap_or_default()
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

/// Settings for a [`Locker`]; every value is checked by [`build`](Self::build).
///
/// | setting | default |
/// |---|---|
/// | [`ttl`](Self::ttl) | 10 s |
/// | [`node_timeout`](Self::node_timeout) | 5% of the TTL in use |
/// | [`connect_timeout`](Self::connect_timeout) | 1 s |
/// | [`drift_factor`](Self::drift_factor), [`drift_floor`](Self::drift_floor) | 0.01, 2 ms (drift = ttl × 1% + 2 ms) |
/// | [`retry`](Self::retry) | [`RetryPolicy::new`] |
/// | [`key_prefix`](Self::key_prefix) | `"redlease:"` |
/// | [`restart_quarantine`](Self::restart_quarantine) | the TTL plus its drift allowance |
/// | [`clock_jump_guard`](Self::clock_jump_guard) | on |
///
/// ```
/// use std::time::Duration;
/// use redlease::{Locker, RetryPolicy};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redlease::Error> {
/// let locker = Locker::builder(["redis://a:6379", "redis://b:6379", "redis://c:6379"])
///     .ttl(Duration::from_secs(5))
///     .node_timeout(Duration::from_millis(50))
///     .retry(RetryPolicy::new().wait(Duration::from_secs(2)))
///     .build()?;
/// # let _ = locker; Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until build() is called"]
pub struct LockerBuilder {
    urls: Vec<String>,
    ttl: Duration,
    node_timeout: Option<Duration>,
    connect_timeout: Duration,
    drift: DriftModel,
    retry: RetryPolicy,
    prefix: String,
    renew_fraction: f64,
    /// `None`: the default, 10 minutes.
    fence_expiry: Option<Duration>,
    fencing: bool,
    tls: Option<TlsConfig>,
    durability: Durability,
    quarantine: Option<Duration>,
    clock_guard: bool,
}

impl LockerBuilder {
    /// How long a lock lives unless extended (whole milliseconds; at least
    /// 1 ms and enough to leave validity after drift and node timeout).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .ttl(std::time::Duration::from_secs(30))
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long each node may take to answer one request, for every
    /// operation. Must be well below the TTL; the default is 5% of it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .node_timeout(std::time::Duration::from_millis(50))
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// How long opening a connection to a node may take.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .connect_timeout(std::time::Duration::from_millis(250))
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Share of the TTL set aside for clocks running at different rates on
    /// different nodes, in `[0, 1)`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .drift_factor(0.02)
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift.factor = factor;
        self
    }

    /// Fixed part of the drift allowance, added to `ttl × drift_factor`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .drift_floor(std::time::Duration::from_millis(5))
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn drift_floor(mut self, floor: Duration) -> Self {
        self.drift.floor = floor;
        self
    }

    /// How [`Locker::lock`] retries a lock that is busy.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .retry(redlease::RetryPolicy::new().attempts(3))
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Prepended to every lock key, to keep lock keys apart from other data.
    /// May not contain `{` or `}` (the resource is the hash tag), and
    /// counts toward [`Locker::MAX_KEY_LEN`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .key_prefix("billing:locks:")
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How often kept-alive leases are renewed, as a share of their TTL: the
    /// default, 1/3, renews a 30 s lease every 10 s, leaving two more tries
    /// before it would run out. Must be in `(0, 0.9]`, and the first
    /// renewal must come before the lease is reported lost (TTL minus twice
    /// the drift allowance): [`build`](Self::build) checks that for the
    /// default TTL, and a kept-alive acquire checks, for its own TTL, that
    /// the renewal is also answered within the node timeout by then.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .renew_fraction(0.25)
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn renew_fraction(mut self, fraction: f64) -> Self {
        self.renew_fraction = fraction;
        self
    }

    /// Draw a fencing token with every lock (default: off). Each lease then
    /// carries [`Lease::fencing_token`](crate::Lease::fencing_token), a
    /// number larger than that of every earlier lease of the same resource
    /// taken with fencing on; see "Fencing tokens" in the crate docs.
    ///
    /// Off, a lock is two plain commands per node (`SET NX PX` to take,
    /// a compare-and-delete to give back) and leaves no counter behind.
    /// On, the acquire is a script that also bumps the lock's counter, in
    /// the same round trip: about three times the Redis CPU of the plain
    /// `SET` (see BENCHMARKS.md), and one more key per lock name, kept for
    /// the [fence expiry](Self::fence_expiry). Every Locker whose tokens a
    /// resource compares must have it on: a lease taken without it draws
    /// no number.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// let locker = redlease::Locker::builder(nodes.urls())
    ///     .fencing(true)
    /// #   .restart_quarantine(std::time::Duration::ZERO) // brand-new test servers
    ///     .build()?;
    /// let lease = locker.lock("ledger").await?;
    /// assert!(lease.fencing_token().is_some());
    /// # lease.release().await }
    /// ```
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// With [`fencing`](Self::fencing) on: how long a lock's fencing
    /// counter survives without acquisitions before Redis deletes it
    /// (default 10 minutes, at least 1 s). A counter that expired restarts
    /// from the server clock (in microseconds, cut to 100 ms), which is
    /// above every token handed out before as long as no node's clock
    /// steps back, or differs from another node's, by more than this minus
    /// 100 ms. [`build`](Self::build) refuses it with fencing off.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .fencing(true)
    ///     .fence_expiry(std::time::Duration::from_secs(24 * 3600))
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn fence_expiry(mut self, expiry: Duration) -> Self {
        self.fence_expiry = Some(expiry);
        self
    }

    /// TLS settings for the nodes reached over TLS (`rediss://`,
    /// `rediss+cluster://` for every node of the cluster,
    /// `rediss+sentinel://` for the sentinels and the primary): a CA to
    /// trust instead of the system's, and a client certificate (see
    /// [`TlsConfig`]). Needs the `tls-rustls` feature;
    /// [`build`](Self::build) refuses TLS settings without it, and without
    /// a TLS node to apply them to.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), redlease::Error> {
    /// let tls = redlease::TlsConfig::new().read_ca_file("/etc/redis/ca.crt")?;
    /// let locker = redlease::Locker::builder(["rediss://redis.internal:6380"])
    ///     .tls(tls)
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// How many replicas must acknowledge every write of a lease (its
    /// acquire, each extend and renewal), for locks that must survive a
    /// failover of a replicated primary (Sentinel, a cluster with
    /// replicas). Off by default. See [`Durability`] for what `WAIT` does
    /// and does not guarantee (ask for every replica); the durability
    /// timeout plus 100 ms (Redis may time `WAIT` out that late) must be
    /// shorter than the node timeout, which bounds the write and its `WAIT`
    /// together.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/locks"])
    ///     .node_timeout(Duration::from_millis(300))
    ///     .durability(redlease::Durability::required(1, Duration::from_millis(100)))
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// How long a server that (re)started casts no "yes" vote on an
    /// acquire; `Duration::ZERO` turns the quarantine off.
    ///
    /// A Redis server without fsync'd persistence comes back from a crash
    /// or restart empty, and would grant again a lock it had granted to a
    /// holder whose lease is still valid: with a majority made of it and
    /// the nodes the holder did not reach, a second client would hold the
    /// lock too. redlease reads each server's `run_id` and uptime on every
    /// new connection (a restart always breaks the connection), and counts
    /// no "yes" from a server that has been up for less than this. Its
    /// writes are still made, undone and extended as usual; the failed
    /// vote is [`NodeErrorKind::Quarantined`](crate::NodeErrorKind::Quarantined)
    /// and says for how long yet.
    ///
    /// It must cover the longest TTL (plus drift) that any client of these
    /// servers uses, not only this Locker's: the default is this Locker's
    /// TTL plus its drift allowance, and a lock or extend asked for with a
    /// longer TTL is refused. When every server restarted at once (nothing
    /// can be held then), no lock can be taken until the quarantine is
    /// over. Turn it off only for servers that cannot lose a write they
    /// acknowledged (`appendonly yes` with `appendfsync always`, on storage
    /// every restart reloads), or that stay down for longer than the
    /// largest TTL after a crash. redlease does not skip it for a server
    /// whose settings say `appendfsync always`: they do not show that the
    /// process started from its predecessor's data (its append-only file
    /// may have been lost with a container or a disk), so only the
    /// operator can tell (see the crate docs, "Restarts, duplicated servers
    /// and clock jumps"). Cluster nodes are not covered:
    /// redis-rs reconnects each shard out of our sight (use durability and
    /// replicas there).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// // Other clients of these servers take locks for up to a minute.
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .restart_quarantine(Duration::from_secs(61))
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn restart_quarantine(mut self, quarantine: Duration) -> Self {
        self.quarantine = Some(quarantine);
        self
    }

    /// Whether to watch each server's clock (on by default). Every "yes"
    /// to an acquire carries a reading of the server's clock (the new
    /// key's `PEXPIRETIME`, or `TIME` in the acquire script); a server
    /// whose clock advanced further than our monotonic clock over the same
    /// interval, beyond the drift allowance (an NTP step, a restored VM),
    /// expired its keys that much early, so it casts no "yes" vote for the
    /// restart quarantine
    /// (at least the TTL plus drift), as if it had restarted. A jump is
    /// seen by a Locker that talked to the server before and after it; a
    /// Locker that first meets the server after the jump cannot tell.
    /// Cluster nodes are not watched.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .clock_jump_guard(false)
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn clock_jump_guard(mut self, on: bool) -> Self {
        self.clock_guard = on;
        self
    }

    /// Checks every setting and sets up (lazy) connections; no network I/O.
    /// Must be called inside a Tokio runtime.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"]).build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn build(self) -> Result<Locker, Error> {
        if self.urls.is_empty() {
            return Err(Error::invalid("urls", "no Redis node given"));
        }
        let mut seen = HashSet::new();
        for (i, url) in self.urls.iter().enumerate() {
            if let Some(identity) = node::server_identity(url) {
                if !seen.insert(identity.clone()) {
                    return Err(Error::invalid(
                        "urls",
                        format!(
                            "node {i} ({}) is {identity} again: one server counted twice would \
                             fake a majority",
                            crate::node_url::redact_url(url)
                        ),
                    ));
                }
            }
        }
        crate::keys::check_prefix(&self.prefix)?;
        if self.connect_timeout.is_zero() {
            return Err(Error::invalid(
                "connect_timeout",
                "a zero timeout never connects",
            ));
        }
        self.check_tls()?;
        self.drift.check()?;
        self.retry.check()?;
        let fence_expiry = self.fence_expiry.unwrap_or(Duration::from_secs(600));
        if self.fence_expiry.is_some() && !self.fencing {
            return Err(Error::invalid(
                "fence_expiry",
                "set with fencing off: no counter is kept to expire (turn fencing on)",
            ));
        }
        if fence_expiry < Duration::from_secs(1) || fence_expiry > crate::MAX_TTL {
            return Err(Error::invalid(
                "fence_expiry",
                format!(
                    "{:?} is not between 1 s and {:?}: a counter restarted from the clock \
                     must start above the tokens before it",
                    fence_expiry,
                    crate::MAX_TTL
                ),
            ));
        }
        if !(self.renew_fraction > 0.0 && self.renew_fraction <= 0.9) {
            return Err(Error::invalid(
                "renew_fraction",
                format!(
                    "{} is not in (0, 0.9]: renewals must come before the lease runs out",
                    self.renew_fraction
                ),
            ));
        }
        let timing = Timing::new("ttl", self.ttl, self.drift, self.node_timeout)?;
        timing.check_renewal_schedule("ttl", self.renew_fraction)?;
        self.durability
            .check(timing.node_timeout)
            .map_err(|why| Error::invalid("durability", why))?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime);
        }
        let covered = self.ttl + self.drift.drift(self.ttl);
        let quarantine = self.quarantine.unwrap_or(covered);
        if !quarantine.is_zero() && (quarantine < covered || quarantine > crate::MAX_TTL) {
            return Err(Error::invalid(
                "restart_quarantine",
                format!(
                    "{quarantine:?} is not between the TTL plus drift ({covered:?}) and {:?}: \
                     a server that restarted empty could grant again a lock still held",
                    crate::MAX_TTL
                ),
            ));
        }
        let tag = LockerTag::generate();
        let connect = ConnectSettings {
            tag,
            connect_timeout: self.connect_timeout,
            durability: self.durability,
            quarantine,
            clock_suspension: self.clock_guard.then_some(quarantine.max(covered)),
            drift: self.drift,
            registry: Arc::default(),
        };
        let nodes = self
            .urls
            .iter()
            .enumerate()
            .map(|(i, url)| Node::new(i, url, connect.clone(), self.tls.as_ref()).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        let settings = Settings {
            ttl: self.ttl,
            node_timeout: self.node_timeout,
            connect_timeout: self.connect_timeout,
            drift: self.drift,
            retry: self.retry,
            prefix: self.prefix,
            renew_fraction: self.renew_fraction,
            fence_expiry,
            fencing: self.fencing,
            durability: self.durability,
            quarantine,
            tag,
        };
        Ok(Locker {
            engine: Arc::new(Engine::new(nodes, settings)),
        })
    }
}

impl LockerBuilder {
    /// TLS settings that cannot work: a URL or settings this build cannot
    /// serve, settings no node uses, parts that are not PEM.
    fn check_tls(&self) -> Result<(), Error> {
        // A URL that does not parse is refused with its own reason later.
        let tls_urls = self
            .urls
            .iter()
            .filter(|u| NodeUrl::parse_reason(u).is_ok_and(|u| u.uses_tls()))
            .count();
        if !cfg!(feature = "tls-rustls") && (tls_urls > 0 || self.tls.is_some()) {
            return Err(Error::invalid(
                "tls",
                "this build of redlease has no TLS: enable its `tls-rustls` feature",
            ));
        }
        if let Some(tls) = &self.tls {
            if tls_urls == 0 {
                return Err(Error::invalid(
                    "tls",
                    "TLS settings given, but no node uses TLS (rediss://, \
                     rediss+cluster:// or rediss+sentinel://)",
                ));
            }
            tls.check()?;
        }
        Ok(())
    }
}
