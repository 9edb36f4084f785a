//! Waiting in turn for an exclusive lock: first come, first served across
//! processes, and a release wakes only the waiter that gets the lock.
//!
//! A waiter that was refused takes a place in the lock's queue on every
//! node: a sorted set beside the lock key (`queue.lua`), scored by its
//! arrival ticket. On one node the ticket is the server's clock when the
//! place was first taken; over several nodes it is the waiter's own clock,
//! the same number on each node, so that every node orders the waiters
//! that queued on it alike.
//!
//! The holder's value is marked once anyone queues, and a marked release
//! hands the lock on in the same script: it takes the first place off the
//! queue, reserves the lock for it (`PLACE~`, for a handoff window by the
//! server's clock) and publishes on that waiter's Locker's own channel of
//! the lock, naming the waiter. Nobody else hears anything. A place whose
//! Locker no longer listens (the PUBLISH reaches no one: its process or
//! its connection ended) is dropped on the spot, and the next is tried. A
//! waiter that is handed the lock and does not take it within the window
//! (a stalled process) loses its turn: the reservation expires, and the
//! next look at the free lock (a newcomer's, or a waiter's timer) hands it
//! to the next in line.
//!
//! The woken waiter's attempt (the acquire script with its place) takes
//! the reservation, with the lock's usual validity, fencing and clock
//! guard. Waiters not at the front sleep on the timers every waiter keeps
//! (the holder's expiry, spread over the crowd), which also cover a holder
//! that crashed. A waiter that stops waiting (timeout, dropped future)
//! leaves the queue on every node in the background, passing on a
//! reservation it got meanwhile.
//!
//! Over several nodes each node hands the lock to the first of its own
//! queue, and the waiter is woken once a quorum of them did. Waiters that
//! queued on a quorum are served in ticket order; a waiter whose place
//! some nodes lost (they were down when it queued) may be passed over
//! there, and takes the lock on a later round.
//!
//! Not queued: an acquire that will not wait (`try_lock`, the last
//! attempt of a bounded wait), readers, semaphore permits and sets of
//! locks, which wait as `wait` describes. A newcomer's first attempt is a
//! plain `SET NX`: if it finds the lock free (between a release by
//! expiry and the next look) it takes it without queueing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::coord::attempt::{attempt, Grant, Side};
use crate::coord::engine::Engine;
use crate::coord::subscription::Waiters;
use crate::coord::wait::{still_usable, WriterMark};
use crate::core::error::{Error, Failure};
use crate::core::keys::{own_channel, release_channel, LockKeys};
use crate::core::retry::{RetryPolicy, Waiting};
use crate::core::validity::Timing;
use crate::protocol::acquire::{OnRefusal, QueuePlace};

/// How long a lock's queue lives after the latest waiter joined or looked:
/// longer than any waiter sleeps between looks, so that only a queue
/// nobody waits on any more expires.
pub(crate) const QUEUE_LIFETIME: Duration = Duration::from_secs(600);

/// The shortest handoff window: a woken waiter's attempt must reach the
/// server within it (twice the node timeout, if that is longer).
const MIN_WINDOW: Duration = Duration::from_millis(250);

/// Waits in turn for the exclusive lock of `keys` (see the module docs),
/// until it is taken, fails for good, or the policy's attempts or
/// deadline run out (then as [`wait::lock`](crate::coord::wait::lock)).
///
/// Cancel safe: a dropped attempt undoes itself, a dropped [`Place`]
/// leaves the queue in the background, a dropped [`Waiters`] leaves this
/// Locker's queues, and a dropped writer's mark is cleared in the
/// background.
pub(crate) async fn lock(
    engine: &Arc<Engine>,
    resource: &str,
    keys: &LockKeys,
    timing: Timing,
    policy: &RetryPolicy,
) -> Result<Grant, Error> {
    let start = Instant::now();
    let deadline = policy.wait.map(|wait| start + wait);
    let mut place: Option<Place> = None;
    let mut waiter: Option<Waiters> = None;
    let mut mark = WriterMark::default();
    let mut last: Option<Failure> = None;
    let mut attempts: u32 = 0;
    let mut look_now = true;
    // Other tasks of this Locker queue for the lock already: it is busy,
    // so queue at once rather than try a plain acquire first.
    let released = release_channel(&keys.lock);
    if engine
        .started_notifier()
        .is_some_and(|n| n.has_waiters(&released))
    {
        let (w, p) = Box::pin(join(engine, keys, &released, timing)).await;
        (waiter, place) = (Some(w), Some(p));
    }
    loop {
        if let Some(w) = waiter.as_ref().filter(|_| !look_now) {
            let now = Instant::now();
            let waiting = Waiting {
                behind: false,
                heard: w.heard(),
                held_elsewhere: last.as_ref().is_some_and(|f| f.busy.one_owner),
                expires_in: last.as_ref().and_then(|f| f.error.expires_in()),
                crowd: last.as_ref().map_or(0, |f| f.busy.crowd),
                quarantine_left: last.as_ref().and_then(|f| f.error.quarantine_left()),
            };
            let delay = policy.fallback_delay(rand::random::<f64>(), &waiting, now, deadline);
            let woken_by = Box::pin(async {
                tokio::select! {
                    () = w.woken() => "handoff",
                    () = tokio::time::sleep(delay) => "timer",
                }
            })
            .await;
            tracing::debug!(resource, woken_by, "retrying in turn");
        }
        look_now = false;
        if engine.is_closed() {
            return Err(Error::Closed);
        }
        attempts = attempts.saturating_add(1);
        let final_try = policy.attempts.is_some_and(|max| attempts >= max)
            || deadline.is_some_and(|d| Instant::now() >= d);
        let on_refusal = match final_try {
            true => OnRefusal::LeaveAlone,
            false => OnRefusal::Mark,
        };
        let side = Side::Write {
            mark: mark.token(),
            queue: place.as_ref(),
        };
        let keys_of = std::slice::from_ref(keys);
        let failure = match attempt(engine, resource, keys_of, timing, side, on_refusal).await {
            Ok(grant) => {
                let holder = &grant.guard.ownership.token;
                let by = grant
                    .valid_until
                    .checked_sub(2 * timing.drift)
                    .unwrap_or(grant.valid_until);
                let cleared = Box::pin(mark.took_the_lock(holder, by)).await;
                match cleared.then(|| still_usable(&grant, timing, resource)) {
                    Some(Err(spent)) => Failure::from(spent),
                    None | Some(Ok(())) => {
                        if let Some(place) = &mut place {
                            place.took(engine.nodes().len());
                        }
                        if let Some(w) = waiter.take() {
                            w.acquired(grant.valid_until);
                        }
                        return Ok(grant);
                    }
                }
            }
            Err(f) if !f.error.is_retryable() => return Err(f.error),
            Err(f) => f,
        };
        tracing::debug!(resource, attempts, error = %failure.error, "lock busy");
        if failure.busy.readers {
            mark.wanted(engine, keys, timing);
        }
        if policy.attempts.is_some_and(|max| attempts >= max) {
            return Err(failure.error);
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Err(Error::WaitTimeout {
                resource: resource.to_string(),
                waited: now - start,
                attempts,
                last: Box::new(failure.error),
            });
        }
        last = Some(failure);
        if waiter.is_none() {
            let (w, p) = Box::pin(join(engine, keys, &released, timing)).await;
            (waiter, place) = (Some(w), Some(p));
            look_now = true;
        }
    }
}

