//! The six workloads, written once over [`LockClient`] so the library, the
//! raw baseline and rslock run exactly the same loop, with the same keys and
//! the same timestamps around the same calls (read-mostly needs read-write
//! locks, semaphore a semaphore and multi several locks in one lease, which
//! only the library has).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::stats::LockMode;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use redis::AsyncCommands;

use crate::client::{BenchError, LockClient};
use crate::commands::Served;
use crate::conn::NodeConn;
use crate::stats::Cycle;

/// What the workers do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// 1 worker, a fresh key each cycle: acquire, release.
    Uncontended,
    /// K workers on one key: acquire, GET counter, SET counter+1, release.
    Contended,
    /// K workers, each on its own fresh keys, through one shared client.
    Independent,
    /// K workers on one key, each cycle a read lock (90%: GET counter) or
    /// a write lock (10%: GET counter, SET counter+1), then release. The
    /// library only: the other clients have no read-write lock.
    ReadMostly,
    /// K workers on one semaphore of [`PERMITS`] permits: acquire a permit,
    /// INCR counter, DECR counter, release. The library only: the other
    /// clients have no semaphore.
    Semaphore,
    /// 1 worker, [`MULTI_NAMES`] fresh names each cycle, all held at once,
    /// then released: `lock_all` of them (the library), or one `lock` after
    /// another in a fixed order and the releases in reverse (the `nested`
    /// client). The library only.
    Multi,
}

/// Share of the read-mostly workload's cycles that take a read lock.
pub const READ_SHARE: f64 = 0.9;

/// Permits of the semaphore workload's one semaphore.
pub const PERMITS: u32 = 4;

/// Names the multi workload holds at once, each cycle.
pub const MULTI_NAMES: usize = 4;

