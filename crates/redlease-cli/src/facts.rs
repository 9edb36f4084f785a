//! What `doctor` learns about one node: latency, which server it is, INFO,
//! the settings that decide whether a lock key can vanish, its clock, and
//! whether Lua runs. Only reads; judging is `doctor`'s job.
//!
//! A least-privilege user (docs/deployments.md, "ACL: the least privilege") may not run
//! PING, INFO or CONFIG GET: each read keeps its own [`Failure`], so that
//! doctor says which checks it could not do and does the others.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{ConnectionInfo, InfoDict, Value};
use redlease::Capabilities;

use crate::probe::{Failure, Probe};
use crate::rights;

/// PINGs per node; the median is reported, so one hiccup does not count.
const PINGS: usize = 5;

/// Settings read with CONFIG GET (one at a time: Redis before 7 takes one).
const SETTINGS: [&str; 4] = ["maxmemory-policy", "maxmemory", "appendonly", "appendfsync"];

pub struct Facts {
    /// Median PING round trip.
    pub latency: Duration,
    /// Whether PING itself was refused (ACL); the refusal's round trip
    /// was measured instead.
    pub ping_denied: bool,
    /// The server's own word on what it is, from HELLO (Redis 6.0 and
    /// later, and Valkey; every user may run it).
    pub hello: Result<Hello, Failure>,
    pub info: Result<InfoDict, Failure>,
    /// What INFO says the server is and can do.
    pub info_capabilities: Option<Capabilities>,
    /// CONFIG GET results; managed services often disable CONFIG.
    pub config: Result<HashMap<String, String>, Failure>,
    pub clock: Result<Clock, Failure>,
    /// Whether `EVAL` works: every lock operation is a Lua script.
    pub scripting: Result<(), Failure>,
    /// Whether `DELIFEQ` works, on a server that has it (Valkey 9.0 and
    /// later), with which the library releases a lock in one command;
    /// `None` on a server without it.
    pub delifeq: Option<Result<(), Failure>>,
    /// Which of the commands redlease sends this user may run, tried on
    /// `key` (see [`rights::try_all`]).
    pub rights: rights::Tried,
    /// The key the commands (and `DELIFEQ`) were tried on: never a lock's
    /// (no braces); `DELIFEQ` compares it with a value no token has, so
    /// nothing is deleted.
    pub probe_key: String,
}

/// What HELLO tells of the server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hello {
    /// `redis`, `valkey`, ...
    pub server: Option<String>,
    pub version: Option<String>,
    /// `standalone`, `cluster` or `sentinel`.
    pub mode: Option<String>,
    /// `master` or `replica`.
    pub role: Option<String>,
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

    /// The server's kind, version and what it can do: HELLO's `server`
    /// and `version` with INFO's `redis_version`, or else INFO alone.
    pub fn server(&self) -> Option<Capabilities> {
        let hello = self.hello.as_ref().ok();
        match hello.and_then(|h| Some((h.server.as_deref()?, h.version.as_deref()?))) {
            Some((server, version)) => Some(Capabilities::new(
                server,
                version,
                self.info("redis_version").as_deref(),
            )),
            None => self.info_capabilities.clone(),
        }
    }

    /// `standalone`, `cluster` or `sentinel`, by INFO or else HELLO.
    pub fn mode(&self) -> Option<String> {
        self.info("redis_mode")
            .or_else(|| self.hello.as_ref().ok()?.mode.clone())
    }

    /// Whether the server speaks RESP3, which release notifications need:
    /// it does if it knows HELLO (both came with Redis 6.0). `None`: could
    /// not tell (HELLO failed otherwise).
    pub fn resp3(&self) -> Option<bool> {
        match &self.hello {
            Ok(_) => Some(true),
            Err(Failure::Unknown(_)) => Some(false),
            Err(_) => None,
        }
    }
}

/// Connects and reads everything; `Err` only when the node cannot be
/// reached or does not answer PING (a PING refused by ACL is an answer).
pub async fn gather(
    server: ConnectionInfo,
    timeout: Duration,
    tls: Option<&redis::TlsCertificates>,
    plan: &rights::Plan,
) -> Result<Facts, Failure> {
    let mut probe = Probe::connect_to(server, timeout, tls).await?;
    let mut rtts = Vec::with_capacity(PINGS);
    let mut ping_denied = false;
    for _ in 0..PINGS {
        let sent = Instant::now();
        match probe.query::<String>(&redis::cmd("PING")).await {
            Ok(_) => {}
            Err(Failure::Denied(_)) => ping_denied = true,
            Err(e) => return Err(e),
        }
        rtts.push(sent.elapsed());
    }
    rtts.sort();
    let latency = rtts[PINGS / 2];

    let hello = read_hello(&mut probe).await;
    let info_text = probe.query::<String>(&redis::cmd("INFO")).await;
    let info_capabilities = info_text
        .as_ref()
        .ok()
        .and_then(|text| Capabilities::from_info(text));
    let info = info_text.map(|text| InfoDict::new(&text));
    let config = read_config(&mut probe).await;
    let clock = read_clock(&mut probe).await;
    let scripting = probe
        .query::<i64>(redis::cmd("EVAL").arg("return 1").arg(0))
        .await
        .map(drop);
    let rights = rights::try_all(&mut probe, &plan.needs, &plan.key, &plan.channel).await;
    let mut facts = Facts {
        latency,
        ping_denied,
        hello,
        info,
        info_capabilities,
        config,
        clock,
        scripting,
        delifeq: None,
        rights,
        probe_key: plan.key.clone(),
    };
    if facts.server().is_some_and(|s| s.delifeq()) {
        let mut cmd = redis::cmd("DELIFEQ");
        cmd.arg(&plan.key).arg("not-a-token");
        facts.delifeq = Some(probe.query::<i64>(&cmd).await.map(drop));
    }
    Ok(facts)
}

