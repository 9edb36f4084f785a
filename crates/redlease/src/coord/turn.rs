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
use crate::coord::place::Place;
use crate::coord::subscription::Waiters;
use crate::coord::writer_mark::WriterMark;
use crate::core::error::{Error, Failure};
use crate::core::keys::{own_channel, release_channel, LockKeys};
use crate::core::retry::{RetryPolicy, Waiting};
use crate::core::validity::Timing;
use crate::protocol::acquire::{Look, OnRefusal};

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
    let deadline = policy.deadline(start);
    let counts_attempts = policy.attempts.is_some();
    let mut place: Option<Place> = None;
    let mut waiter: Option<Waiters> = None;
    let mut mark = WriterMark::default();
    let mut last: Option<Failure> = None;
    let mut attempts: u32 = 0;
    let mut look_now = true;
    // What the latest look found: the lock is handed on when it is freed,
    // and held until then at most.
    let mut looked: Option<Duration> = None;
    let mut crowd: u64 = 0;
    // Other tasks of this Locker queue for the lock already: it is busy,
    // so queue at once rather than try a plain acquire first.
    // (Named only once needed: most locks are taken at the first attempt.)
    let busy = engine
        .started_notifier()
        .is_some_and(|n| n.has_waiters(&release_channel(&keys.lock)));
    if busy {
        let w = Box::pin(listen(engine, keys, timing)).await;
        place = Some(Place::new(engine, keys, w.id(), timing));
        waiter = Some(w);
    }
    loop {
        if let Some(w) = waiter.as_ref().filter(|_| !look_now) {
            let now = Instant::now();
            let taken = w.taken_by_sibling(counts_attempts, now);
            let waiting = Waiting {
                // Behind another task of this Locker, which looks for both;
                // unless its last attempt met a split (it may have kept its
                // turn on some nodes, and must take it in time).
                behind: !w.is_head() && last.as_ref().is_none_or(|f| f.busy.one_owner),
                heard: w.heard(),
                held_elsewhere: taken.is_some()
                    || looked.is_some()
                    || last.as_ref().is_some_and(|f| f.busy.one_owner),
                expires_in: taken
                    .or(looked.take())
                    .or_else(|| last.as_ref().and_then(|f| f.error.expires_in())),
                crowd: crowd.max(last.as_ref().map_or(0, |f| f.busy.crowd)),
                quarantine_left: last.as_ref().and_then(|f| f.error.quarantine_left()),
            };
            let delay = policy.fallback_delay(rand::random::<f64>(), &waiting, now, deadline);
            let woken_by = Box::pin(async {
                tokio::select! {
                    on = w.woken() => match on {
                        OWN_CHANNEL => "handoff",
                        _ => "release",
                    },
                    () = tokio::time::sleep(delay) => "timer",
                }
            })
            .await;
            tracing::debug!(resource, woken_by, "woken in turn");
            // Moved up behind a task of this Locker that took the lock: it
            // is held until a release is heard, or its lease runs out.
            let now = Instant::now();
            if woken_by == "release"
                && w.taken_by_sibling(counts_attempts, now).is_some()
                && deadline.is_none_or(|d| now < d)
            {
                continue;
            }
            // A timer: look before trying. A lock that will be handed on
            // (to this waiter too, in turn) needs no attempt, which would
            // cost a script on every node.
            if woken_by == "timer" && !counts_attempts && deadline.is_none_or(|d| now < d) {
                if let Some(place) = &place {
                    let found = Box::pin(look(engine, keys, place, timing)).await;
                    if let Some((held, waiting)) = found {
                        (looked, crowd) = (Some(held), waiting);
                        continue;
                    }
                }
            }
        }
        look_now = false;
        if engine.is_closed() {
            return Err(Error::Closed);
        }
        attempts = attempts.saturating_add(1);
        let on_refusal = match policy.is_last_attempt(attempts, deadline) {
            true => OnRefusal::LeaveAlone,
            false => OnRefusal::Mark,
        };
        let side = Side::Write {
            mark: mark.token(),
            queue: place.as_ref(),
        };
        let keys_of = std::slice::from_ref(keys);
        let failure = match attempt(engine, resource, keys_of, timing, side, on_refusal).await {
            Ok(grant) => match mark.hand_out(grant, timing, resource).await {
                Err(spent) => spent,
                Ok(grant) => {
                    if let Some(place) = &mut place {
                        place.took(engine.nodes().len());
                    }
                    if let Some(w) = waiter.take() {
                        w.acquired(grant.valid_until);
                    }
                    return Ok(grant);
                }
            },
            Err(f) if !f.error.is_retryable() => return Err(f.error),
            Err(f) => f,
        };
        tracing::debug!(resource, attempts, error = %failure.error, "lock busy");
        if failure.busy.readers {
            mark.wanted(engine, keys, timing);
        }
        last = Some(policy.ends_wait(attempts, start, deadline, resource, failure)?);
        if waiter.is_none() {
            waiter = Some(Box::pin(listen(engine, keys, timing)).await);
            look_now = true;
        }
        // Refused by a holder: queue (a failure of another kind, a
        // quarantined server say, has nobody to queue behind).
        if place.is_none() && last.as_ref().is_some_and(|f| refused_by_a_holder(&f.error)) {
            let id = waiter.as_ref().map_or(0, Waiters::id);
            place = Some(Place::new(engine, keys, id, timing));
            look_now = true;
        }
    }
}

/// Whether an attempt failed because a holder refused it somewhere.
fn refused_by_a_holder(error: &Error) -> bool {
    match error {
        Error::Taken { .. } => true,
        Error::NoQuorum { refused_by, .. } => !refused_by.is_empty(),
        _ => false,
    }
}

/// Looks at the lock on every node (see [`Look`]): how long it is held at
/// most, if it will be handed on everywhere, and the most processes any
/// node counts waiting; `None` if an attempt must look (somewhere it is
/// free, ours, unmarked or unknown).
async fn look(
    engine: &Arc<Engine>,
    keys: &LockKeys,
    place: &Place,
    timing: Timing,
) -> Option<(Duration, u64)> {
    let place = place.spelled();
    let looks = engine
        .nodes()
        .iter()
        .map(|node| node.look(&keys.lock, &place.member, timing.node_timeout));
    let mut held: Option<(Duration, u64)> = None;
    for look in futures_util::future::join_all(looks).await {
        match look {
            Ok(Look::HandsOn { expires_in, crowd }) => {
                let left = expires_in.unwrap_or(crate::core::retry::SAFETY_NET);
                held = Some(held.map_or((left, crowd), |(h, c)| (h.min(left), c.max(crowd))));
            }
            Ok(Look::Try) | Err(_) => return None,
        }
    }
    held
}

/// Which of a queued waiter's channels a handoff wakes it on (see
/// [`Waiters::join_queued`]).
const OWN_CHANNEL: usize = 1;

/// Listens for the lock's releases and this Locker's handoffs, before
/// the waiter takes a place in the lock's queue (by its next attempt): a
/// handoff to a place whose Locker does not listen yet would pass it over.
async fn listen(engine: &Arc<Engine>, keys: &LockKeys, timing: Timing) -> Waiters {
    let notifier = engine.notifier();
    let id = notifier.next_id();
    let own = own_channel(&keys.lock, engine.settings().tag.as_str());
    let released = release_channel(&keys.lock);
    let mut w = Waiters::join_queued(notifier, &released, &own, id);
    w.subscribed(timing.node_timeout).await;
    w
}
