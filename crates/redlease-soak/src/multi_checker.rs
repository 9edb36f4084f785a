//! The multi-lock's checker: judges the leases of a run in which clients
//! take several names at once (`lock_all`) beside single names (`lock`),
//! and the waits of the multi-locks. Pure (no I/O, no clocks), like the
//! other checkers, so it is tested on synthetic histories, including ones
//! it must flag.
//!
//! A multi-lease is recorded once per name it holds (see
//! [`history`](crate::history)): each name's part is a lease of that name
//! with the name's own fencing token, so the checks are per name and see
//! the parts of multi-leases and single leases alike. A lease's interval
//! is the read-write checker's (see [`rw_checker`]): `[returned, end]`
//! with `end = min(release began, valid_until)` (`valid_until` after the
//! last extend, or the last renewal a kept-alive lease reported); an
//! interval with `end <= returned` is empty and overlaps nothing. Checks:
//!
//! 1. `name_overlap`: the intervals of two leases of one name intersect,
//!    whichever call took either (`lock_all` or `lock`). Intervals that
//!    only touch do not; one violation per intersecting pair.
//! 2. `fencing`: per name, tokens strictly increase in the order the
//!    leases of the name were returned.
//! 3. `expired_lease_returned`: a lease returned already expired
//!    (`returned > valid_until at return + expired_tolerance`, not
//!    counting time the process was stalled after `valid_until`); a
//!    multi-lease counts once.
//! 4. `partial_grant`: a granted multi-lease that, by its own word
//!    (`Lease::resources`), does not hold exactly the names asked for; or,
//!    with fencing on, holds a name without a token.
//! 5. `multi_starved`: a `lock_all` that waited from `began` to `ended`
//!    (it acquired or gave up) while single-name lockers that arrived
//!    after it kept getting its names, for longer than
//!    `starvation_bound`. As the read-write checker's writer starvation:
//!    the leases that explain its wait are those of its names, of either
//!    kind, whose acquire began by `began + arrival_grace` (there before
//!    it); `free` is the latest end of those returned before `ended`, at
//!    least `began` and at most `ended`. The wait is starved when `ended -
//!    free` (less process stalls) exceeds the bound and some later single
//!    lease of one of its names (acquire began after `began +
//!    arrival_grace`) was returned before `ended` and still held after
//!    `free`. Later multi-leases do not explain the wait, nor do they
//!    alone make it starved.
//!
//! Why a correct lock is never flagged by 1-4: the part of a multi-lease
//! on a name is held on a quorum of nodes until its `valid_until` like a
//! single lock's key (the same key: a node takes every name of the set
//! or none), and measurement only narrows intervals, as in the other
//! checkers; each name draws and settles its own token. Check 5 is no
//! safety property: a waiting set reserves its names only once it has
//! waited its TTL (the library's manual, "Several locks and handles"),
//! and faults slow it besides, so the bound is generous, and the report
//! gives the longest wait and the longest time later single lockers kept
//! a `lock_all` out, flagged or not.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::examples::{fmt_ms, keep_example};
use crate::history::{Call, History, LeaseId, Multi, Outcome};
use crate::rw_checker::{self, returned_expired, RwLease};

/// What a multi-lock run tells its checker beside the history.
#[derive(Clone, Debug)]
pub struct MultiLocks {
    /// Workers whose `lock_all` waits are judged for starvation (check
    /// 5): the clients that reach every node directly (as for the
    /// read-write checker's writers).
    pub waits_judged: Vec<usize>,
    /// [`MultiConfig::starvation_bound`].
    pub starvation_bound: Duration,
    /// Every client draws fencing tokens: a multi-lease's names must
    /// each carry one (check 4).
    pub fenced: bool,
    /// A negative control: the check that must flag it (its name in
    /// [`MultiVerdict::counts`]); another violation alone does not pass it.
    pub flagged_by: Option<&'static str>,
}

/// How strict the checker is about timing.
#[derive(Clone, Debug)]
pub struct MultiConfig {
    /// The longest single-name lockers that arrived after a waiting
    /// `lock_all` may keep it out (check 5).
    pub starvation_bound: Duration,
    /// Single leases whose acquire began this soon after a `lock_all`
    /// began waiting count as earlier than it.
    pub arrival_grace: Duration,
    /// How far after `valid_until` a lease may be seen returned before it
    /// counts as returned expired.
    pub expired_tolerance: Duration,
    /// Every lease draws a fencing token (check 4).
    pub fenced: bool,
    /// Times the whole process was not running (`(start, end)`, see the
    /// watchdog): not held against validity or waits.
    pub stalls: Vec<(Duration, Duration)>,
}

