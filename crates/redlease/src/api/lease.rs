//! [`Lease`]: a held lock, and giving it back.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::api::lease_handle::LeaseHandle;
use crate::coord::acquire::attempt::Grant;
use crate::coord::guard::ReleaseOnDrop;
use crate::core::error::{Error, Op};
use crate::core::expiry::ExpiryBounds;
use crate::core::lease_state::{LateGrants, LeaseState, LostReason};
use crate::core::mode::LockMode;
use crate::core::quorum::NodeSet;

mod downgrade;
mod names;
mod release;
use crate::core::telemetry;
use names::AllNames;

/// A lock we hold, until [`valid_until`](Self::valid_until).
///
/// Ownership is the lease's random token, not a thread or a task: the lease
/// can move between tasks, and nobody else can release or extend it.
///
/// Give it back with [`release`](Self::release). A lease dropped without
/// release is released in the background (when a Tokio runtime is running;
/// otherwise its keys expire after the TTL).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redlease::Error> {
/// # let nodes = redlease_testkit::RedisNodes::start(1);
/// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
/// let mut lease = locker.lock("orders:42").await?;
/// println!("{} is ours for {:?}", lease.resource(), lease.remaining());
/// lease.extend(std::time::Duration::from_secs(10)).await?;
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping a Lease releases the lock (in the background)"]
pub struct Lease {
    guard: ReleaseOnDrop,
    /// What the holder reads (resource, fencing token, validity, loss):
    /// the same view a [`LeaseHandle`] has, so it is written once. Its
    /// state is shared with the renewer when the lease is kept alive.
    view: LeaseHandle,
    /// The nodes that granted the acquire, until the lease is kept alive.
    granted: NodeSet,
    /// The nodes that granted it after the quorum, until kept alive.
    late: Option<Arc<LateGrants>>,
    /// With durability on: replicas that acknowledged the acquire.
    replicas: Option<u32>,
    /// A multi-lock's names and tokens (`None` for one lock).
    all: Option<Box<AllNames>>,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No token here: whoever reads the logs must not be able to release.
        f.debug_struct("Lease")
            .field("resource", &self.view.resource())
            .field("key", &self.guard.ownership.key())
            .field("remaining", &self.remaining())
            .finish()
    }
}

impl Lease {
    /// The lease for a granted lock, recorded as held by its Locker. A
    /// Locker closed meanwhile refuses it: the lock must then be given back
    /// ([`Unregistered::give_back`]). No I/O here, so that the common case
    /// adds nothing to the acquire's future.
    pub(crate) fn new(grant: Grant, resource: String) -> Result<Lease, Box<Unregistered>> {
        Lease::with_names(grant, resource, None)
    }

    /// The lease for several locks granted together (`names` in their
    /// canonical order, as the keys were).
    pub(crate) fn new_all(grant: Grant, names: Vec<String>) -> Result<Lease, Box<Unregistered>> {
        let first = names.first().cloned().unwrap_or_default();
        let fences = grant.fences.clone();
        Lease::with_names(grant, first, Some(Box::new(AllNames { names, fences })))
    }

    fn with_names(
        grant: Grant,
        resource: String,
        all: Option<Box<AllNames>>,
    ) -> Result<Lease, Box<Unregistered>> {
        let Grant {
            mut guard,
            valid_until,
            fence,
            fences: _,
            granted_by,
            late,
            replicas,
        } = grant;
        let key = guard.ownership.key();
        // The key is `prefix{resource}`.
        let name_at = key.len() - 1 - resource.len();
        debug_assert_eq!(&key[name_at..key.len() - 1], resource);
        // Nothing reads the state before this: the claim was not shared
        // with anyone who looks at it.
        let state = LeaseState::new(valid_until, guard.timing.drift);
        guard.ownership.state.modify_if(|s| {
            *s = state;
            false
        });
        let registered = guard.engine.register(guard.ownership.clone());
        match registered {
            Ok(id) => guard.registration = Some(id),
            Err(closed) => return Err(Box::new(Unregistered { closed, guard })),
        }
        Ok(Lease {
            view: LeaseHandle {
                owner: guard.ownership.clone(),
                name_at,
                fence,
            },
            guard,
            granted: granted_by,
            late,
            replicas,
            all,
        })
    }

