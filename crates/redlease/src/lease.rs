//! [`Lease`]: a held lock, and giving it back.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::{Held, NodeError, Op};
use crate::expiry::ExpiryBounds;
use crate::fanout::{self, flag_vote, Replies};
use crate::lease_state::{LeaseState, LostReason};
use crate::locker::Shared;
use crate::quorum::Decision;
use crate::renew::ExtendFailure;
use crate::token::Token;
use crate::validity::Timing;
use crate::Error;

/// A lock we hold, until [`valid_until`](Self::valid_until).
///
/// Ownership is the lease's random token, not a thread or a task: the lease
/// can move between tasks, and nobody else can release or extend it.
///
/// Give it back with [`release`](Self::release). A lease dropped without
/// release is released in the background (when a Tokio runtime is running;
/// otherwise its keys expire after the TTL).
///
/// ```no_run
/// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
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
    /// the same view a [`LeaseHandle`] has, so it is written once.
    view: LeaseHandle,
    /// The nodes that granted the acquire, until the lease is kept alive.
    granted: Vec<usize>,
    /// Validity and loss, shared with the renewer when kept alive.
    state: Arc<watch::Sender<LeaseState>>,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No token here: whoever reads the logs must not be able to release.
        f.debug_struct("Lease")
            .field("resource", &self.view.resource)
            .field("key", &self.guard.key)
            .field("remaining", &self.remaining())
            .finish()
    }
}

impl Lease {
    /// A lease from the guard of the attempt that won it.
    pub(crate) fn new(
        guard: ReleaseOnDrop,
        resource: String,
        valid_until: Instant,
        fence: u64,
        granted: Vec<usize>,
    ) -> Lease {
        let state = Arc::new(watch::Sender::new(LeaseState::new(
            valid_until,
            guard.timing.drift,
        )));
        Lease {
            guard,
            view: LeaseHandle {
                resource: resource.into(),
                fence,
                state: state.subscribe(),
            },
            granted,
            state,
        }
    }

    /// Hands the lease to its Locker's renewer.
    pub(crate) fn keep_alive(&mut self) {
        let shared = &self.guard.shared;
        let bounds = ExpiryBounds::new(
            shared.nodes.len(),
            std::mem::take(&mut self.granted),
            self.valid_until_now(),
        );
        let id = shared.renewer().add(
            self.guard.key.clone(),
            self.guard.token.clone(),
            self.guard.timing,
            bounds,
            self.state.clone(),
        );
        self.guard.renewal = Some(id);
    }

    fn valid_until_now(&self) -> Instant {
        self.view.valid_until()
    }

    fn set_valid_until(&self, valid_until: Instant) {
        self.state.send_modify(|s| s.valid_until = valid_until);
    }

    /// The resource name the lock was taken on.
    ///
    /// ```no_run
    /// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
    /// let lease = locker.lock("orders:42").await?;
    /// assert_eq!(lease.resource(), "orders:42");
    /// # lease.release().await }
    /// ```
    pub fn resource(&self) -> &str {
        self.view.resource()
    }

