//! The readable summary and the one-line JSON report of a run.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde_json::json;

use crate::checker::{FinalState, Verdict, JUDGED_ELSEWHERE};
use crate::election_checker::{ElectionRun, ElectionVerdict};
use crate::engine_checker::{EngineRun, EngineVerdict};
use crate::history::{Call, ErrorKind, History, Mode, Outcome};
use crate::multi_checker::{MultiLocks, MultiVerdict};
use crate::rw_checker::{self, ReadWrite, RwVerdict};
use crate::sem_checker::{SemVerdict, Semaphores};

mod elections;
mod engine;

/// Everything a finished run hands to the checker and the report.
pub struct Run {
    pub scenario: String,
    pub seed: u64,
    pub nodes: usize,
    /// The requested length (scenarios) or the measured one (controls).
    pub seconds: f64,
    pub elapsed: Duration,
    pub ttl: Duration,
    pub history: History,
    pub faults: BTreeMap<&'static str, u64>,
    pub state: FinalState,
    /// What a control did, step by step; anything else worth saying.
    pub notes: Vec<String>,
    /// The node list names one server twice, as these entries (the
    /// checker's `Config::same_server`).
    pub same_server: Option<[usize; 2]>,
    /// A read-write run: the read-write checker judges it too, with these
    /// settings.
    pub read_write: Option<ReadWrite>,
    /// A semaphore run: the semaphore checker judges it too, with these
    /// settings.
    pub semaphore: Option<Semaphores>,
    /// A multi-lock run: the multi-lock checker judges it too, with these
    /// settings.
    pub multi: Option<MultiLocks>,
    /// An engine run: the engine checker judges it too, with its journal
    /// of acquire calls and its faults.
    pub engine: Option<EngineRun>,
    /// An elections run: the elections checker judges its leads and what
    /// its observers were told.
    pub elections: Option<ElectionRun>,
}

impl Run {
    /// Library calls made (a multi-lock's once, not once per name).
    pub fn operations(&self) -> u64 {
        self.history
            .iter()
            .filter(|op| op.call.is_library() && op.is_call())
            .count() as u64
    }

    /// Failed acquisitions (campaigns among them) in which votes were not
    /// counted because of the restart quarantine or the clock-jump guard:
    /// `(all, refused)`, where `refused` are those whose quarantined votes
    /// would have made the quorum (the lock was refused because of them).
    pub fn quarantined(&self) -> (u64, u64) {
        let ops = self
            .history
            .iter()
            .filter(|op| op.call.is_acquire() && op.is_call())
            .filter(|op| op.not_counted.quarantined() > 0);
        ops.fold((0, 0), |(all, refused), op| {
            (all + 1, refused + u64::from(op.not_counted.decisive))
        })
    }

    /// Leases handed out (a multi-lease once, however many names it holds;
    /// an election's lead as one).
    pub fn acquired(&self) -> u64 {
        self.history
            .iter()
            .filter(|op| op.call.is_acquire() && op.outcome == Outcome::Ok)
            .filter(|op| op.is_call())
            .count() as u64
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// The other checkers' verdicts, where the run has them.
#[derive(Clone, Copy, Default)]
pub struct Others<'a> {
    /// The read-write checker's, in a read-write run.
    pub rw: Option<&'a RwVerdict>,
    /// The semaphore checker's, in a semaphore run.
    pub sem: Option<&'a SemVerdict>,
    /// The multi-lock checker's, in a multi-lock run.
    pub multi: Option<&'a MultiVerdict>,
    /// The engine checker's, in an engine run.
    pub engine: Option<&'a EngineVerdict>,
    /// The elections checker's, in an elections run.
    pub elections: Option<&'a ElectionVerdict>,
}

impl Others<'_> {
    /// Whether another checker judges the leases (see
    /// [`JUDGED_ELSEWHERE`]).
    fn any(&self) -> bool {
        self.rw.is_some()
            || self.sem.is_some()
            || self.multi.is_some()
            || self.engine.is_some()
            || self.elections.is_some()
    }
}

