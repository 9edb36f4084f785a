//! alloc_count: heap allocations per lock cycle (acquire and release of a
//! free lock), for the library and for plain redis-rs doing the leanest
//! lock (`SET NX PX`, compare-and-delete script). Unlike time, the count
//! does not depend on the machine's load, so it shows what a change to the
//! hot path saved even when the timings are too noisy to.
//!
//! ```text
//! cargo run --release -p redlease-bench --bin alloc_count -- --cycles 2000
//! cargo run --release -p redlease-bench --bin alloc_count -- --kept-alive 10000 --nodes 5
//! ```
//!
//! With `--kept-alive N` it measures memory instead: the heap bytes still
//! in use per kept-alive lease (the `Lease` and everything the Locker
//! keeps for it) once N leases are held and renewed for two seconds,
//! counting neither the names nor the connections; then the blocks that
//! came with them, by size and per lease (a lease's own records; what is
//! left of the bytes is its share of the tables, in large blocks).
//!
//! One redis-server on a free port, a single-threaded runtime, cycles one
//! after another. Counts every allocation and reallocation the process
//! makes, redis-rs's included.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use clap::Parser;
use redlease::Locker;
use redlease_testkit::RedisNodes;

/// The system allocator, counting calls and bytes.
struct Counting;

static CALLS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
/// Bytes allocated and not yet freed.
static LIVE: AtomicU64 = AtomicU64::new(0);
/// Blocks allocated and not yet freed, by size in bytes (the last slot
/// counts every larger block): which records a kept-alive lease costs.
static LIVE_BY_SIZE: [AtomicI64; SIZES] = [const { AtomicI64::new(0) }; SIZES];
const SIZES: usize = 2049;

fn by_size(size: usize) -> &'static AtomicI64 {
    &LIVE_BY_SIZE[size.min(SIZES - 1)]
}

// SAFETY: every call is passed to the system allocator unchanged; the
// counters are plain atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        CALLS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        LIVE.fetch_add(layout.size() as u64, Ordering::Relaxed);
        by_size(layout.size()).fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        by_size(layout.size()).fetch_sub(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        CALLS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        LIVE.fetch_add(new_size as u64, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        by_size(layout.size()).fetch_sub(1, Ordering::Relaxed);
        by_size(new_size).fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[derive(Parser, Debug)]
#[command(about = "Heap allocations per uncontended lock cycle, library against plain redis-rs")]
struct Args {
    /// Measured cycles per client (after 200 unmeasured ones).
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    cycles: u64,
    /// Measure the memory of this many kept-alive leases instead.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    kept_alive: Option<u64>,
    /// Nodes of the quorum, with --kept-alive.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=9))]
    nodes: u16,
}

const COMPARE_AND_DELETE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
     return redis.call('DEL', KEYS[1]) else return 0 end";

const WARM_UP: u64 = 200;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if let Some(leases) = args.kept_alive {
        return kept_alive(leases, args.nodes);
    }
    let nodes = RedisNodes::start(1);
    let url = nodes.urls()[0].clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let build = |fencing: bool| {
            Locker::builder([url.as_str()])
                // A brand-new server: nothing to wait out.
                .advanced(|a| a.restart_quarantine(Duration::ZERO))
                .fencing(fencing)
                .build()
        };
        let (plain_locks, fenced) = (build(false)?, build(true)?);
        for (label, locker) in [("redlease", &plain_locks), ("redlease+fence", &fenced)] {
            let per = measure(args.cycles, || async {
                let lease = locker.try_lock("alloc-count").await?;
                lease.release().await?;
                Ok(())
            })
            .await?;
            report(label, per);
        }
        let conn = redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        let script = redis::Script::new(COMPARE_AND_DELETE);
        let per = measure(args.cycles, || {
            let (mut conn, script) = (conn.clone(), script.clone());
            async move {
                let token = format!("{:032x}", rand::random::<u128>());
                let key = "plain:{alloc-count}";
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
                Ok(())
            }
        })
        .await?;
        report("plain", per);
        plain_locks.close().await;
        fenced.close().await;
        Ok::<(), Box<dyn std::error::Error>>(())
    })?;
    drop(nodes);
    Ok(())
}

