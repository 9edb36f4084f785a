//! Replicated deployments that act as ONE node of the quorum: a Redis
//! Cluster with a replica per primary, or a primary with replicas that
//! Sentinels watch. Starts them, fails them over, and finds where the
//! locks live, for the deployment scenarios and their negative controls.
//!
//! Everything here blocks (the testkit's admin calls are synchronous and
//! panic when the deployment misbehaves): call it through [`blocking`],
//! which runs it off the async threads and turns a harness panic into an
//! error of the run.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redlease_testkit::cluster::RedisCluster;
use redlease_testkit::sentinel::{SentinelSet, PRIMARY_NAME};
use redlease_testkit::RedisNode;

use crate::panics;
use crate::rig::panic_text;

/// Primaries of the cluster deployment.
pub const CLUSTER_PRIMARIES: usize = 3;
/// Replicas per primary of the cluster deployment.
pub const CLUSTER_REPLICAS: usize = 1;
/// Replicas of the Sentinel deployment's primary: two, so one is still
/// there to acknowledge writes right after the other was promoted.
pub const SENTINEL_REPLICAS: usize = 2;
/// Sentinels: a majority of 2 agrees on a failure.
pub const SENTINELS: usize = 3;

/// How long one admin command may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(2);
/// How often bounded waits look again.
const POLL: Duration = Duration::from_millis(50);
/// How long a failover may take to name a new primary.
pub const SWITCH_LIMIT: Duration = Duration::from_secs(30);
/// How long the deployment may take to settle after it (every replica
/// following the new primary and synced; a deposed Sentinel primary is
/// only told to follow after about 10 s, and the sentinels see it follow
/// at their next `INFO`, up to 10 s later).
pub const SETTLE_LIMIT: Duration = Duration::from_secs(60);

/// Which deployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Cluster,
    /// A cluster of primaries without replicas.
    BareCluster,
    Sentinel,
}

/// A running deployment.
pub enum Deployment {
    Cluster(RedisCluster),
    Sentinel(SentinelSet),
}

/// A deployment shared between the fault injector and the final
/// inspection; each holds the lock only for the length of one step.
pub type Shared = Arc<Mutex<Deployment>>;

pub fn lock(shared: &Shared) -> MutexGuard<'_, Deployment> {
    // Poisoned only if an earlier harness step panicked; that error is
    // already reported, and the deployment is still usable.
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs blocking harness work off the async threads; a panic inside (a
/// testkit wait that gave up) becomes the error.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(move || panics::harness(f))
        .await
        .map_err(panic_text)?
}

/// How a failover went.
#[derive(Clone, Debug)]
pub struct Switch {
    pub old: u16,
    pub new: u16,
    /// From the fault to a new primary named (by the cluster or the sentinels).
    pub switched: Duration,
    /// From the fault to every replica following the new primary, synced
    /// (`None`: the run ended first, and the wait was given up).
    pub settled: Option<Duration>,
}

impl Deployment {
    /// Starts the deployment and waits until every replica has synced
    /// (a replica still in its first sync would be promoted empty).
    pub fn start(kind: Kind) -> Result<Deployment, String> {
        match kind {
            Kind::Cluster => {
                // Forms with repl-diskless-sync-delay 0 and waits for the
                // replicas' master_link_status:up itself.
                Ok(Deployment::Cluster(RedisCluster::start_with_replicas(
                    CLUSTER_PRIMARIES,
                    CLUSTER_REPLICAS,
                )))
            }
            Kind::BareCluster => Ok(Deployment::Cluster(RedisCluster::start(CLUSTER_PRIMARIES))),
            Kind::Sentinel => {
                let set = SentinelSet::start(SENTINEL_REPLICAS, SENTINELS);
                // Redis 7.0 waits 5 s before a full sync in case more
                // replicas come: every resync after a failover would cost
                // that. The cluster's nodes start with 0 too.
                for i in 0..=SENTINEL_REPLICAS {
                    let _: () = query(
                        set.node(i),
                        redis::cmd("CONFIG")
                            .arg("SET")
                            .arg("repl-diskless-sync-delay")
                            .arg(0),
                    )
                    .map_err(|e| format!("CONFIG SET on {}: {e}", set.node(i).addr()))?;
                }
                let deployment = Deployment::Sentinel(set);
                let primary = deployment.primary_port_of("")?;
                deployment.await_settled(primary, None)?;
                Ok(deployment)
            }
        }
    }

