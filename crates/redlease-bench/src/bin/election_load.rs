//! election_load: how fast an election hands its lead on, and how soon a
//! watcher hears of a change.
//!
//! Handoff: `--campaigners` Lockers (as separate processes would be)
//! campaign for one election; each leader leads `--hold-ms`, then
//! resigns, and the next in line leads. Timed from the moment the
//! leader starts to resign to the moment the next one's campaign returns
//! (it leads, its value published on a quorum), and to the moment an
//! observer (a Locker of its own) is told the new leader.
//!
//! Watch: a holder takes a free lock, holds it `--hold-ms`, releases it,
//! again and again; a watcher (a Locker of its own) is timed from the
//! holder's release call to being told the name is free, and from the
//! holder's lock call to being told it is held.
//!
//! ```text
//! cargo run --release -p redlease-bench --bin election_load -- --nodes 1,5 --rounds 200
//! ```

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use redlease::{Locker, Verdict};
use redlease_testkit::RedisNodes;

#[derive(Parser, Debug)]
#[command(about = "Election handoff time and watch latency, on real redis-server nodes")]
struct Args {
    /// How many redis-server nodes to start (a comma-separated list runs
    /// each count in turn).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    nodes: Vec<usize>,
    /// Handoffs to time, and as many watched releases.
    #[arg(long, default_value_t = 200)]
    rounds: usize,
    /// Campaigners in the election.
    #[arg(long, default_value_t = 4)]
    campaigners: usize,
    /// How long each leader leads, and each holder holds, in ms.
    #[arg(long, default_value_t = 20)]
    hold_ms: u64,
    /// Also print one JSON line per node count with the figures.
    #[arg(long)]
    json: bool,
}

