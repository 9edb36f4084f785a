//! The scenarios: which faults, which nodes persist, and the run that puts
//! rig, workload and fault plan together.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::checker::FinalState;
use crate::faults::{self, FaultKind, Topology};
use crate::history::Recorder;
use crate::inject;
use crate::panics;
use crate::report::Run;
use crate::rig::Rig;
use crate::store::Store;
use crate::watchdog::{Watchdog, STALL};
use crate::workload::{self, Client, Settings};

/// Which nodes run with `appendonly yes, appendfsync always`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fsync {
    None,
    All,
    /// As many as node faults may hit at once (nodes 0, 1 of 5), so an
    /// immediate restart always has a durable node to hit.
    Minority,
}

pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    pub mix: &'static [(FaultKind, u32)],
    pub fsync: Fsync,
    /// Clients 0 and 1 get a node timeout of 90% of the TTL.
    pub patient: bool,
}

use FaultKind::*;

pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "baseline",
        about: "no faults (run with --nodes 1 and --nodes 5)",
        mix: &[],
        fsync: Fsync::None,
        patient: false,
    },
    Scenario {
        name: "crash-delayed-restart",
        about: "SIGKILL a minority; restart empty after more than the TTL",
        mix: &[(KillDelayedRestart, 1)],
        fsync: Fsync::None,
        patient: false,
    },
    Scenario {
        name: "crash-fsync-restart",
        about: "all nodes appendfsync always; SIGKILL a minority and restart at once",
        mix: &[(KillFsyncRestart, 1)],
        fsync: Fsync::All,
        patient: false,
    },
    Scenario {
        name: "pause",
        about: "SIGSTOP a minority for TTL/4 .. 2 x TTL, then SIGCONT",
        mix: &[(Pause, 1)],
        fsync: Fsync::None,
        patient: false,
    },
    Scenario {
        name: "latency",
        about: "link delays one way up to TTL/2, 10% above the TTL; two patient clients",
        mix: &[(Latency, 1)],
        fsync: Fsync::None,
        patient: true,
    },
    Scenario {
        name: "buffered-replies",
        about: "replies held beyond the TTL, then delivered on the same connection",
        mix: &[(BufferedReplies, 1)],
        fsync: Fsync::None,
        patient: false,
    },
    Scenario {
        name: "partition",
        about: "asymmetric partitions: two groups of clients see different node subsets",
        mix: &[(Partition, 1)],
        fsync: Fsync::None,
        patient: false,
    },
    Scenario {
        name: "mixed",
        about: "every fault above, interleaved",
        mix: &[
            (KillDelayedRestart, 2),
            (KillFsyncRestart, 2),
            (Pause, 2),
            (Latency, 2),
            (Blackhole, 1),
            (Reset, 1),
            (BufferedReplies, 2),
            (Partition, 2),
        ],
        fsync: Fsync::Minority,
        patient: true,
    },
];

pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// Extra time for workers to finish their last critical section after the
/// deadline, on top of the slowest bound.
const DRAIN_SLACK: Duration = Duration::from_secs(5);
/// Extra wait after the last byte could have reached a node, before lock
/// keys are looked for.
const LEAK_MARGIN: Duration = Duration::from_millis(500);

pub async fn run(
    scenario: &Scenario,
    nodes: usize,
    seconds: u64,
    seed: u64,
    verbose: bool,
) -> Result<Run, String> {
    let settings = Arc::new(Settings::standard(scenario.patient));
    let topo = Topology {
        nodes,
        fsync: (0..nodes)
            .map(|n| match scenario.fsync {
                Fsync::None => false,
                Fsync::All => true,
                Fsync::Minority => n < (nodes.saturating_sub(1) / 2).max(1),
            })
            .collect(),
        proxied: settings.proxied.clone(),
        ttl: settings.ttl,
    };
    let length = Duration::from_secs(seconds);
    let plan = faults::plan(seed, scenario.mix, &topo, length);
    let max_delay = inject::max_link_delay(&plan);

    let rig = Rig::start(&topo.fsync, &settings.proxied).await?;
    let epoch = Instant::now();
    let rec = Recorder::new(epoch);
    let mut clients = Vec::new();
    for worker in 0..settings.workers {
        let nt = settings.node_timeout_of(worker);
        clients.push(
            Client::connect(
                worker,
                rig.urls_for(worker),
                &rig.data.url(),
                settings.ttl,
                nt,
                settings.wait,
                &settings,
                rec.clone(),
            )
            .await?,
        );
    }

    let deadline = epoch + length;
    let watchdog = Watchdog::start(epoch);
    let injector = tokio::spawn(inject::run(
        plan,
        rig.nodes.clone(),
        rig.proxies.clone(),
        epoch,
        verbose,
    ));
    let workers: Vec<_> = clients
        .into_iter()
        .map(|client| tokio::spawn(workload::work(client, settings.clone(), seed, deadline)))
        .collect();
    // A worker that is not back by then is stuck in a call: unbounded.
    let drain = settings.wait + 4 * settings.patient_node_timeout + DRAIN_SLACK;
    let mut stuck = 0;
    for worker in workers {
        let left = (deadline + drain).saturating_duration_since(Instant::now());
        let abort = worker.abort_handle();
        if tokio::time::timeout(left, worker).await.is_err() {
            abort.abort();
            stuck += 1;
        }
    }
    let elapsed = epoch.elapsed();
    let stalls = watchdog.stop();
    let faults = injector
        .await
        .map_err(|e| format!("fault injector: {e}"))??;

    rig.heal().await?;
    // Held and delayed bytes are delivered by now or within the largest
    // delay; a key they create lives one TTL.
    tokio::time::sleep(max_delay + settings.ttl + LEAK_MARGIN).await;
    let leftover_keys = rig.leftover_keys().await?;
    let counters = Store::connect(&rig.data.url())
        .await?
        .counters(settings.locks)
        .await?;

    let mut notes = Vec::new();
    if let Some((start, end)) = stalls.iter().max_by_key(|(s, e)| *e - *s) {
        notes.push(format!(
            "the machine did not run this process {} time(s) for more than {STALL:?} (longest \
             {:?} at {:.1} s); the bound and expiry checks leave that time out",
            stalls.len(),
            *end - *start,
            start.as_secs_f64()
        ));
    }
    if stuck > 0 {
        notes.push(format!(
            "{stuck} worker(s) did not return within {drain:?} after the deadline"
        ));
    }
    let mut faults_by_kind: std::collections::BTreeMap<&'static str, u64> =
        scenario.mix.iter().map(|(k, _)| (k.label(), 0)).collect();
    faults_by_kind.extend(faults);
    Ok(Run {
        scenario: scenario.name.to_string(),
        seed,
        nodes,
        seconds: seconds as f64,
        elapsed,
        ttl: settings.ttl,
        history: rec.history(),
        faults: faults_by_kind,
        state: FinalState {
            counters,
            leftover_keys,
            process_panics: panics::count(),
            stuck_workers: stuck,
            stalls,
        },
        notes,
    })
}
