//! [`Semaphore`]: at most N holders of one name at once, fleet-wide.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;

use crate::api::acquire::Acquire;
use crate::api::try_acquire::TryAcquire;
use crate::coord::engine::Engine;
use crate::core::error::Error;
use crate::core::mode::Hold;
use crate::core::quorum::permit_quorum;

/// The most permits a semaphore may have: far beyond any fleet, and small
/// enough that its holders' set stays cheap to count.
const MAX_PERMITS: u32 = 100_000;

/// A counting semaphore from [`Locker::semaphore`](crate::Locker::semaphore):
/// at most [`permits`](Self::permits) holders of its name at once, across
/// every process that uses the name with the same number of permits.
///
/// Each permit is a [`Lease`](crate::Lease) (in
/// [`LockMode::Permit`](crate::LockMode::Permit)) with the lock's whole
/// API: wait for it with [`acquire`](Self::acquire) or try once with
/// [`try_acquire`](Self::try_acquire), then keep it alive, extend it,
/// release it, watch its lost signal, or run work under it with `with`.
/// A permit belongs to one holder and expires on its own, by the servers'
/// clocks: a crashed holder's permit comes back after its TTL, never
/// sooner and never later. A release wakes the waiters at once.
///
/// On one deployment (a server, a Cluster, a Sentinel primary) a permit is
/// taken on it. Over `n` independent nodes a majority is not enough for
/// more than one permit: a permit needs the [`quorum`](Self::quorum)
/// `n * N / (N + 1) + 1` of the nodes, so that `N + 1` holders can never
/// all find room. With 5 nodes, 2 to 3 permits need 4 nodes (one may
/// fail); with 3 nodes and 2 permits, all 3. A semaphore on which no node
/// may fail is refused (before any I/O, with a message that says what to
/// change) unless [`allow_no_failures`](Self::allow_no_failures) accepts
/// it.
///
/// With fencing on, each permit's token is larger than that of every
/// permit granted before it was asked for; permits taken at the same
/// moment may share one.
///
/// The number of permits is fixed per name while any permit is held: an
/// acquire that gives another number is refused with
/// [`Error::PermitsDiffer`](crate::Error::PermitsDiffer). A name is a
/// semaphore or a lock at a time, never both: a lock of a name whose
/// permits are held waits, as a permit waits for a held lock.
///
/// ```
/// use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redlease::Error> {
/// # let nodes = redlease_testkit::RedisNodes::start(1);
/// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(Duration::ZERO)).build()?; // brand-new test servers
/// // At most 3 deploys at once, fleet-wide:
/// let deploys = locker.semaphore("deploys", 3);
/// let permit = deploys.acquire().keep_alive().await?;
/// // ... deploy, while permit.is_lost() stays false ...
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore<'a> {
    engine: &'a Arc<Engine>,
    resource: String,
    permits: u32,
    no_failures: bool,
    majority: bool,
}

impl fmt::Debug for Semaphore<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("resource", &self.resource)
            .field("permits", &self.permits)
            .field("quorum", &self.quorum())
            .field("nodes", &self.engine.nodes().len())
            .finish()
    }
}

impl<'a> Semaphore<'a> {
    pub(crate) fn new(engine: &'a Arc<Engine>, resource: String, permits: u32) -> Self {
        Semaphore {
            engine,
            resource,
            permits,
            no_failures: false,
            majority: false,
        }
    }

    /// How many holders it admits at once.
    ///
    /// ```
    /// # fn f(locker: &redlease::Locker) {
    /// assert_eq!(locker.semaphore("deploys", 3).permits(), 3);
    /// # }
    /// ```
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// How many of the Locker's nodes must hold a permit for it to count:
    /// `n * N / (N + 1) + 1` of `n` nodes for `N` permits (the majority
    /// for one permit; 1 on one deployment).
    ///
    /// ```
    /// # fn f(five_nodes: &redlease::Locker) {
    /// let deploys = five_nodes.semaphore("deploys", 3);
    /// assert_eq!((deploys.quorum(), deploys.tolerates()), (4, 1));
    /// # }
    /// ```
    pub fn quorum(&self) -> usize {
        self.hold().quorum(self.engine.nodes().len())
    }

