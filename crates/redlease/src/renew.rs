//! Automatic renewal: one background task per Locker extends every lease
//! that asked to be kept alive, in batches: all leases due in a tick go to
//! each node in one pipelined round trip, so thousands of held leases cost a
//! few round trips per tick instead of a timer and a round trip each.
//!
//! Each renewal follows the rules of [`Lease::extend`](crate::Lease::extend):
//! it counts only with a quorum that answered within the lease's remaining
//! validity, and a quorum that no longer holds the token ends the lease.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tokio::sync::{watch, Notify};

use crate::error::NodeError;
use crate::locker::Shared;
use crate::node::ExtendMany;
use crate::quorum::{Tally, Vote};
use crate::token::Token;
use crate::validity::Timing;

/// Most leases one script call renews, so no single call keeps a node busy
/// for long; the calls of one tick still share one round trip.
pub(crate) const BATCH: usize = 1_000;

/// Why a lease can no longer be trusted.
///
/// ```
/// use redlease::LostReason;
/// fn explain(why: LostReason) -> &'static str {
///     match why {
///         LostReason::Refused => "a quorum no longer holds our token",
///         LostReason::Expired => "no renewal was confirmed before the lease ran out",
///     }
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LostReason {
    /// A quorum of nodes answered that the key no longer holds our token
    /// (it expired and someone else may hold the lock).
    Refused,
    /// The lease reached its `valid_until` without a confirmed renewal
    /// (nodes down, paused or too slow).
    Expired,
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LostReason::Refused => "a quorum of nodes no longer holds our token",
            LostReason::Expired => "its validity ran out before a renewal was confirmed",
        })
    }
}

/// Figures of a Locker's automatic renewal, from
/// [`Locker::renewal_stats`](crate::Locker::renewal_stats).
///
/// ```no_run
/// # fn f(locker: &redlease::Locker) {
/// let stats = locker.renewal_stats();
/// println!("{} leases kept alive, {} round trips so far", stats.leases, stats.round_trips);
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RenewalStats {
    /// Leases being kept alive now.
    pub leases: usize,
    /// Node round trips spent on renewals since the Locker was built (one
    /// per node per tick, however many leases the tick renewed).
    pub round_trips: u64,
}

/// What a lease's holder can see of it; the renewer updates it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeaseState {
    pub(crate) valid_until: Instant,
    /// Loss is reported this much before `valid_until` (one drift
    /// allowance: 1% of the TTL + 2 ms), so that a timer that fires late on
    /// a busy machine still fires before the lease ends.
    pub(crate) early: Duration,
    pub(crate) lost: Option<LostReason>,
}

impl LeaseState {
    pub(crate) fn new(valid_until: Instant, timing: &Timing) -> Self {
        LeaseState {
            valid_until,
            early: timing.drift,
            lost: None,
        }
    }

    /// Lost explicitly, or (nearly) past its validity.
    pub(crate) fn lost_at(&self, now: Instant) -> Option<LostReason> {
        self.lost
            .or((now + self.early >= self.valid_until).then_some(LostReason::Expired))
    }

    fn deadline(&self) -> tokio::time::Instant {
        self.valid_until
            .checked_sub(self.early)
            .unwrap_or(self.valid_until)
            .into()
    }
}

/// Waits until `state` reports the lease lost, or its validity passes.
/// Never later than the current `valid_until`, whatever the renewer does.
pub(crate) async fn lost(mut state: watch::Receiver<LeaseState>) -> LostReason {
    loop {
        let now = *state.borrow_and_update();
        if let Some(why) = now.lost_at(Instant::now()) {
            return why;
        }
        tokio::select! {
            changed = state.changed() => {
                if changed.is_err() {
                    // The lease is gone (released): it cannot be renewed any
                    // more, so it lasts until its last validity.
                    tokio::time::sleep_until(now.deadline()).await;
                    return LostReason::Expired;
                }
            }
            () = tokio::time::sleep_until(now.deadline()) => {}
        }
    }
}

struct Entry {
    key: Arc<str>,
    token: Token,
    timing: Timing,
    /// How often to renew: the TTL times the renew fraction.
    interval: Duration,
    due: Instant,
    state: Arc<watch::Sender<LeaseState>>,
}

/// The leases a Locker keeps alive.
pub(crate) struct Renewer {
    entries: Mutex<HashMap<u64, Entry>>,
    next_id: AtomicU64,
    /// A lease was added or removed: the schedule may have changed.
    changed: Notify,
    /// Held while a batch is on the wire, so a release can wait until no
    /// renewal of its lease is still travelling.
    in_flight: tokio::sync::Mutex<()>,
    /// Round trips sent, for the figures.
    round_trips: AtomicU64,
}

