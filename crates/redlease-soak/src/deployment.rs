//! Deployment scenarios: the soak's clients lock through ONE node that is
//! itself replicated, and the deployment fails over under them.
//!
//! - `cluster-failover`: a Redis Cluster of 3 primaries x 1 replica
//!   (`redis+cluster://`, one node of the quorum). Faults, one at a time,
//!   each on the shard that owns one of the soak's locks (drawn from the
//!   seed): a manual failover (`CLUSTER FAILOVER` on the replica, which
//!   catches up before it takes over), or a SIGKILL of the primary: its
//!   replica takes over on its own (cluster-node-timeout 2 s), then the
//!   killed process is restarted with its directory, so with its
//!   nodes.conf, and rejoins, empty, as a replica of the new owner.
//! - `cluster-empty-restart`: a Redis Cluster of 3 primaries without
//!   replicas, durability off, the restart quarantine on (its default).
//!   Faults: a SIGKILL of the primary that owns one of the soak's locks,
//!   restarted at once with its nodes.conf but no data: it serves its
//!   slots again, empty. The library quarantines that shard (its slots'
//!   votes) for the TTL plus drift; `--no-quarantine` turns that off.
//!   Its negative control is the scripted `control-cluster-empty-restart`
//!   (`failover_controls.rs`).
//! - `sentinel-failover`: a primary with 2 replicas and 3 sentinels
//!   (`redis+sentinel://`). Faults: `SENTINEL FAILOVER`, sent to a
//!   sentinel drawn from the seed.
//!
//! Every client runs with `Durability::required(R, 50 ms)` (node timeout
//! 200 ms), R being every replica of a primary (1 on the cluster, 2 behind
//! Sentinel): `--durable-replicas N` asks N replicas instead (1 behind
//! Sentinel is a negative control: the replica not promoted acknowledges
//! writes on the deposed primary, which are then lost), and
//! `--no-durability` turns it off. After each fault the deployment
//! settles (every replica follows the new primary, link up; behind
//! Sentinel, every sentinel has also seen that) before the next is drawn,
//! so a fault never meets a shard without a synced replica; the gaps
//! between faults come from the seed, their moments from how long the
//! deployment took. A fault still settling when the workload ends is not
//! waited for.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redlease::{Durability, Locker};

use crate::checker::FinalState;
use crate::history::Recorder;
use crate::panics;
use crate::replicated::{self, blocking, Deployment, Kind, Shared, Switch};
use crate::report::Run;
use crate::rig;
use crate::store::Store;
use crate::watchdog::{Watchdog, STALL};
use crate::workload::{self, lock_name, Client, Settings};

/// A fault of a replicated deployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `CLUSTER FAILOVER` on the replica of a lock's shard.
    ClusterFailover,
    /// SIGKILL of a lock's primary; automatic failover; restart as replica.
    ClusterKillRestart,
    /// SIGKILL of a lock's primary (no replica) and restart at once, empty.
    ClusterEmptyRestart,
    /// `SENTINEL FAILOVER`.
    SentinelFailover,
}

impl Fault {
    pub fn label(self) -> &'static str {
        match self {
            Fault::ClusterFailover => "cluster_failover",
            Fault::ClusterKillRestart => "cluster_kill_restart",
            Fault::ClusterEmptyRestart => "cluster_empty_restart",
            Fault::SentinelFailover => "sentinel_failover",
        }
    }
}

pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    pub kind: Kind,
    pub mix: &'static [(Fault, u32)],
    /// Replicas per primary: the default `--durable-replicas`, since only
    /// every replica acknowledging keeps a failover from losing a write
    /// (0: none, and durability off).
    pub replicas: u32,
}

pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "cluster-failover",
        about: "one node = a cluster (3 primaries x 1 replica), durability required(1): \
                manual failovers, and primary kills with restart as replica",
        kind: Kind::Cluster,
        mix: &[(Fault::ClusterFailover, 1), (Fault::ClusterKillRestart, 1)],
        replicas: 1,
    },
    Scenario {
        name: "cluster-empty-restart",
        about: "one node = a cluster (3 primaries, no replica), durability off, restart \
                quarantine on: primaries killed and restarted at once without their data",
        kind: Kind::BareCluster,
        mix: &[(Fault::ClusterEmptyRestart, 1)],
        replicas: 0,
    },
    Scenario {
        name: "sentinel-failover",
        about: "one node = a sentinel primary (2 replicas, 3 sentinels), durability \
                required(2): repeated SENTINEL FAILOVER",
        kind: Kind::Sentinel,
        mix: &[(Fault::SentinelFailover, 1)],
        replicas: 2,
    },
];

pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// Node timeout of the deployment clients: room for the write and its
/// `WAIT`, which Redis times out only at its next cron tick (up to 100 ms
/// late with the default `hz 10`; the library requires that margin).
pub const NODE_TIMEOUT: Duration = Duration::from_millis(200);
/// `WAIT`'s timeout (must be below the node timeout).
pub const WAIT_TIMEOUT: Duration = Duration::from_millis(50);
/// The durability of the deployment scenarios: `required(replicas, 50
/// ms)`, or off without `replicas`.
pub fn durability(replicas: Option<u32>) -> Durability {
    match replicas {
        Some(n) => Durability::required(n, WAIT_TIMEOUT),
        None => Durability::off(),
    }
}

/// Time between one fault settling and the next: `U(GAP_MIN, GAP_MAX)`.
const GAP_MIN: Duration = Duration::from_millis(500);
const GAP_MAX: Duration = Duration::from_millis(2000);
/// Extra time for workers to come back after the deadline.
const DRAIN_SLACK: Duration = Duration::from_secs(5);
/// Extra wait before lock keys are looked for.
const LEAK_MARGIN: Duration = Duration::from_millis(500);

/// The clients' settings: the standard workload (TTL 500 ms, 8 clients, 6
/// locks) without proxies (a cluster or the sentinels hand out the real
/// addresses, which a proxy cannot stand in for), node timeout 100 ms.
pub fn settings(replicas: Option<u32>) -> Settings {
    let mut settings = Settings::standard(false);
    settings.proxied = Vec::new();
    settings.node_timeout = NODE_TIMEOUT;
    settings.patient_node_timeout = NODE_TIMEOUT;
    settings.durability = durability(replicas);
    settings
}

/// One applied fault.
struct Applied {
    fault: Fault,
    lock: usize,
    at: Duration,
    switch: Switch,
}