    /// The fencing token of this acquisition: larger than that of every
    /// earlier acquisition of the same resource, by any client. Pass it to
    /// the protected resource with each write and have the resource reject
    /// a token lower than the highest it has accepted: a holder that was
    /// paused past its lease is then turned away (see "Fencing tokens" in
    /// the crate docs).
    ///
    /// ```no_run
    /// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
    /// let lease = locker.lock("ledger").await?;
    /// let fence = lease.fencing_token();
    /// // UPDATE ledger SET ..., fence = $fence WHERE id = $id AND fence < $fence
    /// # let _ = fence; lease.release().await }
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.view.fencing_token()
    }

    /// Until when the lock is ours: `start + ttl - drift`, where `start` is
    /// taken before the first request of the acquire (or the last successful
    /// extend). After this instant, stop touching the protected resource.
    ///
    /// ```no_run
    /// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
    /// let lease = locker.lock("orders:42").await?;
    /// assert!(lease.valid_until() > std::time::Instant::now());
    /// # lease.release().await }
    /// ```
    pub fn valid_until(&self) -> Instant {
        self.view.valid_until()
    }

    /// Time left until [`valid_until`](Self::valid_until); zero once passed.
    ///
    /// ```no_run
    /// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
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
    /// ```no_run
    /// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
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
    /// ```no_run
    /// # async fn work() {}
    /// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
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
    pub fn lost(&self) -> impl std::future::Future<Output = LostReason> + Send + 'static {
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
    /// ```no_run
    /// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
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
        let shared = self.guard.shared.clone();
        let timing = shared.timing("ttl", ttl)?;
        if self.guard.renewal.is_some() {
            timing.check_renewal("ttl", shared.renew_fraction)?;
        }
        if let Some(why) = self.lost_reason() {
            return Err(self.not_held(
                Op::Extend,
                why != LostReason::Refused,
                Vec::new(),
                Vec::new(),
            ));
        }
        if let Some(id) = self.guard.renewal {
            return self.extend_kept_alive(id, timing).await;
        }
        let start = Instant::now();
        let old_valid_until = self.valid_until_now();
        // Before anything is sent: some nodes may apply a TTL shorter than
        // what is left, so the lease can only be trusted until the earlier.
        let extended_until = timing.valid_until(start);
        self.set_valid_until(old_valid_until.min(extended_until));
        self.guard.settle().await;
        // Waiting for the acquire's slow requests may have used up what
        // was left: then send nothing.
        if self.is_lost() {
            return Err(self.not_held(Op::Extend, true, Vec::new(), Vec::new()));
        }

        let (key, token) = (self.guard.key.clone(), self.guard.token.clone());
        let mut replies = fanout::until_decided(&shared.nodes, flag_vote, |node| {
            let (key, token) = (key.clone(), token.clone());
            async move {
                node.extend(&key, &token, timing.ttl_ms(), timing.node_timeout)
                    .await
            }
        })
        .await;
        let now = Instant::now();
        match replies.tally.decision() {
            // Too late: the lease was (or was about to be) reported lost,
            // and a lost lease never comes back.
            Decision::Reached if self.lost_reason().is_some() => {
                replies.detach(&shared.background);
                Err(self.not_held(Op::Extend, true, Vec::new(), Vec::new()))
            }
            Decision::Reached if !timing.usable(now - start) => {
                replies.detach(&shared.background);
                Err(Error::ValidityExhausted {
                    op: Op::Extend,
                    resource: self.view.resource.to_string(),
                    elapsed: now - start,
                    ttl: timing.ttl,
                    drift: timing.drift,
                })
            }
            Decision::Reached => {
                replies.detach(&shared.background);
                self.state.send_modify(|s| {
                    s.valid_until = extended_until;
                    s.early = timing.drift;
                });
                self.guard.timing = timing;
                Ok(())
            }
            Decision::Impossible | Decision::Pending => {
                replies.finish(flag_vote).await;
                // Judged after the replies: a lease that ran out meanwhile
                // expired; it was not taken over.
                let expired = self.lost_reason() == Some(LostReason::Expired);
                let error = self.refusal(Op::Extend, &replies, expired);
                if matches!(error, Error::NotHeld { .. }) {
                    // A majority no longer has our token: the lease is gone.
                    let why = if expired {
                        LostReason::Expired
                    } else {
                        LostReason::Refused
                    };
                    self.state.send_modify(|s| s.lost = Some(why));
                }
                Err(error)
            }
        }
    }

    /// Extends a kept-alive lease through the renewer, in order with its
    /// renewals on every node.
    async fn extend_kept_alive(
        &mut self,
        id: u64,
        timing: crate::validity::Timing,
    ) -> Result<(), Error> {
        let shared = self.guard.shared.clone();
        match shared.renewer().extend(id, timing).await {
            Ok(()) => {
                self.guard.timing = timing;
                Ok(())
            }
            Err(ExtendFailure::Gone) => {
                let why = self.lost_reason().unwrap_or(LostReason::Expired);
                Err(self.not_held(
                    Op::Extend,
                    why != LostReason::Refused,
                    Vec::new(),
                    Vec::new(),
                ))
            }
            Err(ExtendFailure::Lost {
                why: LostReason::NodeErrors,
                refused_on,
                failed,
            }) => Err(Error::NoQuorum {
                op: Op::Extend,
                resource: self.view.resource.to_string(),
                succeeded: shared.nodes.len() - failed.len() - refused_on.len(),
                quorum: crate::quorum::quorum(shared.nodes.len()),
                nodes: shared.nodes.len(),
                failed,
                refused_by: refused_on
                    .into_iter()
                    .map(|node| Held {
                        node,
                        expires_in: None,
                    })
                    .collect(),
            }),
            Err(ExtendFailure::Lost {
                why,
                refused_on,
                failed,
            }) => Err(self.not_held(Op::Extend, why != LostReason::Refused, refused_on, failed)),
        }
    }

    /// Gives the lock back: deletes the key on every node where it still
    /// holds our token (never anyone else's).
    ///
    /// `Ok` means a quorum confirmed the lock was still ours until now. A
    /// lease that expired or was taken over gives [`Error::NotHeld`]: the
    /// protected work may have overlapped with another holder's.
    ///
    /// ```no_run
    /// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
    /// let lease = locker.lock("orders:42").await?;
    /// // ... work ...
    /// if let Err(e) = lease.release().await {
    ///     eprintln!("the lock was not ours to the end: {e}");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes drops the lease, which
    /// releases it again in the background.
    pub async fn release(mut self) -> Result<(), Error> {
        self.guard.unregister();
        self.guard.settle().await;
        let shared = self.guard.shared.clone();
        let (key, token, timeout) = (
            self.guard.key.clone(),
            self.guard.token.clone(),
            self.guard.timing.node_timeout,
        );
        let release_id: Arc<str> = release_id().into();
        let written = self.guard.written.clone();
        let mut replies = fanout::until_decided(&shared.nodes, flag_vote, |node| {
            let (key, token, release_id) = (key.clone(), token.clone(), release_id.clone());
            let may_hold = written.may_hold(node.id().index());
            async move {
                if !may_hold {
                    return Ok(false);
                }
                node.release(&key, &token, &release_id, timeout).await
            }
        })
        .await;
        let result = match replies.tally.decision() {
            Decision::Reached => {
                replies.detach(&shared.background);
                shared.announce_release(&key, &release_id);
                Ok(())
            }
            Decision::Impossible | Decision::Pending => {
                replies.finish(flag_vote).await;
                let expired = Instant::now() >= self.valid_until_now();
                Err(self.refusal(Op::Release, &replies, expired))
            }
        };
        self.guard.disarm();
        result
    }

    /// The error for a release or extend that reached no quorum.
    fn refusal(&self, op: Op, replies: &Replies<bool>, expired: bool) -> Error {
        let nodes = &self.guard.shared.nodes;
        let refused: Vec<_> = replies
            .answers
            .iter()
            .filter(|(_, a)| matches!(a, Ok(false)))
            .map(|(i, _)| nodes[*i].id().clone())
            .collect();
        let failed = replies.failures();
        if replies.tally.refused() {
            return self.not_held(op, expired, refused, failed);
        }
        Error::NoQuorum {
            op,
            resource: self.view.resource.to_string(),
            succeeded: replies.tally.yes,
            quorum: replies.tally.quorum,
            nodes: replies.tally.nodes,
            failed,
            refused_by: refused
                .into_iter()
                .map(|node| Held {
                    node,
                    expires_in: None,
                })
                .collect(),
        }
    }

    fn not_held(
        &self,
        op: Op,
        expired: bool,
        not_held_on: Vec<crate::NodeId>,
        failed: Vec<NodeError>,
    ) -> Error {
        Error::NotHeld {
            op,
            resource: self.view.resource.to_string(),
            expired,
            not_held_on,
            failed,
        }
    }
}