    /// How many of the Locker's nodes may fail while permits are still
    /// taken: the nodes beyond the [`quorum`](Self::quorum).
    ///
    /// ```
    /// # fn f(three_nodes: &redlease::Locker) {
    /// assert_eq!(three_nodes.semaphore("jobs", 2).tolerates(), 0);
    /// assert_eq!(three_nodes.semaphore("jobs", 1).tolerates(), 1);
    /// # }
    /// ```
    pub fn tolerates(&self) -> usize {
        self.engine.nodes().len() - self.quorum()
    }

    /// Whether these settings can be used, with no I/O: the error an
    /// acquire of this semaphore would be refused with before sending
    /// anything (no permit, more than 100,000, or no node may fail
    /// without [`allow_no_failures`](Self::allow_no_failures)), if any.
    ///
    /// ```
    /// # fn f(three_nodes: &redlease::Locker) {
    /// assert!(three_nodes.semaphore("jobs", 1).check().is_ok());
    /// let two = three_nodes.semaphore("jobs", 2);
    /// assert!(matches!(two.check(), Err(redlease::Error::InvalidInput { .. })));
    /// assert!(two.allow_no_failures().check().is_ok());
    /// # }
    /// ```
    pub fn check(&self) -> Result<(), Error> {
        self.refusal().map_or(Ok(()), Err)
    }

    /// Accept a semaphore on which no node may fail (every node must hold
    /// each permit, so one node down stops every acquire), which is
    /// otherwise refused. One deployment is not such a case: it is one
    /// node of the quorum.
    ///
    /// ```
    /// # fn f(three_nodes: &redlease::Locker) {
    /// let jobs = three_nodes.semaphore("jobs", 2).allow_no_failures();
    /// # let _ = jobs; }
    /// ```
    pub fn allow_no_failures(mut self) -> Self {
        self.no_failures = true;
        self
    }

