//! The `renewal` workload: many leases held at once under automatic
//! renewal, to show what keeping them alive costs the client (CPU, memory,
//! round trips) and that none is lost.

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::json;

use crate::client::BenchError;
use crate::cpu;

/// TTL of every lease: short, so renewals are frequent.
pub const TTL: Duration = Duration::from_secs(3);
/// Acquisitions in flight at once while taking the leases.
const CONCURRENT: usize = 200;

/// What one renewal run measured.
pub struct RenewalReport {
    pub leases: usize,
    pub nodes: usize,
    pub seconds: f64,
    pub lost: usize,
    pub round_trips: u64,
    pub cpu: Duration,
    pub peak_rss_mb: f64,
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
        format!(
            "workload  nodes  leases  seconds  lost  renew round trips/s  cpu_s  core share  peak RSS MB\n\
             renewal   {:>5}  {:>6}  {:>7.1}  {:>4}  {:>19.1}  {:>5.2}  {:>9.2}%  {:>11.1}\n\
             target (goal, not assert): {} leases on {} nodes <= 5% of one core and <= 50 MB: {}\n",
            self.nodes,
            self.leases,
            self.seconds,
            self.lost,
            self.round_trips_per_s(),
            self.cpu.as_secs_f64(),
            100.0 * self.core_share(),
            self.peak_rss_mb,
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
            "renew_round_trips_per_s": self.round_trips_per_s(),
            "cpu_s": self.cpu.as_secs_f64(),
            "core_share": self.core_share(),
            "peak_rss_mb": self.peak_rss_mb,
        })
    }
}

/// Takes `leases` locks kept alive, holds them for `hold`, then checks that
/// none was lost and releases them. CPU and round trips count the holding
/// only; peak RSS is the whole process's high-water mark.
pub async fn run(
    urls: &[String],
    leases: usize,
    hold: Duration,
    tag: &str,
) -> Result<RenewalReport, BenchError> {
    let locker = redlease::Locker::builder(urls).ttl(TTL).build()?;
    let mut held = Vec::with_capacity(leases);
    let names: Vec<String> = (0..leases).map(|i| format!("{tag}-{i}")).collect();
    for chunk in names.chunks(CONCURRENT) {
        let batch = join_all(
            chunk
                .iter()
                .map(|name| locker.try_lock(name.as_str()).keep_alive().into_future()),
        )
        .await;
        for lease in batch {
            held.push(lease?);
        }
    }
    let before = locker.renewal_stats();
    let cpu_before = cpu::process();
    let started = Instant::now();
    tokio::time::sleep(hold).await;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu::process().saturating_sub(cpu_before);
    let round_trips = locker.renewal_stats().round_trips - before.round_trips;
    let lost = held.iter().filter(|l| l.is_lost()).count();
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
        round_trips,
        cpu,
        peak_rss_mb,
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
    fn peak_rss_is_readable() {
        assert!(peak_rss_kb().is_some_and(|kb| kb > 0));
    }
}
