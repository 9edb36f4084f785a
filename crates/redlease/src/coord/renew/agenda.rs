//! The renewer's timetable: when each kept-alive lease is looked at next,
//! and which leases each node's lane has yet to send.
//!
//! Calendars of lease ids by the millisecond, so that the scheduler and
//! the lanes touch only the leases whose moment came, never the whole
//! table: the work per renewal must not grow with the number of leases
//! kept alive. Leases renewed in one batch fall due at the same
//! moment, so a calendar holds a few hundred days however many leases it
//! lists; adding or taking a lease is an append or a pop on one day's
//! list, where a binary heap of 100,000 items cost a cache miss per level.
//!
//! Moments are rounded up to the millisecond, the resolution of the
//! runtime's timers: a lease is never looked at before its moment.
//!
//! Ids are never removed from the middle of a list. An entry records the
//! moment of its live listing on each calendar; an id listed on another
//! day, or whose lease is gone, is stale and skipped when its day comes.
//! So replanning a lease is one append.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::{Entry, Slab};

/// A moment on the agenda's clock: milliseconds since its epoch, rounded
/// up, plus one, so that 0 means "none".
pub(super) type Tick = u64;

/// Lease ids by the day (tick) they are listed for.
#[derive(Default)]
struct Calendar {
    days: BTreeMap<Tick, Vec<u64>>,
}

impl Calendar {
    fn push(&mut self, tick: Tick, id: u64) {
        self.days.entry(tick).or_default().push(id);
    }

    /// The first listing, of a day up to `now`, taken off the calendar.
    fn pop(&mut self, now: Tick) -> Option<(Tick, u64)> {
        let mut first = self.days.first_entry()?;
        let tick = *first.key();
        if tick > now {
            return None;
        }
        let id = first.get_mut().pop();
        if first.get().is_empty() {
            first.remove();
        }
        id.map(|id| (tick, id))
    }

    fn first(&self) -> Option<(Tick, u64)> {
        let (&tick, ids) = self.days.first_key_value()?;
        ids.last().map(|&id| (tick, id))
    }

    fn clear(&mut self) {
        self.days.clear();
    }
}

/// The leases' timetable; see the module docs.
pub(super) struct Agenda {
    epoch: Instant,
    /// When each lease must be looked at: it falls due (or its retry
    /// does), or it is lost. The scheduler sleeps until the first.
    looks: Calendar,
    /// When each lease not queued may join a batch (half an interval
    /// before it is due): every wake-up of the scheduler takes these too,
    /// so that leases taken at different moments travel together.
    near: Calendar,
    /// Per node, the leases queued for its lane by the moment they would
    /// be reported lost, the most urgent first. A lease is queued on a
    /// node at most once at a time (its bit in `Entry::lanes`).
    lanes: Vec<Calendar>,
}

impl Agenda {
    pub(super) fn new(nodes: usize) -> Agenda {
        Agenda {
            epoch: Instant::now(),
            looks: Calendar::default(),
            near: Calendar::default(),
            lanes: (0..nodes).map(|_| Calendar::default()).collect(),
        }
    }

    /// `at` on the agenda's clock, rounded up: a listing for it never
    /// comes early.
    fn tick(&self, at: Instant) -> Tick {
        self.ms_since_epoch(at, true)
    }

    /// `now` on the agenda's clock, rounded down: a listing up to it is
    /// never early.
    fn now(&self, now: Instant) -> Tick {
        self.ms_since_epoch(now, false)
    }

    fn ms_since_epoch(&self, at: Instant, round_up: bool) -> Tick {
        let ns = at.saturating_duration_since(self.epoch).as_nanos();
        let ms = match round_up {
            true => ns.div_ceil(1_000_000),
            false => ns / 1_000_000,
        };
        u64::try_from(ms).unwrap_or(u64::MAX - 1) + 1
    }

    fn instant(&self, tick: Tick) -> Instant {
        self.epoch + Duration::from_millis(tick.saturating_sub(1))
    }

    /// Forgets every lease.
    pub(super) fn clear(&mut self) {
        self.looks.clear();
        self.near.clear();
        self.lanes.iter_mut().for_each(Calendar::clear);
    }

    /// Puts lease `id`'s next look on the agenda, and, while it is not
    /// queued, the moment it may join a batch. Call after anything that
    /// moves its due time or its end.
    pub(super) fn plan(&mut self, id: u64, e: &mut Entry) {
        let look = self.tick(e.due.min(e.lost_from()));
        if look != e.look_at {
            e.look_at = look;
            self.looks.push(look, id);
        }
        if !e.queued {
            let near = self.tick(e.due.checked_sub(e.cadence.interval / 2).unwrap_or(e.due));
            if near != e.near_at {
                e.near_at = near;
                self.near.push(near, id);
            }
        }
    }

    /// Queues lease `id` on every lane that does not have it queued.
    pub(super) fn enqueue(&mut self, id: u64, e: &mut Entry) {
        let urgency = self.tick(e.lost_from());
        for (i, lane) in self.lanes.iter_mut().enumerate() {
            let bit = 1u64 << i;
            if e.lanes & bit == 0 {
                e.lanes |= bit;
                lane.push(urgency, id);
            }
        }
    }

    /// The earliest moment a lease must be looked at, if any lease is
    /// kept alive.
    pub(super) fn next_look(&mut self, leases: &Slab) -> Option<Instant> {
        while let Some((tick, id)) = self.looks.first() {
            if leases.get(&id).is_some_and(|e| e.look_at == tick) {
                return Some(self.instant(tick));
            }
            self.looks.pop(tick);
        }
        None
    }

    /// The next lease whose look has come by `now`, taken off the agenda.
    pub(super) fn pop_look(&mut self, now: Instant, leases: &mut Slab) -> Option<u64> {
        let now = self.now(now);
        pop(&mut self.looks, now, leases, |e, tick| {
            take(&mut e.look_at, tick)
        })
    }

    /// The next lease not queued that may join a batch by `now`, taken off
    /// the agenda.
    pub(super) fn pop_near(&mut self, now: Instant, leases: &mut Slab) -> Option<u64> {
        let now = self.now(now);
        pop(&mut self.near, now, leases, |e, tick| {
            take(&mut e.near_at, tick) && !e.queued
        })
    }

    /// The most urgent lease queued for node `i`'s lane, taken off it.
    pub(super) fn pop_lane(&mut self, i: usize, leases: &mut Slab) -> Option<u64> {
        let bit = 1u64 << i;
        pop(&mut self.lanes[i], Tick::MAX, leases, |e, _| {
            let live = e.lanes & bit != 0;
            e.lanes &= !bit;
            live
        })
    }
}

/// Whether a listing for `tick` is the live one that `listed` records; if
/// it is, it is taken (`listed` then records none).
fn take(listed: &mut Tick, tick: Tick) -> bool {
    let live = *listed == tick;
    if live {
        *listed = 0;
    }
    live
}

/// Takes listings of `calendar` up to `now` until one is `live` (which
/// may update its entry); returns its lease.
fn pop(
    calendar: &mut Calendar,
    now: Tick,
    leases: &mut Slab,
    mut live: impl FnMut(&mut Entry, Tick) -> bool,
) -> Option<u64> {
    while let Some((tick, id)) = calendar.pop(now) {
        if leases.get_mut(&id).is_some_and(|e| live(e, tick)) {
            return Some(id);
        }
    }
    None
}
