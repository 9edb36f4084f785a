//! Measuring one workload on one set of nodes: every client in interleaved
//! rounds (redlease, raw, plain, rslock; then raw, plain, rslock, redlease;
//! ...), so a
//! change in machine load hits all of them alike and the ratios hold. The
//! read-mostly, semaphore and multi workloads run the library's clients
//! only (no peer has a read-write lock, a semaphore or a lease over
//! several locks); multi runs the library twice, with `lock_all` and with
//! nested `lock` calls, and counts what the servers serve per slice.

use std::sync::Arc;
use std::time::Duration;

use crate::client::{fence_key_for, key_for, BenchError, LockClient, Nested, Redlease, Variant};
use crate::commands::Counters;
use crate::conn::NodeConn;
use crate::cpu;
use crate::floor::{self, Blocking, CClient};
use crate::raw::{Flavor, Raw};
use crate::report::{ClientRun, WorkloadReport};
use crate::workloads::{self, Counter, Outcome, Workload, PERMITS};

/// Pause between two slices, so one client's background work (requests
/// detached after a quorum, closing sockets) does not land in the next one's.
const SETTLE: Duration = Duration::from_millis(10);

/// How to measure.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Unmeasured, once per client before its first slice.
    pub warmup: Duration,
    /// Measured time per client and round.
    pub slice: Duration,
    pub rounds: u32,
    pub rslock: bool,
    /// Also the library with fencing tokens on.
    pub fenced: bool,
    /// Also the library with the clock-jump guard off.
    pub unguarded: bool,
    /// Also the library with the express connection on.
    pub express: bool,
}

/// A client under test; an enum so the rounds can rotate over clients of
/// different types.
enum Subject {
    Lib(Arc<Redlease>),
    Raw(Arc<Raw>),
    Blocking(Arc<Blocking>),
    Nested(Arc<Nested>),
    #[cfg(feature = "rslock")]
    Rslock(Arc<crate::rslock_cmp::Rslock>),
}

impl Subject {
    fn label(&self) -> &'static str {
        match self {
            Subject::Lib(c) => c.label(),
            Subject::Raw(c) => c.label(),
            Subject::Blocking(c) => c.label(),
            Subject::Nested(c) => c.label(),
            #[cfg(feature = "rslock")]
            Subject::Rslock(c) => c.label(),
        }
    }

    /// One-letter key tag, so all clients' keys have the same length.
    fn letter(&self) -> char {
        match self {
            Subject::Lib(c) if c.label() == "redlease+fence" => 'F',
            Subject::Lib(c) if c.label() == "redlease+express" => 'E',
            Subject::Lib(_) => 'L',
            Subject::Raw(c) if c.label() == "plain" => 'P',
            Subject::Raw(_) => 'R',
            Subject::Blocking(_) => 'B',
            Subject::Nested(_) => 'N',
            #[cfg(feature = "rslock")]
            Subject::Rslock(_) => 'S',
        }
    }

    async fn slice(
        &self,
        workload: Workload,
        workers: usize,
        duration: Duration,
        counter: &Counter,
        tag: &str,
        watch: &Watch<'_>,
    ) -> Result<Outcome, BenchError> {
        let tag = format!("{tag}-{}", self.letter());
        // Outside the CPU window: the counters' own INFO calls are not the
        // client's cost.
        let counters = watch.counters;
        let served_before = match counters {
            Some(c) => c.sample().await.ok(),
            None => None,
        };
        let before = cpu::sample(watch.pids);
        let outcome = match self {
            Subject::Lib(c) => {
                workloads::phase(c.clone(), workload, workers, duration, counter, &tag).await
            }
            Subject::Raw(c) => {
                workloads::phase(c.clone(), workload, workers, duration, counter, &tag).await
            }
            // Uncontended only (see `measure`).
            Subject::Blocking(c) => c.slice(duration, &tag).await,
            Subject::Nested(c) => {
                workloads::phase(c.clone(), workload, workers, duration, counter, &tag).await
            }
            #[cfg(feature = "rslock")]
            Subject::Rslock(c) => {
                workloads::phase(c.clone(), workload, workers, duration, counter, &tag).await
            }
        };
        let (client_cpu, server_cpu) = cpu::sample(watch.pids).since(&before);
        let mut outcome = outcome.map_err(|e| format!("{}, {workload}: {e}", self.label()))?;
        outcome.client_cpu = client_cpu;
        outcome.server_cpu = server_cpu;
        if let (Some(counters), Some(before)) = (counters, served_before) {
            outcome.served = counters
                .sample()
                .await
                .ok()
                .map(|after| after.since(&before, counters.processes()));
        }
        Ok(outcome)
    }
}

