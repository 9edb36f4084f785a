//! The semaphore's checker: judges the permits of a run in which every
//! acquisition is one of a semaphore's `N` permits. Pure (no I/O, no
//! clocks), like the other checkers, so it is tested on synthetic
//! histories, including ones it must flag.
//!
//! Times are offsets from the run's epoch on the monotonic clock, as in
//! the history. A permit's interval is the read-write checker's (see
//! [`rw_checker`](crate::rw_checker)): `[returned, end]` with `end =
//! min(release began, valid_until)` (`valid_until` after the last extend,
//! or the last renewal a kept-alive lease reported); an interval with
//! `end <= returned` is empty (the permit came back expired, or was
//! released at once) and counts for nothing. Checks, per name (lock):
//!
//! 1. `over_permits`: more than `N` intervals hold at once. Intervals that
//!    only touch (`end == start`) do not; one violation per permit that
//!    became the `N + 1`-th (or later) holder at its start.
//! 2. `fencing`: a permit whose acquire began after another permit of the
//!    name was returned has a higher token than that one (fencing on;
//!    permits without a token are skipped). Permits whose acquires
//!    overlap in time may come back in any order, with any tokens: each
//!    settles its own.
//! 3. `expired_lease_returned`: a permit returned already expired
//!    (`returned > valid_until at return + expired_tolerance`, not
//!    counting time the process was stalled after `valid_until`).
//!
//! Why a correct semaphore is never flagged. Measurement only narrows the
//! intervals of (1) ("returned" is read after the call returns, "release
//! began" before it starts), so noise can hide an overlap but never invent
//! one; and a holder's permit is on a quorum of `n * N / (N + 1) + 1`
//! nodes until its `valid_until` (the library's drift allowance, its
//! durability and its restart quarantine keep it there), where each node
//! admits `N` holders: `N + 1` holders would need more places than the
//! nodes have. For (2), "returned" is late and "began" early too, so the
//! order is real: the earlier permit's token was on a majority of the
//! nodes' counters when it was returned (the acquire writes it back to
//! one otherwise), which the later acquire's quorum meets, and it draws
//! above it there.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::examples::{fmt_ms, keep_example};
use crate::history::{History, LeaseId, Mode};
use crate::rw_checker::{self, returned_expired, RwLease, Span};

/// What a semaphore run tells its checker beside the history.
#[derive(Clone, Debug)]
pub struct Semaphores {
    /// Every name's number of permits, `N`.
    pub permits: u32,
    /// A negative control: the check that must flag it (its name in
    /// [`SemVerdict::counts`]); another violation alone does not pass it.
    pub flagged_by: Option<&'static str>,
}

/// How the checker judges.
#[derive(Clone, Debug)]
pub struct SemConfig {
    /// Holders a name admits at once, `N`.
    pub permits: u32,
    /// How far after `valid_until` a permit may be seen returned before it
    /// counts as returned expired (check 3).
    pub expired_tolerance: Duration,
    /// Times the whole process was not running (`(start, end)`, see the
    /// watchdog): not held against validity.
    pub stalls: Vec<(Duration, Duration)>,
}

impl SemConfig {
    pub fn new(permits: u32) -> SemConfig {
        SemConfig {
            permits,
            expired_tolerance: Duration::from_millis(2),
            stalls: Vec::new(),
        }
    }
}

/// Violations by category, with the first few examples of each, and how
/// full each name got.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SemVerdict {
    pub over_permits: u64,
    pub fencing: u64,
    pub expired_lease_returned: u64,
    pub examples: BTreeMap<&'static str, Vec<String>>,
    /// Per name: the most permits held at once (not a violation up to
    /// `N`: a run whose names never fill up tests little).
    pub peak: BTreeMap<usize, usize>,
}

impl SemVerdict {
    pub fn total(&self) -> u64 {
        self.counts().iter().map(|(_, n)| n).sum()
    }

