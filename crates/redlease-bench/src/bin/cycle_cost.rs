//! cycle_cost: a fixed number of uncontended lock cycles of one client
//! (acquire and release of a free lock) against its own redis-server, and
//! nothing else, for counting the client's CPU instructions per cycle
//! under callgrind. An instruction count, like `alloc_count`'s allocations,
//! does not depend on the machine's load, so it shows what a change to the
//! hot path saved even when timings are too noisy to.
//!
//! ```text
//! crates/redlease-bench/instructions-per-cycle redlease plain unguarded fenced
//! ```
//!
//! The script runs this binary twice per client under
//! `valgrind --tool=callgrind` (with `--cycles` N and N + 1000) and prints
//! the difference divided by 1000: the setup (runtime, connections, the
//! server's start) cancels out. Only this process is counted: the
//! redis-server child runs outside valgrind. A single-threaded runtime, so
//! the count has no thread hand-offs in it.

use std::time::Duration;

use clap::{Parser, ValueEnum};
use redlease::Locker;
use redlease_testkit::RedisNodes;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Client {
    /// The library with its defaults.
    Redlease,
    /// The library with the clock-jump guard off.
    Unguarded,
    /// The library with fencing tokens on.
    Fenced,
    /// Plain redis-rs, the leanest lock: `SET NX PX`, compare-and-delete.
    Plain,
}

#[derive(Parser, Debug)]
#[command(about = "Uncontended lock cycles of one client, for counting instructions per cycle")]
struct Args {
    #[arg(long, value_enum, default_value_t = Client::Redlease)]
    client: Client,
    /// Nodes of the library's quorum (plain always locks on the first).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=9))]
    nodes: u16,
    /// Cycles to run (after 100 unmeasured ones).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    cycles: u64,
    /// Worker threads of the runtime; 0 (the default) runs it on the main
    /// thread alone, with no hand-offs between threads (what callgrind
    /// counts). With 2, `perf stat` shows the hand-offs' cost: CPU time and
    /// context switches per cycle on a runtime like a service's.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=64))]
    threads: u16,
}

const COMPARE_AND_DELETE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
     return redis.call('DEL', KEYS[1]) else return 0 end";

const WARM_UP: u64 = 100;

/// CPU time used so far by this process's threads, from each one's
/// /proc schedstat (nanoseconds on the CPU). Not `clock_gettime`: rustix's
/// vDSO lookup crashes under valgrind.
fn process_cpu() -> Duration {
    let threads = std::fs::read_dir("/proc/self/task").into_iter().flatten();
    let nanos = threads
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|text| text.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(nanos)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let nodes = RedisNodes::start(usize::from(args.nodes));
    let url = nodes.urls()[0].clone();
    let runtime = match args.threads {
        0 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(usize::from(n));
            builder
        }
    }
    .enable_all()
    .build()?;
    runtime.block_on(async {
        let locker = Locker::builder(nodes.urls())
            // A brand-new server: nothing to wait out.
            .advanced(|a| {
                a.restart_quarantine(Duration::ZERO)
                    .clock_jump_guard(args.client != Client::Unguarded)
            })
            .fencing(args.client == Client::Fenced)
            // Generous: under callgrind everything runs tens of times slower.
            .node_timeout(Duration::from_secs(5))
            .build()?;
        let mut conn = redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        let script = redis::Script::new(COMPARE_AND_DELETE);
        let mut measured_from = None;
        for cycle in 0..WARM_UP + args.cycles {
            if cycle == WARM_UP {
                measured_from = Some((process_cpu(), std::time::Instant::now()));
            }
            if args.client == Client::Plain {
                let token = format!("{:032x}", rand::random::<u128>());
                let key = "plain:{cycle-cost}";
                let set: Option<String> = redis::cmd("SET")
                    .arg(key)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query_async(&mut conn)
                    .await?;
                let deleted: i64 = script.key(key).arg(&token).invoke_async(&mut conn).await?;
                if set.is_none() || deleted != 1 {
                    return Err("plain: the free lock was not taken and given back".into());
                }
            } else {
                let lease = locker.try_lock("cycle-cost").await?;
                lease.release().await?;
            }
        }
        if let Some((cpu, wall)) = measured_from {
            let per_cycle = |d: Duration| d.as_secs_f64() * 1e6 / args.cycles as f64;
            eprintln!(
                "{:?}: {:.1} us of this process's CPU and {:.1} us of wall time per cycle",
                args.client,
                per_cycle(process_cpu() - cpu),
                per_cycle(wall.elapsed()),
            );
        }
        locker.close().await;
        Ok::<(), Box<dyn std::error::Error>>(())
    })?;
    drop(nodes);
    Ok(())
}