/// Listens for the lock's releases and this Locker's handoffs, then
/// draws a place in its queue (taken by the next attempt): a handoff to a
/// place whose Locker does not listen yet would pass it over.
async fn join(
    engine: &Arc<Engine>,
    keys: &LockKeys,
    released: &str,
    timing: Timing,
) -> (Waiters, Place) {
    let notifier = engine.notifier();
    let id = notifier.next_id();
    let own = own_channel(&keys.lock, engine.settings().tag.as_str());
    let mut w = Waiters::join_queued(notifier, released, &own, id);
    w.subscribed(timing.node_timeout).await;
    (w, Place::new(engine, keys, id, timing))
}

/// A waiter's place in a lock's queue: `TAG:ID:WINDOW` (its Locker's tag,
/// its number there, its handoff window in ms). Dropped before the waiter
/// took the lock, or after it took it over several nodes (where some may
/// still queue it), it leaves the queue on every node in the background.
pub(crate) struct Place {
    engine: Arc<Engine>,
    keys: LockKeys,
    spelled: Spelled,
    timeout: Duration,
    /// Taken on the only node, which took the place off its queue.
    used: bool,
}

/// A place as the acquire script takes it (see [`QueuePlace`]).
#[derive(Clone)]
pub(crate) struct Spelled {
    member: Arc<str>,
    ticket: u64,
}

impl Spelled {
    pub(crate) fn args(&self) -> QueuePlace<'_> {
        QueuePlace {
            place: &self.member,
            ticket: self.ticket,
            lifetime: QUEUE_LIFETIME,
        }
    }
}

impl Place {
    fn new(engine: &Arc<Engine>, keys: &LockKeys, id: u64, timing: Timing) -> Place {
        let window = (2 * timing.node_timeout).max(MIN_WINDOW);
        let tag = engine.settings().tag.as_str();
        let member = format!("{tag}:{id}:{}", window.as_millis());
        // One node orders by its own clock; several by ours, alike.
        let ticket = match engine.nodes().len() {
            1 => 0,
            _ => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |since| since.as_micros() as u64),
        };
        Place {
            engine: engine.clone(),
            keys: keys.clone(),
            spelled: Spelled {
                member: member.into(),
                ticket,
            },
            timeout: timing.node_timeout,
            used: false,
        }
    }

    /// The place as the acquire script takes it.
    pub(crate) fn spelled(&self) -> Spelled {
        self.spelled.clone()
    }

    /// The waiter took the lock on `nodes` nodes: with one, its place is
    /// used up there.
    fn took(&mut self, nodes: usize) {
        self.used = nodes == 1;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.used || tokio::runtime::Handle::try_current().is_err() {
            // Without a runtime, the place is passed over at its turn (its
            // Locker no longer listens) or after the handoff window.
            return;
        }
        let engine = self.engine.clone();
        let (keys, member, timeout) =
            (self.keys.clone(), self.spelled.member.clone(), self.timeout);
        let background = engine.background().clone();
        background.spawn(async move {
            let leaves = engine.nodes().iter().map(|node| {
                let (keys, member) = (&keys, &member);
                async move {
                    if let Err(e) = node.leave_queue(&keys.lock, member, timeout).await {
                        tracing::debug!(error = %e, "leaving the queue failed; the place is passed over");
                    }
                }
            });
            futures_util::future::join_all(leaves).await;
        });
    }
}