    /// The node URL the clients are given.
    pub fn url(&self) -> String {
        match self {
            Deployment::Cluster(cluster) => cluster.cluster_url(),
            Deployment::Sentinel(set) => {
                let hosts: Vec<String> = set
                    .sentinel_urls()
                    .iter()
                    .map(|u| u.trim_start_matches("redis://").to_string())
                    .collect();
                format!("redis+sentinel://{}/{PRIMARY_NAME}", hosts.join(","))
            }
        }
    }

    /// What it is, in words.
    pub fn describe(&self) -> String {
        match self {
            Deployment::Cluster(cluster) => format!(
                "a Redis Cluster of {CLUSTER_PRIMARIES} primaries x {} replica(s) \
                 (cluster-node-timeout 2 s) as the one node",
                cluster_replicas(cluster)
            ),
            Deployment::Sentinel(_) => format!(
                "a primary with {SENTINEL_REPLICAS} replicas and {SENTINELS} sentinels \
                 (down-after 1 s) as the one node"
            ),
        }
    }

    fn data_nodes(&self) -> Vec<&RedisNode> {
        match self {
            Deployment::Cluster(cluster) => cluster.iter().collect(),
            Deployment::Sentinel(set) => (0..=SENTINEL_REPLICAS).map(|i| set.node(i)).collect(),
        }
    }

    pub fn node(&self, port: u16) -> Result<&RedisNode, String> {
        self.data_nodes()
            .into_iter()
            .find(|n| n.port() == port)
            .ok_or_else(|| format!("no data node on port {port}"))
    }

    pub fn node_mut(&mut self, port: u16) -> Result<&mut RedisNode, String> {
        let found = match self {
            Deployment::Cluster(cluster) => cluster.node_on_mut(port),
            Deployment::Sentinel(set) => {
                let i = (0..=SENTINEL_REPLICAS).find(|&i| set.node(i).port() == port);
                i.map(|i| set.node_mut(i))
            }
        };
        found.ok_or_else(|| format!("no data node on port {port}"))
    }