type BenchError = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), BenchError> {
    let args = Args::parse();
    if !(1..=100_000).contains(&args.rounds) || !(2..=64).contains(&args.campaigners) {
        return Err("--rounds must be in 1..=100000 and --campaigners in 2..=64".into());
    }
    if args.hold_ms > 60_000 || args.nodes.iter().any(|&n| !(1..=9).contains(&n)) {
        return Err("--hold-ms must be at most 60000 and each --nodes in 1..=9".into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    for &n in &args.nodes {
        let nodes = RedisNodes::start(n);
        let urls = nodes.urls();
        let handoff = runtime.block_on(handoffs(&args, &urls))?;
        let watch = runtime.block_on(watched(&args, &urls))?;
        report(&args, n, &handoff, &watch);
    }
    Ok(())
}

fn locker(urls: &[String], owner: &str) -> Result<Locker, BenchError> {
    Ok(Locker::builder(urls)
        .advanced(|a| a.restart_quarantine(Duration::ZERO)) // brand-new servers
        .ttl(Duration::from_secs(10))
        .owner(owner)
        .build()?)
}

/// Handoff times (to the next leader, to the observer), in µs.
struct Handoffs {
    to_leader: Vec<u64>,
    to_observer: Vec<u64>,
}

async fn handoffs(args: &Args, urls: &[String]) -> Result<Handoffs, BenchError> {
    // When the last leader began to resign.
    let resigned: Arc<Mutex<Option<Instant>>> = Arc::default();
    let to_leader: Arc<Mutex<Vec<u64>>> = Arc::default();
    let rounds = args.rounds;
    let hold = Duration::from_millis(args.hold_ms);
    let observer = locker(urls, "observer")?;
    let mut observe = observer.election("bench-election").observe();
    observe.next().await?; // nobody yet: subscribed from here on
                           // Each new leader the observer is told of, timed from the last
                           // resign (a leader told late, after the next resign began, is not
                           // timed; nor one whose change was told together with the next).
    let to_observer: Arc<Mutex<Vec<u64>>> = Arc::default();
    let observer_task = {
        let (resigned, out) = (resigned.clone(), to_observer.clone());
        tokio::spawn(async move {
            let mut last_term = 0;
            while let Ok(told) = observe.next().await {
                let Some(leader) = told else { continue };
                if leader.term == last_term {
                    continue;
                }
                last_term = leader.term;
                if let Some(at) = *resigned.lock().unwrap() {
                    out.lock().unwrap().push(at.elapsed().as_micros() as u64);
                }
            }
        })
    };
    let mut tasks = Vec::new();
    for c in 0..args.campaigners {
        let locker = locker(urls, &format!("campaigner-{c}"))?;
        let (resigned, to_leader) = (resigned.clone(), to_leader.clone());
        tasks.push(tokio::spawn(async move {
            let election = locker.election("bench-election");
            loop {
                if to_leader.lock().unwrap().len() >= rounds {
                    return Ok::<_, redlease::Error>(());
                }
                let lead = election
                    .campaign(format!("campaigner-{c}"))
                    .wait(Duration::from_secs(30))
                    .await?;
                let since = *resigned.lock().unwrap();
                if let Some(at) = since {
                    to_leader
                        .lock()
                        .unwrap()
                        .push(at.elapsed().as_micros() as u64);
                }
                tokio::time::sleep(hold).await;
                *resigned.lock().unwrap() = Some(Instant::now());
                lead.resign().await?;
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    // The last change's word on its way.
    tokio::time::sleep(Duration::from_millis(200)).await;
    observer_task.abort();
    let to_observer = std::mem::take(&mut *to_observer.lock().unwrap());
    let to_leader = std::mem::take(&mut *to_leader.lock().unwrap());
    Ok(Handoffs {
        to_leader,
        to_observer,
    })
}

/// Watch latencies (told free after a release, told held after a lock), µs.
struct Watched {
    released: Vec<u64>,
    taken: Vec<u64>,
}

async fn watched(args: &Args, urls: &[String]) -> Result<Watched, BenchError> {
    let holder = locker(urls, "holder")?;
    let watcher = locker(urls, "watcher")?;
    let mut watch = watcher.watch("bench-watched");
    watch.changed().await?; // free now: subscribed from here on
    let hold = Duration::from_millis(args.hold_ms);
    let (mut released, mut taken) = (Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        let locking = Instant::now();
        let lease = holder.lock("bench-watched").await?;
        let told = tokio::time::timeout(Duration::from_secs(10), watch.changed()).await??;
        if matches!(told.verdict(), Verdict::Held { .. }) {
            taken.push(locking.elapsed().as_micros() as u64);
        }
        tokio::time::sleep(hold).await;
        let releasing = Instant::now();
        lease.release().await?;
        loop {
            let told = tokio::time::timeout(Duration::from_secs(10), watch.changed()).await??;
            if matches!(told.verdict(), Verdict::Free { .. }) {
                released.push(releasing.elapsed().as_micros() as u64);
                break;
            }
        }
    }
    Ok(Watched { released, taken })
}

/// The `p`th percentile of `v` (sorted in place), µs.
fn pct(v: &mut [u64], p: f64) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let i = ((v.len() - 1) as f64 * p).round() as usize;
    Some(v[i])
}

fn report(args: &Args, nodes: usize, h: &Handoffs, w: &Watched) {
    let (mut a, mut b) = (h.to_leader.clone(), h.to_observer.clone());
    let (mut c, mut d) = (w.released.clone(), w.taken.clone());
    let ms = |x: Option<u64>| x.map_or("-".to_string(), |us| format!("{:.2}", us as f64 / 1000.0));
    println!(
        "{nodes} node(s), {} campaigners, leads and holds of {} ms:",
        args.campaigners, args.hold_ms
    );
    let rows: [(&str, &mut Vec<u64>); 4] = [
        ("resign -> next leader leads", &mut a),
        ("resign -> observer told", &mut b),
        ("release -> watcher told free", &mut c),
        ("lock -> watcher told held", &mut d),
    ];
    let mut figures = Vec::new();
    for (what, v) in rows {
        let (p50, p99) = (pct(v, 0.5), pct(v, 0.99));
        println!(
            "  {what:<30} {:>5} samples, p50 {} ms, p99 {} ms",
            v.len(),
            ms(p50),
            ms(p99)
        );
        figures.push((v.len(), p50, p99));
    }
    if args.json {
        let line = serde_json::json!({
            "bench": "election_load",
            "nodes": nodes,
            "campaigners": args.campaigners,
            "hold_ms": args.hold_ms,
            "handoffs": figures[0].0,
            "handoff_p50_us": figures[0].1,
            "handoff_p99_us": figures[0].2,
            "observed": figures[1].0,
            "observed_p50_us": figures[1].1,
            "observed_p99_us": figures[1].2,
            "watch_released": figures[2].0,
            "watch_released_p50_us": figures[2].1,
            "watch_released_p99_us": figures[2].2,
            "watch_taken": figures[3].0,
            "watch_taken_p50_us": figures[3].1,
            "watch_taken_p99_us": figures[3].2,
        });
        println!("{line}");
    }
}
