//! The read-write lock's checker: judges the leases and the writers' waits
//! of a run of read and write locks. Pure (no I/O, no clocks), like the
//! exclusive lock's checker, so it is tested on synthetic histories,
//! including ones it must flag.
//!
//! Times are offsets from the run's epoch on the monotonic clock, as in
//! the history. Each lease's interval is `[returned, end]` with `end =
//! min(release began, valid_until)` (`valid_until` after the last extend);
//! an interval with `end <= returned` is empty (the lease came back
//! expired, or was released at once) and overlaps nothing. Checks, per
//! lock:
//!
//! 1. `writer_overlap`: the interval of a write lease intersects the
//!    interval of another lease of the lock, read or write. Intervals that
//!    only touch (`end == start`) do not intersect; read leases may overlap
//!    each other. One violation per intersecting pair.
//! 2. `stale_read`: a read lease carries a generation (its token) smaller
//!    than the token of a write lease committed before it, that is, whose
//!    interval ended before the read lease's `min(returned -
//!    expired_tolerance, valid_until at return)` (an empty write interval
//!    ends at its `returned`). One violation per read lease, reported
//!    against the highest such write token.
//! 3. `fencing`: write tokens strictly increase in the order the write
//!    leases were returned.
//! 4. `writer_starved`: a writer that waited from `began` to `ended` (it
//!    acquired or gave up) is starved when readers that arrived after it
//!    kept it out for longer than `starvation_bound`. Precisely: the leases
//!    that explain its wait are every other write lease and every read
//!    lease whose acquire began by `began + arrival_grace` (readers already
//!    there, or arriving before its place in the name's queue can be in
//!    place); `free` is the latest end of those explaining leases that were
//!    returned before `ended`, at least `began` and at most `ended`. The
//!    writer is starved when `ended - free` (less process stalls) exceeds
//!    `starvation_bound` and some late reader (acquire began after `began +
//!    arrival_grace`) was returned before `ended` and still held after
//!    `free`. A writer that waits long only behind earlier readers or
//!    writers, or for a quorum it cannot reach while no late reader gets
//!    in, is not starved.
//! 5. `expired_lease_returned`: a lease returned already expired
//!    (`returned > valid_until at return + expired_tolerance`, not counting
//!    time the process was stalled after `valid_until`).
//!
//! Why a correct lock is never flagged. Measurement only narrows the
//! intervals of (1) ("returned" is read after the call returns, "release
//! began" before it starts), so noise can hide an overlap but never invent
//! one. For (2): the write was granted on a majority by its `returned`,
//! so before the read lease's `valid_until`, and the reader's holds last
//! until then. On a node both majorities share, either the writer's grant
//! came first, and the reader reads its generation there (generations
//! outlive their writers, given the library's durability and restart
//! quarantine), or the writer was granted on a node the reader held,
//! which a correct lock refuses. For
//! (4): the wait the explaining leases account for is excluded, and a late
//! reader that got in is what writer preference forbids.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::examples::{fmt_ms, keep_example};
pub use crate::history::Mode;
use crate::history::{Call, History, LeaseId, Op, Outcome};

/// One successful acquisition of a read or write lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RwLease {
    /// Index of the lock (resource).
    pub lock: usize,
    pub mode: Mode,
    pub lease: LeaseId,
    pub worker: usize,
    /// Just before the acquire started (when the caller arrived).
    pub invoked: Duration,
    /// Just after the acquire returned.
    pub returned: Duration,
    /// The lease's `valid_until` as the acquire returned it.
    pub valid_until: Duration,
    /// The latest `valid_until` after the acquire, as its extends, release
    /// or abandon recorded it (see [`leases`]; `None`: no word after the
    /// acquire's).
    pub extended_until: Option<Duration>,
    /// Just before its release (or abandon) started.
    pub release_began: Option<Duration>,
    /// Write: its fencing token. Read: the write generation it saw.
    pub token: Option<u64>,
}

/// One wait of a writer, from the start of its write-lock call to its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriterWait {
    pub lock: usize,
    pub worker: usize,
    /// Just before the write-lock call started.
    pub began: Duration,
    /// Just after it returned, with the lease or having given up.
    pub ended: Duration,
    /// The lease it got (`None`: it gave up).
    pub lease: Option<LeaseId>,
}

/// How strict the checker is about timing.
#[derive(Clone, Debug)]
pub struct RwConfig {
    /// The longest readers that arrived after a waiting writer may keep it
    /// out (check 4).
    pub starvation_bound: Duration,
    /// Readers whose acquire began this soon after a writer began waiting
    /// count as earlier than it: its place in the name's queue takes a
    /// round trip to be in place, longer under delayed links.
    pub arrival_grace: Duration,
    /// How far after `valid_until` a lease may be seen returned before it
    /// counts as returned expired; also the margin of check 2.
    pub expired_tolerance: Duration,
    /// Times the whole process was not running (`(start, end)`, see the
    /// watchdog): not held against validity or waits.
    pub stalls: Vec<(Duration, Duration)>,
}

