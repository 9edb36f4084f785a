//! waiter_load: what waiting costs the Redis nodes. One holder keeps a lock
//! alive; many waiters queue for it. Reports the commands per second the
//! nodes process while nothing changes hands (the waiters' cost, with the
//! holder's renewals listed apart), then hands the lock from waiter to
//! waiter until the queue is drained and reports, for the handoffs, the
//! commands the nodes processed per handoff, how long each took, and the
//! order the waiters were served in against the order they arrived in
//! (they start `--stagger-ms` apart): the share of pairs served the
//! other way round.
//!
//! ```text
//! cargo run --release -p redlease-bench --bin waiter_load -- --waiters 100 --seconds 20
//! ```
//!
//! `--mode lockers` gives each waiter a Locker of its own, as separate
//! processes would have (a subscription each, no shared queue); `--mode
//! tasks` runs them as tasks of one Locker.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use redlease::{Locker, RetryPolicy};
use redlease_testkit::RedisNodes;

#[derive(Parser, Debug)]
#[command(about = "Redis commands per second caused by waiters on one held lock")]
struct Args {
    /// How many waiters queue for the held lock.
    #[arg(long, default_value_t = 100)]
    waiters: usize,
    /// How many redis-server nodes to start.
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// The holder's TTL (renewed every third of it), in seconds.
    #[arg(long, default_value_t = 10.0)]
    ttl: f64,
    /// Measured seconds while the holder keeps the lock.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Separate Lockers (like processes) or tasks of one Locker; both by
    /// default.
    #[arg(long, value_enum)]
    mode: Option<Mode>,
    /// How many handoffs to time after the measurement (each waiter holds
    /// the lock 20 ms, then releases it to the next) [default: every
    /// waiter's].
    #[arg(long)]
    handoffs: Option<usize>,
    /// Milliseconds between the waiters' arrivals.
    #[arg(long, default_value_t = 40)]
    stagger_ms: u64,
    /// Also print one JSON line per mode with the figures.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    Lockers,
    Tasks,
}

type BenchError = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), BenchError> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let modes = match args.mode {
        Some(mode) => vec![mode],
        None => vec![Mode::Lockers, Mode::Tasks],
    };
    for mode in modes {
        let nodes = RedisNodes::start(args.nodes);
        runtime.block_on(measure(&args, mode, &nodes.urls()))?;
    }
    Ok(())
}

fn builder(urls: &[String], ttl: Duration) -> redlease::LockerBuilder {
    Locker::builder(urls)
        .ttl(ttl)
        // Brand-new servers: nothing to quarantine.
        .advanced(|a| a.restart_quarantine(Duration::ZERO))
        .retry(RetryPolicy::forever())
}

