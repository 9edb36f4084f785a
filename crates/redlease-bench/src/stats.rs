//! Pure arithmetic over recorded cycles: latency percentiles (HdrHistogram)
//! and, for one contended key, how the lock passed from holder to holder.
//! No I/O and no clock reads, so it is unit-tested on synthetic timestamps.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// One completed lock cycle as a worker saw it, on the monotonic clock.
#[derive(Clone, Copy, Debug)]
pub struct Cycle {
    pub worker: u32,
    /// Just before the acquire call.
    pub acquire_start: Instant,
    /// The acquire returned a held lock.
    pub acquire_returned: Instant,
    /// Just before the release call (after the critical section).
    pub release_started: Instant,
    /// The release returned.
    pub release_returned: Instant,
}

/// Median and 99th percentile, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Percentiles {
    pub p50_us: f64,
    pub p99_us: f64,
    /// How many samples they were taken over.
    pub count: u64,
}

/// Highest latency the histograms track: far above any bench timeout, so no
/// sample is clipped in practice (larger ones saturate instead of failing).
const MAX_TRACKED_NS: u64 = 120_000_000_000;

/// p50 and p99 of `samples` (3 significant digits); `None` when empty.
pub fn percentiles(samples: impl IntoIterator<Item = Duration>) -> Option<Percentiles> {
    let mut hist = Histogram::<u64>::new_with_bounds(1, MAX_TRACKED_NS, 3)
        .expect("static histogram bounds are valid");
    for d in samples {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1);
        hist.saturating_record(ns);
    }
    if hist.is_empty() {
        return None;
    }
    let us = |q: f64| hist.value_at_quantile(q) as f64 / 1_000.0;
    Some(Percentiles {
        p50_us: us(0.50),
        p99_us: us(0.99),
        count: hist.len(),
    })
}

/// Acquire latencies: call to a held lock (includes any waiting).
pub fn acquire_latencies(cycles: &[Cycle]) -> Option<Percentiles> {
    percentiles(cycles.iter().map(|c| c.acquire_returned - c.acquire_start))
}

/// Release latencies: call to return.
pub fn release_latencies(cycles: &[Cycle]) -> Option<Percentiles> {
    percentiles(
        cycles
            .iter()
            .map(|c| c.release_returned - c.release_started),
    )
}

/// How the one contended lock moved between holders.
#[derive(Clone, Debug, PartialEq)]
pub struct Handoffs {
    /// Consecutive holder pairs examined (cycles - 1).
    pub pairs: u64,
    /// Previous holder starts its release -> next holder's acquire returns.
    pub handoff: Option<Percentiles>,
    /// The same, only for pairs where the next holder is another worker.
    pub cross_handoff: Option<Percentiles>,
    /// Share of pairs where the releasing worker is also the next holder.
    pub same_worker_share: f64,
    /// For cross-worker pairs: how long the next holder sat in acquire.
    pub wait: Option<Percentiles>,
    /// Pairs where the next acquire returned before the previous holder
    /// even started to release: two holders at once. Must be 0.
    pub overlaps: u64,
}

