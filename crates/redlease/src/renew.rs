//! Automatic renewal of kept-alive leases, each decided at quorum on its
//! own clock.
//!
//! Two kinds of task do the work. The scheduler queues each lease when it
//! falls due (leases due within half an interval travel together). Each
//! node has a [`Lane`] that sends what is queued for it as one batch and
//! waits for the answer; what falls due meanwhile is coalesced into its
//! next batch, so a slow node never has more than one batch of renewals on
//! the wire.
//!
//! Every answer updates, per lease, what that node promised
//! ([`ExpiryBounds`]): a lease is renewed as soon as a quorum of nodes
//! confirmed it, whatever the other nodes are doing and whatever other
//! leases share the batch. A lease is lost only when it can no longer be
//! trusted: a quorum refused it, or its validity ran out first (reported
//! one drift allowance early). It never comes back.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::error::{NodeError, NodeErrorKind, NodeId};
use crate::expiry::ExpiryBounds;
use crate::lane::{Delivery, ExtendMany, Lane, CHUNK};
use crate::lease_state::{LeaseState, LostReason};
use crate::node::Node;
use crate::quorum::quorum;
use crate::renew_schedule::{coalesce, next_due, patience, retry_at};
use crate::token::Token;
use crate::validity::Timing;

/// Most leases one lane sends in one round trip: the most urgent go first,
/// and no batch keeps a node busy long enough to starve the next.
pub(crate) const TRIP: usize = 5 * CHUNK;

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
    /// per node per batch, however many leases the batch renewed).
    pub round_trips: u64,
    /// Batches whose node did not answer in time: their connection was
    /// dropped rather than queueing more behind them.
    pub abandoned: u64,
}

/// Why an extend through the renewer failed.
pub(crate) enum ExtendFailure {
    /// The lease is lost (or was already).
    Lost {
        why: LostReason,
        /// Nodes whose latest answer said our token is gone.
        refused_on: Vec<NodeId>,
        /// Nodes whose latest answer was an error.
        failed: Vec<NodeError>,
    },
    /// The lease is not kept alive any more (released meanwhile).
    Gone,
}

/// A kept-alive lease.
struct Entry {
    key: Arc<str>,
    token: Token,
    timing: Timing,
    interval: Duration,
    bounds: ExpiryBounds,
    /// Bumped by each manual extend; per node, the latest epoch confirmed.
    epoch: u64,
    seen_epoch: Vec<u64>,
    /// Per node, the error of its latest answer, if it was one.
    errors: Vec<Option<NodeError>>,
    /// Queued on the lanes and not yet renewed by a quorum since.
    queued: bool,
    /// When to queue it next (a retry, while `queued`).
    due: Instant,
    state: Arc<watch::Sender<LeaseState>>,
}

impl Entry {
    fn lost_from(&self) -> Instant {
        self.state.borrow().lost_from()
    }

    /// Reports the lease lost (first reason wins) and logs it.
    fn lose(&self, why: LostReason) {
        let newly = self.state.send_if_modified(|s| {
            let first = s.lost.is_none();
            s.lost.get_or_insert(why);
            first
        });
        if newly {
            let failed: Vec<String> = self
                .errors
                .iter()
                .flatten()
                .map(|e| e.to_string())
                .collect();
            tracing::warn!(key = %self.key, reason = %why, ?failed, "lease lost");
        }
    }

    /// Folds the nodes' latest answers into the holder's view; `false` if
    /// the lease is lost.
    fn evaluate(&mut self, now: Instant, fraction_quorum: usize) -> bool {
        let state = *self.state.borrow();
        if let Some(why) = state.lost_at(now) {
            self.lose(why);
            return false;
        }
        let Some(valid_until) = self
            .bounds
            .valid_until()
            .filter(|_| !self.bounds.refused_by_quorum())
        else {
            self.lose(LostReason::Refused);
            return false;
        };
        let expiry_reason = if self.bounds.failed_by_quorum() {
            LostReason::NodeErrors
        } else {
            LostReason::Expired
        };
        let epoch = self.epoch;
        let confirmed = self.seen_epoch.iter().filter(|&&e| e >= epoch).count() >= fraction_quorum;
        let advanced = valid_until > state.valid_until;
        self.state.send_if_modified(|s| {
            let before = *s;
            s.valid_until = valid_until;
            s.expiry_reason = expiry_reason;
            if confirmed {
                s.confirmed_epoch = s.confirmed_epoch.max(epoch);
            }
            *s != before
        });
        let lost = self.state.borrow().lost_at(now);
        if let Some(why) = lost {
            self.lose(why);
            return false;
        }
        if advanced {
            self.queued = false;
            self.due = next_due(valid_until, &self.timing, self.interval);
        }
        true
    }
}