    /// The hash slot of `key` (cluster), asked of a node that answers.
    pub fn slot_of(&self, key: &str) -> Result<u16, String> {
        let mut last = String::from("no node");
        for node in self.data_nodes().into_iter().filter(|n| n.is_running()) {
            match query(node, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key)) {
                Ok(slot) => return Ok(slot),
                Err(e) => last = format!("{}: {e}", node.addr()),
            }
        }
        Err(format!("CLUSTER KEYSLOT {key}: {last}"))
    }

    /// The port of the primary that serves `key` now (a Sentinel
    /// deployment has one for every key).
    pub fn primary_port_of(&self, key: &str) -> Result<u16, String> {
        match self {
            Deployment::Cluster(cluster) => {
                let slot = self.slot_of(key)?;
                Ok(cluster.owner_of(slot).port())
            }
            Deployment::Sentinel(set) => Ok(set.primary_port()),
        }
    }

    /// The replicas of the primary on `primary` now.
    pub fn replica_ports(&self, primary: u16) -> Vec<u16> {
        match self {
            Deployment::Cluster(cluster) => cluster
                .replicas_of(primary)
                .iter()
                .map(|n| n.port())
                .collect(),
            Deployment::Sentinel(_) => self
                .data_nodes()
                .iter()
                .map(|n| n.port())
                .filter(|&p| p != primary)
                .collect(),
        }
    }

    /// Waits until a primary other than `old` serves `key`; its port.
    pub fn await_new_primary(&self, key: &str, old: u16, limit: Duration) -> Result<u16, String> {
        match self {
            Deployment::Cluster(cluster) => {
                let slot = self.slot_of(key)?;
                Ok(cluster.await_new_owner(slot, old, limit).port())
            }
            Deployment::Sentinel(set) => Ok(set.await_failover(old, limit)),
        }
    }

    /// `127.0.0.1:PORT` of every node that is a primary now (where lock
    /// keys live; replicas hold copies).
    pub fn primary_addrs(&self) -> Vec<String> {
        self.data_nodes()
            .into_iter()
            .filter(|n| n.is_running())
            .filter(|n| replication(n).contains("role:master"))
            .map(RedisNode::addr)
            .collect()
    }

    /// Waits until every replica of the primary on `primary` follows it
    /// with its link up (cluster: of that shard; Sentinel: every other
    /// data node, the deposed primary included, and every sentinel has
    /// seen that), for at most [`SETTLE_LIMIT`]. `Ok(false)` if `stop`
    /// passed first (the run is over: nobody needs the deployment settled).
    pub fn await_settled(&self, primary: u16, stop: Option<Instant>) -> Result<bool, String> {
        let (expected, what) = match self {
            Deployment::Cluster(cluster) => (cluster_replicas(cluster), "the shard's replica"),
            Deployment::Sentinel(_) => (SENTINEL_REPLICAS, "every other data node"),
        };
        poll(
            SETTLE_LIMIT,
            &format!("{what} did not follow port {primary} with its link up"),
            || {
                if stop.is_some_and(|stop| Instant::now() >= stop) {
                    return Ok(false);
                }
                let replicas: Vec<&RedisNode> = match self {
                    Deployment::Cluster(cluster) => cluster.replicas_of(primary),
                    Deployment::Sentinel(_) => self
                        .data_nodes()
                        .into_iter()
                        .filter(|n| n.port() != primary)
                        .collect(),
                };
                if replicas.len() < expected {
                    return Err(format!("{} replica(s) seen", replicas.len()));
                }
                for replica in &replicas {
                    let info = replication(replica);
                    let follows = info.contains("role:slave")
                        && info.contains(&format!("master_port:{primary}\r"))
                        && info.contains("master_link_status:up");
                    if !follows {
                        return Err(format!("{}: {}", replica.addr(), summary(&info)));
                    }
                }
                if let Deployment::Sentinel(set) = self {
                    let ports: Vec<u16> = replicas.iter().map(|r| r.port()).collect();
                    sentinels_agree(set, primary, &ports)?;
                }
                Ok(true)
            },
        )
    }

    /// `CLUSTER FAILOVER` of the shard that owns `slot` (coordinated: the
    /// replica catches up first), then waits until the old primary is a
    /// synced replica.
    pub fn cluster_failover(&self, slot: u16, stop: Option<Instant>) -> Result<Switch, String> {
        let Deployment::Cluster(cluster) = self else {
            return Err("not a cluster".into());
        };
        let old = cluster.owner_of(slot).port();
        let started = Instant::now();
        let new = cluster.failover(slot, SWITCH_LIMIT).port();
        let switched = started.elapsed();
        let settled = self.await_settled(new, stop)?;
        Ok(Switch {
            old,
            new,
            switched,
            settled: settled.then(|| started.elapsed()),
        })
    }

    /// SIGKILLs the primary that owns `slot`, waits for its replica to take
    /// over, restarts the killed process (same port, same directory, so
    /// the same nodes.conf: it rejoins, empty, and the cluster makes it a
    /// replica of the new owner), and waits until it has synced.
    pub fn cluster_kill_restart(
        &mut self,
        slot: u16,
        stop: Option<Instant>,
    ) -> Result<Switch, String> {
        let Deployment::Cluster(cluster) = self else {
            return Err("not a cluster".into());
        };
        let old = cluster.owner_of(slot).port();
        let started = Instant::now();
        cluster
            .node_on_mut(old)
            .ok_or_else(|| format!("no node on port {old}"))?
            .kill();
        let new = cluster.await_new_owner(slot, old, SWITCH_LIMIT).port();
        let switched = started.elapsed();
        cluster
            .node_on_mut(old)
            .ok_or_else(|| format!("no node on port {old}"))?
            .restart();
        let settled = self.await_settled(new, stop).map_err(|e| {
            format!("the killed primary {old}, restarted, did not rejoin as a synced replica: {e}")
        })?;
        Ok(Switch {
            old,
            new,
            switched,
            settled: settled.then(|| started.elapsed()),
        })
    }

    /// SIGKILLs the primary that owns `slot` and restarts it at once, with
    /// its directory (so its nodes.conf: it keeps its slots) but no data:
    /// on a cluster without replicas, the restart the restart quarantine
    /// is for. Waits until it serves its slots again (`cluster_state:ok`).
    pub fn cluster_empty_restart(
        &mut self,
        slot: u16,
        stop: Option<Instant>,
    ) -> Result<Switch, String> {
        let Deployment::Cluster(cluster) = self else {
            return Err("not a cluster".into());
        };
        let old = cluster.owner_of(slot).port();
        let started = Instant::now();
        let node = cluster
            .node_on_mut(old)
            .ok_or_else(|| format!("no node on port {old}"))?;
        node.kill();
        node.restart();
        let switched = started.elapsed();
        let node = cluster
            .node_on(old)
            .ok_or_else(|| format!("no node on port {old}"))?;
        let settled = poll(
            SETTLE_LIMIT,
            &format!("the restarted primary {old} did not serve its slots again"),
            || {
                if stop.is_some_and(|stop| Instant::now() >= stop) {
                    return Ok(false);
                }
                let info: String =
                    query(node, redis::cmd("CLUSTER").arg("INFO")).map_err(|e| e.to_string())?;
                match info.contains("cluster_state:ok") {
                    true => Ok(true),
                    false => Err("cluster_state not ok".to_string()),
                }
            },
        )?;
        Ok(Switch {
            old,
            new: old,
            switched,
            settled: settled.then(|| started.elapsed()),
        })
    }

    /// `SENTINEL FAILOVER` sent to sentinel `via` (asked again while a
    /// previous failover is still in progress or no replica qualifies yet),
    /// then waits until every other data node follows the new primary.
    pub fn sentinel_failover(&self, via: usize, stop: Option<Instant>) -> Result<Switch, String> {
        let Deployment::Sentinel(set) = self else {
            return Err("not a Sentinel deployment".into());
        };
        let old = set.primary_port();
        let urls = set.sentinel_urls();
        let url = &urls[via % urls.len()];
        let started = Instant::now();
        poll(SWITCH_LIMIT, "SENTINEL FAILOVER was refused", || {
            let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
            let mut con = client
                .get_connection_with_timeout(ADMIN_TIMEOUT)
                .map_err(|e| e.to_string())?;
            redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(PRIMARY_NAME)
                .query::<()>(&mut con)
                .map_err(|e| e.to_string())
        })?;
        let new = set.await_failover(old, SWITCH_LIMIT);
        let switched = started.elapsed();
        let settled = self.await_settled(new, stop)?;
        Ok(Switch {
            old,
            new,
            switched,
            settled: settled.then(|| started.elapsed()),
        })
    }
}

