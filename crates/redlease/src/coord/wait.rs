//! Waiting for a busy lock without polling: after a failed attempt the task
//! queues for the lock's release notifications and retries when the holder
//! releases. Timers remain as the fallback for a lost notification, a holder
//! that crashed, or a node without pub/sub: a waiter never sleeps past its
//! jittered delay, the holder's reported expiry, or its deadline.

use std::sync::Arc;
use std::time::Instant;

use crate::coord::attempt::{attempt, Grant, Side};
use crate::coord::engine::Engine;
use crate::coord::reserve::Reservation;
use crate::coord::subscription::Waiters;
use crate::coord::writer_mark::WriterMark;
use crate::core::error::{Error, Failure};
use crate::core::keys::{release_channel, LockKeys};
use crate::core::mode::{Hold, LockMode};
use crate::core::retry::{RetryPolicy, Waiting};
use crate::core::validity::Timing;
use crate::transport::node::OnRefusal;

/// Tries to take the lock of `keys`, each in its hold of `holds` (one
/// lock, or several all or none), until it succeeds, fails for good (bad
/// input, a closed Locker), or the policy's attempts or deadline run out.
/// Out of attempts: the last error as it is. Past the deadline:
/// [`Error::WaitTimeout`] wrapping it.
///
/// A writer that readers refused marks itself waiting from its next
/// attempt on (see [`WriterMark`]), so that new readers queue behind it,
/// and clears the mark when it stops waiting. A multi-lock that was
/// refused reserves its names from its next attempt on (see
/// [`Reservation`]), and gives back what is left when it stops waiting.
///
/// Cancel safe: a dropped attempt undoes itself, a dropped [`Waiters`]
/// leaves the queues and, if it was the last, unsubscribes, and a dropped
/// writer's mark is cleared in the background.
///
/// A refusal by a lease of this same Locker says so in its error (locks
/// are not reentrant: a task that waits for a lock it holds waits for
/// itself).
pub(crate) async fn lock(
    engine: &Arc<Engine>,
    resource: &str,
    keys: &[LockKeys],
    timing: Timing,
    policy: &RetryPolicy,
    holds: &[Hold],
) -> Result<Grant, Error> {
    let result = wait_for(engine, resource, keys, timing, policy, holds).await;
    result.map_err(|e| e.noting_held_here(|| keys.iter().any(|k| engine.holds(&k.lock))))
}

