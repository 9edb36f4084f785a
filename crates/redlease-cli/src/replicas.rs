//! `--durable N` against the replicas the nodes have: each node's
//! primary's connected replicas, from `INFO replication`, read before any
//! lock I/O. A durable write waits for N replicas to acknowledge it; a
//! primary with fewer connected replicas can never acknowledge one, so a
//! lock for which too few nodes have them is refused at once (`run` and
//! `acquire`, exit 2) and FAILed by `doctor --durable N`, instead of being
//! waited for without end.
//!
//! Only what the servers say counts against a node: one that cannot be
//! reached or does not tell (INFO refused, a cluster shard not reached)
//! may have the replicas, and is not held against the lock.

use std::time::Duration;

use redis::{InfoDict, IntoConnectionInfo};
use redlease::NodeUrl;

use crate::cluster;
use crate::exit::Exit;
use crate::nodes::NodesArg;
use crate::probe::{Failure, Probe};
use crate::sentinel;

/// What a node's primaries say of their connected replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Replicas {
    /// Every primary that takes the node's locks answered, and none has
    /// more than `most` connected replicas (a cluster's lock lives on one
    /// shard, which is not guessed: every shard must be short).
    Known {
        most: u32,
        /// Which primaries, for a message: empty for a server given by
        /// its own URL, ` (primary HOST:PORT)` for the sentinels' one,
        /// ` (3 primaries)` for a cluster's.
        of: String,
    },
    /// Not known: unreachable, INFO refused, a shard not reached, or not a
    /// primary (it refuses lock writes anyway; the lock says why).
    Unknown,
}

impl Replicas {
    /// Whether this node can never acknowledge a write to `wanted`
    /// replicas, as far as its servers say.
    pub fn short_of(&self, wanted: u32) -> bool {
        matches!(self, Replicas::Known { most, .. } if *most < wanted)
    }
}

/// Why a durable lock over these nodes cannot be taken: too few of the
/// `found` (each node's name and replicas) may ever acknowledge `wanted`
/// replicas to make `quorum`. `None` when enough may.
pub fn too_few(found: &[(String, Replicas)], wanted: u32, quorum: usize) -> Option<String> {
    let short: Vec<String> = found
        .iter()
        .filter_map(|(name, replicas)| match replicas {
            Replicas::Known { most, of } if *most < wanted => Some(format!(
                "{name}{of} has {most} connected replica{}",
                if *most == 1 { "" } else { "s" }
            )),
            _ => None,
        })
        .collect();
    let may = found.len() - short.len();
    if may >= quorum {
        return None;
    }
    let nodes = found.len();
    let on = match nodes {
        1 => "the node".to_string(),
        _ => format!("each of {quorum} of the {nodes} nodes"),
    };
    Some(format!(
        "--durable {wanted} cannot be met: {} (INFO replication), and a lock needs {wanted} on \
         {on}: every write would wait for replicas that are not there",
        short.join("; ")
    ))
}

/// What to do about [`too_few`].
pub const ADVICE: &str =
    "connect replicas, give a smaller --durable, or leave it out not to wait for replicas";

/// How long each server may take to connect and answer `INFO
/// replication` before `run` or `acquire` takes a durable lock.
const CHECK_TIMEOUT: Duration = Duration::from_secs(1);

/// Why `--durable wanted` cannot work on `nodes` for a lock that needs
/// `quorum` of them ([`too_few`]), asking every node at once (each within
/// a second); `None` when enough nodes have the replicas, or may.
pub async fn refusal(
    locker: &redlease::Locker,
    nodes: &NodesArg,
    wanted: u32,
    quorum: usize,
) -> Result<Option<String>, Exit> {
    let urls = nodes.urls()?;
    let tls = nodes.redis_tls()?;
    let asks: Vec<_> = urls
        .into_iter()
        .map(|url| {
            let tls = tls.clone();
            tokio::spawn(async move { of_node(&url, CHECK_TIMEOUT, tls.as_ref()).await })
        })
        .collect();
    let mut found = Vec::new();
    for (node, ask) in locker.admin().nodes().zip(asks) {
        found.push((node.to_string(), ask.await.unwrap_or(Replicas::Unknown)));
    }
    Ok(too_few(&found, wanted, quorum)
        .map(|why| format!("{why}. {}{}", ADVICE[..1].to_uppercase(), &ADVICE[1..])))
}

