//! [`Acquire`]: a lock request, with its per-call options.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::api::lease::Lease;
use crate::api::lease_handle::LeaseHandle;
use crate::coord::acquire::wait;
use crate::coord::engine::Engine;
use crate::core::claim::Claim;
use crate::core::error::{Error, Op};
use crate::core::lease_state::LostReason;
use crate::core::mode::Hold;
use crate::core::retry::RetryPolicy;
use crate::core::telemetry;

/// A lock request from [`Locker::lock`](crate::Locker::lock): set
/// per-call options, then `.await` it. ([`Locker::try_lock`](crate::Locker::try_lock)
/// makes a [`TryAcquire`](crate::TryAcquire), which never waits.)
///
/// ```
/// use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redlease::Error> {
/// # let nodes = redlease_testkit::RedisNodes::start(1);
/// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
/// let lease = locker.lock("report").ttl(Duration::from_secs(120)).await?;
/// # lease.release().await }
/// ```
#[must_use = "a lock request does nothing until it is awaited"]
pub struct Acquire<'a> {
    engine: &'a Arc<Engine>,
    resource: String,
    ttl: Option<Duration>,
    retry: RetryPolicy,
    keep_alive: bool,
    hold: Hold,
    /// Why the request cannot be sent, found when it was made (a
    /// semaphore whose settings cannot work): returned before any I/O.
    refused: Option<Error>,
    /// The other names of a multi-lock (`lock_all`, `and_read`), taken
    /// with `resource`, all or none, each in its hold.
    others: Vec<(String, Hold)>,
    /// Draws a fencing token whatever the settings say (an election's).
    fenced: bool,
}

impl std::fmt::Debug for Acquire<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acquire")
            .field("resource", &self.resource)
            .field("ttl", &self.ttl)
            .field("retry", &self.retry)
            .field("keep_alive", &self.keep_alive)
            .field("hold", &self.hold)
            .finish_non_exhaustive()
    }
}

impl<'a> Acquire<'a> {
    pub(crate) fn new(
        engine: &'a Arc<Engine>,
        resource: String,
        retry: RetryPolicy,
        hold: Hold,
    ) -> Self {
        Acquire {
            engine,
            resource,
            ttl: None,
            retry,
            keep_alive: false,
            hold,
            refused: None,
            others: Vec::new(),
            fenced: false,
        }
    }

    /// Draws a fencing token whatever the Locker's settings say (an
    /// election's term).
    pub(crate) fn fenced(mut self) -> Self {
        self.fenced = true;
        self
    }

    /// A request for every name of `names` at once, all or none.
    pub(crate) fn all(engine: &'a Arc<Engine>, names: Vec<String>, retry: RetryPolicy) -> Self {
        let mut names = names.into_iter();
        let first = names.next().unwrap_or_default();
        let mut request = Acquire::new(engine, first, retry, Hold::Exclusive);
        request.others = names.map(|name| (name, Hold::Exclusive)).collect();
        request
    }

    /// Adds `names` as read holds: see [`Acquire::and_read`].
    pub(crate) fn reading(mut self, names: Vec<String>) -> Self {
        if matches!(self.hold, Hold::Permit { .. }) {
            let why = "a semaphore's permit is taken alone: and_read takes locks, not permits";
            self.refused = self.refused.or(Some(Error::invalid("names", why)));
        }
        self.others
            .extend(names.into_iter().map(|name| (name, Hold::Shared)));
        self
    }

    /// A request that fails with `why` before any I/O when awaited.
    pub(crate) fn refused(mut self, why: Option<Error>) -> Self {
        self.refused = why;
        self
    }