/// `HELLO` with the connection's own protocol version, which changes
/// nothing and answers the server's name, version, mode and role (Redis
/// 6.0 needs the version; later ones take a bare HELLO too).
async fn read_hello(probe: &mut Probe) -> Result<Hello, Failure> {
    let version = if probe.resp3() { 3 } else { 2 };
    let reply: Value = probe.query(redis::cmd("HELLO").arg(version)).await?;
    Ok(parse_hello(&reply))
}

/// A reply that is a map: a RESP3 map, or under RESP2 a flat array of
/// pairs.
pub fn pairs(reply: &Value) -> Vec<(&Value, &Value)> {
    match reply {
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
        Value::Array(items) => items
            .chunks_exact(2)
            .map(|pair| (&pair[0], &pair[1]))
            .collect(),
        _ => Vec::new(),
    }
}

/// A reply that is text, as a string.
pub fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) | Value::VerbatimString { text: s, .. } => Some(s.clone()),
        _ => None,
    }
}

/// A reply that is a number, or text that is one.
pub fn number(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        other => text(other)?.parse().ok(),
    }
}

/// HELLO's map.
fn parse_hello(reply: &Value) -> Hello {
    let mut hello = Hello::default();
    for (key, value) in pairs(reply) {
        let slot = match text(key).as_deref() {
            Some("server") => &mut hello.server,
            Some("version") => &mut hello.version,
            Some("mode") => &mut hello.mode,
            Some("role") => &mut hello.role,
            _ => continue,
        };
        *slot = text(value);
    }
    hello
}

async fn read_config(probe: &mut Probe) -> Result<HashMap<String, String>, Failure> {
    let mut all = HashMap::new();
    for name in SETTINGS {
        let got: HashMap<String, String> = probe
            .query(redis::cmd("CONFIG").arg("GET").arg(name))
            .await?;
        all.extend(got);
    }
    Ok(all)
}

async fn read_clock(probe: &mut Probe) -> Result<Clock, Failure> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn hello_is_read_from_a_resp2_array_and_a_resp3_map() {
        let fields = [
            ("server", bulk("valkey")),
            ("version", bulk("9.1.2")),
            ("proto", Value::Int(2)),
            ("mode", bulk("standalone")),
            ("role", bulk("master")),
            ("modules", Value::Array(vec![])),
        ];
        let want = Hello {
            server: Some("valkey".into()),
            version: Some("9.1.2".into()),
            mode: Some("standalone".into()),
            role: Some("master".into()),
        };
        let flat = Value::Array(
            fields
                .iter()
                .flat_map(|(k, v)| [bulk(k), v.clone()])
                .collect(),
        );
        assert_eq!(parse_hello(&flat), want);
        let map = Value::Map(fields.iter().map(|(k, v)| (bulk(k), v.clone())).collect());
        assert_eq!(parse_hello(&map), want);
    }

    fn facts(hello: Result<Hello, Failure>, info: &str) -> Facts {
        let (info, info_capabilities) = if info.is_empty() {
            (Err(Failure::Denied("Redis replied NOPERM".into())), None)
        } else {
            (Ok(InfoDict::new(info)), Capabilities::from_info(info))
        };
        Facts {
            latency: Duration::ZERO,
            ping_denied: false,
            hello,
            info,
            info_capabilities,
            config: Err(Failure::Failed("not asked".into())),
            clock: Err(Failure::Failed("not asked".into())),
            scripting: Ok(()),
            delifeq: None,
            rights: rights::Tried::default(),
            probe_key: String::new(),
        }
    }

    #[test]
    fn the_server_is_named_by_hello_or_else_by_info() {
        let valkey_info = "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n";
        let hello = Hello {
            server: Some("valkey".into()),
            version: Some("9.1.2".into()),
            ..Hello::default()
        };
        let valkey = Capabilities::new("valkey", "9.1.2", Some("7.2.4"));
        assert_eq!(
            facts(Ok(hello.clone()), valkey_info).server(),
            Some(valkey.clone())
        );
        assert!(valkey.delifeq());
        let unknown = Err(Failure::Unknown("unknown command".into()));
        assert_eq!(facts(unknown.clone(), valkey_info).server(), Some(valkey));
        // INFO refused (a least-privilege user): HELLO alone.
        let hello_alone = facts(Ok(hello), "").server().unwrap();
        assert_eq!(hello_alone.redis_version(), None);
        assert!(hello_alone.delifeq());
        // Redis before 6.0: no HELLO, no server_name.
        let old = facts(unknown, "redis_version:5.0.7\r\nredis_mode:standalone\r\n");
        assert_eq!(
            old.server(),
            Some(Capabilities::new("redis", "5.0.7", None))
        );
        assert!(!old.server().unwrap().resp3());
        assert_eq!(old.resp3(), Some(false));
    }
}
