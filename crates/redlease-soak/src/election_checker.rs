//! The elections checker: judges a run in which campaigners lead election
//! names in turn while observers watch them (`elections`). Pure (no I/O,
//! no clocks), like the other checkers, so it is tested on hand-built
//! histories, including ones it must flag.
//!
//! Its input is the workload's journal ([`ElectionRun`]): every lead a
//! campaigner held ([`Lead`]: its name, term, the value it won with and
//! each value it tried to proclaim, when it started, when the leader
//! stopped trusting it), the values of campaigns that failed, and every
//! leader an observer was told ([`Told`]). Times are offsets from the
//! run's epoch on the monotonic clock. A lead's interval is `[start,
//! end]`: `start` is read right after `campaign` returned, `end` is the
//! earliest of when its resignation (or drop) began, when `lost()` was
//! seen to resolve, and its lease's last validity end (renewals move it
//! on), of those the leader heeded: a leader that ignores `lost()` or its
//! validity leads, by its own word, until it resigns. Checks:
//!
//! 1. `lead_overlap`, per name: two leads with different terms whose
//!    intervals overlap (intervals that only touch do not; an empty
//!    interval, a lead lost before it was seen, overlaps nothing). One
//!    violation per pair.
//! 2. `term_order`, per name: in the order the leads started, each term
//!    is above every earlier one (an equal term is flagged too: two leads
//!    of one term).
//! 3. `observer_order`, per observer and name, in the order told: a term
//!    below one told before, or, within a term, a revision below one told
//!    before. Vacancies (nobody leads) are told freely in between.
//! 4. `observer_unknown`: an observer told a `(term, value)` no
//!    campaigner held: the term is a lead's and the value is the one it
//!    won with or one it tried to proclaim (a proclaim that failed may
//!    still have landed), or the term is no recorded lead's and the value
//!    is that of a campaign that failed (its lead may have been won and
//!    published before the call failed: its term is unknown). Values are
//!    unique per campaign and per proclaim.
//!
//! Why a correct library is never flagged: measurement only narrows the
//! intervals of 1 (the start is read after the call returned, the
//! resignation's before it began; `lost()` resolves at the latest one
//! drift allowance before the validity end, which bounds the interval
//! anyway), and the next leader's lease can only be granted once the
//! previous one's keys expired or were released on a quorum, after its
//! validity end or its resignation began. Terms are fencing tokens, drawn
//! in the order the leads were granted; observers are told terms in
//! order by the library's own rule.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::examples::{fmt_ms, keep_example};

/// How a lead ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ended {
    /// `resign` returned `Ok`.
    #[default]
    Resigned,
    /// `resign` failed (the lead was gone already, or no quorum answered).
    ResignFailed,
    /// The `Leadership` was dropped (resigned in the background).
    Dropped,
}

impl Ended {
    pub fn label(self) -> &'static str {
        match self {
            Ended::Resigned => "resigned",
            Ended::ResignFailed => "resign failed",
            Ended::Dropped => "dropped",
        }
    }
}

/// A value a leader tried to proclaim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proclaimed {
    /// The revision it would have (one above the last proclaimed).
    pub revision: u64,
    pub value: String,
    /// When the call began.
    pub at: Duration,
    /// Whether `proclaim` returned `Ok`.
    pub ok: bool,
}

/// One lead, as its campaigner records it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lead {
    pub worker: usize,
    /// The election, by number.
    pub name: usize,
    pub term: u64,
    /// The value it won with (revision 1).
    pub value: String,
    /// Every value it tried to proclaim after, in order.
    pub proclaims: Vec<Proclaimed>,
    /// Right after `campaign` returned.
    pub start: Duration,
    /// When its resignation (or drop) began.
    pub resign: Option<Duration>,
    /// When `lost()` was seen to resolve (`None`: not before the end, or
    /// never watched).
    pub lost: Option<Duration>,
    /// Why it was lost.
    pub lost_reason: Option<&'static str>,
    /// Its lease's validity end, the last one (`None`: the leader never
    /// looked at it).
    pub valid_until: Option<Duration>,
    pub ended: Ended,
}

impl Lead {
    /// The end of its interval: the earliest of its resignation, `lost()`
    /// and its validity end, of those recorded; its start if none is.
    pub fn end(&self) -> Duration {
        [self.resign, self.lost, self.valid_until]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(self.start)
    }