    /// Takes read holds on `names` too, with this request's lock or locks,
    /// all or none: a set in which some names are written and others only
    /// read. A name asked for both ways is taken exclusively. The names
    /// are taken in one canonical order, as [`Locker::lock_all`] takes
    /// them, in one round trip per node (per hash slot on a cluster).
    /// Each name keeps its own mode ([`Lease::mode_of`]) and fencing token
    /// ([`Lease::fencing_token_of`]; a read hold's is the write generation
    /// it reads, as [`Locker::read_lock`]'s). Refused before any I/O on a
    /// semaphore's permit.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// use redlease::LockMode;
    /// // Move money between two accounts at today's rates: the accounts
    /// // alone, the rates shared with other readers.
    /// let transfer = locker
    ///     .lock_all(["account:7", "account:3"])
    ///     .and_read(["rates"])
    ///     .await?;
    /// assert_eq!(transfer.mode_of("rates"), Some(LockMode::Shared));
    /// assert_eq!(transfer.mode_of("account:3"), Some(LockMode::Exclusive));
    /// let reader = locker.read_lock("rates").await?; // readers share it
    /// assert!(locker.try_lock("account:3").await.is_err());
    /// reader.release().await?;
    /// transfer.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// [`Locker::lock_all`]: crate::Locker::lock_all
    /// [`Locker::read_lock`]: crate::Locker::read_lock
    /// [`Lease::mode_of`]: crate::Lease::mode_of
    /// [`Lease::fencing_token_of`]: crate::Lease::fencing_token_of
    pub fn and_read<I, S>(self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.reading(names.into_iter().map(Into::into).collect())
    }

    /// Use this TTL instead of the Locker's, checked as the Locker's is
    /// (at least 1 ms, at most [`MAX_TTL`](crate::MAX_TTL), room for the
    /// drift allowance and node timeout): another is
    /// [`Error::InvalidInput`] for `ttl`, before any I/O.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let lease = locker.lock("x").ttl(std::time::Duration::from_millis(500)).await?;
    /// # lease.release().await }
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Keep retrying for at most `wait` (measured from the first attempt).
    /// An attempt limit of the policy still applies. Any duration is
    /// accepted: one too long for the clock to represent
    /// (`Duration::MAX`) waits without limit, as
    /// [`RetryPolicy::forever`] does.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let lease = locker.lock("x").wait(std::time::Duration::from_secs(3)).await?;
    /// # lease.release().await }
    /// ```
    pub fn wait(mut self, wait: Duration) -> Self {
        self.retry.wait = Some(wait);
        self
    }

    /// Use this retry policy instead of the Locker's.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let policy = redlease::RetryPolicy::attempts(std::num::NonZeroU32::new(5).unwrap());
    /// let lease = locker.lock("x").retry(policy).await?;
    /// # lease.release().await }
    /// ```
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Keep the lease alive: the Locker renews it in the background (every
    /// [`renew_fraction`](crate::Advanced::renew_fraction) of the TTL,
    /// a third by default) until it is released or dropped. Watch
    /// [`Lease::lost`] or [`Lease::is_lost`] to learn at once if a renewal
    /// fails.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let lease = locker.lock("long-job").keep_alive().await?;
    /// // ... work for as long as it takes, checking lease.is_lost() ...
    /// # lease.release().await }
    /// ```
    pub fn keep_alive(mut self) -> Self {
        self.keep_alive = true;
        self
    }

    /// Takes the lock (kept alive), runs `work` with a [`LeaseHandle`], and
    /// releases the lock afterwards, returning what `work` returned.
    ///
    /// If the lease is lost while `work` runs, `work`'s future is dropped at
    /// once (it does not go on unprotected) and the call returns
    /// [`Error::Lost`]. A release that finds the lock no longer ours also
    /// gives [`Error::Lost`]: the work may not have been protected to the end.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let rows = locker
    ///     .lock("nightly-import")
    ///     .wait(std::time::Duration::from_secs(60))
    ///     .with(|lease| async move {
    ///         println!("holding {} for {:?}", lease.resource(), lease.remaining());
    ///         42 // ... the import ...
    ///     })
    ///     .await?;
    /// # let _ = rows; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `work` and releases the lock in the
    /// background.
    pub async fn with<F, Fut, T>(self, work: F) -> Result<T, Error>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let lease = self.keep_alive().await?;
        let outcome = tokio::select! {
            biased;
            why = lease.lost() => Err(why),
            out = work(lease.handle()) => Ok(out),
        };
        let resource = lease.resource().to_string();
        match outcome {
            Err(why) => Err(Error::Lost { resource, why }),
            Ok(out) => match lease.release().await {
                Ok(()) => Ok(out),
                Err(Error::NotHeld { .. }) => Err(Error::Lost {
                    resource,
                    why: LostReason::Refused,
                }),
                Err(e) => {
                    // The work was protected; only the release failed, and
                    // the keys expire by their TTL.
                    tracing::warn!(resource, error = %e, "release after the work failed");
                    Ok(out)
                }
            },
        }
    }