impl Renewer {
    /// Starts the renewal task of `shared`. Needs a Tokio runtime.
    pub(crate) fn start(shared: Weak<Shared>) -> Arc<Renewer> {
        let renewer = Arc::new(Renewer {
            entries: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            changed: Notify::new(),
            in_flight: tokio::sync::Mutex::new(()),
            round_trips: AtomicU64::new(0),
        });
        tokio::spawn(run(shared, Arc::downgrade(&renewer)));
        renewer
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps a lease alive from now on; returns its registration.
    pub(crate) fn add(
        &self,
        key: Arc<str>,
        token: Token,
        timing: Timing,
        fraction: f64,
        state: Arc<watch::Sender<LeaseState>>,
    ) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let interval = timing.ttl.mul_f64(fraction);
        let entry = Entry {
            key,
            token,
            timing,
            interval,
            due: Instant::now() + interval,
            state,
        };
        self.entries().insert(id, entry);
        self.changed.notify_one();
        id
    }

    /// Stops renewing a lease; once this returns no new renewal of it is
    /// sent. [`quiesce`](Self::quiesce) waits for one already sent.
    pub(crate) fn remove(&self, id: u64) {
        self.entries().remove(&id);
        self.changed.notify_one();
    }

    /// Waits until no batch is on the wire.
    pub(crate) async fn quiesce(&self) {
        drop(self.exclusive().await);
    }

    /// Keeps batches off the wire while the guard lives.
    pub(crate) async fn exclusive(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.in_flight.lock().await
    }

    pub(crate) fn stats(&self) -> RenewalStats {
        RenewalStats {
            leases: self.entries().len(),
            round_trips: self.round_trips.load(Ordering::Relaxed),
        }
    }

    /// A manual extend changed the lease's TTL: renew with the new one.
    pub(crate) fn retime(&self, id: u64, timing: Timing, fraction: f64) {
        if let Some(e) = self.entries().get_mut(&id) {
            e.timing = timing;
            e.interval = timing.ttl.mul_f64(fraction);
            e.due = Instant::now() + e.interval;
        }
    }
}

/// One lease in a batch.
struct Due {
    id: u64,
    key: Arc<str>,
    token: Token,
    timing: Timing,
    valid_until: Instant,
}

