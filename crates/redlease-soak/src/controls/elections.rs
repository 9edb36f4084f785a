//! The elections checker's negative controls: a leader that goes on
//! leading after the library told it the lead was lost, and an observer
//! that asks one node at a time instead of a quorum.
//!
//! - `control-election-ignores-lost`: campaigners A and B campaign for
//!   election 0 in a loop for 4 s (TTL 500 ms) and lead 1.0 to 1.6 s each
//!   time, but ignore `lost()` and their lease's validity: by their own
//!   word they lead until their time is up, then resign. Meanwhile an
//!   operator force-releases the election every second
//!   (`admin().force_release`), so the one waiting in line takes the
//!   lead at once while the other still "leads"; an observer watches
//!   throughout. The elections checker passes it only if `lead_overlap`
//!   is flagged. (A leader that heeds `lost()` would be flagged too, for
//!   less: a force release is told at the next renewal, up to a third
//!   of the TTL later, while the next in line takes over at once; the
//!   library's manual says so of `force_release`.)
//! - `control-election-stale-observer`: a naive observer that asks
//!   `leader()` of a Locker over a single node, one node after the
//!   other, where the library's `leader()` and `observe()` ask them all
//!   and believe a quorum. A (whose links to a minority of the nodes go
//!   through proxies) leads with a 2 s TTL; its links to that minority
//!   are then reset and it resigns, which reaches only the majority: the
//!   minority still holds its lead (and shows its record) until its TTL
//!   ends. B leads on the majority, in a higher term. The naive observer
//!   asks node 0 (B's term), then the last node (A's older term): a
//!   lower term told after a higher one. The honest observer
//!   (`observe()` over every node) runs beside it. Passes only if
//!   `observer_order` is flagged; needs 3 nodes or more.
//!
//! Either stops as inconclusive (exit 2) when its interleaving did not
//! happen (no force release found a lead to break, or the minority did
//! not show A's term after B's), so the library behaving otherwise cannot
//! pass for the control.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redlease_testkit::proxy::{Mode, Proxy};
use tokio::sync::watch;

use super::{inconclusive, Bench};
use crate::election_checker::{Leader, Told};
use crate::report::Run;
use crate::workload::elections::{self, Journal, Mix};
use crate::workload::Settings;

pub(super) const IGNORES_LOST: &str = "control-election-ignores-lost";
pub(super) const STALE_OBSERVER: &str = "control-election-stale-observer";

