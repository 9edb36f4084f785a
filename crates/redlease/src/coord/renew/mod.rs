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
//! trusted: so many nodes refused it that no quorum can hold it, or its
//! validity ran out first (reported one drift allowance early). It never
//! comes back.

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::coord::background::RuntimeTasks;
use crate::coord::ownership::Ownership;
use crate::coord::renew::lane::{ExtendMany, CHUNK};
use crate::core::expiry::ExpiryBounds;
use crate::core::lease_state::{watch, LateGrants, LeaseState, LostReason};
use crate::core::node_error::{NodeError, NodeId};
use crate::core::renew_schedule::{coalesce, next_due, retry_at, Cadence};
use crate::core::telemetry;
use crate::core::validity::Timing;
use crate::transport::node::Node;

mod agenda;
mod extend;
pub(crate) use extend::gone;
pub(crate) mod lane;
mod lanes;
use agenda::{Agenda, Tick};
use lanes::lane;
/// The kept-alive leases by id.
type Slab = crate::core::slab::Slab<Entry>;

/// Most leases one lane sends in one round trip: the most urgent go first,
/// and no batch keeps a node busy long enough to starve the next.
pub(crate) const TRIP: usize = 5 * CHUNK;

/// Figures of a Locker's automatic renewal, from
/// [`Admin::renewal_stats`](crate::Admin::renewal_stats).
///
/// ```no_run
/// # fn f(locker: &redlease::Locker) {
/// let stats = locker.admin().renewal_stats();
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
    /// Its key, token and hold (a writer's lock, a read hold or a permit);
    /// a multi-lock's other keys, renewed with the first: the lease is
    /// confirmed by a node only when all of them are.
    owner: Arc<Ownership>,
    cadence: Cadence,
    bounds: ExpiryBounds,
    /// Nodes whose yes to the acquire may still come (after the quorum's);
    /// `None` once they all answered.
    late: Option<Arc<LateGrants>>,
    /// The renewal round being sent: bumped each time the lease is queued
    /// afresh and by each manual extend. Only a quorum confirming this
    /// round renews the lease; a late answer for an older round moves
    /// that node's bound but never counts as this round's.
    round: u64,
    /// A manual extend waits for the current round.
    extend_waiting: bool,
    /// Per node, the error of its latest answer, if it was one. `None`
    /// until an error comes: renewing a healthy lease touches nothing but
    /// the entry and its bounds (with 10,000 leases, every separate
    /// allocation touched per answer is a cache miss that shows in the CPU
    /// figure).
    errors: Option<Box<[Option<NodeError>]>>,
    /// Queued on the lanes and not yet renewed by a quorum since.
    queued: bool,
    /// When to queue it next (a retry, while `queued`).
    due: Instant,
    /// Its live items on the agenda (see [`Agenda`]): when it is looked at
    /// next, and when it may join a batch (0: none).
    look_at: Tick,
    near_at: Tick,
    /// The nodes whose lanes have it queued, one bit each.
    lanes: u64,
    /// What the holder sees (`owner.state`), as last published. The
    /// renewer is the only writer of a kept-alive lease's state, so this
    /// copy is exact, and reading it costs no lock.
    view: LeaseState,
}

impl Entry {
    fn failed(&mut self, i: usize, error: NodeError) {
        let errors = self
            .errors
            .get_or_insert_with(|| vec![None; self.bounds.nodes()].into());
        errors[i] = Some(error);
    }

    /// Counts the acquire's late yeses that came since the last look.
    fn fold_late(&mut self) {
        if let Some(late) = &self.late {
            let (nodes, done) = late.take();
            for i in nodes {
                self.bounds.granted_late(i, late.until());
            }
            if done {
                self.late = None;
            }
        }
    }

    /// Node `i` answered without an error.
    fn answered(&mut self, i: usize) {
        if let Some(e) = self.errors.as_mut().and_then(|errors| errors.get_mut(i)) {
            *e = None;
        }
    }

    fn errors(&self) -> impl Iterator<Item = &NodeError> {
        self.errors
            .iter()
            .flat_map(|errors| errors.iter().flatten())
    }

    fn lost_from(&self) -> Instant {
        self.view.lost_from()
    }

