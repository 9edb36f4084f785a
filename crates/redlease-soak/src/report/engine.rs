//! The engine run's part of the report: its calls by kind, how the order
//! of its waiters was judged and what excused pairs from it, and the JSON
//! figures.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::json;

use super::{ms, Run};
use crate::engine_checker::EngineVerdict;

/// The kinds in the order the report shows them.
const KINDS: [&str; 4] = ["write", "read", "permit", "set"];

/// Calls and waits by kind, the order's judgement, starvation, peaks.
pub(super) fn observations(w: &mut String, run: &Run, verdict: &EngineVerdict) {
    let Some(engine) = &run.engine else {
        return;
    };
    let f = &verdict.figures;
    let peaks: Vec<String> = f
        .peak
        .iter()
        .map(|(lock, peak)| match engine.capacity.get(lock) {
            Some(n) => format!("lock {lock}: {peak} of {n} permits"),
            None => format!("lock {lock}: {peak} holder(s)"),
        })
        .collect();
    let _ = writeln!(
        w,
        "engine: modes {}; most held at once: {}",
        engine.modes,
        if peaks.is_empty() {
            "none".to_string()
        } else {
            peaks.join(", ")
        }
    );
    let _ = writeln!(
        w,
        "  {:<7} {:>6} {:>8} {:>6} {:>8} {:>7} {:>10} {:>7} {:>10} {:>6} {:>8} {:>9}",
        "kind",
        "calls",
        "granted",
        "waits",
        "granted",
        "judged",
        "contended",
        "out of",
        "overtaken",
        "pairs",
        "starved",
        "max wait"
    );
    for kind in KINDS {
        let Some(k) = f.kinds.get(kind) else {
            continue;
        };
        let _ = writeln!(
            w,
            "  {kind:<7} {:>6} {:>8} {:>6} {:>8} {:>7} {:>10} {:>7} {:>10} {:>6} {:>8} {:>9}",
            k.calls,
            k.granted,
            k.waits.0,
            k.waits.1,
            k.judged,
            k.contended.0,
            k.contended.1,
            k.overtaken.0,
            k.overtaken.1,
            k.starved,
            ms(k.max_wait)
        );
    }
    let _ = writeln!(
        w,
        "  (judged: waits judged for order; contended: pairs of such a waiter and a later \
         arrival granted while it waited, out of order: of them, beyond the slacks; \
         overtaken: waits flagged, and their flagged pairs)"
    );
    let excused: Vec<String> = f.excused.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let _ = writeln!(
        w,
        "  order: {} pair(s) of a waiter and a later arrival on a shared name, granted while \
         it waited; {} of them out of order (beyond the slacks): {} flagged, excused: {}",
        f.contended,
        f.out_of_order,
        verdict.overtaken,
        if excused.is_empty() {
            "none".to_string()
        } else {
            excused.join(", ")
        }
    );
    for kind in KINDS {
        if let Some((still, case)) = f.kinds.get(kind).and_then(|k| k.worst_overtake.as_ref()) {
            let _ = writeln!(
                w,
                "  worst overtake of a {kind} waiter (it still waited {} after): {case}",
                ms(*still)
            );
        }
    }
    let _ = writeln!(
        w,
        "  starvation: longest kept out by later arrivals after the earlier holders let go \
         (less stalls and faults) {} (bound {})",
        ms(f.max_kept_out),
        ms(engine.starvation_bound)
    );
}

/// The figures of the JSON line's `"engine"`.
pub(super) fn json(verdict: &EngineVerdict) -> serde_json::Value {
    let f = &verdict.figures;
    let ms = |d: Duration| json!(d.as_millis() as u64);
    let kinds: serde_json::Map<String, serde_json::Value> = KINDS
        .iter()
        .filter_map(|&kind| {
            let k = f.kinds.get(kind)?;
            Some((
                kind.to_string(),
                json!({
                    "calls": k.calls,
                    "granted": k.granted,
                    "waits": k.waits.0,
                    "waits_granted": k.waits.1,
                    "judged": k.judged,
                    "contended": k.contended.0,
                    "out_of_order": k.contended.1,
                    "overtaken": k.overtaken.0,
                    "overtaken_pairs": k.overtaken.1,
                    "starved": k.starved,
                    "max_wait_ms": ms(k.max_wait),
                }),
            ))
        })
        .collect();
    let excused: serde_json::Map<String, serde_json::Value> = f
        .excused
        .iter()
        .map(|(k, n)| (k.to_string(), json!(n)))
        .collect();
    json!({
        "kinds": kinds,
        "contended": f.contended,
        "out_of_order": f.out_of_order,
        "excused": excused,
        "max_overtaken_ms": ms(f.worst_overtake.as_ref().map_or(Duration::ZERO, |(d, _)| *d)),
        "max_kept_out_ms": ms(f.max_kept_out),
    })
}
