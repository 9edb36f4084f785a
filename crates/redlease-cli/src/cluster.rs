//! What `doctor` learns about a Redis Cluster given as one node
//! (`redis+cluster://`): which seeds answer, `CLUSTER INFO` (its state and
//! slot coverage) and its shards, each a primary with its replicas, from
//! `CLUSTER SHARDS` (Redis 7 and later) or else `CLUSTER SLOTS`. Only
//! reads, each bounded by the timeout; judging is `doctor`'s job.

use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, InfoDict, IntoConnectionInfo, Value};

use crate::facts::{number, pairs, text};
use crate::probe::{Failure, Probe};

pub struct ClusterFacts {
    /// The seed that was asked (`host:port`): the first that answered.
    pub seed: String,
    /// How many seeds the URL lists.
    pub seeds: usize,
    /// Seeds that could not be reached, and why.
    pub seeds_down: Vec<(String, String)>,
    /// `CLUSTER INFO`.
    pub info: Result<InfoDict, Failure>,
    pub shards: Result<Shards, Failure>,
}

/// The cluster's shards as one seed sees them.
pub struct Shards {
    /// `CLUSTER SHARDS` or `CLUSTER SLOTS`.
    pub source: &'static str,
    pub list: Vec<Shard>,
}

/// A primary, the slots it serves, and its replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    pub primary: Member,
    pub replicas: Vec<Member>,
    pub slots: u32,
}

/// A server of the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub host: String,
    pub port: u16,
    /// `online`, `failed`, `loading` (CLUSTER SHARDS); `None` from
    /// CLUSTER SLOTS, which does not tell.
    pub health: Option<String>,
}

impl Member {
    pub fn addr(&self) -> String {
        if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl ClusterFacts {
    pub fn info(&self, field: &str) -> Option<String> {
        self.info.as_ref().ok()?.get(field)
    }
}

/// The connection settings of `seed` (a `redis://` URL with the node URL's
/// credentials) pointed at another server of the same cluster.
pub fn member_info(seed: &str, host: &str, port: u16) -> Option<ConnectionInfo> {
    let info = seed.into_connection_info().ok()?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let addr = match info.addr().clone() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure,
            tls_params,
        },
        _ => ConnectionAddr::Tcp(host, port),
    };
    Some(info.set_addr(addr))
}

/// Connects to every seed at once, and asks the first (in the URL's order)
/// that answered. `Err`: no seed answered (each one's reason).
pub async fn gather(
    seeds: &[String],
    timeout: Duration,
    tls: Option<&redis::TlsCertificates>,
) -> Result<ClusterFacts, Failure> {
    let tries: Vec<_> = seeds
        .iter()
        .map(|seed| {
            let (seed, tls) = (seed.clone(), tls.cloned());
            tokio::spawn(async move { Probe::connect(&seed, timeout, tls.as_ref()).await })
        })
        .collect();
    let mut asked = None;
    let mut seeds_down = Vec::new();
    for (seed, attempt) in seeds.iter().zip(tries) {
        let addr = host_of(seed);
        match attempt
            .await
            .unwrap_or_else(|e| Err(Failure::Failed(format!("internal error: {e}"))))
        {
            Ok(probe) if asked.is_none() => asked = Some((addr, probe)),
            Ok(_) => {}
            Err(e) => seeds_down.push((addr, e)),
        }
    }
    let Some((seed, mut probe)) = asked else {
        let why: Vec<String> = seeds_down
            .iter()
            .map(|(seed, why)| format!("{seed}: {why}"))
            .collect();
        let why = format!("no seed answered ({})", why.join("; "));
        // Every seed refused the handshake: the fix is the TLS settings.
        let tls =
            !seeds_down.is_empty() && seeds_down.iter().all(|(_, e)| matches!(e, Failure::Tls(_)));
        return Err(if tls {
            Failure::Tls(why)
        } else {
            Failure::Failed(why)
        });
    };
    let info = probe
        .query::<InfoDict>(redis::cmd("CLUSTER").arg("INFO"))
        .await;
    // The seed's own host stands in for members that do not know their
    // address yet.
    let (seed_host, _) = split_host_port(&seed);
    let shards = match probe
        .query::<Value>(redis::cmd("CLUSTER").arg("SHARDS"))
        .await
    {
        Ok(reply) => Ok(Shards {
            source: "CLUSTER SHARDS",
            list: parse_shards(&reply, seed_host, seeds[0].starts_with("rediss://")),
        }),
        // Before Redis 7, or refused: CLUSTER SLOTS (which redis-rs's
        // cluster client reads too).
        Err(_) => probe
            .query::<Value>(redis::cmd("CLUSTER").arg("SLOTS"))
            .await
            .map(|reply| Shards {
                source: "CLUSTER SLOTS",
                list: parse_slots(&reply, seed_host),
            }),
    };
    Ok(ClusterFacts {
        seed,
        seeds: seeds.len(),
        seeds_down: seeds_down
            .into_iter()
            .map(|(seed, e)| (seed, e.to_string()))
            .collect(),
        info,
        shards,
    })
}