    async fn run(self) -> Result<Lease, Error> {
        if let Some(why) = self.refused {
            return Err(why);
        }
        let engine = self.engine;
        let settings = engine.settings();
        crate::core::keys::check_resource(&settings.prefix, &self.resource)?;
        for (other, _) in &self.others {
            crate::core::keys::check_resource(&settings.prefix, other)?;
        }
        let timing = engine.timing("ttl", self.ttl.unwrap_or(settings.ttl))?;
        if self.keep_alive {
            timing.check_renewal("ttl", settings.renew_fraction)?;
        }
        if engine.is_closed() {
            return Err(Error::Closed);
        }
        if !self.others.is_empty() {
            // Boxed: a multi-lock's state need not weigh on every lock.
            return Box::pin(self.run_all(timing)).await;
        }
        let keys = match self.fenced {
            true => engine.fenced_keys(&self.resource),
            false => engine.keys(&self.resource),
        };
        let claim = Claim::one(keys, self.hold);
        let grant = wait::lock(engine, &self.resource, &claim, timing, &self.retry).await?;
        let mut lease = match Lease::new(grant, self.resource) {
            Ok(lease) => lease,
            // Boxed: rare, and its state need not weigh on every lock.
            Err(unregistered) => return Err(Box::pin(unregistered.give_back()).await),
        };
        if self.keep_alive {
            lease.start_renewal();
        }
        Ok(lease)
    }
}

impl Acquire<'_> {
    /// A multi-lock's acquire: its names in one canonical order (sorted,
    /// each once, exclusive where asked both ways), so that every caller
    /// takes overlapping sets alike.
    async fn run_all(self, timing: crate::core::validity::Timing) -> Result<Lease, Error> {
        let engine = self.engine;
        let mut named: Vec<(String, Hold)> = std::iter::once((self.resource, self.hold))
            .chain(self.others)
            .collect();
        // Exclusive (false) before shared (true), so dedup keeps it.
        named.sort_unstable_by(|(a, x), (b, y)| {
            a.cmp(b)
                .then((*x == Hold::Shared).cmp(&(*y == Hold::Shared)))
        });
        named.dedup_by(|later, kept| later.0 == kept.0);
        if named.len() == 1 {
            // One name after all (`lock("a").and_read(["a"])`).
            let (name, hold) = named.pop().expect("one");
            let request = Acquire {
                resource: name,
                hold,
                others: Vec::new(),
                ..self
            };
            return Box::pin(request.run()).await;
        }
        let keys: Vec<_> = named.iter().map(|(name, _)| engine.keys(name)).collect();
        let holds: Vec<Hold> = named.iter().map(|&(_, hold)| hold).collect();
        let names: Vec<String> = named.into_iter().map(|(name, _)| name).collect();
        let label = names.join(", ");
        let claim = Claim::of(keys, holds);
        let grant = wait::lock(engine, &label, &claim, timing, &self.retry).await?;
        let mut lease = match Lease::new_all(grant, names) {
            Ok(lease) => lease,
            Err(unregistered) => return Err(Box::pin(unregistered.give_back()).await),
        };
        if self.keep_alive {
            lease.start_renewal();
        }
        Ok(lease)
    }
}

impl<'a> IntoFuture for Acquire<'a> {
    type Output = Result<Lease, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Lease, Error>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        let span = tracing::debug_span!(
            "redlease.acquire",
            resource = %self.resource,
            keep_alive = self.keep_alive,
            mode = ?self.hold.mode(),
            outcome = tracing::field::Empty,
            elapsed_ms = tracing::field::Empty,
            fencing_token = tracing::field::Empty,
        );
        let timed = telemetry::is_timed(&span);
        let acquire = async move {
            let started = timed.then(Instant::now);
            let result = self.run().await;
            if let Some(token) = result.as_ref().ok().and_then(Lease::fencing_token) {
                tracing::Span::current().record("fencing_token", token);
            }
            telemetry::finished(Op::Acquire, result.as_ref().map(|_| ()), started);
            result
        };
        // A span that no subscriber records is not entered and left.
        if span.is_disabled() {
            Box::pin(acquire)
        } else {
            Box::pin(acquire.instrument(span))
        }
    }
}