/// `control-election-ignores-lost` (see the module docs).
pub(super) async fn ignores_lost(nodes: usize, seed: u64) -> Result<Run, String> {
    const NAME: &str = IGNORES_LOST;
    /// How long the campaigners start new campaigns.
    const RUN: Duration = Duration::from_secs(4);
    /// How often the operator force-releases the election.
    const EVERY: Duration = Duration::from_secs(1);
    let ttl = Duration::from_millis(500);
    let mut bench = Bench::start(nodes, None).await?;
    let mix = Mix {
        names: 1,
        campaigners: vec![0, 1],
        observers: vec![3],
        min_lead: Duration::from_millis(1000),
        max_lead: Duration::from_millis(1600),
        proclaim_share: 0.3,
        drop_share: 0.0,
        heeds_lost: false,
    };
    let settings = Arc::new(Settings {
        ttl,
        elections: Some(mix.clone()),
        ..bench.settings.clone()
    });
    let journal = Journal::default();
    let mut campaigners = Vec::new();
    for &worker in &mix.campaigners {
        campaigners.push(bench.client(worker, bench.direct(), ttl).await?);
    }
    let operator = bench.client(2, bench.direct(), ttl).await?;
    let observer = bench.client(3, bench.direct(), ttl).await?;
    let (stop, stopped) = watch::channel(false);
    let watching = tokio::spawn(elections::observe(
        observer,
        mix.names,
        journal.clone(),
        stopped,
    ));
    let deadline = Instant::now() + RUN;
    let leading: Vec<_> = campaigners
        .into_iter()
        .map(|client| {
            tokio::spawn(elections::campaign(
                client,
                settings.clone(),
                seed,
                deadline,
                journal.clone(),
            ))
        })
        .collect();
    bench.note(format!(
        "campaigners 0 and 1 campaign for election 0 until {} s, each lead lasting {}-{} ms \
         whatever lost() and the lease's validity say (TTL {} ms)",
        RUN.as_secs(),
        mix.min_lead.as_millis(),
        mix.max_lead.as_millis(),
        ttl.as_millis()
    ));
    let mut broken = 0;
    let mut at = Instant::now() + EVERY / 2;
    while at < deadline {
        tokio::time::sleep_until(at.into()).await;
        let deleted = operator.force_release(0).await;
        if matches!(deleted, Ok(n) if n > 0) {
            broken += 1;
        }
        bench.note(format!(
            "the operator force-released election 0: {}",
            match deleted {
                Ok(n) => format!("the lock deleted on {n} node(s)"),
                Err(kind) => format!("failed, {}", kind.label()),
            }
        ));
        at += EVERY;
    }
    for task in leading {
        task.await
            .map_err(|e| format!("{NAME}: a campaigner's task: {e}"))?;
    }
    // The observer's last word (nobody leads), before it stops.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = stop.send(true);
    watching
        .await
        .map_err(|e| format!("{NAME}: the observer's task: {e}"))?;
    let run = journal.run(mix.names, mix.observers.clone(), Some("lead_overlap"));
    bench.note(format!(
        "{} leads in all; {broken} force release(s) found a lead to break",
        run.leads.len()
    ));
    if broken == 0 || run.leads.len() < 2 {
        return Err(inconclusive(
            NAME,
            "no force release broke a lead that another campaigner then took",
        ));
    }
    let mut out = bench
        .finish(NAME, seed, ttl, &[("force_release", broken)])
        .await?;
    out.elections = Some(run);
    Ok(out)
}

