//! The `renewal` workload: many leases held at once under automatic
//! renewal, to show what keeping them alive costs the client (CPU, memory,
//! round trips) and that none is lost; with `--stall`, how many are lost
//! (and why) while the nodes are stopped and resumed on a schedule.

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::json;

use crate::client::BenchError;
use crate::cpu;
use crate::stall::{self, StallPhase, StallSpec, StallSummary};

/// TTL of every lease: short, so renewals are frequent.
pub const TTL: Duration = Duration::from_secs(3);
/// How long taking one lease may keep retrying.
const ACQUIRE_WAIT: Duration = Duration::from_secs(30);
/// Acquisitions in flight at once while taking the leases.
const CONCURRENT: usize = 200;

/// A stall schedule to play on the nodes while the leases are held.
pub struct Stall {
    pub spec: StallSpec,
    pub phase: StallPhase,
    /// The bench's own redis-server processes, alive (not killed, so not
    /// reaped) for the whole run.
    pub pids: Vec<u32>,
}

/// Leases lost by the end of the hold, by [`redlease::LostReason`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LostByReason {
    pub refused: usize,
    pub expired: usize,
    pub node_errors: usize,
    /// A reason added to the (non-exhaustive) enum after this bench.
    pub other: usize,
}

impl LostByReason {
    pub fn count(reasons: impl IntoIterator<Item = Option<redlease::LostReason>>) -> Self {
        let mut by = LostByReason::default();
        for why in reasons.into_iter().flatten() {
            match why {
                redlease::LostReason::Refused => by.refused += 1,
                redlease::LostReason::Expired => by.expired += 1,
                redlease::LostReason::NodeErrors => by.node_errors += 1,
                _ => by.other += 1,
            }
        }
        by
    }

    pub fn total(&self) -> usize {
        self.refused + self.expired + self.node_errors + self.other
    }

    pub fn json(&self) -> serde_json::Value {
        json!({
            "refused": self.refused,
            "expired": self.expired,
            "node_errors": self.node_errors,
            "other": self.other,
        })
    }
}

/// What one renewal run measured.
pub struct RenewalReport {
    pub leases: usize,
    pub nodes: usize,
    pub seconds: f64,
    pub lost: usize,
    pub lost_by_reason: LostByReason,
    pub round_trips: u64,
    /// Renewal batches abandoned during the hold (node did not answer in
    /// time).
    pub abandoned: u64,
    pub cpu: Duration,
    pub peak_rss_mb: f64,
    /// What the stall driver did, if `--stall` was given.
    pub stall: Option<StallSummary>,
}

impl RenewalReport {
    pub fn round_trips_per_s(&self) -> f64 {
        self.round_trips as f64 / self.seconds
    }

    /// Share of one core the process used while holding.
    pub fn core_share(&self) -> f64 {
        self.cpu.as_secs_f64() / self.seconds
    }

    pub fn table(&self) -> String {
        let by = &self.lost_by_reason;
        let other = if by.other > 0 {
            format!(", other {}", by.other)
        } else {
            String::new()
        };
        format!(
            "workload  nodes  leases  seconds  lost  renew round trips/s  cpu_s  core share  peak RSS MB\n\
             renewal   {:>5}  {:>6}  {:>7.1}  {:>4}  {:>19.1}  {:>5.2}  {:>9.2}%  {:>11.1}\n\
             {}\n\
             lost by reason: refused {}, expired {}, node errors {}{other}; \
             abandoned renewal batches: {}\n\
             target (goal, not assert): {} leases on {} nodes <= 5% of one core and <= 50 MB: {}\n",
            self.nodes,
            self.leases,
            self.seconds,
            self.lost,
            self.round_trips_per_s(),
            self.cpu.as_secs_f64(),
            100.0 * self.core_share(),
            self.peak_rss_mb,
            self.stall
                .as_ref()
                .map_or_else(|| "stall: none".to_string(), |s| s.line(self.nodes)),
            by.refused,
            by.expired,
            by.node_errors,
            self.abandoned,
            self.leases,
            self.nodes,
            if self.core_share() <= 0.05 && self.peak_rss_mb <= 50.0 {
                "met"
            } else {
                "MISSED"
            }
        )
    }

