//! What the demo shows: a live progress line, and the summary at the end.

use std::io::Write;
use std::time::{Duration, Instant};

use super::worker::Record;
use crate::duration;

/// The `q`-quantile (0..=1) of sorted samples, nearest rank.
pub fn percentile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

fn latency(sorted: &[u64], q: f64) -> String {
    percentile(sorted, q).map_or_else(
        || "-".into(),
        |us| duration::show_ms(Duration::from_micros(us)),
    )
}

/// How far back the live figures look.
const WINDOW: Duration = Duration::from_secs(1);

/// p50, p90, p99 and max of unsorted samples.
fn percentiles(samples: &[u64]) -> String {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    format!(
        "p50 {}  p90 {}  p99 {}  max {}",
        latency(&sorted, 0.50),
        latency(&sorted, 0.90),
        latency(&sorted, 0.99),
        latency(&sorted, 1.0)
    )
}

/// The live view: one line rewritten in place on a terminal, or one line
/// per tick in a log. Rates and latencies cover about the last second, so
/// the change when nodes die shows at once.
pub struct Progress {
    tty: bool,
    started: Instant,
    /// Start of the current window: when, handoffs by then, and how many
    /// latencies had been recorded.
    window: (Instant, u64, usize),
    /// A line is open (no newline yet) on the terminal.
    open: bool,
}

impl Progress {
    pub fn new(tty: bool, started: Instant) -> Progress {
        Progress {
            tty,
            started,
            window: (started, 0, 0),
            open: false,
        }
    }

    pub fn tick(&mut self, record: &Record, nodes_up: usize, nodes: usize, counter: u64) {
        let now = Instant::now();
        let (at, handoffs, seen) = self.window;
        let rate = (record.handoffs - handoffs) as f64 / (now - at).as_secs_f64().max(1e-3);
        let mut recent = record.latencies_us[seen.min(record.latencies_us.len())..].to_vec();
        recent.sort_unstable();
        if now - at >= WINDOW {
            self.window = (now, record.handoffs, record.latencies_us.len());
        }
        let line = format!(
            "{:>6}  nodes up {nodes_up}/{nodes}  sections {}  lost updates {}  | last second: \
             {rate:.0} handoffs/s, latency p50 {} p99 {}",
            duration::show(now - self.started),
            record.sections,
            record.sections.saturating_sub(counter),
            latency(&recent, 0.50),
            latency(&recent, 0.99),
        );
        let mut out = std::io::stdout().lock();
        if self.tty {
            // \x1b[K clears what a longer previous line left behind.
            let _ = write!(out, "\r{line}\x1b[K");
            self.open = true;
        } else {
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
    }

    /// Prints an event on its own line, below the live one.
    pub fn event(&mut self, text: &str) {
        self.close();
        println!(
            "{:>6}  {text}",
            duration::show(Instant::now() - self.started)
        );
    }

    /// Ends the live line, before other output.
    pub fn close(&mut self) {
        if self.open {
            println!();
            self.open = false;
        }
    }
}

/// What the summary says, computed from the record.
pub struct Summary {
    pub elapsed: Duration,
    pub workers: usize,
    pub nodes: usize,
    pub quorum: usize,
    pub killed: usize,
    pub counter: u64,
    pub record: Record,
}

impl Summary {
    pub fn lost_updates(&self) -> u64 {
        self.record.sections.saturating_sub(self.counter)
    }

    /// The lock was exclusive throughout and worked on after the failure.
    pub fn passed(&self) -> bool {
        self.lost_updates() == 0
            && self.record.overlaps == 0
            && (self.killed == 0 || self.record.sections_after_failure > 0)
    }

    pub fn render(&self) -> String {
        let r = &self.record;
        let secs = self.elapsed.as_secs_f64().max(1e-3);
        let before = r.sections - r.sections_after_failure;
        let mut lines = vec![
            format!(
                "Summary: {} workers, {} nodes (quorum {}), {}",
                self.workers,
                self.nodes,
                self.quorum,
                duration::show(self.elapsed)
            ),
            format!(
                "  critical sections     {} ({before} with all {} nodes, {} after the failure)",
                r.sections, self.nodes, r.sections_after_failure
            ),
            format!(
                "  lost updates          {} (the counter reads {}, one per section)",
                self.lost_updates(),
                self.counter
            ),
            format!("  overlapping holders   {}", r.overlaps),
            format!(
                "  handoffs              {} ({:.0}/s)",
                r.handoffs,
                r.handoffs as f64 / secs
            ),
            format!("  handoff latency       {}", percentiles(&r.latencies_us)),
        ];
        if let Some(split) = r.latencies_before_failure {
            let (before, after) = r.latencies_us.split_at(split.min(r.latencies_us.len()));
            lines.push(format!(
                "    with all {} nodes    {}",
                self.nodes,
                percentiles(before)
            ));
            lines.push(format!("    after the failure   {}", percentiles(after)));
        }
        let survived = if self.killed == 0 {
            "none (no node was killed)".to_string()
        } else if r.sections_after_failure > 0 {
            format!(
                "{} of {} nodes killed; the lock went on working with the other {}",
                self.killed,
                self.nodes,
                self.nodes - self.killed
            )
        } else {
            format!(
                "{} killed, and no section completed afterwards",
                self.killed
            )
        };
        lines.push(format!("  node failures survived {survived}"));
        lines.push(format!("  lock errors           {}", r.errors));
        if let Some(last) = &r.last_error {
            // Expected around the kill: a lease granted by a quorum that
            // included the killed nodes cannot confirm its release.
            lines.push(format!(
                "    (an error is expected around the kill, when a lease's quorum included the \
                 killed nodes; its keys expire by the {} TTL)\n    last: {last}",
                duration::show(super::worker::TTL)
            ));
        }
        lines.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), Some(50));
        assert_eq!(percentile(&v, 0.99), Some(99));
        assert_eq!(percentile(&v, 1.0), Some(100));
        assert_eq!(percentile(&v, 0.0), Some(1));
        assert_eq!(percentile(&[7], 0.9), Some(7));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn a_lost_update_fails_the_summary() {
        let mut record = Record::default();
        record.sections = 10;
        record.sections_after_failure = 4;
        let mut summary = Summary {
            elapsed: Duration::from_secs(2),
            workers: 2,
            nodes: 5,
            quorum: 3,
            killed: 2,
            counter: 10,
            record,
        };
        assert!(summary.passed());
        assert!(summary.render().contains("lost updates          0"));
        summary.counter = 9;
        assert!(!summary.passed());
        assert!(summary.render().contains("lost updates          1"));
    }
}
