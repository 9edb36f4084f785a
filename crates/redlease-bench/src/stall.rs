//! `--stall D/P` for the renewal workload: while the leases are held, every
//! period P each of the bench's own redis-server nodes is stopped (SIGSTOP)
//! for D, then resumed (SIGCONT). A stopped node keeps its connections open
//! but answers nothing, as a node does during a long GC-like pause, a VM
//! steal or a swap storm.
//!
//! The schedule is pure ([`Schedule`]); [`Driver`] plays it on its own OS
//! thread (so busy runtime workers cannot delay a transition), stops when
//! the hold ends or when told to, and always resumes every node at the end,
//! also when it is dropped early or its thread panics.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use rustix::process::{kill_process, Pid, Signal};
use serde_json::json;

/// Shortest period accepted: keeps the signal rate sane (15 nodes x 2
/// signals per period).
pub const MIN_PERIOD: Duration = Duration::from_millis(10);
/// Longest period accepted (the hold itself is at most 600 s).
pub const MAX_PERIOD: Duration = Duration::from_secs(600);
/// Shortest stopped time accepted.
pub const MIN_STOPPED: Duration = Duration::from_millis(1);

/// A parsed `--stall D/P`: stopped for `stopped` out of every `period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StallSpec {
    pub stopped: Duration,
    pub period: Duration,
}

/// How the nodes' stop windows line up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StallPhase {
    /// All nodes stop and resume together: during each stop window no node
    /// answers at all.
    Same,
    /// Node i's window starts i*P/n into the period, so the windows rotate
    /// through the nodes and about n*D/P of them are stopped at any moment
    /// (a minority or a majority, depending on D/P).
    Staggered,
}

impl StallPhase {
    pub fn name(self) -> &'static str {
        match self {
            StallPhase::Same => "same",
            StallPhase::Staggered => "staggered",
        }
    }
}

/// Parses a duration such as `100ms`, `1s` or `1.5s` (a non-negative
/// decimal number, then the unit `ms` or `s`; no sign, no exponent).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad =
        || format!("bad duration `{text}`: expected a number and a unit, e.g. 100ms, 1s, 1.5s");
    let s = text.trim();
    let (number, unit_ns) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1_000_000u128)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1_000_000_000u128)
    } else {
        return Err(bad());
    };
    let (int, frac) = match number.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (number, None),
    };
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || int.len() > 9 || frac.is_some_and(|f| !digits(f)) {
        return Err(bad());
    }
    let int: u128 = int.parse().map_err(|_| bad())?;
    let mut nanos = int * unit_ns;
    if let Some(f) = frac {
        // Nine digits are enough for nanoseconds; the rest is dropped.
        let f = &f[..f.len().min(9)];
        let scale = 10u128.pow(f.len() as u32);
        let f: u128 = f.parse().map_err(|_| bad())?;
        nanos += f * unit_ns / scale;
    }
    // int < 10^9 and unit <= 10^9 s: at most ~3e10 s, fits a Duration.
    let secs = (nanos / 1_000_000_000) as u64;
    let sub = (nanos % 1_000_000_000) as u32;
    Ok(Duration::new(secs, sub))
}

/// Parses `--stall D/P`, e.g. `600ms/900ms`: stopped D out of every P.
/// Requires MIN_STOPPED <= D < P and MIN_PERIOD <= P <= MAX_PERIOD.
pub fn parse_stall(text: &str) -> Result<StallSpec, String> {
    let Some((d, p)) = text.split_once('/') else {
        return Err(format!(
            "bad stall `{text}`: expected STOPPED/PERIOD, e.g. 600ms/900ms"
        ));
    };
    let stopped = parse_duration(d)?;
    let period = parse_duration(p)?;
    if stopped < MIN_STOPPED {
        return Err(format!(
            "bad stall `{text}`: the stopped time must be at least {MIN_STOPPED:?}"
        ));
    }
    if !(MIN_PERIOD..=MAX_PERIOD).contains(&period) {
        return Err(format!(
            "bad stall `{text}`: the period must be in [{MIN_PERIOD:?}, {MAX_PERIOD:?}]"
        ));
    }
    if stopped >= period {
        return Err(format!(
            "bad stall `{text}`: the stopped time ({stopped:?}) must be shorter than the period \
             ({period:?}), or the nodes would never run"
        ));
    }
    Ok(StallSpec { stopped, period })
}

/// One signal to send: at `at` (since the schedule's start), stop or
/// resume node `node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub at: Duration,
    pub node: usize,
    pub stop: bool,
}