/// `host:port` of a seed URL, without its scheme and credentials.
fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.rsplit_once('@')
        .map_or(rest, |(_, hosts)| hosts)
        .to_string()
}

fn split_host_port(addr: &str) -> (&str, &str) {
    addr.rsplit_once(':').unwrap_or((addr, ""))
}

/// A member's host: its endpoint (what clients are told to use), else its
/// IP, else (a member that does not know its own address yet) the seed's.
fn pick_host(endpoint: Option<String>, ip: Option<String>, seed_host: &str) -> String {
    [endpoint, ip]
        .into_iter()
        .flatten()
        .find(|h| !h.is_empty() && h != "?")
        .unwrap_or_else(|| seed_host.to_string())
}

/// `CLUSTER SHARDS`: per shard a map with `slots` (start, end, ...) and
/// `nodes` (maps with `ip`, `endpoint`, `port`, `tls-port`, `role`,
/// `health`).
fn parse_shards(reply: &Value, seed_host: &str, tls: bool) -> Vec<Shard> {
    let Value::Array(shards) = reply else {
        return Vec::new();
    };
    let mut list = Vec::new();
    for shard in shards {
        let mut slots = 0;
        let mut primary = None;
        let mut replicas = Vec::new();
        for (key, value) in pairs(shard) {
            match text(key).as_deref() {
                Some("slots") => {
                    if let Value::Array(bounds) = value {
                        for pair in bounds.chunks_exact(2) {
                            if let (Some(first), Some(last)) = (number(&pair[0]), number(&pair[1]))
                            {
                                slots += u32::try_from(last - first + 1).unwrap_or(0);
                            }
                        }
                    }
                }
                Some("nodes") => {
                    let Value::Array(nodes) = value else { continue };
                    for node in nodes {
                        let field = |name: &str| {
                            pairs(node)
                                .into_iter()
                                .find(|(k, _)| text(k).as_deref() == Some(name))
                                .map(|(_, v)| v)
                        };
                        let port = (if tls { field("tls-port") } else { None })
                            .or_else(|| field("port"))
                            .and_then(number)
                            .and_then(|p| u16::try_from(p).ok())
                            .unwrap_or(0);
                        let member = Member {
                            host: pick_host(
                                field("endpoint").and_then(text),
                                field("ip").and_then(text),
                                seed_host,
                            ),
                            port,
                            health: field("health").and_then(text),
                        };
                        match field("role").and_then(text).as_deref() {
                            Some("master") if primary.is_none() => primary = Some(member),
                            _ => replicas.push(member),
                        }
                    }
                }
                _ => {}
            }
        }
        // A shard of replicas whose primary is gone still has slots only
        // if a primary serves them; shards without slots are spare.
        if let Some(primary) = primary {
            list.push(Shard {
                primary,
                replicas,
                slots,
            });
        }
    }
    list
}