/// A fresh id for one release, published with it so waiters can tell which
/// nodes confirmed the same release.
fn release_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// Runs the compare-and-delete on every node that may hold our token,
/// concurrently, and waits for all of them (each bounded by `timeout`).
/// Failures are only logged: the keys carry a TTL, so a node that missed
/// the release frees the lock by expiry.
pub(crate) async fn release_on(
    shared: &Shared,
    written: &Written,
    key: &str,
    token: &Token,
    timeout: Duration,
) {
    let release_id = release_id();
    let results = join_all(
        shared
            .nodes
            .iter()
            .filter(|n| written.may_hold(n.id().index()))
            .map(|n| n.release(key, token, &release_id, timeout)),
    )
    .await;
    let mut deleted = false;
    for result in results {
        match result {
            Ok(d) => deleted |= d,
            Err(e) => tracing::debug!(error = %e, "release failed; the key expires by its TTL"),
        }
    }
    if deleted {
        shared.announce_release(key, &release_id);
    }
}

/// Releases a token on every node when dropped, unless disarmed: backs both
/// a [`Lease`] dropped without `release` and an acquire attempt dropped
/// mid-flight.
pub(crate) struct ReleaseOnDrop {
    shared: Arc<Shared>,
    key: Arc<str>,
    token: Token,
    /// The TTL and timeouts of the latest acquire or extend.
    timing: Timing,
    /// The lease's registration with the renewer, if kept alive.
    renewal: Option<u64>,
    /// Acquire requests still on their way to slow nodes. A release sent
    /// now could reach a node before a request that is still connecting or
    /// reloading its script, and leave a key behind; so wait for them first.
    in_flight: Option<JoinHandle<()>>,
    /// Which nodes may hold our token.
    written: Written,
    armed: bool,
}

