//! `redlease doctor`: checks every node for what breaks a lock's safety or
//! availability, and prints OK / WARN / FAIL with the reason and the fix.
//!
//! It connects to each URL itself (not through a Locker), so a server
//! listed twice is reported rather than refused.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use clap::Args;

use redis::IntoConnectionInfo;

use crate::cluster::{self, ClusterFacts};
use crate::duration;
use crate::errors::chain;
use crate::errors::Diagnosis;
use crate::exit::{self, Exit};
use crate::facts::{self, Facts};
use crate::nodes::NodesArg;
use crate::probe::Failure;
use crate::replicas::{self, Replicas};
use crate::rights;
use crate::sentinel;
use crate::table::Table;
use redlease::acl::{Command, Deployment};
use redlease::NodeUrl;

/// Clocks further apart than this suggest missing time sync.
const SKEW_WARN: Duration = Duration::from_secs(1);
/// Clocks this far apart have no time sync at all, and approach the fence
/// expiry (10 min by default) within which fencing counters restarted from
/// a node's clock stay monotonic.
const SKEW_FAIL: Duration = Duration::from_secs(60);

#[derive(Args, Debug)]
#[command(after_help = "\
Checks, per node: reachable and latency; the server's kind (redis, valkey) \
and version, and its mode (Redis 6.0 or later is supported: older ones \
WARN, as waiters are not woken by releases without RESP3); Lua scripting; \
on Valkey 9 and later, DELIFEQ (releases are one command with it); \
maxmemory-policy (only noeviction is safe); persistence (AOF with \
appendfsync always, or delayed restarts); replication (a replica, or a \
primary with replicas that could fail over). Across nodes: the same server \
listed twice (same run_id: a fake majority), an even node count, and clock \
skew (from TIME). With --durable N: whether enough nodes' primaries have N \
connected replicas for a quorum (FAIL as `run --durable N` refuses it: a \
write would wait for replicas that are not there). With --permits N: how \
many nodes each of N permits needs and how many may fail (FAIL, in the \
words `run --permits N` refuses it with, when none may).

A cluster (redis+cluster://): the seeds that answer, cluster_state and how \
many of the 16384 slots are assigned and covered (FAIL unless all), the \
primaries and each one's replicas (CLUSTER SHARDS, or CLUSTER SLOTS before \
Redis 7), then every primary as a server above. A Sentinel-managed primary \
(redis+sentinel://): how many sentinels answer and which primary they name \
(FAIL if none knows the service), their quorum (CKQUORUM), the primary's \
ROLE (FAIL unless master) and its replicas, then the primary as a server \
above. Any primary with replicas WARNs: a failover can lose a held lock.

Permissions: as the user of the URL, doctor tries each command redlease \
will send to that server (on a cluster's primaries and the sentinels' primary \
too; WAIT with --durable), on a key and a channel under --key-prefix that no \
lock uses (nothing is left behind), and FAILs naming each +command the user \
lacks and what breaks without it (WARN for PUBLISH and SUBSCRIBE, without \
which waiters poll), or the key pattern (~PREFIX*).

The least-privilege user (docs/deployments.md, ACL) may run INFO and TIME, but not \
CONFIG GET (nor PING outside a cluster, nor CLUSTER INFO): maxmemory-policy \
WARNs (not checked) and names the command, persistence is read from INFO \
(without appendfsync), and the other checks run. For maxmemory-policy, run \
doctor as an admin user.

Examples:
  redlease doctor --nodes redis://a:6379,redis://b:6379,redis://c:6379 --ttl 30s
  redlease doctor --nodes redis+cluster://a:7000,b:7001,c:7002
  redlease doctor --nodes redis+sentinel://s1:26379,s2:26379,s3:26379/mymaster

Exit codes: 0 no FAIL (WARNs allowed); 1 at least one FAIL; 2 usage.")]
pub struct DoctorArgs {
    #[command(flatten)]
    nodes: NodesArg,

    /// The largest lock TTL you use: latency and restart advice depend on it.
    #[arg(long, value_name = "D", default_value = "10s", value_parser = duration::parse_positive)]
    ttl: Duration,

    /// How long each node may take to connect and answer one request.
    #[arg(long, value_name = "D", default_value = "2s", value_parser = duration::parse_positive)]
    timeout: Duration,

    /// Check for `run --durable N`: that the user may run WAIT, and that
    /// enough nodes' primaries have N connected replicas (a primary with
    /// fewer FAILs: every durable write there would wait in vain) [default
    /// N, with --durable alone: 1].
    #[arg(
        long,
        value_name = "N",
        num_args = 0..=1,
        default_missing_value = "1",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    durable: Option<u32>,

    /// Check for `run --permits N`: how many nodes each permit needs and
    /// how many may fail (a semaphore on which no node may fail FAILs, with
    /// what to change).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    permits: Option<u32>,

    /// The key prefix the locks use (`run --key-prefix`): the user's rights
    /// are tried on a key and a channel under it that no lock uses.
    #[arg(long, value_name = "PREFIX", default_value = "redlease:")]
    key_prefix: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Ok,
    Warn,
    Fail,
}

impl Level {
    fn label(self) -> &'static str {
        match self {
            Level::Ok => "OK",
            Level::Warn => "WARN",
            Level::Fail => "FAIL",
        }
    }
}

/// One finding: a check's result, why, and how to fix it.
#[derive(Debug)]
struct Row {
    level: Level,
    check: &'static str,
    detail: String,
    fix: Option<String>,
}

fn ok(check: &'static str, detail: impl Into<String>) -> Row {
    Row {
        level: Level::Ok,
        check,
        detail: detail.into(),
        fix: None,
    }
}

