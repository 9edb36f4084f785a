//! What a lease's holder can see of it (its validity, and whether and why
//! it was lost), shared between the lease and whoever renews it. No I/O.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Why a lease can no longer be trusted.
///
/// ```
/// use redlease::LostReason;
/// fn explain(why: LostReason) -> &'static str {
///     match why {
///         LostReason::Refused => "a quorum no longer holds our token",
///         LostReason::Expired => "no renewal was confirmed in time: nodes slow or silent",
///         LostReason::NodeErrors => "nodes answered renewals with errors",
///         _ => "lost",
///     }
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// Nodes answered that the key no longer holds our token, so that no
    /// quorum holds it (it expired, was deleted, or someone else holds
    /// the lock now).
    Refused,
    /// The lease ran out before a quorum confirmed a renewal: nodes were
    /// down, paused, partitioned or too slow to answer in time.
    Expired,
    /// The lease ran out while nodes answered renewals with errors (a
    /// refused connection, `OOM`, `READONLY`, `NOPERM`, ...): errors alone
    /// kept a quorum from confirming. [`Locker`](crate::Locker)'s log says
    /// which.
    NodeErrors,
    /// The [`Locker`](crate::Locker) was closed
    /// ([`Locker::close`](crate::Locker::close)), which released the lease.
    Closed,
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LostReason::Refused => "a quorum of nodes no longer holds our token",
            LostReason::Expired => {
                "its validity ran out before a quorum of nodes confirmed a renewal"
            }
            LostReason::NodeErrors => {
                "its validity ran out while nodes answered renewals with errors"
            }
            LostReason::Closed => "the Locker was closed, which released it",
        })
    }
}

/// A lease's validity and loss, as its holder sees them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeaseState {
    pub(crate) valid_until: Instant,
    /// Loss is reported this much before `valid_until` (one drift
    /// allowance: 1% of the TTL + 2 ms), so that a timer that fires late on
    /// a busy machine still fires before the lease ends.
    pub(crate) early: Duration,
    /// Set once the lease is known lost; never cleared.
    pub(crate) lost: Option<LostReason>,
    /// What to report if the validity runs out before a renewal.
    pub(crate) expiry_reason: LostReason,
    /// The latest renewal round a quorum confirmed (a manual extend waits
    /// for its own; see `Renewer::extend`).
    pub(crate) confirmed_round: u64,
}

impl LeaseState {
    pub(crate) fn new(valid_until: Instant, early: Duration) -> Self {
        LeaseState {
            valid_until,
            early,
            lost: None,
            expiry_reason: LostReason::Expired,
            confirmed_round: 0,
        }
    }

    /// The state of a lease not granted yet: nothing reads it before the
    /// grant sets the real one. (A fixed instant, so that making a claim
    /// costs no clock read.)
    pub(crate) fn pending() -> Self {
        static PENDING: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        LeaseState::new(*PENDING.get_or_init(Instant::now), Duration::ZERO)
    }

    /// When loss is reported if nothing renews the lease.
    pub(crate) fn lost_from(&self) -> Instant {
        self.valid_until
            .checked_sub(self.early)
            .unwrap_or(self.valid_until)
    }

    /// Lost explicitly, or (nearly) past its validity.
    pub(crate) fn lost_at(&self, now: Instant) -> Option<LostReason> {
        self.lost
            .or((now >= self.lost_from()).then_some(self.expiry_reason))
    }
}

/// Nodes whose yes to an acquire came after the quorum had decided it,
/// while the acquire's last requests finish in the background: each holds
/// the key until the acquire's bound, and counts for the lease once it is
/// kept alive (see [`ExpiryBounds::granted_late`](crate::core::expiry::ExpiryBounds::granted_late)).
#[derive(Debug)]
pub(crate) struct LateGrants {
    /// The acquire's bound: `start + ttl - drift`.
    until: Instant,
    nodes: Mutex<Vec<usize>>,
    /// Every request of the acquire has answered (or was given up).
    done: AtomicBool,
}

impl LateGrants {
    /// For an acquire whose granting nodes hold the key until `until`.
    pub(crate) fn new(until: Instant) -> Arc<LateGrants> {
        Arc::new(LateGrants {
            until,
            nodes: Mutex::new(Vec::new()),
            done: AtomicBool::new(false),
        })
    }

