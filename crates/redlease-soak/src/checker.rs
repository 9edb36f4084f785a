//! The checker: judges a recorded history and the final state. Pure (no
//! I/O, no clocks), so it is tested on synthetic histories, including ones
//! it must flag.
//!
//! 1. Overlap: per lock, the intervals `[acquire returned, min(release
//!    began, valid_until)]` of different leases never overlap; and no lease
//!    is returned already expired (`returned > valid_until + tolerance`).
//! 2. Lost update: per lock, the final counter equals the number of
//!    acknowledged writes (within the writes whose fate is unknown).
//! 3. Fencing: per lock, tokens strictly increase in the order the leases
//!    were returned, and no fenced write made while its lease was valid was
//!    rejected.
//! 4. Leaks: no lock key is left on any node after the run, TTL + margin.
//! 5. Every failure is a typed error of a kind the call can return, nothing
//!    panicked, and every call returned within its bound + slack.
//! 6. Where the node list names one server twice (`Config::same_server`),
//!    no lease is granted: every acquire and `check_servers` fails with
//!    `SameServer`, naming that pair.
//!
//! In a read-write run (`Config::read_write`) the read-write checker
//! (`rw_checker`) judges the leases instead: the overlap, the expiry at
//! return and the order of tokens of (1) and (3) are left to it, and the
//! rest applies to both modes. In a semaphore run (`Config::semaphore`)
//! the semaphore checker (`sem_checker`) judges them so: `N` permits hold
//! together; permits write nothing. In a multi-lock run
//! (`Config::multi`) the multi-lock checker (`multi_checker`) judges
//! them so: a multi-lease is one lease per name, and its own checks say
//! which call took each. Checks 2 and 3's fenced writes apply per name
//! as they are. A multi-lock's call is counted, bounded and classified
//! once (`Op::is_call`), not once per name. In an engine run
//! (`Config::engine`), every mode on shared names, the engine checker
//! (`engine_checker`) judges the leases so, per name and mode.
//!
//! Measurement only ever narrows the intervals of (1): "returned" is read
//! after the call returns and "release began" before it starts, so timing
//! noise can hide an overlap of a few microseconds but never invent one.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::examples::{fmt_ms, keep_example};
use crate::history::{Call, ErrorKind, History, LeaseId, Op, Outcome};
use crate::rw_checker;

/// How strict the checker is about timing.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Added to each call's bound before it counts as unbounded (scheduling
    /// on a loaded 2-core machine).
    pub bound_slack: Duration,
    /// How far after `valid_until` a lease may be seen returned before it
    /// counts as returned expired: the time between the library's own check
    /// and our clock read, which a descheduled thread can stretch.
    pub expired_tolerance: Duration,
    /// The node list names one server twice, as these two entries (by
    /// index, either order): check 6 applies, and `SameServer` is a kind
    /// `lock`, `try_lock` and `check_servers` may return (elsewhere it is
    /// not).
    pub same_server: Option<[usize; 2]>,
    /// The history holds read (shared) leases beside write ones: the
    /// lease checks (overlap, a lease returned expired, the order of
    /// tokens) are the read-write checker's ([`rw_checker`]), which knows
    /// that readers share a lock and that a reader's token is a
    /// generation. Every other check applies as it is: only writers write
    /// the counter and the fenced store.
    pub read_write: bool,
    /// The leases are a semaphore's permits, up to `N` of them held at
    /// once: the lease checks are the semaphore checker's
    /// ([`crate::sem_checker`]), as in a read-write run. Every other check
    /// applies as it is (a permit writes nothing).
    pub semaphore: bool,
    /// Some leases hold several names (`lock_all`), recorded per name:
    /// the lease checks are the multi-lock checker's
    /// ([`crate::multi_checker`]), as in a read-write run. Every other
    /// check applies per name as it is.
    pub multi: bool,
    /// Every mode on shared names: the lease checks are the engine
    /// checker's ([`crate::engine_checker`]), as in a read-write run.
    /// Every other check applies per name as it is.
    pub engine: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bound_slack: Duration::from_millis(250),
            expired_tolerance: Duration::from_millis(2),
            same_server: None,
            read_write: false,
            semaphore: false,
            multi: false,
            engine: false,
        }
    }
}

/// A lock key found on a node after the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeftoverKey {
    pub node: usize,
    pub key: String,
    /// Its remaining TTL in ms (-1: none, -2: gone by the time it was asked).
    pub pttl_ms: i64,
}

/// What the run left behind, gathered after it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FinalState {
    /// Per lock: the counter on the data Redis (`None`: never written).
    pub counters: Vec<Option<u64>>,
    pub leftover_keys: Vec<LeftoverKey>,
    /// Panics anywhere in the process (library background tasks included).
    pub process_panics: usize,
    /// Workers still inside a call long after the run's deadline.
    pub stuck_workers: usize,
    /// Times the whole process was not running (`(start, end)`, see the
    /// watchdog): not held against the library's bounds.
    pub stalls: Vec<(Duration, Duration)>,
}