impl Default for RwConfig {
    fn default() -> Self {
        RwConfig {
            starvation_bound: Duration::from_secs(2),
            arrival_grace: Duration::from_millis(50),
            expired_tolerance: Duration::from_millis(2),
            stalls: Vec::new(),
        }
    }
}

impl RwConfig {
    /// How much of `[from, to]` the process spent stalled.
    fn stalled(&self, from: Duration, to: Duration) -> Duration {
        stalled(&self.stalls, from, to)
    }
}

/// How much of `[from, to]` the process spent in `stalls`.
fn stalled(stalls: &[(Duration, Duration)], from: Duration, to: Duration) -> Duration {
    stalls
        .iter()
        .map(|&(s, e)| e.min(to).saturating_sub(s.max(from)))
        .sum()
}

/// Violations by category, with the first few examples of each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RwVerdict {
    pub writer_overlap: u64,
    pub stale_read: u64,
    pub fencing: u64,
    pub writer_starved: u64,
    pub expired_lease_returned: u64,
    pub examples: BTreeMap<&'static str, Vec<String>>,
}

impl RwVerdict {
    pub fn total(&self) -> u64 {
        self.counts().iter().map(|(_, n)| n).sum()
    }

    /// `(name, count)` in the order of the JSON report.
    pub fn counts(&self) -> [(&'static str, u64); 5] {
        [
            ("writer_overlap", self.writer_overlap),
            ("stale_read", self.stale_read),
            ("fencing", self.fencing),
            ("writer_starved", self.writer_starved),
            ("expired_lease_returned", self.expired_lease_returned),
        ]
    }

    fn example(&mut self, category: &'static str, text: impl FnOnce() -> String) {
        keep_example(&mut self.examples, category, text);
    }
}

/// A lease's interval as the checks see it (the semaphore checker's
/// too).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span<'a> {
    pub(crate) lease: &'a RwLease,
    pub(crate) start: Duration,
    /// `min(release began, latest valid_until)`, at least `start`.
    pub(crate) end: Duration,
}