/// Per node, whether our token may have been written there. The token is
/// unique to one attempt, so a node that refused the acquire (the key was
/// held) or was never sent it (see [`NodeErrorKind::Unresponsive`]) cannot
/// hold it: a release there is answered "not held" without a request. This
/// keeps releases, which pass the owed-request gate, from piling up on a
/// stalled node that never saw the acquire.
///
/// [`NodeErrorKind::Unresponsive`]: crate::NodeErrorKind::Unresponsive
#[derive(Clone)]
pub(crate) struct Written(Arc<[AtomicBool]>);

impl Written {
    fn new(nodes: usize) -> Self {
        Written((0..nodes).map(|_| AtomicBool::new(true)).collect())
    }

    /// Node `i` is known not to hold our token.
    pub(crate) fn ruled_out(&self, i: usize) {
        self.0[i].store(false, Ordering::Relaxed);
    }

    /// Whether node `i` may hold our token.
    pub(crate) fn may_hold(&self, i: usize) -> bool {
        self.0[i].load(Ordering::Relaxed)
    }
}

impl ReleaseOnDrop {
    pub(crate) fn new(shared: Arc<Shared>, key: Arc<str>, token: Token, timing: Timing) -> Self {
        ReleaseOnDrop {
            written: Written::new(shared.nodes.len()),
            shared,
            key,
            token,
            timing,
            renewal: None,
            in_flight: None,
            armed: true,
        }
    }

    /// Which nodes may hold the token, for the acquire to rule nodes out.
    pub(crate) fn written(&self) -> &Written {
        &self.written
    }

    /// Requests of the acquire still on their way to slow nodes.
    pub(crate) fn set_in_flight(&mut self, in_flight: Option<JoinHandle<()>>) {
        self.in_flight = in_flight;
    }

