//! `soak`: the fault-injection suite of redlease.
//!
//! Runs real `redis-server` processes on free loopback ports, clients that
//! take locks and run a critical section, and a seeded schedule of faults
//! (kills, pauses, link delays, blackholes, resets, buffered replies,
//! partitions, empty restarts, clock jumps); then checks the recorded
//! history for overlapping leases, expired leases handed out, lost updates,
//! fencing failures, leaked keys, untyped errors, unbounded calls, and
//! (where one server is listed twice) locks that were not refused.
//!
//! `rw-mixed` runs the mixed faults under read and write locks; the
//! read-write checker judges it too (a writer overlapping any lease, a
//! reader that saw an older write generation than a finished write's,
//! write tokens out of order, a writer starved by later readers).
//!
//! `sem-mixed` runs the mixed faults and empty restarts under a
//! semaphore's permits; the semaphore checker judges it too (more holders
//! at once than permits, tokens that do not go up, a permit returned
//! expired).
//!
//! `multi-mixed` runs the mixed faults under multi-locks: clients take 2
//! or 3 of 4 names at once (`lock_all`, `try_lock_all`) or one of them
//! (`lock`, `try_lock`); a multi-lease is recorded per name, and the
//! multi-lock checker judges it too (two holders of a name at once,
//! whichever call took them; tokens out of order per name; a lease
//! returned expired; a lease without every name asked for; a `lock_all`
//! starved by later single-name lockers), beside the lost updates and
//! fenced writes of every name.
//!
//! `engine-mixed` runs the mixed faults under every mode on shared names:
//! exclusive locks, readers and sets (`lock_all` with `and_read`) on 3
//! lock names, permits on a semaphore name of its own; every acquire call
//! is journaled (arrival, end, names, modes, weights, what it got), and
//! the engine checker judges it too: capacity per name (no writer beside
//! anyone, readers only together, permit weights within `N`), the order
//! in which waiters are served (no waiter overtaken by a later arrival,
//! faults that touch it excused), and starvation, for every mode.
//! `--modes LIST` (`write`, `read`, `permit`, `set`, comma-separated)
//! narrows the kinds drawn: `--modes write` is exclusive locks alone.
//!
//! `elections` runs the mixed faults under elections: campaigners lead 2
//! names in turn (`campaign`, `proclaim`, `resign` or a dropped
//! `Leadership`), watching `lost()`, while observers `observe()` both
//! names for the whole run; the elections checker judges it too (two
//! leads of a name at once, terms not rising in the order leads started,
//! an observer told terms or revisions out of order, or a leader no
//! campaigner held).
//!
//! ```text
//! cargo run --release -p redlease-soak -- --nodes 5 --seconds 120 [--seed N] [--scenario NAME] [--expect-violation] [--json]
//!     [--min-acquired N] [--min-faults N] [--no-durability | --durable-replicas N]
//!     [--no-quarantine | --restart-quarantine-ms N] [--no-clock-guard] [--loss PCT]
//!     [--modes LIST] [--verbose] [--list]
//! ```
//!
//! `--no-quarantine` and `--no-clock-guard` turn the library's guards
//! against restarted and clock-jumped servers off in the scenarios'
//! clients, to show what they buy (`empty-restart --no-quarantine` and
//! `clock-jump --no-clock-guard --no-quarantine` find overlaps);
//! `--restart-quarantine-ms N` sets the quarantine instead of the default.
//!
//! The deployment scenarios (`cluster-failover`, `sentinel-failover`) lock
//! through one replicated node (a Redis Cluster, a Sentinel-managed
//! primary) instead of `--nodes` independent ones, and fail it over.
//!
//! `--loss PCT` runs a scenario under real packet loss: the whole soak
//! (its servers, proxies and clients) runs in a network namespace of its
//! own (see the testkit's `netns`), where nftables drops PCT % of the TCP
//! packets to and from the lock nodes' ports, from before the clients
//! start until they are done. The data Redis, the protected resource, is
//! spared (a lost write there would be the resource's fault, not the
//! lock's). It needs root and `nft`; without them the run exits 2 with
//! the reason.
//!
//! Prints a summary and, last, one JSON line. Exit status: 0 when no
//! violation was found (with `--expect-violation`: when one was), 1 when
//! the opposite, 2 when the run could not be carried out. See GUARANTEES.md
//! for what the runs show.