    /// Whether it was leading at all by its own account.
    pub fn is_empty(&self) -> bool {
        self.end() <= self.start
    }

    fn holds(&self, value: &str) -> bool {
        self.value == value || self.proclaims.iter().any(|p| p.value == value)
    }

    fn describe(&self) -> String {
        format!(
            "term {} (worker {}, {:?}) [{}, {}]",
            self.term,
            self.worker,
            self.value,
            fmt_ms(self.start),
            fmt_ms(self.end())
        )
    }
}

/// A leader as an observer was told it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    pub term: u64,
    pub revision: u64,
    pub value: String,
}

/// What an observer was told, when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Told {
    pub observer: usize,
    pub name: usize,
    /// When `next()` (or the poll) returned it.
    pub at: Duration,
    /// `None`: nobody leads.
    pub leader: Option<Leader>,
}

/// One campaign call, won or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Campaigned {
    pub worker: usize,
    pub name: usize,
    /// Just before the call.
    pub invoked: Duration,
    /// Just after it returned.
    pub returned: Duration,
    pub won: bool,
}

/// What an elections run hands to the checker.
#[derive(Clone, Debug, Default)]
pub struct ElectionRun {
    /// Election names, numbered `0..names`.
    pub names: usize,
    pub leads: Vec<Lead>,
    /// Campaigns that returned an error: `(name, value)`.
    pub failed: Vec<(usize, String)>,
    /// Every campaign call (for the figures only).
    pub campaigns: Vec<Campaigned>,
    /// Everything the observers were told, in any order.
    pub told: Vec<Told>,
    /// The observers, by worker.
    pub observers: Vec<usize>,
    /// A negative control that names the check it must trip.
    pub flagged_by: Option<&'static str>,
}

/// Figures of a run (not violations).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ElectionFigures {
    /// Leads per name.
    pub leads: BTreeMap<usize, u64>,
    /// Leads ended each way.
    pub ended: BTreeMap<&'static str, u64>,
    /// Leads lost before they ended, by reason.
    pub lost: BTreeMap<&'static str, u64>,
    /// Leads whose interval is empty (lost, or past their validity, by
    /// the time their start was read).
    pub empty: u64,
    /// Proclaims tried, and of them returned `Ok`.
    pub proclaims: (u64, u64),
    /// Successions: a lead after another of the same name; of them, to
    /// another campaigner.
    pub handoffs: (u64, u64),
    /// Gaps from a lead's end to the next one's start (p50, max).
    pub gap: (Duration, Duration),
    /// The same, of the handoffs during which another campaign for the
    /// name waited throughout (from before the lead ended until the next
    /// began): how many, p50, max. What a waiting campaigner saw as the
    /// failover time (a lead dropped or lost leaves its keys to expire).
    pub waited_gap: (u64, Duration, Duration),
    /// Campaigns that failed.
    pub failed: u64,
    /// Per observer: leaders told, vacancies told, leads of the run whose
    /// term it was told, and whether its last word per name was "nobody
    /// leads" (pairs of names).
    pub observers: BTreeMap<usize, ObserverFigures>,
    /// From a lead's start to an observer first told its term (p50, max,
    /// over every observer and lead told).
    pub told_after: (Duration, Duration),
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObserverFigures {
    pub leaders: u64,
    pub vacancies: u64,
    /// Leads of the run whose term it was told.
    pub leads_seen: u64,
    /// Names whose last word told was "nobody leads", of the names told.
    pub last_vacant: (u64, u64),
}

/// Violations by check, with the first few examples of each.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ElectionVerdict {
    pub lead_overlap: u64,
    pub term_order: u64,
    pub observer_order: u64,
    pub observer_unknown: u64,
    pub examples: BTreeMap<&'static str, Vec<String>>,
    pub figures: ElectionFigures,
}

impl ElectionVerdict {
    pub fn total(&self) -> u64 {
        self.lead_overlap + self.term_order + self.observer_order + self.observer_unknown
    }