    /// Hands the lease to its Locker's renewer.
    /// The Locker's engine, the lease's shared record and its timing, for
    /// what builds on a lease (an election's leader record).
    pub(crate) fn parts(
        &self,
    ) -> (
        &Arc<crate::coord::engine::Engine>,
        &Arc<crate::coord::ownership::Ownership>,
        crate::core::validity::Timing,
    ) {
        (&self.guard.engine, &self.guard.ownership, self.guard.timing)
    }

    pub(crate) fn start_renewal(&mut self) {
        let engine = &self.guard.engine;
        let nodes = engine.nodes().len();
        let bounds = ExpiryBounds::new(
            nodes,
            self.guard.ownership.claim.quorum(nodes),
            std::mem::take(&mut self.granted).iter(),
            self.valid_until_now(),
        );
        let id = engine.renewer().add(
            &self.guard.ownership,
            self.guard.timing,
            bounds,
            self.late.take(),
        );
        self.guard.renewal = Some(id);
    }

    fn valid_until_now(&self) -> Instant {
        self.view.valid_until()
    }

    /// The resource name the lock was taken on.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let lease = locker.lock("orders:42").await?;
    /// assert_eq!(lease.resource(), "orders:42");
    /// # lease.release().await }
    /// ```
    pub fn resource(&self) -> &str {
        self.view.resource()
    }

