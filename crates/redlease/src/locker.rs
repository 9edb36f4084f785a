//! [`Locker`]: the nodes and the defaults every lock request starts from.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::acquire::Acquire;
use crate::background::Background;
use crate::error::NodeId;
use crate::keys::{lock_key, release_channel, LockKeys};
use crate::node::{self, ConnectSettings, Node};
use crate::quorum::quorum;
use crate::renew::Renewer;
use crate::retry::RetryPolicy;
use crate::subscription::Notifier;
use crate::validity::{DriftModel, Timing};
use crate::Error;

/// State shared by a [`Locker`], its clones and every [`Lease`](crate::Lease)
/// it handed out.
pub(crate) struct Shared {
    pub(crate) nodes: Vec<Arc<Node>>,
    pub(crate) ttl: Duration,
    pub(crate) node_timeout: Option<Duration>,
    pub(crate) drift: DriftModel,
    pub(crate) retry: RetryPolicy,
    pub(crate) prefix: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) renew_fraction: f64,
    pub(crate) fence_expiry: Duration,
    /// Release notifications, started by the first waiter.
    notifier: OnceLock<Arc<Notifier>>,
    /// Automatic renewal, started by the first kept-alive lease.
    renewer: OnceLock<Renewer>,
    /// Requests finishing in the background.
    pub(crate) background: Arc<Background>,
}

impl Shared {
    /// The renewal task, if any lease was ever kept alive.
    pub(crate) fn started_renewer(&self) -> Option<&Renewer> {
        self.renewer.get()
    }

    /// The renewer, set up on first use.
    pub(crate) fn renewer(&self) -> &Renewer {
        self.renewer
            .get_or_init(|| Renewer::new(self.nodes.clone(), self.renew_fraction))
    }

    /// The release notifications, starting them on first use.
    pub(crate) fn notifier(&self) -> &Arc<Notifier> {
        self.notifier
            .get_or_init(|| Notifier::start(&self.nodes, self.connect_timeout))
    }

    /// The release notifications, if any task ever waited.
    pub(crate) fn started_notifier(&self) -> Option<&Arc<Notifier>> {
        self.notifier.get()
    }

    /// Tells this process's waiters that our release of `key` went through,
    /// without waiting for Redis to echo the PUBLISH.
    pub(crate) fn announce_release(&self, key: &str, release_id: &str) {
        if let Some(notifier) = self.notifier.get() {
            notifier.released(&release_channel(key), release_id);
        }
    }

    /// Checks a TTL against this Locker's drift and timeout settings.
    pub(crate) fn timing(&self, field: &'static str, ttl: Duration) -> Result<Timing, Error> {
        Timing::new(field, ttl, self.drift, self.node_timeout)
    }

    pub(crate) fn key(&self, resource: &str) -> String {
        lock_key(&self.prefix, resource)
    }

