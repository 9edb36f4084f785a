//! Pure arithmetic over recorded cycles: latency percentiles (HdrHistogram),
//! for one contended key how the lock passed from holder to holder, for
//! one read-write lock whether readers and writers kept apart, and for one
//! semaphore how many held a permit at once.
//! No I/O and no clock reads, so it is unit-tested on synthetic timestamps.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// How a cycle held the lock: the bench's own spelling of the modes it
/// measures (the library's `LockMode` is non-exhaustive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockMode {
    /// A writer's (an exclusive lock's).
    Exclusive,
    /// A reader's.
    Shared,
    /// One of a semaphore's permits.
    Permit,
}

/// One completed lock cycle as a worker saw it, on the monotonic clock.
#[derive(Clone, Copy, Debug)]
pub struct Cycle {
    pub worker: u32,
    /// How the lock was held: `Exclusive` for every client and workload but
    /// the read-mostly workload's reads (`Shared`) and the semaphore
    /// workload's permits (`Permit`).
    pub mode: LockMode,
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

/// Acquire latencies of the cycles held in `mode` only.
pub fn acquire_latencies_in(cycles: &[Cycle], mode: LockMode) -> Option<Percentiles> {
    percentiles(
        cycles
            .iter()
            .filter(|c| c.mode == mode)
            .map(|c| c.acquire_returned - c.acquire_start),
    )
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

/// Whether readers and writers of one read-write lock kept apart. A hold
/// is surely held from its acquire's return to the start of its release;
/// two such spans that meet are two holds at once.
#[derive(Clone, Debug, PartialEq)]
pub struct Sharing {
    /// Holds taken while a hold they exclude was surely still held: a
    /// writer's while anyone held the lock, a reader's while a writer held
    /// it. Readers among themselves are fine. Must be 0.
    pub overlaps: u64,
    /// Most readers surely holding at one moment: above 1 shows the reads
    /// were shared.
    pub peak_readers: u64,
}

/// Checks each run (one slice, one lock) for holds that exclude each other
/// and overlapped, in one pass in acquire order: a hold is flagged if it
/// began before the latest release start among the holds taken before it
/// that it excludes (any earlier one for a writer, an earlier writer for a
/// reader), so every overlapping pair with a writer in it is caught.
pub fn sharing<'a>(runs: impl IntoIterator<Item = &'a [Cycle]>) -> Sharing {
    let mut overlaps = 0u64;
    let mut peak_readers = 0u64;
    for run in runs {
        let mut sorted: Vec<Cycle> = run.to_vec();
        sorted.sort_by_key(|c| c.acquire_returned);
        // Latest release start of any earlier hold, and of any earlier writer.
        let mut held_until: Option<Instant> = None;
        let mut written_until: Option<Instant> = None;
        // Release starts of the readers that may still hold (earliest on top).
        let mut readers: BinaryHeap<Reverse<Instant>> = BinaryHeap::new();
        for c in &sorted {
            // No permit is in a read-write run; one would count as a
            // writer, the strictest.
            let excluded_until = match c.mode {
                LockMode::Exclusive | LockMode::Permit => held_until,
                LockMode::Shared => written_until,
            };
            if excluded_until.is_some_and(|t| c.acquire_returned < t) {
                overlaps += 1;
            }
            held_until = held_until.max(Some(c.release_started));
            match c.mode {
                LockMode::Exclusive | LockMode::Permit => {
                    written_until = written_until.max(Some(c.release_started))
                }
                LockMode::Shared => {
                    while readers
                        .peek()
                        .is_some_and(|Reverse(t)| *t <= c.acquire_returned)
                    {
                        readers.pop();
                    }
                    readers.push(Reverse(c.release_started));
                    peak_readers = peak_readers.max(readers.len() as u64);
                }
            }
        }
    }
    Sharing {
        overlaps,
        peak_readers,
    }
}

/// How many holders of one semaphore surely held a permit at once (a hold
/// is surely held from its acquire's return to the start of its release).
#[derive(Clone, Debug, PartialEq)]
pub struct Holders {
    /// Most holds surely held at one moment. Above the number of permits,
    /// the semaphore admitted too many: the run fails.
    pub peak: u64,
    /// Holds taken while `permits` others were surely still held: each
    /// one made a holder too many. Must be 0.
    pub overlaps: u64,
}

/// Checks each run (one slice, one semaphore of `permits`) in one pass in
/// acquire order: the holds still held when one is taken are the earlier
/// ones whose release started after it was taken; counting them with
/// the new one gives the holders at that moment, and the most of those
/// moments is the peak (holders only ever increase at an acquire).
pub fn holders<'a>(runs: impl IntoIterator<Item = &'a [Cycle]>, permits: u32) -> Holders {
    let mut peak = 0u64;
    let mut overlaps = 0u64;
    for run in runs {
        let mut sorted: Vec<Cycle> = run.to_vec();
        sorted.sort_by_key(|c| c.acquire_returned);
        // Release starts of the holds that may still hold (earliest on top).
        let mut held: BinaryHeap<Reverse<Instant>> = BinaryHeap::new();
        for c in &sorted {
            while held
                .peek()
                .is_some_and(|Reverse(t)| *t <= c.acquire_returned)
            {
                held.pop();
            }
            if held.len() as u64 >= u64::from(permits) {
                overlaps += 1;
            }
            held.push(Reverse(c.release_started));
            peak = peak.max(held.len() as u64);
        }
    }
    Holders { peak, overlaps }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    /// A cycle whose times are microsecond offsets from `t0`.
    fn cycle(t0: Instant, worker: u32, start: u64, got: u64, rel: u64, done: u64) -> Cycle {
        Cycle {
            worker,
            mode: LockMode::Exclusive,
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

    /// A cycle in `mode` whose times are microsecond offsets from `t0`.
    fn held(t0: Instant, mode: LockMode, start: u64, got: u64, rel: u64) -> Cycle {
        Cycle {
            mode,
            ..cycle(t0, 0, start, got, rel, rel + 5)
        }
    }

    #[test]
    fn readers_may_share_but_a_writer_overlapping_anyone_is_flagged() {
        use LockMode::{Exclusive as W, Shared as R};
        let t0 = Instant::now();
        // Three readers together, then a writer after the last one's
        // release started, then a reader after the writer's.
        let fine = [
            held(t0, R, 0, 10, 50),
            held(t0, R, 0, 20, 40),
            held(t0, R, 0, 30, 60),
            held(t0, W, 0, 61, 80),
            held(t0, R, 60, 81, 90),
        ];
        let s = sharing([&fine[..]]);
        assert_eq!(s.overlaps, 0, "{s:?}");
        assert_eq!(s.peak_readers, 3, "{s:?}");

        // A writer taken while the first reader (held until 50) still held.
        let writer_in_readers = [held(t0, R, 0, 10, 50), held(t0, W, 0, 45, 70)];
        assert_eq!(sharing([&writer_in_readers[..]]).overlaps, 1);
        // A reader taken while a writer held, though the writer was taken
        // first and a reader released in between.
        let reader_in_writer = [
            held(t0, W, 0, 10, 100),
            held(t0, R, 0, 50, 60),
            held(t0, R, 0, 70, 80),
        ];
        assert_eq!(sharing([&reader_in_writer[..]]).overlaps, 2);
        // Two writers at once.
        let writers = [held(t0, W, 0, 10, 50), held(t0, W, 0, 20, 30)];
        assert_eq!(sharing([&writers[..]]).overlaps, 1);
        // Runs are checked apart: the same spans in two runs are fine.
        let a = [held(t0, W, 0, 10, 50)];
        let b = [held(t0, W, 0, 20, 30)];
        assert_eq!(sharing([&a[..], &b[..]]).overlaps, 0);
    }

    #[test]
    fn more_permit_holders_at_once_than_permits_are_flagged() {
        use LockMode::Permit as P;
        let t0 = Instant::now();
        // Two permits: two holders together, a third taken just as the
        // first one's release started, a fourth after the second's.
        let fine = [
            held(t0, P, 0, 10, 50),
            held(t0, P, 0, 20, 70),
            held(t0, P, 0, 50, 90),
            held(t0, P, 0, 70, 95),
        ];
        assert_eq!(
            holders([&fine[..]], 2),
            Holders {
                peak: 2,
                overlaps: 0
            }
        );
        // The third holder came in at 40, while both others still held.
        let three = [
            held(t0, P, 0, 10, 50),
            held(t0, P, 0, 20, 70),
            held(t0, P, 0, 40, 90),
        ];
        let h = holders([&three[..]], 2);
        assert_eq!(
            h,
            Holders {
                peak: 3,
                overlaps: 1
            }
        );
        // The same history is fine for three permits.
        assert_eq!(holders([&three[..]], 3).overlaps, 0);
        // Runs are checked apart: the same spans in two runs are fine.
        assert_eq!(holders([&three[..2], &three[2..]], 2).peak, 2);
    }

    #[test]
    fn acquire_latencies_split_by_mode() {
        let t0 = Instant::now();
        let cycles = [
            held(t0, LockMode::Shared, 0, 10, 20),
            held(t0, LockMode::Exclusive, 0, 300, 310),
            held(t0, LockMode::Shared, 100, 130, 140),
        ];
        let reads = acquire_latencies_in(&cycles, LockMode::Shared).unwrap();
        assert_eq!(reads.count, 2);
        assert!((reads.p99_us - 30.0).abs() < 0.1, "{reads:?}");
        let writes = acquire_latencies_in(&cycles, LockMode::Exclusive).unwrap();
        assert_eq!(writes.count, 1);
        assert!((writes.p50_us - 300.0).abs() < 0.1, "{writes:?}");
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