/// The leases, and per node the ones queued for its lane.
struct Table {
    leases: HashMap<u64, Entry>,
    queued: Vec<HashSet<u64>>,
}

impl Table {
    fn remove(&mut self, id: u64) -> Option<Entry> {
        for q in &mut self.queued {
            q.remove(&id);
        }
        self.leases.remove(&id)
    }
}

/// One lease of a batch, as it was sent.
struct Sent {
    id: u64,
    key: Arc<str>,
    token: Token,
    timing: Timing,
    epoch: u64,
    lost_from: Instant,
}

struct Inner {
    nodes: Vec<Arc<Node>>,
    quorum: usize,
    fraction: f64,
    table: Mutex<Table>,
    /// The schedule may have changed: the scheduler looks again.
    rescheduled: Notify,
    /// Per node: leases were queued for its lane.
    work: Vec<Notify>,
    next_id: AtomicU64,
    round_trips: AtomicU64,
    abandoned: AtomicU64,
    stop: tokio_util::sync::CancellationToken,
}

impl Inner {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wake_lanes(&self) {
        for w in &self.work {
            w.notify_one();
        }
    }
}

/// The leases a Locker keeps alive, and the tasks that renew them. The
/// tasks stop when this is dropped (with the last handle on the Locker).
pub(crate) struct Renewer {
    inner: Arc<Inner>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Renewer {
    fn drop(&mut self) {
        self.inner.stop.cancel();
    }
}

impl Renewer {
    /// A renewer over `nodes`, renewing every `fraction` of a lease's TTL.
    /// Its tasks start with the first lease.
    pub(crate) fn new(nodes: Vec<Arc<Node>>, fraction: f64) -> Renewer {
        let n = nodes.len();
        Renewer {
            inner: Arc::new(Inner {
                quorum: quorum(n),
                nodes,
                fraction,
                table: Mutex::new(Table {
                    leases: HashMap::new(),
                    queued: vec![HashSet::new(); n],
                }),
                rescheduled: Notify::new(),
                work: (0..n).map(|_| Notify::new()).collect(),
                next_id: AtomicU64::new(0),
                round_trips: AtomicU64::new(0),
                abandoned: AtomicU64::new(0),
                stop: tokio_util::sync::CancellationToken::new(),
            }),
            tasks: Mutex::new(Vec::new()),
        }
    }

    /// Starts the tasks on the current runtime, or again if the runtime
    /// they ran on has shut down (a test's or a short-lived CLI runtime):
    /// renewal follows the Locker, not the first runtime that used it.
    fn ensure_running(&self) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        if !tasks.is_empty() && tasks.iter().all(|t| !t.is_finished()) {
            return;
        }
        tasks.iter().for_each(JoinHandle::abort);
        tasks.clear();
        tasks.push(tokio::spawn(schedule(self.inner.clone())));
        for i in 0..self.inner.nodes.len() {
            tasks.push(tokio::spawn(lane(self.inner.clone(), i)));
        }
    }

    /// Keeps a lease alive from now on; returns its registration. Needs a
    /// Tokio runtime.
    pub(crate) fn add(
        &self,
        key: Arc<str>,
        token: Token,
        timing: Timing,
        bounds: ExpiryBounds,
        state: Arc<watch::Sender<LeaseState>>,
    ) -> u64 {
        self.ensure_running();
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let interval = timing.renew_interval(self.inner.fraction);
        let valid_until = state.borrow().valid_until;
        let n = self.inner.nodes.len();
        let entry = Entry {
            key,
            token,
            timing,
            interval,
            bounds,
            epoch: 0,
            seen_epoch: vec![0; n],
            errors: vec![None; n],
            queued: false,
            due: next_due(valid_until, &timing, interval),
            state,
        };
        self.inner.table().leases.insert(id, entry);
        self.inner.rescheduled.notify_one();
        id
    }

    /// Stops renewing a lease: no renewal of it is sent after this returns
    /// (one already on the wire may still land, which is harmless: the
    /// renew script never re-creates a released key).
    pub(crate) fn remove(&self, id: u64) {
        self.inner.table().remove(id);
        self.inner.rescheduled.notify_one();
    }

    pub(crate) fn stats(&self) -> RenewalStats {
        RenewalStats {
            leases: self.inner.table().leases.len(),
            round_trips: self.inner.round_trips.load(Ordering::Relaxed),
            abandoned: self.inner.abandoned.load(Ordering::Relaxed),
        }
    }