    /// The fencing token of this acquisition, if its Locker draws them
    /// ([`LockerBuilder::fencing`](crate::LockerBuilder::fencing)): larger
    /// than that of every earlier acquisition of the same resource by any
    /// client with fencing on. Pass it to the protected resource with each
    /// write and have the resource reject a token lower than the highest it
    /// has accepted: a holder that was paused past its lease is then turned
    /// away (see "Fencing tokens" in the crate docs). `None` with fencing
    /// off.
    ///
    /// A read lease ([`Locker::read_lock`](crate::Locker::read_lock))
    /// draws no token: it carries the newest write generation it can see,
    /// at least the token of every write lease granted before it. (A node
    /// whose counter is gone, expired idle or lost in a restart, answers
    /// the value the next writer would restart it from: the server's clock
    /// in microseconds, above every earlier token.)
    /// A reader can tell by it which write it reads after; readers share
    /// it, so it does not tell two readers apart.
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
    /// let fence = lease.fencing_token().expect("fencing is on");
    /// // UPDATE ledger SET ..., fence = $fence WHERE id = $id AND fence < $fence
    /// # let _ = fence; lease.release().await }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.view.fencing_token()
    }

    /// With [`Durability`](crate::Durability) on: how many replicas
    /// acknowledged the acquire (`WAIT`'s answer; the fewest among the nodes
    /// that granted it). `None` with durability off.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let lease = locker.lock("ledger").await?;
    /// assert_eq!(lease.replicas_acknowledged(), None); // durability is off
    /// # lease.release().await }
    /// ```
    pub fn replicas_acknowledged(&self) -> Option<u32> {
        self.replicas
    }

    /// Whether this lease holds the lock alone (a writer's, from
    /// [`lock`](crate::Locker::lock) or [`write_lock`](crate::Locker::write_lock))
    /// or shares it with other readers ([`read_lock`](crate::Locker::read_lock)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let lease = locker.lock("ledger").await?;
    /// assert_eq!(lease.mode(), redlease::LockMode::Exclusive);
    /// # lease.release().await }
    /// ```
    ///
    /// A lease of several names answers for the first of its
    /// [`resources`](Self::resources); [`mode_of`](Self::mode_of) tells
    /// each name's.
    pub fn mode(&self) -> LockMode {
        self.guard.ownership.hold().mode()
    }

    /// Until when the lock is ours: `start + ttl - drift`, where `start` is
    /// taken before the first request of the acquire (or the last successful
    /// extend). After this instant, stop touching the protected resource.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let lease = locker.lock("orders:42").await?;
    /// assert!(lease.valid_until() > std::time::Instant::now());
    /// # lease.release().await }
    /// ```
    pub fn valid_until(&self) -> Instant {
        self.view.valid_until()
    }

    /// Time left until [`valid_until`](Self::valid_until); zero once passed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let lease = locker.lock("orders:42").await?;
    /// if lease.remaining() < std::time::Duration::from_secs(1) {
    ///     // too little time left for another step
    /// }
    /// # lease.release().await }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.view.remaining()
    }

    /// Whether the lease can no longer be trusted: its validity ran out (or
    /// is within one drift allowance, 1% of the TTL + 2 ms, of running
    /// out), or a renewal or extend found that a quorum no longer holds it.
    /// Cheap: no I/O. Once lost, a lease never comes back.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let lease = locker.lock("import").keep_alive().await?;
    /// for batch in 0..100 {
    ///     if lease.is_lost() {
    ///         break; // stop before touching the resource again
    ///     }
    ///     // ... import one batch ...
    /// }
    /// # lease.release().await }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.view.is_lost()
    }

    /// Why the lease is lost, if it is.
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::Lease) {
    /// if let Some(why) = lease.lost_reason() {
    ///     eprintln!("lost {}: {why}", lease.resource());
    /// }
    /// # }
    /// ```
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.view.lost_reason()
    }

    /// Resolves when the lease can no longer be trusted, and at the latest
    /// one drift allowance (1% of the TTL + 2 ms) before
    /// [`valid_until`](Self::valid_until) as it stands then
    /// (renewals move it later), so a holder that watches it stops before
    /// another client can take the lock. The future does not borrow the
    /// lease.
    ///
    /// ```
    /// # async fn work() {}
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let lease = locker.lock("import").keep_alive().await?;
    /// tokio::select! {
    ///     why = lease.lost() => eprintln!("lock lost ({why}), work abandoned"),
    ///     () = work() => {}
    /// }
    /// # lease.release().await }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    pub fn lost(&self) -> impl std::future::Future<Output = LostReason> + Send + 'static + use<> {
        self.view.lost()
    }

    /// Gives `ttl` more time from now, if a quorum still holds our token and
    /// answers before the current validity ends. On success,
    /// [`valid_until`](Self::valid_until) becomes `start + ttl - drift`,
    /// `start` being taken before the first request.
    ///
    /// Never re-creates an expired key, and a failed extend releases nothing.
    /// A lease whose validity has already run out is not extended:
    /// [`Error::NotHeld`], and nothing is sent. After a failure,
    /// `valid_until` only ever moves earlier (nodes that did apply a shorter
    /// TTL shortened the lock).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let mut lease = locker.lock("slow-job").await?;
    /// for step in 0..10 {
    ///     // ... one step of the work ...
    ///     lease.extend(std::time::Duration::from_secs(10)).await?;
    /// }
    /// # lease.release().await }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, the lease keeps the
    /// earlier of its old validity and the one the extend would have given.
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        let span = tracing::debug_span!(
            "redlease.extend",
            resource = self.resource(),
            ttl_ms = ttl.as_millis() as u64,
            outcome = tracing::field::Empty,
            elapsed_ms = tracing::field::Empty,
        );
        let timed = telemetry::is_timed(&span);
        async {
            let started = timed.then(Instant::now);
            let result = self.extend_once(ttl).await;
            telemetry::finished(Op::Extend, result.as_ref().copied(), started);
            result
        }
        .instrument(span)
        .await
    }

    async fn extend_once(&mut self, ttl: Duration) -> Result<(), Error> {
        let timing = self.guard.engine.timing("ttl", ttl)?;
        if self.guard.renewal.is_some() {
            timing.check_renewal("ttl", self.guard.engine.settings().renew_fraction)?;
        }
        let (guard, resource, label) = self.guard_and_label();
        guard.extend(timing, resource, label).await
    }
}

/// A granted lock that never became a lease: its Locker closed first.
pub(crate) struct Unregistered {
    closed: Error,
    guard: ReleaseOnDrop,
}

impl Unregistered {
    /// Gives the lock back on every node; the error for the caller.
    pub(crate) async fn give_back(mut self: Box<Self>) -> Error {
        self.guard.settle().await;
        let engine = self.guard.engine.clone();
        engine
            .release(&self.guard.ownership, self.guard.timing.node_timeout)
            .await;
        self.guard.disarm();
        self.closed
    }
}

impl Lease {
    /// A read-only view of this lease for work running under it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let lease = locker.lock("job").keep_alive().await?;
    /// let view = lease.handle();
    /// tokio::spawn(async move { let _ = view.lost().await; /* alert */ });
    /// # lease.release().await }
    /// ```
    pub fn handle(&self) -> LeaseHandle {
        self.view.clone()
    }
}