    /// Changes what the holder sees; `change` says whether watchers (the
    /// lost signal, an extend) must wake up.
    fn publish(&mut self, change: impl FnOnce(&mut LeaseState) -> bool) {
        let wake = change(&mut self.view);
        let view = self.view;
        self.owner.state.modify_if(|s| {
            *s = view;
            wake
        });
    }

    /// Reports the lease lost (first reason wins) and logs it.
    fn lose(&mut self, why: LostReason) {
        if self.view.lost.is_none() {
            self.publish(|s| {
                s.lost = Some(why);
                true
            });
            let failed: Vec<String> = self.errors().map(|e| format!("{e:#}")).collect();
            tracing::warn!(key = %self.owner.key(), reason = %why, ?failed, "lease lost");
            telemetry::lease_lost(why);
        }
    }

    /// Folds the nodes' latest answers into the holder's view; `false` if
    /// the lease is lost.
    fn evaluate(&mut self, now: Instant) -> bool {
        let state = self.view;
        if let Some(why) = state.lost_at(now) {
            self.lose(why);
            return false;
        }
        self.fold_late();
        // Refused only once no quorum can hold it; a node that refused
        // before the others confirmed takes nothing back.
        let Some(valid_until) = self.bounds.trusted_until(state.valid_until) else {
            self.lose(LostReason::Refused);
            return false;
        };
        let expiry_reason = if self.bounds.failed_by_quorum() {
            LostReason::NodeErrors
        } else {
            LostReason::Expired
        };
        let renewed = self.queued && self.bounds.confirmed_by_quorum(self.round);
        // Between renewals, answers can only move the end a little later
        // (a node after the quorum confirming too): the end the quorum
        // gave is kept, which is earlier and so safe, and the holder's
        // state is left alone. An earlier end is always published.
        if !renewed && valid_until >= state.valid_until && expiry_reason == state.expiry_reason {
            return true;
        }
        let (round, wake_extend) = (self.round, renewed && self.extend_waiting);
        self.publish(|s| {
            let earlier = valid_until < s.valid_until;
            if renewed || earlier {
                s.valid_until = valid_until;
            }
            if renewed {
                s.confirmed_round = round;
            }
            s.expiry_reason = expiry_reason;
            // Wake watchers only when they must act sooner or an extend
            // waits for this round. A later end is read by the lost
            // signal when its old deadline comes: one wake-up per lease
            // per TTL instead of one per renewal.
            earlier || wake_extend
        });
        if let Some(why) = self.view.lost_at(now) {
            self.lose(why);
            return false;
        }
        if renewed {
            self.queued = false;
            self.extend_waiting = false;
            self.due = next_due(self.view.valid_until, &self.cadence);
        }
        true
    }
}

/// The leases, and when each is looked at and sent next.
struct Table {
    leases: Slab,
    agenda: Agenda,
    /// Bumped whenever what a batch would hold may have changed (leases
    /// queued, extended or removed).
    version: u64,
    /// The batch a lane encoded last, for the other lanes to send as it is
    /// while nothing changed: with healthy nodes every lane takes the same
    /// leases, and encoding them once instead of once per node is most of
    /// what renewal costs the client.
    last_batch: Option<Arc<Batch>>,
    /// How many lanes have yet to take `last_batch`: once every lane has
    /// it, it is let go rather than kept (a full batch's encoding, about
    /// 1 MB) until the next batch replaces it.
    last_batch_left: usize,
}

impl Table {
    /// Forgets a lease (its items on the agenda are skipped from now on).
    fn remove(&mut self, id: u64) -> Option<Entry> {
        self.version += 1;
        self.leases.remove(&id)
    }
}

/// Leases as sent to a node in one round trip, and their script calls.
struct Batch {
    sent: Vec<Sent>,
    calls: Vec<ExtendMany>,
    /// The leases as the lane took them off its queue: another lane that
    /// takes the same ones sends this batch as it is.
    taken: Vec<u64>,
    /// The table's version when it was made.
    version: u64,
    /// When its most overdue lease was due, and the shortest renewal
    /// interval in it: how late the batch leaves (see `Lag`).
    due: Instant,
    interval: Duration,
}