/// Whether every sentinel names `primary` and has seen each of
/// `replicas` report itself a replica of it (`role-reported`, refreshed by
/// the sentinel's own `INFO`, every 10 s). Until then a sentinel may still
/// "convert" a node it last saw as a primary: a failover started then can
/// have its promoted replica turned back into a replica by another
/// sentinel, and be aborted.
fn sentinels_agree(set: &SentinelSet, primary: u16, replicas: &[u16]) -> Result<(), String> {
    for url in set.sentinel_urls() {
        let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
        let mut con = client
            .get_connection_with_timeout(ADMIN_TIMEOUT)
            .map_err(|e| format!("{url}: {e}"))?;
        con.set_read_timeout(Some(ADMIN_TIMEOUT))
            .map_err(|e| e.to_string())?;
        let (_, named): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(PRIMARY_NAME)
            .query(&mut con)
            .map_err(|e| format!("{url}: {e}"))?;
        if named != primary {
            return Err(format!("{url} names port {named}"));
        }
        let seen: Vec<Vec<String>> = redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(PRIMARY_NAME)
            .query(&mut con)
            .map_err(|e| format!("{url}: {e}"))?;
        for &port in replicas {
            let entry = seen
                .iter()
                .find(|fields| field(fields, "port") == Some(&*port.to_string()));
            let settled = entry.is_some_and(|fields| {
                field(fields, "role-reported") == Some("slave")
                    && field(fields, "master-port") == Some(&*primary.to_string())
                    && field(fields, "master-link-status") == Some("ok")
                    && field(fields, "flags")
                        .is_some_and(|f| !f.contains("s_down") && !f.contains("disconnected"))
            });
            if !settled {
                return Err(format!("{url} does not see port {port} settled: {entry:?}"));
            }
        }
    }
    Ok(())
}