    pub(crate) fn keys(&self, resource: &str) -> LockKeys {
        LockKeys::new(&self.prefix, resource, self.fence_expiry.as_millis() as u64)
    }
}

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
/// ```no_run
/// use std::time::Duration;
/// use redlease::Locker;
///
/// # async fn demo() -> Result<(), redlease::Error> {
/// let locker = Locker::builder([
///     "redis://10.0.0.1:6379",
///     "redis://10.0.0.2:6379",
///     "redis://10.0.0.3:6379",
/// ])
/// .ttl(Duration::from_secs(30))
/// .build()?;
///
/// let lease = locker.lock("invoice:42").await?;
/// // ... only one process gets here at a time, until lease.valid_until() ...
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Locker {
    pub(crate) shared: Arc<Shared>,
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.shared;
        f.debug_struct("Locker")
            .field(
                "nodes",
                &s.nodes.iter().map(|n| n.id().addr()).collect::<Vec<_>>(),
            )
            .field("quorum", &quorum(s.nodes.len()))
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
    /// ```no_run
    /// # async fn demo() -> Result<(), redlease::Error> {
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
    /// ```no_run
    /// # async fn demo() -> Result<(), redlease::Error> {
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
            fence_expiry: Duration::from_secs(600),
        }
    }

    /// Takes the lock, waiting until it is acquired or the Locker's
    /// [`RetryPolicy`] gives up. A busy lock is retried as soon as its holder
    /// releases it (see "Waiting for a busy lock" in the crate docs).
    /// Override TTL and wait per call:
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
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
        Acquire::new(self, resource.into(), self.shared.retry.clone())
    }

    /// Takes the lock on `resource` (waiting per the retry policy), keeps it
    /// alive while `work` runs, releases it afterwards, and returns `work`'s
    /// output. If the lease is lost meanwhile, `work` is dropped at once and
    /// the call returns [`Error::Lost`]. See [`Acquire::with`].
    ///
    /// ```no_run
    /// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
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
        F: FnOnce(crate::LeaseHandle) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        self.lock(resource).with(work).await
    }

    /// Makes exactly one attempt: returns the lease, or why it could not be
    /// had (typically [`Error::Taken`]).
    ///
    /// ```no_run
    /// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
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
            ..self.shared.retry.clone()
        };
        Acquire::new(self, resource.into(), once)
    }

    /// The Redis key that holds the lock on `resource`: the key prefix, then
    /// the resource in braces (a Redis Cluster hash tag).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::new(["redis://127.0.0.1:6379"])?;
    /// assert_eq!(locker.key("orders"), "redlease:{orders}");
    /// # Ok(()) }
    /// ```
    pub fn key(&self, resource: &str) -> String {
        self.shared.key(resource)
    }

    /// The Redis key of `resource`'s fencing counter: the lock key with
    /// `:fence` appended (same hash slot).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::new(["redis://127.0.0.1:6379"])?;
    /// assert_eq!(locker.fence_key("orders"), "redlease:{orders}:fence");
    /// # Ok(()) }
    /// ```
    pub fn fence_key(&self, resource: &str) -> String {
        self.shared.keys(resource).fence.to_string()
    }

    /// The pub/sub channel a release of `resource` is announced on: the
    /// lock key with `:released` appended. Each release publishes a random
    /// id there (never the token).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::new(["redis://127.0.0.1:6379"])?;
    /// assert_eq!(locker.release_channel("orders"), "redlease:{orders}:released");
    /// # Ok(()) }
    /// ```
    pub fn release_channel(&self, resource: &str) -> String {
        release_channel(&self.key(resource))
    }

    /// The nodes, in the order given.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::Locker) {
    /// for node in locker.nodes() {
    ///     println!("{node}");
    /// }
    /// # }
    /// ```
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = &NodeId> {
        self.shared.nodes.iter().map(|n| n.id())
    }

    /// Waits until every request this Locker finishes in the background is
    /// done: those still on their way to slower nodes after a quorum already
    /// answered (`try_lock`, `lock`, `extend` and `release` return at
    /// quorum), and the releases of dropped leases. Each is bounded by its
    /// node timeout. Call it before a short-lived process exits, so the
    /// slowest node is not left holding a key until its TTL ends.
    ///
    /// ```no_run
    /// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
    /// let lease = locker.lock("cron:report").await?;
    /// // ... the job ...
    /// lease.release().await?;
    /// locker.flush().await; // then exit
    /// # Ok(()) }
    /// ```
    pub async fn flush(&self) {
        self.shared.background.idle().await;
    }

    /// How automatic renewal is doing: leases kept alive and round trips
    /// spent so far.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::Locker) {
    /// assert_eq!(locker.renewal_stats().leases, 0);
    /// # }
    /// ```
    pub fn renewal_stats(&self) -> crate::RenewalStats {
        self.shared
            .started_renewer()
            .map(|r| r.stats())
            .unwrap_or_default()
    }

    /// How many nodes must agree: `nodes / 2 + 1`.
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::Locker) {
    /// println!("{} of {} nodes must agree", locker.quorum(), locker.nodes().len());
    /// # }
    /// ```
    pub fn quorum(&self) -> usize {
        quorum(self.shared.nodes.len())
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
///
/// ```no_run
/// use std::time::Duration;
/// use redlease::{Locker, RetryPolicy};
///
/// # async fn demo() -> Result<(), redlease::Error> {
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
    fence_expiry: Duration,
}

impl LockerBuilder {
    /// How long a lock lives unless extended (whole milliseconds; at least
    /// 1 ms and enough to leave validity after drift and node timeout).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), redlease::Error> {
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
    /// ```no_run
    /// # async fn demo() -> Result<(), redlease::Error> {
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
    /// ```no_run
    /// # async fn demo() -> Result<(), redlease::Error> {
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
    /// ```no_run
    /// # async fn demo() -> Result<(), redlease::Error> {
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
    /// ```no_run
    /// # async fn demo() -> Result<(), redlease::Error> {
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
    /// ```no_run
    /// # async fn demo() -> Result<(), redlease::Error> {
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
    /// May not contain `{` or `}` (the resource is the hash tag).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), redlease::Error> {
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
    /// ```no_run
    /// # async fn demo() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .renew_fraction(0.25)
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn renew_fraction(mut self, fraction: f64) -> Self {
        self.renew_fraction = fraction;
        self
    }

    /// How long a lock's fencing counter survives without acquisitions
    /// before Redis deletes it (default 10 minutes, at least 1 s). A counter
    /// that expired restarts from the server clock (in microseconds, cut to
    /// 100 ms), which is above every token handed out before as long as no
    /// node's clock steps back, or differs from another node's, by more
    /// than this minus 100 ms.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .fence_expiry(std::time::Duration::from_secs(24 * 3600))
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn fence_expiry(mut self, expiry: Duration) -> Self {
        self.fence_expiry = expiry;
        self
    }

    /// Checks every setting and sets up (lazy) connections; no network I/O.
    /// Must be called inside a Tokio runtime.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), redlease::Error> {
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
                            node::redact_url(url)
                        ),
                    ));
                }
            }
        }
        if self.prefix.contains(['{', '}']) {
            return Err(Error::invalid(
                "key_prefix",
                format!(
                    "{:?} contains a brace; the resource name is the key's hash tag",
                    self.prefix
                ),
            ));
        }
        if self.connect_timeout.is_zero() {
            return Err(Error::invalid(
                "connect_timeout",
                "a zero timeout never connects",
            ));
        }
        self.drift.check()?;
        self.retry.check()?;
        if self.fence_expiry < Duration::from_secs(1) || self.fence_expiry > crate::MAX_TTL {
            return Err(Error::invalid(
                "fence_expiry",
                format!(
                    "{:?} is not between 1 s and {:?}: a counter restarted from the clock \
                     must start above the tokens before it",
                    self.fence_expiry,
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
        Timing::new("ttl", self.ttl, self.drift, self.node_timeout)?
            .check_renewal_schedule("ttl", self.renew_fraction)?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime);
        }
        let settings = ConnectSettings {
            connect_timeout: self.connect_timeout,
        };
        let nodes = self
            .urls
            .iter()
            .enumerate()
            .map(|(i, url)| Node::new(i, url, settings).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Locker {
            shared: Arc::new(Shared {
                nodes,
                ttl: self.ttl,
                node_timeout: self.node_timeout,
                drift: self.drift,
                retry: self.retry,
                prefix: self.prefix,
                connect_timeout: self.connect_timeout,
                renew_fraction: self.renew_fraction,
                fence_expiry: self.fence_expiry,
                notifier: OnceLock::new(),
                renewer: OnceLock::new(),
                background: Arc::default(),
            }),
        })
    }
}