mod checker;
mod controls;
mod deployment;
mod election_checker;
mod engine_checker;
mod examples;
mod failover_controls;
mod faults;
mod history;
mod inject;
mod multi_checker;
mod panics;
mod replicated;
mod report;
mod rig;
mod rw_checker;
mod scenarios;
mod sem_checker;
mod setup;
mod store;
mod watchdog;
mod workload;

use std::process::ExitCode;

use clap::Parser;
use redlease_testkit::netns::Netns;

use crate::workload::engine::Modes;

#[derive(Parser, Debug)]
#[command(
    name = "soak",
    about = "Fault-injection soak for redlease: faults real redis-server nodes mid-run and checks the history"
)]
struct Args {
    /// Lock nodes (1 = single instance; 5 = Redlock 3-of-5).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=9))]
    nodes: u16,
    /// Length of the workload (scenarios; the controls are scripted).
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=3600))]
    seconds: u64,
    /// Seed of the fault schedule and the workers' choices (random if not given).
    #[arg(long)]
    seed: Option<u64>,
    /// A scenario or negative control (see --list).
    #[arg(long, default_value = "mixed")]
    scenario: String,
    /// Succeed only if the checker finds a violation (for negative controls).
    #[arg(long)]
    expect_violation: bool,
    /// Fail unless at least this many leases were acquired (an election's
    /// leads count as leases; so a smoke run that degenerated cannot
    /// pass).
    #[arg(long, default_value_t = 0)]
    min_acquired: u64,
    /// Fail unless at least this many faults were applied.
    #[arg(long, default_value_t = 0)]
    min_faults: u64,
    /// Print only the JSON line.
    #[arg(long)]
    json: bool,
    /// Deployment scenarios only: clients without `WAIT` (durability off),
    /// to see what durability buys.
    #[arg(long, conflicts_with = "durable_replicas")]
    no_durability: bool,
    /// Deployment scenarios only: how many replicas must acknowledge each
    /// write of a lease (`Durability::required(N, 50 ms)`; default: every
    /// replica of a primary).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=8))]
    durable_replicas: Option<u32>,
    /// Scenarios and deployment scenarios only: clients with
    /// `restart_quarantine(Duration::ZERO)` (the quarantine off), to see
    /// what it buys.
    #[arg(long, conflicts_with = "restart_quarantine_ms")]
    no_quarantine: bool,
    /// Scenarios and deployment scenarios only: clients with
    /// `restart_quarantine(N ms)` instead of
    /// the default (the TTL plus drift; N must not be below that).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    restart_quarantine_ms: Option<u64>,
    /// Scenarios only: clients with `clock_jump_guard(false)`.
    #[arg(long)]
    no_clock_guard: bool,
    /// Scenarios only: real packet loss, PCT % of the TCP packets to and
    /// from the lock nodes (0.01 to 100), in a network namespace of the
    /// soak's own (root and nft needed).
    #[arg(long, value_name = "PCT", value_parser = parse_loss)]
    loss: Option<f64>,
    /// `engine-mixed` only: the kinds of acquisition drawn, comma-separated
    /// (`write`, `read`, `permit`, `set`; default all).
    #[arg(long, value_name = "LIST", value_parser = Modes::parse)]
    modes: Option<Modes>,
    /// Log each fault as it is applied (to stderr).
    #[arg(long)]
    verbose: bool,
    /// List the scenarios and controls, then exit.
    #[arg(long)]
    list: bool,
}

