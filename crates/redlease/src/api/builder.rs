//! [`LockerBuilder`]: a Locker's settings, each checked before any I/O.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::coord::engine::{Engine, Settings};
use crate::core::durability::Durability;

use crate::core::error::Error;
use crate::core::retry::RetryPolicy;
use crate::core::token::LockerTag;
use crate::core::validity::{Timing, MAX_TTL};
use crate::transport::node::{self, ConnectSettings, Node};
use crate::transport::node_url::NodeUrl;
use crate::transport::tls::TlsConfig;

use crate::api::advanced::Advanced;
use crate::api::locker::Locker;

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

    /// Starts configuring a Locker over `urls`: one deployment for a
    /// single-instance lock, or several independent ones (at most 64) for
    /// the Redlock quorum.
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
        LockerBuilder::new(urls.into_iter().map(|u| u.as_ref().to_string()).collect())
    }
}

/// Settings for a [`Locker`]; every value is checked by [`build`](Self::build).
///
/// | setting | default |
/// |---|---|
/// | [`ttl`](Self::ttl) | 10 s |
/// | [`node_timeout`](Self::node_timeout) | 5% of the TTL in use |
/// | [`connect_timeout`](Self::connect_timeout) | 1 s |
/// | [`retry`](Self::retry) | [`RetryPolicy::default`]: wait up to 10 s |
/// | [`key_prefix`](Self::key_prefix) | `"redlease:"` |
/// | [`fencing`](Self::fencing) | off |
/// | [`tls`](Self::tls) | the system's trust store, no client certificate |
/// | [`durability`](Self::durability) | off |
/// | [`lock_delay`](Self::lock_delay) | off |
/// | [`owner`](Self::owner) | `HOST:PID` |
/// | [`advanced`](Self::advanced) | see [`Advanced`]: drift, renewal rate, restart quarantine, clock-jump guard, fence expiry, express connection |
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
///     .retry(RetryPolicy::within(Duration::from_secs(2)))
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
    retry: RetryPolicy,
    prefix: String,
    fencing: bool,
    tls: Option<TlsConfig>,
    durability: Durability,
    lock_delay: Duration,
    owner: Option<String>,
    advanced: Advanced,
}

impl LockerBuilder {
    /// The defaults (see the table above), over `urls`.
    pub(crate) fn new(urls: Vec<String>) -> LockerBuilder {
        LockerBuilder {
            urls,
            ttl: Duration::from_secs(10),
            node_timeout: None,
            connect_timeout: Duration::from_secs(1),
            retry: RetryPolicy::default(),
            prefix: "redlease:".to_string(),
            fencing: false,
            tls: None,
            durability: Durability::off(),
            lock_delay: Duration::ZERO,
            owner: None,
            advanced: Advanced::default(),
        }
    }

    /// How long a lock lives unless extended (whole milliseconds; at least
    /// 1 ms, at most [`MAX_TTL`](crate::MAX_TTL), and enough to leave
    /// validity after drift and node timeout).
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

    /// How long opening a connection to a node may take: more than zero
    /// and at most [`MAX_TTL`](crate::MAX_TTL) (no timeout is longer);
    /// [`build`](Self::build) refuses others as
    /// [`Error::InvalidInput`] for `connect_timeout`.
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

    /// How [`Locker::lock`] retries a lock that is busy.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .retry(redlease::RetryPolicy::within(std::time::Duration::from_secs(3)))
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Prepended to every lock key, to keep lock keys apart from other data.
    /// May not contain `{` or `}` (the resource is the hash tag), and
    /// counts toward [`MAX_KEY_LEN`](crate::MAX_KEY_LEN).
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

    /// Draw a fencing token with every lock (default: off). Each lease then
    /// carries [`Lease::fencing_token`](crate::Lease::fencing_token), a
    /// number larger than that of every earlier lease of the same resource
    /// taken with fencing on; see "Fencing tokens" in the crate docs.
    ///
    /// Off, a lock is two plain commands per node (`SET NX PX` to take,
    /// a compare-and-delete to give back) and leaves no counter behind.
    /// On, the acquire is a script that also bumps the lock's counter, in
    /// the same round trip: about three times the Redis CPU of the plain
    /// `SET`, and one more key per lock name, kept for
    /// the [fence expiry](Advanced::fence_expiry). Every Locker whose tokens a
    /// resource compares must have it on: a lease taken without it draws
    /// no number.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// let locker = redlease::Locker::builder(nodes.urls())
    ///     .fencing(true)
    /// #   .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)) // brand-new test servers
    ///     .build()?;
    /// let lease = locker.lock("ledger").await?;
    /// assert!(lease.fencing_token().is_some());
    /// # lease.release().await }
    /// ```
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
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

