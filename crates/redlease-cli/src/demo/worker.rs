//! The demo's workers: each takes the lock, does a read-modify-write of a
//! shared counter that only the lock protects, and releases; the record
//! they share counts sections, handoffs and their latency.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redlease::Locker;

use crate::errors::chain;

/// The one lock every worker contends for.
pub const LOCK: &str = "demo-counter";
/// Short, so that a lock left behind (a release lost with a dying node)
/// stalls the demo for a moment only; the sections are far shorter.
pub const TTL: Duration = Duration::from_secs(2);
/// How long one `lock()` call may wait before the worker tries again.
const WAIT: Duration = Duration::from_secs(5);
/// The "write" inside a critical section: long enough that two holders at
/// once would overwrite each other's increments.
const WORK: Duration = Duration::from_millis(1);
/// Longest pause between a release and the worker's next try, so the lock
/// changes hands instead of going back to whoever just released it.
const MAX_PAUSE_US: u64 = 2_000;

/// What the workers share: the protected counter, and the record.
#[derive(Default)]
pub struct Shared {
    pub stop: AtomicBool,
    /// The "database": updated without any synchronisation but the lock.
    pub counter: AtomicU64,
    /// Workers inside a critical section right now (more than 1 = overlap).
    inside: AtomicU32,
    record: Mutex<Record>,
}

#[derive(Clone, Default)]
pub struct Record {
    pub sections: u64,
    /// Sections completed after the node failure.
    pub sections_after_failure: u64,
    pub overlaps: u64,
    pub handoffs: u64,
    /// Every handoff's latency in microseconds: from the holder starting
    /// its release to the next holder having the lease.
    pub latencies_us: Vec<u64>,
    /// How many of `latencies_us` came before the node failure.
    pub latencies_before_failure: Option<usize>,
    pub errors: u64,
    pub last_error: Option<String>,
    pub failure_at: Option<Instant>,
    /// The last holder, and when it began to release.
    last_release: Option<(usize, Instant)>,
}

impl Shared {
    pub fn record(&self) -> MutexGuard<'_, Record> {
        self.record
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn error(&self, message: String) {
        let mut r = self.record();
        r.errors += 1;
        r.last_error = Some(message);
    }
}

/// One worker with its own Locker (its own connections), as if on its own
/// machine; runs until `stop`.
pub async fn run(id: usize, urls: Vec<String>, shared: Arc<Shared>) {
    let locker = match Locker::builder(&urls)
        // The demo's servers are brand new: none can have lost a lock.
        .advanced(|a| a.restart_quarantine(Duration::ZERO))
        .ttl(TTL)
        .key_prefix("redlease-demo:")
        .build()
    {
        Ok(locker) => locker,
        Err(e) => return shared.error(chain(&e)),
    };
    let mut rng = XorShift::new(id);
    while !shared.stop.load(Ordering::Relaxed) {
        let lease = match locker.lock(LOCK).wait(WAIT).await {
            Ok(lease) => lease,
            Err(e) => {
                shared.error(chain(&e));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let now = Instant::now();
        {
            let mut r = shared.record();
            if let Some((previous, released_at)) = r.last_release.take() {
                if previous != id {
                    r.handoffs += 1;
                    r.latencies_us.push((now - released_at).as_micros() as u64);
                }
            }
        }
        if !shared.stop.load(Ordering::Relaxed) {
            critical_section(&shared, &lease).await;
        }
        shared.record().last_release = Some((id, Instant::now()));
        if let Err(e) = lease.release().await {
            shared.error(chain(&e));
        }
        tokio::time::sleep(Duration::from_micros(rng.next() % MAX_PAUSE_US)).await;
    }
}

/// Read, work, write: an increment that two holders at once would lose.
async fn critical_section(shared: &Shared, lease: &redlease::Lease) {
    if shared.inside.fetch_add(1, Ordering::SeqCst) != 0 {
        shared.record().overlaps += 1;
    }
    let value = shared.counter.load(Ordering::SeqCst);
    tokio::time::sleep(WORK).await;
    // As any holder should: no write once the lease can't be trusted.
    if lease.is_lost() {
        shared.error("a lease ran out inside its critical section; the write was skipped".into());
    } else {
        shared.counter.store(value + 1, Ordering::SeqCst);
        let mut r = shared.record();
        r.sections += 1;
        if r.failure_at.is_some() {
            r.sections_after_failure += 1;
        }
    }
    shared.inside.fetch_sub(1, Ordering::SeqCst);
}

/// A tiny PRNG for the pauses; no need for a crate.
struct XorShift(u64);

impl XorShift {
    fn new(seed: usize) -> Self {
        XorShift(0x9E37_79B9_7F4A_7C15 ^ (seed as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
