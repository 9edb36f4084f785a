//! Negative controls of the replicated deployments: durability OFF, and
//! the primary that holds a fresh lock is SIGKILLed, so the replica that
//! takes over may not have the key. Scripted on one lock (`soak-0`):
//!
//! 1. W takes and releases the lock (the fencing counter exists and has
//!    reached the replicas); so does D (below), while the replicas
//!    acknowledge.
//! 2. `-lagging` only: every replica of the lock's primary is SIGSTOPped
//!    and the primary is given junk writes in the lock's slot (1 MB each)
//!    until more than 4 MB wait in its output buffer to each replica,
//!    beyond what the sockets hold: anything written now stays in the
//!    primary's memory until the replicas read again. D, a client WITH
//!    `Durability::required(1, 50 ms)` (node timeout 300 ms), tries the
//!    lock: refused (`NotReplicated`, the write undone).
//! 3. A (durability off, TTL 10 s) takes the lock; at once the primary is
//!    SIGKILLed (the replicas are resumed); the deployment fails over.
//! 4. Whether the new primary has A's key is noted; B (durability off)
//!    tries the lock every 100 ms until it gets it or A's lease is over.
//!    If B gets it while A's lease is valid, both run the critical
//!    section: two holders.
//!
//! Without the lag (`control-cluster-kill`, `control-sentinel-kill`) the
//! replica has received A's SET before A even has its reply (the primary
//! writes the reply and the replication stream in the same pass), so the
//! kill loses nothing: those two are run and reported, but the checker
//! finds nothing there, as it should. The `-lagging` ones lose the write
//! for certain, and the checker must flag them.
//!
//! Every client runs with the restart quarantine off
//! (`restart_quarantine(Duration::ZERO)`): no server restarts in these
//! controls (the killed primary stays down; the promoted replica has run
//! since the deployment started), so it would change nothing but the
//! start: with a 10 s TTL, the brand-new Sentinel primary would refuse W's
//! lock for its first 10 s.
//!
//! `control-cluster-empty-restart` is the cluster form of
//! `control-empty-restart`, and the quarantine off is what it shows: a
//! cluster of 3 primaries without replicas (durability off, TTL 10 s). A
//! takes the lock; its primary is SIGKILLed and restarted at once with its
//! nodes.conf but no data, so it keeps its slots and serves them again,
//! empty, once it has rejoined (about 2 s, cluster-node-timeout); B tries
//! the lock every 100 ms and gets it while A's lease is valid: both write.
//! If B does not get in within A's lease, the interleaving did not happen
//! and the control is inconclusive (exit 2), never a pass. The
//! `cluster-empty-restart` scenario repeats this fault with the quarantine
//! on; the library test
//! `cluster::a_cluster_shard_restarted_empty_keeps_a_held_lock_from_a_second_client`
//! runs this script with it on.

use std::time::{Duration, Instant};

use redlease::Durability;

use crate::checker::FinalState;
use crate::history::Recorder;
use crate::panics;
use crate::replicated::{self, blocking, Deployment, Kind, Shared, SWITCH_LIMIT};
use crate::report::Run;
use crate::rig;
use crate::store::Store;
use crate::watchdog::Watchdog;
use crate::workload::{lock_name, Client, Settings};

pub const CONTROLS: &[(&str, &str)] = &[
    (
        "control-cluster-kill-lagging",
        "cluster, durability off: a lock's primary is killed while its replica lags (paused \
         behind 4 MB); the promoted replica lets a second client in",
    ),
    (
        "control-sentinel-kill-lagging",
        "sentinel, durability off: the primary is killed while both replicas lag; the promoted \
         one lets a second client in",
    ),
    (
        "control-cluster-empty-restart",
        "cluster (3 primaries, no replica), restart quarantine off: a lock's primary is killed \
         and restarted at once, empty; a second client gets in",
    ),
];

/// The same kills without the lag: run and reported like the controls,
/// but the checker finds nothing there (the replicas have the key).
pub const PROBES: &[(&str, &str)] = &[
    (
        "control-cluster-kill",
        "cluster, durability off, a lock's primary killed right after the lock was taken",
    ),
    (
        "control-sentinel-kill",
        "sentinel, durability off, the primary killed right after a lock was taken",
    ),
];