/// The readable summary (everything but the JSON line).
pub fn summary(run: &Run, verdict: &Verdict, others: Others<'_>, command: &str) -> String {
    let Others {
        rw,
        sem,
        multi,
        engine,
        elections,
    } = others;
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(
        w,
        "redlease soak: scenario {}, {} node(s), seed {}",
        run.scenario, run.nodes, run.seed
    );
    let _ = writeln!(w, "  replay: {command}");
    let _ = writeln!(
        w,
        "  ran {:.1} s, TTL {}",
        run.elapsed.as_secs_f64(),
        ms(run.ttl)
    );
    for note in &run.notes {
        let _ = writeln!(w, "  - {note}");
    }

    let _ = writeln!(w, "\noperations: {} library calls", run.operations());
    // Acquires by mode (readers' and permits' apart, where there are
    // any); extends and releases of every mode; a multi-lock's calls
    // among them, once each.
    let rows = [
        (Call::Lock, Some((Mode::Write, false))),
        (Call::TryLock, Some((Mode::Write, false))),
        (Call::Lock, Some((Mode::Write, true))),
        (Call::TryLock, Some((Mode::Write, true))),
        (Call::Lock, Some((Mode::Read, false))),
        (Call::TryLock, Some((Mode::Read, false))),
        (Call::Lock, Some((Mode::Permit, false))),
        (Call::TryLock, Some((Mode::Permit, false))),
        (Call::Extend, None),
        (Call::Release, None),
        (Call::Campaign, None),
        (Call::Proclaim, None),
        (Call::Resign, None),
        (Call::Leader, None),
        (Call::Observe, None),
        (Call::ForceRelease, None),
    ];
    for (call, kind) in rows {
        let ops: Vec<_> = run
            .history
            .iter()
            .filter(|op| op.call == call && op.is_call())
            // A multi-lock's call once, whatever the mode of its first name.
            .filter(|op| {
                kind.is_none_or(|(m, multi)| op.multi.is_some() == multi && (multi || op.mode == m))
            })
            .collect();
        if ops.is_empty() {
            continue;
        }
        let ok = ops.iter().filter(|op| op.outcome == Outcome::Ok).count();
        let mut errors: BTreeMap<ErrorKind, usize> = BTreeMap::new();
        for op in &ops {
            if let Some(kind) = op.error() {
                *errors.entry(kind).or_default() += 1;
            }
        }
        let mut durations: Vec<Duration> = ops.iter().map(|op| op.duration()).collect();
        durations.sort();
        let errors: Vec<String> = errors
            .iter()
            .map(|(k, n)| format!("{} {n}", k.label()))
            .collect();
        let _ = writeln!(
            w,
            "  {:<13} {:>7} calls {:>7} ok   p50 {:>7}  p99 {:>7}  max {:>7}   {}",
            ops[0].label(),
            ops.len(),
            ok,
            ms(percentile(&durations, 0.5)),
            ms(percentile(&durations, 0.99)),
            ms(percentile(&durations, 1.0)),
            if errors.is_empty() {
                String::new()
            } else {
                format!("errors: {}", errors.join(", "))
            }
        );
    }

    let acquired = run.acquired();
    let mut left: Vec<Duration> = run
        .history
        .iter()
        .filter(|op| op.call.is_acquire() && op.outcome == Outcome::Ok)
        .filter(|op| op.is_call())
        .filter_map(|op| op.valid_until.map(|v| v.saturating_sub(op.complete)))
        .collect();
    left.sort();
    let _ = writeln!(
        w,
        "acquired: {acquired} ({:.1}/s); validity left at return: min {}, p1 {}, p50 {}",
        acquired as f64 / run.elapsed.as_secs_f64().max(0.001),
        ms(percentile(&left, 0.0)),
        ms(percentile(&left, 0.01)),
        ms(percentile(&left, 0.5)),
    );

    let count = |call: Call, f: &dyn Fn(&Outcome) -> bool| {
        run.history
            .iter()
            .filter(|op| op.call == call && f(&op.outcome))
            .count()
    };
    let _ = writeln!(
        w,
        "writes: counter {} acknowledged, {} skipped (lease within the margin of its end), {} failed; \
         fenced {} accepted, {} rejected",
        count(Call::Write, &|o| matches!(o, Outcome::Value(_))),
        count(Call::Write, &|o| *o == Outcome::Skipped),
        count(Call::Write, &|o| matches!(o, Outcome::Failed(..))),
        count(Call::FencedWrite, &|o| *o == Outcome::Ok),
        count(Call::FencedWrite, &|o| *o == Outcome::Rejected),
    );
    let total_faults: u64 = run.faults.values().sum();
    let faults: Vec<String> = run.faults.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let _ = writeln!(
        w,
        "faults: {total_faults} applied{}{}",
        if faults.is_empty() { "" } else { ": " },
        faults.join(", ")
    );

    observations(w, run);

    if rw.is_some() {
        read_write_observations(w, run);
    }
    if let Some(sem) = sem {
        semaphore_observations(w, run, sem);
    }
    if let Some(multi) = multi {
        multi_observations(w, run, multi);
    }
    if let Some(engine) = engine {
        engine::observations(w, run, engine);
    }
    if let Some(elections) = elections {
        self::elections::observations(w, run, elections);
    }

    let _ = writeln!(w, "\nchecks:");
    checks(
        w,
        &exclusive_counts(verdict, others.any()),
        &verdict.examples,
    );
    if let Some(rw) = rw {
        let _ = writeln!(
            w,
            "read-write checks (overlap, expiry at return and token order for both modes):"
        );
        checks(w, &rw.counts(), &rw.examples);
    }
    if let Some(sem) = sem {
        let _ = writeln!(
            w,
            "semaphore checks (holders at once, token order and expiry at return of the permits):"
        );
        checks(w, &sem.counts(), &sem.examples);
    }
    if let Some(multi) = multi {
        let _ = writeln!(
            w,
            "multi-lock checks (overlap, token order and expiry at return per name, whole \
             grants, lock_all waits):"
        );
        checks(w, &multi.counts(), &multi.examples);
    }
    if let Some(engine) = engine {
        let _ = writeln!(
            w,
            "engine checks (capacity, order and starvation per name, every mode; token order, \
             stale reads and expiry at return):"
        );
        checks(w, &engine.counts(), &engine.examples);
    }
    if let Some(elections) = elections {
        let _ = writeln!(
            w,
            "elections checks (leads of a name at once, terms in the order leads started, \
             what observers were told: its order, and that a campaigner held it):"
        );
        checks(w, &elections.counts(), &elections.examples);
    }
    out
}