    /// Lock-delay, as in Chubby and Consul (off by default): a lease that
    /// ends without a release (its holder died, or it was lost) keeps its
    /// names from being granted again until `delay` after it expired, so
    /// that writes its holder still had in flight land before the next
    /// holder starts. A clean release frees the names at once.
    ///
    /// The servers keep each hold `delay` longer than its TTL (the lease's
    /// own validity is unchanged), and the restart quarantine covers the
    /// TTL and the delay: a longer delay keeps a restarted server from
    /// voting longer. At most [`MAX_TTL`](crate::MAX_TTL) with the TTL.
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .lock_delay(Duration::from_secs(15))
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }

    /// Who this Locker's leases say they are, to anyone who looks
    /// (`Admin::inspect`, `redlease status`, the message of
    /// [`Error::Taken`] a contender gets): by default the host name and
    /// process id, `HOST:PID`. At most
    /// [`MAX_OWNER_LEN`](crate::MAX_OWNER_LEN) bytes, with no control
    /// character and none of `| * ~ #`; a lease's secret token is never
    /// part of what is shown.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .owner("billing-worker-3 (nightly invoices)")
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn owner(mut self, label: impl Into<String>) -> Self {
        self.owner = Some(label.into());
        self
    }

    /// Like [`owner`](Self::owner), for a label made of text a label
    /// cannot always hold (a command line, say): each character it cannot
    /// hold becomes `_`, and it is cut to
    /// [`MAX_OWNER_LEN`](crate::MAX_OWNER_LEN) bytes. Empty text keeps
    /// the default.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let label = format!("{} (sh -c 'a | b')", redlease::default_owner());
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .owner_lossy(&label) // 'a _ b'
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn owner_lossy(mut self, text: &str) -> Self {
        if let Some(label) = crate::core::owner::sanitize(text) {
            self.owner = Some(label);
        }
        self
    }

    /// The expert settings (see [`Advanced`]): `tune` gets them as set so
    /// far and returns them changed. [`build`](Self::build) checks them
    /// with the rest, and names a refused one `advanced.<setting>`.
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .advanced(|a| a.drift_factor(0.02).restart_quarantine(Duration::from_secs(61)))
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn advanced(mut self, tune: impl FnOnce(Advanced) -> Advanced) -> Self {
        self.advanced = tune(self.advanced);
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
        let most = crate::core::quorum::MAX_NODES;
        if self.urls.len() > most {
            return Err(Error::invalid(
                "urls",
                format!(
                    "{} Redis nodes given, at most {most} can be: a quorum runs on a few \
                     independent servers (3, 5 or 7)",
                    self.urls.len()
                ),
            ));
        }
        let mut seen = HashSet::new();
        for (i, url) in self.urls.iter().enumerate() {
            if let Some(identity) = node::server_identity(url)
                && !seen.insert(identity.clone())
            {
                return Err(Error::invalid(
                    "urls",
                    format!(
                        "node {i} ({}) is {identity} again: one server counted twice would \
                             fake a majority",
                        crate::transport::node_url::redact_url(url)
                    ),
                ));
            }
        }
        crate::core::keys::check_prefix(&self.prefix)?;
        if self.connect_timeout.is_zero() {
            return Err(Error::invalid(
                "connect_timeout",
                "a zero timeout never connects",
            ));
        }
        if self.connect_timeout > MAX_TTL {
            return Err(Error::invalid(
                "connect_timeout",
                format!(
                    "{:?} is above the longest supported timeout, {MAX_TTL:?}",
                    self.connect_timeout
                ),
            ));
        }
        self.check_tls()?;
        let advanced = &self.advanced;
        advanced.drift.check()?;
        let fence_expiry = advanced.checked_fence_expiry(self.fencing)?;
        advanced.check_renew_fraction()?;
        let timing = Timing::new("ttl", self.ttl, advanced.drift, self.node_timeout)?;
        timing.check_renewal_schedule("ttl", advanced.renew_fraction)?;
        self.durability
            .check(timing.node_timeout)
            .map_err(|why| Error::invalid("durability", why))?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime);
        }
        // Whole milliseconds, as the servers are told.
        let lock_delay = Duration::from_millis(self.lock_delay.min(MAX_TTL).as_millis() as u64);
        if self.lock_delay > MAX_TTL || self.ttl + lock_delay > MAX_TTL {
            return Err(Error::invalid(
                "lock_delay",
                format!(
                    "{:?} with the TTL {:?} is above the largest supported hold, {MAX_TTL:?}",
                    self.lock_delay, self.ttl
                ),
            ));
        }
        let owner: Arc<str> = match &self.owner {
            Some(label) => {
                crate::core::owner::check_label(label)
                    .map_err(|why| Error::invalid("owner", why))?;
                label.as_str().into()
            }
            None => crate::core::owner::default_owner().into(),
        };
        let quarantine = advanced.checked_quarantine(self.ttl, lock_delay)?;
        let covered = advanced.covering(self.ttl + lock_delay);
        let tag = LockerTag::generate();
        let connect = ConnectSettings {
            tag,
            connect_timeout: self.connect_timeout,
            durability: self.durability,
            quarantine,
            clock_suspension: advanced.clock_guard.then_some(quarantine.max(covered)),
            drift: advanced.drift,
            registry: Arc::default(),
            express: advanced.express,
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
            drift: self.advanced.drift,
            retry: self.retry,
            prefix: self.prefix,
            renew_fraction: self.advanced.renew_fraction,
            fence_expiry,
            fencing: self.fencing,
            durability: self.durability,
            quarantine,
            lock_delay,
            tag,
            owner,
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