/// The lock holder's TTL: long enough to outlast the failover (the
/// cluster's takes 3-4 s, the sentinels' 2-4 s).
const TTL: Duration = Duration::from_secs(10);
/// D's node timeout (see where D is made).
const D_NODE_TIMEOUT: Duration = Duration::from_millis(300);
/// What the paused replicas must be owed before A writes.
const MIN_BACKLOG: u64 = 4 << 20;
/// Junk writes at most (1 MB each).
const MAX_JUNK: usize = 256;

pub async fn run(name: &str, seed: u64) -> Result<Run, String> {
    let (kind, lagging) = match name {
        "control-cluster-kill-lagging" => (Kind::Cluster, true),
        "control-sentinel-kill-lagging" => (Kind::Sentinel, true),
        "control-cluster-kill" => (Kind::Cluster, false),
        "control-sentinel-kill" => (Kind::Sentinel, false),
        "control-cluster-empty-restart" => return empty_restart(name, seed).await,
        other => return Err(format!("unknown control {other:?}")),
    };
    kill_primary(name, kind, lagging, seed).await
}

fn inconclusive(control: &str, step: &str) -> String {
    format!("{control}: could not script the interleaving: {step}")
}

struct Notes {
    rec: Recorder,
    list: Vec<String>,
}

impl Notes {
    fn add(&mut self, text: impl Into<String>) {
        let t = self.rec.now();
        self.list.push(format!(
            "[{:>7.1} ms] {}",
            t.as_secs_f64() * 1e3,
            text.into()
        ));
    }
}

