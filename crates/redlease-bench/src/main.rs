//! redlease-bench: what a lock costs with redlease, against two redis-rs
//! baselines, one sending the library's own commands (raw) and one the
//! leanest lock there is, `SET NX PX` and compare-and-delete (plain), and
//! optionally the rslock crate, measured back to back in one run so every figure is a ratio that holds on
//! a noisy machine. See BENCHMARKS.md at the workspace root.
//!
//! ```text
//! cargo run --release -p redlease-bench -- --workload all --nodes 1,5 --seconds 3 --compare rslock
//! # leases held while each node is SIGSTOPped 600 ms of every 900 ms, staggered:
//! cargo run --release -p redlease-bench -- --workload renewal --nodes 5 --stall 600ms/900ms --json
//! # one node of the quorum that is a Redis Cluster of 3 primaries:
//! cargo run --release -p redlease-bench -- --workload independent --cluster 3 --seconds 3
//! ```

mod client;
mod commands;
mod conn;
mod cpu;
mod floor;
mod raw;
mod renewal;
mod report;
#[cfg(feature = "rslock")]
mod rslock_cmp;
mod runner;
mod stall;
mod stats;
mod workloads;

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Parser, ValueEnum};
use redlease_testkit::cluster::RedisCluster;
use redlease_testkit::{RedisNode, RedisNodes};

use crate::client::{BenchError, Redlease, RETRY_MAX, RETRY_MIN, TTL, WAIT};
use crate::runner::Settings;
use crate::stall::{StallPhase, StallSpec};
use crate::workloads::Workload;