    /// Waits for a permit, as [`Locker::lock`](crate::Locker::lock) waits
    /// for a lock (the Locker's retry policy, or `.wait(..)`), and returns
    /// it as a [`Lease`](crate::Lease). Settings that cannot work (no
    /// permits, or no node that may fail unless accepted) are
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) before any I/O.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let api = locker.semaphore("rate-limited-api", 8);
    /// let calls = api
    ///     .acquire()
    ///     .with(|permit| async move {
    ///         // ... one of at most 8 calls in flight, fleet-wide ...
    ///         permit.fencing_token()
    ///     })
    ///     .await?;
    /// # let _ = calls; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As [`Locker::lock`](crate::Locker::lock)'s: a dropped acquire gives
    /// back whatever it took, in the background.
    pub fn acquire(&self) -> Acquire<'a> {
        let retry = self.engine.settings().retry.clone();
        Acquire::new(self.engine, self.resource.clone(), retry, self.hold()).refused(self.refusal())
    }

    /// Makes one attempt at a permit: the lease, or why not (typically
    /// [`Error::Taken`](crate::Error::Taken): every permit is held).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let one = locker.semaphore("slots", 1);
    /// let first = one.try_acquire().await?;
    /// assert!(matches!(one.try_acquire().await, Err(redlease::Error::Taken { .. })));
    /// # first.release().await }
    /// ```
    pub fn try_acquire(&self) -> TryAcquire<'a> {
        TryAcquire::new(self.engine, self.resource.clone(), self.hold()).refused(self.refusal())
    }

    /// Waits for `k` of the permits at once, all or none, as one
    /// [`Lease`](crate::Lease) (tokio's `acquire_many`, Redisson's
    /// `acquire(permits)`): it holds `k` of the semaphore's room until
    /// released. Waiters take permits in the order they came, whatever
    /// their weights: a waiter for many is never overtaken by later ones
    /// for few, who wait behind it even when what they ask for is free.
    /// `k` of 0, or more than the semaphore's permits, is
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) before any I/O.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// // A build that takes 3 of the 8 build slots at once:
    /// let slots = locker.semaphore("build-slots", 8);
    /// let three = slots.acquire_many(3).await?;
    /// assert!(slots.try_acquire_many(6).await.is_err(), "5 are left");
    /// three.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire)'s.
    pub fn acquire_many(&self, k: u32) -> Acquire<'a> {
        let retry = self.engine.settings().retry.clone();
        let hold = self.hold_of(k);
        Acquire::new(self.engine, self.resource.clone(), retry, hold)
            .refused(self.refusal().or_else(|| self.weight_refusal(k)))
    }

    /// Makes one attempt at `k` of the permits at once (see
    /// [`acquire_many`](Self::acquire_many)).
    ///
    /// ```
    /// # async fn f(locker: &redlease::Locker) -> Result<(), redlease::Error> {
    /// let two = locker.semaphore("encoders", 4).try_acquire_many(2).await?;
    /// two.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn try_acquire_many(&self, k: u32) -> TryAcquire<'a> {
        TryAcquire::new(self.engine, self.resource.clone(), self.hold_of(k))
            .refused(self.refusal().or_else(|| self.weight_refusal(k)))
    }

    /// Counts each permit at a plain majority of the nodes instead of
    /// the [`quorum`](Self::quorum) it needs: **unsafe** beyond one permit
    /// over several nodes (more than `N` holders at once). Only for the
    /// fault-injection suite's negative control, which shows the bound is
    /// needed; never use it.
    #[doc(hidden)]
    pub fn unsafe_majority(mut self) -> Self {
        self.majority = true;
        self.no_failures = true;
        self
    }

    fn hold(&self) -> Hold {
        self.hold_of(1)
    }

    /// The hold of `k` permits (at least 1: a 0 is refused before use).
    fn hold_of(&self, k: u32) -> Hold {
        Hold::Permit {
            permits: NonZeroU32::new(self.permits).unwrap_or(NonZeroU32::MIN),
            weight: NonZeroU32::new(k).unwrap_or(NonZeroU32::MIN),
            majority: self.majority,
        }
    }

    /// Why `k` permits at once cannot be asked for, if they cannot.
    fn weight_refusal(&self, k: u32) -> Option<Error> {
        let permits = self.permits;
        match k {
            0 => Some(Error::invalid(
                "permits",
                "0 permits at once would hold nothing: ask for at least 1",
            )),
            k if k > permits => Some(Error::invalid(
                "permits",
                format!(
                    "{k} permits at once of a semaphore of {permits}: at most {permits} \
                     (no holder could ever take more than all of them)"
                ),
            )),
            _ => None,
        }
    }

    /// Why these settings cannot work, if they cannot.
    fn refusal(&self) -> Option<Error> {
        let (n, permits) = (self.engine.nodes().len(), self.permits);
        if permits == 0 {
            return Some(Error::invalid(
                "permits",
                "a semaphore needs at least 1 permit",
            ));
        }
        if permits > MAX_PERMITS {
            return Some(Error::invalid(
                "permits",
                format!("{permits} permits: at most {MAX_PERMITS}"),
            ));
        }
        if n == 1 || self.tolerates() > 0 || self.no_failures {
            return None;
        }
        // The fewest nodes on which one may fail, odd as a majority's
        // are (what doctor advises for every lock).
        let enough = (n + 1..)
            .filter(|m| m % 2 == 1)
            .find(|&m| m - permit_quorum(m, permits) >= 1)
            .expect("2 * (N + 1) nodes tolerate one failure");
        Some(Error::invalid(
            "permits",
            format!(
                "{permits} permits over {n} nodes need every node for each permit (a permit \
                 must be held on {q} of {n} so that no {more} holders fit): one node down stops \
                 every acquire. Use {enough} nodes (one may fail), fewer permits (1 permit needs \
                 a majority), or accept it with .allow_no_failures()",
                q = self.quorum(),
                more = permits + 1,
            ),
        ))
    }
}