impl FinalState {
    /// How much of `[from, to]` the process spent stalled.
    fn stalled(&self, from: Duration, to: Duration) -> Duration {
        self.stalls
            .iter()
            .map(|&(s, e)| e.min(to).saturating_sub(s.max(from)))
            .sum()
    }
}

/// Violations by category, with the first few examples of each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    pub overlap: u64,
    pub expired_lease_returned: u64,
    pub lost_update: u64,
    pub fencing: u64,
    pub leaked_keys: u64,
    pub untyped_error: u64,
    pub unbounded_call: u64,
    /// Calls that did not refuse a node list naming one server twice.
    pub same_server: u64,
    pub examples: BTreeMap<&'static str, Vec<String>>,
}

/// The categories a read-write, a semaphore, a multi-lock or an engine
/// run leaves to its own checker (see [`Config::read_write`],
/// [`Config::semaphore`], [`Config::multi`], [`Config::engine`]): they
/// stay 0 there.
pub const JUDGED_ELSEWHERE: [&str; 2] = ["overlap", "expired_lease_returned"];

impl Verdict {
    pub fn total(&self) -> u64 {
        self.overlap
            + self.expired_lease_returned
            + self.lost_update
            + self.fencing
            + self.leaked_keys
            + self.untyped_error
            + self.unbounded_call
            + self.same_server
    }