impl Default for MultiConfig {
    fn default() -> Self {
        MultiConfig {
            starvation_bound: Duration::from_secs(3),
            arrival_grace: Duration::from_millis(50),
            expired_tolerance: Duration::from_millis(2),
            fenced: true,
            stalls: Vec::new(),
        }
    }
}

/// One lease of one name: a single lock, or one name of a multi-lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameLease {
    pub lease: RwLease,
    /// The multi-lock it is a name of (`None`: a single lock).
    pub multi: Option<Multi>,
}

/// One `lock_all` call that waits, granted or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultiWait {
    pub worker: usize,
    pub multi: Multi,
    /// Just before the call started.
    pub began: Duration,
    /// Just after it returned.
    pub ended: Duration,
    pub granted: bool,
}

/// How the run's multi-locks fared: not violations, but what the report
/// shows of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MultiFigures {
    /// `lock_all` calls, and how many were granted.
    pub waiting: (u64, u64),
    /// `try_lock_all` calls, and how many were granted.
    pub once: (u64, u64),
    /// Single leases on the same names.
    pub single_leases: u64,
    /// The longest `lock_all` call of any client.
    pub max_wait: Duration,
    /// `lock_all` calls judged for starvation, and how many gave up.
    pub judged: (u64, u64),
    /// The longest judged one.
    pub max_judged_wait: Duration,
    /// The longest a judged one was kept out after the earlier holders
    /// let go, while later single lockers got its names (flagged or not).
    pub max_kept_out: Duration,
}

/// Violations by category, with the first few examples of each, and the
/// figures of the run's multi-locks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MultiVerdict {
    pub name_overlap: u64,
    pub fencing: u64,
    pub expired_lease_returned: u64,
    pub partial_grant: u64,
    pub multi_starved: u64,
    pub examples: BTreeMap<&'static str, Vec<String>>,
    pub figures: MultiFigures,
}

impl MultiVerdict {
    pub fn total(&self) -> u64 {
        self.counts().iter().map(|(_, n)| n).sum()
    }

    /// `(name, count)` in the order of the JSON report.
    pub fn counts(&self) -> [(&'static str, u64); 5] {
        [
            ("name_overlap", self.name_overlap),
            ("fencing", self.fencing),
            ("expired_lease_returned", self.expired_lease_returned),
            ("partial_grant", self.partial_grant),
            ("multi_starved", self.multi_starved),
        ]
    }

    fn example(&mut self, category: &'static str, text: impl FnOnce() -> String) {
        keep_example(&mut self.examples, category, text);
    }
}

/// Judges a recorded multi-lock run: its leases of every name, and the
/// `lock_all` waits of the workers in [`MultiLocks::waits_judged`], with
/// `stalls` left out.
pub fn judge(
    history: &History,
    multis: &MultiLocks,
    stalls: &[(Duration, Duration)],
) -> MultiVerdict {
    let config = MultiConfig {
        starvation_bound: multis.starvation_bound,
        fenced: multis.fenced,
        stalls: stalls.to_vec(),
        ..MultiConfig::default()
    };
    let waits: Vec<MultiWait> = waits(history)
        .into_iter()
        .filter(|w| multis.waits_judged.contains(&w.worker))
        .collect();
    let mut verdict = check(&leases(history), &waits, &config);
    let calls = history
        .iter()
        .filter(|op| op.multi.is_some() && op.is_call())
        .filter(|op| matches!(op.call, Call::Lock | Call::TryLock));
    for op in calls {
        let granted = u64::from(op.outcome == Outcome::Ok);
        let tally = if op.call == Call::Lock {
            verdict.figures.max_wait = verdict.figures.max_wait.max(op.duration());
            &mut verdict.figures.waiting
        } else {
            &mut verdict.figures.once
        };
        tally.0 += 1;
        tally.1 += granted;
    }
    verdict
}

/// Every lease of every name in `history` (see [`rw_checker::leases`]),
/// with the multi-lock it is a name of.
pub fn leases(history: &History) -> Vec<NameLease> {
    let multi: BTreeMap<LeaseId, &Multi> = history
        .iter()
        .filter(|op| matches!(op.call, Call::Lock | Call::TryLock) && op.outcome == Outcome::Ok)
        .filter_map(|op| Some((op.lease?, op.multi.as_ref()?)))
        .collect();
    rw_checker::leases(history)
        .into_iter()
        .map(|lease| NameLease {
            multi: multi.get(&lease.lease).map(|m| (*m).clone()),
            lease,
        })
        .collect()
}

/// The `lock_all` calls that wait, of every worker, granted or not.
pub fn waits(history: &History) -> Vec<MultiWait> {
    history
        .iter()
        .filter(|op| op.call == Call::Lock && op.is_call())
        .filter_map(|op| {
            Some(MultiWait {
                worker: op.worker,
                multi: op.multi.clone()?,
                began: op.invoke,
                ended: op.complete,
                granted: op.outcome == Outcome::Ok,
            })
        })
        .collect()
}

/// A lease's interval, as the checks see it.
#[derive(Clone, Copy, Debug)]
struct Span<'a> {
    of: &'a NameLease,
    start: Duration,
    end: Duration,
}

