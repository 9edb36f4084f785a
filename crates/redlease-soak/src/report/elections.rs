//! The elections run's part of the report: its leads and how they
//! ended, the handoffs between them, what each observer was told, and the
//! JSON figures.

use std::fmt::Write as _;

use serde_json::json;

use super::{ms, Run};
use crate::election_checker::ElectionVerdict;
use crate::examples::fmt_ms;

/// Up to this many leads, each is listed (a control's); beyond, only
/// their figures.
const LISTED: usize = 12;

/// Leads, handoffs, proclaims, observers.
pub(super) fn observations(w: &mut String, run: &Run, verdict: &ElectionVerdict) {
    let Some(elections) = &run.elections else {
        return;
    };
    let f = &verdict.figures;
    let total: u64 = f.leads.values().sum();
    let per_name: Vec<String> = f
        .leads
        .iter()
        .map(|(name, n)| format!("election {name}: {n}"))
        .collect();
    let join = |map: &std::collections::BTreeMap<&str, u64>| {
        if map.is_empty() {
            return "none".to_string();
        }
        map.iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        w,
        "elections: {} name(s); {total} leads ({}), {} of them empty (lost or past their \
         validity by the time their start was read); ended: {}; lost before they ended: {}",
        elections.names,
        if per_name.is_empty() {
            "none".to_string()
        } else {
            per_name.join(", ")
        },
        f.empty,
        join(&f.ended),
        join(&f.lost),
    );
    let _ = writeln!(
        w,
        "  handoffs: {} ({} to another campaigner); from a lead's end to the next one's \
         start: p50 {}, max {}; of them, {} with another campaign waiting throughout: p50 \
         {}, max {}",
        f.handoffs.0,
        f.handoffs.1,
        ms(f.gap.0),
        ms(f.gap.1),
        f.waited_gap.0,
        ms(f.waited_gap.1),
        ms(f.waited_gap.2),
    );
    let _ = writeln!(
        w,
        "  proclaims: {} tried, {} ok; campaigns failed: {}",
        f.proclaims.0, f.proclaims.1, f.failed,
    );
    for (observer, o) in &f.observers {
        let _ = writeln!(
            w,
            "  observer {observer}: told {} leader change(s) and {} vacancies; {} of the {total} \
             leads' terms seen; last word \"nobody leads\" on {} of {} name(s)",
            o.leaders, o.vacancies, o.leads_seen, o.last_vacant.0, o.last_vacant.1
        );
    }
    if !f.observers.is_empty() {
        let _ = writeln!(
            w,
            "  told a new lead after its start: p50 {}, max {} (changes faster than a read \
             may be told as one)",
            ms(f.told_after.0),
            ms(f.told_after.1)
        );
    }
    if elections.leads.len() <= LISTED {
        for lead in &elections.leads {
            let _ = writeln!(
                w,
                "  lead: election {} term {} by worker {} ({:?}, {} proclaim(s)) [{}, {}]: \
                 resign {}, lost {}, valid until {}; {}",
                lead.name,
                lead.term,
                lead.worker,
                lead.value,
                lead.proclaims.len(),
                fmt_ms(lead.start),
                fmt_ms(lead.end()),
                lead.resign.map_or("-".into(), fmt_ms),
                lead.lost.map_or("not watched or not lost".into(), fmt_ms),
                lead.valid_until.map_or("not looked at".into(), fmt_ms),
                lead.ended.label()
            );
        }
    }
}

/// The figures of the JSON line's `"elections"`.
pub(super) fn json(verdict: &ElectionVerdict) -> serde_json::Value {
    let f = &verdict.figures;
    let ms = |d: std::time::Duration| json!(d.as_millis() as u64);
    let observers: serde_json::Map<String, serde_json::Value> = f
        .observers
        .iter()
        .map(|(observer, o)| {
            (
                observer.to_string(),
                json!({
                    "leaders": o.leaders,
                    "vacancies": o.vacancies,
                    "leads_seen": o.leads_seen,
                    "last_vacant": o.last_vacant.0,
                    "names": o.last_vacant.1,
                }),
            )
        })
        .collect();
    json!({
        "leads": f.leads.values().sum::<u64>(),
        "empty_leads": f.empty,
        "ended": f.ended,
        "lost": f.lost,
        "handoffs": f.handoffs.0,
        "handoffs_to_another": f.handoffs.1,
        "gap_p50_ms": ms(f.gap.0),
        "gap_max_ms": ms(f.gap.1),
        "waited_handoffs": f.waited_gap.0,
        "waited_gap_p50_ms": ms(f.waited_gap.1),
        "waited_gap_max_ms": ms(f.waited_gap.2),
        "proclaims": f.proclaims.0,
        "proclaims_ok": f.proclaims.1,
        "campaigns_failed": f.failed,
        "observers": observers,
        "told_after_p50_ms": ms(f.told_after.0),
        "told_after_max_ms": ms(f.told_after.1),
    })
}