async fn run(shared: Weak<Shared>, renewer: Weak<Renewer>) {
    loop {
        let Some(r) = renewer.upgrade() else { return };
        let next = r.entries().values().map(|e| e.due).min();
        let changed = r.changed.notified();
        match next {
            Some(at) => {
                tokio::select! {
                    () = changed => {}
                    () = tokio::time::sleep_until(at.into()) => {}
                }
            }
            // No lease to renew: wake now and then to notice that the
            // Locker is gone, and end with it.
            None => drop(tokio::time::timeout(Duration::from_secs(1), changed).await),
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        tick(&shared, &r).await;
    }
}

/// Renews every lease that is due (or nearly: within half its interval, so
/// leases taken at different moments travel together).
async fn tick(shared: &Shared, renewer: &Renewer) {
    let guard = renewer.in_flight.lock().await;
    let now = Instant::now();
    let batch: Vec<Due> = {
        let mut entries = renewer.entries();
        let mut batch = Vec::new();
        entries.retain(|&id, e| {
            let state = *e.state.borrow();
            if let Some(why) = state.lost_at(now) {
                e.state.send_modify(|s| s.lost = Some(why));
                return false;
            }
            if e.due <= now + e.interval / 2 {
                batch.push(Due {
                    id,
                    key: e.key.clone(),
                    token: e.token.clone(),
                    timing: e.timing,
                    valid_until: state.valid_until,
                });
            }
            true
        });
        batch
    };
    if batch.is_empty() {
        return;
    }
    let timeout = batch
        .iter()
        .map(|d| d.timing.node_timeout)
        .max()
        .unwrap_or_default();
    // Each chunk's command is encoded once and sent to every node.
    let commands: Vec<ExtendMany> = batch
        .chunks(BATCH)
        .map(|chunk| ExtendMany::new(chunk.iter().map(|d| (&*d.key, &d.token, d.timing.ttl_ms()))))
        .collect();
    let start = Instant::now();
    let replies = join_all(shared.nodes.iter().map(|node| {
        // Concurrent calls share the node's connection: one round trip.
        join_all(
            commands
                .iter()
                .map(|command| node.extend_many(command, timeout)),
        )
    }))
    .await;
    drop(commands);
    renewer
        .round_trips
        .fetch_add(shared.nodes.len() as u64, Ordering::Relaxed);
    drop(guard);
    let done = Instant::now();

    let mut entries = renewer.entries();
    for (i, due) in batch.iter().enumerate() {
        let Some(entry) = entries.get_mut(&due.id) else {
            continue; // released meanwhile
        };
        let mut tally = Tally::new(shared.nodes.len());
        for node in &replies {
            tally.record(vote(&node[i / BATCH], i % BATCH));
        }
        let outcome = decide(&tally, due, start, done);
        match outcome {
            Outcome::Renewed(valid_until) => {
                entry.due = start + entry.interval;
                entry.state.send_modify(|s| s.valid_until = valid_until);
            }
            Outcome::Lost(why) => {
                entry.state.send_modify(|s| s.lost = Some(why));
                entries.remove(&due.id);
            }
            Outcome::Retry => {
                // Some nodes may have applied the TTL: trust the earlier end.
                let bound = due.timing.valid_until(start);
                entry
                    .state
                    .send_modify(|s| s.valid_until = s.valid_until.min(bound));
                // Try again soon, but well inside what is left.
                let left = due.valid_until.saturating_duration_since(done);
                entry.due = done + (left / 4).min(entry.interval / 4);
            }
        }
    }
}

fn vote(chunk: &Result<Vec<bool>, NodeError>, i: usize) -> Vote {
    match chunk {
        Ok(flags) => match flags.get(i) {
            Some(true) => Vote::Yes,
            Some(false) => Vote::No,
            None => Vote::Failed,
        },
        Err(_) => Vote::Failed,
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Renewed(Instant),
    Lost(LostReason),
    Retry,
}

/// The extend rules, for one lease of a batch sent at `start` and answered
/// by `done`. Pure, so it is tested without Redis.
fn decide(tally: &Tally, due: &Due, start: Instant, done: Instant) -> Outcome {
    if tally.refused() {
        return Outcome::Lost(LostReason::Refused);
    }
    // The same line the lost signal uses: a lease reported lost never
    // comes back, even if a late answer would still have counted.
    if done + due.timing.drift >= due.valid_until {
        return Outcome::Lost(LostReason::Expired);
    }
    if tally.yes >= tally.quorum && due.timing.validity(done - start).is_some() {
        return Outcome::Renewed(due.timing.valid_until(start));
    }
    Outcome::Retry
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validity::DriftModel;

    const MS: Duration = Duration::from_millis(1);

    fn due(valid_for: Duration, start: Instant) -> Due {
        Due {
            id: 0,
            key: "k".into(),
            token: Token::generate(),
            timing: Timing::new("ttl", 1_000 * MS, DriftModel::DEFAULT, None).unwrap(),
            valid_until: start + valid_for,
        }
    }

    fn tally(nodes: usize, yes: usize, no: usize) -> Tally {
        let mut t = Tally::new(nodes);
        (0..yes).for_each(|_| t.record(Vote::Yes));
        (0..no).for_each(|_| t.record(Vote::No));
        (0..nodes - yes - no).for_each(|_| t.record(Vote::Failed));
        t
    }

    #[test]
    fn a_quorum_in_time_renews_from_the_start_of_the_batch() {
        let start = Instant::now();
        let d = due(600 * MS, start);
        assert_eq!(
            decide(&tally(5, 3, 0), &d, start, start + 2 * MS),
            Outcome::Renewed(start + 988 * MS)
        );
    }

    #[test]
    fn a_quorum_of_refusals_loses_the_lease() {
        let start = Instant::now();
        let d = due(600 * MS, start);
        assert_eq!(
            decide(&tally(5, 2, 3), &d, start, start + MS),
            Outcome::Lost(LostReason::Refused)
        );
    }

    #[test]
    fn an_answer_after_the_validity_is_too_late() {
        let start = Instant::now();
        let d = due(100 * MS, start);
        assert_eq!(
            decide(&tally(5, 5, 0), &d, start, start + 100 * MS),
            Outcome::Lost(LostReason::Expired)
        );
        // Within the drift allowance (12 ms) before the end, when the lost
        // signal already fired, is too late as well.
        assert_eq!(
            decide(&tally(5, 5, 0), &d, start, start + 90 * MS),
            Outcome::Lost(LostReason::Expired)
        );
        assert_eq!(
            decide(&tally(5, 5, 0), &d, start, start + 80 * MS),
            Outcome::Renewed(start + 988 * MS)
        );
    }

    #[test]
    fn failures_without_a_quorum_retry() {
        let start = Instant::now();
        let d = due(600 * MS, start);
        assert_eq!(
            decide(&tally(5, 2, 2), &d, start, start + MS),
            Outcome::Retry
        );
        assert_eq!(
            decide(&tally(1, 0, 0), &d, start, start + MS),
            Outcome::Retry
        );
    }

    #[test]
    fn the_new_end_follows_the_renewed_ttl_even_when_earlier() {
        // Nodes now expire the key at start + ttl: the lease may not claim
        // a longer end it had before.
        let start = Instant::now();
        let d = due(2_000 * MS, start);
        assert_eq!(
            decide(&tally(3, 3, 0), &d, start, start + MS),
            Outcome::Renewed(start + 988 * MS)
        );
    }
}
