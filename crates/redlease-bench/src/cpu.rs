//! CPU time spent by the bench process and by the redis-server nodes during
//! a slice. Wall-clock rates on a small VM swing with how fast idle cores
//! wake up; CPU time per cycle does not, so it shows what the client itself
//! costs.

use std::time::Duration;

use rustix::time::{clock_gettime, ClockId};

/// CPU time used so far by this process, all threads, user + system.
pub fn process() -> Duration {
    let ts = clock_gettime(ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// CPU time used so far by the main thread of process `pid` (where
/// redis-server does all its command work), from /proc/PID/schedstat in
/// nanoseconds; `None` if it cannot be read.
pub fn main_thread(pid: u32) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    parse_schedstat(&text)
}

fn parse_schedstat(text: &str) -> Option<Duration> {
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Client and server CPU at one instant.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    client: Duration,
    servers: Option<Duration>,
}

/// Samples this process and the given redis-server processes.
pub fn sample(server_pids: &[u32]) -> Sample {
    let servers = if server_pids.is_empty() {
        None
    } else {
        server_pids
            .iter()
            .map(|&pid| main_thread(pid))
            .sum::<Option<Duration>>()
    };
    Sample {
        client: process(),
        servers,
    }
}

impl Sample {
    /// CPU used between `earlier` and `self`: (client, servers).
    pub fn since(&self, earlier: &Sample) -> (Duration, Option<Duration>) {
        let servers = match (self.servers, earlier.servers) {
            (Some(now), Some(then)) => Some(now.saturating_sub(then)),
            _ => None,
        };
        (self.client.saturating_sub(earlier.client), servers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_first_field_is_nanoseconds_on_cpu() {
        assert_eq!(
            parse_schedstat("123456789 5000 42\n"),
            Some(Duration::from_nanos(123_456_789))
        );
        assert_eq!(parse_schedstat(""), None);
    }

    #[test]
    fn own_cpu_time_advances() {
        let before = process();
        // Burn a little CPU, bounded.
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(process() > before);
    }
}
