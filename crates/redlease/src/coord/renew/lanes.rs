//! What each node's lane task does: take the batch due for its node, send
//! it, and apply the answers to every lease in it.

use crate::coord::renew::lane::{Delivery, ExtendMany, Lane, CHUNK};
use crate::core::keys::hash_slot;
use crate::core::mode::Hold;
use crate::core::node_error::{NodeError, NodeErrorKind};
use crate::core::renew_schedule::{patience, Lag, LagChange};
use crate::core::telemetry;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

use super::*;

/// The target of the events that say a node's renewals fail and work
/// again, whatever module sends them: a subscriber that shows warnings
/// only can show these two at info (the CLI does).
pub(crate) const RENEWAL_TARGET: &str = "redlease::renewal";

/// Node `i`'s lane: sends what is queued for it, one batch at a time.
pub(super) async fn lane(inner: Arc<Inner>, i: usize) {
    let mut lane = Lane::new(inner.nodes[i].clone());
    let mut lag = Lag::default();
    let mut failing = false;
    let mut pause = Duration::ZERO;
    loop {
        let work = inner.work[i].notified();
        let Some(batch) = take_batch(&inner, i) else {
            tell_lag(&inner, &lane, lag.idle(), Duration::ZERO, Duration::ZERO);
            tokio::select! {
                () = inner.stop.cancelled() => return,
                () = work => continue,
            }
        };
        let latest = batch
            .sent
            .iter()
            .map(|s| s.lost_from)
            .max()
            .unwrap_or_else(Instant::now);
        let sent = Instant::now();
        keep_time(&inner, &lane, &mut lag, &batch, sent);
        let span = tracing::debug_span!(
            "redlease.renewal_batch",
            node = %lane.node().id(),
            leases = batch.sent.len(),
            outcome = tracing::field::Empty,
            elapsed_ms = tracing::field::Empty,
        );
        let delivery = tokio::select! {
            () = inner.stop.cancelled() => return,
            d = lane.deliver(&batch.calls, patience(sent, latest)).instrument(span.clone()) => d,
        };
        inner.round_trips.fetch_add(1, Ordering::Relaxed);
        let outcome = match &delivery {
            Delivery::Answered(_) => "answered",
            Delivery::Abandoned => "abandoned",
            Delivery::Unsent(_) => "unsent",
        };
        span.record("outcome", outcome);
        span.record("elapsed_ms", sent.elapsed().as_secs_f64() * 1e3);
        span.in_scope(|| tracing::debug!(outcome, "renewal batch done"));
        telemetry::renewal_batch(lane.node().id().addr(), batch.sent.len(), outcome);
        let trouble = match &delivery {
            Delivery::Answered(answers) => answers.iter().find_map(|a| match a {
                Some(Err(e)) => Some(format!("{e:#}")),
                None => Some(format!(
                    "{}: a shard did not answer in time",
                    lane.node().id()
                )),
                Some(Ok(_)) => None,
            }),
            Delivery::Abandoned => {
                inner.abandoned.fetch_add(1, Ordering::Relaxed);
                Some(format!("{}: no answer in time", lane.node().id()))
            }
            Delivery::Unsent(e) => Some(format!("{e:#}")),
        };
        match (&trouble, failing) {
            (Some(why), false) => {
                tracing::warn!(target: RENEWAL_TARGET, error = %why, "renewals to a node are failing")
            }
            (None, true) => tracing::info!(
                target: RENEWAL_TARGET,
                node = %lane.node().id(),
                "renewals to the node work again"
            ),
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

/// Tells whether node `lane`'s renewals keep to their timetable, by how
/// late `batch` leaves at `sent` (see `Lag`): a warning when the first of
/// the Locker's lanes falls behind, naming the load, so that an overload
/// is told while the leases are still valid rather than only by their
/// loss; and when the last caught up.
fn keep_time(inner: &Inner, lane: &Lane, lag: &mut Lag, batch: &Batch, sent: Instant) {
    let late = sent.saturating_duration_since(batch.due);
    telemetry::renewal_lateness(lane.node().id().addr(), late);
    let change = lag.observe(late, batch.interval);
    tell_lag(inner, lane, change, late, batch.interval);
}

/// Tells `change` of a lane's [`Lag`] (a batch `late` for leases renewed
/// every `interval`) if it changes the Locker's.
fn tell_lag(
    inner: &Inner,
    lane: &Lane,
    change: Option<LagChange>,
    late: Duration,
    interval: Duration,
) {
    let Some(change) = change else {
        return;
    };
    // Told for the Locker, not for each lane: the first lane behind, the
    // last to catch up.
    let told = match change {
        LagChange::FellBehind => inner.behind.fetch_add(1, Ordering::Relaxed) == 0,
        LagChange::CaughtUp => inner.behind.fetch_sub(1, Ordering::Relaxed) == 1,
    };
    if !told {
        return;
    }
    match change {
        LagChange::FellBehind => {
            let kept_alive = inner.table().leases.len();
            tracing::warn!(
                target: RENEWAL_TARGET,
                node = %lane.node().id(),
                late_ms = u64::try_from(late.as_millis()).unwrap_or(u64::MAX),
                interval_ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
                kept_alive,
                nodes = inner.nodes.len(),
                "renewals are falling behind: {kept_alive} leases kept alive, renewed every \
                 {:?}, and a batch left {late:?} after it was due; leases will be lost unless \
                 fewer are kept alive, their TTL is longer, or the servers answer faster",
                interval
            );
        }
        LagChange::CaughtUp => tracing::info!(
            target: RENEWAL_TARGET,
            node = %lane.node().id(),
            "renewals keep to their timetable again"
        ),
    }
}

/// Takes the most urgent leases queued for node `i`, up to [`TRIP`], with
/// their script calls: the batch another lane encoded last if it took the
/// same leases and nothing changed since, or a new one (encoded under the
/// table's lock, so that keys and tokens are read in place rather than
/// copied).
pub(super) fn take_batch(inner: &Inner, i: usize) -> Option<Arc<Batch>> {
    let mut table = inner.table();
    let Table {
        leases,
        agenda,
        version,
        last_batch,
        last_batch_left,
    } = &mut *table;
    let mut taken = Vec::new();
    while taken.len() < TRIP {
        match agenda.pop_lane(i, leases) {
            Some(id) => taken.push(id),
            None => break,
        }
    }
    if taken.is_empty() {
        return None;
    }
    // In table order: applying the answers then walks the table forwards.
    taken.sort_unstable_by_key(|&id| crate::core::slab::slot_of(id));
    // Healthy lanes are queued the same leases in the same order, so they
    // take the same ones.
    if let Some(batch) = last_batch
        .as_ref()
        .filter(|b| b.version == *version && b.taken == taken)
    {
        let batch = batch.clone();
        *last_batch_left = last_batch_left.saturating_sub(1);
        if *last_batch_left == 0 {
            *last_batch = None;
        }
        return Some(batch);
    }
    let mut sent = Vec::with_capacity(taken.len());
    let mut entries = Vec::with_capacity(taken.len());
    let now = Instant::now();
    let (mut due, mut interval) = (now, Duration::MAX);
    for &id in &taken {
        if let Some(e) = leases.get(&id) {
            due = due.min(e.due);
            interval = interval.min(e.cadence.interval);
            sent.push(Sent {
                id,
                cadence: e.cadence,
                round: e.round,
                lost_from: e.lost_from(),
                keys: e.owner.claim.len(),
            });
            entries.push(e);
        }
    }
    // Read holds and permits have a script of their own, with one marker
    // per call: they go after the writers' leases, grouped by kind (and
    // by slot on a cluster), in calls of their own.
    // Multi-locks go last, each in calls of its own.
    let grouped = |e: &Entry| e.owner.hold() != Hold::Exclusive || e.owner.claim.is_set();
    if inner.by_slot || entries.iter().any(|e| grouped(e)) {
        let mut order: Vec<(u64, u16, usize)> = entries
            .iter()
            .enumerate()
            .map(|(k, e)| {
                let slot = if inner.by_slot {
                    hash_slot(e.owner.key())
                } else {
                    0
                };
                let rank = match e.owner.claim.is_set() {
                    true => u64::MAX,
                    false => rank(e.owner.hold()),
                };
                (rank, slot, k)
            })
            .collect();
        order.sort_unstable();
        sent = order.iter().map(|&(_, _, k)| sent[k]).collect();
        entries = order.iter().map(|&(_, _, k)| entries[k]).collect();
    }
    let bind_lineage = inner.nodes.first().is_some_and(|n| n.binds_lineage());
    let calls = calls_of(&entries, inner.by_slot, bind_lineage);
    let batch = Arc::new(Batch {
        sent,
        calls,
        taken,
        version: *version,
        due,
        interval,
    });
    // Kept for the other lanes only.
    *last_batch_left = inner.nodes.len() - 1;
    *last_batch = (*last_batch_left > 0).then(|| batch.clone());
    Some(batch)
}

/// Where holds of a kind go in a batch: writers' leases first, then read
/// holds, then permits by their semaphore's size and their weight (each
/// kind renewed by calls of its own).
fn rank(hold: Hold) -> u64 {
    match hold {
        Hold::Exclusive => 0,
        Hold::Shared => 1,
        Hold::Permit {
            permits, weight, ..
        } => 2 + (u64::from(permits.get()) << 32 | u64::from(weight.get())),
    }
}

/// The script calls renewing `entries` in order: up to [`CHUNK`] leases
/// each, a new call wherever the mode changes, and, `by_slot`, wherever
/// the hash slot changes.
/// `bind_lineage`: the nodes bind locks to their replication lineage.
pub(super) fn calls_of(entries: &[&Entry], by_slot: bool, bind_lineage: bool) -> Vec<ExtendMany> {
    let mut calls = Vec::new();
    let lone = entries
        .iter()
        .take_while(|e| !e.owner.claim.is_set())
        .count();
    let (mut rest, many) = entries.split_at(lone);
    // A multi-lock's names: one call per hold (alone, then shared), and
    // on a cluster per slot, in a row (its flags are the next places of
    // the batch, its lease renewed when all of them say so).
    for e in many {
        let owner = &*e.owner;
        let keys: Vec<(&str, Hold)> = owner
            .claim
            .keys()
            .iter()
            .zip(owner.claim.holds())
            .map(|(k, &h)| (&*k.lock, h))
            .collect();
        let mut groups: Vec<(u16, u64, Hold)> = keys
            .iter()
            .map(|&(k, h)| (if by_slot { hash_slot(k) } else { 0 }, rank(h), h))
            .collect();
        groups.sort_unstable_by_key(|&(slot, rank, _)| (slot, rank));
        groups.dedup();
        for (slot, _, hold) in groups {
            let leases = keys
                .iter()
                .filter(move |&&(k, h)| (!by_slot || hash_slot(k) == slot) && h == hold)
                .map(|&(k, _)| (k, owner.token.as_str(), e.cadence.hold));
            let slot = by_slot.then_some(slot);
            calls.push(ExtendMany::new(leases, hold, slot, bind_lineage));
        }
    }
    let many_calls = std::mem::take(&mut calls);
    while !rest.is_empty() {
        let mut len = rest.len().min(CHUNK);
        let (slot, hold) = (hash_slot(rest[0].owner.key()), rest[0].owner.hold());
        len = rest[..len]
            .iter()
            .position(|e| e.owner.hold() != hold || (by_slot && hash_slot(e.owner.key()) != slot))
            .unwrap_or(len);
        let (call, tail) = rest.split_at(len);
        let leases = call
            .iter()
            .map(|e| (&**e.owner.key(), e.owner.token.as_str(), e.cadence.hold));
        let slot = by_slot.then_some(slot);
        calls.push(ExtendMany::new(leases, hold, slot, bind_lineage));
        rest = tail;
    }
    calls.extend(many_calls);
    calls
}

/// What a node said of one lease of a batch, over all its keys.
enum Said<'a> {
    Yes,
    /// Some key is not ours any more.
    No,
    /// Some key's call failed.
    Failed(&'a NodeError),
    /// Some key's shard did not answer in time.
    Silent,
}

impl<'a> Said<'a> {
    /// Both keys' words together: a refusal rules, then a failure, then
    /// silence; a yes only when both said yes.
    fn and(self, other: Said<'a>) -> Said<'a> {
        match (self, other) {
            (Said::No, _) | (_, Said::No) => Said::No,
            (Said::Failed(e), _) | (_, Said::Failed(e)) => Said::Failed(e),
            (Said::Silent, _) | (_, Said::Silent) => Said::Silent,
            (Said::Yes, Said::Yes) => Said::Yes,
        }
    }
}

/// Folds node `i`'s answer to a batch sent at `sent` into its leases.
pub(super) fn apply(inner: &Inner, i: usize, batch: &Batch, sent: Instant, delivery: Delivery) {
    let now = Instant::now();
    let mut table = inner.table();
    let mut lost = Vec::new();
    // The call and the place in it of each lease, in the batch's order.
    let mut places = batch
        .calls
        .iter()
        .enumerate()
        .flat_map(|(c, call)| (0..call.len()).map(move |p| (c, p)));
    for s in &batch.sent {
        // A multi-lock's keys take several places: the node holds the
        // lease only if it renewed every key.
        let mut said = Said::Yes;
        for _ in 0..s.keys {
            let (c, p) = places.next().unwrap_or_default();
            if let Delivery::Answered(answers) = &delivery {
                let one = match &answers[c] {
                    None => Said::Silent,
                    Some(Ok(flags)) if flags[p] => Said::Yes,
                    Some(Ok(_)) => Said::No,
                    Some(Err(e)) => Said::Failed(e),
                };
                said = said.and(one);
            }
        }
        let Table { leases, agenda, .. } = &mut *table;
        let Some(entry) = leases.get_mut(&s.id) else {
            continue; // released meanwhile
        };
        let (ttl, drift) = (s.cadence.ttl, s.cadence.drift);
        match &delivery {
            Delivery::Answered(_) => match said {
                // This call's shard was silent: as for an abandoned batch.
                Said::Silent => entry.bounds.unknown(i, sent, ttl, drift, false),
                Said::Yes => {
                    entry.bounds.confirmed(i, sent, ttl, drift, s.round);
                    entry.answered(i);
                }
                Said::No => {
                    entry.bounds.refused(i);
                    entry.answered(i);
                }
                Said::Failed(e) => {
                    entry.bounds.unknown(i, sent, ttl, drift, true);
                    entry.failed(i, e.clone());
                }
            },
            Delivery::Abandoned => entry.bounds.unknown(i, sent, ttl, drift, false),
            Delivery::Unsent(e) => {
                let silent = matches!(e.kind(), NodeErrorKind::Timeout(_));
                entry.bounds.unsent(i, !silent);
                entry.failed(i, e.clone());
            }
        }
        if entry.evaluate(now) {
            agenda.plan(s.id, entry);
        } else {
            lost.push(s.id);
        }
    }
    for id in lost {
        table.remove(id);
    }
}