fn warn(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Row {
    Row {
        level: Level::Warn,
        check,
        detail: detail.into(),
        fix: Some(fix.into()),
    }
}

fn fail(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Row {
    Row {
        level: Level::Fail,
        check,
        detail: detail.into(),
        fix: Some(fix.into()),
    }
}

pub async fn doctor(args: DoctorArgs) -> Exit {
    let urls = match args.nodes.urls() {
        Ok(urls) => urls,
        Err(exit) => return exit,
    };
    let tls = match args.nodes.redis_tls() {
        Ok(tls) => tls,
        Err(exit) => return exit,
    };
    let probes: Vec<_> = urls
        .iter()
        .map(|url| {
            let (url, tls) = (url.clone(), tls.clone());
            let plans = Plans::new(args.key_prefix.clone(), args.durable.is_some());
            tokio::spawn(async move { probe_node(&url, args.timeout, tls.as_ref(), &plans).await })
        })
        .collect();
    let mut found = Vec::new();
    for probe in probes {
        found.push(
            probe
                .await
                .unwrap_or_else(|e| Probed::Server(Err(internal(&e)))),
        );
    }

    let quorum = urls.len() / 2 + 1;
    println!(
        "redlease doctor: {} node{}, quorum {quorum}, largest TTL {}",
        urls.len(),
        plural(urls.len()),
        duration::show(args.ttl)
    );
    let mut table = Table::new(&["STATUS", "NODE", "CHECK", "DETAIL"]);
    let mut counts = BTreeMap::new();
    let mut add = |node: String, row: Row| {
        *counts.entry(row.level).or_insert(0) += 1;
        let fix = row.fix.map(|f| format!("fix: {f}"));
        table.row(
            vec![
                row.level.label().to_string(),
                node,
                row.check.to_string(),
                row.detail,
            ],
            fix,
        );
    };
    for (i, (url, probed)) in urls.iter().zip(&found).enumerate() {
        // URLs were checked to parse; the library names the node as its
        // errors do.
        let node = redlease::NodeId::from_url(i, url)
            .map_or_else(|_| i.to_string(), |id| format!("{i} {}", id.addr()));
        let quarantine = args.nodes.restart_quarantine(args.ttl);
        let budget = (args.ttl, quarantine);
        for (label, row) in node_rows(i, &node, probed, budget, args.timeout, args.durable) {
            add(label, row);
        }
    }
    for row in fleet_checks(&found) {
        add("all".to_string(), row);
    }
    let names: Vec<String> = urls
        .iter()
        .enumerate()
        .map(|(i, url)| {
            redlease::NodeId::from_url(i, url)
                .map_or_else(|_| format!("node {i}"), |id| id.to_string())
        })
        .collect();
    let permits = match args.permits {
        Some(permits) => match semaphore(&args.nodes, permits, &found).await {
            Ok(row) => Some((permits, row)),
            Err(exit) => return exit,
        },
        None => None,
    };
    if let Some(wanted) = args.durable {
        let need = permits.as_ref().map_or(quorum, |(_, (_, need))| *need);
        add("all".to_string(), durable(&names, &found, wanted, need));
    }
    if let Some((_, (row, _))) = permits {
        add("all".to_string(), row);
    }
    print!("{}", table.render());
    let count = |level| counts.get(&level).copied().unwrap_or(0);
    println!(
        "{} FAIL, {} WARN, {} OK",
        count(Level::Fail),
        count(Level::Warn),
        count(Level::Ok)
    );
    match count(Level::Fail) {
        0 => Exit::code(exit::OK),
        _ => Exit::code(exit::CONFLICT),
    }
}

/// What doctor learned about one node of the list.
enum Probed {
    /// One server.
    Server(Result<Facts, Failure>),
    /// A Redis Cluster: what a seed said of it, and each primary's facts
    /// (the seed's alone when the shards are unknown).
    Cluster {
        cluster: Result<ClusterFacts, Failure>,
        primaries: Vec<(String, Result<Facts, Failure>)>,
    },
    /// The sentinels' answers, and the primary they name, if any.
    Sentinel {
        service: String,
        answers: Vec<sentinel::Answer>,
        primary: Option<SentinelPrimary>,
    },
}

/// The server the sentinels name as primary.
struct SentinelPrimary {
    addr: String,
    role: Result<sentinel::Role, Failure>,
    facts: Result<Facts, Failure>,
}

impl Probed {
    /// Whether the node can take locks now: its servers answer (and the
    /// sentinels' primary says it is one).
    fn up(&self) -> bool {
        match self {
            Probed::Server(facts) => facts.is_ok(),
            Probed::Cluster { cluster, primaries } => {
                cluster.is_ok() && primaries.iter().all(|(_, facts)| facts.is_ok())
            }
            Probed::Sentinel { primary, .. } => primary.as_ref().is_some_and(|p| {
                p.facts.is_ok() && p.role.as_ref().map_or(true, |r| r.role == "master")
            }),
        }
    }

    /// What its primaries' INFO says of their connected replicas, as
    /// [`replicas::of_node`] reads it for `run`.
    fn replicas(&self) -> Replicas {
        let connected = |facts: &Facts| -> Option<u32> {
            (facts.info("role")? == "master")
                .then(|| facts.info("connected_slaves")?.parse().ok())?
        };
        let most = |counts: Vec<Option<u32>>, of: String| {
            let counts: Option<Vec<u32>> = counts.into_iter().collect();
            counts?
                .into_iter()
                .max()
                .map(|most| Replicas::Known { most, of })
        };
        let known = match self {
            Probed::Server(Ok(facts)) => most(vec![connected(facts)], String::new()),
            Probed::Cluster {
                cluster: Ok(_),
                primaries,
            } => {
                let of = match primaries.as_slice() {
                    [(addr, _)] => format!(" (primary {addr})"),
                    all => format!(" (each of its {} primaries)", all.len()),
                };
                let counts = primaries
                    .iter()
                    .map(|(_, facts)| connected(facts.as_ref().ok()?))
                    .collect();
                most(counts, of)
            }
            Probed::Sentinel {
                primary: Some(primary),
                ..
            } => {
                let facts = primary.facts.as_ref().ok();
                let of = format!(" (primary {})", primary.addr);
                most(vec![facts.and_then(connected)], of)
            }
            _ => None,
        };
        known.unwrap_or(Replicas::Unknown)
    }

    /// The facts of every server reached.
    fn servers(&self) -> Vec<&Facts> {
        match self {
            Probed::Server(facts) => facts.iter().collect(),
            Probed::Cluster { primaries, .. } => primaries
                .iter()
                .filter_map(|(_, f)| f.as_ref().ok())
                .collect(),
            Probed::Sentinel { primary, .. } => primary
                .iter()
                .filter_map(|p| p.facts.as_ref().ok())
                .collect(),
        }
    }
}

/// What doctor tries a user's rights with, whatever the node's form.
struct Plans {
    prefix: String,
    /// `--durable`: the rights of `run --durable N`, whatever N.
    durability: redlease::Durability,
}

impl Plans {
    fn new(prefix: String, durable: bool) -> Plans {
        let durability = if durable {
            redlease::Durability::required(1, Duration::from_millis(100))
        } else {
            redlease::Durability::off()
        };
        Plans { prefix, durability }
    }

    fn server(&self) -> rights::Plan {
        rights::Plan::new(&self.prefix, Deployment::Standalone, self.durability)
    }

    fn cluster(&self) -> rights::Plan {
        rights::Plan::new(&self.prefix, Deployment::Cluster, self.durability)
    }

    fn sentinel(&self) -> rights::Plan {
        rights::Plan::new(&self.prefix, Deployment::Sentinel, self.durability)
    }
}

/// Reads everything about the node at `url`, every step bounded by
/// `timeout`.
async fn probe_node(
    url: &str,
    timeout: Duration,
    tls: Option<&redis::TlsCertificates>,
    plans: &Plans,
) -> Probed {
    match NodeUrl::parse(url) {
        Err(why) => Probed::Server(Err(Failure::Failed(why.to_string()))),
        Ok(NodeUrl::Server(url)) => Probed::Server(match url.as_str().into_connection_info() {
            Ok(info) => facts::gather(info, timeout, tls, &plans.server()).await,
            Err(e) => Err(Failure::Failed(chain(&e))),
        }),
        Ok(NodeUrl::Cluster { seeds }) => {
            let cluster = cluster::gather(&seeds, timeout, tls).await;
            let members: Vec<(String, u16)> = match &cluster {
                Err(_) => Vec::new(),
                Ok(c) => match &c.shards {
                    Ok(shards) => shards
                        .list
                        .iter()
                        .map(|s| (s.primary.host.clone(), s.primary.port))
                        .collect(),
                    // Shards unknown: at least the seed that answered.
                    Err(_) => {
                        let (host, port) = c.seed.rsplit_once(':').unwrap_or((&c.seed, ""));
                        vec![(host.to_string(), port.parse().unwrap_or(0))]
                    }
                },
            };
            let gathers: Vec<_> = members
                .into_iter()
                .map(|(host, port)| {
                    let info = cluster::member_info(&seeds[0], &host, port);
                    let tls = tls.cloned();
                    let plan = plans.cluster();
                    let addr = cluster::Member {
                        host,
                        port,
                        health: None,
                    }
                    .addr();
                    let gather = tokio::spawn(async move {
                        match info {
                            Some(info) => facts::gather(info, timeout, tls.as_ref(), &plan).await,
                            None => Err(Failure::Failed("not an address".to_string())),
                        }
                    });
                    (addr, gather)
                })
                .collect();
            let mut primaries = Vec::new();
            for (addr, gather) in gathers {
                let facts = gather.await.unwrap_or_else(|e| Err(internal(&e)));
                primaries.push((addr, facts));
            }
            Probed::Cluster { cluster, primaries }
        }
        Ok(NodeUrl::Sentinel(url)) => {
            let answers = sentinel::ask_all(&url, timeout, tls).await;
            let primary = match named_primary(&answers).first() {
                None => None,
                Some((addr, _)) => Some(match sentinel::primary_info(&url, addr) {
                    Err(e) => SentinelPrimary {
                        addr: addr.clone(),
                        role: Err(e.clone()),
                        facts: Err(e),
                    },
                    Ok(info) => {
                        let plan = plans.sentinel();
                        let (role, facts) = tokio::join!(
                            sentinel::role(info.clone(), timeout, tls),
                            facts::gather(info, timeout, tls, &plan)
                        );
                        SentinelPrimary {
                            addr: addr.clone(),
                            role,
                            facts,
                        }
                    }
                }),
            };
            Probed::Sentinel {
                service: url.service,
                answers,
                primary,
            }
        }
        // A form newer than this command: the library will say.
        Ok(_) => Probed::Server(Err(Failure::Failed(format!(
            "{}: a node form doctor does not know",
            redlease::redact_url(url)
        )))),
    }
}

/// The primaries the sentinels name, most named first, with how many name
/// each.
fn named_primary(answers: &[sentinel::Answer]) -> Vec<(String, usize)> {
    let mut named: Vec<(String, usize)> = Vec::new();
    for addr in answers
        .iter()
        .filter_map(|a| a.told.as_ref().ok()?.primary.clone())
    {
        match named.iter_mut().find(|(a, _)| *a == addr) {
            Some((_, n)) => *n += 1,
            None => named.push((addr, 1)),
        }
    }
    // Stable: a tie goes to the first sentinel's.
    named.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    named
}

/// How a server is deployed, for the checks that depend on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Deploy {
    /// Given by its own URL.
    Standalone,
    /// A primary of a cluster given as `redis+cluster://`.
    Cluster,
    /// The primary the sentinels of a `redis+sentinel://` URL name.
    Sentinel,
}

/// The rows of node `i` (named `node`), each with the NODE cell to show.
fn node_rows(
    i: usize,
    node: &str,
    probed: &Probed,
    (ttl, quarantine): (Duration, Duration),
    timeout: Duration,
    durable: Option<u32>,
) -> Vec<(String, Row)> {
    let primary_label = |addr: &str| format!("{i} primary {addr}");
    match probed {
        Probed::Server(facts) => node_checks(
            facts.as_ref(),
            (ttl, quarantine),
            timeout,
            (Deploy::Standalone, durable),
            None,
        )
        .into_iter()
        .map(|row| (node.to_string(), row))
        .collect(),
        Probed::Cluster { cluster, primaries } => {
            let mut rows: Vec<(String, Row)> = cluster_checks(cluster.as_ref(), primaries, timeout)
                .into_iter()
                .map(|row| (node.to_string(), row))
                .collect();
            let shards = cluster.as_ref().ok().and_then(|c| c.shards.as_ref().ok());
            for (addr, facts) in primaries {
                let replicas = shards.and_then(|shards| {
                    let shard = shards.list.iter().find(|s| s.primary.addr() == *addr)?;
                    Some(shard.replicas.len())
                });
                let budget = (ttl, quarantine);
                let deploy = (Deploy::Cluster, durable);
                for row in node_checks(facts.as_ref(), budget, timeout, deploy, replicas) {
                    rows.push((primary_label(addr), row));
                }
            }
            rows
        }
        Probed::Sentinel {
            service,
            answers,
            primary,
        } => {
            let mut rows: Vec<(String, Row)> =
                sentinel_checks(service, answers, primary.as_ref(), timeout)
                    .into_iter()
                    .map(|row| (node.to_string(), row))
                    .collect();
            if let Some(primary) = primary {
                // ROLE lists the replicas in sync; the sentinels also
                // those still syncing, which can be promoted as well.
                let in_sync = primary.role.as_ref().ok().map(|r| r.replicas);
                let known = answers
                    .iter()
                    .find_map(|a| a.told.as_ref().ok()?.replicas.as_ref().ok())
                    .map(|r| r.iter().filter(|f| sentinel::replica_up(f)).count());
                let replicas = in_sync.max(known);
                for row in node_checks(
                    primary.facts.as_ref(),
                    (ttl, quarantine),
                    timeout,
                    (Deploy::Sentinel, durable),
                    replicas,
                ) {
                    rows.push((primary_label(&primary.addr), row));
                }
            }
            rows
        }
    }
}

/// A task that panicked, as a failure.
fn internal(e: &tokio::task::JoinError) -> Failure {
    Failure::Failed(format!("internal error: {}", chain(e)))
}

/// The row for a node that does not answer at all: `what` to start, and
/// how its URL carries a password. A refused password or a port where
/// no Redis answers is fixed in the URL, not by starting anything.
fn unreachable(why: &Failure, what: &str, password: &str, timeout: Duration) -> Row {
    let fix = match why {
        Failure::Diagnosed(Diagnosis::NeedsPassword) => {
            format!("give the user and password in the URL: {password}")
        }
        Failure::Diagnosed(Diagnosis::WrongPassword) => {
            format!("check the user name and password in the URL ({password})")
        }
        Failure::Diagnosed(Diagnosis::NotRedis) => "check the port in the URL: another \
             program listens there (for a TLS port, the URL starts with rediss://)"
            .to_string(),
        // The same advice as `run` and `status` give (the library's
        // NodeErrorKind::Tls).
        Failure::Tls(_) => "check the CA the client trusts \
             (--tls-ca, else the system's trust store), the name in the server's certificate \
             (it must name the host in the URL), and the client certificate (--tls-cert, \
             --tls-key)"
            .to_string(),
        Failure::Diagnosed(Diagnosis::SpeaksTls) => "the server speaks TLS on this port: \
             use rediss:// (rediss+cluster://, rediss+sentinel://) in the URL"
            .to_string(),
        Failure::Diagnosed(Diagnosis::SpeaksPlain) => "the server does not speak TLS on this \
             port: use redis:// (redis+cluster://, redis+sentinel://) in the URL"
            .to_string(),
        _ => format!(
            "start {what}, or check the URL, port, firewall and password ({password}); \
             doctor waits {} per request (--timeout)",
            duration::show(timeout)
        ),
    };
    fail("reachable", format!("no: {why}"), fix)
}

/// The checks of one server, deployed as `deploy` says, for locks that
/// want `durable` replicas to acknowledge their writes (`--durable N`).
/// `replicas`: how many replicas it has as the cluster or the sentinels
/// tell, for when INFO is refused.
fn node_checks(
    facts: Result<&Facts, &Failure>,
    (ttl, quarantine): (Duration, Duration),
    timeout: Duration,
    (deploy, durable): (Deploy, Option<u32>),
    replicas: Option<usize>,
) -> Vec<Row> {
    let facts = match facts {
        Ok(facts) => facts,
        Err(why) => {
            return vec![unreachable(
                why,
                "the server",
                "redis://:password@host:port",
                timeout,
            )]
        }
    };
    let mut rows = vec![
        latency(facts.latency, facts.ping_denied, ttl),
        server(facts, deploy),
        scripting(facts),
        permissions(facts),
    ];
    // A cluster's releases always use the script (the library does not
    // ask its shards which commands they have).
    if deploy != Deploy::Cluster {
        rows.extend(native_release(facts));
    }
    rows.extend([
        eviction(facts),
        persistence(facts, quarantine),
        restart_quarantine(facts, quarantine, deploy),
        replication(facts, deploy, replicas, durable),
    ]);
    rows
}

/// The checks of a cluster as a whole: it answers, its state and slot
/// coverage, and its shards.
fn cluster_checks(
    cluster: Result<&ClusterFacts, &Failure>,
    primaries: &[(String, Result<Facts, Failure>)],
    timeout: Duration,
) -> Vec<Row> {
    let cluster = match cluster {
        Ok(cluster) => cluster,
        Err(why) => {
            return vec![unreachable(
                why,
                "the cluster's servers",
                "redis+cluster://:password@host:port,...",
                timeout,
            )]
        }
    };
    let mut rows = vec![cluster_state(cluster, primaries), shards(cluster)];
    if !cluster.seeds_down.is_empty() {
        let down: Vec<String> = cluster
            .seeds_down
            .iter()
            .map(|(seed, why)| format!("{seed}: {why}"))
            .collect();
        rows.push(warn(
            "seeds",
            format!(
                "{} of {} seeds did not answer ({}); clients find the cluster through the others",
                down.len(),
                cluster.seeds,
                down.join("; ")
            ),
            "bring the seeds back, or list the cluster's current servers in the URL",
        ));
    }
    rows
}

fn cluster_state(cluster: &ClusterFacts, primaries: &[(String, Result<Facts, Failure>)]) -> Row {
    const CHECK: &str = "cluster";
    const ALL: u32 = 16_384;
    let shards = cluster.shards.as_ref().ok();
    if let Err(e) = &cluster.info {
        if e.to_string().contains("cluster support disabled") {
            return fail(
                CHECK,
                format!("{} is not a cluster node: {e}", cluster.seed),
                "give a standalone server as redis://HOST:PORT (or the sentinels' primary as \
                 redis+sentinel://HOST:PORT,.../SERVICE)",
            );
        }
    }
    let number = |field: &str| cluster.info(field).and_then(|v| v.parse::<u32>().ok());
    let state = cluster.info("cluster_state");
    // From INFO, or else counted from the shards: a primary that did not
    // answer doctor covers none.
    let assigned = number("cluster_slots_assigned")
        .or_else(|| shards.map(|s| s.list.iter().map(|s| s.slots).sum()));
    let covered = number("cluster_slots_ok").or_else(|| {
        shards.map(|s| {
            s.list
                .iter()
                .filter(|s| s.primary.health.as_deref().is_none_or(|h| h == "online"))
                .filter(|s| {
                    primaries
                        .iter()
                        .any(|(addr, facts)| *addr == s.primary.addr() && facts.is_ok())
                })
                .map(|s| s.slots)
                .sum()
        })
    });
    let (Some(assigned), Some(covered)) = (assigned, covered) else {
        return match (&cluster.info, &cluster.shards) {
            (Err(Failure::Denied(_)), _) => not_checked(
                CHECK,
                "CLUSTER INFO",
                "that cluster_state is ok and every slot is served",
            ),
            (Err(e), _) => warn(
                CHECK,
                format!("could not read CLUSTER INFO from {}: {e}", cluster.seed),
                "check CLUSTER INFO yourself: cluster_state must be ok",
            ),
            (Ok(_), _) => warn(
                CHECK,
                "CLUSTER INFO gave no slot counts",
                "check CLUSTER INFO yourself: cluster_state must be ok",
            ),
        };
    };
    let primaries_count = shards.map_or_else(
        || "primaries unknown".to_string(),
        |s| {
            format!(
                "{} primar{}",
                s.list.len(),
                if s.list.len() == 1 { "y" } else { "ies" }
            )
        },
    );
    let state_text = match (&state, &cluster.info) {
        (Some(state), _) => format!("cluster_state {state}"),
        (None, Err(Failure::Denied(_))) => format!(
            "cluster_state not checked: this user may not run CLUSTER INFO (ACL: NOPERM), slots \
             counted from {}",
            shards.map_or("the shards", |s| s.source)
        ),
        (None, _) => "cluster_state not read".to_string(),
    };
    let detail = format!(
        "{state_text}; {assigned} of {ALL} slots assigned, {covered} covered (served by a \
         primary that is up); {primaries_count} (asked {})",
        cluster.seed
    );
    if state.as_deref().is_some_and(|s| s != "ok") || assigned < ALL || covered < ALL {
        fail(
            CHECK,
            format!(
                "{detail}: a lock whose key hashes to a slot nobody serves cannot be taken, \
                 and with cluster-require-full-coverage (the default) no lock at all"
            ),
            "assign every slot (CLUSTER ADDSLOTSRANGE), bring failed primaries back or let \
             their replicas take over; CLUSTER INFO and CLUSTER SHARDS show which",
        )
    } else {
        ok(CHECK, detail)
    }
}

fn shards(cluster: &ClusterFacts) -> Row {
    const CHECK: &str = "shards";
    let shards = match &cluster.shards {
        Ok(shards) => shards,
        Err(Failure::Denied(_)) => {
            return warn(
                CHECK,
                "not checked: this user may not run CLUSTER SHARDS or CLUSTER SLOTS (ACL: \
                 NOPERM); redlease's cluster client reads CLUSTER SLOTS to find the shards, so \
                 it cannot work either",
                "allow +cluster|slots for this user, and run doctor as an admin user for the \
                 other checks",
            )
        }
        Err(e) => {
            return warn(
                CHECK,
                format!("could not read the shards: {e}"),
                "check CLUSTER SHARDS (or CLUSTER SLOTS) yourself",
            )
        }
    };
    let list: Vec<String> = shards
        .list
        .iter()
        .map(|shard| {
            let health = match shard.primary.health.as_deref() {
                None | Some("online") => String::new(),
                Some(other) => format!(" ({other})"),
            };
            let replicas = match shard.replicas.len() {
                0 => "no replica".to_string(),
                n => {
                    let addrs: Vec<String> = shard
                        .replicas
                        .iter()
                        .map(|r| match r.health.as_deref() {
                            None | Some("online") => r.addr(),
                            Some(other) => format!("{} {other}", r.addr()),
                        })
                        .collect();
                    format!("{n} replica{} ({})", plural(n), addrs.join(", "))
                }
            };
            format!(
                "{}{health}: {} slot{}, {replicas}",
                shard.primary.addr(),
                shard.slots,
                plural(shard.slots as usize)
            )
        })
        .collect();
    let n = shards.list.len();
    ok(
        CHECK,
        format!(
            "{n} primar{} ({}): {}",
            if n == 1 { "y" } else { "ies" },
            shards.source,
            list.join("; ")
        ),
    )
}

/// The checks of a Sentinel-managed node as a whole: the sentinels answer
/// and agree, and the server they name says it is the primary.
fn sentinel_checks(
    service: &str,
    answers: &[sentinel::Answer],
    primary: Option<&SentinelPrimary>,
    timeout: Duration,
) -> Vec<Row> {
    let mut rows = Vec::new();
    let n = answers.len();
    let answered: Vec<&sentinel::Told> = answers
        .iter()
        .filter_map(|a| a.told.as_ref().ok())
        .collect();
    let silent: Vec<String> = answers
        .iter()
        .filter_map(|a| match &a.told {
            Err(e) => Some(format!("{}: {e}", a.sentinel)),
            Ok(_) => None,
        })
        .collect();
    let denied = answers
        .iter()
        .any(|a| matches!(a.told, Err(Failure::Denied(_))));
    if answered.is_empty() {
        if denied {
            return vec![not_checked(
                "sentinels",
                "SENTINEL GET-MASTER-ADDR-BY-NAME",
                "which primary the sentinels name",
            )];
        }
        let why = format!("no sentinel answered ({})", silent.join("; "));
        // Every sentinel refused the handshake: the fix is the TLS settings.
        let tls = !answers.is_empty()
            && answers
                .iter()
                .all(|a| matches!(a.told, Err(Failure::Tls(_))));
        return vec![unreachable(
            &if tls {
                Failure::Tls(why)
            } else {
                Failure::Failed(why)
            },
            "the sentinels",
            "?sentinel_password=... after the service name",
            timeout,
        )];
    }
    let named = named_primary(answers);
    let knowing = named.iter().map(|(_, k)| k).sum::<usize>();
    let Some((addr, agree)) = named.first() else {
        return vec![fail(
            "sentinels",
            format!(
                "{} of {n} sentinel{} answered, and none knows a primary named {service:?}",
                answered.len(),
                plural(n)
            ),
            "check the service name after the hosts in the URL (SENTINEL MASTERS lists the \
             names a sentinel monitors)",
        )];
    };
    // The first sentinel that knows the service speaks for the rest.
    let told = answered.iter().find(|t| t.primary.is_some());
    let agreeing = if *agree == answered.len() && *agree > 1 {
        format!("all name {addr}")
    } else {
        format!("{agree} name{} {addr}", if *agree == 1 { "s" } else { "" })
    };
    let mut detail = format!(
        "{} of {n} sentinel{} answered; {agreeing} primary of {service:?}",
        answered.len(),
        plural(n),
    );
    if let Some(Ok(others)) = told.map(|t| &t.others) {
        detail.push_str(&format!(
            "; the first knows {others} other sentinel{}",
            plural(*others)
        ));
    }
    let mut level = Level::Ok;
    let mut fixes = Vec::new();
    match told.map(|t| &t.ckquorum) {
        Some(Ok(reply)) => detail.push_str(&format!("; CKQUORUM: {reply}")),
        Some(Err(Failure::Denied(_))) => {
            detail.push_str("; CKQUORUM not checked: this user may not run it (ACL: NOPERM)")
        }
        Some(Err(e)) => {
            detail.push_str(&format!("; CKQUORUM: {e}: no failover can be authorized"));
            level = Level::Warn;
            fixes.push("run enough sentinels for their quorum (3 or more)".to_string());
        }
        None => {}
    }
    if named.len() > 1 || knowing < answered.len() {
        let others: Vec<String> = named
            .iter()
            .skip(1)
            .map(|(a, k)| format!("{k} name {a}"))
            .chain(
                (knowing < answered.len())
                    .then(|| format!("{} know no {service:?}", answered.len() - knowing)),
            )
            .collect();
        detail.push_str(&format!(
            "; the sentinels disagree: {} (a failover under way?)",
            others.join(", ")
        ));
        level = Level::Warn;
        fixes.push("run doctor again; if it persists, check each sentinel's configuration".into());
    }
    if !silent.is_empty() {
        detail.push_str(&format!("; not answering: {}", silent.join("; ")));
        level = Level::Warn;
        fixes.push("bring the silent sentinels back, or drop them from the URL".into());
    }
    rows.push(Row {
        level,
        check: "sentinels",
        detail,
        fix: (!fixes.is_empty()).then(|| fixes.join("; ")),
    });
    if let Some(primary) = primary {
        rows.push(sentinel_primary(primary, told.map(|t| &t.replicas)));
    }
    rows
}

/// The server the sentinels name: its ROLE, and the replicas.
fn sentinel_primary(
    primary: &SentinelPrimary,
    replicas: Option<&Result<Vec<std::collections::HashMap<String, String>>, Failure>>,
) -> Row {
    const CHECK: &str = "primary";
    let known = match replicas {
        Some(Ok(list)) => {
            let shown: Vec<String> = list
                .iter()
                .map(|r| {
                    if sentinel::replica_up(r) {
                        sentinel::replica_addr(r)
                    } else {
                        format!("{} (down)", sentinel::replica_addr(r))
                    }
                })
                .collect();
            let n = list.len();
            if n == 0 {
                "; the sentinels know no replica".to_string()
            } else {
                format!(
                    "; the sentinels know {n} replica{}: {}",
                    plural(n),
                    shown.join(", ")
                )
            }
        }
        Some(Err(Failure::Denied(_))) => {
            "; SENTINEL REPLICAS not checked (ACL: NOPERM)".to_string()
        }
        Some(Err(e)) => format!("; SENTINEL REPLICAS failed: {e}"),
        None => String::new(),
    };
    let addr = &primary.addr;
    match &primary.role {
        Ok(role) if role.role == "master" => ok(
            CHECK,
            format!(
                "{addr} says ROLE master, {} replica{} online{known}",
                role.replicas,
                plural(role.replicas)
            ),
        ),
        Ok(role) => fail(
            CHECK,
            format!(
                "{addr}, which the sentinels name primary, says ROLE {}{known}: it refuses \
                 lock writes",
                role.role
            ),
            "a failover may be under way: run doctor again; if it persists, check the \
             sentinels' configuration (SENTINEL RESET)",
        ),
        Err(Failure::Denied(_)) => warn(
            CHECK,
            format!(
                "{addr} (named by the sentinels): ROLE not checked: this user may not run it \
                 (ACL: NOPERM){known}; redlease's Sentinel client confirms the primary with \
                 ROLE (or INFO replication), so it cannot work without one of them"
            ),
            "allow +role for this user, and run doctor as an admin user for the other checks",
        ),
        Err(e) => fail(
            CHECK,
            format!("{addr} (named by the sentinels) did not answer ROLE: {e}{known}"),
            "start the primary, or let the sentinels fail over to a replica",
        ),
    }
}

fn latency(rtt: Duration, ping_denied: bool, ttl: Duration) -> Row {
    // The library's default per-request timeout is 5% of the TTL.
    let budget = ttl / 20;
    let detail = if ping_denied {
        format!(
            "PING {} (median of 5; this user may not run PING, so its refusal was timed)",
            duration::show_ms(rtt)
        )
    } else {
        format!("PING {} (median of 5)", duration::show_ms(rtt))
    };
    let budget_text = format!(
        "the {} a lock request may take with a {} TTL (the node timeout, 5% of it)",
        duration::show(budget),
        duration::show(ttl)
    );
    if rtt >= budget {
        fail(
            "reachable",
            format!("{detail}: slower than {budget_text}"),
            "use nearer nodes, or a longer TTL",
        )
    } else if rtt >= budget / 4 {
        warn(
            "reachable",
            format!("{detail}: little margin under {budget_text}"),
            "use nearer nodes, or a longer TTL",
        )
    } else {
        ok("reachable", detail)
    }
}

/// A check that needs a command this user may not run: doctor says so and
/// goes on with the others. INFO is one redlease needs as well (the
/// permissions row FAILs for it): the fix says to grant it.
fn not_checked(check: &'static str, command: &str, what: &str) -> Row {
    let fix = if command == "INFO" {
        "add +info to the user: redlease needs it too (see the permissions row)".to_string()
    } else {
        format!("run doctor as a user allowed {command} (an admin user), or check {what} yourself")
    };
    warn(
        check,
        format!("not checked: this user may not run {command} (ACL: NOPERM)"),
        fix,
    )
}

/// Why a read failed, for a detail cell.
fn failed(read: Result<(), &Failure>) -> String {
    match read {
        Ok(()) => "answered".to_string(),
        Err(Failure::Denied(_)) => "refused for this user (NOPERM)".to_string(),
        Err(e) => e.to_string(),
    }
}

fn server(facts: &Facts, deploy: Deploy) -> Row {
    const CHECK: &str = "server";
    let Some(server) = facts.server() else {
        return warn(
            CHECK,
            format!(
                "could not tell which server this is: HELLO {}; INFO {}",
                failed(facts.hello.as_ref().map(drop)),
                failed(facts.info.as_ref().map(drop))
            ),
            if matches!(facts.info, Err(Failure::Denied(_))) {
                "allow INFO for this user (ACL +info), or run doctor as an admin user"
            } else {
                "run doctor again; if INFO keeps failing, check the server"
            },
        );
    };
    let mode = facts.mode().unwrap_or_else(|| "standalone".into());
    let compatible = match server.redis_version() {
        Some(v) if server.server() != "redis" => format!(" (Redis {v} compatible)"),
        _ => String::new(),
    };
    let detail = format!(
        "{} {}{compatible}, {mode}",
        server.server(),
        server.version()
    );
    // Judged by what the server can do where it was probed (HELLO, which
    // came with RESP3; EVAL has a check of its own), else by the Redis
    // version it is compatible with, where known.
    let known = server.redis_version().is_some();
    let before_6 = match facts.resp3() {
        Some(resp3) => !resp3,
        None => known && !server.resp3(),
    };
    const UPGRADE: &str = "upgrade to Redis 6.0 or later (the oldest redlease supports), or Valkey";
    match mode.as_str() {
        "cluster" if deploy != Deploy::Cluster => fail(
            CHECK,
            format!("{detail}: a cluster node owns only some keys' slots"),
            "give the whole cluster as one node: redis+cluster://HOST:PORT,HOST:PORT,...",
        ),
        "sentinel" => fail(
            CHECK,
            format!("{detail}: a Sentinel stores no data"),
            "give the sentinels as one node: redis+sentinel://HOST:PORT,HOST:PORT,.../SERVICE",
        ),
        _ if known && !server.set_nx_px() => fail(
            CHECK,
            format!("{detail}: no `SET ... NX PX` (Redis 2.6.12), which the lock is taken with"),
            UPGRADE,
        ),
        _ if before_6 => warn(
            CHECK,
            format!(
                "{detail}: older than Redis 6.0, the oldest supported: without RESP3 waiters are \
                 not woken by releases, so each wait loses one node timeout, then polls on the \
                 retry delay (or the holder's expiry). Locks stay correct."
            ),
            UPGRADE,
        ),
        _ => ok(CHECK, detail),
    }
}

fn scripting(facts: &Facts) -> Row {
    match &facts.scripting {
        Ok(()) => ok(
            "lua scripts",
            "EVAL works (release, extend and renewal are scripts, and a fenced acquire)",
        ),
        Err(Failure::Denied(_)) => fail(
            "lua scripts",
            "this user may not run EVAL (ACL: NOPERM): no lock could be released, extended or \
             renewed",
            "grant the rule in docs/deployments.md, \"ACL: the least privilege\" (+eval +evalsha \
             and the commands the scripts call)",
        ),
        Err(e) => fail(
            "lua scripts",
            format!("EVAL failed: {e}"),
            "allow scripting for this user (docs/deployments.md, \"ACL: the least privilege\")",
        ),
    }
}

/// Whether this user may run every command redlease sends to this server
/// (the library's declaration, [`redlease::acl::COMMANDS`]), tried one by
/// one as the user: FAIL naming each `+command` without which locks fail,
/// WARN for those without which waiters only poll.
fn permissions(facts: &Facts) -> Row {
    const CHECK: &str = "permissions";
    const RULE: &str = "docs/deployments.md, \"ACL: the least privilege\"";
    let tried = &facts.rights;
    let refused: Vec<&Command> = tried.refused().collect();
    let (needed, optional): (Vec<&Command>, Vec<&Command>) =
        refused.iter().partition(|n| !n.optional);
    let grants = |needs: &[&Command]| -> String {
        needs
            .iter()
            .map(|n| format!("+{}", n.name))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let reasons = |needs: &[&Command]| -> String {
        needs
            .iter()
            .map(|n| format!("+{} ({})", n.name, n.without))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let prefix = facts
        .probe_key
        .strip_suffix("doctor-probe")
        .unwrap_or(&facts.probe_key);
    let mut fails = Vec::new();
    let mut fixes = Vec::new();
    if !needed.is_empty() {
        fails.push(format!(
            "this user may not run commands redlease sends here (ACL: NOPERM): {}",
            reasons(&needed)
        ));
        fixes.push(format!("add {} to the user", grants(&needed)));
    }
    if let Some(why) = &tried.key {
        fails.push(format!(
            "this user may not use the key {} ({why}): its key pattern does not \
             cover the lock keys, so no lock can be taken",
            facts.probe_key
        ));
        fixes.push(format!("add ~{prefix}* to the user"));
    }
    let mut warns = Vec::new();
    if !optional.is_empty() {
        warns.push(format!(
            "this user may not run (ACL: NOPERM): {}",
            reasons(&optional)
        ));
        fixes.push(format!("add {} to the user", grants(&optional)));
    }
    if let Some(why) = &tried.channel {
        warns.push(format!(
            "this user may not use the channel {prefix}doctor-probe:released ({why}): \
             waiters cannot hear releases, they poll"
        ));
        fixes.push(format!("add &{prefix}* to the user"));
    }
    if !tried.unknown.is_empty() {
        let unknown: Vec<String> = tried
            .unknown
            .iter()
            .map(|(command, why)| format!("{command}: {why}"))
            .collect();
        warns.push(format!("not checked: {}", unknown.join("; ")));
        if fixes.is_empty() {
            fixes.push("run doctor again".to_string());
        }
    }
    let fix = format!("{} ({RULE})", fixes.join("; "));
    if !fails.is_empty() {
        fails.extend(warns);
        fail(CHECK, fails.join("; "), fix)
    } else if !warns.is_empty() {
        warn(CHECK, warns.join("; "), fix)
    } else {
        ok(
            CHECK,
            format!(
                "this user may run all {} commands redlease sends here (tried on the key {})",
                tried.commands.len(),
                facts.probe_key
            ),
        )
    }
}

/// On a server with `DELIFEQ` (Valkey 9.0 and later), whether this user
/// may run it: the library releases with it, and without the right each
/// connection's first release is refused and the rest use the script.
/// `None` on a server without it.
fn native_release(facts: &Facts) -> Option<Row> {
    const CHECK: &str = "native release";
    Some(match facts.delifeq.as_ref()? {
        Ok(()) => ok(
            CHECK,
            "DELIFEQ works: a release is one command, not a script",
        ),
        // NOPERM about the command names it; about the key, it does not.
        Err(Failure::Denied(why)) if why.to_ascii_lowercase().contains("delifeq") => warn(
            CHECK,
            "this user may not run DELIFEQ (ACL: NOPERM): each connection's first release is \
             refused, then releases use the script, which costs the server about twice as much",
            "add +delifeq to the user (docs/deployments.md, \"ACL: the least privilege\")",
        ),
        Err(Failure::Denied(_)) => warn(
            CHECK,
            format!(
                "not checked: this user may not use the key {} (ACL: NOPERM; another key \
                 prefix?)",
                facts.probe_key
            ),
            "make sure the user has +delifeq (docs/deployments.md, \"ACL: the least privilege\")",
        ),
        Err(e) => warn(
            CHECK,
            format!("DELIFEQ failed: {e}; releases use the script"),
            "check that DELIFEQ is not renamed or disabled on this server",
        ),
    })
}

fn eviction(facts: &Facts) -> Row {
    const CHECK: &str = "maxmemory-policy";
    if let Err(Failure::Denied(_)) = &facts.config {
        return not_checked(CHECK, "CONFIG GET", "that maxmemory-policy is noeviction");
    }
    let Some(policy) = facts.setting("maxmemory-policy") else {
        let why = facts
            .config
            .as_ref()
            .err()
            .map_or_else(|| "not reported".into(), ToString::to_string);
        return warn(
            CHECK,
            format!("could not read it: {why}"),
            "make sure it is noeviction (managed services show it in their parameter settings)",
        );
    };
    if policy == "noeviction" {
        return ok(CHECK, "noeviction: lock keys are never evicted");
    }
    let limit = match facts.setting("maxmemory") {
        Some("0") => " (no maxmemory is set yet, but the policy applies once one is)",
        _ => "",
    };
    fail(
        CHECK,
        format!(
            "{policy}: under memory pressure Redis may evict a lock key, and a second \
             client then gets the lock{limit}"
        ),
        "CONFIG SET maxmemory-policy noeviction, and set it in redis.conf",
    )
}

fn persistence(facts: &Facts, quarantine: Duration) -> Row {
    const CHECK: &str = "persistence";
    let aof = match facts.setting("appendonly") {
        Some(v) => Some(v == "yes"),
        None => facts.info("aof_enabled").map(|v| v == "1"),
    };
    let delayed = if quarantine.is_zero() {
        "keep the node down for longer than your largest TTL after a crash, or turn the \
         restart quarantine back on"
            .to_string()
    } else {
        format!(
            "keep the restart quarantine ({}) at least your largest TTL: redlease counts no \
             vote from a node that restarted more recently",
            duration::show(quarantine)
        )
    };
    match (aof, facts.setting("appendfsync")) {
        (Some(true), Some("always")) => ok(
            CHECK,
            "AOF with appendfsync always: lock keys survive a crash",
        ),
        (Some(true), fsync) => warn(
            CHECK,
            format!(
                "AOF with appendfsync {}: a crash can lose the last writes, lock keys included",
                fsync.unwrap_or("unknown")
            ),
            format!("CONFIG SET appendfsync always, or {delayed}"),
        ),
        (Some(false), _) => warn(
            CHECK,
            "no AOF: a restarted node comes back without its lock keys",
            format!("{delayed}, or CONFIG SET appendonly yes and appendfsync always"),
        ),
        (None, _)
            if matches!(
                (&facts.config, &facts.info),
                (Err(Failure::Denied(_)), Err(Failure::Denied(_)))
            ) =>
        {
            not_checked(CHECK, "CONFIG GET or INFO", "the persistence settings")
        }
        (None, _) => warn(
            CHECK,
            "could not read the persistence settings",
            format!("use appendonly yes with appendfsync always, or {delayed}"),
        ),
    }
}

/// Whether the server has been up for the restart quarantine (a server
/// that started more recently casts no vote for a lock).
fn restart_quarantine(facts: &Facts, quarantine: Duration, deploy: Deploy) -> Row {
    const CHECK: &str = "restart quarantine";
    let up = facts
        .info("uptime_in_seconds")
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs);
    // A cluster's primaries are judged one by one: a restarted shard
    // loses its own slots' votes.
    let votes = match deploy {
        Deploy::Cluster => "its slots cast no vote",
        _ => "casts no vote",
    };
    match (up, deploy) {
        (_, _) if quarantine.is_zero() && fsyncs_every_write(facts) => ok(
            CHECK,
            "off; this node fsyncs every write (appendfsync always), so a restart from its own \
             AOF loses no lock (one that comes back without it, on a new volume or with the \
             file deleted, can grant a held lock again: redlease cannot tell)",
        ),
        (_, _) if quarantine.is_zero() => warn(
            CHECK,
            "off: a node that restarted empty votes at once and can grant a held lock again",
            "leave it on (the default) unless every node runs appendfsync always",
        ),
        (Some(up), _) if up < quarantine => warn(
            CHECK,
            format!(
                "up {}: {votes} for a lock for {} more (it may have lost locks it granted)",
                duration::show(up),
                duration::show(quarantine - up)
            ),
            "nothing, if the restart was planned; find out why it restarted otherwise",
        ),
        (Some(up), _) => ok(
            CHECK,
            format!(
                "up {}, past the {} quarantine: it votes",
                duration::show(up),
                duration::show(quarantine)
            ),
        ),
        (None, _) if matches!(facts.info, Err(Failure::Denied(_))) => {
            not_checked(CHECK, "INFO", "its uptime")
        }
        (None, _) => warn(
            CHECK,
            match &facts.info {
                Ok(_) => "could not read its uptime: INFO has no uptime_in_seconds".to_string(),
                Err(e) => format!("could not read its uptime: INFO failed: {e}"),
            },
            "run doctor again: redlease needs INFO's uptime to see restarts",
        ),
    }
}

/// AOF on with `appendfsync always`, as far as CONFIG GET shows.
fn fsyncs_every_write(facts: &Facts) -> bool {
    facts.setting("appendonly") == Some("yes") && facts.setting("appendfsync") == Some("always")
}

fn replication(facts: &Facts, deploy: Deploy, known: Option<usize>, durable: Option<u32>) -> Row {
    const CHECK: &str = "replication";
    // INFO, else what the cluster or the sentinels tell.
    let replicas = facts
        .info("connected_slaves")
        .and_then(|n| n.parse::<usize>().ok())
        .or(known);
    // INFO says master/slave; HELLO (which every user may run) master/replica.
    let role = facts.info("role").or_else(|| {
        let role = facts.hello.as_ref().ok()?.role.as_deref()?;
        Some(if role == "replica" { "slave" } else { role }.to_string())
    });
    match role.as_deref() {
        Some("master") if replicas.is_none() => warn(
            CHECK,
            "not checked: this user may not run INFO (ACL: NOPERM); HELLO says it is a \
             primary, but not how many replicas it has",
            "run doctor as a user allowed INFO (an admin user), or make sure no replica can \
             be promoted in its place",
        ),
        Some("slave") => {
            let primary = match (facts.info("master_host"), facts.info("master_port")) {
                (Some(host), Some(port)) => format!(" of {host}:{port}"),
                _ => String::new(),
            };
            let fix = match deploy {
                Deploy::Standalone => "list independent primaries only",
                Deploy::Cluster | Deploy::Sentinel => {
                    "a failover may be under way: run doctor again"
                }
            };
            fail(
                CHECK,
                format!("a replica{primary}: it refuses lock writes or holds stale ones"),
                fix,
            )
        }
        Some("master") => {
            let n = replicas.unwrap_or(0);
            match durable.map(|wanted| (wanted, u32::try_from(n).unwrap_or(u32::MAX))) {
                Some((wanted, has)) if has < wanted => fail(
                    CHECK,
                    format!(
                        "primary with {n} connected replica{}: --durable {wanted} makes every \
                         lock write wait for {wanted}, which are not there, so no durable lock \
                         can be taken on it",
                        plural(n)
                    ),
                    replicas::ADVICE,
                ),
                Some((wanted, has)) if has == wanted => ok(
                    CHECK,
                    format!(
                        "primary with {n} replica{}, and --durable {wanted}: every replica \
                         acknowledges each lock write, so one promoted in a failover has it",
                        plural(n)
                    ),
                ),
                Some((wanted, _)) => warn(
                    CHECK,
                    format!(
                        "primary with {n} replicas, and --durable {wanted}: a replica promoted \
                         in a failover may be one that did not acknowledge the lock"
                    ),
                    format!("ask for every replica: --durable {n}"),
                ),
                None if n == 0 => ok(CHECK, "primary without replicas"),
                None => warn(CHECK, failover_risk(n), FAILOVER_FIX),
            }
        }
        None if matches!(facts.info, Err(Failure::Denied(_))) => {
            not_checked(CHECK, "INFO", "that the node is a primary without replicas")
        }
        _ => warn(
            CHECK,
            match &facts.info {
                Ok(_) => "could not read the role: INFO has no role".to_string(),
                Err(e) => format!("could not read the role: INFO failed: {e}"),
            },
            "run doctor again; if INFO keeps failing, check the server",
        ),
    }
}

/// What a primary with `n` replicas risks: a failover can lose a held lock.
fn failover_risk(n: usize) -> String {
    format!(
        "primary with {n} replica{}: a failover can lose a held lock. The lock's guarantees \
         hold per primary; replication is asynchronous, and a replica promoted before it \
         received the lock key lets a second client take the lock (see docs/deployments.md)",
        plural(n)
    )
}

const FAILOVER_FIX: &str = "ask replicas to acknowledge every write (redlease run --durable N; \
     the library's LockerBuilder::durability), or use independent primaries without automatic \
     failover (several of them give availability)";

/// `--durable N`: whether enough nodes' primaries have N connected
/// replicas for a lock that needs `need` of the nodes, judged as `run`
/// judges it before taking a durable lock (a node that does not tell is
/// not held against it).
fn durable(names: &[String], found: &[Probed], wanted: u32, need: usize) -> Row {
    const CHECK: &str = "durable";
    let replicas: Vec<(String, Replicas)> = names
        .iter()
        .cloned()
        .zip(found.iter().map(Probed::replicas))
        .collect();
    if let Some(why) = replicas::too_few(&replicas, wanted, need) {
        return fail(CHECK, why, replicas::ADVICE);
    }
    let n = found.len();
    let enough = replicas
        .iter()
        .filter(|(_, r)| matches!(r, Replicas::Known { .. }) && !r.short_of(wanted))
        .count();
    let unknown = replicas
        .iter()
        .filter(|(_, r)| *r == Replicas::Unknown)
        .count();
    let mut detail = format!(
        "{enough} of {n} node{} ha{} {wanted} or more connected replica{} for --durable \
         {wanted}; a lock needs {need}",
        plural(n),
        if n == 1 { "s" } else { "ve" },
        plural(wanted as usize)
    );
    if unknown > 0 {
        detail.push_str(&format!(" ({unknown} did not tell)"));
    }
    if enough >= need {
        ok(CHECK, detail)
    } else {
        warn(
            CHECK,
            detail,
            "make sure the nodes that did not tell have the replicas (see their rows)",
        )
    }
}

/// `--permits N`: how many nodes each permit needs over these nodes, and
/// how many may fail. A semaphore on which no node may fail FAILs with the
/// library's own words (its refusal, given before any I/O), which `run`
/// and `acquire` exit 2 with. Also gives the nodes a permit needs.
async fn semaphore(nodes: &NodesArg, permits: u32, found: &[Probed]) -> Result<(Row, usize), Exit> {
    const CHECK: &str = "semaphore";
    let (_, builder) = nodes.builder()?;
    let locker = builder
        .build()
        .map_err(|e| Exit::with(exit::USAGE, chain(&e)))?;
    let semaphore = locker.semaphore("doctor-probe", permits);
    let (n, need, tolerates) = (found.len(), semaphore.quorum(), semaphore.tolerates());
    let up = found.iter().filter(|p| p.up()).count();
    let mut detail = format!(
        "{permits} permit{} over {n} node{}: each permit is held on {need} of them, so {tolerates} \
         may fail",
        plural(permits as usize),
        plural(n)
    );
    if up < n {
        detail.push_str(&format!("; {up} of {n} reachable"));
    }
    let row = if n > 1 && tolerates == 0 {
        // Refused before any I/O: the library's reason, with its advice.
        let why = match semaphore.check() {
            Err(e) => chain(&e),
            Ok(()) => "no node may fail".to_string(),
        };
        let why = why
            .strip_prefix("invalid --permits: ")
            .unwrap_or(&why)
            .to_string();
        fail(
            CHECK,
            why,
            "run and acquire refuse it (exit 2) unless --allow-no-failures accepts that one \
             node down stops every holder of the name",
        )
    } else if up < need {
        fail(
            CHECK,
            format!("{detail}: no permit can be taken now"),
            "bring nodes back until enough answer",
        )
    } else {
        ok(CHECK, detail)
    };
    locker.close().await;
    Ok((row, need))
}

/// The checks across nodes.
fn fleet_checks(found: &[Probed]) -> Vec<Row> {
    let servers: Vec<(usize, &Facts)> = found
        .iter()
        .enumerate()
        .flat_map(|(i, probed)| probed.servers().into_iter().map(move |f| (i, f)))
        .collect();
    let up = found.iter().filter(|p| p.up()).count();
    if servers.is_empty() {
        // Nothing to compare: an OK here would read as a pass. The node
        // count FAILs, and each node's row says why.
        return vec![node_count(found.len(), up)];
    }
    vec![
        node_count(found.len(), up),
        same_server(&servers),
        clock_skew(&servers),
    ]
}

fn node_count(n: usize, up: usize) -> Row {
    const CHECK: &str = "node count";
    let quorum = n / 2 + 1;
    let tolerated = n - quorum;
    let mut detail = format!(
        "{n} node{}, quorum {quorum}: tolerates {tolerated} failure{}",
        plural(n),
        plural(tolerated)
    );
    let even = n.is_multiple_of(2);
    if even {
        detail.push_str(&format!(", no more than {} node{}", n - 1, plural(n - 1)));
    }
    if up < n {
        detail.push_str(&format!("; {up} of {n} reachable"));
    }
    if up < quorum {
        fail(
            CHECK,
            format!("{detail}: no lock can be taken now"),
            "bring nodes back until a quorum answers",
        )
    } else if even {
        warn(
            CHECK,
            detail,
            format!("use an odd number of nodes ({} or {})", n - 1, n + 1),
        )
    } else {
        ok(CHECK, detail)
    }
}

/// `servers`: every server reached, with the index of the node it belongs
/// to (a cluster's primaries all belong to one).
fn same_server(servers: &[(usize, &Facts)]) -> Row {
    const CHECK: &str = "distinct servers";
    let mut by_id: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    // Nodes with a reachable server that did not tell its run_id (INFO
    // refused).
    let mut unknown = BTreeSet::new();
    for (i, facts) in servers {
        match facts.info("run_id") {
            Some(id) => {
                by_id.entry(id).or_default().insert(*i);
            }
            None => {
                unknown.insert(*i);
            }
        }
    }
    let twice: Vec<String> = by_id
        .values()
        .filter(|nodes| nodes.len() > 1)
        .map(|nodes| {
            let names: Vec<String> = nodes.iter().map(|i| format!("node {i}")).collect();
            names.join(" = ")
        })
        .collect();
    if twice.is_empty() && !unknown.is_empty() {
        let names: Vec<String> = unknown.iter().map(|i| format!("node {i}")).collect();
        let refused = servers
            .iter()
            .any(|(_, f)| matches!(f.info, Err(Failure::Denied(_))));
        warn(
            CHECK,
            format!(
                "not checked for {}: INFO (run_id) {}",
                names.join(", "),
                if refused {
                    "refused for this user (ACL: NOPERM)"
                } else {
                    "not answered"
                }
            ),
            if refused {
                "add +info to the user (redlease needs it too, and refuses a server listed \
                 twice once it can read run_id)"
            } else {
                "run doctor again, and make sure no server is listed twice under two names"
            },
        )
    } else if twice.is_empty() {
        ok(
            CHECK,
            format!(
                "{} distinct server{} by run_id",
                by_id.len(),
                plural(by_id.len())
            ),
        )
    } else {
        fail(
            CHECK,
            format!(
                "the same server (same run_id) is listed more than once: {}; it would count \
                 twice toward the quorum, a fake majority",
                twice.join(", ")
            ),
            "list each server once",
        )
    }
}

fn clock_skew(servers: &[(usize, &Facts)]) -> Row {
    const CHECK: &str = "clock skew";
    let clocks: Vec<_> = servers
        .iter()
        .filter_map(|(_, f)| f.clock.as_ref().ok())
        .collect();
    let (Some(min), Some(max)) = (
        clocks.iter().map(|c| c.offset_us).min(),
        clocks.iter().map(|c| c.offset_us).max(),
    ) else {
        let failures: Vec<&Failure> = servers
            .iter()
            .filter_map(|(_, f)| f.clock.as_ref().err())
            .collect();
        // An ACL grant helps only if TIME was refused for this user.
        return match failures.iter().find(|f| !matches!(f, Failure::Denied(_))) {
            None => warn(
                CHECK,
                "no node told its time: this user may not run TIME (ACL: NOPERM)",
                "allow TIME for this user (the lock script needs it too)",
            ),
            Some(e) => warn(
                CHECK,
                format!("no node told its time: TIME failed: {e}"),
                "run doctor again; if TIME keeps failing, check the nodes",
            ),
        };
    };
    if clocks.len() < 2 {
        return ok(CHECK, "one server: nothing to compare");
    }
    let spread = Duration::from_micros(max.abs_diff(min));
    let error = clocks
        .iter()
        .map(|c| c.uncertainty)
        .max()
        .unwrap_or_default();
    let detail = format!(
        "clocks differ by at most {} (± {})",
        duration::show_ms(spread),
        duration::show_ms(error)
    );
    if spread >= SKEW_FAIL {
        fail(
            CHECK,
            format!(
                "{detail}: no time sync; fencing counters restarted from a node's clock \
                 assume clocks within the fence expiry (10 min by default)"
            ),
            "run time sync (chrony or ntpd, slewing) on every node",
        )
    } else if spread >= SKEW_WARN {
        warn(
            CHECK,
            format!("{detail}: time sync looks off, and a clock that steps expires keys early"),
            "run time sync (chrony or ntpd, slewing) on every node",
        )
    } else {
        ok(CHECK, detail)
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_names_the_budget_in_words_and_below_a_millisecond() {
        let us = Duration::from_micros;
        let slow = latency(us(210), false, Duration::from_millis(2));
        assert_eq!(slow.level, Level::Fail);
        assert!(
            slow.detail.ends_with(
                "slower than the 100µs a lock request may take with a 2ms TTL (the node \
                 timeout, 5% of it)"
            ),
            "{}",
            slow.detail
        );
        let close = latency(us(40), false, Duration::from_millis(2));
        assert_eq!(close.level, Level::Warn);
        assert!(
            close.detail.contains("little margin under the 100µs"),
            "{}",
            close.detail
        );
        assert_eq!(
            latency(us(20), false, Duration::from_secs(10)).level,
            Level::Ok
        );
    }

    fn with_delifeq(delifeq: Option<Result<(), Failure>>) -> Facts {
        let not_asked = || Failure::Failed("not asked".into());
        Facts {
            latency: Duration::ZERO,
            ping_denied: false,
            hello: Err(not_asked()),
            info: Err(not_asked()),
            info_capabilities: None,
            config: Err(not_asked()),
            clock: Err(not_asked()),
            scripting: Ok(()),
            delifeq,
            rights: rights::Tried::default(),
            probe_key: "redlease:doctor-probe".into(),
        }
    }

    #[test]
    fn the_native_release_row_says_what_the_user_may_do() {
        assert!(native_release(&with_delifeq(None)).is_none());
        let works = native_release(&with_delifeq(Some(Ok(())))).unwrap();
        assert_eq!(works.level, Level::Ok);
        let denied = Failure::Denied(
            "NOPERM: User redlease has no permissions to run the 'delifeq' command".into(),
        );
        let row = native_release(&with_delifeq(Some(Err(denied)))).unwrap();
        assert_eq!(row.level, Level::Warn);
        assert!(row.fix.unwrap().contains("+delifeq"));
        let key = Failure::Denied("NOPERM: No permissions to access a key".into());
        let row = native_release(&with_delifeq(Some(Err(key)))).unwrap();
        assert_eq!(row.level, Level::Warn);
        assert!(row.detail.starts_with("not checked"), "{}", row.detail);
        let renamed = Failure::Unknown("unknown command 'DELIFEQ'".into());
        let row = native_release(&with_delifeq(Some(Err(renamed)))).unwrap();
        assert_eq!(row.level, Level::Warn);
    }

    #[test]
    fn an_auth_failure_or_a_foreign_port_is_fixed_in_the_url() {
        let timeout = Duration::from_secs(2);
        for (diagnosis, fix) in [
            (
                Diagnosis::NeedsPassword,
                "give the user and password in the URL",
            ),
            (Diagnosis::WrongPassword, "check the user name and password"),
            (Diagnosis::NotRedis, "check the port"),
        ] {
            let row = unreachable(&Failure::Diagnosed(diagnosis), "the server", "URL", timeout);
            assert_eq!(row.detail, format!("no: {diagnosis}"));
            let row_fix = row.fix.unwrap();
            assert!(row_fix.starts_with(fix), "{row_fix}");
            assert!(!row_fix.contains("start the server"), "{row_fix}");
            assert!(!row_fix.contains("allow"), "{row_fix}");
        }
    }
}
