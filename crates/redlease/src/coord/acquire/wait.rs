//! Waiting for a claim, in turn, whatever its modes: first come, first
//! served across processes, and a release wakes only the waiters that can
//! now be granted.
//!
//! A waiter that was refused takes a place in line for each of its names
//! on every node (see [`Place`]): the servers keep one queue per name for
//! every mode (engine.lua), ordered by the waiters' arrival, and serve it
//! whenever what a name holds changes: each waiter in turn that fits gets
//! a reservation and is woken on its Locker's own channel of the name,
//! naming it; the first that does not fit stops the walk, so a reader
//! that came after a waiting writer waits behind it, and a large permit
//! weight is never overtaken by small ones. A waiter whose Locker no
//! longer listens (its process or connection ended) is passed over at
//! once. Over several nodes each node serves its own queue, and the
//! waiter takes its claim once a quorum reserved it.
//!
//! In this process, the waiters of one Locker queue too (see
//! [`Waiters`]), and only the first does the trying. One that waits for
//! another task of this Locker to release a lock held alone stays out of
//! line on the servers: that task's release wakes it in the process, and
//! puts it in line only where others wait, at its arrival (see
//! release.lua), so a handoff within a process costs the servers
//! nothing beyond the release and the next acquire.
//!
//! Timers remain as the fallback for a lost notification, a holder that
//! crashed, or a node without pub/sub: a waiter never sleeps past its
//! jittered delay, the holder's reported expiry, or its deadline. An
//! acquire that will not wait (`try_lock`, the last attempt of a bounded
//! wait) does not queue.

use std::sync::Arc;
use std::time::Instant;

use crate::coord::acquire::attempt::{attempt, Grant};
use crate::coord::acquire::place::Place;
use crate::coord::acquire::subscription::Waiters;
use crate::coord::engine::Engine;
use crate::core::claim::Claim;
use crate::core::error::{Error, Failure};
use crate::core::keys::release_channel;
use crate::core::mode::Hold;
use crate::core::retry::{RetryPolicy, Waiting};
use crate::core::validity::Timing;
use crate::transport::node::OnRefusal;

/// Why a waiter woke up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Woken {
    /// The queue on the servers handed it a name: reserved for its place.
    Handoff,
    /// A release of one of its names was heard (or made in this process).
    Released,
    /// Its timer: a lost notification, a holder that crashed, a deadline.
    Timer,
}

impl Woken {
    fn as_str(self) -> &'static str {
        match self {
            Woken::Handoff => "handoff",
            Woken::Released => "release",
            Woken::Timer => "timer",
        }
    }
}

/// Takes `claim` once it can, waiting in turn (see the module docs),
/// until it is taken, fails for good (bad input, a closed Locker), or the
/// policy's attempts or deadline run out. Out of attempts: the last error
/// as it is. Past the deadline: [`Error::WaitTimeout`] wrapping it. A
/// refusal by a lease of this same Locker says so in its error (locks are
/// not reentrant: a task that waits for a lock it holds waits for
/// itself).
///
/// Cancel safe: a dropped attempt undoes itself, a dropped [`Place`]
/// leaves the queues in the background, and dropped [`Waiters`] leave
/// this Locker's queues.
pub(crate) async fn lock(
    engine: &Arc<Engine>,
    resource: &str,
    claim: &Claim,
    timing: Timing,
    policy: &RetryPolicy,
) -> Result<Grant, Error> {
    let result = wait_for(engine, resource, claim, timing, policy).await;
    result.map_err(|e| e.noting_held_here(|| claim.keys().iter().any(|k| engine.holds(&k.lock))))
}