    /// A manual extend of a kept-alive lease: renews it now with `timing`
    /// through the lanes (so it stays in order with the lease's renewals on
    /// every node) and waits until a quorum confirmed it, or the lease is
    /// lost. Leases are sequenced one by one: other leases' renewals go on
    /// meanwhile.
    pub(crate) async fn extend(&self, id: u64, timing: Timing) -> Result<(), ExtendFailure> {
        self.ensure_running();
        let (epoch, mut state) = {
            let mut table = self.inner.table();
            let Some(entry) = table.leases.get_mut(&id) else {
                return Err(ExtendFailure::Gone);
            };
            let now = Instant::now();
            let lost = entry.state.borrow().lost_at(now);
            if let Some(why) = lost {
                return Err(self.failure(entry, why));
            }
            // A node that applies the new TTL keeps the key only that long
            // from now: trust no more than that until a quorum confirms.
            entry.bounds.sending_to_all(now, timing.ttl, timing.drift);
            entry.timing = timing;
            entry.interval = timing.renew_interval(self.inner.fraction);
            entry.epoch += 1;
            entry.queued = true;
            if let Some(valid_until) = entry.bounds.valid_until() {
                entry.state.send_modify(|s| {
                    s.valid_until = valid_until;
                    s.early = timing.drift;
                });
            }
            entry.due = retry_at(now, entry.lost_from(), entry.interval);
            let epoch = entry.epoch;
            let state = entry.state.subscribe();
            for q in &mut table.queued {
                q.insert(id);
            }
            (epoch, state)
        };
        self.inner.wake_lanes();
        self.inner.rescheduled.notify_one();
        loop {
            let now = *state.borrow_and_update();
            if now.confirmed_epoch >= epoch {
                return Ok(());
            }
            if let Some(why) = now.lost_at(Instant::now()) {
                let table = self.inner.table();
                return Err(match table.leases.get(&id) {
                    Some(entry) => self.failure(entry, why),
                    None => ExtendFailure::Lost {
                        why,
                        refused_on: Vec::new(),
                        failed: Vec::new(),
                    },
                });
            }
            tokio::select! {
                changed = state.changed() => if changed.is_err() {
                    return Err(ExtendFailure::Gone);
                },
                () = tokio::time::sleep_until(now.lost_from().into()) => {}
            }
        }
    }

    fn failure(&self, entry: &Entry, why: LostReason) -> ExtendFailure {
        ExtendFailure::Lost {
            why,
            refused_on: entry
                .bounds
                .refused_nodes()
                .map(|i| self.inner.nodes[i].id().clone())
                .collect(),
            failed: entry.errors.iter().flatten().cloned().collect(),
        }
    }
}

/// Queues leases as they fall due, and sweeps out lost ones.
async fn schedule(inner: Arc<Inner>) {
    loop {
        let rescheduled = inner.rescheduled.notified();
        let next = {
            let table = inner.table();
            table
                .leases
                .values()
                // Wake when the first lease is due, not when it could be
                // coalesced: waking early would send every lease as soon as
                // it can join a batch, and leases taken at different
                // moments would never fall into step.
                .map(|e| e.due.min(e.lost_from()))
                .min()
        };
        let sleep = match next {
            Some(at) => tokio::time::sleep_until(at.into()),
            None => tokio::time::sleep(Duration::from_secs(3600)),
        };
        tokio::select! {
            () = inner.stop.cancelled() => return,
            () = rescheduled => {}
            () = sleep => {}
        }
        queue_due(&inner, Instant::now());
    }
}

fn queue_due(inner: &Inner, now: Instant) {
    let mut queued_any = false;
    let mut table = inner.table();
    let Table { leases, queued } = &mut *table;
    leases.retain(|id, e| {
        // Copy out of the watch first: `lose` writes to it.
        let lost = e.state.borrow().lost_at(now);
        if let Some(why) = lost {
            e.lose(why);
            queued.iter_mut().for_each(|q| {
                q.remove(id);
            });
            return false;
        }
        let due = if e.queued {
            e.due <= now
        } else {
            coalesce(now, e.due, e.interval)
        };
        if due {
            queued.iter_mut().for_each(|q| {
                q.insert(*id);
            });
            e.queued = true;
            e.due = retry_at(now, e.lost_from(), e.interval);
            queued_any = true;
        }
        true
    });
    drop(table);
    if queued_any {
        inner.wake_lanes();
    }
}