impl<'a> Span<'a> {
    pub(crate) fn of(lease: &'a RwLease) -> Span<'a> {
        let valid = lease.extended_until.unwrap_or(lease.valid_until);
        let end = lease.release_began.map_or(valid, |r| r.min(valid));
        Span {
            lease,
            start: lease.returned,
            end: end.max(lease.returned),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.end <= self.start
    }

    fn is_write(&self) -> bool {
        self.lease.mode == Mode::Write
    }

    /// "write lease 3 (worker 1, token Some(5)) held [10.0ms, 40.0ms]".
    pub(crate) fn describe(&self) -> String {
        let l = self.lease;
        format!(
            "{} lease {} (worker {}, token {:?}) held [{}, {}]",
            l.mode.label(),
            l.lease,
            l.worker,
            l.token,
            fmt_ms(self.start),
            fmt_ms(self.end)
        )
    }
}

/// What a read-write run tells its checker beside the history.
#[derive(Clone, Debug)]
pub struct ReadWrite {
    /// Workers whose writer waits are judged for starvation (check 4): the
    /// clients that reach every node directly. A client behind faulted
    /// links may wait for a quorum it cannot reach while readers that reach
    /// one get in: no starvation, but the check could not tell.
    pub waits_judged: Vec<usize>,
    /// [`RwConfig::starvation_bound`].
    pub starvation_bound: Duration,
    /// A negative control: the check that must flag it (its name in
    /// [`RwVerdict::counts`]); another violation alone does not pass it.
    pub flagged_by: Option<&'static str>,
}

/// Judges a recorded read-write run: its leases and the waits of the
/// writers in [`ReadWrite::waits_judged`], with `stalls` left out.
pub fn judge(history: &History, rw: &ReadWrite, stalls: &[(Duration, Duration)]) -> RwVerdict {
    let config = RwConfig {
        starvation_bound: rw.starvation_bound,
        stalls: stalls.to_vec(),
        ..RwConfig::default()
    };
    check(
        &leases(history),
        &writer_waits(history, &rw.waits_judged),
        &config,
    )
}

/// Every successful acquisition in `history`, of either mode, with what
/// the calls made under it say about its interval (the exclusive checker
/// builds its spans from these too): the latest validity is the last word
/// of an extend, a release or an abandon (each records the lease's
/// `valid_until` as it stood: extends move it, later on success, earlier
/// on failure, and so do a kept-alive lease's renewals), and the release
/// began at the earliest release or abandon.
pub fn leases(history: &History) -> Vec<RwLease> {
    let mut by_lease: BTreeMap<LeaseId, Vec<&Op>> = BTreeMap::new();
    for op in history {
        if let Some(lease) = op.lease {
            by_lease.entry(lease).or_default().push(op);
        }
    }
    let mut out = Vec::with_capacity(by_lease.len());
    for (lease, mut ops) in by_lease {
        ops.sort_by_key(|op| op.complete);
        let Some(acquire) = ops
            .iter()
            .find(|op| matches!(op.call, Call::Lock | Call::TryLock) && op.outcome == Outcome::Ok)
        else {
            continue;
        };
        let Some(valid_until) = acquire.valid_until else {
            continue;
        };
        let extended_until = ops
            .iter()
            .rev()
            .filter(|op| matches!(op.call, Call::Extend | Call::Release | Call::Abandon))
            .filter(|op| op.complete >= acquire.complete)
            .find_map(|op| op.valid_until);
        let release_began = ops
            .iter()
            .filter(|op| matches!(op.call, Call::Release | Call::Abandon))
            .map(|op| op.invoke)
            .min();
        out.push(RwLease {
            lock: acquire.lock,
            mode: acquire.mode,
            lease,
            worker: acquire.worker,
            invoked: acquire.invoke,
            returned: acquire.complete,
            valid_until,
            extended_until,
            release_began,
            token: acquire.token,
        });
    }
    out
}

/// The waits of write-lock calls that wait (`lock`, not `try_lock`) by
/// `workers`, granted or not.
pub fn writer_waits(history: &History, workers: &[usize]) -> Vec<WriterWait> {
    history
        .iter()
        .filter(|op| op.call == Call::Lock && op.mode == Mode::Write)
        .filter(|op| workers.contains(&op.worker))
        .map(|op| WriterWait {
            lock: op.lock,
            worker: op.worker,
            began: op.invoke,
            ended: op.complete,
            lease: op.lease.filter(|_| op.outcome == Outcome::Ok),
        })
        .collect()
}

/// Runs every check.
pub fn check(leases: &[RwLease], waits: &[WriterWait], config: &RwConfig) -> RwVerdict {
    let mut verdict = RwVerdict::default();
    let locks = by_lock(leases);
    for (&lock, spans) in &locks {
        check_overlap(lock, spans, &mut verdict);
        check_stale_reads(lock, spans, config, &mut verdict);
        check_fencing(lock, spans, &mut verdict);
    }
    for wait in waits {
        let spans = locks.get(&wait.lock).map_or(&[][..], Vec::as_slice);
        check_starvation(wait, spans, config, &mut verdict);
    }
    check_expired(leases, config, &mut verdict);
    verdict
}

/// Spans per lock, sorted by start (then lease id).
fn by_lock(leases: &[RwLease]) -> BTreeMap<usize, Vec<Span<'_>>> {
    let mut map: BTreeMap<usize, Vec<Span<'_>>> = BTreeMap::new();
    for lease in leases {
        map.entry(lease.lock).or_default().push(Span::of(lease));
    }
    for list in map.values_mut() {
        list.sort_by_key(|s| (s.start, s.lease.lease));
    }
    map
}

fn check_overlap(lock: usize, spans: &[Span<'_>], verdict: &mut RwVerdict) {
    // Spans still open at the current start; sorted by start, so any
    // earlier span that ends after this one starts overlaps it.
    let mut open: Vec<&Span<'_>> = Vec::new();
    for span in spans.iter().filter(|s| !s.is_empty()) {
        open.retain(|o| o.end > span.start);
        for other in open.iter().filter(|o| o.is_write() || span.is_write()) {
            verdict.writer_overlap += 1;
            verdict.example("writer_overlap", || {
                format!("lock {lock}: {} and {}", other.describe(), span.describe())
            });
        }
        open.push(span);
    }
}

fn check_stale_reads(lock: usize, spans: &[Span<'_>], config: &RwConfig, verdict: &mut RwVerdict) {
    let mut writes: Vec<(&Span<'_>, u64)> = spans
        .iter()
        .filter(|s| s.is_write())
        .filter_map(|s| s.lease.token.map(|t| (s, t)))
        .collect();
    writes.sort_by_key(|(s, _)| (s.end, s.lease.lease));
    let mut writes = writes.into_iter().peekable();
    // The highest token of the writes committed so far.
    let mut committed: Option<(&Span<'_>, u64)> = None;
    // Writes that ended before this point were certainly granted while the
    // read lease's holds were not yet in place.
    let before = |read: &Span<'_>| {
        let l = read.lease;
        (l.returned.saturating_sub(config.expired_tolerance)).min(l.valid_until)
    };
    let mut reads: Vec<&Span<'_>> = spans.iter().filter(|s| !s.is_write()).collect();
    reads.sort_by_key(|r| (before(r), r.lease.lease));
    for read in reads {
        while let Some(&(w, token)) = writes.peek() {
            if w.end >= before(read) {
                break;
            }
            if committed.is_none_or(|(_, max)| token > max) {
                committed = Some((w, token));
            }
            writes.next();
        }
        let (Some(seen), Some((w, max))) = (read.lease.token, committed) else {
            continue;
        };
        if seen < max {
            verdict.stale_read += 1;
            verdict.example("stale_read", || {
                format!(
                    "lock {lock}: read lease {} (worker {}) returned at {} saw generation {seen}, \
                     but {} had ended",
                    read.lease.lease,
                    read.lease.worker,
                    fmt_ms(read.start),
                    w.describe()
                )
            });
        }
    }
}

fn check_fencing(lock: usize, spans: &[Span<'_>], verdict: &mut RwVerdict) {
    let mut highest: Option<(u64, LeaseId)> = None;
    for span in spans.iter().filter(|s| s.is_write()) {
        let Some(token) = span.lease.token else {
            continue;
        };
        if let Some((max, by)) = highest {
            if token <= max {
                verdict.fencing += 1;
                verdict.example("fencing", || {
                    format!(
                        "lock {lock}: write lease {} returned at {} got token {token}, not above \
                         token {max} of earlier write lease {by}",
                        span.lease.lease,
                        fmt_ms(span.start)
                    )
                });
            }
        }
        if highest.is_none_or(|(max, _)| token > max) {
            highest = Some((token, span.lease.lease));
        }
    }
}

fn check_starvation(
    wait: &WriterWait,
    spans: &[Span<'_>],
    config: &RwConfig,
    verdict: &mut RwVerdict,
) {
    let (began, ended) = (wait.began, wait.ended);
    let cutoff = began + config.arrival_grace;
    // Leases other than its own that were let in before it ended.
    let others = spans
        .iter()
        .filter(|s| !s.is_empty() && s.start < ended && Some(s.lease.lease) != wait.lease);
    let explains = |s: &&Span<'_>| s.is_write() || s.lease.invoked <= cutoff;
    let free = others
        .clone()
        .filter(explains)
        .map(|s| s.end)
        .fold(began, Duration::max)
        .min(ended);
    let late: Vec<&Span<'_>> = others.filter(|s| !explains(s) && s.end > free).collect();
    let kept_out = ended
        .saturating_sub(free)
        .saturating_sub(config.stalled(free, ended));
    if late.is_empty() || kept_out <= config.starvation_bound {
        return;
    }
    verdict.writer_starved += 1;
    verdict.example("writer_starved", || {
        let first = late[0].lease;
        format!(
            "lock {}: writer (worker {}, lease {:?}) waited [{}, {}], {} of it after the earlier \
             holders let go at {}, while {} reader(s) that arrived later were let in (first: \
             lease {} arrived at {}, returned at {})",
            wait.lock,
            wait.worker,
            wait.lease,
            fmt_ms(began),
            fmt_ms(ended),
            fmt_ms(kept_out),
            fmt_ms(free),
            late.len(),
            first.lease,
            fmt_ms(first.invoked),
            fmt_ms(first.returned)
        )
    });
}

/// Whether the lease came back more than `tolerance` after its
/// `valid_until`. Time the process was not running (`stalls`) after
/// `valid_until` does not count: the lease may have come back just
/// before it.
pub(crate) fn returned_expired(
    lease: &RwLease,
    tolerance: Duration,
    stalls: &[(Duration, Duration)],
) -> bool {
    let late = lease
        .returned
        .saturating_sub(lease.valid_until)
        .saturating_sub(stalled(stalls, lease.valid_until, lease.returned));
    late > tolerance
}

fn check_expired(leases: &[RwLease], config: &RwConfig, verdict: &mut RwVerdict) {
    for lease in leases {
        if returned_expired(lease, config.expired_tolerance, &config.stalls) {
            verdict.expired_lease_returned += 1;
            verdict.example("expired_lease_returned", || {
                format!(
                    "lock {}: {} lease {} (worker {}) returned at {} but valid only until {}",
                    lease.lock,
                    lease.mode.label(),
                    lease.lease,
                    lease.worker,
                    fmt_ms(lease.returned),
                    fmt_ms(lease.valid_until)
                )
            });
        }
    }
}

#[cfg(test)]
mod tests;