/// Orders each run's cycles by when their acquire returned and pairs each
/// with the previous holder. Each slice is one run on one key; pairs never
/// span two slices (the gap between two runs is no handoff).
pub fn handoffs<'a>(runs: impl IntoIterator<Item = &'a [Cycle]>) -> Handoffs {
    let mut all = Vec::new();
    let mut cross = Vec::new();
    let mut waits = Vec::new();
    let mut same = 0u64;
    let mut overlaps = 0u64;
    for run in runs {
        let mut sorted: Vec<Cycle> = run.to_vec();
        sorted.sort_by_key(|c| c.acquire_returned);
        for pair in sorted.windows(2) {
            let (prev, next) = (&pair[0], &pair[1]);
            if next.acquire_returned < prev.release_started {
                overlaps += 1;
            }
            let gap = next
                .acquire_returned
                .saturating_duration_since(prev.release_started);
            all.push(gap);
            if next.worker == prev.worker {
                same += 1;
            } else {
                cross.push(gap);
                waits.push(next.acquire_returned - next.acquire_start);
            }
        }
    }
    let pairs = all.len() as u64;
    Handoffs {
        pairs,
        handoff: percentiles(all),
        cross_handoff: percentiles(cross),
        same_worker_share: if pairs == 0 {
            0.0
        } else {
            same as f64 / pairs as f64
        },
        wait: percentiles(waits),
        overlaps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    /// A cycle whose times are microsecond offsets from `t0`.
    fn cycle(t0: Instant, worker: u32, start: u64, got: u64, rel: u64, done: u64) -> Cycle {
        Cycle {
            worker,
            acquire_start: t0 + start as u32 * US,
            acquire_returned: t0 + got as u32 * US,
            release_started: t0 + rel as u32 * US,
            release_returned: t0 + done as u32 * US,
        }
    }

    #[test]
    fn percentiles_of_1_to_100_us() {
        let p = percentiles((1..=100).map(|n| n * US)).unwrap();
        assert_eq!(p.count, 100);
        // 3 significant digits: exact at this scale.
        assert!((p.p50_us - 50.0).abs() < 0.1, "{p:?}");
        assert!((p.p99_us - 99.0).abs() < 0.1, "{p:?}");
        assert_eq!(percentiles(Vec::new()), None);
    }

    #[test]
    fn handoffs_pair_each_holder_with_the_previous_one() {
        let t0 = Instant::now();
        // Given out of order on purpose: the function sorts by acquire_returned.
        let cycles = [
            // Worker 1 waited from 0 and took over at 130 from worker 0,
            // who had started releasing at 100.
            cycle(t0, 1, 0, 130, 150, 170),
            cycle(t0, 0, 0, 10, 100, 120),
            // Worker 1 again: released at 150, re-acquired at 175.
            cycle(t0, 1, 171, 175, 200, 210),
            // Worker 0 waited from 121, took over at 260 (release at 200).
            cycle(t0, 0, 121, 260, 300, 320),
        ];
        let h = handoffs([&cycles[..]]);
        assert_eq!(h.pairs, 3);
        assert_eq!(h.overlaps, 0);
        assert!((h.same_worker_share - 1.0 / 3.0).abs() < 1e-9);
        // Handoffs: 130-100 = 30, 175-150 = 25, 260-200 = 60.
        let all = h.handoff.unwrap();
        assert_eq!(all.count, 3);
        assert!((all.p50_us - 30.0).abs() < 0.1, "{all:?}");
        assert!((all.p99_us - 60.0).abs() < 0.1, "{all:?}");
        // Cross-worker only: 30 and 60.
        let cross = h.cross_handoff.unwrap();
        assert_eq!(cross.count, 2);
        assert!((cross.p50_us - 30.0).abs() < 0.1, "{cross:?}");
        // Waits of the takers: 130 - 0 and 260 - 121.
        let wait = h.wait.unwrap();
        assert!((wait.p50_us - 130.0).abs() < 0.1, "{wait:?}");
        assert!((wait.p99_us - 139.0).abs() < 0.1, "{wait:?}");
    }

    #[test]
    fn two_holders_at_once_are_counted_as_overlaps() {
        let t0 = Instant::now();
        // Worker 1's acquire returned at 50, before worker 0 began to release at 100.
        let cycles = [cycle(t0, 0, 0, 10, 100, 110), cycle(t0, 1, 0, 50, 60, 70)];
        let h = handoffs([&cycles[..]]);
        assert_eq!(h.overlaps, 1);
    }

    #[test]
    fn pairs_never_span_two_runs() {
        let t0 = Instant::now();
        // Two runs of one cycle each: nothing to pair, even though the second
        // run's acquire returned after the first run's release.
        let first = [cycle(t0, 0, 0, 10, 20, 30)];
        let second = [cycle(t0, 1, 1000, 1010, 1020, 1030)];
        let h = handoffs([&first[..], &second[..]]);
        assert_eq!(h.pairs, 0);
        assert_eq!(h.handoff, None);
    }

    #[test]
    fn latencies_come_from_each_cycles_own_timestamps() {
        let t0 = Instant::now();
        let cycles = [cycle(t0, 0, 0, 40, 50, 60), cycle(t0, 0, 60, 100, 110, 130)];
        let acq = acquire_latencies(&cycles).unwrap();
        let rel = release_latencies(&cycles).unwrap();
        assert!((acq.p50_us - 40.0).abs() < 0.1);
        assert!((rel.p99_us - 20.0).abs() < 0.1);
    }
}
