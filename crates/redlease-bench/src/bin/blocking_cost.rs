//! blocking_cost: the uncontended lock cycle (lock and release of a free
//! lock, one client, one redis-server) through `redlease::blocking`
//! against the async API, in one run.
//!
//! ```text
//! cargo run --release -p redlease-bench --bin blocking_cost -- --cycles 5000 --rounds 5
//! ```
//!
//! Three clients, each with its own Locker on the same server, take turns
//! in every round (in a rotating order, so that none always runs first):
//!
//! - `async-current`: the async API in a current-thread runtime's
//!   `block_on`, the leanest async program;
//! - `async-multi`: the async API in a task of a 2-worker runtime, as in
//!   a service;
//! - `blocking`: `redlease::blocking` called from the main thread, which
//!   blocks on each call while the Locker's own 2 threads drive the I/O.
//!
//! It prints, per client, the median over the rounds of the wall time and
//! the process's CPU time per cycle, and each one's ratio to
//! `async-multi`'s.

use std::time::{Duration, Instant};

use clap::Parser;
use redlease_testkit::RedisNodes;

#[derive(Parser, Debug)]
#[command(about = "Uncontended lock cycles: the blocking facade against the async API")]
struct Args {
    /// Cycles per client and round (after 200 unmeasured ones per client).
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    cycles: u64,
    /// Rounds; the medians are over them.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=100))]
    rounds: u64,
    /// Instead: this many threads at once on the blocking facade, each
    /// taking and giving back names of its own (its throughput with the
    /// facade's threads shared by many callers).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    threads: Option<u64>,
    /// Every Locker with the express connection on
    /// (`Advanced::express_connection(true)`).
    #[arg(long)]
    express: bool,
}

const WARM_UP: u64 = 200;
const CLIENTS: [&str; 3] = ["async-current", "async-multi", "blocking"];

/// CPU time used so far by this process: all its threads, those that
/// ended included (`--threads` starts and ends its callers every round).
fn process_cpu() -> Duration {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// Runs `cycles` cycles and returns (wall, CPU) per cycle in µs.
fn measure(
    cycles: u64,
    run: impl FnOnce(u64) -> Result<(), redlease::Error>,
) -> Result<(f64, f64), redlease::Error> {
    let (cpu, wall) = (process_cpu(), Instant::now());
    run(cycles)?;
    let per_cycle = |d: Duration| d.as_secs_f64() * 1e6 / cycles as f64;
    Ok((per_cycle(wall.elapsed()), per_cycle(process_cpu() - cpu)))
}

/// `threads` threads on `blocking` at once, `cycles` each per round: the
/// median over the rounds of the cycles per second, and of the CPU per
/// cycle.
fn many_threads(
    blocking: &redlease::blocking::Locker,
    threads: u64,
    cycles: u64,
    rounds: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut rates = Vec::new();
    let mut cpus = Vec::new();
    for round in 0..=rounds {
        let (cpu, wall) = (process_cpu(), Instant::now());
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    scope.spawn(move || -> Result<(), redlease::Error> {
                        let name = format!("cost:thread-{t}");
                        for _ in 0..cycles {
                            blocking.lock(&name)?.release()?;
                        }
                        Ok(())
                    })
                })
                .collect();
            workers
                .into_iter()
                .try_for_each(|w| w.join().expect("no panic"))
        })?;
        let total = (threads * cycles) as f64;
        // Round 0 warms up.
        if round > 0 {
            rates.push(total / wall.elapsed().as_secs_f64());
            cpus.push((process_cpu() - cpu).as_secs_f64() * 1e6 / total);
        }
    }
    println!(
        "blocking facade, {threads} threads on names of their own, 1 node, {cycles} cycles per \
         thread x {rounds} rounds (medians): {:.0} cycles/s, {:.1} cpu us/cycle",
        median(rates),
        median(cpus)
    );
    blocking.close()?;
    Ok(())
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let nodes = RedisNodes::start(1);
    let builder = || {
        redlease::Locker::builder(nodes.urls())
            // A brand-new server: nothing to wait out.
            .advanced(|a| {
                a.restart_quarantine(Duration::ZERO)
                    .express_connection(args.express)
            })
    };
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let on_current = current.block_on(async { builder().build() })?;
    let on_multi = multi.block_on(async { builder().build() })?;
    let blocking = redlease::blocking::LockerBuilder::from(builder()).build()?;
    if let Some(threads) = args.threads {
        return many_threads(&blocking, threads, args.cycles, args.rounds);
    }

    let async_current = |n: u64| {
        current.block_on(async {
            for _ in 0..n {
                on_current.lock("cost:current").await?.release().await?;
            }
            Ok(())
        })
    };
    let async_multi = |n: u64| {
        let locker = on_multi.clone();
        multi
            .block_on(multi.spawn(async move {
                for _ in 0..n {
                    locker.lock("cost:multi").await?.release().await?;
                }
                Ok(())
            }))
            .expect("the task ran to its end")
    };
    let facade = |n: u64| {
        for _ in 0..n {
            blocking.lock("cost:blocking")?.release()?;
        }
        Ok(())
    };
    let run = |client: usize, n: u64| match client {
        0 => measure(n, async_current),
        1 => measure(n, async_multi),
        _ => measure(n, facade),
    };

    for client in 0..CLIENTS.len() {
        run(client, WARM_UP)?;
    }
    let mut figures = vec![(Vec::new(), Vec::new()); CLIENTS.len()];
    for round in 0..args.rounds as usize {
        for turn in 0..CLIENTS.len() {
            let client = (round + turn) % CLIENTS.len();
            let (wall, cpu) = run(client, args.cycles)?;
            figures[client].0.push(wall);
            figures[client].1.push(cpu);
        }
    }
    let medians: Vec<(f64, f64)> = figures
        .into_iter()
        .map(|(wall, cpu)| (median(wall), median(cpu)))
        .collect();
    let (base_wall, base_cpu) = medians[1];
    println!(
        "uncontended lock+release, 1 node, {} cycles x {} rounds (medians)",
        args.cycles, args.rounds
    );
    println!(
        "{:<14} {:>12} {:>12} {:>10} {:>10}",
        "client", "wall us/cyc", "cpu us/cyc", "wall x", "cpu x"
    );
    for (name, (wall, cpu)) in CLIENTS.iter().zip(&medians) {
        println!(
            "{name:<14} {wall:>12.1} {cpu:>12.1} {:>10.3} {:>10.3}",
            wall / base_wall,
            cpu / base_cpu
        );
    }
    current.block_on(on_current.close());
    multi.block_on(on_multi.close());
    blocking.close()?;
    Ok(())
}