async fn kill_primary(name: &str, kind: Kind, lagging: bool, seed: u64) -> Result<Run, String> {
    let deployment = blocking(move || Deployment::start(kind)).await?;
    let url = deployment.url();
    let describe = deployment.describe();
    let shared: Shared = std::sync::Arc::new(std::sync::Mutex::new(deployment));
    let data = rig::start_data().await?;
    let epoch = Instant::now();
    let rec = Recorder::new(epoch);
    let watchdog = Watchdog::start(epoch);
    let mut notes = Notes {
        rec: rec.clone(),
        list: Vec::new(),
    };
    notes.add(format!("{describe}: {url}"));

    let mut settings = crate::deployment::settings(None);
    // See the module docs: no server restarts here.
    settings.restart_quarantine = Some(Duration::ZERO);
    let connect =
        |worker: usize, durability: Durability, node_timeout: Duration, settings: &mut Settings| {
            settings.durability = durability;
            let settings = settings.clone();
            let (url, data, rec) = (url.clone(), data.url(), rec.clone());
            async move {
                Client::connect(
                    worker,
                    vec![url],
                    &data,
                    TTL,
                    node_timeout,
                    Duration::from_secs(2),
                    &settings,
                    rec,
                )
                .await
            }
        };
    let nt = crate::deployment::NODE_TIMEOUT;
    let mut w = connect(0, Durability::off(), nt, &mut settings).await?;
    let mut a = connect(1, Durability::off(), nt, &mut settings).await?;
    let mut b = connect(2, Durability::off(), nt, &mut settings).await?;
    // D's WAIT 50 ms can take up to 150 ms on an idle primary (the server
    // times WAIT out on its 100 ms cron tick): its node timeout leaves
    // room, so its refusal is WAIT's answer, not a timeout.
    let durable = crate::deployment::durability(Some(1));
    let mut d = connect(3, durable, D_NODE_TIMEOUT, &mut settings).await?;
    let key = a.locker.admin().key(&lock_name(0));

    let warm = w
        .acquire(0, true)
        .await
        .ok_or_else(|| inconclusive(name, "W did not get the lock"))?;
    notes.add(format!(
        "W took and released the lock, token {}",
        warm.fenced_token()
    ));
    let _ = w.release(warm).await;
    // A's cluster connection is made now, while every node answers: a
    // cluster client made later would first have to read the slot map,
    // and may ask a replica paused below.
    let warm = a
        .acquire(0, true)
        .await
        .ok_or_else(|| inconclusive(name, "A did not get the lock before the fault"))?;
    let _ = a.release(warm).await;
    // D's connection is made now: later, its refusal is WAIT's alone.
    if lagging {
        let warm = d
            .acquire(0, true)
            .await
            .ok_or_else(|| inconclusive(name, "D did not get the lock while replicas ack"))?;
        let _ = d.release(warm).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    let (primary, replicas) = {
        let (shared, key) = (shared.clone(), key.clone());
        blocking(move || {
            let d = replicated::lock(&shared);
            let primary = d.primary_port_of(&key)?;
            Ok((primary, d.replica_ports(primary)))
        })
        .await?
    };
    if replicas.is_empty() {
        return Err(inconclusive(name, "the lock's primary has no replica"));
    }

    if lagging {
        let (shared, replicas2) = (shared.clone(), replicas.clone());
        // The junk goes to the lock's slot: its hash tag.
        let tag = lock_name(0);
        let backlog = blocking(move || {
            let mut d = replicated::lock(&shared);
            for &r in &replicas2 {
                d.node_mut(r)?.pause();
            }
            let node = d.node(primary)?;
            let junk = vec![b'x'; 1 << 20];
            for i in 0..MAX_JUNK {
                let _: () = replicated::query(
                    node,
                    redis::cmd("SET")
                        .arg(format!("{{{tag}}}:junk:{i}"))
                        .arg(&junk)
                        .arg("PX")
                        .arg(120_000),
                )
                .map_err(|e| format!("junk write: {e}"))?;
                let owed = replicated::replica_backlog(node)?;
                if owed >= MIN_BACKLOG {
                    return Ok(owed);
                }
            }
            Err(format!(
                "the replicas were owed less than {MIN_BACKLOG} bytes"
            ))
        })
        .await
        .map_err(|e| inconclusive(name, &e))?;
        notes.add(format!(
            "replica(s) {replicas:?} of primary {primary} paused; junk writes in the lock's slot \
             left {} MB owed to each in the primary's output buffer",
            backlog >> 20
        ));
        match d.acquire(0, true).await {
            None => notes.add(format!(
                "D, with durability required(1, 50ms), was refused: {}",
                last_error(&rec, 3)
            )),
            Some(held) => {
                notes.add("D, with durability required(1, 50ms), got the lock (unexpected)");
                let _ = d.release(held).await;
            }
        }
    }

    let held_a = a
        .acquire(0, true)
        .await
        .ok_or_else(|| inconclusive(name, "A did not get the lock"))?;
    let acquired_a = Instant::now();
    let seen_a = a
        .read(&held_a)
        .await
        .ok_or_else(|| inconclusive(name, "A's read failed"))?;
    let owed = {
        let (shared, replicas) = (shared.clone(), replicas.clone());
        blocking(move || {
            let mut d = replicated::lock(&shared);
            let owed = if lagging {
                replicated::replica_backlog(d.node(primary)?)?
            } else {
                0
            };
            d.node_mut(primary)?.kill();
            for &r in &replicas {
                d.node_mut(r)?.resume();
            }
            Ok(owed)
        })
        .await?
    };
    notes.add(format!(
        "A took the lock on primary {primary} (token {}, read counter {seen_a}); the primary was \
         SIGKILLed {:.1} ms later{}",
        held_a.fenced_token(),
        acquired_a.elapsed().as_secs_f64() * 1e3,
        if lagging {
            format!(
                " with {} MB, A's write behind them, still owed to the replicas (resumed now)",
                owed >> 20
            )
        } else {
            String::new()
        }
    ));

    let (new, pttl) = {
        let (shared, key) = (shared.clone(), key.clone());
        blocking(move || {
            let d = replicated::lock(&shared);
            let new = d.await_new_primary(&key, primary, SWITCH_LIMIT)?;
            let pttl: i64 = replicated::query(d.node(new)?, redis::cmd("PTTL").arg(&key))
                .map_err(|e| format!("PTTL on the new primary: {e}"))?;
            Ok((new, pttl))
        })
        .await?
    };
    notes.add(format!(
        "port {new} took over; A's key there: {}",
        if pttl > 0 {
            format!("present, {pttl} ms left (the replica had it)")
        } else {
            "MISSING (the write never reached it)".to_string()
        }
    ));

    let mut held_b = None;
    let mut tries = 0;
    while Instant::now() < held_a.lease.valid_until() + Duration::from_millis(500) {
        tries += 1;
        if let Some(held) = b.acquire(0, true).await {
            held_b = Some(held);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    match &held_b {
        Some(held) => {
            let left = held_a.lease.remaining();
            notes.add(format!(
                "B took the lock (try {tries}, token {}) {}",
                held.fenced_token(),
                if left.is_zero() {
                    "after A's lease ended".to_string()
                } else {
                    format!("while A's lease has {} ms left", left.as_millis())
                }
            ));
        }
        None => notes.add(format!("B never got the lock ({tries} tries)")),
    }
    if let Some(held) = &held_b {
        if let Some(seen_b) = b.read(held).await {
            b.write(held, seen_b + 1, false).await;
            b.fenced_write(held, false).await;
        }
    }
    // A writes what it read plus one, if its lease allows.
    let wrote = a.write(&held_a, seen_a + 1, false).await;
    let fenced = a.fenced_write(&held_a, false).await;
    notes.add(format!(
        "A {} counter = {}; its fenced write {}",
        if wrote { "wrote" } else { "did not write" },
        seen_a + 1,
        match fenced {
            Some(true) => "was accepted",
            Some(false) => "was rejected",
            None => "was not made",
        }
    ));
    let _ = a.release(held_a).await;
    if let Some(held) = held_b {
        let _ = b.release(held).await;
    }

    tokio::time::sleep(Duration::from_millis(500)).await;
    let elapsed = epoch.elapsed();
    let stalls = watchdog.stop();
    let primaries = {
        let shared = shared.clone();
        blocking(move || Ok(replicated::lock(&shared).primary_addrs())).await?
    };
    let leftover_keys = rig::leftover_keys(&primaries).await?;
    let counters = Store::connect(&data.url()).await?.counters(1).await?;
    let label = if lagging {
        "kill_primary_lagging_replica"
    } else {
        "kill_primary"
    };
    Ok(Run {
        scenario: name.to_string(),
        seed,
        nodes: 1,
        seconds: (elapsed.as_secs_f64() * 10.0).round() / 10.0,
        elapsed,
        ttl: TTL,
        history: rec.history(),
        faults: [(label, 1)].into_iter().collect(),
        state: FinalState {
            counters,
            leftover_keys,
            process_panics: panics::count(),
            stuck_workers: 0,
            stalls,
        },
        notes: notes.list,
        same_server: None,
        read_write: None,
        semaphore: None,
        multi: None,
        engine: None,
        elections: None,
    })
}

/// The text of the last failed call of `worker`.
fn last_error(rec: &Recorder, worker: usize) -> String {
    rec.history()
        .iter()
        .rev()
        .filter(|op| op.worker == worker)
        .find_map(|op| match &op.outcome {
            crate::history::Outcome::Failed(kind, text) => Some(format!("{} {text}", kind.label())),
            _ => None,
        })
        .unwrap_or_else(|| "no error recorded".into())
}

/// `control-cluster-empty-restart` (see the module docs).
async fn empty_restart(name: &str, seed: u64) -> Result<Run, String> {
    let deployment = blocking(move || Deployment::start(Kind::BareCluster)).await?;
    let url = deployment.url();
    let shared: Shared = std::sync::Arc::new(std::sync::Mutex::new(deployment));
    let data = rig::start_data().await?;
    let epoch = Instant::now();
    let rec = Recorder::new(epoch);
    let watchdog = Watchdog::start(epoch);
    let mut notes = Notes {
        rec: rec.clone(),
        list: Vec::new(),
    };
    notes.add(format!(
        "a Redis Cluster of {} primaries without replicas (cluster-node-timeout 2 s) as the one \
         node: {url}; durability off; restart quarantine off; TTL {TTL:?}",
        replicated::CLUSTER_PRIMARIES
    ));
    let mut settings = crate::deployment::settings(None);
    // What this control shows.
    settings.restart_quarantine = Some(Duration::ZERO);
    let mut clients = Vec::new();
    for worker in 0..2 {
        clients.push(
            Client::connect(
                worker,
                vec![url.clone()],
                &data.url(),
                TTL,
                crate::deployment::NODE_TIMEOUT,
                Duration::from_secs(2),
                &settings,
                rec.clone(),
            )
            .await?,
        );
    }
    let (mut b, mut a) = (clients.pop().expect("B"), clients.pop().expect("A"));
    let key = a.locker.admin().key(&lock_name(0));

    let held_a = a
        .acquire(0, true)
        .await
        .ok_or_else(|| inconclusive(name, "A did not get the lock"))?;
    let seen_a = a
        .read(&held_a)
        .await
        .ok_or_else(|| inconclusive(name, "A's read failed"))?;
    let (primary, pttl) = {
        let (shared, key) = (shared.clone(), key.clone());
        blocking(move || {
            let d = replicated::lock(&shared);
            let primary = d.primary_port_of(&key)?;
            let pttl: i64 = replicated::query(d.node(primary)?, redis::cmd("PTTL").arg(&key))
                .map_err(|e| format!("PTTL on the primary: {e}"))?;
            Ok((primary, pttl))
        })
        .await?
    };
    if pttl <= 0 {
        return Err(inconclusive(
            name,
            &format!("A's key is not on its primary {primary} (PTTL {pttl})"),
        ));
    }
    notes.add(format!(
        "A took the lock on primary {primary} (token {}, read counter {seen_a})",
        held_a.fenced_token()
    ));

    // Kill, restart at once, and wait until the node serves its slots.
    let switch = {
        let (shared, key) = (shared.clone(), key.clone());
        blocking(move || {
            let mut d = replicated::lock(&shared);
            let slot = d.slot_of(&key)?;
            d.cluster_empty_restart(slot, None)
        })
        .await?
    };
    let pttl = {
        let (shared, key) = (shared.clone(), key.clone());
        blocking(move || {
            let d = replicated::lock(&shared);
            replicated::query::<i64>(d.node(primary)?, redis::cmd("PTTL").arg(&key))
                .map_err(|e| format!("PTTL on the restarted primary: {e}"))
        })
        .await?
    };
    notes.add(format!(
        "primary {primary} SIGKILLed and restarted at once, empty; it served its slots again \
         {:.2} s later (cluster_state:ok); A's key there: {}; A's lease has {} ms left",
        switch.settled.unwrap_or_default().as_secs_f64(),
        if pttl > 0 {
            format!("present ({pttl} ms left)")
        } else {
            "gone".to_string()
        },
        held_a.lease.remaining().as_millis()
    ));
    if pttl > 0 {
        return Err(inconclusive(
            name,
            "the restarted primary still has A's key",
        ));
    }

    // B tries until it gets the lock or A's lease is over.
    let mut held_b = None;
    let mut tries = 0;
    while Instant::now() < held_a.lease.valid_until() {
        tries += 1;
        if let Some(held) = b.acquire(0, true).await {
            held_b = Some(held);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let Some(held_b) = held_b else {
        return Err(inconclusive(
            name,
            &format!(
                "B did not get the lock within A's lease ({tries} tries; last: {})",
                last_error(&rec, 1)
            ),
        ));
    };
    let left = held_a.lease.remaining();
    if left.is_zero() {
        return Err(inconclusive(
            name,
            "B got the lock only after A's lease ended",
        ));
    }
    notes.add(format!(
        "B took the lock (try {tries}, token {}) while A's lease has {} ms left",
        held_b.fenced_token(),
        left.as_millis()
    ));
    let seen_b = b
        .read(&held_b)
        .await
        .ok_or_else(|| inconclusive(name, "B's read failed"))?;
    b.write(&held_b, seen_b + 1, false).await;
    b.fenced_write(&held_b, false).await;
    a.write(&held_a, seen_a + 1, false).await;
    let fenced = a.fenced_write(&held_a, false).await;
    notes.add(format!(
        "B wrote counter = {}, then A wrote {}; A's fenced write (token {} vs B's {}) {}",
        seen_b + 1,
        seen_a + 1,
        held_a.fenced_token(),
        held_b.fenced_token(),
        match fenced {
            Some(true) => "was accepted",
            Some(false) => "was rejected",
            None => "was not made",
        }
    ));
    let _ = a.release(held_a).await;
    let _ = b.release(held_b).await;

    tokio::time::sleep(Duration::from_millis(500)).await;
    let elapsed = epoch.elapsed();
    let stalls = watchdog.stop();
    let primaries = {
        let shared = shared.clone();
        blocking(move || Ok(replicated::lock(&shared).primary_addrs())).await?
    };
    let leftover_keys = rig::leftover_keys(&primaries).await?;
    let counters = Store::connect(&data.url()).await?.counters(1).await?;
    Ok(Run {
        scenario: name.to_string(),
        seed,
        nodes: 1,
        seconds: (elapsed.as_secs_f64() * 10.0).round() / 10.0,
        elapsed,
        ttl: TTL,
        history: rec.history(),
        faults: [("cluster_empty_restart", 1)].into_iter().collect(),
        state: FinalState {
            counters,
            leftover_keys,
            process_panics: panics::count(),
            stuck_workers: 0,
            stalls,
        },
        notes: notes.list,
        same_server: None,
        read_write: None,
        semaphore: None,
        multi: None,
        engine: None,
        elections: None,
    })
}