/// `control-election-stale-observer` (see the module docs).
pub(super) async fn stale_observer(nodes: usize, seed: u64) -> Result<Run, String> {
    const NAME: &str = STALE_OBSERVER;
    /// The naive observer's worker number (all its single-node clients).
    const NAIVE: usize = 2;
    if nodes < 3 {
        return Err(format!(
            "{NAME} needs a minority of the nodes to lag: --nodes 3 or more"
        ));
    }
    let ttl = Duration::from_secs(2);
    let mut bench = Bench::start(nodes, None).await?;
    let journal = Journal::default();
    // A minority of the nodes, the last ones: A reaches them through
    // proxies.
    let minority: Vec<usize> = (nodes - (nodes - 1) / 2..nodes).collect();
    let proxies: Vec<Proxy> = minority
        .iter()
        .map(|&n| Proxy::start(&bench.addrs[n]))
        .collect();
    let mut a_urls = bench.direct();
    for (proxy, &n) in proxies.iter().zip(&minority) {
        a_urls[n] = proxy.url();
    }
    let a = bench.client(0, a_urls, ttl).await?;
    let b = bench.client(1, bench.direct(), ttl).await?;
    let mut naive = Vec::new();
    for addr in &bench.addrs {
        naive.push(
            bench
                .client(NAIVE, vec![format!("redis://{addr}")], ttl)
                .await?,
        );
    }
    let honest = bench.client(3, bench.direct(), ttl).await?;
    let (stop, stopped) = watch::channel(false);
    let watching = tokio::spawn(elections::observe(honest, 1, journal.clone(), stopped));
    let last = nodes - 1;
    let rec = bench.rec.clone();
    let naive = &naive;
    // The naive observer asks node `node` alone, and records what it is
    // told (nothing when the call failed).
    let ask = |node: usize| {
        let (journal, rec) = (journal.clone(), rec.clone());
        async move {
            let told = naive[node].leader(0).await?;
            journal.told(Told {
                observer: NAIVE,
                name: 0,
                at: rec.now(),
                leader: told.clone(),
            });
            Some(told)
        }
    };
    let term = |told: &Option<Option<Leader>>| told.clone().flatten().map(|l| l.term);

    let (lead_a, start_a) = a
        .campaign(0, "A", Duration::from_secs(2))
        .await
        .ok_or_else(|| inconclusive(NAME, "A did not win the lead"))?;
    let term_a = lead_a.term();
    let (first, minority_first) = (ask(0).await, ask(last).await);
    bench.note(format!(
        "A leads in term {term_a}; the naive observer asks node 0 ({:?}), then node {last} ({:?})",
        term(&first),
        term(&minority_first)
    ));
    if term(&minority_first) != Some(term_a) {
        return Err(inconclusive(
            NAME,
            &format!("node {last} did not show A's term"),
        ));
    }
    for proxy in &proxies {
        proxy.set(Mode::Reset);
    }
    let valid_a = rec.at(lead_a.lease().valid_until());
    let (resign_a, resigned) = a.resign(0, lead_a).await;
    bench.note(format!(
        "A's links to nodes {minority:?} reset; A resigned ({}): on the majority only, so \
         nodes {minority:?} keep its lead until its TTL ends",
        if resigned { "ok" } else { "FAILED" }
    ));
    journal.lead(crate::election_checker::Lead {
        worker: 0,
        name: 0,
        term: term_a,
        value: "A".into(),
        start: start_a,
        resign: Some(resign_a),
        valid_until: Some(valid_a),
        ..Default::default()
    });
    if !resigned {
        return Err(inconclusive(NAME, "A's resignation did not reach a quorum"));
    }
    let (lead_b, start_b) = b
        .campaign(0, "B", Duration::from_secs(1))
        .await
        .ok_or_else(|| inconclusive(NAME, "B did not win the lead on the majority"))?;
    let term_b = lead_b.term();
    let (newer, older) = (ask(0).await, ask(last).await);
    bench.note(format!(
        "B leads in term {term_b}; the naive observer asks node 0 ({:?}), then node {last} \
         ({:?})",
        term(&newer),
        term(&older)
    ));
    let valid_b = rec.at(lead_b.lease().valid_until());
    let (resign_b, _) = b.resign(0, lead_b).await;
    journal.lead(crate::election_checker::Lead {
        worker: 1,
        name: 0,
        term: term_b,
        value: "B".into(),
        start: start_b,
        resign: Some(resign_b),
        valid_until: Some(valid_b),
        ..Default::default()
    });
    if term(&newer) != Some(term_b) || term(&older) != Some(term_a) {
        return Err(inconclusive(
            NAME,
            "the naive observer was not told B's term by node 0, then A's by the minority",
        ));
    }
    // The honest observer's word on it, before it stops.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = stop.send(true);
    watching
        .await
        .map_err(|e| format!("{NAME}: the honest observer's task: {e}"))?;
    for proxy in &proxies {
        proxy.set(Mode::Pass);
    }
    let run = journal.run(1, vec![NAIVE, 3], Some("observer_order"));
    let honest: Vec<String> = run
        .told
        .iter()
        .filter(|t| t.observer == 3)
        .map(|t| match &t.leader {
            Some(l) if l.term == term_a => "A's term".to_string(),
            Some(l) if l.term == term_b => "B's term".to_string(),
            Some(l) => format!("term {}", l.term),
            None => "nobody".to_string(),
        })
        .collect();
    bench.note(format!(
        "the honest observer (observe() over every node) was told, in order: {}",
        honest.join(", ")
    ));
    let mut out = bench
        .finish(NAME, seed, ttl, &[("minority_left_behind", 1)])
        .await?;
    out.elections = Some(run);
    Ok(out)
}
