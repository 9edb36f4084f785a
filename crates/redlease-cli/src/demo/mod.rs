//! `redlease demo`: a newcomer's first minute. Five local redis-server
//! nodes, workers contending for one lock with a live view, two nodes
//! killed halfway, a summary, and every process cleaned up.

mod report;
mod servers;
mod worker;

use std::io::IsTerminal;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;

use crate::duration;
use crate::errors::chain;
use crate::exit::{self, Exit};
use crate::signals::Signals;
use report::{Progress, Summary};
use servers::Servers;
use worker::Shared;

const NODES: usize = 5;
/// Killed halfway: the most a quorum of 3 out of 5 survives.
const KILLED: [usize; 2] = [3, 4];
/// How long workers may take to notice the stop and let go.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Args, Debug)]
#[command(after_help = "\
Needs redis-server on PATH (Debian/Ubuntu: apt-get install -y redis-server), \
or REDLEASE_SERVER set to another server program, e.g. a valkey-server. Every server it starts listens on a free port on 127.0.0.1 and is stopped at \
the end, also on Ctrl-C.

Examples:
  redlease demo
  redlease demo --duration 5s --workers 4

Exit codes: 0 the lock held up (no lost update, no overlap, worked after the \
failure); 1 it did not; 69 redis-server is not installed; 128+N interrupted \
by signal N.")]
pub struct DemoArgs {
    /// How long the workers run; two of the five nodes are killed halfway.
    #[arg(long, value_name = "D", default_value = "20s", value_parser = parse_run_time)]
    duration: Duration,

    /// Workers contending for the lock, each with its own connections, as if
    /// each ran on its own machine.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u16).range(2..=64))]
    workers: u16,
}

fn parse_run_time(text: &str) -> Result<Duration, String> {
    let d = duration::parse(text)?;
    if d < Duration::from_secs(1) || d > Duration::from_secs(3600) {
        return Err(format!("{text:?} is not between 1s and 1h"));
    }
    Ok(d)
}

pub async fn demo(args: DemoArgs) -> Exit {
    // REDLEASE_SERVER, or redis-server, as the tests use.
    let program = servers::program();
    let server = Path::new(&program).file_name().map_or_else(
        || program.clone(),
        |name| name.to_string_lossy().into_owned(),
    );
    if !findable(&program) {
        return Exit::with(
            exit::UNAVAILABLE,
            format!(
                "the demo needs {program}, which is not {}; install redis-server with \
                 `apt-get install -y redis-server` (Debian/Ubuntu), or set REDLEASE_SERVER to \
                 another server program, and run it again",
                if program.contains('/') {
                    "an executable file"
                } else {
                    "on PATH"
                }
            ),
        );
    }
    // Caught from here on, so Ctrl-C still stops every server we start.
    let mut signals = match Signals::install_or_exit() {
        Ok(s) => s,
        Err(exit) => return exit,
    };
    let workers = usize::from(args.workers);
    println!(
        "redlease demo: {workers} workers take turns on one lock, held by a quorum of \
         {} of {NODES} local Redis nodes.",
        NODES / 2 + 1
    );
    println!(
        "Inside the lock each worker reads a shared counter, waits 1 ms, and writes it back \
         plus one:\nwithout mutual exclusion, increments would be lost. Halfway, {} of the \
         {NODES} nodes are killed.",
        KILLED.len()
    );

    let mut nodes = match Servers::start(&program, NODES).await {
        Ok(nodes) => nodes,
        Err(e) => {
            return Exit::with(
                exit::INTERNAL,
                format!("could not start {server}: {}", chain(&e)),
            );
        }
    };
    let urls = nodes.urls();
    let ports: Vec<String> = nodes.ports().iter().map(u16::to_string).collect();
    println!(
        "Started {NODES} {server} processes on 127.0.0.1, ports {}.\n",
        ports.join(", ")
    );

    let shared = Arc::new(Shared::default());
    let handles: Vec<_> = (0..workers)
        .map(|id| tokio::spawn(worker::run(id, urls.clone(), shared.clone())))
        .collect();

    let tty = std::io::stdout().is_terminal();
    let started = Instant::now();
    let mut progress = Progress::new(tty, started);
    let tick = if tty {
        Duration::from_millis(250)
    } else {
        Duration::from_secs(1)
    };
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + tick, tick);
    let halfway = tokio::time::Instant::now() + args.duration / 2;
    let end = tokio::time::Instant::now() + args.duration;
    let mut killed = 0;
    let mut interrupted = None;
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                let counter = shared.counter.load(Ordering::SeqCst);
                progress.tick(&shared.record(), NODES - killed, NODES, counter);
            }
            () = tokio::time::sleep_until(halfway), if killed == 0 => {
                for i in KILLED {
                    nodes.kill(i);
                }
                killed = KILLED.len();
                {
                    let mut record = shared.record();
                    record.failure_at = Some(Instant::now());
                    record.latencies_before_failure = Some(record.latencies_us.len());
                }
                let gone: Vec<String> = KILLED.iter().map(|&i| format!("node {i} (port {})", ports[i])).collect();
                progress.event(&format!(
                    "killed {} with SIGKILL: {} of {NODES} nodes left, quorum {}",
                    gone.join(" and "),
                    NODES - killed,
                    NODES / 2 + 1
                ));
            }
            () = tokio::time::sleep_until(end) => break,
            sig = signals.recv() => {
                interrupted = Some(sig);
                break;
            }
        }
    }
    let elapsed = started.elapsed();
    shared.stop.store(true, Ordering::SeqCst);
    let stopping = async {
        for handle in handles {
            let _ = handle.await;
        }
    };
    if tokio::time::timeout(STOP_TIMEOUT, stopping).await.is_err() {
        progress.event("some workers did not stop in time; abandoning them");
    }
    progress.close();

    let summary = Summary {
        elapsed,
        workers,
        nodes: NODES,
        quorum: NODES / 2 + 1,
        killed,
        counter: shared.counter.load(Ordering::SeqCst),
        record: shared.record().clone(),
    };
    println!("\n{}", summary.render());
    let running = nodes.running();
    drop(nodes);
    println!("Cleaned up: stopped the {running} {server} processes still running.");

    if let Some(sig) = interrupted {
        return Exit::with(exit::signal_code(sig.as_raw()), "demo interrupted");
    }
    if summary.passed() {
        Exit::code(exit::OK)
    } else {
        Exit::with(exit::CONFLICT, "the demo's checks failed (see the summary)")
    }
}

/// Whether `program` (a path, or a name looked up on PATH) would be found,
/// checked first to say how to install it.
fn findable(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |candidate: &Path| {
        candidate
            .metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        return executable(Path::new(program));
    }
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| executable(&Path::new(&dir).join(program)))
}