/// [`lock`], but for what a refusal's error says of this Locker.
async fn wait_for(
    engine: &Arc<Engine>,
    resource: &str,
    keys: &[LockKeys],
    timing: Timing,
    policy: &RetryPolicy,
    holds: &[Hold],
) -> Result<Grant, Error> {
    debug_assert_eq!(keys.len(), holds.len());
    let hold = holds[0];
    let many = keys.len() > 1;
    // An exclusive lock that may wait queues on the servers, first come,
    // first served across processes.
    if !many && hold == Hold::Exclusive && policy.attempts != Some(1) {
        return crate::coord::turn::lock(engine, resource, &keys[0], timing, policy).await;
    }
    // A multi-lock queues in this Locker as a writer does, whatever its
    // holds: alone at the front.
    let mode = match many {
        true => LockMode::Exclusive,
        false => hold.mode(),
    };
    let start = Instant::now();
    let deadline = policy.deadline(start);
    let waits = policy.attempts != Some(1);
    let counts_attempts = policy.attempts.is_some();
    // Named only once needed: most locks are taken at the first attempt.
    let channels = || -> Vec<String> { keys.iter().map(|k| release_channel(&k.lock)).collect() };
    let mut waiter: Option<Waiters> = None;
    let mut mark = WriterMark::default();
    let mut reservation = Reservation::default();
    let mut last: Option<Failure> = None;
    let mut attempts: u32 = 0;

    // Fairness within this process: if other tasks already queue for this
    // lock, get in line behind them instead of racing them for it.
    if waits {
        if let Some(notifier) = engine.started_notifier() {
            let channels = channels();
            if channels.iter().any(|c| notifier.has_waiters(c)) {
                waiter = Some(Waiters::join(notifier, &channels, mode));
            }
        }
    }
    let mut wait_first = waiter.is_some();

    loop {
        // Only a task that already queues ever waits before an attempt.
        if let Some(w) = waiter.as_ref().filter(|_| wait_first) {
            let now = Instant::now();
            let taken = w.taken_by_sibling(counts_attempts, now);
            let waiting = Waiting {
                behind: !w.is_head(),
                heard: w.heard(),
                held_elsewhere: taken.is_some() || last.as_ref().is_some_and(|f| f.busy.one_owner),
                expires_in: taken.or_else(|| last.as_ref().and_then(|f| f.error.expires_in())),
                crowd: last.as_ref().map_or(0, |f| f.busy.crowd),
                quarantine_left: last.as_ref().and_then(|f| f.error.quarantine_left()),
            };
            let mut delay = policy.fallback_delay(rand::random::<f64>(), &waiting, now, deadline);
            if many {
                delay = delay.min(reservation.wake_within(timing, start.elapsed()));
            }
            let span = tracing::debug_span!(
                "redlease.wait",
                delay_ms = delay.as_millis() as u64,
                heard = waiting.heard,
                behind = waiting.behind,
                woken_by = tracing::field::Empty,
                elapsed_ms = tracing::field::Empty,
            );
            // Boxed, like the subscription below: waiting is the cold
            // path, and its state need not weigh on every lock's future.
            let woken_by = Box::pin(async {
                tokio::select! {
                    _ = w.woken() => "release",
                    () = tokio::time::sleep(delay) => "timer",
                }
            })
            .await;
            span.record("woken_by", woken_by);
            span.record("elapsed_ms", now.elapsed().as_secs_f64() * 1e3);
            // Behind another waiter of this Locker: it does the trying, and
            // this one looks when it moves up (or at the deadline, for one
            // last try).
            if !w.is_head() && deadline.is_none_or(|d| Instant::now() < d) {
                continue;
            }
            // First in line behind another task of this Locker that took the
            // lock since the last release: the lock is held, and its expiry
            // known, until a release is heard. A look would cost the nodes
            // two round trips to learn what this process already knows.
            let now = Instant::now();
            if w.taken_by_sibling(counts_attempts, now).is_some()
                && deadline.is_none_or(|d| now < d)
            {
                continue;
            }
            span.in_scope(|| tracing::debug!(woken_by, "retrying"));
        }
        if engine.is_closed() {
            return Err(Error::Closed);
        }
        attempts = attempts.saturating_add(1);
        let on_refusal = if policy.is_last_attempt(attempts, deadline) {
            OnRefusal::LeaveAlone
        } else {
            OnRefusal::Mark
        };
        let side = match hold {
            _ if many => Side::Many {
                holds,
                mark: reservation.mark(),
            },
            Hold::Exclusive => Side::Write {
                mark: mark.token(),
                queue: None,
            },
            Hold::Shared => Side::Read,
            Hold::Permit { permits, majority } => Side::Permit { permits, majority },
        };
        let failure = match attempt(engine, resource, keys, timing, side, on_refusal).await {
            Ok(grant) => match mark.hand_out(grant, timing, resource).await {
                Err(spent) => spent,
                Ok(grant) => {
                    match (waiter.take(), mode) {
                        (Some(w), LockMode::Exclusive) => w.acquired(grant.valid_until),
                        (w, _) => drop(w),
                    }
                    return Ok(grant);
                }
            },
            Err(f) if !f.error.is_retryable() => return Err(f.error),
            Err(f) => f,
        };
        tracing::debug!(resource, attempts, error = %failure.error, "lock busy");
        if many {
            reservation.wanted(engine, keys, timing, start.elapsed());
        } else if mode == LockMode::Exclusive && failure.busy.readers {
            mark.wanted(engine, &keys[0], timing);
        }
        last = Some(policy.ends_wait(attempts, start, deadline, resource, failure)?);
        wait_first = true;
        if waiter.is_none() {
            let mut w = Waiters::join(engine.notifier(), &channels(), mode);
            Box::pin(w.subscribed(timing.node_timeout)).await;
            // A release between the failed attempt and the subscription went
            // unheard: the first in line tries again at once.
            wait_first = !w.is_head();
            waiter = Some(w);
        }
    }
}