/// The endless, time-ordered list of stop/resume events for `nodes` nodes.
/// Node i's k-th stop window is [k*P + offset_i, k*P + offset_i + D), with
/// offset_i = 0 for `Same` and i*P/n for `Staggered`. At equal times a
/// resume comes before a stop, so windows that merely touch never overlap.
pub struct Schedule {
    spec: StallSpec,
    /// Per node: the time of its next event and whether it is a stop.
    next: Vec<(Duration, bool)>,
}

impl Schedule {
    pub fn new(spec: StallSpec, phase: StallPhase, nodes: usize) -> Schedule {
        let next = (0..nodes)
            .map(|i| {
                let offset = match phase {
                    StallPhase::Same => Duration::ZERO,
                    StallPhase::Staggered => {
                        let ns = spec.period.as_nanos() * i as u128 / nodes as u128;
                        Duration::from_nanos(ns as u64)
                    }
                };
                (offset, true)
            })
            .collect();
        Schedule { spec, next }
    }
}

impl Iterator for Schedule {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        // Earliest time first; a resume (stop = false) before a stop; then
        // the lower node.
        let (node, &(at, stop)) = self
            .next
            .iter()
            .enumerate()
            .min_by_key(|(i, (at, stop))| (*at, *stop, *i))?;
        self.next[node] = if stop {
            (at + self.spec.stopped, false)
        } else {
            (at + (self.spec.period - self.spec.stopped), true)
        };
        Some(Event { at, node, stop })
    }
}

/// What the driver did, for the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StallSummary {
    pub spec: StallSpec,
    pub phase: StallPhase,
    /// SIGSTOPs sent over all nodes.
    pub stops: u64,
    /// Most nodes stopped at the same time.
    pub max_stopped_at_once: usize,
}

impl StallSummary {
    pub fn json(&self) -> serde_json::Value {
        json!({
            "stopped_ms": self.spec.stopped.as_secs_f64() * 1e3,
            "period_ms": self.spec.period.as_secs_f64() * 1e3,
            "phase": self.phase.name(),
            "stops": self.stops,
            "max_stopped_at_once": self.max_stopped_at_once,
        })
    }

    /// One line for the human table.
    pub fn line(&self, nodes: usize) -> String {
        let how = match self.phase {
            StallPhase::Same => "all in the same phase".to_string(),
            StallPhase::Staggered => format!(
                "staggered by {:?} per node",
                self.spec.period / nodes.max(1) as u32
            ),
        };
        format!(
            "stall: every {:?} each of {nodes} node(s) SIGSTOPped for {:?} ({how}): \
             {} stop(s) sent, up to {} node(s) stopped at once",
            self.spec.period, self.spec.stopped, self.stops, self.max_stopped_at_once
        )
    }
}

/// Sends `sig` to `pid`, as the testkit's pause/resume do.
///
/// The pids are the bench's own redis-server children, owned by a
/// `RedisNodes` that outlives the driver and is not killed meanwhile: an
/// unreaped child's pid cannot be recycled, so the signal cannot reach
/// another process.
fn signal(pid: u32, sig: Signal) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        let _ = kill_process(pid, sig);
    }
}

/// SIGCONTs every node when dropped: at the end of the schedule, on an
/// early stop, and while unwinding from a panic.
struct ResumeAll<'a>(&'a [u32]);

impl Drop for ResumeAll<'_> {
    fn drop(&mut self) {
        for &pid in self.0 {
            signal(pid, Signal::CONT);
        }
    }
}

/// Plays a [`Schedule`] on the given redis-server pids on its own thread.
/// Dropping it (or [`finish`](Driver::finish)) stops the schedule, resumes
/// every node and waits for the thread.
pub struct Driver {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<StallSummary>>,
    spec: StallSpec,
    phase: StallPhase,
}

