//! [`LockerBuilder`]: a Locker's settings, each checked before any I/O.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::coord::engine::{Engine, Settings};
use crate::core::durability::Durability;

use crate::core::error::Error;
use crate::core::retry::RetryPolicy;
use crate::core::token::LockerTag;
use crate::core::validity::{DriftModel, Timing};
use crate::transport::node::{self, ConnectSettings, Node};
use crate::transport::node_url::NodeUrl;
use crate::transport::tls::TlsConfig;

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
    /// The defaults (see the table above), over `urls`.
    pub(crate) fn new(urls: Vec<String>) -> LockerBuilder {
        LockerBuilder {
            urls,
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
    /// `SET`, and one more key per lock name, kept for
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
                            crate::transport::node_url::redact_url(url)
                        ),
                    ));
                }
            }
        }
        crate::core::keys::check_prefix(&self.prefix)?;
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
        if fence_expiry < Duration::from_secs(1) || fence_expiry > crate::core::validity::MAX_TTL {
            return Err(Error::invalid(
                "fence_expiry",
                format!(
                    "{:?} is not between 1 s and {:?}: a counter restarted from the clock \
                     must start above the tokens before it",
                    fence_expiry,
                    crate::core::validity::MAX_TTL
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
        if !quarantine.is_zero()
            && (quarantine < covered || quarantine > crate::core::validity::MAX_TTL)
        {
            return Err(Error::invalid(
                "restart_quarantine",
                format!(
                    "{quarantine:?} is not between the TTL plus drift ({covered:?}) and {:?}: \
                     a server that restarted empty could grant again a lock still held",
                    crate::core::validity::MAX_TTL
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
