//! [`LockerBuilder`]: a blocking Locker's settings, the async builder's.

use std::sync::Arc;
use std::time::Duration;

use crate::api::advanced::Advanced;
use crate::api::blocking::locker::Locker;
use crate::api::blocking::runtime::{self, Shared};
use crate::api::builder::LockerBuilder as AsyncBuilder;
use crate::core::durability::Durability;
use crate::core::error::Error;
use crate::core::retry::RetryPolicy;
use crate::transport::tls::TlsConfig;

/// Settings for a blocking [`Locker`], from
/// [`Locker::builder`](crate::blocking::Locker::builder): the same
/// settings, defaults and checks as the async
/// [`redlease::LockerBuilder`](crate::LockerBuilder) (whose docs give the
/// table of defaults), and [`build`](Self::build) needs no runtime. An
/// async builder converts with `From`.
///
/// ```
/// use std::time::Duration;
/// use redlease::{blocking::Locker, RetryPolicy};
///
/// # fn main() -> Result<(), redlease::Error> {
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
    inner: AsyncBuilder,
}

impl Locker {
    /// Starts configuring a Locker over `urls`, with the settings of
    /// [`redlease::Locker::builder`](crate::Locker::builder).
    ///
    /// ```
    /// # fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::blocking::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .ttl(std::time::Duration::from_secs(30))
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn builder<I, S>(urls: I) -> LockerBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        LockerBuilder::from(crate::api::locker::Locker::builder(urls))
    }
}

/// The settings of an async builder, for a blocking Locker.
///
/// ```
/// # fn main() -> Result<(), redlease::Error> {
/// let settings = redlease::Locker::builder(["redis://127.0.0.1:6379"]).fencing(true);
/// let locker = redlease::blocking::LockerBuilder::from(settings).build()?;
/// # let _ = locker; Ok(()) }
/// ```
impl From<AsyncBuilder> for LockerBuilder {
    fn from(inner: AsyncBuilder) -> Self {
        LockerBuilder { inner }
    }
}

impl LockerBuilder {
    fn map(self, set: impl FnOnce(AsyncBuilder) -> AsyncBuilder) -> Self {
        LockerBuilder {
            inner: set(self.inner),
        }
    }

    /// How long a lock lives unless extended (10 s by default):
    /// [`LockerBuilder::ttl`](crate::LockerBuilder::ttl).
    pub fn ttl(self, ttl: Duration) -> Self {
        self.map(|b| b.ttl(ttl))
    }

    /// How long each node may take to answer one request (5% of the TTL
    /// by default): [`LockerBuilder::node_timeout`](crate::LockerBuilder::node_timeout).
    pub fn node_timeout(self, timeout: Duration) -> Self {
        self.map(|b| b.node_timeout(timeout))
    }

    /// How long opening a connection to a node may take (1 s by default):
    /// [`LockerBuilder::connect_timeout`](crate::LockerBuilder::connect_timeout).
    pub fn connect_timeout(self, timeout: Duration) -> Self {
        self.map(|b| b.connect_timeout(timeout))
    }

    /// How [`Locker::lock`] retries a busy lock (for up to 10 s by
    /// default): [`LockerBuilder::retry`](crate::LockerBuilder::retry).
    pub fn retry(self, policy: RetryPolicy) -> Self {
        self.map(|b| b.retry(policy))
    }

    /// Prepended to every lock key (`"redlease:"` by default):
    /// [`LockerBuilder::key_prefix`](crate::LockerBuilder::key_prefix).
    pub fn key_prefix(self, prefix: impl Into<String>) -> Self {
        self.map(|b| b.key_prefix(prefix))
    }

    /// Draw a fencing token with every lock (off by default):
    /// [`LockerBuilder::fencing`](crate::LockerBuilder::fencing).
    pub fn fencing(self, on: bool) -> Self {
        self.map(|b| b.fencing(on))
    }

    /// TLS settings for `rediss://` nodes:
    /// [`LockerBuilder::tls`](crate::LockerBuilder::tls).
    pub fn tls(self, tls: TlsConfig) -> Self {
        self.map(|b| b.tls(tls))
    }

    /// How many replicas must acknowledge every write of a lease (off by
    /// default): [`LockerBuilder::durability`](crate::LockerBuilder::durability).
    pub fn durability(self, durability: Durability) -> Self {
        self.map(|b| b.durability(durability))
    }

    /// How long a lease that ends without a release keeps its names from
    /// the next holder (off by default):
    /// [`LockerBuilder::lock_delay`](crate::LockerBuilder::lock_delay).
    pub fn lock_delay(self, delay: Duration) -> Self {
        self.map(|b| b.lock_delay(delay))
    }

    /// Who this Locker's leases say they are (`HOST:PID` by default):
    /// [`LockerBuilder::owner`](crate::LockerBuilder::owner).
    pub fn owner(self, label: impl Into<String>) -> Self {
        self.map(|b| b.owner(label))
    }

    /// The same, for text a label cannot always hold:
    /// [`LockerBuilder::owner_lossy`](crate::LockerBuilder::owner_lossy).
    pub fn owner_lossy(self, text: &str) -> Self {
        self.map(|b| b.owner_lossy(text))
    }

    /// The expert settings:
    /// [`LockerBuilder::advanced`](crate::LockerBuilder::advanced).
    pub fn advanced(self, tune: impl FnOnce(Advanced) -> Advanced) -> Self {
        self.map(|b| b.advanced(tune))
    }

    /// Checks every setting, starts the Locker's runtime threads (two,
    /// named `redlease-blocking`) and sets up lazy connections: no network
    /// I/O. Works on any thread, with or without a runtime.
    ///
    /// # Panics
    ///
    /// If the system cannot start a thread (as `std::thread::spawn`).
    ///
    /// ```
    /// # fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::blocking::Locker::builder(["redis://127.0.0.1:6379"]).build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn build(self) -> Result<Locker, Error> {
        let runtime = runtime::runtime();
        let built = {
            let _in = runtime.enter();
            self.inner.build()
        };
        match built {
            Ok(locker) => Ok(Locker::from_shared(Arc::new(Shared::new(runtime, locker)))),
            Err(e) => {
                // Nothing ran on it: stopping it cannot block (nor panic
                // inside a runtime, as a drop would).
                runtime.shutdown_background();
                Err(e)
            }
        }
    }
}