/// The server processes behind the nodes, as far as they can be watched.
#[derive(Clone, Copy, Debug)]
pub struct Servers<'a> {
    /// Their pids, for their CPU (none on nodes given with `--urls`).
    pub pids: &'a [u32],
    /// A plain URL of each (each node, or each process of a cluster), for
    /// their counters (read by the multi workload only).
    pub urls: &'a [String],
}

/// What a slice samples around itself: the servers' CPU, and their
/// counters when there are some to read.
struct Watch<'a> {
    pids: &'a [u32],
    counters: Option<&'a Counters>,
}

/// Builds the clients, warms each up, then runs `settings.rounds` rounds of
/// one slice per client, rotating the order every round. `cluster`: the
/// primaries of the cluster that `urls` (one `redis+cluster://` URL) names,
/// for the report; `servers` are then all of its processes.
pub async fn measure(
    settings: &Settings,
    workload: Workload,
    urls: &[String],
    servers: Servers<'_>,
    workers: usize,
    cluster: Option<usize>,
    tag: &str,
) -> Result<WorkloadReport, BenchError> {
    let counter = Counter {
        conn: NodeConn::connect(&urls[0]).await?,
    };
    let lib = Redlease::new(urls, Variant::Default)?;
    // The raw and rslock clients build keys themselves: same scheme or bust.
    let expected = (key_for("x"), fence_key_for("x"));
    if lib.keys("x") != expected {
        return Err(format!(
            "the library's key scheme changed ({:?}, bench expects {expected:?}); \
             update client::key_for and fence_key_for",
            lib.keys("x")
        )
        .into());
    }
    let permit_quorum = (workload == Workload::Semaphore).then(|| lib.permit_quorum(PERMITS));
    let mut subjects = vec![Subject::Lib(Arc::new(lib))];
    let mut counters = None;
    if workload == Workload::Multi {
        subjects.push(Subject::Nested(Arc::new(Nested::new(urls)?)));
        // Best effort: nodes given with --urls may refuse INFO (ACL).
        let connected = match Counters::connect(servers.urls).await {
            Ok(c) => c.sample().await.map(|_| c),
            Err(e) => Err(e),
        };
        counters = match connected {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!(
                    "note: multi: the servers' counters cannot be read ({e}): \
                     no round trips or commands per cycle"
                );
                None
            }
        };
    }
    if workload.has_peers() {
        subjects.push(Subject::Raw(Arc::new(
            Raw::connect(urls, Flavor::Raw).await?,
        )));
        subjects.push(Subject::Raw(Arc::new(
            Raw::connect(urls, Flavor::Plain).await?,
        )));
        if settings.rslock {
            subjects.push(rslock_subject(urls)?);
        }
    }
    // The single caller's floors, on single servers (see `floor`): not
    // with --cluster, nor with a cluster among --urls.
    let single_servers = urls.iter().all(|url| {
        !matches!(
            redlease::NodeUrl::parse(url),
            Ok(redlease::NodeUrl::Cluster { .. })
        )
    });
    let floors = workload == Workload::Uncontended && single_servers;
    let mut c_client = None;
    if floors {
        let all = urls.to_vec();
        let blocking = tokio::task::spawn_blocking(move || Blocking::connect(&all)).await??;
        subjects.push(Subject::Blocking(Arc::new(blocking)));
        // Two round trips of one server: the floor of a 1-node cycle.
        if urls.len() == 1 {
            c_client = c_client_floor(&urls[0]).await;
        }
    }
    if settings.fenced {
        subjects.push(Subject::Lib(Arc::new(Redlease::new(
            urls,
            Variant::Fenced,
        )?)));
    }
    if settings.unguarded {
        let unguarded = Redlease::new(urls, Variant::Unguarded)?;
        subjects.push(Subject::Lib(Arc::new(unguarded)));
    }
    if settings.express {
        let express = Redlease::new(urls, Variant::Express)?;
        subjects.push(Subject::Lib(Arc::new(express)));
    }
    for s in &subjects {
        if !settings.warmup.is_zero() {
            s.slice(
                workload,
                workers,
                settings.warmup,
                &counter,
                &format!("{tag}-warm"),
                &Watch {
                    pids: servers.pids,
                    counters: None,
                },
            )
            .await?;
            tokio::time::sleep(SETTLE).await;
        }
    }
    let mut slices: Vec<Vec<Outcome>> = subjects.iter().map(|_| Vec::new()).collect();
    for round in 0..settings.rounds as usize {
        for k in 0..subjects.len() {
            let i = (round + k) % subjects.len();
            let outcome = subjects[i]
                .slice(
                    workload,
                    workers,
                    settings.slice,
                    &counter,
                    &format!("{tag}-r{round}"),
                    &Watch {
                        pids: servers.pids,
                        counters: counters.as_ref(),
                    },
                )
                .await?;
            slices[i].push(outcome);
            tokio::time::sleep(SETTLE).await;
        }
    }
    let mut runs: Vec<ClientRun> = subjects
        .iter()
        .zip(&slices)
        .map(|(s, outcomes)| ClientRun::new(s.label(), workload, urls.len(), outcomes))
        .collect();
    let mut take = |label: &str| {
        runs.iter()
            .position(|r| r.client == label)
            .map(|i| runs.remove(i))
    };
    let Some(lib) = take("redlease") else {
        unreachable!("redlease is always measured");
    };
    let (raw, plain) = (take("raw"), take("plain"));
    let blocking = take("blocking");
    let rslock = take("rslock");
    let nested = take("nested");
    let fenced = take("redlease+fence");
    let unguarded = take("no-clock-guard");
    let express = take("redlease+express");
    Ok(WorkloadReport {
        workload,
        nodes: urls.len(),
        cluster,
        workers,
        seconds: settings.slice.as_secs_f64() * f64::from(settings.rounds),
        rounds: settings.rounds,
        permit_quorum,
        lib,
        raw,
        plain,
        blocking,
        c_client,
        rslock,
        nested,
        fenced,
        unguarded,
        express,
    })
}

/// redis-benchmark's floor on the node `url` names, or `None` with a note
/// (not installed, or a node it cannot reach as host and port).
async fn c_client_floor(url: &str) -> Option<CClient> {
    let addr = redis::Client::open(url)
        .ok()
        .map(|c| c.get_connection_info().addr().clone());
    let Some(redis::ConnectionAddr::Tcp(host, port)) = addr else {
        eprintln!(
            "note: uncontended: redis-benchmark reaches plain TCP nodes only; no C client floor"
        );
        return None;
    };
    let measured = tokio::task::spawn_blocking(move || floor::c_client(&host, port))
        .await
        .map_err(BenchError::from)
        .and_then(|run| run);
    measured
        .inspect_err(|e| eprintln!("note: uncontended: no C client floor: {e}"))
        .ok()
}

#[cfg(feature = "rslock")]
fn rslock_subject(urls: &[String]) -> Result<Subject, BenchError> {
    Ok(Subject::Rslock(Arc::new(crate::rslock_cmp::Rslock::new(
        urls,
    )?)))
}

#[cfg(not(feature = "rslock"))]
fn rslock_subject(_urls: &[String]) -> Result<Subject, BenchError> {
    Err("--compare rslock: built without the bench's `rslock` feature".into())
}
