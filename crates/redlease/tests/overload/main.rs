//! The acquire path under overload: 256 tasks lock and release independent
//! keys as fast as they can on 3 nodes while one node is stalled (SIGSTOP)
//! for 2 s.
//!
//! What must hold: every call returns within its bound (a stalled node
//! costs one node timeout, never a pile of them), the two other nodes keep
//! the rate up while it sleeps (it is sent nothing new), and once it wakes,
//! throughput is back to near what it was before within about a second
//! (asserted: at least half of it; the figure is printed).
//! A client that kept sending to the stalled node would queue thousands of
//! requests it had given up on; the node would spend its first seconds
//! awake executing them while every new request timed out behind them
//! (congestion collapse).
//!
//! A test binary of its own, so that no other test's load skews the
//! throughput it compares.

#[allow(dead_code)]
#[path = "../it/support.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlease::Error;
use redlease_testkit::RedisNodes;

use support::*;

const TASKS: usize = 256;
const NODE: Duration = Duration::from_millis(100);
/// Phases of the run, from its start.
const STALL_AT: Duration = Duration::from_secs(2);
const STALL_FOR: Duration = Duration::from_secs(2);
const RUN: Duration = Duration::from_secs(7);
/// Throughput windows: before the stall (after connections warmed up) and
/// after it (from one second after the node woke up).
const BEFORE: (Duration, Duration) = (Duration::from_millis(500), STALL_AT);
const AFTER: (Duration, Duration) = (Duration::from_secs(5), RUN);

/// Completed lock-and-release cycles per 100 ms slot of the run.
struct Timeline {
    start: Instant,
    slots: Vec<AtomicU64>,
}

impl Timeline {
    fn new(start: Instant) -> Self {
        let n = (RUN.as_millis() / 100) as usize + 1;
        Timeline {
            start,
            slots: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn record(&self, at: Instant) {
        let slot = (at.duration_since(self.start).as_millis() / 100) as usize;
        if let Some(s) = self.slots.get(slot) {
            s.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Cycles per second within `[from, to)`.
    fn rate(&self, (from, to): (Duration, Duration)) -> f64 {
        let (a, b) = (
            (from.as_millis() / 100) as usize,
            (to.as_millis() / 100) as usize,
        );
        let total: u64 = self.slots[a..b]
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .sum();
        total as f64 / (to - from).as_secs_f64()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throughput_recovers_after_a_stalled_node() {
    let mut nodes = RedisNodes::start(3);
    let locker = locker_with_timeout(&nodes, NODE);
    // A call may open a connection (connect timeout) and then wait one node
    // timeout; the rest is scheduling slack on a 2-core machine running
    // 256 tasks.
    let bound = NODE_TIMEOUT + NODE + Duration::from_millis(400);
    let start = Instant::now();
    let timeline = Arc::new(Timeline::new(start));
    let slowest = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let locker = locker.clone();
            let timeline = timeline.clone();
            let slowest = slowest.clone();
            tokio::spawn(async move {
                let key = format!("task-{t}");
                let mut taken = 0u64;
                // Bounded by time, and by count in case of a runaway.
                for _ in 0..1_000_000 {
                    if start.elapsed() >= RUN {
                        break;
                    }
                    let began = Instant::now();
                    let lease = locker.try_lock(&key).await;
                    let took = began.elapsed();
                    slowest.fetch_max(took.as_micros() as u64, Ordering::Relaxed);
                    assert!(took <= bound, "try_lock took {took:?} (bound {bound:?})");
                    match lease {
                        Ok(lease) => {
                            taken += 1;
                            let began = Instant::now();
                            // A release that fails leaves the key to expire;
                            // the next try_lock then meets it as Taken.
                            let _ = lease.release().await;
                            let took = began.elapsed();
                            slowest.fetch_max(took.as_micros() as u64, Ordering::Relaxed);
                            assert!(took <= bound, "release took {took:?} (bound {bound:?})");
                            timeline.record(Instant::now());
                        }
                        // Our own key, left behind by a release that could
                        // not reach a quorum: it expires with its TTL.
                        Err(Error::Taken { .. } | Error::NoQuorum { .. }) => {
                            tokio::time::sleep(10 * MS).await
                        }
                        Err(e) => panic!("unexpected error: {e}"),
                    }
                }
                taken
            })
        })
        .collect();

    tokio::time::sleep_until((start + STALL_AT).into()).await;
    nodes.node_mut(2).pause();
    tokio::time::sleep(STALL_FOR).await;
    nodes.node_mut(2).resume();

    let mut total = 0;
    for task in tasks {
        total += task.await.expect("no task panicked");
    }
    let before = timeline.rate(BEFORE);
    let during = timeline.rate((STALL_AT, STALL_AT + STALL_FOR));
    let after = timeline.rate(AFTER);
    let per_slot: Vec<u64> = timeline
        .slots
        .iter()
        .map(|s| s.load(Ordering::Relaxed))
        .collect();
    println!(
        "{TASKS} tasks, 3 nodes, node 2 stalled {STALL_FOR:?}: {total} cycles; \
         {before:.0}/s before, {during:.0}/s stalled, {after:.0}/s from 1 s after \
         ({:.0}%); slowest call {:?}\ncycles per 100 ms: {per_slot:?}",
        100.0 * after / before,
        Duration::from_micros(slowest.load(Ordering::Relaxed)),
    );
    assert!(before > 0.0, "no cycle completed before the stall");
    // While node 2 sleeps, the owed-request gate sends it nothing new, so
    // the other two carry every cycle at a node's round trip, without a
    // node timeout each: measured 126-143% of the rate before (fewer
    // requests per cycle), under a busy loop too. Without the gate it fell
    // to 53%, every request to node 2 waiting out its timeout.
    assert!(
        during >= 0.8 * before,
        "the stalled node slowed the others: {during:.0}/s stalled vs {before:.0}/s before"
    );
    // Collapse shows as a rate far below the one before (the node busy for
    // seconds with work given up on, new requests timing out behind it).
    // Half is the bar: with one busy loop on the 2 cores the recovered rate
    // was measured anywhere from 75% to 115% of the rate before (a bar at
    // 90% flaked), so a finer bar would measure the machine, not the client.
    assert!(
        after >= 0.5 * before,
        "throughput did not recover: {after:.0}/s after vs {before:.0}/s before"
    );
}