    /// What the acquire's remaining requests report to: dropping it (when
    /// they are all done) says no more will come.
    pub(crate) fn recorder(self: &Arc<Self>) -> LateRecorder {
        LateRecorder(self.clone())
    }

    pub(crate) fn until(&self) -> Instant {
        self.until
    }

    /// The late grants not taken yet, and whether they were the last.
    pub(crate) fn take(&self) -> (Vec<usize>, bool) {
        // Read before taking: every grant recorded before `done` was set
        // is then in what is taken.
        let done = self.done.load(Ordering::Acquire);
        let nodes = std::mem::take(&mut *self.nodes.lock().unwrap_or_else(|p| p.into_inner()));
        (nodes, done)
    }
}

/// Records the late grants of one acquire; see [`LateGrants::recorder`].
pub(crate) struct LateRecorder(Arc<LateGrants>);

impl LateRecorder {
    /// Node `i` said yes.
    pub(crate) fn granted(&self, i: usize) {
        self.0
            .nodes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(i);
    }
}

impl Drop for LateRecorder {
    fn drop(&mut self) {
        self.0.done.store(true, Ordering::Release);
    }
}

/// A lease's [`LeaseState`], with a signal for whoever waits on it. It
/// lives inside the lease's record (see [`HoldsState`]), which the lease,
/// its handles, the Locker's record of held leases and the renewer share:
/// one allocation per lease, so that renewing one touches one record
/// besides the renewer's own. A change is published with or without a
/// wake-up: watchers need one only when they must act sooner (an earlier
/// end, a loss) or wait for it (a manual extend).
///
/// One notifier and the state: a Tokio watch channel would keep nine
/// notifiers for its receivers, about 400 bytes per lease.
pub(crate) struct StateCell {
    /// The state, and how many wake-ups were published.
    state: Mutex<(LeaseState, u64)>,
    wake: Notify,
}

/// What holds a lease's [`StateCell`]: a [`Watch`] keeps it alive.
pub(crate) trait HoldsState: Send + Sync + 'static {
    fn state(&self) -> &StateCell;
}

impl HoldsState for StateCell {
    fn state(&self) -> &StateCell {
        self
    }
}