/// The connected replicas of the primaries behind `url` (one server, a
/// cluster's primaries, or the primary the sentinels name), every request
/// bounded by `timeout`.
pub async fn of_node(
    url: &str,
    timeout: Duration,
    tls: Option<&redis::TlsCertificates>,
) -> Replicas {
    // Every primary must tell, and all are short for the node to be.
    let most = |counts: Vec<(String, Option<u32>)>, of: String| {
        let known: Option<Vec<u32>> = counts.into_iter().map(|(_, n)| n).collect();
        known?
            .into_iter()
            .max()
            .map(|most| Replicas::Known { most, of })
    };
    let counts = match NodeUrl::parse(url) {
        Ok(NodeUrl::Server(url)) => match url.as_str().into_connection_info() {
            Ok(info) => {
                let counts = vec![(url.clone(), connected(info, timeout, tls).await)];
                (counts, String::new())
            }
            Err(_) => return Replicas::Unknown,
        },
        Ok(NodeUrl::Cluster { seeds }) => {
            let Ok(facts) = cluster::gather(&seeds, timeout, tls).await else {
                return Replicas::Unknown;
            };
            let Ok(shards) = facts.shards else {
                return Replicas::Unknown;
            };
            let asks: Vec<_> = shards
                .list
                .iter()
                .map(|shard| {
                    let info =
                        cluster::member_info(&seeds[0], &shard.primary.host, shard.primary.port);
                    let (addr, tls) = (shard.primary.addr(), tls.cloned());
                    tokio::spawn(async move {
                        let n = match info {
                            Some(info) => connected(info, timeout, tls.as_ref()).await,
                            None => None,
                        };
                        (addr, n)
                    })
                })
                .collect();
            let mut counts = Vec::new();
            for ask in asks {
                counts.push(ask.await.unwrap_or_else(|_| (String::new(), None)));
            }
            let of = match counts.len() {
                1 => format!(" (primary {})", counts[0].0),
                n => format!(" (each of its {n} primaries)"),
            };
            (counts, of)
        }
        Ok(NodeUrl::Sentinel(url)) => {
            let answers = sentinel::ask_all(&url, timeout, tls).await;
            let Some(primary) = answers
                .iter()
                .find_map(|a| a.told.as_ref().ok()?.primary.clone())
            else {
                return Replicas::Unknown;
            };
            match sentinel::primary_info(&url, &primary) {
                Ok(info) => {
                    let of = format!(" (primary {primary})");
                    (vec![(primary, connected(info, timeout, tls).await)], of)
                }
                Err(_) => return Replicas::Unknown,
            }
        }
        _ => return Replicas::Unknown,
    };
    let (counts, of) = counts;
    most(counts, of).unwrap_or(Replicas::Unknown)
}

/// The connected replicas of the primary at `info`: `None` when it cannot
/// be reached, does not tell, or is not a primary.
async fn connected(
    info: redis::ConnectionInfo,
    timeout: Duration,
    tls: Option<&redis::TlsCertificates>,
) -> Option<u32> {
    let mut probe = Probe::connect_to(info, timeout, tls).await.ok()?;
    let text: Result<String, Failure> = probe.query(redis::cmd("INFO").arg("replication")).await;
    let info = InfoDict::new(&text.ok()?);
    let role: String = info.get("role")?;
    (role == "master").then(|| info.get("connected_slaves"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(name: &str, most: u32) -> (String, Replicas) {
        let of = String::new();
        (name.to_string(), Replicas::Known { most, of })
    }

    #[test]
    fn a_lone_primary_without_replicas_cannot_take_a_durable_lock() {
        let found = [known("node 0 (127.0.0.1:7000)", 0)];
        let why = too_few(&found, 1, 1).expect("refused");
        assert!(
            why.starts_with(
                "--durable 1 cannot be met: node 0 (127.0.0.1:7000) has 0 connected replicas \
                 (INFO replication), and a lock needs 1 on the node: every write"
            ),
            "{why}"
        );
        assert!(too_few(&found, 1, 1).is_some());
        assert!(too_few(&[known("node 0 (a:1)", 1)], 1, 1).is_none());
        assert!(too_few(&[known("node 0 (a:1)", 1)], 2, 1).is_some());
    }

    #[test]
    fn nodes_that_do_not_tell_are_not_held_against_the_lock() {
        let unknown = |name: &str| (name.to_string(), Replicas::Unknown);
        // One of three short: the other two may make a quorum.
        let found = [
            known("node 0 (a:1)", 0),
            unknown("node 1 (b:1)"),
            known("node 2 (c:1)", 2),
        ];
        assert!(too_few(&found, 1, 2).is_none());
        // Two of three short: no quorum can acknowledge, whatever node 1 says.
        let found = [
            known("node 0 (a:1)", 0),
            unknown("node 1 (b:1)"),
            known("node 2 (c:1)", 1),
        ];
        let why = too_few(&found, 2, 2).expect("refused");
        assert!(
            why.contains(
                "node 0 (a:1) has 0 connected replicas; node 2 (c:1) has 1 connected replica "
            ),
            "{why}"
        );
        assert!(
            why.contains("a lock needs 2 on each of 2 of the 3 nodes"),
            "{why}"
        );
        // Nothing known: never refused.
        assert!(too_few(&[unknown("node 0 (a:1)")], 1, 1).is_none());
    }

    #[test]
    fn a_clusters_or_sentinels_primaries_are_named() {
        let found = [(
            "node 0 (redis+cluster://a:1,b:2)".to_string(),
            Replicas::Known {
                most: 0,
                of: " (each of its 2 primaries)".to_string(),
            },
        )];
        let why = too_few(&found, 1, 1).unwrap();
        assert!(
            why.contains(
                "node 0 (redis+cluster://a:1,b:2) (each of its 2 primaries) has 0 connected"
            ),
            "{why}"
        );
        assert!(Replicas::Known {
            most: 1,
            of: String::new()
        }
        .short_of(2));
        assert!(!Replicas::Unknown.short_of(2));
    }
}