pub async fn run(
    scenario: &Scenario,
    seconds: u64,
    seed: u64,
    replicas: Option<u32>,
    quarantine: Option<Duration>,
    verbose: bool,
) -> Result<Run, String> {
    let mut settings = settings(replicas);
    settings.restart_quarantine = quarantine;
    if scenario.kind == Kind::BareCluster {
        // A restarted primary serves its slots again only after
        // cluster-node-timeout (2 s): a lease must outlive that for the
        // restart to matter, and sleeps past a tenth of it to be caught.
        settings.ttl = Duration::from_secs(3);
        settings.wait = settings.ttl;
        settings.write_margin = settings.ttl / 10;
        settings.max_sleep = settings.ttl / 2;
    }
    let settings = Arc::new(settings);
    let kind = scenario.kind;
    let deployment = blocking(move || Deployment::start(kind)).await?;
    let url = deployment.url();
    let describe = deployment.describe();
    // The key of each lock, to find its shard.
    let keys: Vec<String> = {
        let namer = Locker::builder([url.as_str()])
            .build()
            .map_err(|e| format!("a Locker on {url}: {e}"))?;
        (0..settings.locks)
            .map(|l| namer.admin().key(&lock_name(l)))
            .collect()
    };
    let shared: Shared = Arc::new(Mutex::new(deployment));
    let data = rig::start_data().await?;

    let epoch = Instant::now();
    let rec = Recorder::new(epoch);
    let mut clients = Vec::new();
    for worker in 0..settings.workers {
        clients.push(
            Client::connect(
                worker,
                vec![url.clone()],
                &data.url(),
                settings.ttl,
                settings.node_timeout,
                settings.wait,
                &settings,
                rec.clone(),
            )
            .await?,
        );
    }
    let events = Arc::new(Mutex::new(Vec::new()));
    let watchers = match kind {
        Kind::Sentinel => {
            let urls = {
                let shared = shared.clone();
                blocking(move || match &*replicated::lock(&shared) {
                    Deployment::Sentinel(set) => Ok(set.sentinel_urls()),
                    Deployment::Cluster(_) => Ok(Vec::new()),
                })
                .await?
            };
            replicated::watch_sentinels(urls, epoch, verbose, events.clone()).await?
        }
        Kind::Cluster | Kind::BareCluster => Vec::new(),
    };
    let length = Duration::from_secs(seconds);
    let deadline = epoch + length;
    let watchdog = Watchdog::start(epoch);
    let injector = tokio::spawn(inject(
        shared.clone(),
        scenario.mix,
        keys,
        seed,
        epoch,
        deadline,
        verbose,
    ));
    let workers: Vec<_> = clients
        .into_iter()
        .map(|client| tokio::spawn(workload::work(client, settings.clone(), seed, deadline)))
        .collect();
    let drain = settings.wait + 4 * settings.node_timeout + DRAIN_SLACK;
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
    let applied = injector
        .await
        .map_err(|e| format!("fault injector: {e}"))??;

    // Every fault has settled: a key a client wrote lives one TTL.
    tokio::time::sleep(settings.ttl + LEAK_MARGIN).await;
    let primaries = {
        let shared = shared.clone();
        blocking(move || Ok(replicated::lock(&shared).primary_addrs())).await?
    };
    let leftover_keys = rig::leftover_keys(&primaries).await?;
    let counters = Store::connect(&data.url())
        .await?
        .counters(settings.locks)
        .await?;

    let mut notes = vec![format!(
        "{describe}: {url}; durability {}; node timeout {NODE_TIMEOUT:?}; restart quarantine {}",
        match replicas {
            Some(n) => format!("required({n}, {WAIT_TIMEOUT:?})"),
            None => "off".to_string(),
        },
        match quarantine {
            Some(q) if q.is_zero() => "off".to_string(),
            Some(q) => format!("{q:?}"),
            None => "the default (TTL plus drift)".to_string(),
        }
    )];
    notes.extend(fault_notes(&applied));
    for watcher in watchers {
        watcher.abort();
    }
    let events = replicated::key_events(&events.lock().unwrap_or_else(|p| p.into_inner()));
    if !events.is_empty() {
        notes.push(format!("sentinel events: {}", events.join("; ")));
    }
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
    let mut faults: BTreeMap<&'static str, u64> =
        scenario.mix.iter().map(|(f, _)| (f.label(), 0)).collect();
    for a in &applied {
        *faults.entry(a.fault.label()).or_default() += 1;
    }
    drop(shared);
    Ok(Run {
        scenario: scenario.name.to_string(),
        seed,
        nodes: 1,
        seconds: seconds as f64,
        elapsed,
        ttl: settings.ttl,
        history: rec.history(),
        faults,
        state: FinalState {
            counters,
            leftover_keys,
            process_panics: panics::count(),
            stuck_workers: stuck,
            stalls,
        },
        notes,
        same_server: None,
        read_write: None,
        semaphore: None,
        multi: None,
        engine: None,
        elections: None,
    })
}