/// `--loss`: a percentage above 0, at most 100.
fn parse_loss(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(pct) if (0.01..=100.0).contains(&pct) => Ok(pct),
        _ => Err(format!("{text:?} is not a loss between 0.01 and 100 (%)")),
    }
}

fn list() {
    println!("scenarios:");
    for s in scenarios::SCENARIOS {
        println!("  {:<24} {}", s.name, s.about);
    }
    println!("deployment scenarios (one replicated node; --nodes does not apply):");
    for s in deployment::SCENARIOS {
        println!("  {:<24} {}", s.name, s.about);
    }
    println!("negative controls (the checker must flag them; use --expect-violation):");
    for (name, about) in controls::CONTROLS.iter().chain(failover_controls::CONTROLS) {
        println!("  {name:<32} {about}");
    }
    println!(
        "the same kills without a lagging replica (not flagged in practice: the replica \
         already has the key; see GUARANTEES.md):"
    );
    for (name, about) in failover_controls::PROBES {
        println!("  {name:<32} {about}");
    }
}

fn is_failover_control(name: &str) -> bool {
    failover_controls::CONTROLS
        .iter()
        .chain(failover_controls::PROBES)
        .any(|(n, _)| *n == name)
}

fn is_control(name: &str) -> bool {
    controls::CONTROLS.iter().any(|(n, _)| *n == name) || is_failover_control(name)
}