/// Runs `cycle` `WARM_UP` times, then `cycles` times counting: allocations
/// and bytes per cycle.
async fn measure<F, Fut>(cycles: u64, cycle: F) -> Result<(f64, f64), Box<dyn std::error::Error>>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), Box<dyn std::error::Error>>>,
{
    for _ in 0..WARM_UP {
        cycle().await?;
    }
    let (calls, bytes) = (CALLS.load(Ordering::Relaxed), BYTES.load(Ordering::Relaxed));
    for _ in 0..cycles {
        cycle().await?;
    }
    let calls = CALLS.load(Ordering::Relaxed) - calls;
    let bytes = BYTES.load(Ordering::Relaxed) - bytes;
    Ok((calls as f64 / cycles as f64, bytes as f64 / cycles as f64))
}

/// Heap bytes per kept-alive lease: `leases` leases on `nodes` nodes,
/// held and renewed (TTL 3 s, renewed every second) for two seconds.
fn kept_alive(leases: u64, nodes: u16) -> Result<(), Box<dyn std::error::Error>> {
    use futures_util::future::join_all;
    use std::future::IntoFuture;
    let servers = RedisNodes::start(usize::from(nodes));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let locker = Locker::builder(servers.urls())
            .advanced(|a| a.restart_quarantine(Duration::ZERO))
            .ttl(Duration::from_secs(3))
            .build()?;
        let names: Vec<String> = (0..leases).map(|i| format!("kept-{i}")).collect();
        // Connections and scripts first: they are the Locker's, not a
        // lease's.
        locker.lock("warm-up").await?.release().await?;
        let before = LIVE.load(Ordering::Relaxed);
        let blocks_before: Vec<i64> = LIVE_BY_SIZE
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .collect();
        let mut held = Vec::with_capacity(names.len());
        for chunk in names.chunks(1_000) {
            let taken = join_all(
                chunk
                    .iter()
                    .map(|name| locker.lock(name.as_str()).keep_alive().into_future()),
            )
            .await;
            for lease in taken {
                held.push(lease?);
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = LIVE.load(Ordering::Relaxed);
        let per = after.saturating_sub(before) as f64 / leases as f64;
        println!(
            "{leases} kept-alive leases on {nodes} node(s): {per:.0} bytes of heap per lease \
             ({})",
            lost_by_reason(&held)
        );
        // The blocks of each size that came with the leases, per lease
        // (sizes of at least a tenth of a block per lease).
        let mut sizes = Vec::new();
        for (size, (now, was)) in LIVE_BY_SIZE.iter().zip(&blocks_before).enumerate() {
            let per_lease = (now.load(Ordering::Relaxed) - was) as f64 / leases as f64;
            if per_lease >= 0.1 {
                let label = if size == SIZES - 1 {
                    format!(">={size}")
                } else {
                    size.to_string()
                };
                sizes.push(format!("{label} B x {per_lease:.2}"));
            }
        }
        println!("  live blocks per lease, by size: {}", sizes.join(", "));
        join_all(held.into_iter().map(|lease| lease.release())).await;
        locker.close().await;
        Ok::<(), Box<dyn std::error::Error>>(())
    })?;
    drop(servers);
    Ok(())
}

/// How many of `held` were lost, and why: "0 lost", or "12 lost:
/// expired 10, node errors 2".
fn lost_by_reason(held: &[redlease::Lease]) -> String {
    use redlease::LostReason;
    let reasons = [
        (LostReason::Expired, "expired"),
        (LostReason::Refused, "refused"),
        (LostReason::NodeErrors, "node errors"),
        (LostReason::Closed, "closed"),
    ];
    let lost: Vec<LostReason> = held.iter().filter_map(|l| l.lost_reason()).collect();
    if lost.is_empty() {
        return "0 lost".into();
    }
    let by: Vec<String> = reasons
        .iter()
        .map(|(reason, name)| (lost.iter().filter(|l| *l == reason).count(), name))
        .filter(|(n, _)| *n > 0)
        .map(|(n, name)| format!("{name} {n}"))
        .collect();
    format!("{} lost: {}", lost.len(), by.join(", "))
}

fn report(label: &str, (calls, bytes): (f64, f64)) {
    println!("{label:<16} {calls:>6.1} allocations, {bytes:>8.0} bytes per cycle");
}