async fn measure(args: &Args, mode: Mode, urls: &[String]) -> Result<(), BenchError> {
    let ttl = Duration::from_secs_f64(args.ttl);
    let name = "waited-for";
    let holder = builder(urls, ttl).build()?;
    let lease = holder.lock(name).keep_alive().await?;
    let shared = match mode {
        Mode::Tasks => Some(builder(urls, ttl).build()?),
        Mode::Lockers => None,
    };
    // Handoff bookkeeping: when the lock was last given back, how long
    // each waiter took to get it after that, and who got it in turn.
    let released_at: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::new(Mutex::new(Vec::new()));
    let served: Arc<Mutex<Vec<usize>>> = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for arrival in 0..args.waiters {
        let locker = match &shared {
            Some(locker) => locker.clone(),
            None => builder(urls, ttl).build()?,
        };
        let (released_at, latencies, served) =
            (released_at.clone(), latencies.clone(), served.clone());
        waiters.push(tokio::spawn(async move {
            let lease = locker.lock(name).await?;
            if let Some(at) = *released_at.lock().unwrap() {
                latencies.lock().unwrap().push(at.elapsed());
            }
            served.lock().unwrap().push(arrival);
            tokio::time::sleep(Duration::from_millis(20)).await;
            *released_at.lock().unwrap() = Some(Instant::now());
            lease.release().await?;
            Ok::<_, BenchError>(())
        }));
        // In arrival order, each after the one before has asked.
        tokio::time::sleep(Duration::from_millis(args.stagger_ms)).await;
    }
    // Let every waiter make its first attempt and subscribe.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let before = stats(urls).await?;
    let renewals_before = holder.admin().renewal_stats();
    let window = Duration::from_secs_f64(args.seconds);
    tokio::time::sleep(window).await;
    let after = stats(urls).await?;
    let renewals = holder.admin().renewal_stats().round_trips - renewals_before.round_trips;
    let total: u64 = after.total - before.total;
    let secs = window.as_secs_f64();
    println!(
        "mode={mode:?} waiters={} nodes={} ttl={}s window={secs}s",
        args.waiters, args.nodes, args.ttl
    );
    println!(
        "  commands processed: {total} ({:.1}/s over all nodes); holder's renewal round trips: {renewals}",
        total as f64 / secs
    );
    let mut by_command: Vec<(String, u64)> = after
        .calls
        .iter()
        .map(|(cmd, n)| (cmd.clone(), n - before.calls.get(cmd).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    by_command.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    for (cmd, n) in by_command {
        println!("    {cmd:<24} {n:>8} ({:.2}/s)", n as f64 / secs);
    }

    // Handoffs: the holder lets go, and each waiter passes the lock on.
    let handoffs = args.handoffs.unwrap_or(args.waiters).min(args.waiters);
    let before_handoffs = stats(urls).await?;
    *released_at.lock().unwrap() = Some(Instant::now());
    lease.release().await?;
    // Until enough handoffs were timed (or a minute passed), then stop the
    // waiters still queued.
    let limit = Instant::now() + Duration::from_secs(60);
    while latencies.lock().unwrap().len() < handoffs && Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The last waiter's release is part of its handoff's cost.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after_handoffs = stats(urls).await?;
    for waiter in &waiters {
        waiter.abort();
    }
    for waiter in waiters {
        if let Ok(result) = waiter.await {
            result?;
        }
    }
    let mut lat = latencies.lock().unwrap().clone();
    let order = served.lock().unwrap().clone();
    let timed = lat.len();
    let per_handoff = match timed {
        0 => 0.0,
        n => (after_handoffs.total - before_handoffs.total) as f64 / n as f64,
    };
    let (inverted, pairs) = inversions(&order);
    let share = match pairs {
        0 => 0.0,
        p => inverted as f64 / p as f64,
    };
    lat.sort();
    let pick = |q: f64| match lat.is_empty() {
        true => 0.0,
        false => lat[((lat.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e3,
    };
    println!(
        "  handoffs: {timed} timed; {per_handoff:.1} commands per handoff over all nodes; \
         latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        pick(0.5),
        pick(0.99),
        pick(1.0)
    );
    let mut by_command: Vec<(String, f64)> = after_handoffs
        .calls
        .iter()
        .map(|(cmd, n)| {
            let was = before_handoffs.calls.get(cmd).copied().unwrap_or(0);
            (cmd.clone(), (n - was) as f64 / timed.max(1) as f64)
        })
        .filter(|(_, n)| *n > 0.0)
        .collect();
    by_command.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (cmd, n) in &by_command {
        println!("    {cmd:<24} {n:>8.2} per handoff");
    }
    let shown: Vec<String> = order.iter().map(|i| (i + 1).to_string()).collect();
    println!(
        "  served (by arrival, 1 first): {}; {inverted} of {pairs} pairs out of arrival order ({:.1}%)",
        shown.join(" "),
        share * 100.0
    );
    if args.json {
        let line = serde_json::json!({
            "mode": format!("{mode:?}").to_lowercase(),
            "waiters": args.waiters,
            "nodes": args.nodes,
            "stagger_ms": args.stagger_ms,
            "waiting_commands_per_s": total as f64 / secs,
            "handoffs": timed,
            "commands_per_handoff": per_handoff,
            "handoff_p50_ms": pick(0.5),
            "handoff_p99_ms": pick(0.99),
            "inverted_pairs": inverted,
            "pairs": pairs,
            "inverted_share": share,
        });
        println!("{line}");
    }
    Ok(())
}

/// Pairs of `order` (arrival indices in the order served) served the other
/// way round from their arrival, and all pairs.
fn inversions(order: &[usize]) -> (usize, usize) {
    let n = order.len();
    let mut inverted = 0;
    for i in 0..n {
        for j in i + 1..n {
            if order[i] > order[j] {
                inverted += 1;
            }
        }
    }
    (inverted, n * n.saturating_sub(1) / 2)
}

/// Commands processed so far, over all nodes: the total, and calls per
/// command (a script's inner commands included, as Redis counts them).
struct Stats {
    total: u64,
    calls: BTreeMap<String, u64>,
}

async fn stats(urls: &[String]) -> Result<Stats, BenchError> {
    let mut out = Stats {
        total: 0,
        calls: BTreeMap::new(),
    };
    for url in urls {
        let client = redis::Client::open(url.as_str())?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await?;
        for line in info.lines() {
            // cmdstat_evalsha:calls=12,usec=...
            let Some(rest) = line.strip_prefix("cmdstat_") else {
                continue;
            };
            let Some((cmd, fields)) = rest.split_once(':') else {
                continue;
            };
            let calls = fields
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
            *out.calls.entry(cmd.to_string()).or_default() += calls;
        }
        let stats: String = redis::cmd("INFO")
            .arg("stats")
            .query_async(&mut conn)
            .await?;
        out.total += stats
            .lines()
            .find_map(|l| l.strip_prefix("total_commands_processed:"))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    Ok(out)
}