/// Tokio worker threads by default: the machines this is tuned for have 2
/// cores.
const RUNTIME_THREADS: u16 = 2;
/// Length of one interleaved slice when --rounds is not given.
const AUTO_SLICE_S: f64 = 0.25;
/// Most rounds --rounds may ask for (each round runs every client once).
const MAX_ROUNDS: u32 = 100;
/// Most primaries --cluster may start (each one a redis-server process).
const MAX_CLUSTER_PRIMARIES: usize = 15;

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Lock costs of redlease against raw redis-rs baselines (and rslock), in one run"
)]
struct Args {
    /// Which workload to run.
    #[arg(long, value_enum, default_value_t = WorkloadArg::All)]
    workload: WorkloadArg,
    /// How many redis-server nodes to start (a comma-separated list runs
    /// each count in turn, e.g. 1,5). Default 1, or the number of --urls.
    #[arg(long, value_delimiter = ',')]
    nodes: Vec<usize>,
    /// Concurrent workers for contended and read-mostly (default 8),
    /// semaphore (default 16) and independent (default 64); uncontended
    /// and multi always have 1.
    #[arg(long)]
    workers: Option<usize>,
    /// Measured seconds per client and workload (fractions allowed).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Split the seconds into this many rounds, each running every client
    /// once in a rotating order (default: one round per quarter second).
    #[arg(long)]
    rounds: Option<u32>,
    /// Unmeasured warm-up seconds before each measurement (connects, loads
    /// the scripts).
    #[arg(long, default_value_t = 0.3)]
    warmup: f64,
    /// Use these Redis nodes (comma-separated URLs) instead of starting
    /// redis-server processes. The bench writes and deletes keys there.
    #[arg(long, value_delimiter = ',')]
    urls: Vec<String>,
    /// Start a Redis Cluster of this many primaries (no replicas) and run
    /// the workloads with it as the one node of the quorum, through its
    /// `redis+cluster://` URL. Not with --urls, nor with --nodes other than
    /// 1, nor with the renewal workload. The raw baseline uses redis-rs's
    /// cluster client; rslock cannot reach a cluster, so --compare rslock is
    /// skipped (with a note). Server CPU sums every cluster process.
    #[arg(long, value_name = "PRIMARIES")]
    cluster: Option<usize>,
    /// Also print one JSON object per workload, each on its own line.
    #[arg(long)]
    json: bool,
    /// Worker threads of the Tokio runtime every client runs on; 0 runs
    /// them all on one thread (a current-thread runtime), where no request
    /// or reply hands work from one thread to another.
    #[arg(long, default_value_t = RUNTIME_THREADS, value_parser = clap::value_parser!(u16).range(0..=64))]
    threads: u16,
    /// Leases to hold at once in the renewal workload.
    #[arg(long, default_value_t = 10_000)]
    leases: usize,
    /// Renewal workload only, on the bench's own nodes (not with --urls):
    /// while the leases are held (not while they are taken), every period P
    /// each redis-server node is stopped (SIGSTOP) for D, then resumed
    /// (SIGCONT). E.g. 600ms/900ms: stopped 600 ms, running 300 ms, again
    /// and again. Durations take ms or s, fractions allowed (100ms, 1s,
    /// 1.5s); 1 ms <= D < P, 10 ms <= P <= 600 s. Every node is resumed
    /// when the hold ends. Lost leases are then a measured outcome: the
    /// report is printed in full, and the exit code still says whether any
    /// was lost.
    #[arg(long, value_name = "D/P", value_parser = stall::parse_stall)]
    stall: Option<StallSpec>,
    /// With --stall: `staggered` (default) starts node i's stop window i*P/n
    /// into the period, so the windows rotate through the nodes and about
    /// n*D/P nodes are stopped at any moment (a minority or a majority,
    /// depending on D/P); `same` stops and resumes all nodes together.
    #[arg(long, value_enum, value_name = "PHASE", requires = "stall")]
    stall_phase: Option<StallPhase>,
    /// Also run these on the same workloads: another lock library, or the
    /// library with fencing on, or with the clock-jump guard off
    /// or with the express connection on (comma-separated, e.g.
    /// rslock,fenced,unguarded,express).
    #[arg(long, value_enum, value_delimiter = ',')]
    compare: Vec<Compare>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum WorkloadArg {
    Uncontended,
    Contended,
    Independent,
    /// K workers (default 8) on one lock, 90% of cycles a read lock, 10% a
    /// write lock (redlease only: no other client has read-write locks).
    ReadMostly,
    /// K workers (default 16) on one semaphore of 4 permits (redlease
    /// only: no other client has semaphores).
    Semaphore,
    /// 1 worker holding 4 fresh names at once each cycle, with `lock_all`
    /// and with 4 nested `lock` calls, and the servers' round trips and
    /// commands per cycle (redlease only).
    Multi,
    /// All six, one after another.
    All,
    /// Many leases held at once under automatic renewal (--leases, TTL 3 s,
    /// held for --seconds): client CPU, memory, round trips, leases lost
    /// (by reason), abandoned renewal batches; optionally with the nodes
    /// stalled on a schedule (--stall).
    Renewal,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Compare {
    /// The rslock crate (bench feature `rslock`, on by default).
    Rslock,
    /// redlease with fencing tokens on (`LockerBuilder::fencing`), to show
    /// what drawing a token costs.
    Fenced,
    /// redlease with the clock-jump guard off
    /// (`Advanced::clock_jump_guard(false)`), to show what the guard's
    /// `PEXPIRETIME` with every acquire costs.
    Unguarded,
    /// redlease with the express connection on
    /// (`Advanced::express_connection(true)`): a lone request writes and
    /// reads a connection of its own instead of the multiplexed one.
    Express,
}

/// Everything a run needs, checked.
struct Plan {
    workloads: Vec<Workload>,
    node_counts: Vec<usize>,
    /// Primaries of the cluster to start and run on, as the one node.
    cluster: Option<usize>,
    workers: Option<usize>,
    settings: Settings,
    urls: Vec<String>,
    json: bool,
    threads: usize,
}

fn plan(args: Args) -> Result<Plan, BenchError> {
    // Bounds keep every run finite and every loop short.
    if !(args.seconds > 0.0 && args.seconds <= 600.0) {
        return Err(format!("--seconds {} is not in (0, 600]", args.seconds).into());
    }
    if !(0.0..=60.0).contains(&args.warmup) {
        return Err(format!("--warmup {} is not in [0, 60]", args.warmup).into());
    }
    let rounds = match args.rounds {
        Some(r) if (1..=MAX_ROUNDS).contains(&r) => r,
        Some(r) => return Err(format!("--rounds {r} is not in [1, {MAX_ROUNDS}]").into()),
        None => ((args.seconds / AUTO_SLICE_S).round() as u32).clamp(1, 40),
    };
    if let Some(k) = args.workers {
        if !(1..=4096).contains(&k) {
            return Err(format!("--workers {k} is not in [1, 4096]").into());
        }
    }
    if let Some(k) = args.cluster {
        check_cluster_args(k, &args)?;
    }
    let node_counts = if args.urls.is_empty() {
        let counts = if args.nodes.is_empty() {
            vec![1]
        } else {
            args.nodes
        };
        if let Some(bad) = counts.iter().find(|n| !(1..=15).contains(*n)) {
            return Err(format!("--nodes {bad} is not in [1, 15]").into());
        }
        counts
    } else {
        let n = args.urls.len();
        if !args.nodes.is_empty() && args.nodes != [n] {
            return Err(format!(
                "--nodes {:?} disagrees with the {n} --urls given",
                args.nodes
            )
            .into());
        }
        vec![n]
    };
    let mut rslock = args.compare.contains(&Compare::Rslock);
    if rslock && !cfg!(feature = "rslock") {
        return Err(
            "--compare rslock: this binary was built without the `rslock` feature \
             (it is on by default; drop --no-default-features)"
                .into(),
        );
    }
    if rslock && args.cluster.is_some() {
        eprintln!(
            "note: --compare rslock is skipped with --cluster: rslock talks to single servers \
             only and cannot use a Redis Cluster; redlease and raw are measured"
        );
        rslock = false;
    }
    if args.stall.is_some() {
        return Err("--stall applies to the renewal workload only (--workload renewal)".into());
    }
    let workloads = match args.workload {
        WorkloadArg::Uncontended => vec![Workload::Uncontended],
        WorkloadArg::Contended => vec![Workload::Contended],
        WorkloadArg::Independent => vec![Workload::Independent],
        WorkloadArg::ReadMostly => vec![Workload::ReadMostly],
        WorkloadArg::Semaphore => vec![Workload::Semaphore],
        WorkloadArg::Multi => vec![Workload::Multi],
        WorkloadArg::All => Workload::ALL.to_vec(),
        WorkloadArg::Renewal => return Err("the renewal workload runs on its own".into()),
    };
    if args.workers.is_some() && workloads.iter().all(|w| w.single_worker()) {
        eprintln!(
            "note: --workers is ignored for uncontended and multi, which always have 1 worker"
        );
    }
    Ok(Plan {
        workloads,
        node_counts,
        cluster: args.cluster,
        workers: args.workers,
        settings: Settings {
            warmup: Duration::from_secs_f64(args.warmup),
            slice: Duration::from_secs_f64(args.seconds / f64::from(rounds)),
            rounds,
            rslock,
            fenced: args.compare.contains(&Compare::Fenced),
            unguarded: args.compare.contains(&Compare::Unguarded),
            express: args.compare.contains(&Compare::Express),
        },
        urls: args.urls,
        json: args.json,
        threads: args.threads.into(),
    })
}

/// `--cluster k` combines with nothing that names other nodes; checked
/// before anything starts.
fn check_cluster_args(k: usize, args: &Args) -> Result<(), BenchError> {
    if !(1..=MAX_CLUSTER_PRIMARIES).contains(&k) {
        return Err(format!("--cluster {k} is not in [1, {MAX_CLUSTER_PRIMARIES}]").into());
    }
    if !args.urls.is_empty() {
        return Err("--cluster starts its own Redis Cluster: it cannot be used with --urls".into());
    }
    if !(args.nodes.is_empty() || args.nodes == [1]) {
        return Err(format!(
            "--cluster {k} is one node of the quorum: --nodes must be 1 or left out, not {}",
            args.nodes
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        )
        .into());
    }
    if args.workload == WorkloadArg::Renewal {
        return Err(
            "--cluster runs the uncontended, contended, independent, read-mostly, semaphore and \
             multi workloads; the renewal workload does not take --cluster"
                .into(),
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.workload == WorkloadArg::Renewal {
        return match run_renewal(&args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match plan(args).and_then(run) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The renewal workload: its own shape (no raw baseline to compare with).
fn run_renewal(args: &Args) -> Result<ExitCode, BenchError> {
    // The library's renewal events on stderr (a node's renewals failing,
    // renewals falling behind and catching up): when the load is told,
    // against when leases were lost.
    {
        use tracing_subscriber::layer::SubscriberExt;
        let renewals = tracing_subscriber::filter::Targets::new()
            .with_target("redlease::renewal", tracing::Level::INFO);
        let subscriber = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .finish()
            .with(renewals);
        let _ = tracing::subscriber::set_global_default(subscriber);
    }
    if let Some(k) = args.cluster {
        check_cluster_args(k, args)?;
    }
    if !(args.seconds > 0.0 && args.seconds <= 600.0) {
        return Err(format!("--seconds {} is not in (0, 600]", args.seconds).into());
    }
    if !(1..=100_000).contains(&args.leases) {
        return Err(format!("--leases {} is not in [1, 100000]", args.leases).into());
    }
    let n = match (args.urls.len(), args.nodes.as_slice()) {
        (0, []) => 1,
        (0, [n]) if (1..=15).contains(n) => *n,
        (0, _) => return Err("--nodes takes one count from 1 to 15 for renewal".into()),
        (n, _) => n,
    };
    if args.stall.is_some() && !args.urls.is_empty() {
        return Err(
            "--stall stops the bench's own redis-server nodes: it cannot be used with --urls"
                .into(),
        );
    }
    let phase = args.stall_phase.unwrap_or(StallPhase::Staggered);
    if args.urls.is_empty() {
        check_redis_server()?;
    }
    let runtime = runtime(args.threads.into())?;
    let mut nodes = args.urls.is_empty().then(|| RedisNodes::start(n));
    let urls = nodes
        .as_ref()
        .map_or_else(|| args.urls.clone(), RedisNodes::urls);
    let stall = match (args.stall, &nodes) {
        (Some(spec), Some(nodes)) => {
            let pids: Vec<u32> = nodes.iter().filter_map(|node| node.pid()).collect();
            if pids.len() != nodes.len() {
                return Err("--stall: a redis-server node is not running".into());
            }
            Some(renewal::Stall { spec, phase, pids })
        }
        _ => None,
    };
    println!(
        "redlease-bench renewal: {} leases, TTL {:?}, renewed every TTL/3, held {:.1} s on {n} node(s){}",
        args.leases,
        renewal::TTL,
        args.seconds,
        args.stall.map_or_else(String::new, |s| format!(
            "; while held, each node stopped {:?} of every {:?} ({})",
            s.stopped,
            s.period,
            phase.name()
        ))
    );
    let tag = format!("bench-{}-renewal", std::process::id());
    let result = runtime.block_on(renewal::run(
        &urls,
        args.leases,
        Duration::from_secs_f64(args.seconds),
        &tag,
        stall,
    ));
    // The stall driver resumes every node when it ends; resume again
    // whatever happened, so no node is ever left stopped (idempotent).
    if let Some(nodes) = nodes.as_mut() {
        (0..nodes.len()).for_each(|i| nodes.node_mut(i).resume());
    }
    let report = result?;
    print!("{}", report.table());
    if args.json {
        println!("{}", report.json());
    }
    if report.lost > 0 {
        let by = &report.lost_by_reason;
        eprintln!(
            "FAILED: {} leases were lost under renewal{} (refused {}, expired {}, node errors {}{})",
            report.lost,
            if args.stall.is_some() { " with --stall" } else { "" },
            by.refused,
            by.expired,
            by.node_errors,
            if by.other > 0 { format!(", other {}", by.other) } else { String::new() }
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The testkit panics without redis-server; say what to do instead.
fn check_redis_server() -> Result<(), BenchError> {
    match std::process::Command::new("redis-server")
        .arg("--version")
        .output()
    {
        Ok(out) if out.status.success() => Ok(()),
        _ => Err(
            "redis-server is not on PATH: install it (apt-get install redis-server) \
                  or pass --urls to use running nodes"
                .into(),
        ),
    }
}

fn run(plan: Plan) -> Result<ExitCode, BenchError> {
    if plan.urls.is_empty() {
        check_redis_server()?;
    }
    let runtime = runtime(plan.threads)?;
    print_header(&plan);
    // Unique per process, so keys never meet those of another or earlier run.
    let run_id = format!(
        "{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    );
    // With --cluster, the only node: started once, stopped at the end.
    let cluster = plan.cluster.map(RedisCluster::start);
    let mut reports = Vec::new();
    for &n in &plan.node_counts {
        // Our own redis-server processes unless --urls; stopped at the end
        // of this iteration. Each server process's own URL too, for its
        // counters (every process of a cluster).
        let (_nodes, urls, server_urls, pids) = if let Some(cluster) = &cluster {
            // Server CPU is every cluster process's, summed.
            let pids: Vec<u32> = cluster.iter().filter_map(RedisNode::pid).collect();
            if pids.len() != cluster.len() {
                return Err("--cluster: a redis-server node of the cluster is not running".into());
            }
            (None, vec![cluster.cluster_url()], cluster.urls(), pids)
        } else if plan.urls.is_empty() {
            let nodes = RedisNodes::start(n);
            let urls = nodes.urls();
            let pids: Vec<u32> = nodes.iter().filter_map(|node| node.pid()).collect();
            (Some(nodes), urls.clone(), urls, pids)
        } else {
            (None, plan.urls.clone(), plan.urls.clone(), Vec::new())
        };
        for &workload in &plan.workloads {
            let workers = if workload.single_worker() {
                1
            } else {
                plan.workers.unwrap_or(workload.default_workers())
            };
            let tag = format!("bench-{run_id}-{workload}-{n}");
            let report = runtime.block_on(runner::measure(
                &plan.settings,
                workload,
                &urls,
                runner::Servers {
                    pids: &pids,
                    urls: &server_urls,
                },
                workers,
                plan.cluster,
                &tag,
            ))?;
            eprintln!(
                "done: {workload} on {}, {workers} worker(s): redlease {:.0}/s{}{}{}{}{}",
                report.deployment(),
                report.lib.cycles_per_s,
                report
                    .lib
                    .read_write
                    .as_ref()
                    .map(|rw| format!(
                        " ({:.0} reads/s, {:.0} writes/s)",
                        rw.reads_per_s, rw.writes_per_s
                    ))
                    .unwrap_or_default(),
                report
                    .lib
                    .permits
                    .as_ref()
                    .map(|p| format!(
                        " ({} permits, at most {} held at once)",
                        p.permits, p.holders.peak
                    ))
                    .unwrap_or_default(),
                report
                    .nested
                    .as_ref()
                    .map(|nested| format!(
                        " with lock_all{}, nested {:.0}/s{}",
                        round_trips(&report.lib),
                        nested.cycles_per_s,
                        round_trips(nested)
                    ))
                    .unwrap_or_default(),
                report
                    .raw
                    .as_ref()
                    .zip(report.ratio_vs_raw())
                    .map(|(raw, x)| format!(", raw {:.0}/s (x{x:.3})", raw.cycles_per_s))
                    .unwrap_or_default(),
                report
                    .rslock
                    .as_ref()
                    .map(|r| format!(", rslock {:.0}/s", r.cycles_per_s))
                    .unwrap_or_default()
            );
            reports.push(report);
        }
    }
    println!();
    print!("{}", report::table(&reports));
    // Only the header when no workload run has a target (read-mostly,
    // semaphore).
    let targets = report::targets(&reports);
    if targets.len() > 1 {
        println!();
        for line in targets {
            println!("{line}");
        }
    }
    if plan.json {
        for r in &reports {
            println!("{}", r.json());
        }
    }
    let violations: Vec<String> = reports
        .iter()
        .flat_map(|r| r.runs().filter_map(|run| run.violation()))
        .collect();
    if violations.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        for v in &violations {
            eprintln!("FAILED (mutual exclusion): {v}");
        }
        Ok(ExitCode::FAILURE)
    }
}

/// " (R round trips per cycle and node)" of a multi run whose servers'
/// counters were read, else nothing.
fn round_trips(run: &report::ClientRun) -> String {
    run.multi
        .as_ref()
        .and_then(|m| m.served.as_ref())
        .map(|s| format!(" ({:.2} round trips per cycle and node)", s.round_trips))
        .unwrap_or_default()
}

/// A current-thread runtime for 0 threads, else a multi-thread one.
fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    match threads {
        0 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(n);
            builder
        }
    }
    .enable_all()
    .build()
}

fn print_header(plan: &Plan) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into());
    let runtime = match plan.threads {
        0 => "tokio current-thread runtime".to_string(),
        n => format!("tokio multi-thread runtime with {n} workers"),
    };
    println!("redlease-bench: {cores} cores, load {load} (1 min), {runtime}");
    println!(
        "every lock: TTL {TTL:?}; per client and workload: {:?} warm-up, then {} round(s) of {:?} \
         interleaved with the other clients; nodes: {}",
        plan.settings.warmup,
        plan.settings.rounds,
        plan.settings.slice,
        if let Some(k) = plan.cluster {
            format!(
                "one node, a Redis Cluster of {k} primaries without replicas (own redis-server \
                 processes, testkit), given as its redis+cluster:// URL"
            )
        } else if plan.urls.is_empty() {
            "own redis-server processes (testkit)".to_string()
        } else {
            plan.urls
                .iter()
                .map(|u| redlease::redact_url(u))
                .collect::<Vec<_>>()
                .join(",")
        }
    );
    println!(
        "blocking acquire: redlease {:?}; raw and plain: the same delays ({RETRY_MIN:?}-{RETRY_MAX:?} uniform) \
         within {WAIT:?}{}",
        Redlease::policy(),
        if plan.settings.rslock {
            format!(
                "; rslock: set_retry(u32::MAX, {RETRY_MAX:?}) (0-4 ms uniform), bounded by {WAIT:?}"
            )
        } else {
            String::new()
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_default_to_quarter_seconds_and_seconds_may_be_fractional() {
        let checked = plan(Args::parse_from([
            "bench",
            "--seconds",
            "1.5",
            "--nodes",
            "1,5",
        ]))
        .unwrap();
        assert_eq!(checked.settings.rounds, 6);
        assert_eq!(checked.settings.slice, Duration::from_millis(250));
        assert_eq!(checked.node_counts, vec![1, 5]);
        assert!(plan(Args::parse_from(["bench", "--seconds", "0"])).is_err());
    }

    #[test]
    fn all_runs_the_semaphore_too_with_16_workers_by_default() {
        let all = plan(Args::parse_from(["bench"])).unwrap();
        assert_eq!(all.workloads, Workload::ALL.to_vec());
        assert!(all.workloads.contains(&Workload::Semaphore));
        let one = plan(Args::parse_from(["bench", "--workload", "semaphore"])).unwrap();
        assert_eq!(one.workloads, vec![Workload::Semaphore]);
        assert_eq!(one.workers, None);
        assert_eq!(Workload::Semaphore.default_workers(), 16);
        assert!(!Workload::Semaphore.has_peers());
    }

    #[test]
    fn all_runs_multi_too_with_one_worker_whatever_workers_says() {
        let all = plan(Args::parse_from(["bench"])).unwrap();
        assert!(all.workloads.contains(&Workload::Multi));
        let one = plan(Args::parse_from([
            "bench",
            "--workload",
            "multi",
            "--workers",
            "8",
        ]))
        .unwrap();
        assert_eq!(one.workloads, vec![Workload::Multi]);
        assert!(Workload::Multi.single_worker());
        assert_eq!(Workload::Multi.default_workers(), 1);
        assert!(!Workload::Multi.has_peers());
        assert!(!Workload::Semaphore.single_worker());
    }

    #[test]
    fn cluster_is_one_node_and_refuses_other_nodes_before_starting_anything() {
        let bench = |extra: &[&str]| {
            let mut argv = vec!["bench"];
            argv.extend_from_slice(extra);
            Args::parse_from(argv)
        };
        for ok in [&["--cluster", "3"][..], &["--cluster", "3", "--nodes", "1"]] {
            let checked = plan(bench(ok)).unwrap();
            assert_eq!(checked.cluster, Some(3));
            assert_eq!(checked.node_counts, vec![1]);
        }
        if cfg!(feature = "rslock") {
            let checked = plan(bench(&["--cluster", "3", "--compare", "rslock"])).unwrap();
            assert!(!checked.settings.rslock, "rslock is skipped on a cluster");
        }
        for (bad, says) in [
            (
                &["--cluster", "3", "--urls", "redis://127.0.0.1:1"][..],
                "--urls",
            ),
            (&["--cluster", "3", "--nodes", "5"], "--nodes must be 1"),
            (&["--cluster", "3", "--nodes", "1,5"], "not 1,5"),
            (&["--cluster", "0"], "not in [1, 15]"),
            (&["--cluster", "16"], "not in [1, 15]"),
        ] {
            let err = plan(bench(bad)).err().unwrap();
            assert!(err.to_string().contains(says), "{bad:?}: {err}");
        }
        let err = run_renewal(&bench(&["--workload", "renewal", "--cluster", "3"])).unwrap_err();
        assert!(err.to_string().contains("renewal workload"), "{err}");
    }

    #[test]
    fn stall_is_checked_while_parsing_and_only_for_renewal_on_own_nodes() {
        let args =
            Args::try_parse_from(["bench", "--workload", "renewal", "--stall", "600ms/900ms"])
                .unwrap();
        assert_eq!(
            args.stall,
            Some(StallSpec {
                stopped: Duration::from_millis(600),
                period: Duration::from_millis(900)
            })
        );
        assert_eq!(args.stall_phase, None);
        let args = Args::try_parse_from([
            "bench",
            "--workload",
            "renewal",
            "--stall",
            "1s/1.5s",
            "--stall-phase",
            "same",
        ])
        .unwrap();
        assert_eq!(args.stall_phase, Some(StallPhase::Same));
        // Refused before any server starts.
        for bad in [
            &["bench", "--workload", "renewal", "--stall", "900ms/600ms"][..],
            &["bench", "--workload", "renewal", "--stall", "600ms"],
            &["bench", "--workload", "renewal", "--stall", "1m/2m"],
            &["bench", "--workload", "renewal", "--stall-phase", "same"],
            &[
                "bench",
                "--workload",
                "renewal",
                "--stall",
                "1s/2s",
                "--stall-phase",
                "odd",
            ],
        ] {
            assert!(Args::try_parse_from(bad).is_err(), "{bad:?}");
        }
        let err = run_renewal(&Args::parse_from([
            "bench",
            "--workload",
            "renewal",
            "--stall",
            "1s/2s",
            "--urls",
            "redis://127.0.0.1:1",
        ]))
        .unwrap_err();
        assert!(err.to_string().contains("--urls"), "{err}");
        let err = plan(Args::parse_from(["bench", "--stall", "1s/2s"]))
            .err()
            .unwrap();
        assert!(err.to_string().contains("renewal workload only"), "{err}");
    }
}