    /// `(name, count)` in the order of the JSON report.
    pub fn counts(&self) -> [(&'static str, u64); 4] {
        [
            ("lead_overlap", self.lead_overlap),
            ("term_order", self.term_order),
            ("observer_order", self.observer_order),
            ("observer_unknown", self.observer_unknown),
        ]
    }

    fn example(&mut self, category: &'static str, text: impl FnOnce() -> String) {
        keep_example(&mut self.examples, category, text);
    }
}

/// Runs every check.
pub fn judge(run: &ElectionRun) -> ElectionVerdict {
    let mut verdict = ElectionVerdict::default();
    let by_name = by_name(&run.leads);
    check_overlap(&by_name, &mut verdict);
    check_term_order(&by_name, &mut verdict);
    check_observer_order(run, &mut verdict);
    check_observer_unknown(run, &mut verdict);
    verdict.figures = figures(run, &by_name);
    verdict
}

/// Leads per name, by start (then term).
fn by_name(leads: &[Lead]) -> BTreeMap<usize, Vec<&Lead>> {
    let mut map: BTreeMap<usize, Vec<&Lead>> = BTreeMap::new();
    for lead in leads {
        map.entry(lead.name).or_default().push(lead);
    }
    for list in map.values_mut() {
        list.sort_by_key(|l| (l.start, l.term));
    }
    map
}

fn check_overlap(by_name: &BTreeMap<usize, Vec<&Lead>>, verdict: &mut ElectionVerdict) {
    for (name, list) in by_name {
        // Leads still open at the current start; sorted by start, so any
        // earlier lead that ends after this one starts overlaps it.
        let mut open: Vec<&Lead> = Vec::new();
        for &lead in list {
            if lead.is_empty() {
                continue;
            }
            open.retain(|o| o.end() > lead.start);
            for other in open.iter().filter(|o| o.term != lead.term) {
                verdict.lead_overlap += 1;
                verdict.example("lead_overlap", || {
                    format!(
                        "election {name}: {} and {} led at once for {}",
                        other.describe(),
                        lead.describe(),
                        fmt_ms(other.end().min(lead.end()) - lead.start)
                    )
                });
            }
            open.push(lead);
        }
    }
}

fn check_term_order(by_name: &BTreeMap<usize, Vec<&Lead>>, verdict: &mut ElectionVerdict) {
    for (name, list) in by_name {
        let mut highest: Option<&Lead> = None;
        for &lead in list {
            if let Some(top) = highest {
                if lead.term <= top.term {
                    verdict.term_order += 1;
                    verdict.example("term_order", || {
                        format!(
                            "election {name}: {} started after {} with a term not above it",
                            lead.describe(),
                            top.describe()
                        )
                    });
                }
            }
            if highest.is_none_or(|top| lead.term > top.term) {
                highest = Some(lead);
            }
        }
    }
}

/// What each observer was told of each name, in the order told.
fn told_by(run: &ElectionRun) -> BTreeMap<(usize, usize), Vec<&Told>> {
    let mut map: BTreeMap<(usize, usize), Vec<&Told>> = BTreeMap::new();
    for told in &run.told {
        map.entry((told.observer, told.name))
            .or_default()
            .push(told);
    }
    for list in map.values_mut() {
        // Stable: what one observer was told at the same instant keeps
        // its recorded order.
        list.sort_by_key(|t| t.at);
    }
    map
}

fn check_observer_order(run: &ElectionRun, verdict: &mut ElectionVerdict) {
    for ((observer, name), list) in told_by(run) {
        // The highest term told, and the highest revision told of it.
        let mut top: Option<(u64, u64, &Told)> = None;
        for told in list {
            let Some(leader) = &told.leader else {
                continue;
            };
            if let Some((term, revision, before)) = top {
                let back =
                    leader.term < term || (leader.term == term && leader.revision < revision);
                if back {
                    verdict.observer_order += 1;
                    verdict.example("observer_order", || {
                        format!(
                            "observer {observer}, election {name}: told term {} revision {} \
                             ({:?}) at {} after term {term} revision {revision} ({:?}) at {}",
                            leader.term,
                            leader.revision,
                            leader.value,
                            fmt_ms(told.at),
                            before.leader.as_ref().map_or("", |l| l.value.as_str()),
                            fmt_ms(before.at)
                        )
                    });
                    continue;
                }
            }
            if top.is_none_or(|(term, revision, _)| {
                leader.term > term || (leader.term == term && leader.revision > revision)
            }) {
                top = Some((leader.term, leader.revision, told));
            }
        }
    }
}

fn check_observer_unknown(run: &ElectionRun, verdict: &mut ElectionVerdict) {
    let mut terms: BTreeMap<(usize, u64), Vec<&Lead>> = BTreeMap::new();
    for lead in &run.leads {
        terms.entry((lead.name, lead.term)).or_default().push(lead);
    }
    let failed: BTreeSet<(usize, &str)> = run
        .failed
        .iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    for told in &run.told {
        let Some(leader) = &told.leader else {
            continue;
        };
        let known = match terms.get(&(told.name, leader.term)) {
            Some(leads) => leads.iter().any(|l| l.holds(&leader.value)),
            None => failed.contains(&(told.name, leader.value.as_str())),
        };
        if !known {
            verdict.observer_unknown += 1;
            verdict.example("observer_unknown", || {
                let held = terms
                    .get(&(told.name, leader.term))
                    .and_then(|leads| leads.first())
                    .map_or("no lead of that term".to_string(), |l| {
                        format!("the lead of that term is {}", l.describe())
                    });
                format!(
                    "observer {}, election {}: told term {} revision {} value {:?} at {}; {held}",
                    told.observer,
                    told.name,
                    leader.term,
                    leader.revision,
                    leader.value,
                    fmt_ms(told.at)
                )
            });
        }
    }
}

fn percentiles(mut values: Vec<Duration>) -> (Duration, Duration) {
    values.sort();
    match values.len() {
        0 => (Duration::ZERO, Duration::ZERO),
        n => (values[(n - 1) / 2], values[n - 1]),
    }
}

fn figures(run: &ElectionRun, by_name: &BTreeMap<usize, Vec<&Lead>>) -> ElectionFigures {
    let mut f = ElectionFigures {
        failed: run.failed.len() as u64,
        ..ElectionFigures::default()
    };
    let mut gaps = Vec::new();
    let mut waited = Vec::new();
    for (name, list) in by_name {
        f.leads.insert(*name, list.len() as u64);
        for pair in list.windows(2) {
            f.handoffs.0 += 1;
            f.handoffs.1 += u64::from(pair[0].worker != pair[1].worker);
            let (from, to) = (pair[0].end(), pair[1].start);
            let gap = to.saturating_sub(from);
            gaps.push(gap);
            let someone_waited = run.campaigns.iter().any(|c| {
                c.name == *name
                    && c.worker != pair[0].worker
                    && c.invoked <= from
                    && c.returned >= to
            });
            if someone_waited {
                waited.push(gap);
            }
        }
    }
    f.gap = percentiles(gaps);
    f.waited_gap.0 = waited.len() as u64;
    (f.waited_gap.1, f.waited_gap.2) = percentiles(waited);
    for lead in &run.leads {
        *f.ended.entry(lead.ended.label()).or_default() += 1;
        if let (Some(lost), Some(reason)) = (lead.lost, lead.lost_reason) {
            if lead.resign.is_none_or(|r| lost <= r) {
                *f.lost.entry(reason).or_default() += 1;
            }
        }
        f.empty += u64::from(lead.is_empty());
        f.proclaims.0 += lead.proclaims.len() as u64;
        f.proclaims.1 += lead.proclaims.iter().filter(|p| p.ok).count() as u64;
    }
    let starts: BTreeMap<(usize, u64), Duration> = run
        .leads
        .iter()
        .map(|l| ((l.name, l.term), l.start))
        .collect();
    let mut lags = Vec::new();
    let told = told_by(run);
    for &observer in &run.observers {
        let mut o = ObserverFigures::default();
        let mut seen: BTreeSet<(usize, u64)> = BTreeSet::new();
        for ((_, name), list) in told.range((observer, 0)..=(observer, usize::MAX)) {
            for t in list {
                match &t.leader {
                    Some(l) => {
                        o.leaders += 1;
                        if seen.insert((*name, l.term)) {
                            if let Some(start) = starts.get(&(*name, l.term)) {
                                lags.push(t.at.saturating_sub(*start));
                            }
                        }
                    }
                    None => o.vacancies += 1,
                }
            }
            o.last_vacant.1 += 1;
            o.last_vacant.0 += u64::from(list.last().is_some_and(|t| t.leader.is_none()));
        }
        o.leads_seen = starts.keys().filter(|k| seen.contains(k)).count() as u64;
        f.observers.insert(observer, o);
    }
    f.told_after = percentiles(lags);
    f
}

#[cfg(test)]
mod tests;