impl<'a> Span<'a> {
    fn of(of: &'a NameLease) -> Span<'a> {
        let s = rw_checker::Span::of(&of.lease);
        Span {
            of,
            start: s.start,
            end: s.end,
        }
    }

    fn is_empty(&self) -> bool {
        self.end <= self.start
    }

    fn is_single(&self) -> bool {
        self.of.multi.is_none()
    }

    /// "lease 3 of lock_all #2 [0, 1, 3] (worker 1, token Some(5)) held
    /// [10.0ms, 40.0ms]", or "single lease 3 (...)".
    fn describe(&self) -> String {
        let l = &self.of.lease;
        let what = match &self.of.multi {
            Some(m) => format!("lease {} of lock_all #{} {:?}", l.lease, m.attempt, m.locks),
            None => format!("single lease {}", l.lease),
        };
        format!(
            "{what} (worker {}, token {:?}) held [{}, {}]",
            l.worker,
            l.token,
            fmt_ms(self.start),
            fmt_ms(self.end)
        )
    }
}

/// Runs every check.
pub fn check(leases: &[NameLease], waits: &[MultiWait], config: &MultiConfig) -> MultiVerdict {
    let mut verdict = MultiVerdict::default();
    let mut by_lock: BTreeMap<usize, Vec<Span<'_>>> = BTreeMap::new();
    for lease in leases {
        by_lock
            .entry(lease.lease.lock)
            .or_default()
            .push(Span::of(lease));
    }
    for list in by_lock.values_mut() {
        list.sort_by_key(|s| (s.start, s.of.lease.lease));
    }
    for (&lock, spans) in &by_lock {
        check_overlap(lock, spans, &mut verdict);
        check_fencing(lock, spans, &mut verdict);
    }
    check_expired(leases, config, &mut verdict);
    check_grants(leases, config, &mut verdict);
    verdict.figures.single_leases = leases.iter().filter(|l| l.multi.is_none()).count() as u64;
    for wait in waits {
        check_starvation(wait, &by_lock, config, &mut verdict);
    }
    verdict
}

fn check_overlap(lock: usize, spans: &[Span<'_>], verdict: &mut MultiVerdict) {
    // Spans still open at the current start; sorted by start, so any
    // earlier span that ends after this one starts overlaps it.
    let mut open: Vec<&Span<'_>> = Vec::new();
    for span in spans.iter().filter(|s| !s.is_empty()) {
        open.retain(|o| o.end > span.start);
        for other in &open {
            verdict.name_overlap += 1;
            verdict.example("name_overlap", || {
                format!("lock {lock}: {} and {}", other.describe(), span.describe())
            });
        }
        open.push(span);
    }
}

fn check_fencing(lock: usize, spans: &[Span<'_>], verdict: &mut MultiVerdict) {
    let mut highest: Option<(u64, &Span<'_>)> = None;
    for span in spans {
        let Some(token) = span.of.lease.token else {
            continue;
        };
        if let Some((max, by)) = highest {
            if token <= max {
                verdict.fencing += 1;
                verdict.example("fencing", || {
                    format!(
                        "lock {lock}: {} returned at {} got token {token}, not above token {max} \
                         of the earlier {}",
                        span.describe(),
                        fmt_ms(span.start),
                        by.describe()
                    )
                });
            }
        }
        if highest.is_none_or(|(max, _)| token > max) {
            highest = Some((token, span));
        }
    }
}

fn check_expired(leases: &[NameLease], config: &MultiConfig, verdict: &mut MultiVerdict) {
    // A multi-lease's names share one validity: it counts once.
    let mut seen = BTreeSet::new();
    for lease in leases {
        if let Some(m) = &lease.multi {
            if !seen.insert(m.attempt) {
                continue;
            }
        }
        if returned_expired(&lease.lease, config.expired_tolerance, &config.stalls) {
            verdict.expired_lease_returned += 1;
            verdict.example("expired_lease_returned", || {
                format!(
                    "{} returned at {} but valid only until {}",
                    Span::of(lease).describe(),
                    fmt_ms(lease.lease.returned),
                    fmt_ms(lease.lease.valid_until)
                )
            });
        }
    }
}

fn check_grants(leases: &[NameLease], config: &MultiConfig, verdict: &mut MultiVerdict) {
    let mut granted: BTreeMap<u64, (&Multi, Vec<&NameLease>)> = BTreeMap::new();
    for lease in leases {
        if let Some(m) = &lease.multi {
            granted
                .entry(m.attempt)
                .or_insert((m, Vec::new()))
                .1
                .push(lease);
        }
    }
    for (attempt, (multi, names)) in granted {
        let mut held: Vec<usize> = names.iter().map(|n| n.lease.lock).collect();
        held.sort_unstable();
        let untokened: Vec<usize> = names
            .iter()
            .filter(|n| n.lease.token.is_none())
            .map(|n| n.lease.lock)
            .collect();
        if held == multi.locks && (!config.fenced || untokened.is_empty()) {
            continue;
        }
        verdict.partial_grant += 1;
        verdict.example("partial_grant", || {
            format!(
                "lock_all #{attempt} (worker {}) asked for locks {:?}; the lease holds {held:?}, \
                 without a token on {untokened:?}",
                names[0].lease.worker, multi.locks
            )
        });
    }
}

fn check_starvation(
    wait: &MultiWait,
    by_lock: &BTreeMap<usize, Vec<Span<'_>>>,
    config: &MultiConfig,
    verdict: &mut MultiVerdict,
) {
    let (began, ended) = (wait.began, wait.ended);
    verdict.figures.judged.0 += 1;
    verdict.figures.judged.1 += u64::from(!wait.granted);
    verdict.figures.max_judged_wait = verdict.figures.max_judged_wait.max(ended - began);
    let cutoff = began + config.arrival_grace;
    // Leases of its names, other than its own, let in before it ended.
    let others: Vec<&Span<'_>> = wait
        .multi
        .locks
        .iter()
        .filter_map(|lock| by_lock.get(lock))
        .flatten()
        .filter(|s| !s.is_empty() && s.start < ended)
        .filter(|s| {
            s.of.multi
                .as_ref()
                .is_none_or(|m| m.attempt != wait.multi.attempt)
        })
        .collect();
    let explains = |s: &Span<'_>| s.of.lease.invoked <= cutoff;
    let free = others
        .iter()
        .filter(|s| explains(s))
        .map(|s| s.end)
        .fold(began, Duration::max)
        .min(ended);
    let late: Vec<&Span<'_>> = others
        .into_iter()
        .filter(|s| s.is_single() && !explains(s) && s.end > free)
        .collect();
    if late.is_empty() {
        return;
    }
    let kept_out = ended
        .saturating_sub(free)
        .saturating_sub(stalled(&config.stalls, free, ended));
    verdict.figures.max_kept_out = verdict.figures.max_kept_out.max(kept_out);
    if kept_out <= config.starvation_bound {
        return;
    }
    verdict.multi_starved += 1;
    verdict.example("multi_starved", || {
        format!(
            "lock_all #{} {:?} (worker {}, {}) waited [{}, {}], {} of it after the earlier \
             holders let go at {}, while {} single lease(s) that arrived later were let in \
             (first: {}, arrived at {})",
            wait.multi.attempt,
            wait.multi.locks,
            wait.worker,
            if wait.granted { "granted" } else { "gave up" },
            fmt_ms(began),
            fmt_ms(ended),
            fmt_ms(kept_out),
            fmt_ms(free),
            late.len(),
            late[0].describe(),
            fmt_ms(late[0].of.lease.invoked)
        )
    });
}

/// How much of `[from, to]` the process spent in `stalls`.
fn stalled(stalls: &[(Duration, Duration)], from: Duration, to: Duration) -> Duration {
    stalls
        .iter()
        .map(|&(s, e)| e.min(to).saturating_sub(s.max(from)))
        .sum()
}

#[cfg(test)]
mod tests;
