//! [`Waiters`]: one waiter's places in this Locker's queues, on every
//! channel of every name of its claim.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Kind, Notifier, Waiter};
use crate::core::claim::Claim;
use crate::core::keys::{own_channel, release_channel};
use crate::core::mode::LockMode;

/// A place in the queues of every lock of a multi-lock (`lock_all`), or
/// of one lock: woken by a release of any of them, at the front when it
/// is at the front of each queue.
pub(crate) struct Waiters(pub(super) Vec<Waiter>);

impl Waiters {
    /// Waiter `id` of the Locker tagged `tag`, for every name of `claim`:
    /// on each name's release channel (a release that frees it wakes the
    /// front), and on this Locker's own channel of it, where a handoff
    /// from the queue on the servers wakes the waiter it names. A claim of
    /// several names waits in this process as a claim alone does, whatever
    /// its holds: alone at the front.
    pub(crate) fn join_claim(notifier: &Arc<Notifier>, claim: &Claim, tag: &str, id: u64) -> Self {
        let mode = match claim.is_set() {
            true => LockMode::Exclusive,
            false => claim.mode(),
        };
        let mut waiters = Vec::with_capacity(2 * claim.len());
        for keys in claim.keys() {
            let released = release_channel(&keys.lock);
            waiters.push(notifier.join_as(&released, mode, id, Kind::Released));
            waiters.push(notifier.join_as(&own_channel(&keys.lock, tag), mode, id, Kind::Own));
        }
        Waiters(waiters)
    }

    /// Offers the waiter's `place` (out of line on the servers) to the
    /// release of the task of this Locker it waits for (see
    /// [`Notifier::next_place`]); `None` withdraws it.
    pub(crate) fn offer(&self, place: Option<(Arc<str>, u64)>) {
        let Some(first) = self.0.first() else {
            return;
        };
        let mut channels = first.notifier.channels();
        if let Some(c) = channels.get_mut(&first.channel)
            && let Some(entry) = c.waiters.iter_mut().find(|e| e.id == first.id)
        {
            entry.offered = place;
        }
    }

    /// Waits until every node confirmed every subscription, at most
    /// `timeout` in all.
    pub(crate) async fn subscribed(&mut self, timeout: Duration) {
        let all = self.0.iter_mut().map(|w| w.subscribed(timeout));
        futures_util::future::join_all(all).await;
    }

    /// Whether every release that succeeds will be heard.
    pub(crate) fn heard(&self) -> bool {
        self.0.iter().all(Waiter::heard)
    }

    /// Its number in this Locker (a queued waiter's, on each channel).
    pub(crate) fn id(&self) -> u64 {
        self.0.first().map_or(0, |w| w.id)
    }

    /// Whether it is at the front of the queue of every name. (The order
    /// on this Locker's own channels does not count: a handoff there names
    /// the waiter it wakes, and two waiters that joined at once may stand
    /// in one order there and in the other on the release channels.)
    pub(crate) fn is_head(&self) -> bool {
        self.0
            .iter()
            .filter(|w| w.kind == Kind::Released)
            .all(Waiter::is_head)
    }

    /// Resolves when a release of any of the names wakes it: `true` when
    /// a handoff from the queue on the servers named it (the name is
    /// reserved for its place), `false` for a release.
    pub(crate) async fn woken(&self) -> bool {
        let all = self.0.iter().map(|w| Box::pin(w.woken()));
        let (_, woke, _) = futures_util::future::select_all(all).await;
        self.0.get(woke).is_some_and(|w| w.kind == Kind::Own)
    }

    /// Leaves every queue because the locks are ours alone, valid until
    /// `valid_until`.
    pub(crate) fn acquired(self, valid_until: Instant) {
        for w in self.0 {
            w.acquired(valid_until);
        }
    }

    /// Until when a lease another waiter of this Locker took after the
    /// latest release of any of the locks is valid, the latest of them.
    pub(crate) fn taken_until(&self) -> Option<Instant> {
        self.0.iter().filter_map(Waiter::taken_until).max()
    }

    /// How long a lease that another task of this Locker took since the
    /// latest release stays valid, if one did and still is. Only for
    /// notified waiting, with the subscription confirmed on a quorum (so
    /// any other release of the lock, a forced one say, is heard and
    /// clears this); a policy that `counts_attempts` gets the attempts it
    /// asked for.
    pub(crate) fn taken_by_sibling(&self, counts_attempts: bool, now: Instant) -> Option<Duration> {
        if counts_attempts || !self.heard() {
            return None;
        }
        self.taken_until()
            .and_then(|until| until.checked_duration_since(now))
            .filter(|left| !left.is_zero())
    }
}