fn replay_command(args: &Args, seed: u64, nodes: usize) -> String {
    let mut cmd = format!(
        "cargo run --release -p redlease-soak -- --scenario {} --nodes {nodes} --seed {seed}",
        args.scenario
    );
    if scenarios::find(&args.scenario).is_some() || deployment::find(&args.scenario).is_some() {
        cmd.push_str(&format!(" --seconds {}", args.seconds));
    }
    if args.no_durability {
        cmd.push_str(" --no-durability");
    }
    if let Some(n) = args.durable_replicas {
        cmd.push_str(&format!(" --durable-replicas {n}"));
    }
    if args.no_quarantine {
        cmd.push_str(" --no-quarantine");
    }
    if let Some(ms) = args.restart_quarantine_ms {
        cmd.push_str(&format!(" --restart-quarantine-ms {ms}"));
    }
    if args.no_clock_guard {
        cmd.push_str(" --no-clock-guard");
    }
    if let Some(pct) = args.loss {
        cmd.push_str(&format!(" --loss {pct}"));
    }
    if let Some(modes) = args.modes {
        cmd.push_str(&format!(" --modes {}", modes.label()));
    }
    if args.expect_violation {
        cmd.push_str(" --expect-violation");
    }
    cmd
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.list {
        list();
        return ExitCode::SUCCESS;
    }
    if args.loss.is_some() && scenarios::find(&args.scenario).is_none() {
        eprintln!("--loss applies to the scenarios only");
        return ExitCode::from(2);
    }
    // The namespace first, on this thread: the runtime's threads, and the
    // servers and proxies started from them, are then all inside it.
    if let Err(e) = log_to_file() {
        eprintln!("soak: SOAK_LOG: {e}");
        return ExitCode::from(2);
    }
    let netns = match args.loss.map(|_| Netns::enter()).transpose() {
        Ok(netns) => netns,
        Err(e) => {
            eprintln!("soak: --loss: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("soak: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let loss = args
        .loss
        .zip(netns.as_ref())
        .map(|(percent, ns)| scenarios::Loss {
            percent,
            faults: ns.faults(),
        });
    let code = runtime.block_on(soak(args, loss));
    // The servers are gone before the thread leaves the namespace.
    drop(runtime);
    drop(netns);
    code
}

/// With `SOAK_LOG=FILE`, the library's debug events (and the soak's own)
/// go to FILE, each worker's inside a span naming it, timed from the
/// start of the process (the line `epoch` marks the run's zero): to see
/// why a replayed violation happened.
fn log_to_file() -> std::io::Result<()> {
    let Some(path) = std::env::var_os("SOAK_LOG") else {
        return Ok(());
    };
    let file = std::fs::File::create(path)?;
    let targets = tracing_subscriber::filter::Targets::new()
        .with_target("redlease", tracing::Level::DEBUG)
        .with_target("soak", tracing::Level::DEBUG);
    use tracing_subscriber::layer::{Layer, SubscriberExt};
    let subscriber = tracing_subscriber::registry().with(
        tracing_subscriber::fmt::layer()
            .with_writer(std::sync::Mutex::new(file))
            .with_ansi(false)
            .with_timer(tracing_subscriber::fmt::time::Uptime::default())
            .with_filter(targets),
    );
    tracing::subscriber::set_global_default(subscriber).map_err(std::io::Error::other)
}

async fn soak(args: Args, loss: Option<scenarios::Loss>) -> ExitCode {
    panics::install();
    let seed = args.seed.unwrap_or_else(rand::random);
    let nodes = usize::from(args.nodes);
    let is_control = is_control(&args.scenario);
    if (args.no_durability || args.durable_replicas.is_some())
        && deployment::find(&args.scenario).is_none()
    {
        eprintln!("--no-durability and --durable-replicas apply to the deployment scenarios only");
        return ExitCode::from(2);
    }
    if args.modes.is_some() && args.scenario != "engine-mixed" {
        eprintln!("--modes applies to engine-mixed only");
        return ExitCode::from(2);
    }
    if args.no_clock_guard && scenarios::find(&args.scenario).is_none() {
        eprintln!("--no-clock-guard applies to the scenarios only (the controls set their own)");
        return ExitCode::from(2);
    }
    if (args.no_quarantine || args.restart_quarantine_ms.is_some())
        && scenarios::find(&args.scenario).is_none()
        && deployment::find(&args.scenario).is_none()
    {
        eprintln!(
            "--no-quarantine and --restart-quarantine-ms apply to the scenarios and the \
             deployment scenarios only (the controls set their own)"
        );
        return ExitCode::from(2);
    }
    if !args.json {
        eprintln!(
            "soak: scenario {}, seed {seed} (replay with --seed {seed})",
            args.scenario
        );
    }
    let run = if let Some(scenario) = scenarios::find(&args.scenario) {
        let guards = scenarios::Guards {
            quarantine: if args.no_quarantine {
                Some(std::time::Duration::ZERO)
            } else {
                args.restart_quarantine_ms
                    .map(std::time::Duration::from_millis)
            },
            clock: !args.no_clock_guard,
        };
        scenarios::run(
            scenario,
            nodes,
            args.seconds,
            seed,
            guards,
            loss.as_ref(),
            args.modes,
            args.verbose,
        )
        .await
    } else if let Some(scenario) = deployment::find(&args.scenario) {
        let quarantine = if args.no_quarantine {
            Some(std::time::Duration::ZERO)
        } else {
            args.restart_quarantine_ms
                .map(std::time::Duration::from_millis)
        };
        deployment::run(
            scenario,
            args.seconds,
            seed,
            (!args.no_durability)
                .then(|| args.durable_replicas.unwrap_or(scenario.replicas))
                .filter(|&n| n > 0),
            quarantine,
            args.verbose,
        )
        .await
    } else if is_failover_control(&args.scenario) {
        failover_controls::run(&args.scenario, seed).await
    } else if is_control {
        controls::run(&args.scenario, nodes, seed).await
    } else {
        eprintln!("unknown scenario {:?}", args.scenario);
        list();
        return ExitCode::from(2);
    };
    let run = match run {
        Ok(run) => run,
        Err(e) => {
            eprintln!("soak: {e}");
            return ExitCode::from(2);
        }
    };
    let config = checker::Config {
        same_server: run.same_server,
        read_write: run.read_write.is_some(),
        semaphore: run.semaphore.is_some(),
        multi: run.multi.is_some(),
        engine: run.engine.is_some(),
        ..checker::Config::default()
    };
    let verdict = checker::check(&run.history, &run.state, &config);
    let rw = run
        .read_write
        .as_ref()
        .map(|rw| rw_checker::judge(&run.history, rw, &run.state.stalls));
    let sem = run
        .semaphore
        .as_ref()
        .map(|sem| sem_checker::judge(&run.history, sem, &run.state.stalls));
    let multi = run
        .multi
        .as_ref()
        .map(|multi| multi_checker::judge(&run.history, multi, &run.state.stalls));
    let engine = run
        .engine
        .as_ref()
        .map(|engine| engine_checker::judge(&run.history, engine, &run.state.stalls));
    let elections = run.elections.as_ref().map(election_checker::judge);
    let others = report::Others {
        rw: rw.as_ref(),
        sem: sem.as_ref(),
        multi: multi.as_ref(),
        engine: engine.as_ref(),
        elections: elections.as_ref(),
    };
    if !args.json {
        print!(
            "{}",
            report::summary(
                &run,
                &verdict,
                others,
                &replay_command(&args, seed, run.nodes)
            )
        );
    }
    let total = verdict.total()
        + rw.as_ref().map_or(0, |rw| rw.total())
        + sem.as_ref().map_or(0, |sem| sem.total())
        + multi.as_ref().map_or(0, |multi| multi.total())
        + engine.as_ref().map_or(0, |engine| engine.total())
        + elections.as_ref().map_or(0, |elections| elections.total());
    // A control that names the check it must trip (one of the read-write,
    // the semaphore, the multi-lock, the engine or the elections
    // checker's) passes only by that one.
    let flagged_by = run
        .read_write
        .as_ref()
        .and_then(|rw| rw.flagged_by)
        .or(run.semaphore.as_ref().and_then(|sem| sem.flagged_by))
        .or(run.multi.as_ref().and_then(|multi| multi.flagged_by))
        .or(run.engine.as_ref().and_then(|engine| engine.flagged_by))
        .or(run.elections.as_ref().and_then(|e| e.flagged_by));
    let found = match flagged_by {
        Some(name) => rw
            .iter()
            .flat_map(|rw| rw.counts())
            .chain(sem.iter().flat_map(|sem| sem.counts()))
            .chain(multi.iter().flat_map(|multi| multi.counts()))
            .chain(engine.iter().flat_map(|engine| engine.counts()))
            .chain(elections.iter().flat_map(|e| e.counts()))
            .any(|(n, count)| n == name && count > 0),
        None => total > 0,
    };
    let mut shortfall = Vec::new();
    if run.acquired() < args.min_acquired {
        shortfall.push(format!(
            "only {} acquisitions, --min-acquired {}",
            run.acquired(),
            args.min_acquired
        ));
    }
    let faults: u64 = run.faults.values().sum();
    if faults < args.min_faults {
        shortfall.push(format!(
            "only {faults} faults, --min-faults {}",
            args.min_faults
        ));
    }
    let ok = found == args.expect_violation && shortfall.is_empty();
    if !args.json {
        println!(
            "\nresult: {}",
            match (found, args.expect_violation) {
                _ if !shortfall.is_empty() && found == args.expect_violation => {
                    format!("FAIL: the run was too small: {}", shortfall.join("; "))
                }
                (false, false) => "PASS: no violation".to_string(),
                (true, true) => format!(
                    "PASS: the checker flagged this negative control ({total} violation(s){})",
                    flagged_by.map_or(String::new(), |name| format!(", {name} among them"))
                ),
                (true, false) => format!("FAIL: {total} violation(s)"),
                (false, true) => match flagged_by {
                    Some(name) => format!(
                        "FAIL: {name} was expected and not found ({total} other violation(s))"
                    ),
                    None => "FAIL: a violation was expected and none was found".to_string(),
                },
            }
        );
    }
    if args.json && !shortfall.is_empty() {
        eprintln!("soak: the run was too small: {}", shortfall.join("; "));
    }
    println!("{}", report::json(&run, &verdict, others));
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