/// Draws faults from the seed and applies them one at a time until the
/// deadline: a gap, a fault, its settling, the next gap.
async fn inject(
    shared: Shared,
    mix: &'static [(Fault, u32)],
    keys: Vec<String>,
    seed: u64,
    epoch: Instant,
    deadline: Instant,
    verbose: bool,
) -> Result<Vec<Applied>, String> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5EED_FA11_0FE7);
    let total: u32 = mix.iter().map(|(_, w)| w).sum();
    let mut applied = Vec::new();
    if total == 0 {
        return Ok(applied);
    }
    loop {
        let gap = GAP_MIN + (GAP_MAX - GAP_MIN).mul_f64(rng.random::<f64>());
        if Instant::now() + gap >= deadline {
            break;
        }
        tokio::time::sleep(gap).await;
        let mut pick = rng.random_range(0..total);
        let fault = mix
            .iter()
            .find(|(_, w)| {
                let hit = pick < *w;
                pick = pick.saturating_sub(*w);
                hit
            })
            .map(|(f, _)| *f)
            .expect("a weight was picked");
        let lock = rng.random_range(0..keys.len());
        let via = rng.random_range(0..replicated::SENTINELS);
        let at = epoch.elapsed();
        let key = keys[lock].clone();
        let shared = shared.clone();
        // Once the workload is over, the last fault need not settle.
        let stop = Some(deadline);
        let switch = blocking(move || {
            let mut d = replicated::lock(&shared);
            match fault {
                Fault::ClusterFailover => {
                    let slot = d.slot_of(&key)?;
                    d.cluster_failover(slot, stop)
                }
                Fault::ClusterKillRestart => {
                    let slot = d.slot_of(&key)?;
                    d.cluster_kill_restart(slot, stop)
                }
                Fault::ClusterEmptyRestart => {
                    let slot = d.slot_of(&key)?;
                    d.cluster_empty_restart(slot, stop)
                }
                Fault::SentinelFailover => d.sentinel_failover(via, stop),
            }
        })
        .await
        .map_err(|e| {
            format!(
                "{} at {:.1} s (lock {lock}): {e}",
                fault.label(),
                at.as_secs_f64()
            )
        })?;
        if verbose {
            eprintln!(
                "[{:>8.3}s] {} (lock {lock}): primary {} -> {}, new primary after {:.2} s, {}",
                at.as_secs_f64(),
                fault.label(),
                switch.old,
                switch.new,
                switch.switched.as_secs_f64(),
                match switch.settled {
                    Some(d) => format!("settled after {:.2} s", d.as_secs_f64()),
                    None => "the run ended before it settled".to_string(),
                }
            );
        }
        applied.push(Applied {
            fault,
            lock,
            at,
            switch,
        });
    }
    Ok(applied)
}

/// Per kind of fault: how many, how long to a new primary and to a
/// settled deployment.
fn fault_notes(applied: &[Applied]) -> Vec<String> {
    let mut by_kind: BTreeMap<&'static str, Vec<&Applied>> = BTreeMap::new();
    for a in applied {
        by_kind.entry(a.fault.label()).or_default().push(a);
    }
    let secs = |d: Duration| format!("{:.2}", d.as_secs_f64());
    let range = |mut v: Vec<Duration>| {
        v.sort();
        if v.is_empty() {
            return "-".to_string();
        }
        format!(
            "{}/{}/{} s",
            secs(v[0]),
            secs(v[v.len() / 2]),
            secs(v[v.len() - 1])
        )
    };
    let mut notes: Vec<String> = by_kind
        .iter()
        .map(|(label, list)| {
            format!(
                "{label} x{}: new primary after {} (min/median/max), settled after {}; at {}",
                list.len(),
                range(list.iter().map(|a| a.switch.switched).collect()),
                range(list.iter().filter_map(|a| a.switch.settled).collect()),
                list.iter()
                    .map(|a| format!("{:.1}s(lock {})", a.at.as_secs_f64(), a.lock))
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        })
        .collect();
    let cut = applied
        .iter()
        .filter(|a| a.switch.settled.is_none())
        .count();
    if cut > 0 {
        notes.push(format!(
            "{cut} fault(s) had not settled when the workload ended; not waited for"
        ));
    }
    if applied.is_empty() {
        notes.push("no fault was applied (the run was shorter than the first gap)".into());
    }
    notes
}