    /// `(name, count)` in the order of the JSON report.
    pub fn counts(&self) -> [(&'static str, u64); 3] {
        [
            ("over_permits", self.over_permits),
            ("fencing", self.fencing),
            ("expired_lease_returned", self.expired_lease_returned),
        ]
    }

    fn example(&mut self, category: &'static str, text: impl FnOnce() -> String) {
        keep_example(&mut self.examples, category, text);
    }
}

/// Judges a recorded semaphore run: its permits (leases of other modes
/// are not the semaphore's), with `stalls` left out.
pub fn judge(
    history: &History,
    semaphores: &Semaphores,
    stalls: &[(Duration, Duration)],
) -> SemVerdict {
    let config = SemConfig {
        stalls: stalls.to_vec(),
        ..SemConfig::new(semaphores.permits)
    };
    let permits: Vec<RwLease> = rw_checker::leases(history)
        .into_iter()
        .filter(|l| l.mode == Mode::Permit)
        .collect();
    check(&permits, &config)
}

/// Runs every check on `permits`.
pub fn check(permits: &[RwLease], config: &SemConfig) -> SemVerdict {
    let mut verdict = SemVerdict::default();
    let mut by_lock: BTreeMap<usize, Vec<&RwLease>> = BTreeMap::new();
    for permit in permits {
        by_lock.entry(permit.lock).or_default().push(permit);
    }
    for (&lock, permits) in &by_lock {
        check_holders(lock, permits, config.permits, &mut verdict);
        check_fencing(lock, permits, &mut verdict);
    }
    for permit in permits {
        if returned_expired(permit, config.expired_tolerance, &config.stalls) {
            verdict.expired_lease_returned += 1;
            verdict.example("expired_lease_returned", || {
                format!(
                    "lock {}: permit lease {} (worker {}) returned at {} but valid only until {}",
                    permit.lock,
                    permit.lease,
                    permit.worker,
                    fmt_ms(permit.returned),
                    fmt_ms(permit.valid_until)
                )
            });
        }
    }
    verdict
}

fn check_holders(lock: usize, permits: &[&RwLease], n: u32, verdict: &mut SemVerdict) {
    let mut spans: Vec<Span<'_>> = permits
        .iter()
        .map(|p| Span::of(p))
        .filter(|s| !s.is_empty())
        .collect();
    spans.sort_by_key(|s| (s.start, s.lease.lease));
    // Spans still open at the current start; sorted by start, so every
    // earlier span that ends after this one starts holds with it.
    let mut open: Vec<Span<'_>> = Vec::new();
    let mut peak = 0;
    for span in spans {
        open.retain(|o| o.end > span.start);
        if open.len() >= n as usize {
            verdict.over_permits += 1;
            verdict.example("over_permits", || {
                let others: Vec<String> = open.iter().map(Span::describe).collect();
                format!(
                    "lock {lock}: {} while {} other permit(s) held (N = {n}): {}",
                    span.describe(),
                    others.len(),
                    others.join("; ")
                )
            });
        }
        open.push(span);
        peak = peak.max(open.len());
    }
    verdict.peak.insert(lock, peak);
}

fn check_fencing(lock: usize, permits: &[&RwLease], verdict: &mut SemVerdict) {
    let mut tokened: Vec<(&RwLease, u64)> = permits
        .iter()
        .filter_map(|p| p.token.map(|t| (*p, t)))
        .collect();
    let mut by_return = tokened.clone();
    by_return.sort_by_key(|(p, _)| (p.returned, p.lease));
    tokened.sort_by_key(|(p, _)| (p.invoked, p.lease));
    let mut returned = by_return.into_iter().peekable();
    // The highest token of the permits returned before the current one's
    // acquire began, and whose it was.
    let mut highest: Option<(u64, LeaseId)> = None;
    for (permit, token) in tokened {
        while let Some(&(earlier, t)) = returned.peek() {
            if earlier.returned >= permit.invoked {
                break;
            }
            if highest.is_none_or(|(max, _)| t > max) {
                highest = Some((t, earlier.lease));
            }
            returned.next();
        }
        let Some((max, by)) = highest else { continue };
        if token <= max {
            verdict.fencing += 1;
            verdict.example("fencing", || {
                format!(
                    "lock {lock}: permit lease {} (worker {}) acquired over [{}, {}] got token \
                     {token}, not above token {max} of permit lease {by}, returned before it began",
                    permit.lease,
                    permit.worker,
                    fmt_ms(permit.invoked),
                    fmt_ms(permit.returned)
                )
            });
        }
    }
}

#[cfg(test)]
mod tests;