    pub fn json(&self) -> serde_json::Value {
        json!({
            "workload": "renewal",
            "leases": self.leases,
            "nodes": self.nodes,
            "seconds": self.seconds,
            "lost": self.lost,
            "lost_by_reason": self.lost_by_reason.json(),
            "abandoned_batches": self.abandoned,
            "stall": self.stall.as_ref().map(StallSummary::json),
            "renew_round_trips_per_s": self.round_trips_per_s(),
            "cpu_s": self.cpu.as_secs_f64(),
            "core_share": self.core_share(),
            "peak_rss_mb": self.peak_rss_mb,
        })
    }
}

/// Takes `leases` locks kept alive, holds them for `hold` (playing `stall`
/// on the nodes meanwhile, if given: never while acquiring), then counts
/// those lost and releases them. CPU, round trips and abandoned batches
/// count the holding only; peak RSS is the whole process's high-water mark.
pub async fn run(
    urls: &[String],
    leases: usize,
    hold: Duration,
    tag: &str,
    stall: Option<Stall>,
) -> Result<RenewalReport, BenchError> {
    // Brand-new servers: see client.rs.
    let locker = redlease::Locker::builder(urls)
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .ttl(TTL)
        .build()?;
    let mut held = Vec::with_capacity(leases);
    let names: Vec<String> = (0..leases).map(|i| format!("{tag}-{i}")).collect();
    for chunk in names.chunks(CONCURRENT) {
        let batch = join_all(
            chunk
                .iter()
                // `lock` with a bound, not `try_lock`: on a busy machine
                // some acquisitions time out, and the workload measures
                // holding, not taking.
                .map(|name| {
                    locker
                        .lock(name.as_str())
                        .wait(ACQUIRE_WAIT)
                        .keep_alive()
                        .into_future()
                }),
        )
        .await;
        for lease in batch {
            held.push(lease?);
        }
    }
    let before = locker.admin().renewal_stats();
    let cpu_before = cpu::process();
    let started = Instant::now();
    // Dropped (every node resumed, thread joined) on any way out of here.
    let driver = stall
        .map(|s| stall::Driver::start(s.spec, s.phase, s.pids, started, hold))
        .transpose()?;
    tokio::time::sleep(hold).await;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu::process().saturating_sub(cpu_before);
    let after = locker.admin().renewal_stats();
    let round_trips = after.round_trips - before.round_trips;
    let abandoned = after.abandoned.saturating_sub(before.abandoned);
    // Ends the schedule (it ends by itself at the hold's end too) and
    // resumes every node, before the leases are counted and released.
    let stall = driver.map(stall::Driver::finish);
    let lost_by_reason = LostByReason::count(held.iter().map(|l| l.lost_reason()));
    let lost = lost_by_reason.total();
    let peak_rss_mb = peak_rss_kb().map_or(f64::NAN, |kb| kb as f64 / 1024.0);
    // Give the locks back, a chunk at a time. A lost lease reports
    // NotHeld here; it was already counted.
    let mut held = held.into_iter().peekable();
    while held.peek().is_some() {
        let chunk: Vec<_> = held.by_ref().take(CONCURRENT).collect();
        join_all(chunk.into_iter().map(|lease| lease.release())).await;
    }
    Ok(RenewalReport {
        leases,
        nodes: urls.len(),
        seconds,
        lost,
        lost_by_reason,
        round_trips,
        abandoned,
        cpu,
        peak_rss_mb,
        stall,
    })
}

/// The process's peak resident set size (VmHWM) in kB.
fn peak_rss_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_leases_are_counted_by_reason() {
        use redlease::LostReason::*;
        let by = LostByReason::count([
            None,
            Some(Expired),
            Some(Refused),
            Some(Expired),
            None,
            Some(NodeErrors),
        ]);
        assert_eq!(
            by,
            LostByReason {
                refused: 1,
                expired: 2,
                node_errors: 1,
                other: 0
            }
        );
        assert_eq!(by.total(), 4);
        assert_eq!(
            by.json(),
            json!({"refused": 1, "expired": 2, "node_errors": 1, "other": 0})
        );
    }

    #[test]
    fn peak_rss_is_readable() {
        assert!(peak_rss_kb().is_some_and(|kb| kb > 0));
    }
}