impl Driver {
    /// Starts the schedule at `start` and ends it at `start + until` at the
    /// latest.
    pub fn start(
        spec: StallSpec,
        phase: StallPhase,
        pids: Vec<u32>,
        start: Instant,
        until: Duration,
    ) -> std::io::Result<Driver> {
        let (tx, rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("stall-driver".into())
            .spawn(move || drive(spec, phase, &pids, start, until, &rx))?;
        Ok(Driver {
            stop: Some(tx),
            thread: Some(thread),
            spec,
            phase,
        })
    }

    /// Stops the schedule (if still running), waits until every node is
    /// resumed, and says what was done.
    pub fn finish(mut self) -> StallSummary {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> StallSummary {
        // Disconnecting the channel wakes the driver at once.
        drop(self.stop.take());
        let fallback = StallSummary {
            spec: self.spec,
            phase: self.phase,
            stops: 0,
            max_stopped_at_once: 0,
        };
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(summary)) => summary,
            // A panicking driver still resumed every node (ResumeAll).
            Some(Err(_)) | None => fallback,
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

fn drive(
    spec: StallSpec,
    phase: StallPhase,
    pids: &[u32],
    start: Instant,
    until: Duration,
    stop: &mpsc::Receiver<()>,
) -> StallSummary {
    let _resume = ResumeAll(pids);
    let mut summary = StallSummary {
        spec,
        phase,
        stops: 0,
        max_stopped_at_once: 0,
    };
    let mut stopped = vec![false; pids.len()];
    for event in Schedule::new(spec, phase, pids.len()) {
        // Times are from the fixed start, so lateness never accumulates.
        // Past the hold, only wait for its end (nodes stopped then stay
        // stopped until it), then resume all.
        let wait = (start + event.at.min(until)).saturating_duration_since(Instant::now());
        match stop.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => {}
            // Told to stop (or the owner is gone).
            Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
        }
        if event.at >= until {
            break;
        }
        if event.stop {
            signal(pids[event.node], Signal::STOP);
            summary.stops += 1;
        } else {
            signal(pids[event.node], Signal::CONT);
        }
        stopped[event.node] = event.stop;
        let now = stopped.iter().filter(|&&s| s).count();
        summary.max_stopped_at_once = summary.max_stopped_at_once.max(now);
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn durations_take_ms_and_seconds_with_fractions() {
        assert_eq!(parse_duration("100ms"), Ok(ms(100)));
        assert_eq!(parse_duration("1s"), Ok(ms(1000)));
        assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_duration("0.3s"), Ok(ms(300)));
        assert_eq!(parse_duration(" 2.25ms "), Ok(Duration::from_micros(2250)));
        assert_eq!(parse_duration("0ms"), Ok(Duration::ZERO));
        assert_eq!(
            parse_duration("1.0000000019s"),
            Ok(ms(1000) + Duration::from_nanos(1))
        );
        assert_eq!(parse_duration("0.000001ms"), Ok(Duration::from_nanos(1)));
    }

    #[test]
    fn bad_durations_are_refused_with_an_example() {
        for bad in [
            "",
            "ms",
            "s",
            "100",
            "1m",
            "1h",
            "1us",
            "-1s",
            "+1s",
            "1.s",
            ".5s",
            "1.5.s",
            "1e3ms",
            "nans",
            "infs",
            "1 s",
            "1,5s",
            "10000000000s",
        ] {
            let err = parse_duration(bad).expect_err(bad);
            assert!(err.contains("e.g. 100ms, 1s, 1.5s"), "{bad}: {err}");
        }
    }

    #[test]
    fn stall_is_stopped_over_period() {
        assert_eq!(
            parse_stall("600ms/900ms"),
            Ok(StallSpec {
                stopped: ms(600),
                period: ms(900)
            })
        );
        assert_eq!(
            parse_stall("1s/1.5s"),
            Ok(StallSpec {
                stopped: ms(1000),
                period: ms(1500)
            })
        );
    }

    #[test]
    fn stall_needs_stopped_shorter_than_period_and_sane_bounds() {
        for (bad, says) in [
            ("600ms", "STOPPED/PERIOD"),
            ("900ms/900ms", "shorter than the period"),
            ("1s/900ms", "shorter than the period"),
            ("0ms/900ms", "at least"),
            ("1ms/5ms", "period must be in"),
            ("1s/601s", "period must be in"),
            ("600/900ms", "bad duration `600`"),
            ("600ms/", "bad duration ``"),
            ("600ms/900ms/1s", "bad duration `900ms/1s`"),
        ] {
            let err = parse_stall(bad).expect_err(bad);
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    fn spec(stopped: u64, period: u64) -> StallSpec {
        StallSpec {
            stopped: ms(stopped),
            period: ms(period),
        }
    }

    /// Most nodes stopped at once over the events before `until`.
    fn max_at_once(schedule: Schedule, nodes: usize, until: Duration) -> usize {
        let mut stopped = vec![false; nodes];
        let mut max = 0;
        for e in schedule.take_while(|e| e.at < until) {
            stopped[e.node] = e.stop;
            max = max.max(stopped.iter().filter(|&&s| s).count());
        }
        max
    }

    #[test]
    fn staggered_windows_rotate_through_the_nodes() {
        let events: Vec<Event> = Schedule::new(spec(600, 900), StallPhase::Staggered, 3)
            .take(7)
            .collect();
        let e = |at, node, stop| Event {
            at: ms(at),
            node,
            stop,
        };
        assert_eq!(
            events,
            vec![
                e(0, 0, true),
                e(300, 1, true),
                e(600, 0, false),
                e(600, 2, true),
                e(900, 1, false),
                e(900, 0, true),
                e(1200, 2, false),
            ]
        );
    }

    #[test]
    fn staggered_stops_about_n_d_over_p_nodes_at_once() {
        // 5 nodes, windows 180 ms apart: 300 ms stopped overlaps 2 windows,
        // 600 ms overlaps 4 (a majority), 100 ms never overlaps.
        for (d, want) in [(100, 1), (300, 2), (600, 4)] {
            let s = Schedule::new(spec(d, 900), StallPhase::Staggered, 5);
            assert_eq!(max_at_once(s, 5, ms(10_000)), want, "D = {d} ms");
        }
        // Windows that only touch (D = P/n) do not overlap.
        let s = Schedule::new(spec(300, 900), StallPhase::Staggered, 3);
        assert_eq!(max_at_once(s, 3, ms(10_000)), 1);
    }

    #[test]
    fn same_phase_stops_every_node_together() {
        let mut s = Schedule::new(spec(300, 900), StallPhase::Same, 3);
        let first: Vec<(u64, bool)> = s
            .by_ref()
            .take(6)
            .map(|e| (e.at.as_millis() as u64, e.stop))
            .collect();
        assert_eq!(
            first,
            vec![
                (0, true),
                (0, true),
                (0, true),
                (300, false),
                (300, false),
                (300, false)
            ]
        );
        assert_eq!(s.next().map(|e| (e.at, e.stop)), Some((ms(900), true)));
    }

    #[test]
    fn no_nodes_no_events() {
        assert_eq!(
            Schedule::new(spec(1, 10), StallPhase::Staggered, 0).next(),
            None
        );
    }

    /// The state letter of /proc/PID/stat ('T' = stopped).
    fn state(pid: u32) -> char {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // "pid (comm) S ...": the state follows the last ')'.
        stat[stat.rfind(')').unwrap() + 1..]
            .trim_start()
            .chars()
            .next()
            .unwrap()
    }

    /// Polls (bounded) until `pid`'s state is or is not 'T'.
    fn await_stopped(pid: u32, want: bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if (state(pid) == 'T') == want {
                return true;
            }
            std::thread::sleep(ms(1));
        }
        false
    }

    /// A child that does nothing; killed and reaped by the guard.
    struct Sleeper(std::process::Child);

    impl Drop for Sleeper {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn sleeper() -> Sleeper {
        Sleeper(
            std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .expect("spawn sleep"),
        )
    }

    #[test]
    fn an_early_finish_resumes_a_stopped_node() {
        let child = sleeper();
        let pid = child.0.id();
        let start = Instant::now();
        // Stopped 5 s of every 10 s, for a 20 s hold: stopped at once.
        let driver = Driver::start(
            spec(5_000, 10_000),
            StallPhase::Same,
            vec![pid],
            start,
            ms(20_000),
        )
        .unwrap();
        assert!(await_stopped(pid, true), "not stopped");
        let summary = driver.finish();
        assert_ne!(state(pid), 'T', "left stopped");
        assert_eq!((summary.stops, summary.max_stopped_at_once), (1, 1));
        assert!(start.elapsed() < Duration::from_secs(4));
    }

    #[test]
    fn the_end_of_the_hold_resumes_a_stopped_node_and_a_drop_does_too() {
        let child = sleeper();
        let pid = child.0.id();
        let start = Instant::now();
        // The hold ends 200 ms into a 5 s stop: resumed then, by the driver.
        let driver = Driver::start(
            spec(5_000, 10_000),
            StallPhase::Same,
            vec![pid],
            start,
            ms(200),
        )
        .unwrap();
        assert!(await_stopped(pid, true), "not stopped");
        assert!(
            await_stopped(pid, false),
            "not resumed at the end of the hold"
        );
        assert!(start.elapsed() >= ms(200));
        drop(driver);

        let start = Instant::now();
        let driver = Driver::start(
            spec(5_000, 10_000),
            StallPhase::Same,
            vec![pid],
            start,
            ms(20_000),
        )
        .unwrap();
        assert!(await_stopped(pid, true), "not stopped");
        drop(driver);
        assert_ne!(state(pid), 'T', "left stopped after a drop");
    }
}
