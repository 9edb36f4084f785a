//! Two floors for the single caller's cycle (the uncontended workload),
//! measured on the same servers and in the same run as the clients:
//!
//! - **blocking**: plain's commands (`SET key token NX PX ttl` to take,
//!   the compare-and-delete `EVALSHA` to give back) over redis-rs's
//!   blocking connection, one per node, asked one node after another on
//!   the calling thread: no task and no thread between the caller and its
//!   socket. A slice runs on a thread of its own (`spawn_blocking`), so
//!   the runtime's workers stay free.
//! - **C client** ([`c_client`]): redis-benchmark with one connection
//!   (`-c 1`) on the first node, `SET NX PX` and then `EVALSHA` of the
//!   same script; a cycle is one of each, so its rate is
//!   `1 / (1/set + 1/evalsha)`: two round trips of the leanest client
//!   there is.
//!
//! Neither exists for a cluster node (`redis+cluster://`): the runner
//! leaves them out there.

use std::process::Command;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rand::Rng;
use redis::Value;
use serde_json::{json, Value as Json};

use crate::client::{key_for, BenchError, TTL};
use crate::raw::{COMPARE_AND_DELETE, COMPARE_AND_DELETE_CODE};
use crate::stats::Cycle;
use crate::workloads::Outcome;

/// Safety bound on one slice's cycles.
const MAX_CYCLES: u64 = 100_000_000;

/// Plain's lock over blocking connections.
pub struct Blocking {
    conns: Vec<Mutex<redis::Connection>>,
    quorum: usize,
    ttl_ms: u64,
}

impl Blocking {
    /// One blocking connection per node (this does I/O, and blocks).
    pub fn connect(urls: &[String]) -> Result<Blocking, BenchError> {
        let conns = urls
            .iter()
            .map(|url| {
                let conn = redis::Client::open(url.as_str())?.get_connection()?;
                Ok(Mutex::new(conn))
            })
            .collect::<Result<Vec<_>, BenchError>>()?;
        Ok(Blocking {
            quorum: conns.len() / 2 + 1,
            conns,
            ttl_ms: u64::try_from(TTL.as_millis())?,
        })
    }

    pub fn label(&self) -> &'static str {
        "blocking"
    }

    /// One measured slice of the uncontended workload on its own thread:
    /// a fresh name each cycle, taken on every node one after another
    /// (held once a quorum granted), then given back on the nodes that
    /// granted it.
    pub async fn slice(
        self: &Arc<Self>,
        duration: Duration,
        tag: &str,
    ) -> Result<Outcome, BenchError> {
        let me = self.clone();
        let prefix = format!("{tag}-w0-");
        tokio::task::spawn_blocking(move || me.cycles(duration, &prefix)).await?
    }

    fn cycles(&self, duration: Duration, prefix: &str) -> Result<Outcome, BenchError> {
        let start = Instant::now();
        let end = start + duration;
        let mut cycles = Vec::new();
        let mut granted = Vec::with_capacity(self.conns.len());
        for i in 0..MAX_CYCLES {
            if Instant::now() >= end {
                break;
            }
            let key = key_for(&format!("{prefix}{i}"));
            let token = format!("{:032x}", rand::rng().random::<u128>());
            let acquire_start = Instant::now();
            granted.clear();
            for (n, conn) in self.conns.iter().enumerate() {
                let mut conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
                let reply: Value = redis::cmd("SET")
                    .arg(&key)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(self.ttl_ms)
                    .query(&mut *conn)?;
                if matches!(reply, Value::Okay) {
                    granted.push(n);
                }
            }
            if granted.len() < self.quorum {
                return Err(format!("blocking: a fresh name {key} was refused").into());
            }
            let acquire_returned = Instant::now();
            let release_started = Instant::now();
            for &n in &granted {
                let mut conn = self.conns[n].lock().unwrap_or_else(PoisonError::into_inner);
                let deleted: i64 = COMPARE_AND_DELETE
                    .key(&key)
                    .arg(&token)
                    .invoke(&mut *conn)?;
                if deleted != 1 {
                    return Err(format!("blocking: {key} was no longer ours").into());
                }
            }
            cycles.push(Cycle {
                worker: 0,
                mode: crate::stats::LockMode::Exclusive,
                acquire_start,
                acquire_returned,
                release_started,
                release_returned: Instant::now(),
            });
        }
        let elapsed = cycles
            .last()
            .map_or(Duration::ZERO, |c| c.release_returned - start);
        Ok(Outcome {
            per_worker: vec![cycles.len() as u64],
            cycles,
            elapsed,
            final_counter: None,
            client_cpu: Duration::ZERO,
            server_cpu: None,
            served: None,
        })
    }
}