impl StateCell {
    pub(crate) fn new(state: LeaseState) -> StateCell {
        StateCell {
            state: Mutex::new((state, 0)),
            wake: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (LeaseState, u64)> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The notifier the watchers sleep on, for others that wait on the
    /// lease (a release waiting for a request still in flight, see
    /// `coord::background`). A wake-up from them changes no state, so a
    /// watcher it wakes looks and sleeps again.
    pub(crate) fn notifier(&self) -> &Notify {
        &self.wake
    }

    /// The state now.
    pub(crate) fn get(&self) -> LeaseState {
        self.lock().0
    }

    /// Changes the state and wakes the watchers.
    pub(crate) fn modify(&self, change: impl FnOnce(&mut LeaseState)) {
        self.modify_if(|s| {
            change(s);
            true
        });
    }

    /// Changes the state; wakes the watchers if `change` says so, and
    /// returns what it said.
    pub(crate) fn modify_if(&self, change: impl FnOnce(&mut LeaseState) -> bool) -> bool {
        let wake = {
            let mut state = self.lock();
            let wake = change(&mut state.0);
            if wake {
                state.1 += 1;
            }
            wake
        };
        if wake {
            self.wake.notify_waiters();
        }
        wake
    }
}

/// Follows the wake-ups of the [`StateCell`] that `holder` holds, from now
/// on.
pub(crate) fn watch(holder: Arc<dyn HoldsState>) -> Watch {
    let seen = holder.state().lock().1;
    Watch { holder, seen }
}

/// Follows a [`StateCell`]'s wake-ups; see [`watch`].
pub(crate) struct Watch {
    holder: Arc<dyn HoldsState>,
    /// The latest wake-up read.
    seen: u64,
}

impl Watch {
    fn cell(&self) -> &StateCell {
        self.holder.state()
    }

    /// The state now; its wake-ups so far count as seen.
    pub(crate) fn get_and_mark(&mut self) -> LeaseState {
        let (state, woken) = *self.cell().lock();
        self.seen = woken;
        state
    }

    /// Waits for a wake-up not yet seen (returns at once if one came
    /// since the last [`get_and_mark`](Self::get_and_mark)).
    ///
    /// Cancel safe: a wake-up missed while no future waited is seen by
    /// the next call.
    pub(crate) async fn changed(&self) {
        loop {
            let notified = self.cell().wake.notified();
            tokio::pin!(notified);
            // Registered before the look, so no wake-up falls in between.
            notified.as_mut().enable();
            if self.cell().lock().1 != self.seen {
                return;
            }
            notified.await;
        }
    }
}

/// Waits until the lease is reported lost, or its validity passes. Never
/// later than the current `valid_until`, whatever the renewer does. A
/// released lease is no longer renewed, so it lasts until its last
/// validity.
pub(crate) async fn lost(mut state: Watch) -> LostReason {
    loop {
        let now = state.get_and_mark();
        if let Some(why) = now.lost_at(Instant::now()) {
            return why;
        }
        let deadline = tokio::time::Instant::from(now.lost_from());
        tokio::select! {
            () = state.changed() => {}
            () = tokio::time::sleep_until(deadline) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn loss_is_reported_one_allowance_early_with_the_reason_set_last() {
        let t0 = Instant::now();
        let mut s = LeaseState::new(t0 + 100 * MS, 3 * MS);
        assert_eq!(s.lost_at(t0 + 96 * MS), None);
        assert_eq!(s.lost_at(t0 + 97 * MS), Some(LostReason::Expired));
        s.expiry_reason = LostReason::NodeErrors;
        assert_eq!(s.lost_at(t0 + 97 * MS), Some(LostReason::NodeErrors));
        s.lost = Some(LostReason::Refused);
        assert_eq!(
            s.lost_at(t0),
            Some(LostReason::Refused),
            "explicit loss is final"
        );
    }

    #[test]
    fn late_grants_are_taken_once_and_end_with_their_recorder() {
        let t0 = Instant::now();
        let late = LateGrants::new(t0);
        let recorder = late.recorder();
        recorder.granted(2);
        assert_eq!(late.take(), (vec![2], false));
        assert_eq!(late.take(), (vec![], false));
        recorder.granted(1);
        drop(recorder);
        assert_eq!(late.take(), (vec![1], true));
        assert_eq!(late.until(), t0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_sees_every_wake_up_and_only_those() {
        let t0 = Instant::now();
        let cell = Arc::new(StateCell::new(LeaseState::new(t0 + 40 * MS, MS)));
        let mut watch = watch(cell.clone());
        // A change without a wake-up is read, but not waited for.
        assert!(!cell.modify_if(|s| {
            s.valid_until = t0 + 50 * MS;
            false
        }));
        let quiet = tokio::time::timeout(100 * MS, watch.changed()).await;
        assert!(quiet.is_err(), "woken without a wake-up");
        assert_eq!(watch.get_and_mark().valid_until, t0 + 50 * MS);
        // A wake-up published while nobody waits is not lost.
        cell.modify(|s| s.lost = Some(LostReason::Refused));
        tokio::time::timeout(100 * MS, watch.changed())
            .await
            .expect("the wake-up came before the wait");
        assert_eq!(watch.get_and_mark().lost, Some(LostReason::Refused));
        let quiet = tokio::time::timeout(100 * MS, watch.changed()).await;
        assert!(quiet.is_err(), "a seen wake-up counted twice");
    }

    #[tokio::test]
    async fn the_lost_future_follows_a_renewed_end() {
        let t0 = Instant::now();
        let tx = Arc::new(StateCell::new(LeaseState::new(t0 + 40 * MS, MS)));
        let lost = tokio::spawn(lost(watch(tx.clone())));
        tokio::time::sleep(10 * MS).await;
        tx.modify(|s| s.valid_until = t0 + 200 * MS);
        let why = lost.await.unwrap();
        assert_eq!(why, LostReason::Expired);
        assert!(t0.elapsed() >= 199 * MS, "fired at {:?}", t0.elapsed());
    }
}