/// One lease of a batch, as it was sent.
#[derive(Clone, Copy)]
struct Sent {
    id: u64,
    cadence: Cadence,
    round: u64,
    lost_from: Instant,
    /// How many keys it renews: the next this many places of the batch's
    /// calls (1, or a multi-lock's names).
    keys: usize,
}

struct Inner {
    nodes: Vec<Arc<Node>>,
    /// Some node is a Redis Cluster: every script call of a batch keeps to
    /// one hash slot (a multi-key script must), so all lanes can still share
    /// one encoding.
    by_slot: bool,
    fraction: f64,
    table: Mutex<Table>,
    /// The schedule may have changed: the scheduler looks again.
    rescheduled: Notify,
    /// Per node: leases were queued for its lane.
    work: Vec<Notify>,
    round_trips: AtomicU64,
    abandoned: AtomicU64,
    /// How many lanes have fallen behind their timetable (see `Lag`): the
    /// Locker warns when the first does and tells when the last caught up.
    behind: AtomicUsize,
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
    tasks: Mutex<RuntimeTasks>,
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
        // One bit per node in each entry (see `Entry::lanes`).
        assert!(
            n <= crate::core::quorum::MAX_NODES,
            "refused by the builder"
        );
        let by_slot = nodes.iter().any(|node| node.deployment().is_cluster());
        Renewer {
            inner: Arc::new(Inner {
                nodes,
                by_slot,
                fraction,
                table: Mutex::new(Table {
                    leases: Slab::default(),
                    agenda: Agenda::new(n),
                    version: 0,
                    last_batch: None,
                    last_batch_left: 0,
                }),
                rescheduled: Notify::new(),
                work: (0..n).map(|_| Notify::new()).collect(),
                round_trips: AtomicU64::new(0),
                abandoned: AtomicU64::new(0),
                behind: AtomicUsize::new(0),
                stop: tokio_util::sync::CancellationToken::new(),
            }),
            tasks: Mutex::default(),
        }
    }

    /// Starts the tasks on the current runtime, or again if the runtime
    /// they ran on has shut down (a test's or a short-lived CLI runtime):
    /// renewal follows the Locker, not the first runtime that used it.
    fn ensure_running(&self) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        if tasks.running() {
            return;
        }
        if self.inner.stop.is_cancelled() {
            return;
        }
        tasks.abort();
        tasks.spawn(schedule(self.inner.clone()));
        for i in 0..self.inner.nodes.len() {
            tasks.spawn(lane(self.inner.clone(), i));
        }
    }

    /// Stops renewing for good: the tasks end, and every lease is dropped
    /// from the table without another word to its holder (the caller, a
    /// closing Locker, tells them). Once this returns, nothing here writes
    /// to a lease's state again.
    pub(crate) fn shutdown(&self) {
        self.inner.stop.cancel();
        self.tasks.lock().unwrap_or_else(|p| p.into_inner()).abort();
        let mut table = self.inner.table();
        drop(table.leases.drain());
        table.agenda.clear();
    }

    /// Keeps a lease alive from now on; returns its registration. Needs a
    /// Tokio runtime.
    pub(crate) fn add(
        &self,
        ownership: &Arc<Ownership>,
        timing: Timing,
        bounds: ExpiryBounds,
        late: Option<Arc<LateGrants>>,
    ) -> NonZeroU64 {
        self.ensure_running();
        let cadence = Cadence::new(&timing, self.inner.fraction);
        let view = ownership.state.get();
        let valid_until = view.valid_until;
        let mut entry = Entry {
            owner: ownership.clone(),
            cadence,
            bounds,
            late,
            round: 0,
            extend_waiting: false,
            errors: None,
            queued: false,
            due: next_due(valid_until, &cadence),
            look_at: 0,
            near_at: 0,
            lanes: 0,
            view,
        };
        entry.fold_late();
        let mut table = self.inner.table();
        let Table { leases, agenda, .. } = &mut *table;
        let id = leases.insert(entry);
        if let Some(entry) = leases.get_mut(&id.get()) {
            agenda.plan(id.get(), entry);
        }
        drop(table);
        self.inner.rescheduled.notify_one();
        id
    }

    /// Stops renewing a lease: no renewal of it is sent after this returns
    /// (one already on the wire may still land, which is harmless: the
    /// renew script never re-creates a released key).
    pub(crate) fn remove(&self, id: NonZeroU64) {
        self.inner.table().remove(id.get());
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
    pub(crate) async fn extend(&self, id: NonZeroU64, timing: Timing) -> Result<(), ExtendFailure> {
        let id = id.get();
        self.ensure_running();
        let (round, mut state) = {
            let mut table = self.inner.table();
            let Table {
                leases,
                agenda,
                version,
                ..
            } = &mut *table;
            let Some(entry) = leases.get_mut(&id) else {
                return Err(ExtendFailure::Gone);
            };
            let now = Instant::now();
            if let Some(why) = entry.view.lost_at(now) {
                return Err(self.failure(entry, why));
            }
            // A node that applies the new TTL keeps the key only that long
            // from now: trust no more than that until a quorum confirms.
            entry.fold_late();
            entry.bounds.sending_to_all(now, timing.ttl, timing.drift);
            entry.cadence = Cadence::new(&timing, self.inner.fraction);
            entry.round += 1;
            entry.extend_waiting = true;
            entry.queued = true;
            if let Some(valid_until) = entry.bounds.trusted_until(entry.view.valid_until) {
                entry.publish(|s| {
                    s.valid_until = valid_until;
                    s.early = timing.drift;
                    true
                });
            }
            entry.due = retry_at(now, entry.lost_from(), entry.cadence.interval);
            let round = entry.round;
            let state = watch(entry.owner.clone());
            agenda.enqueue(id, entry);
            agenda.plan(id, entry);
            *version += 1;
            (round, state)
        };
        self.inner.wake_lanes();
        self.inner.rescheduled.notify_one();
        loop {
            let now = state.get_and_mark();
            if now.confirmed_round >= round {
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
                // The lease itself holds the state: it cannot go while
                // its extend waits.
                () = state.changed() => {}
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
            failed: entry.errors().cloned().collect(),
        }
    }
}

/// Queues leases as they fall due, and sweeps out lost ones.
async fn schedule(inner: Arc<Inner>) {
    loop {
        let rescheduled = inner.rescheduled.notified();
        // Wake when the first lease is due, not when it could be
        // coalesced: waking early would send every lease as soon as it can
        // join a batch, and leases taken at different moments would never
        // fall into step.
        let next = {
            let mut table = inner.table();
            let Table { leases, agenda, .. } = &mut *table;
            agenda.next_look(leases)
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

/// Queues the leases due by `now`, and those that may travel with them,
/// and sweeps out the ones lost.
fn queue_due(inner: &Inner, now: Instant) {
    let mut queued_any = false;
    let mut removed_any = false;
    let mut table = inner.table();
    let Table {
        leases,
        agenda,
        version,
        ..
    } = &mut *table;
    while let Some(id) = agenda.pop_look(now, leases) {
        let Some(e) = leases.get_mut(&id) else {
            continue;
        };
        if let Some(why) = e.view.lost_at(now) {
            e.lose(why);
            leases.remove(&id);
            removed_any = true;
            continue;
        }
        let due = if e.queued {
            e.due <= now
        } else {
            coalesce(now, e.due, e.cadence.interval)
        };
        if due {
            queue(agenda, now, id, e);
            queued_any = true;
        }
        agenda.plan(id, e);
    }
    while let Some(id) = agenda.pop_near(now, leases) {
        let Some(e) = leases.get_mut(&id) else {
            continue;
        };
        if coalesce(now, e.due, e.cadence.interval) {
            queue(agenda, now, id, e);
            queued_any = true;
        }
        agenda.plan(id, e);
    }
    if queued_any || removed_any {
        *version += 1;
    }
    drop(table);
    if queued_any {
        inner.wake_lanes();
    }
}

/// Queues lease `id` on every lane for a new round (or a retry of the
/// current one), to be tried again at its retry time.
fn queue(agenda: &mut Agenda, now: Instant, id: u64, e: &mut Entry) {
    agenda.enqueue(id, e);
    if !e.queued {
        e.round += 1;
    }
    e.queued = true;
    e.due = retry_at(now, e.lost_from(), e.cadence.interval);
}

#[cfg(test)]
mod tests;