/// The value after `name` in a flat field/value list.
fn field<'a>(fields: &'a [String], name: &str) -> Option<&'a str> {
    fields
        .chunks(2)
        .find(|pair| pair[0] == name)
        .and_then(|pair| pair.get(1))
        .map(String::as_str)
}

/// Runs `cmd` on `node` with every step bounded.
pub fn query<T: redis::FromRedisValue>(
    node: &RedisNode,
    cmd: &mut redis::Cmd,
) -> redis::RedisResult<T> {
    let mut con = node.client().get_connection_with_timeout(ADMIN_TIMEOUT)?;
    con.set_read_timeout(Some(ADMIN_TIMEOUT))?;
    con.set_write_timeout(Some(ADMIN_TIMEOUT))?;
    cmd.query(&mut con)
}

/// `INFO replication` of `node`, or the error as text.
pub fn replication(node: &RedisNode) -> String {
    query(node, redis::cmd("INFO").arg("replication")).unwrap_or_else(|e| format!("error: {e}"))
}

/// The role and link lines of an `INFO replication` text.
fn summary(info: &str) -> String {
    info.lines()
        .filter(|l| {
            l.starts_with("role:")
                || l.starts_with("master_port:")
                || l.starts_with("master_link_status:")
                || l.starts_with("error")
        })
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Calls `probe` every 50 ms until it succeeds; an error saying `what`
/// did not happen, with the probe's last reason, once `limit` passed.
pub fn poll<T>(
    limit: Duration,
    what: &str,
    mut probe: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let deadline = Instant::now() + limit;
    loop {
        match probe() {
            Ok(value) => return Ok(value),
            Err(reason) if Instant::now() >= deadline => {
                return Err(format!("{what} within {limit:?}; last: {reason}"))
            }
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

/// What the primary on `primary` still owes its replicas: the smallest
/// output buffer (`omem`) among its replica connections, 0 without any.
pub fn replica_backlog(primary: &RedisNode) -> Result<u64, String> {
    let list: String = query(
        primary,
        redis::cmd("CLIENT").arg("LIST").arg("TYPE").arg("replica"),
    )
    .map_err(|e| format!("CLIENT LIST on {}: {e}", primary.addr()))?;
    Ok(list
        .lines()
        .filter_map(|line| {
            line.split(' ')
                .find_map(|f| f.strip_prefix("omem="))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .min()
        .unwrap_or(0))
}

/// A sentinel's event (`PSUBSCRIBE *`): when, from which sentinel, the
/// channel (`+switch-master`, `+promoted-slave`, ...) and its text.
#[derive(Clone, Debug)]
pub struct SentinelEvent {
    pub at: Duration,
    pub sentinel: usize,
    pub event: String,
    pub text: String,
}

/// The events that tell how a failover went, in the notes.
const KEY_EVENTS: &[&str] = &[
    "+promoted-slave",
    "+slave-reconf-sent",
    "+slave-reconf-done",
    "+switch-master",
    "+convert-to-slave",
    "-failover-abort-not-elected",
    "-failover-abort-no-good-slave",
    "+failover-end-for-timeout",
];

/// Listens to every sentinel's events until the returned tasks are
/// aborted; prints each to stderr when `verbose`.
pub async fn watch_sentinels(
    urls: Vec<String>,
    epoch: Instant,
    verbose: bool,
    log: Arc<Mutex<Vec<SentinelEvent>>>,
) -> Result<Vec<tokio::task::JoinHandle<()>>, String> {
    use futures_util::StreamExt;
    let mut tasks = Vec::new();
    for (sentinel, url) in urls.into_iter().enumerate() {
        let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
        let mut pubsub = client
            .get_async_pubsub()
            .await
            .map_err(|e| format!("sentinel {url}: {e}"))?;
        pubsub
            .psubscribe("*")
            .await
            .map_err(|e| format!("sentinel {url}: {e}"))?;
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            let mut messages = pubsub.into_on_message();
            while let Some(message) = messages.next().await {
                let event = message.get_channel_name().to_string();
                if event.starts_with("__sentinel__") || event == "+sentinel" {
                    continue;
                }
                let text: String = message.get_payload().unwrap_or_default();
                let at = epoch.elapsed();
                if verbose {
                    eprintln!(
                        "[{:>8.3}s] sentinel {sentinel}: {event} {text}",
                        at.as_secs_f64()
                    );
                }
                log.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(SentinelEvent {
                        at,
                        sentinel,
                        event,
                        text,
                    });
            }
        }));
    }
    Ok(tasks)
}

/// The first report of each key event (any sentinel; the same event from
/// another sentinel within 5 s is left out), in time order.
pub fn key_events(log: &[SentinelEvent]) -> Vec<String> {
    let mut last: std::collections::BTreeMap<(&str, &str), Duration> = Default::default();
    let mut out = Vec::new();
    let mut log: Vec<&SentinelEvent> = log.iter().collect();
    log.sort_by_key(|e| e.at);
    for e in log {
        if !KEY_EVENTS.contains(&e.event.as_str()) {
            continue;
        }
        let previous = last.insert((e.event.as_str(), e.text.as_str()), e.at);
        if previous.is_none_or(|p| e.at - p > Duration::from_secs(5)) {
            out.push(format!(
                "{:.3}s (sentinel {}) {} {}",
                e.at.as_secs_f64(),
                e.sentinel,
                e.event,
                e.text
            ));
        }
    }
    out
}

/// Replicas per primary of `cluster`, as started.
fn cluster_replicas(cluster: &RedisCluster) -> usize {
    (cluster.len() / CLUSTER_PRIMARIES).saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(ms: u64, sentinel: usize, event: &str, text: &str) -> SentinelEvent {
        SentinelEvent {
            at: Duration::from_millis(ms),
            sentinel,
            event: event.into(),
            text: text.into(),
        }
    }

    #[test]
    fn key_events_keep_the_first_report_of_each_failover() {
        let switch = "mymaster 127.0.0.1 1 127.0.0.1 2";
        let log = vec![
            event(1_400, 2, "+switch-master", switch),
            event(1_300, 0, "+promoted-slave", "slave 127.0.0.1:2"),
            event(1_401, 1, "+switch-master", switch),
            event(1_402, 1, "+slave", "not a key event"),
            event(2_500, 0, "+switch-master", switch),
            // The same switch again, a later failover back and forth.
            event(30_000, 0, "+switch-master", switch),
        ];
        let out = key_events(&log);
        assert_eq!(out.len(), 3, "{out:?}");
        assert!(out[0].starts_with("1.300s (sentinel 0) +promoted-slave"));
        assert!(out[1].starts_with("1.400s (sentinel 2) +switch-master"));
        assert!(out[2].starts_with("30.000s (sentinel 0) +switch-master"));
    }
}
