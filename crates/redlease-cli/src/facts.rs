//! What `doctor` learns about one node: latency, INFO, the settings that
//! decide whether a lock key can vanish, its clock, and whether Lua runs.
//! Only reads; judging is `doctor`'s job.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::InfoDict;

use crate::probe::Probe;

/// PINGs per node; the median is reported, so one hiccup does not count.
const PINGS: usize = 5;

/// Settings read with CONFIG GET (one at a time: Redis before 7 takes one).
const SETTINGS: [&str; 4] = ["maxmemory-policy", "maxmemory", "appendonly", "appendfsync"];

pub struct Facts {
    /// Median PING round trip.
    pub latency: Duration,
    pub info: Result<InfoDict, String>,
    /// CONFIG GET results; managed services often disable CONFIG.
    pub config: Result<HashMap<String, String>, String>,
    pub clock: Result<Clock, String>,
    /// Whether `EVAL` works: every lock operation is a Lua script.
    pub scripting: Result<(), String>,
}

/// The node's clock against ours.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// Node clock minus local clock, in microseconds, at mid round trip.
    pub offset_us: i64,
    /// Half the round trip: how far off the estimate may be.
    pub uncertainty: Duration,
}

impl Facts {
    pub fn info(&self, field: &str) -> Option<String> {
        self.info.as_ref().ok()?.get(field)
    }

    pub fn setting(&self, name: &str) -> Option<&str> {
        self.config.as_ref().ok()?.get(name).map(String::as_str)
    }
}

/// Connects and reads everything; `Err` only when the node cannot be
/// reached or does not answer PING.
pub async fn gather(url: &str, timeout: Duration) -> Result<Facts, String> {
    let mut probe = Probe::connect(url, timeout).await?;
    let mut rtts = Vec::with_capacity(PINGS);
    for _ in 0..PINGS {
        let sent = Instant::now();
        let _: String = probe.query(&redis::cmd("PING")).await?;
        rtts.push(sent.elapsed());
    }
    rtts.sort();
    let latency = rtts[PINGS / 2];

    let info = probe.query::<InfoDict>(&redis::cmd("INFO")).await;
    let config = read_config(&mut probe).await;
    let clock = read_clock(&mut probe).await;
    let scripting = probe
        .query::<i64>(redis::cmd("EVAL").arg("return 1").arg(0))
        .await
        .map(drop);
    Ok(Facts {
        latency,
        info,
        config,
        clock,
        scripting,
    })
}

async fn read_config(probe: &mut Probe) -> Result<HashMap<String, String>, String> {
    let mut all = HashMap::new();
    for name in SETTINGS {
        let got: HashMap<String, String> = probe
            .query(redis::cmd("CONFIG").arg("GET").arg(name))
            .await?;
        all.extend(got);
    }
    Ok(all)
}

async fn read_clock(probe: &mut Probe) -> Result<Clock, String> {
    let local_before = SystemTime::now();
    let sent = Instant::now();
    let (secs, micros): (u64, u64) = probe.query(&redis::cmd("TIME")).await?;
    let rtt = sent.elapsed();
    let local_mid = local_before + rtt / 2;
    let to_us = |t: SystemTime| -> i64 {
        t.duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
    };
    let node_us = i64::try_from(secs)
        .unwrap_or(i64::MAX / 1_000_000)
        .saturating_mul(1_000_000)
        .saturating_add(i64::try_from(micros).unwrap_or(0));
    Ok(Clock {
        offset_us: node_us.saturating_sub(to_us(local_mid)),
        uncertainty: rtt / 2,
    })
}