/// `CLUSTER SLOTS`: per slot range `[start, end, primary, replica...]`,
/// each server `[endpoint, port, id, ...]`. A primary with several ranges
/// is one shard.
fn parse_slots(reply: &Value, seed_host: &str) -> Vec<Shard> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    let mut list: Vec<Shard> = Vec::new();
    for range in ranges {
        let Value::Array(items) = range else { continue };
        let (Some(first), Some(last)) = (
            items.first().and_then(number),
            items.get(1).and_then(number),
        ) else {
            continue;
        };
        let member = |value: &Value| {
            let Value::Array(parts) = value else {
                return None;
            };
            Some(Member {
                host: pick_host(parts.first().and_then(text), None, seed_host),
                port: parts
                    .get(1)
                    .and_then(number)
                    .and_then(|p| u16::try_from(p).ok())?,
                health: None,
            })
        };
        let Some(primary) = items.get(2).and_then(member) else {
            continue;
        };
        let replicas: Vec<Member> = items.iter().skip(3).filter_map(member).collect();
        let slots = u32::try_from(last - first + 1).unwrap_or(0);
        match list.iter_mut().find(|s| s.primary == primary) {
            Some(shard) => {
                shard.slots += slots;
                for replica in replicas {
                    if !shard.replicas.contains(&replica) {
                        shard.replicas.push(replica);
                    }
                }
            }
            None => list.push(Shard {
                primary,
                replicas,
                slots,
            }),
        }
    }
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn node(ip: &str, port: i64, role: &str, health: &str) -> Value {
        Value::Array(vec![
            bulk("id"),
            bulk("abc"),
            bulk("port"),
            Value::Int(port),
            bulk("ip"),
            bulk(ip),
            bulk("endpoint"),
            bulk(ip),
            bulk("role"),
            bulk(role),
            bulk("replication-offset"),
            Value::Int(0),
            bulk("health"),
            bulk(health),
        ])
    }

    #[test]
    fn shards_are_read_from_cluster_shards() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                bulk("slots"),
                Value::Array(vec![
                    Value::Int(0),
                    Value::Int(99),
                    Value::Int(200),
                    Value::Int(299),
                ]),
                bulk("nodes"),
                Value::Array(vec![
                    node("10.0.0.2", 7001, "replica", "online"),
                    node("10.0.0.1", 7000, "master", "online"),
                ]),
            ]),
            // A member that does not know its address yet.
            Value::Array(vec![
                bulk("slots"),
                Value::Array(vec![Value::Int(100), Value::Int(199)]),
                bulk("nodes"),
                Value::Array(vec![node("", 7002, "master", "failed")]),
            ]),
        ]);
        let shards = parse_shards(&reply, "seed", false);
        assert_eq!(shards.len(), 2);
        assert_eq!(shards[0].primary.addr(), "10.0.0.1:7000");
        assert_eq!(shards[0].slots, 200);
        assert_eq!(shards[0].replicas.len(), 1);
        assert_eq!(shards[0].replicas[0].addr(), "10.0.0.2:7001");
        assert_eq!(shards[1].primary.addr(), "seed:7002");
        assert_eq!(shards[1].primary.health.as_deref(), Some("failed"));
    }

    #[test]
    fn shards_are_read_from_cluster_slots() {
        let server =
            |ip: &str, port: i64| Value::Array(vec![bulk(ip), Value::Int(port), bulk("id")]);
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(8191),
                server("10.0.0.1", 7000),
                server("10.0.0.3", 7003),
            ]),
            Value::Array(vec![
                Value::Int(8192),
                Value::Int(16000),
                server("10.0.0.2", 7001),
            ]),
            Value::Array(vec![
                Value::Int(16001),
                Value::Int(16383),
                server("10.0.0.1", 7000),
                server("10.0.0.3", 7003),
            ]),
        ]);
        let shards = parse_slots(&reply, "seed");
        assert_eq!(shards.len(), 2);
        assert_eq!(shards[0].slots, 8192 + 383);
        assert_eq!(shards[0].replicas.len(), 1);
        assert_eq!(shards[1].slots, 16000 - 8192 + 1);
        assert!(shards[1].replicas.is_empty());
    }

    #[test]
    fn a_member_is_reached_with_the_seeds_credentials() {
        let info = member_info("redis://app:pw@a:7000", "10.0.0.9", 7005).unwrap();
        assert_eq!(info.addr(), &ConnectionAddr::Tcp("10.0.0.9".into(), 7005));
        assert_eq!(info.redis_settings().username(), Some("app"));
        assert_eq!(info.redis_settings().password(), Some("pw"));
    }
}