impl Workload {
    pub const ALL: [Workload; 6] = [
        Workload::Uncontended,
        Workload::Contended,
        Workload::Independent,
        Workload::ReadMostly,
        Workload::Semaphore,
        Workload::Multi,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Uncontended => "uncontended",
            Workload::Contended => "contended",
            Workload::Independent => "independent",
            Workload::ReadMostly => "read-mostly",
            Workload::Semaphore => "semaphore",
            Workload::Multi => "multi",
        }
    }

    /// Whether the raw, plain and rslock clients run it too: not
    /// read-mostly, semaphore nor multi, as none of them has a read-write
    /// lock, a semaphore or a lease over several locks.
    pub fn has_peers(self) -> bool {
        !matches!(
            self,
            Workload::ReadMostly | Workload::Semaphore | Workload::Multi
        )
    }

    /// Whether it always has one worker, whatever `--workers` says.
    pub fn single_worker(self) -> bool {
        matches!(self, Workload::Uncontended | Workload::Multi)
    }

    /// Whether its workers fight over one name and touch a counter while
    /// they hold it.
    fn shared_counter(self) -> bool {
        matches!(
            self,
            Workload::Contended | Workload::ReadMostly | Workload::Semaphore
        )
    }

    /// Workers when `--workers` is not given (uncontended and multi are
    /// always 1).
    pub fn default_workers(self) -> usize {
        match self {
            Workload::Uncontended | Workload::Multi => 1,
            Workload::Contended | Workload::ReadMostly => 8,
            Workload::Semaphore => 16,
            Workload::Independent => 64,
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Safety bound on one worker's cycles in one phase; never reached in a
/// run of sane length, it only guarantees the loop ends.
const MAX_CYCLES_PER_WORKER: u64 = 100_000_000;

/// One measured phase of one client.
#[derive(Debug)]
pub struct Outcome {
    pub cycles: Vec<Cycle>,
    /// From the common start to the last worker's last release.
    pub elapsed: Duration,
    pub per_worker: Vec<u64>,
    /// Contended, read-mostly and semaphore: the counter after the run
    /// (lost updates = write cycles - this; every contended cycle is a
    /// write; a semaphore's holders leave it at 0, and it is not checked).
    pub final_counter: Option<i64>,
    /// CPU used by this process during the slice (filled in by the runner).
    pub client_cpu: Duration,
    /// CPU used by the redis-server nodes, when they are ours to watch.
    pub server_cpu: Option<Duration>,
    /// What the servers served, summed over them (filled in by the runner
    /// for the multi workload, when their counters could be read).
    pub served: Option<Served>,
}

/// Where the contended, read-mostly and semaphore workloads keep the
/// counter they touch while holding: on the first
/// node (on a cluster, the shard that owns the counter's slot), over a
/// connection of its own, the same for every client.
#[derive(Clone)]
pub struct Counter {
    pub conn: NodeConn,
}

/// Runs `workload` with `workers` workers on `client` for `duration`:
/// one measured slice. `tag` keeps each slice's keys apart from every other
/// slice's (a warm-up is just a slice whose outcome is thrown away).
pub async fn phase<C: LockClient>(
    client: Arc<C>,
    workload: Workload,
    workers: usize,
    duration: Duration,
    counter: &Counter,
    tag: &str,
) -> Result<Outcome, BenchError> {
    let shared = workload.shared_counter();
    let counter_key = format!("redlease-bench:{{{tag}}}:counter");
    if shared {
        // A clean start, so the final value counts this phase's cycles only.
        let _: () = counter.conn.clone().set(&counter_key, 0).await?;
    }
    let start = Instant::now();
    let end = start + duration;
    let mut tasks = Vec::with_capacity(workers);
    for id in 0..workers {
        let client = client.clone();
        let names = if shared {
            Names::Shared(format!("{tag}-shared"))
        } else if workload == Workload::Multi {
            Names::FreshSet(format!("{tag}-w{id}-"))
        } else {
            Names::Fresh(format!("{tag}-w{id}-"))
        };
        let counter = shared.then(|| (counter.conn.clone(), counter_key.clone()));
        let id = u32::try_from(id)?;
        let holds = match workload {
            // Seeded by worker, so every slice and client draws the same
            // sequence of reads and writes.
            Workload::ReadMostly => Holds::ReadMostly(SmallRng::seed_from_u64(u64::from(id))),
            Workload::Semaphore => Holds::Permit,
            _ => Holds::Exclusive,
        };
        tasks.push(tokio::spawn(worker(client, id, names, end, counter, holds)));
    }
    let mut cycles = Vec::new();
    let mut per_worker = Vec::with_capacity(workers);
    let mut first_error = None;
    for task in tasks {
        match task.await? {
            Ok(mine) => {
                per_worker.push(mine.len() as u64);
                cycles.extend(mine);
            }
            Err(e) => {
                per_worker.push(0);
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    let elapsed = cycles
        .iter()
        .map(|c| c.release_returned)
        .max()
        .map_or(Duration::ZERO, |last| last - start);
    let final_counter = if shared {
        let value: Option<i64> = counter.conn.clone().get(&counter_key).await?;
        let _: () = counter.conn.clone().del(&counter_key).await?;
        Some(value.unwrap_or(0))
    } else {
        None
    };
    Ok(Outcome {
        cycles,
        elapsed,
        per_worker,
        final_counter,
        client_cpu: Duration::ZERO,
        server_cpu: None,
        served: None,
    })
}

/// Which lock names a worker uses.
enum Names {
    /// A new name every cycle, `prefix` + cycle number.
    Fresh(String),
    /// The one name all workers fight over.
    Shared(String),
    /// [`MULTI_NAMES`] new names every cycle, `prefix` + cycle number +
    /// `-` + 0, 1, ...: taken together, in that order.
    FreshSet(String),
}

/// How a worker holds its name, cycle after cycle.
enum Holds {
    /// Every cycle a write (an exclusive lock).
    Exclusive,
    /// Each cycle a read with probability [`READ_SHARE`], drawn from this
    /// generator, else a write.
    ReadMostly(SmallRng),
    /// Every cycle a permit of the semaphore of [`PERMITS`].
    Permit,
}

impl Holds {
    fn next(&mut self) -> LockMode {
        match self {
            Holds::Exclusive => LockMode::Exclusive,
            Holds::ReadMostly(rng) => {
                if rng.random_bool(READ_SHARE) {
                    LockMode::Shared
                } else {
                    LockMode::Exclusive
                }
            }
            Holds::Permit => LockMode::Permit,
        }
    }
}

/// One worker: full cycles until `end` (a cycle in progress at `end` is
/// finished, so no lock is left held). While holding, with a counter: a
/// write reads it and writes it + 1, a read only reads it, a permit
/// increments it and decrements it again (the same two round trips as a
/// write, with nothing to lose when several permits are held at once).
async fn worker<C: LockClient>(
    client: Arc<C>,
    id: u32,
    names: Names,
    end: Instant,
    counter: Option<(NodeConn, String)>,
    mut holds: Holds,
) -> Result<Vec<Cycle>, BenchError> {
    let mut cycles = Vec::new();
    let mut fresh = String::new();
    let mut set: Vec<String> = Vec::new();
    for i in 0..MAX_CYCLES_PER_WORKER {
        if Instant::now() >= end {
            break;
        }
        let name: &str = match &names {
            Names::Shared(name) => name,
            Names::Fresh(prefix) => {
                use std::fmt::Write as _;
                fresh.clear();
                let _ = write!(fresh, "{prefix}{i}");
                &fresh
            }
            Names::FreshSet(prefix) => {
                // Built before the clock starts, like the other names;
                // taken as a set below, so no one name.
                set.clear();
                set.extend((0..MULTI_NAMES).map(|k| format!("{prefix}{i}-{k}")));
                ""
            }
        };
        let mode = holds.next();
        let acquire_start = Instant::now();
        let guard = match (&names, mode) {
            (Names::FreshSet(_), _) => client.acquire_all(&set).await?,
            (_, LockMode::Exclusive) => client.acquire(name).await?,
            (_, LockMode::Shared) => client.acquire_read(name).await?,
            (_, LockMode::Permit) => client.acquire_permit(name, PERMITS).await?,
        };
        let acquire_returned = Instant::now();
        if let Some((conn, key)) = &counter {
            let mut conn = conn.clone();
            match mode {
                // The protected read-modify-write: lost if two writers
                // overlap.
                LockMode::Exclusive => {
                    let value: Option<i64> = conn.get(key).await?;
                    let _: () = conn.set(key, value.unwrap_or(0) + 1).await?;
                }
                // A reader only reads.
                LockMode::Shared => {
                    let _: Option<i64> = conn.get(key).await?;
                }
                LockMode::Permit => {
                    let _: i64 = conn.incr(key, 1).await?;
                    let _: i64 = conn.decr(key, 1).await?;
                }
            }
        }
        let release_started = Instant::now();
        client.release(guard).await?;
        let release_returned = Instant::now();
        cycles.push(Cycle {
            worker: id,
            mode,
            acquire_start,
            acquire_returned,
            release_started,
            release_returned,
        });
    }
    Ok(cycles)
}