    /// Takes the lease off the renewer: no renewal of it is sent after
    /// this. One already on the wire may still land, which is harmless (the
    /// renew script never re-creates a deleted key), so nothing waits for it.
    fn unregister(&mut self) {
        if let Some(id) = self.renewal.take() {
            self.shared.renewer().remove(id);
        }
    }

    /// Waits until no earlier request for this token is still in flight
    /// (each is bounded by its node timeout).
    async fn settle(&mut self) {
        if let Some(in_flight) = self.in_flight.as_mut() {
            // An error here only means the drain task ended early.
            let _ = in_flight.await;
            self.in_flight = None;
        }
    }

    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Unregister now, so no renewal starts after the lease is gone.
        self.unregister();
        // Background::spawn needs a runtime; without one the keys simply
        // expire.
        if tokio::runtime::Handle::try_current().is_err() {
            tracing::warn!(key = %self.key, "lock dropped outside a Tokio runtime; it stays until its TTL ends");
            return;
        }
        let shared = self.shared.clone();
        let (key, token) = (self.key.clone(), self.token.clone());
        let timeout = self.timing.node_timeout;
        let in_flight = self.in_flight.take();
        let written = self.written.clone();
        shared.background.clone().spawn(async move {
            if let Some(in_flight) = in_flight {
                let _ = in_flight.await;
            }
            release_on(&shared, &written, &key, &token, timeout).await
        });
    }
}

/// A view of a held lease for the work running under it
/// ([`Locker::with_lock`](crate::Locker::with_lock)): its name, validity and
/// loss signal. Cheap to clone; it cannot release or extend the lock.
///
/// ```no_run
/// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
/// locker
///     .with_lock("sync", |lease| async move {
///         while !lease.is_lost() {
///             // ... one step, well inside lease.remaining() ...
/// #           break;
///         }
///     })
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaseHandle {
    resource: Arc<str>,
    fence: u64,
    state: watch::Receiver<LeaseState>,
}

impl fmt::Debug for LeaseHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseHandle")
            .field("resource", &self.resource)
            .field("remaining", &self.remaining())
            .finish()
    }
}

impl LeaseHandle {
    /// The resource name.
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::LeaseHandle) { println!("{}", lease.resource()); }
    /// ```
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The fencing token (see [`Lease::fencing_token`]).
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::LeaseHandle) { println!("token {}", lease.fencing_token()); }
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.fence
    }

    /// Until when the lock is ours (renewals move it later).
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::LeaseHandle) { let _ = lease.valid_until(); }
    /// ```
    pub fn valid_until(&self) -> Instant {
        self.state.borrow().valid_until
    }

    /// Time left until [`valid_until`](Self::valid_until).
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::LeaseHandle) { let _ = lease.remaining(); }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// Whether the lease can no longer be trusted (see [`Lease::is_lost`]).
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::LeaseHandle) { assert!(!lease.is_lost()); }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.lost_reason().is_some()
    }

    /// Why the lease is lost, if it is (see [`Lease::lost_reason`]).
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::LeaseHandle) { assert_eq!(lease.lost_reason(), None); }
    /// ```
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.state.borrow().lost_at(Instant::now())
    }

    /// Resolves when the lease is lost (see [`Lease::lost`]).
    ///
    /// ```no_run
    /// # async fn f(lease: redlease::LeaseHandle) { let why = lease.lost().await; }
    /// ```
    pub fn lost(&self) -> impl std::future::Future<Output = LostReason> + Send + 'static {
        crate::lease_state::lost(self.state.clone())
    }
}

impl Lease {
    /// A read-only view of this lease for work running under it.
    ///
    /// ```no_run
    /// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
    /// let lease = locker.lock("job").keep_alive().await?;
    /// let view = lease.handle();
    /// tokio::spawn(async move { let _ = view.lost().await; /* alert */ });
    /// # lease.release().await }
    /// ```
    pub fn handle(&self) -> LeaseHandle {
        self.view.clone()
    }
}