async fn wait_for(
    engine: &Arc<Engine>,
    resource: &str,
    claim: &Claim,
    timing: Timing,
    policy: &RetryPolicy,
) -> Result<Grant, Error> {
    let start = Instant::now();
    let deadline = policy.deadline(start);
    let counts_attempts = policy.attempts.is_some();
    let mut waiter: Option<Waiters> = None;
    let mut place: Option<Place> = None;
    let mut last: Option<Failure> = None;
    let mut attempts: u32 = 0;
    // Other tasks of this Locker wait for a name of the claim: it is busy,
    // so get in line behind them rather than try first.
    // (Named only once needed: most claims are taken at the first attempt.)
    let busy = policy.attempts != Some(1)
        && engine.started_notifier().is_some_and(|n| {
            claim
                .keys()
                .iter()
                .any(|k| n.has_waiters(&release_channel(&k.lock)))
        });
    if busy {
        let w = Box::pin(listen(engine, claim, timing)).await;
        place = Some(Place::new(engine, claim, w.id(), timing, start.elapsed()));
        waiter = Some(w);
    }
    let mut wait_first = busy;
    loop {
        if let Some(w) = waiter.as_ref().filter(|_| wait_first) {
            let now = Instant::now();
            let taken = w.taken_by_sibling(counts_attempts, now);
            let waiting = Waiting {
                // Behind another task of this Locker, which tries for both;
                // unless the last attempt met a split (it may have kept its
                // turn on some nodes, and must take it in time).
                behind: !w.is_head() && last.as_ref().is_none_or(|f| f.busy.one_owner),
                heard: w.heard(),
                held_elsewhere: taken.is_some() || last.as_ref().is_some_and(|f| f.busy.one_owner),
                expires_in: taken.or_else(|| last.as_ref().and_then(|f| f.error.expires_in())),
                crowd: last.as_ref().map_or(0, |f| f.busy.crowd),
                quarantine_left: last.as_ref().and_then(|f| f.error.quarantine_left()),
            };
            let mut delay = policy.fallback_delay(rand::random::<f64>(), &waiting, now, deadline);
            if claim.is_set() && place.as_ref().is_some_and(Place::is_in_line) {
                // What is reserved for a set lasts its TTL: each attempt
                // renews it (see `Place`).
                delay = delay.min(timing.ttl / 2);
            }
            // Boxed: waiting is the cold path, and its state need not
            // weigh on every claim's future.
            let woken = Box::pin(async {
                tokio::select! {
                    handoff = w.woken() => match handoff {
                        true => Woken::Handoff,
                        false => Woken::Released,
                    },
                    () = tokio::time::sleep(delay) => Woken::Timer,
                }
            })
            .await;
            tracing::debug!(resource, woken_by = woken.as_str(), "woken in turn");
            let now = Instant::now();
            let open = deadline.is_none_or(|d| now < d);
            if woken == Woken::Handoff {
                // Handed a reservation for its place: take it with it
                // (a release of this Locker may have put it in line).
                if let Some(place) = &mut place {
                    place.enter();
                    w.offer(None);
                }
            } else if open {
                // Moved up behind a task of this Locker that took it: held
                // until a release is heard, or its lease runs out.
                if woken == Woken::Released && w.taken_by_sibling(counts_attempts, now).is_some() {
                    continue;
                }
                // Behind another task of this Locker: it does the trying.
                if !w.is_head() {
                    continue;
                }
            }
        }
        wait_first = true;
        if engine.is_closed() {
            return Err(Error::Closed);
        }
        attempts = attempts.saturating_add(1);
        let on_refusal = match policy.is_last_attempt(attempts, deadline) {
            true => OnRefusal::LeaveAlone,
            false => OnRefusal::Mark,
        };
        let in_line = place.as_ref().filter(|p| p.is_in_line());
        let failure = match attempt(engine, resource, claim, timing, in_line, on_refusal).await {
            Ok(grant) => {
                if let Some(place) = &mut place {
                    place.took(engine.nodes().len());
                }
                match waiter.take() {
                    Some(w) if claim.holds().iter().all(|h| *h == Hold::Exclusive) => {
                        w.acquired(grant.valid_until)
                    }
                    // A shared hold or permit leaves the line as one that
                    // gave up: the next in line may fit beside it.
                    w => drop(w),
                }
                return Ok(grant);
            }
            Err(f) if !f.error.is_retryable() => return Err(f.error),
            Err(f) => f,
        };
        tracing::debug!(resource, attempts, error = %failure.error, "busy");
        last = Some(policy.ends_wait(attempts, start, deadline, resource, failure)?);
        if waiter.is_none() {
            let w = Box::pin(listen(engine, claim, timing)).await;
            place = Some(Place::new(engine, claim, w.id(), timing, start.elapsed()));
            waiter = Some(w);
            // A release between the refusal and the subscription went
            // unheard: the first in line tries again at once.
            wait_first = !waiter.as_ref().is_some_and(Waiters::is_head);
        }
        let (Some(w), Some(p)) = (waiter.as_ref(), place.as_mut()) else {
            continue;
        };
        if p.is_in_line() || !last.as_ref().is_some_and(|f| for_the_line(&f.error)) {
            continue;
        }
        let sibling = claim.alone().is_some_and(|keys| {
            last.as_ref().is_some_and(|f| f.busy.one_owner) && engine.holds_alone(&keys.lock)
        });
        if sibling {
            // Another task of this Locker holds it alone: handed on in the
            // process, and in line only where others wait.
            let spelled = p.spelled();
            w.offer(Some((spelled.member, spelled.ticket)));
        } else {
            // In line from the next attempt on, at once.
            p.enter();
            w.offer(None);
            wait_first = false;
        }
    }
}

/// Whether a failed attempt puts its waiter in line: any failure (a
/// refusal, or a quorum missed with a node cut off or slow: a waiter
/// kept out of line then would let those who came after it through on
/// the nodes it still reaches), but one whose only obstacle was servers
/// in quarantine, which turn everyone away alike: nobody is there to
/// wait behind, and the waiter sleeps the quarantine out.
fn for_the_line(error: &Error) -> bool {
    use crate::core::node_error::NodeErrorKind;
    match error {
        Error::NoQuorum {
            failed, refused_by, ..
        } => {
            !refused_by.is_empty()
                || !failed
                    .iter()
                    .all(|f| matches!(f.kind(), NodeErrorKind::Quarantined { .. }))
        }
        _ => true,
    }
}

/// Listens for the releases of the claim's names and this Locker's
/// handoffs, before the waiter goes in line (by its next attempt): a
/// handoff to a place whose Locker does not listen yet would pass it
/// over.
async fn listen(engine: &Arc<Engine>, claim: &Claim, timing: Timing) -> Waiters {
    let notifier = engine.notifier();
    let id = notifier.next_id();
    let tag = engine.settings().tag.as_str();
    let mut w = Waiters::join_claim(notifier, claim, tag, id);
    w.subscribed(timing.node_timeout).await;
    w
}