/// Node `i`'s lane: sends what is queued for it, one batch at a time.
async fn lane(inner: Arc<Inner>, i: usize) {
    let mut lane = Lane::new(inner.nodes[i].clone());
    let mut failing = false;
    let mut pause = Duration::ZERO;
    loop {
        let work = inner.work[i].notified();
        let batch = take_batch(&inner, i);
        if batch.is_empty() {
            tokio::select! {
                () = inner.stop.cancelled() => return,
                () = work => continue,
            }
        }
        let calls: Vec<ExtendMany> = batch
            .chunks(CHUNK)
            .map(|chunk| {
                ExtendMany::new(chunk.iter().map(|s| (&*s.key, &s.token, s.timing.ttl_ms())))
            })
            .collect();
        let latest = batch
            .iter()
            .map(|s| s.lost_from)
            .max()
            .unwrap_or_else(Instant::now);
        let sent = Instant::now();
        let delivery = tokio::select! {
            () = inner.stop.cancelled() => return,
            d = lane.deliver(&calls, patience(sent, latest)) => d,
        };
        drop(calls);
        inner.round_trips.fetch_add(1, Ordering::Relaxed);
        let trouble = match &delivery {
            Delivery::Answered(answers) => answers
                .iter()
                .find_map(|a| a.as_ref().err())
                .map(|e| e.to_string()),
            Delivery::Abandoned => {
                inner.abandoned.fetch_add(1, Ordering::Relaxed);
                Some(format!(
                    "{}: no answer in time; connection dropped",
                    lane.node().id()
                ))
            }
            Delivery::Unsent(e) => Some(e.to_string()),
        };
        match (&trouble, failing) {
            (Some(why), false) => tracing::warn!(error = %why, "renewals to a node are failing"),
            (None, true) => {
                tracing::info!(node = %lane.node().id(), "renewals to the node work again")
            }
            _ => {}
        }
        failing = trouble.is_some();
        let unsent = matches!(delivery, Delivery::Unsent(_));
        apply(&inner, i, &batch, sent, delivery);
        // A node that refuses connections is tried again after a short,
        // growing pause instead of at once.
        pause = if unsent {
            (pause * 2).clamp(Duration::from_millis(50), Duration::from_millis(250))
        } else {
            Duration::ZERO
        };
        if !pause.is_zero() {
            tokio::select! {
                () = inner.stop.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }
}

/// Takes the most urgent leases queued for node `i`, up to [`TRIP`].
fn take_batch(inner: &Inner, i: usize) -> Vec<Sent> {
    let mut table = inner.table();
    let Table { leases, queued } = &mut *table;
    let mut batch: Vec<Sent> = queued[i]
        .iter()
        .filter_map(|id| {
            leases.get(id).map(|e| Sent {
                id: *id,
                key: e.key.clone(),
                token: e.token.clone(),
                timing: e.timing,
                epoch: e.epoch,
                lost_from: e.lost_from(),
            })
        })
        .collect();
    if batch.len() > TRIP {
        batch.select_nth_unstable_by_key(TRIP, |s| s.lost_from);
        batch.truncate(TRIP);
    }
    for s in &batch {
        queued[i].remove(&s.id);
    }
    // Ids of leases removed meanwhile.
    queued[i].retain(|id| leases.contains_key(id));
    batch
}

/// Folds node `i`'s answer to a batch sent at `sent` into its leases.
fn apply(inner: &Inner, i: usize, batch: &[Sent], sent: Instant, delivery: Delivery) {
    let now = Instant::now();
    let mut table = inner.table();
    let mut lost = Vec::new();
    for (k, s) in batch.iter().enumerate() {
        let Some(entry) = table.leases.get_mut(&s.id) else {
            continue; // released meanwhile
        };
        let (ttl, drift) = (s.timing.ttl, s.timing.drift);
        match &delivery {
            Delivery::Answered(answers) => match &answers[k / CHUNK] {
                Ok(flags) if flags[k % CHUNK] => {
                    entry.bounds.confirmed(i, sent, ttl, drift);
                    entry.seen_epoch[i] = entry.seen_epoch[i].max(s.epoch);
                    entry.errors[i] = None;
                }
                Ok(_) => {
                    entry.bounds.refused(i);
                    entry.errors[i] = None;
                }
                Err(e) => {
                    entry.bounds.unknown(i, sent, ttl, drift, true);
                    entry.errors[i] = Some(e.clone());
                }
            },
            Delivery::Abandoned => entry.bounds.unknown(i, sent, ttl, drift, false),
            Delivery::Unsent(e) => {
                let silent = matches!(e.kind(), NodeErrorKind::Timeout(_));
                entry.bounds.unsent(i, !silent);
                entry.errors[i] = Some(e.clone());
            }
        }
        if !entry.evaluate(now, inner.quorum) {
            lost.push(s.id);
        }
    }
    for id in lost {
        table.remove(id);
    }
}