/// The exclusive checker's categories, but those a read-write, semaphore
/// or multi-lock run leaves to its own checker (`elsewhere`).
fn exclusive_counts(verdict: &Verdict, elsewhere: bool) -> Vec<(&'static str, u64)> {
    verdict
        .counts()
        .into_iter()
        .filter(|(name, _)| !(elsewhere && JUDGED_ELSEWHERE.contains(name)))
        .collect()
}

fn checks(w: &mut String, counts: &[(&'static str, u64)], examples: &BTreeMap<&str, Vec<String>>) {
    for &(name, n) in counts {
        let _ = writeln!(
            w,
            "  {name:<24} {n:>6}  {}",
            if n == 0 { "ok" } else { "VIOLATION" }
        );
        for example in examples.get(name).into_iter().flatten() {
            let _ = writeln!(w, "      {example}");
        }
    }
}

/// Leases by mode, and the writers' waits.
fn read_write_observations(w: &mut String, run: &Run) {
    let granted = |mode: Mode| {
        run.history
            .iter()
            .filter(|op| matches!(op.call, Call::Lock | Call::TryLock))
            .filter(|op| op.mode == mode && op.outcome == Outcome::Ok)
            .count()
    };
    let tokens: Vec<u64> = run
        .history
        .iter()
        .filter(|op| op.mode == Mode::Read && op.outcome == Outcome::Ok)
        .filter(|op| matches!(op.call, Call::Lock | Call::TryLock))
        .filter_map(|op| op.token)
        .collect();
    let mut waits: Vec<Duration> = run
        .history
        .iter()
        .filter(|op| op.call == Call::Lock && op.mode == Mode::Write)
        .map(|op| op.duration())
        .collect();
    waits.sort();
    let judged = run
        .read_write
        .as_ref()
        .map_or(&[][..], |rw| &rw.waits_judged);
    let judged: Vec<Duration> = rw_checker::writer_waits(&run.history, judged)
        .iter()
        .map(|w| w.ended.saturating_sub(w.began))
        .collect();
    let _ = writeln!(
        w,
        "read-write: {} read leases ({} saw a write generation above 0), {} write leases; \
         write-lock waits p50 {}, p99 {}, max {}; {} of them judged for starvation \
         (longest {})",
        granted(Mode::Read),
        tokens.iter().filter(|&&t| t > 0).count(),
        granted(Mode::Write),
        ms(percentile(&waits, 0.5)),
        ms(percentile(&waits, 0.99)),
        ms(percentile(&waits, 1.0)),
        judged.len(),
        ms(judged.iter().copied().max().unwrap_or_default()),
    );
}

/// Permits granted, refused for want of a free one, and how full each
/// name got.
fn semaphore_observations(w: &mut String, run: &Run, sem: &SemVerdict) {
    let acquires = || {
        run.history
            .iter()
            .filter(|op| matches!(op.call, Call::Lock | Call::TryLock) && op.mode == Mode::Permit)
    };
    let granted = |call: Call| {
        acquires()
            .filter(|op| op.call == call && op.outcome == Outcome::Ok)
            .count()
    };
    let taken = acquires()
        .filter(|op| op.error() == Some(ErrorKind::Taken))
        .count();
    let peaks: Vec<String> = sem
        .peak
        .iter()
        .map(|(lock, peak)| format!("lock {lock}: {peak}"))
        .collect();
    let _ = writeln!(
        w,
        "semaphore: {} permit(s) per name; {} permits by acquire, {} by try_acquire; {taken} \
         acquisition(s) found every permit held (Taken); most holders at once: {}",
        run.semaphore.as_ref().map_or(0, |s| s.permits),
        granted(Call::Lock),
        granted(Call::TryLock),
        if peaks.is_empty() {
            "none".to_string()
        } else {
            peaks.join(", ")
        }
    );
}

/// Multi-leases and single leases granted, and how long the `lock_all`
/// calls waited.
fn multi_observations(w: &mut String, run: &Run, multi: &MultiVerdict) {
    let f = &multi.figures;
    let names: u64 = run
        .history
        .iter()
        .filter(|op| matches!(op.call, Call::Lock | Call::TryLock) && op.outcome == Outcome::Ok)
        .filter(|op| op.multi.is_some())
        .count() as u64;
    let granted = f.waiting.1 + f.once.1;
    let _ = writeln!(
        w,
        "multi-lock: {granted} multi-leases ({names} names in all, {:.1} per lease) and {} \
         single leases; lock_all {} calls, {} granted; try_lock_all {} calls, {} granted",
        names as f64 / granted.max(1) as f64,
        f.single_leases,
        f.waiting.0,
        f.waiting.1,
        f.once.0,
        f.once.1,
    );
    if f.waiting.0 == 0 {
        return;
    }
    let _ = writeln!(
        w,
        "      lock_all waits: max {} (any client); {} judged for starvation ({} gave up), \
         longest {}; longest kept out by later single lockers {} (bound {})",
        ms(f.max_wait),
        f.judged.0,
        f.judged.1,
        ms(f.max_judged_wait),
        ms(f.max_kept_out),
        ms(run
            .multi
            .as_ref()
            .map_or(Duration::ZERO, |m| m.starvation_bound)),
    );
}

/// Things that are not violations but say how the library behaved.
fn observations(w: &mut String, run: &Run) {
    let exhausted = run
        .history
        .iter()
        .filter(|op| matches!(op.call, Call::Lock | Call::TryLock))
        .filter(|op| match &op.outcome {
            Outcome::Failed(ErrorKind::ValidityExhausted, _) => true,
            Outcome::Failed(ErrorKind::WaitTimeout, text) => text.contains("leaving no validity"),
            _ => false,
        })
        .count();
    // A release or extend refused by a quorum while the lease was valid by
    // our clock means our keys vanished early, or the call itself ran past
    // valid_until: worth a look even without an overlap.
    let refused_valid: Vec<_> = run
        .history
        .iter()
        .filter(|op| matches!(op.call, Call::Release | Call::Extend))
        .filter(|op| op.error() == Some(ErrorKind::NotHeld))
        .filter(|op| op.valid_until.is_some_and(|v| op.invoke < v))
        .collect();
    let timed_out = run
        .history
        .iter()
        .filter(|op| matches!(op.call, Call::Lock | Call::TryLock))
        .filter(|op| matches!(&op.outcome, Outcome::Failed(_, text) if text.contains("no reply within")))
        .count();
    let late_writes = run
        .history
        .iter()
        .filter(|op| op.call == Call::Write && matches!(op.outcome, Outcome::Value(_)))
        .filter(|op| {
            op.valid_until
                .is_some_and(|v| op.invoke < v && op.complete > v)
        })
        .count();
    let _ = writeln!(
        w,
        "observations: {timed_out} acquisitions failed with nodes that did not answer within \
         the node timeout; {exhausted} ended as ValidityExhausted; \
         {late_writes} write(s) sent inside the lease were acknowledged after it ended; \
         {} release(s)/extend(s) refused as NotHeld while the lease was valid when called",
        refused_valid.len()
    );
    // Durability::required: the write landed but too few replicas
    // acknowledged it (NodeErrorKind::NotReplicated's text).
    let unreplicated = run
        .history
        .iter()
        .filter(|op| matches!(&op.outcome, Outcome::Failed(_, text) if text.contains("required replica")))
        .count();
    let (quarantined, refused) = run.quarantined();
    if quarantined > 0 {
        let votes = |f: &dyn Fn(&crate::history::NotCounted) -> u32| -> u64 {
            run.history
                .iter()
                .filter(|op| matches!(op.call, Call::Lock | Call::TryLock))
                .map(|op| u64::from(f(&op.not_counted)))
                .sum()
        };
        let _ = writeln!(
            w,
            "      {quarantined} failed acquisition(s) had votes not counted ({} of a server in its \
             restart quarantine, {} of one whose clock jumped); {refused} of them were refused \
             for it (those votes would have made the quorum)",
            votes(&|n| n.restarted),
            votes(&|n| n.clock_jumped),
        );
    }
    if unreplicated > 0 {
        let _ = writeln!(
            w,
            "      {unreplicated} call(s) failed on a node whose write fewer replicas acknowledged \
             than durability requires (NotReplicated)"
        );
    }
    for op in refused_valid.iter().take(3) {
        if let Outcome::Failed(_, text) = &op.outcome {
            let _ = writeln!(
                w,
                "      {} by worker {} lease {:?} at {:.1} ms ({} left, took {}): {text}",
                op.call.label(),
                op.worker,
                op.lease,
                op.invoke.as_secs_f64() * 1e3,
                ms(op.valid_until.unwrap_or_default().saturating_sub(op.invoke)),
                ms(op.duration()),
            );
        }
    }
}

/// The one-line JSON report; a read-write run's has `rw_violations` too,
/// a semaphore run's `sem_violations` and `sem_peak` (the most holders at
/// once, per name), a multi-lock run's `multi_violations` and `multi`
/// (its calls and waits), an engine run's `engine_violations` and
/// `engine` (its calls by kind, how the order was judged), an elections
/// run's `elections_violations` and `elections` (its leads, handoffs and
/// observers).
pub fn json(run: &Run, verdict: &Verdict, others: Others<'_>) -> String {
    let Others {
        rw,
        sem,
        multi,
        engine,
        elections,
    } = others;
    let faults: serde_json::Map<String, serde_json::Value> = run
        .faults
        .iter()
        .map(|(k, n)| (k.to_string(), json!(n)))
        .collect();
    let map = |counts: &[(&str, u64)]| -> serde_json::Map<String, serde_json::Value> {
        counts
            .iter()
            .map(|(k, n)| (k.to_string(), json!(n)))
            .collect()
    };
    let violations = map(&exclusive_counts(verdict, others.any()));
    let mut report = json!({
        "scenario": run.scenario,
        "seed": run.seed,
        "nodes": run.nodes,
        "seconds": run.seconds,
        "operations": run.operations(),
        "acquired": run.acquired(),
        "refused_quarantined": run.quarantined().1,
        "faults": faults,
        "violations": violations,
    });
    if let Some(rw) = rw {
        report["rw_violations"] = serde_json::Value::Object(map(&rw.counts()));
    }
    if let Some(sem) = sem {
        report["sem_violations"] = serde_json::Value::Object(map(&sem.counts()));
        report["sem_peak"] = sem
            .peak
            .iter()
            .map(|(lock, peak)| (lock.to_string(), json!(peak)))
            .collect::<serde_json::Map<_, _>>()
            .into();
    }
    if let Some(multi) = multi {
        let f = &multi.figures;
        let ms = |d: Duration| json!(d.as_millis() as u64);
        report["multi_violations"] = serde_json::Value::Object(map(&multi.counts()));
        report["multi"] = json!({
            "lock_all": f.waiting.0,
            "lock_all_granted": f.waiting.1,
            "try_lock_all": f.once.0,
            "try_lock_all_granted": f.once.1,
            "single_leases": f.single_leases,
            "max_wait_ms": ms(f.max_wait),
            "judged_waits": f.judged.0,
            "judged_gave_up": f.judged.1,
            "max_judged_wait_ms": ms(f.max_judged_wait),
            "max_kept_out_ms": ms(f.max_kept_out),
        });
    }
    if let Some(engine) = engine {
        report["engine_violations"] = serde_json::Value::Object(map(&engine.counts()));
        report["engine"] = self::engine::json(engine);
    }
    if let Some(elections) = elections {
        report["elections_violations"] = serde_json::Value::Object(map(&elections.counts()));
        report["elections"] = self::elections::json(elections);
    }
    report.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> Run {
        Run {
            scenario: "rw-mixed".into(),
            seed: 1,
            nodes: 5,
            seconds: 1.0,
            elapsed: Duration::from_secs(1),
            ttl: Duration::from_millis(500),
            history: Vec::new(),
            faults: BTreeMap::new(),
            state: FinalState::default(),
            notes: Vec::new(),
            same_server: None,
            read_write: None,
            semaphore: None,
            multi: None,
            engine: None,
            elections: None,
        }
    }

    #[test]
    fn a_read_write_report_shows_both_checkers_and_no_check_twice() {
        let verdict = Verdict::default();
        let rw = RwVerdict {
            writer_overlap: 2,
            ..RwVerdict::default()
        };
        let line: serde_json::Value = serde_json::from_str(&json(
            &run(),
            &verdict,
            Others {
                rw: Some(&rw),
                ..Others::default()
            },
        ))
        .unwrap();
        assert!(line["violations"].get("overlap").is_none(), "{line}");
        assert_eq!(line["violations"]["lost_update"], 0);
        assert_eq!(line["rw_violations"]["writer_overlap"], 2);
        let text = summary(
            &run(),
            &verdict,
            Others {
                rw: Some(&rw),
                ..Others::default()
            },
            "replay",
        );
        assert!(
            text.contains("writer_overlap                2  VIOLATION"),
            "{text}"
        );
        assert!(!text.contains("  overlap "), "{text}");
        // An exclusive run's report is as it was.
        let line: serde_json::Value =
            serde_json::from_str(&json(&run(), &verdict, Others::default())).unwrap();
        assert_eq!(line["violations"]["overlap"], 0);
        assert!(line.get("rw_violations").is_none());
        assert!(line.get("sem_violations").is_none());
    }

    #[test]
    fn a_multi_lock_report_shows_its_checker_and_its_waits() {
        let verdict = Verdict::default();
        let multi = MultiVerdict {
            name_overlap: 1,
            figures: crate::multi_checker::MultiFigures {
                waiting: (10, 9),
                once: (4, 1),
                max_wait: Duration::from_millis(4001),
                max_kept_out: Duration::from_millis(250),
                ..Default::default()
            },
            ..MultiVerdict::default()
        };
        let mut run = run();
        run.multi = Some(MultiLocks {
            waits_judged: vec![6, 7],
            starvation_bound: Duration::from_secs(3),
            fenced: true,
            flagged_by: None,
        });
        let line: serde_json::Value = serde_json::from_str(&json(
            &run,
            &verdict,
            Others {
                multi: Some(&multi),
                ..Others::default()
            },
        ))
        .unwrap();
        assert!(line["violations"].get("overlap").is_none(), "{line}");
        assert_eq!(line["multi_violations"]["name_overlap"], 1);
        assert_eq!(line["multi"]["lock_all_granted"], 9);
        assert_eq!(line["multi"]["max_wait_ms"], 4001);
        assert_eq!(line["multi"]["max_kept_out_ms"], 250);
        let text = summary(
            &run,
            &verdict,
            Others {
                multi: Some(&multi),
                ..Others::default()
            },
            "replay",
        );
        assert!(
            text.contains("name_overlap                  1  VIOLATION"),
            "{text}"
        );
        assert!(
            text.contains("lock_all 10 calls, 9 granted; try_lock_all 4 calls, 1 granted")
                && text.contains("max 4001 ms (any client)")
                && text.contains("single lockers 250 ms (bound 3000 ms)"),
            "{text}"
        );
    }

    #[test]
    fn a_semaphore_report_shows_its_checker_and_how_full_the_names_got() {
        let verdict = Verdict::default();
        let sem = SemVerdict {
            over_permits: 1,
            peak: BTreeMap::from([(0, 3), (1, 2)]),
            ..SemVerdict::default()
        };
        let mut run = run();
        run.semaphore = Some(Semaphores {
            permits: 2,
            flagged_by: Some("over_permits"),
        });
        let line: serde_json::Value = serde_json::from_str(&json(
            &run,
            &verdict,
            Others {
                sem: Some(&sem),
                ..Others::default()
            },
        ))
        .unwrap();
        assert!(line["violations"].get("overlap").is_none(), "{line}");
        assert_eq!(line["sem_violations"]["over_permits"], 1);
        assert_eq!(line["sem_violations"]["fencing"], 0);
        assert_eq!(line["sem_peak"]["0"], 3);
        assert!(line.get("rw_violations").is_none());
        let text = summary(
            &run,
            &verdict,
            Others {
                sem: Some(&sem),
                ..Others::default()
            },
            "replay",
        );
        assert!(
            text.contains("over_permits                  1  VIOLATION"),
            "{text}"
        );
        assert!(
            text.contains("2 permit(s) per name") && text.contains("lock 0: 3, lock 1: 2"),
            "{text}"
        );
        assert!(!text.contains("  overlap "), "{text}");
    }

    #[test]
    fn an_elections_report_shows_its_checker_its_leads_and_observers() {
        use crate::election_checker::{
            ElectionFigures, ElectionRun, ElectionVerdict, Lead, ObserverFigures,
        };
        let verdict = Verdict::default();
        let elections = ElectionVerdict {
            lead_overlap: 1,
            figures: ElectionFigures {
                leads: BTreeMap::from([(0, 3), (1, 2)]),
                ended: BTreeMap::from([("resigned", 4), ("dropped", 1)]),
                lost: BTreeMap::from([("expired", 1)]),
                handoffs: (3, 2),
                gap: (Duration::from_millis(4), Duration::from_millis(600)),
                proclaims: (6, 5),
                failed: 2,
                observers: BTreeMap::from([(
                    5,
                    ObserverFigures {
                        leaders: 7,
                        vacancies: 4,
                        leads_seen: 5,
                        last_vacant: (2, 2),
                    },
                )]),
                told_after: (Duration::from_millis(1), Duration::from_millis(90)),
                ..ElectionFigures::default()
            },
            ..ElectionVerdict::default()
        };
        let mut run = run();
        run.elections = Some(ElectionRun {
            names: 2,
            leads: vec![Lead {
                term: 7,
                value: "w0-e0-c0".into(),
                start: Duration::from_millis(10),
                resign: Some(Duration::from_millis(30)),
                ..Lead::default()
            }],
            ..ElectionRun::default()
        });
        let others = Others {
            elections: Some(&elections),
            ..Others::default()
        };
        let line: serde_json::Value = serde_json::from_str(&json(&run, &verdict, others)).unwrap();
        assert!(line["violations"].get("overlap").is_none(), "{line}");
        assert_eq!(line["elections_violations"]["lead_overlap"], 1);
        assert_eq!(line["elections_violations"]["observer_order"], 0);
        assert_eq!(line["elections"]["leads"], 5);
        assert_eq!(line["elections"]["handoffs"], 3);
        assert_eq!(line["elections"]["ended"]["dropped"], 1);
        assert_eq!(line["elections"]["observers"]["5"]["leads_seen"], 5);
        let text = summary(&run, &verdict, others, "replay");
        assert!(
            text.contains("lead_overlap                  1  VIOLATION"),
            "{text}"
        );
        assert!(
            text.contains("5 leads (election 0: 3, election 1: 2)")
                && text.contains("ended: dropped 1, resigned 4; lost before they ended: expired 1")
                && text.contains("handoffs: 3 (2 to another campaigner)")
                && text.contains("p50 4.0 ms, max 600 ms; of them, 0 with another")
                && text.contains("proclaims: 6 tried, 5 ok; campaigns failed: 2")
                && text.contains(
                    "observer 5: told 7 leader change(s) and 4 vacancies; 5 of the 5 leads' \
                     terms seen; last word \"nobody leads\" on 2 of 2 name(s)"
                )
                && text.contains("lead: election 0 term 7 by worker 0 (\"w0-e0-c0\""),
            "{text}"
        );
        assert!(!text.contains("  overlap "), "{text}");
    }

    #[test]
    fn an_engine_report_shows_its_checker_its_kinds_and_what_was_excused() {
        use crate::engine_checker::{EngineFigures, KindFigures};
        let verdict = Verdict::default();
        let write = KindFigures {
            calls: 10,
            granted: 9,
            waits: (8, 8),
            judged: 8,
            contended: (20, 3),
            overtaken: (1, 2),
            worst_overtake: Some((Duration::from_millis(640), "case".into())),
            ..KindFigures::default()
        };
        let engine = EngineVerdict {
            overtaken: 2,
            figures: EngineFigures {
                kinds: BTreeMap::from([("write", write)]),
                contended: 20,
                out_of_order: 3,
                excused: BTreeMap::from([("node faults", 1)]),
                max_kept_out: Duration::from_millis(250),
                peak: BTreeMap::from([(0, 1), (4, 2)]),
                ..EngineFigures::default()
            },
            ..EngineVerdict::default()
        };
        let mut run = run();
        run.engine = Some(EngineRun {
            capacity: BTreeMap::from([(4, 2)]),
            starvation_bound: Duration::from_secs(2),
            modes: "write,permit".into(),
            ..EngineRun::default()
        });
        let others = Others {
            engine: Some(&engine),
            ..Others::default()
        };
        let line: serde_json::Value = serde_json::from_str(&json(&run, &verdict, others)).unwrap();
        assert!(line["violations"].get("overlap").is_none(), "{line}");
        assert_eq!(line["engine_violations"]["overtaken"], 2);
        assert_eq!(line["engine"]["kinds"]["write"]["overtaken_pairs"], 2);
        assert_eq!(line["engine"]["kinds"]["write"]["out_of_order"], 3);
        assert_eq!(line["engine"]["excused"]["node faults"], 1);
        assert_eq!(line["engine"]["max_kept_out_ms"], 250);
        let text = summary(&run, &verdict, others, "replay");
        assert!(
            text.contains("overtaken                     2  VIOLATION"),
            "{text}"
        );
        assert!(
            text.contains("most held at once: lock 0: 1 holder(s), lock 4: 2 of 2 permits")
                && text.contains("20 pair(s) of a waiter")
                && text.contains(
                    "3 of them out of order (beyond the slacks): 2 flagged, excused: node faults 1"
                )
                && text.contains(
                    "worst overtake of a write waiter (it still waited 640 ms after): case"
                ),
            "{text}"
        );
        assert!(!text.contains("  overlap "), "{text}");
    }
}