/// redis-benchmark's rates with one connection on one server.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CClient {
    /// `SET key value NX PX ttl` per second (a fresh random key each).
    pub set_per_s: f64,
    /// `EVALSHA` of the compare-and-delete per second.
    pub evalsha_per_s: f64,
}

impl CClient {
    /// One of each per cycle: `1 / (1/set + 1/evalsha)`.
    pub fn cycles_per_s(&self) -> f64 {
        if self.set_per_s > 0.0 && self.evalsha_per_s > 0.0 {
            1.0 / (1.0 / self.set_per_s + 1.0 / self.evalsha_per_s)
        } else {
            0.0
        }
    }

    pub fn json(&self) -> Json {
        json!({
            "set_per_s": self.set_per_s.round(),
            "evalsha_per_s": self.evalsha_per_s.round(),
            "cycles_per_s": self.cycles_per_s().round(),
        })
    }
}

/// Requests per redis-benchmark measurement: about a second each at the
/// rates one connection reaches on loopback.
const C_CLIENT_REQUESTS: u32 = 10_000;

/// Runs redis-benchmark (`-c 1`) against `host:port`: `SET NX PX` on
/// random keys, then `EVALSHA` of the compare-and-delete (on a key that
/// does not exist: the same script, the same `GET`, no `DEL`). Blocks for
/// a couple of seconds; an error if redis-benchmark is missing or fails.
pub fn c_client(host: &str, port: u16) -> Result<CClient, BenchError> {
    let sha = COMPARE_AND_DELETE.get_hash().to_string();
    // The script must be loaded for EVALSHA.
    let mut conn = redis::Client::open(format!("redis://{host}:{port}/"))?.get_connection()?;
    let loaded: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(COMPARE_AND_DELETE_CODE)
        .query(&mut conn)?;
    if loaded != sha {
        return Err(format!("SCRIPT LOAD gave {loaded}, expected {sha}").into());
    }
    let ttl = TTL.as_millis().to_string();
    let requests = C_CLIENT_REQUESTS.to_string();
    let rate = |args: &[&str]| -> Result<f64, BenchError> {
        let port = port.to_string();
        let mut all = vec![
            "-h", host, "-p", &port, "-c", "1", "-n", &requests, "-r", "1000000", "--csv",
        ];
        all.extend_from_slice(args);
        let out = Command::new("redis-benchmark")
            .args(&all)
            .output()
            .map_err(|e| format!("redis-benchmark: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-benchmark {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        parse_rps(&String::from_utf8_lossy(&out.stdout))
    };
    let set_per_s = rate(&["SET", "redlease-floor:__rand_int__", "v", "NX", "PX", &ttl])?;
    let evalsha_per_s = rate(&["EVALSHA", &sha, "1", "redlease-floor:__rand_int__", "t"])?;
    Ok(CClient {
        set_per_s,
        evalsha_per_s,
    })
}

/// The requests per second of redis-benchmark's `--csv` output: a header
/// line, then `"name","rps",...`.
fn parse_rps(csv: &str) -> Result<f64, BenchError> {
    csv.lines()
        .find_map(|line| {
            let mut cells = line.split(',').map(|c| c.trim_matches('"'));
            let _name = cells.next()?;
            cells.next()?.parse::<f64>().ok()
        })
        .ok_or_else(|| format!("no rate in redis-benchmark's output: {csv:?}").into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_read_from_the_first_data_line() {
        let csv = "\"test\",\"rps\",\"avg_latency_ms\"\n\"SET\",\"13513.51\",\"0.070\"\n";
        assert_eq!(parse_rps(csv).unwrap(), 13513.51);
        assert!(parse_rps("\"test\",\"rps\"\n").is_err());
        assert!(parse_rps("").is_err());
    }

    #[test]
    fn a_cycle_is_one_set_and_one_evalsha() {
        let c = CClient {
            set_per_s: 10_000.0,
            evalsha_per_s: 10_000.0,
        };
        assert!((c.cycles_per_s() - 5_000.0).abs() < 1e-9);
        let none = CClient {
            set_per_s: 0.0,
            evalsha_per_s: 10_000.0,
        };
        assert_eq!(none.cycles_per_s(), 0.0);
    }
}