    /// `(name, count)` in the order of the JSON report.
    pub fn counts(&self) -> [(&'static str, u64); 8] {
        [
            ("overlap", self.overlap),
            ("expired_lease_returned", self.expired_lease_returned),
            ("lost_update", self.lost_update),
            ("fencing", self.fencing),
            ("leaked_keys", self.leaked_keys),
            ("untyped_error", self.untyped_error),
            ("unbounded_call", self.unbounded_call),
            ("same_server", self.same_server),
        ]
    }

    fn example(&mut self, category: &'static str, text: impl FnOnce() -> String) {
        keep_example(&mut self.examples, category, text);
    }
}

/// One acquisition as the checker sees it.
#[derive(Clone, Debug)]
struct Span {
    lease: LeaseId,
    worker: usize,
    lock: usize,
    /// When the acquire returned.
    start: Duration,
    /// `min(release began, latest valid_until)`.
    end: Duration,
    token: Option<u64>,
}

/// Runs every check.
pub fn check(history: &History, state: &FinalState, config: &Config) -> Verdict {
    let mut verdict = Verdict::default();
    if !config.read_write && !config.semaphore && !config.multi && !config.engine {
        let spans = spans(history);
        check_overlap(&spans, &mut verdict);
        check_token_order(&spans, &mut verdict);
        check_expired(history, state, config, &mut verdict);
    }
    check_lost_updates(history, state, &mut verdict);
    check_fenced_writes(history, &mut verdict);
    check_leaks(state, &mut verdict);
    check_errors(history, state, config, &mut verdict);
    check_bounds(history, state, config, &mut verdict);
    if let Some(pair) = config.same_server {
        check_same_server(history, pair, &mut verdict);
    }
    verdict
}

/// "lock by worker 3 at 1234.0ms": which call, whose, and when, for examples.
fn who_when(op: &Op) -> String {
    format!(
        "{} by worker {} at {}",
        op.label(),
        op.worker,
        fmt_ms(op.invoke)
    )
}

/// One span per successful acquire (see [`rw_checker::leases`]).
fn spans(history: &History) -> Vec<Span> {
    rw_checker::leases(history)
        .into_iter()
        .map(|l| {
            let valid_until = l.extended_until.unwrap_or(l.valid_until);
            Span {
                lease: l.lease,
                worker: l.worker,
                lock: l.lock,
                start: l.returned,
                end: l.release_began.map_or(valid_until, |r| r.min(valid_until)),
                token: l.token,
            }
        })
        .collect()
}

fn by_lock(spans: &[Span]) -> BTreeMap<usize, Vec<&Span>> {
    let mut map: BTreeMap<usize, Vec<&Span>> = BTreeMap::new();
    for span in spans {
        map.entry(span.lock).or_default().push(span);
    }
    for list in map.values_mut() {
        list.sort_by_key(|s| (s.start, s.lease));
    }
    map
}

fn check_expired(history: &History, state: &FinalState, config: &Config, verdict: &mut Verdict) {
    for op in history {
        if !matches!(op.call, Call::Lock | Call::TryLock) || op.outcome != Outcome::Ok {
            continue;
        }
        let Some(valid_until) = op.valid_until else {
            continue;
        };
        // Time the process was not running after valid_until does not
        // count: the lease may have come back just before it.
        let late = op
            .complete
            .saturating_sub(valid_until)
            .saturating_sub(state.stalled(valid_until, op.complete));
        if late > config.expired_tolerance {
            verdict.expired_lease_returned += 1;
            verdict.example("expired_lease_returned", || {
                format!(
                    "lease {:?} of lock {} (worker {}) returned at {} but valid only until {}",
                    op.lease,
                    op.lock,
                    op.worker,
                    fmt_ms(op.complete),
                    fmt_ms(valid_until)
                )
            });
        }
    }
}

fn check_overlap(spans: &[Span], verdict: &mut Verdict) {
    for (lock, list) in by_lock(spans) {
        // Spans still open at the current start; sorted by start, so any
        // earlier span that ends after this one starts overlaps it.
        let mut open: Vec<&Span> = Vec::new();
        for span in list {
            if span.end <= span.start {
                continue; // returned expired, or released at once: empty
            }
            open.retain(|o| o.end > span.start);
            for other in &open {
                verdict.overlap += 1;
                verdict.example("overlap", || {
                    format!(
                        "lock {lock}: lease {} (worker {}, token {:?}) held [{}, {}] and lease {} \
                         (worker {}, token {:?}) held [{}, {}]",
                        other.lease,
                        other.worker,
                        other.token,
                        fmt_ms(other.start),
                        fmt_ms(other.end),
                        span.lease,
                        span.worker,
                        span.token,
                        fmt_ms(span.start),
                        fmt_ms(span.end)
                    )
                });
            }
            open.push(span);
        }
    }
}

fn check_lost_updates(history: &History, state: &FinalState, verdict: &mut Verdict) {
    let mut acked: BTreeMap<usize, u64> = BTreeMap::new();
    let mut unknown: BTreeMap<usize, u64> = BTreeMap::new();
    // Sent inside the lease but acknowledged after it ended: the write may
    // have landed after another holder's, like any holder that pauses
    // mid-write. A lost update such a write explains is not the lock's.
    let mut late: BTreeMap<usize, u64> = BTreeMap::new();
    let mut values: BTreeMap<(usize, u64), Vec<&Op>> = BTreeMap::new();
    for op in history.iter().filter(|op| op.call == Call::Write) {
        match &op.outcome {
            Outcome::Value(v) => {
                *acked.entry(op.lock).or_default() += 1;
                if op
                    .valid_until
                    .is_some_and(|until| op.invoke < until && op.complete > until)
                {
                    *late.entry(op.lock).or_default() += 1;
                }
                values.entry((op.lock, *v)).or_default().push(op);
            }
            Outcome::Failed(..) => *unknown.entry(op.lock).or_default() += 1,
            _ => {}
        }
    }
    let locks = state.counters.len().max(
        acked
            .keys()
            .chain(unknown.keys())
            .max()
            .map_or(0, |m| m + 1),
    );
    for lock in 0..locks {
        let final_value = state.counters.get(lock).copied().flatten().unwrap_or(0);
        let acked = acked.get(&lock).copied().unwrap_or(0);
        let unknown = unknown.get(&lock).copied().unwrap_or(0);
        let late = late.get(&lock).copied().unwrap_or(0);
        let lost = acked.saturating_sub(final_value).saturating_sub(late);
        let phantom = final_value.saturating_sub(acked + unknown);
        if lost + phantom == 0 {
            continue;
        }
        verdict.lost_update += lost + phantom;
        // Two acknowledged writes of the same value read the same state:
        // the usual face of a lost update.
        let twice: Vec<String> = values
            .range((lock, 0)..=(lock, u64::MAX))
            .filter(|(_, ops)| ops.len() > 1)
            .take(2)
            .map(|((_, v), ops)| {
                let who: Vec<String> = ops
                    .iter()
                    .map(|op| {
                        format!(
                            "worker {} lease {:?} at {} (valid until {})",
                            op.worker,
                            op.lease,
                            fmt_ms(op.invoke),
                            op.valid_until.map_or("?".into(), fmt_ms)
                        )
                    })
                    .collect();
                format!("value {v} written by {}", who.join(" and "))
            })
            .collect();
        verdict.example("lost_update", || {
            format!(
                "lock {lock}: {acked} acknowledged writes ({unknown} unknown, {late} acknowledged \
                 after their lease ended) but the counter is {final_value}{}{}",
                if twice.is_empty() { "" } else { "; " },
                twice.join("; ")
            )
        });
    }
}

fn check_token_order(spans: &[Span], verdict: &mut Verdict) {
    for (lock, list) in by_lock(spans) {
        let mut highest: Option<(u64, LeaseId)> = None;
        for span in list {
            let Some(token) = span.token else { continue };
            if let Some((max, by)) = highest {
                if token <= max {
                    verdict.fencing += 1;
                    verdict.example("fencing", || {
                        format!(
                            "lock {lock}: lease {} returned at {} got token {token}, not above \
                             token {max} of earlier lease {by}",
                            span.lease,
                            fmt_ms(span.start)
                        )
                    });
                }
            }
            if highest.is_none_or(|(max, _)| token > max) {
                highest = Some((token, span.lease));
            }
        }
    }
}

fn check_fenced_writes(history: &History, verdict: &mut Verdict) {
    for op in history.iter().filter(|op| op.call == Call::FencedWrite) {
        // Certainly made while valid: acknowledged before valid_until.
        let valid = op.valid_until.is_some_and(|v| op.complete <= v);
        if op.outcome == Outcome::Rejected && valid {
            verdict.fencing += 1;
            verdict.example("fencing", || {
                format!(
                    "lock {}: fenced write of lease {:?} (worker {}, token {:?}) at {} rejected \
                     although the lease was valid until {}",
                    op.lock,
                    op.lease,
                    op.worker,
                    op.token,
                    fmt_ms(op.invoke),
                    op.valid_until.map_or("?".into(), fmt_ms)
                )
            });
        }
    }
}

fn check_leaks(state: &FinalState, verdict: &mut Verdict) {
    verdict.leaked_keys = state.leftover_keys.len() as u64;
    for k in &state.leftover_keys {
        verdict.example("leaked_keys", || {
            format!("node {}: {} (pttl {} ms)", k.node, k.key, k.pttl_ms)
        });
    }
}

/// The error kinds each call may return under faults (`same_server`: with
/// a node list that names one server twice).
fn allowed(call: Call, kind: ErrorKind, same_server: bool) -> bool {
    use ErrorKind::*;
    if same_server
        && kind == SameServer
        && matches!(call, Call::Lock | Call::TryLock | Call::CheckServers)
    {
        return true;
    }
    match call {
        Call::Lock => matches!(kind, Taken | NoQuorum | ValidityExhausted | WaitTimeout),
        Call::TryLock => matches!(kind, Taken | NoQuorum | ValidityExhausted),
        Call::Extend => matches!(kind, NotHeld | NoQuorum | ValidityExhausted),
        Call::Release => matches!(kind, NotHeld | NoQuorum),
        Call::Abandon => false,
        // It fails only on a server given twice.
        Call::CheckServers => false,
        // An acquire, then the value published at quorum (refused there
        // when the lead was lost in between).
        Call::Campaign => matches!(
            kind,
            Taken | NoQuorum | ValidityExhausted | WaitTimeout | NotHeld
        ),
        Call::Proclaim | Call::Resign => matches!(kind, NotHeld | NoQuorum),
        // Node failures are part of what they tell, not errors.
        Call::Observe | Call::Leader => false,
        // Every node must answer.
        Call::ForceRelease => kind == NoQuorum,
        // The data Redis is never faulted; its rare errors only weaken the
        // lost-update check (counted as unknown writes).
        Call::Read | Call::Write | Call::FencedWrite => kind == Data,
    }
}

fn check_errors(history: &History, state: &FinalState, config: &Config, verdict: &mut Verdict) {
    let mut panics_seen = 0u64;
    for op in history.iter().filter(|op| op.is_call()) {
        let Outcome::Failed(kind, text) = &op.outcome else {
            continue;
        };
        if *kind == ErrorKind::Panic {
            panics_seen += 1;
        }
        if !allowed(op.call, *kind, config.same_server.is_some()) || text.is_empty() {
            verdict.untyped_error += 1;
            verdict.example("untyped_error", || {
                format!("{}: {} {text:?}", who_when(op), kind.label())
            });
        }
    }
    // Panics caught around calls are in the history already; the rest
    // (background tasks) only show in the process-wide count.
    let elsewhere = (state.process_panics as u64).saturating_sub(panics_seen);
    if elsewhere > 0 {
        verdict.untyped_error += elsewhere;
        verdict.example("untyped_error", || {
            format!("{elsewhere} panic(s) outside the recorded calls (see stderr)")
        });
    }
}

fn check_bounds(history: &History, state: &FinalState, config: &Config, verdict: &mut Verdict) {
    if state.stuck_workers > 0 {
        verdict.unbounded_call += state.stuck_workers as u64;
        verdict.example("unbounded_call", || {
            format!(
                "{} worker(s) never came back from a call after the deadline",
                state.stuck_workers
            )
        });
    }
    for op in history.iter().filter(|op| op.is_call()) {
        let Some(bound) = op.bound else { continue };
        let busy = op
            .duration()
            .saturating_sub(state.stalled(op.invoke, op.complete));
        if busy > bound + config.bound_slack {
            verdict.unbounded_call += 1;
            verdict.example("unbounded_call", || {
                format!(
                    "{} took {} ({} without process stalls; bound {} + slack {})",
                    who_when(op),
                    fmt_ms(op.duration()),
                    fmt_ms(busy),
                    fmt_ms(bound),
                    fmt_ms(config.bound_slack)
                )
            });
        }
    }
}

/// Check 6: with one server given twice, every acquire and every
/// `check_servers` is refused with `SameServer` naming `pair`.
fn check_same_server(history: &History, pair: [usize; 2], verdict: &mut Verdict) {
    let named =
        |p: Option<(usize, usize)>| p.is_some_and(|(a, b)| [a, b] == pair || [b, a] == pair);
    for op in history {
        if !matches!(op.call, Call::Lock | Call::TryLock | Call::CheckServers) {
            continue;
        }
        let what = match &op.outcome {
            Outcome::Failed(ErrorKind::SameServer, _) if named(op.not_counted.same_server) => {
                continue
            }
            Outcome::Failed(ErrorKind::SameServer, _) => format!(
                "refused naming {:?}, not nodes {} and {}",
                op.not_counted.same_server, pair[0], pair[1]
            ),
            Outcome::Failed(kind, text) => format!("failed {} instead: {text}", kind.label()),
            Outcome::Ok if op.call == Call::CheckServers => {
                "found no server given twice".to_string()
            }
            _ => format!(
                "granted a lease (lease {:?}, token {:?})",
                op.lease, op.token
            ),
        };
        verdict.same_server += 1;
        verdict.example("same_server", || format!("{}: {what}", who_when(op)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Mode, NotCounted};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn op(worker: usize, lease: Option<LeaseId>, call: Call, invoke: u64, complete: u64) -> Op {
        Op {
            worker,
            lock: 0,
            lease,
            call,
            mode: Mode::Write,
            invoke: ms(invoke),
            complete: ms(complete),
            bound: None,
            outcome: Outcome::Ok,
            valid_until: None,
            token: None,
            not_counted: NotCounted::default(),
            multi: None,
        }
    }

    /// A lease on lock 0: acquired over [invoke, returned], valid until
    /// `valid_until`, released from `release` (if any); the critical section
    /// reads `read` and writes `read + 1` (acknowledged) with a fenced write
    /// accepted, both at `returned + 1`.
    struct L {
        worker: usize,
        lease: LeaseId,
        returned: u64,
        valid_until: u64,
        release: Option<u64>,
        token: u64,
        read: u64,
    }

    fn lease_ops(l: &L) -> Vec<Op> {
        let id = Some(l.lease);
        let mut acquire = op(l.worker, id, Call::Lock, l.returned - 2, l.returned);
        acquire.valid_until = Some(ms(l.valid_until));
        acquire.token = Some(l.token);
        let mut read = op(l.worker, id, Call::Read, l.returned, l.returned + 1);
        read.outcome = Outcome::Value(l.read);
        let mut write = op(l.worker, id, Call::Write, l.returned + 1, l.returned + 1);
        write.outcome = Outcome::Value(l.read + 1);
        write.valid_until = Some(ms(l.valid_until));
        let mut fenced = op(
            l.worker,
            id,
            Call::FencedWrite,
            l.returned + 1,
            l.returned + 1,
        );
        fenced.valid_until = Some(ms(l.valid_until));
        fenced.token = Some(l.token);
        let mut ops = vec![acquire, read, write, fenced];
        if let Some(r) = l.release {
            ops.push(op(l.worker, id, Call::Release, r, r + 1));
        }
        ops
    }

    fn state(counter: u64) -> FinalState {
        FinalState {
            counters: vec![Some(counter)],
            ..FinalState::default()
        }
    }

    fn clean_history() -> History {
        let a = L {
            worker: 0,
            lease: 0,
            returned: 10,
            valid_until: 500,
            release: Some(40),
            token: 7,
            read: 0,
        };
        // B takes it right after A's release began: touching, not overlapping.
        let b = L {
            worker: 1,
            lease: 1,
            returned: 42,
            valid_until: 530,
            release: None,
            token: 8,
            read: 1,
        };
        // C after B expired.
        let c = L {
            worker: 2,
            lease: 2,
            returned: 530,
            valid_until: 1000,
            release: Some(600),
            token: 9,
            read: 2,
        };
        [a, b, c].iter().flat_map(lease_ops).collect()
    }

    #[test]
    fn a_clean_history_passes() {
        let v = check(&clean_history(), &state(3), &Config::default());
        assert_eq!(v.total(), 0, "{v:?}");
    }

    #[test]
    fn overlapping_leases_are_flagged() {
        let mut h = clean_history();
        // D acquires at 300 while B is valid until 530.
        h.extend(lease_ops(&L {
            worker: 3,
            lease: 3,
            returned: 300,
            valid_until: 800,
            release: Some(310),
            token: 10,
            read: 2,
        }));
        let v = check(&h, &state(3), &Config::default());
        assert!(v.overlap >= 1, "{v:?}");
        assert!(v.examples["overlap"][0].contains("lease 1"));
    }

    #[test]
    fn release_ends_the_interval_and_expiry_ends_it_too() {
        // A released at 40: a lease returned at 41 does not overlap, one
        // returned at 39 does.
        let mk = |returned| {
            let mut h: History = lease_ops(&L {
                worker: 0,
                lease: 0,
                returned: 10,
                valid_until: 500,
                release: Some(40),
                token: 1,
                read: 0,
            });
            h.extend(lease_ops(&L {
                worker: 1,
                lease: 1,
                returned,
                valid_until: 900,
                release: Some(600),
                token: 2,
                read: 1,
            }));
            check(&h, &state(2), &Config::default()).overlap
        };
        assert_eq!(mk(41), 0);
        assert_eq!(mk(39), 1);
    }

    #[test]
    fn a_successful_extend_moves_the_end_later() {
        let mut h: History = lease_ops(&L {
            worker: 0,
            lease: 0,
            returned: 10,
            valid_until: 100,
            release: Some(300),
            token: 1,
            read: 0,
        });
        let mut extend = op(0, Some(0), Call::Extend, 50, 52);
        extend.valid_until = Some(ms(250));
        h.push(extend);
        // B at 150: before the extended end (250).
        h.extend(lease_ops(&L {
            worker: 1,
            lease: 1,
            returned: 150,
            valid_until: 600,
            release: Some(400),
            token: 2,
            read: 1,
        }));
        assert_eq!(check(&h, &state(2), &Config::default()).overlap, 1);
    }

    #[test]
    fn a_lease_returned_expired_is_flagged() {
        let mut h: History = lease_ops(&L {
            worker: 0,
            lease: 0,
            returned: 510,
            valid_until: 505,
            release: Some(520),
            token: 1,
            read: 0,
        });
        // Without the write (it would have been skipped).
        h.retain(|op| !matches!(op.call, Call::Write | Call::FencedWrite));
        let v = check(&h, &state(0), &Config::default());
        assert_eq!(v.expired_lease_returned, 1, "{v:?}");
        // Within the tolerance it is not.
        let mut h2 = h.clone();
        h2[0].complete = ms(506);
        assert_eq!(
            check(&h2, &state(0), &Config::default()).expired_lease_returned,
            0
        );
    }

    #[test]
    fn a_lost_update_is_flagged() {
        // Two acknowledged writes, counter 1: one update lost.
        let mut h: History = lease_ops(&L {
            worker: 0,
            lease: 0,
            returned: 10,
            valid_until: 100,
            release: None,
            token: 1,
            read: 0,
        });
        h.extend(lease_ops(&L {
            worker: 1,
            lease: 1,
            returned: 200,
            valid_until: 300,
            release: Some(250),
            token: 2,
            read: 0,
        }));
        let v = check(&h, &state(1), &Config::default());
        assert_eq!(v.lost_update, 1, "{v:?}");
        assert!(v.examples["lost_update"][0].contains("value 1 written by"));
        assert_eq!(v.overlap, 0, "the leases themselves did not overlap");
    }

    #[test]
    fn unknown_writes_may_or_may_not_have_landed() {
        let mut h = clean_history();
        let mut w = op(0, Some(0), Call::Write, 20, 22);
        w.outcome = Outcome::Failed(ErrorKind::Data, "timed out".into());
        h.push(w);
        let config = Config::default();
        assert_eq!(check(&h, &state(3), &config).lost_update, 0);
        assert_eq!(check(&h, &state(4), &config).lost_update, 0);
        assert_eq!(check(&h, &state(5), &config).lost_update, 1, "phantom");
        assert_eq!(check(&h, &state(2), &config).lost_update, 1, "lost");
    }

    #[test]
    fn tokens_that_do_not_increase_are_flagged() {
        let mut h = clean_history();
        // C (returned last) gets a token below B's.
        for op in h.iter_mut().filter(|op| op.lease == Some(2)) {
            if op.token.is_some() {
                op.token = Some(8);
            }
        }
        let v = check(&h, &state(3), &Config::default());
        assert_eq!(v.fencing, 1, "{v:?}");
    }

    #[test]
    fn a_rejected_write_of_a_valid_holder_is_flagged_a_stale_one_is_not() {
        let mut h = clean_history();
        let fenced = h
            .iter_mut()
            .find(|op| op.call == Call::FencedWrite && op.lease == Some(2))
            .unwrap();
        fenced.outcome = Outcome::Rejected;
        assert_eq!(check(&h, &state(3), &Config::default()).fencing, 1);
        // The same rejection after valid_until is fencing doing its job.
        let fenced = h
            .iter_mut()
            .find(|op| op.call == Call::FencedWrite && op.lease == Some(2))
            .unwrap();
        fenced.invoke = ms(1001);
        fenced.complete = ms(1001);
        assert_eq!(check(&h, &state(3), &Config::default()).fencing, 0);
    }

    #[test]
    fn a_write_acknowledged_after_its_lease_explains_one_lost_update() {
        // A checked its lease, then its write took until after valid_until
        // (a holder pause mid-write); B's update was lost to it.
        let mut h: History = lease_ops(&L {
            worker: 1,
            lease: 1,
            returned: 200,
            valid_until: 300,
            release: Some(250),
            token: 2,
            read: 0,
        });
        let mut a: History = lease_ops(&L {
            worker: 0,
            lease: 0,
            returned: 10,
            valid_until: 100,
            release: None,
            token: 1,
            read: 0,
        });
        let write = a.iter_mut().find(|op| op.call == Call::Write).unwrap();
        write.invoke = ms(40);
        write.complete = ms(260);
        h.extend(a.clone());
        let v = check(&h, &state(1), &Config::default());
        assert_eq!(v.lost_update, 0, "{v:?}");
        // A write sent after valid_until (a holder that never looked) is
        // not excused: that is the sleepy-holder control.
        let write = a.iter_mut().find(|op| op.call == Call::Write).unwrap();
        write.invoke = ms(250);
        let mut h2: History = h.iter().filter(|op| op.worker != 0).cloned().collect();
        h2.extend(a);
        assert_eq!(check(&h2, &state(1), &Config::default()).lost_update, 1);
    }

    #[test]
    fn a_rejected_fenced_write_acknowledged_after_valid_until_is_not_flagged() {
        let mut h = clean_history();
        let fenced = h
            .iter_mut()
            .find(|op| op.call == Call::FencedWrite && op.lease == Some(2))
            .unwrap();
        fenced.outcome = Outcome::Rejected;
        fenced.complete = ms(1001);
        assert_eq!(check(&h, &state(3), &Config::default()).fencing, 0);
    }

    #[test]
    fn process_stalls_do_not_count_against_bounds_or_validity() {
        let mut h = clean_history();
        let mut slow = op(0, None, Call::TryLock, 0, 900);
        slow.bound = Some(ms(120));
        slow.outcome = Outcome::Failed(ErrorKind::NoQuorum, "x".into());
        h.push(slow);
        let mut late: History = lease_ops(&L {
            worker: 5,
            lease: 9,
            returned: 1200,
            valid_until: 1100,
            release: Some(1210),
            token: 99,
            read: 3,
        });
        late.retain(|op| !matches!(op.call, Call::Write | Call::FencedWrite));
        h.extend(late);
        let mut s = state(3);
        let v = check(&h, &s, &Config::default());
        assert_eq!((v.unbounded_call, v.expired_lease_returned), (1, 1));
        s.stalls = vec![(ms(100), ms(700)), (ms(1050), ms(1199))];
        let v = check(&h, &s, &Config::default());
        assert_eq!(
            (v.unbounded_call, v.expired_lease_returned),
            (0, 0),
            "{v:?}"
        );
    }

    #[test]
    fn leftover_keys_are_flagged() {
        let mut s = state(3);
        s.leftover_keys.push(LeftoverKey {
            node: 2,
            key: "redlease:{soak-0}".into(),
            pttl_ms: -1,
        });
        assert_eq!(
            check(&clean_history(), &s, &Config::default()).leaked_keys,
            1
        );
    }

    #[test]
    fn panics_and_misclassified_errors_are_untyped() {
        let mut h = clean_history();
        let mut p = op(4, None, Call::Lock, 0, 5);
        p.outcome = Outcome::Failed(ErrorKind::Panic, "boom".into());
        h.push(p);
        let mut wrong = op(4, None, Call::Release, 0, 5);
        wrong.outcome = Outcome::Failed(ErrorKind::Taken, "taken?".into());
        h.push(wrong);
        let mut fine = op(4, None, Call::Lock, 0, 5);
        fine.outcome = Outcome::Failed(ErrorKind::NoQuorum, "2 of 5".into());
        h.push(fine);
        let mut s = state(3);
        s.process_panics = 1; // the caught one: not counted twice
        assert_eq!(check(&h, &s, &Config::default()).untyped_error, 2);
        s.process_panics = 3; // two more in background tasks
        assert_eq!(check(&h, &s, &Config::default()).untyped_error, 4);
    }

    #[test]
    fn a_multi_locks_call_is_classified_and_bounded_once_not_per_name() {
        // One lock_all of locks 0 and 1, recorded per name: a release
        // that failed as it may not, and took too long.
        let multi = crate::history::Multi {
            attempt: 0,
            locks: vec![0, 1],
        };
        let h: History = [0, 1]
            .into_iter()
            .map(|lock| {
                let mut o = op(0, Some(lock as LeaseId), Call::Release, 0, 900);
                o.lock = lock;
                o.bound = Some(ms(120));
                o.outcome = Outcome::Failed(ErrorKind::Taken, "taken?".into());
                o.multi = Some(multi.clone());
                o
            })
            .collect();
        let v = check(&h, &state(0), &Config::default());
        assert_eq!((v.untyped_error, v.unbounded_call), (1, 1), "{v:?}");
        // The lease checks are the multi-lock checker's there.
        let mut overlapping = clean_history();
        overlapping.extend(lease_ops(&L {
            worker: 3,
            lease: 3,
            returned: 300,
            valid_until: 800,
            release: Some(310),
            token: 10,
            read: 2,
        }));
        let multi = Config {
            multi: true,
            ..Config::default()
        };
        assert_eq!(check(&overlapping, &state(3), &multi).overlap, 0);
        assert!(check(&overlapping, &state(3), &Config::default()).overlap > 0);
    }

    #[test]
    fn election_calls_fail_only_as_they_may() {
        let failed = |call, kind: ErrorKind| {
            let mut o = op(0, None, call, 0, 5);
            o.outcome = Outcome::Failed(kind, "x".into());
            vec![o]
        };
        let untyped = |h: History| check(&h, &state(0), &Config::default()).untyped_error;
        for (call, kind) in [
            (Call::Campaign, ErrorKind::WaitTimeout),
            (Call::Campaign, ErrorKind::NoQuorum),
            (Call::Campaign, ErrorKind::NotHeld),
            (Call::Proclaim, ErrorKind::NotHeld),
            (Call::Resign, ErrorKind::NoQuorum),
            (Call::ForceRelease, ErrorKind::NoQuorum),
        ] {
            assert_eq!(untyped(failed(call, kind)), 0, "{call:?} {kind:?}");
        }
        for (call, kind) in [
            (Call::Campaign, ErrorKind::Lost),
            (Call::Proclaim, ErrorKind::Taken),
            (Call::Resign, ErrorKind::WaitTimeout),
            (Call::Observe, ErrorKind::NoQuorum),
            (Call::Leader, ErrorKind::NoQuorum),
            (Call::ForceRelease, ErrorKind::NotHeld),
        ] {
            assert_eq!(untyped(failed(call, kind)), 1, "{call:?} {kind:?}");
        }
        assert!([Call::Campaign, Call::Lock, Call::TryLock]
            .iter()
            .all(|c| c.is_acquire() && c.is_library()));
        assert!(!Call::Proclaim.is_acquire() && Call::Observe.is_library());
    }

    #[test]
    fn calls_past_their_bound_are_flagged() {
        let mut h = clean_history();
        let mut slow = op(0, None, Call::TryLock, 0, 400);
        slow.bound = Some(ms(120));
        slow.outcome = Outcome::Failed(ErrorKind::NoQuorum, "x".into());
        h.push(slow.clone());
        let config = Config::default(); // 250 ms slack
        assert_eq!(check(&h, &state(3), &config).unbounded_call, 1);
        slow.complete = ms(370);
        *h.last_mut().unwrap() = slow;
        assert_eq!(check(&h, &state(3), &config).unbounded_call, 0);
    }

    #[test]
    fn a_server_given_twice_must_be_refused_by_every_call() {
        let refused = |worker, call, pair| {
            let mut o = op(worker, None, call, 0, 5);
            o.outcome = Outcome::Failed(ErrorKind::SameServer, "same run_id".into());
            o.not_counted.same_server = Some(pair);
            o
        };
        let h: History = vec![
            refused(0, Call::CheckServers, (1, 0)),
            refused(1, Call::TryLock, (0, 1)),
            refused(2, Call::Lock, (1, 0)),
        ];
        let config = Config {
            same_server: Some([0, 1]),
            ..Config::default()
        };
        assert_eq!(check(&h, &state(0), &config).total(), 0);
        // Elsewhere SameServer is a kind no call may return.
        assert_eq!(check(&h, &state(0), &Config::default()).untyped_error, 3);
        // The wrong pair, another error, a lease, an unrefused check.
        let mut bad = h.clone();
        bad.push(refused(3, Call::Lock, (2, 0)));
        let mut no_quorum = op(4, None, Call::TryLock, 0, 5);
        no_quorum.outcome = Outcome::Failed(ErrorKind::NoQuorum, "2 of 5".into());
        bad.push(no_quorum);
        bad.extend(lease_ops(&L {
            worker: 5,
            lease: 0,
            returned: 10,
            valid_until: 500,
            release: Some(40),
            token: 1,
            read: 0,
        }));
        bad.push(op(6, None, Call::CheckServers, 0, 5));
        let v = check(&bad, &state(1), &config);
        assert_eq!(v.same_server, 4, "{v:?}");
        assert_eq!(v.untyped_error, 0, "{v:?}");
    }
}
