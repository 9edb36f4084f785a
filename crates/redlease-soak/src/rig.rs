//! The test rig: the lock nodes (some with fsync'd persistence, some under
//! a fake clock), a data Redis that is never faulted, one proxy per
//! faultable client-to-node link, the wait for brand-new servers to leave
//! their restart quarantine, and the end-of-run inspection of what the
//! nodes still hold.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlease_testkit::proxy::{Mode, Proxy};
use redlease_testkit::{NodeConfig, RedisNode};

use crate::checker::LeftoverKey;
use crate::faults::Link;
use crate::panics;
use crate::setup;

/// The lock nodes; each behind its own mutex so faults on different nodes
/// run at the same time.
pub type Nodes = Arc<Vec<Mutex<RedisNode>>>;

/// How long one try at inspecting one node may take (see [`setup`]).
const INSPECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on SCAN round trips per node.
const MAX_SCANS: usize = 10_000;

pub struct Rig {
    pub nodes: Nodes,
    /// `127.0.0.1:PORT` of each node (stable across restarts).
    pub addrs: Vec<String>,
    pub data: RedisNode,
    pub proxies: Arc<BTreeMap<Link, Proxy>>,
}

/// The settings of a node: with `fsync`, one that survives SIGKILL with
/// every acknowledged write; with `fake_clock`, one whose wall clock
/// `RedisNode::jump_clock` moves (libfaketime).
pub fn node_config(fsync: bool, fake_clock: bool) -> NodeConfig {
    let mut config = NodeConfig::new();
    if fsync {
        config = config.arg("appendonly", "yes").arg("appendfsync", "always");
    }
    if fake_clock {
        config = config.fake_clock();
    }
    config
}

/// Runs blocking work on node `i` off the async threads.
pub async fn with_node<T: Send + 'static>(
    nodes: &Nodes,
    i: usize,
    f: impl FnOnce(&mut RedisNode) -> T + Send + 'static,
) -> Result<T, String> {
    let nodes = nodes.clone();
    tokio::task::spawn_blocking(move || {
        panics::harness(|| {
            // A poisoned lock only means an earlier harness step panicked;
            // the node handle itself is still usable.
            let mut node = nodes[i].lock().unwrap_or_else(|p| p.into_inner());
            f(&mut node)
        })
    })
    .await
    .map_err(|e| format!("node {i}: {}", panic_text(e)))
}

pub fn panic_text(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(payload) => panics::message(payload.as_ref()),
        Err(e) => e.to_string(),
    }
}

/// Starts one node per config.
pub async fn start_nodes(configs: Vec<NodeConfig>) -> Result<Nodes, String> {
    let nodes = tokio::task::spawn_blocking(move || {
        panics::harness(|| {
            configs
                .into_iter()
                .map(|config| Mutex::new(RedisNode::start_with(config)))
                .collect::<Vec<_>>()
        })
    })
    .await
    .map_err(|e| format!("starting redis-server: {}", panic_text(e)))?;
    Ok(Arc::new(nodes))
}

pub async fn start_data() -> Result<RedisNode, String> {
    tokio::task::spawn_blocking(|| panics::harness(RedisNode::start))
        .await
        .map_err(|e| format!("starting the data redis-server: {}", panic_text(e)))
}

impl Rig {
    /// Nodes, the data node, and a proxy for every link of the `proxied` workers.
    pub async fn start(configs: Vec<NodeConfig>, proxied: &[usize]) -> Result<Rig, String> {
        let nodes = start_nodes(configs).await?;
        let data = start_data().await?;
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| n.lock().unwrap_or_else(|p| p.into_inner()).addr())
            .collect();
        let mut proxies = BTreeMap::new();
        for &worker in proxied {
            for (node, addr) in addrs.iter().enumerate() {
                proxies.insert(Link { worker, node }, Proxy::start(addr));
            }
        }
        Ok(Rig {
            nodes,
            addrs,
            data,
            proxies: Arc::new(proxies),
        })
    }

    /// The nodes' ports (stable across restarts).
    pub fn ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .map(|n| n.lock().unwrap_or_else(|p| p.into_inner()).port())
            .collect()
    }

    /// The URLs `worker` connects to: its proxies if it has any, else the nodes.
    pub fn urls_for(&self, worker: usize) -> Vec<String> {
        (0..self.addrs.len())
            .map(|node| match self.proxies.get(&Link { worker, node }) {
                Some(proxy) => proxy.url(),
                None => format!("redis://{}", self.addrs[node]),
            })
            .collect()
    }

    /// Resets `worker`'s link to `node` (connections reset, new ones
    /// refused) until [`heal`](Self::heal).
    pub fn cut(&self, worker: usize, node: usize) {
        self.proxies[&Link { worker, node }].set(Mode::Reset);
    }

    /// Every link back to pass, every node running and resumed.
    pub async fn heal(&self) -> Result<(), String> {
        for proxy in self.proxies.values() {
            proxy.set(Mode::Pass);
        }
        heal_nodes(&self.nodes).await
    }

    pub async fn leftover_keys(&self) -> Result<Vec<LeftoverKey>, String> {
        leftover_keys(&self.addrs).await
    }
}

/// Resumes paused nodes and restarts any that is down. Only called once
/// every fault is over, when no client uses the nodes.
pub async fn heal_nodes(nodes: &Nodes) -> Result<(), String> {
    for i in 0..nodes.len() {
        with_node(nodes, i, |n| {
            n.resume();
            if !n.is_running() {
                n.restart();
            }
        })
        .await?;
    }
    Ok(())
}

/// How often [`await_uptime`] asks.
const UPTIME_POLL: Duration = Duration::from_millis(50);

/// Waits until every node has been up for at least `quarantine` by its own
/// `uptime_in_seconds`: brand-new servers are in the library's restart
/// quarantine and vote for no lock until then. Redis and Valkey report
/// the difference of two whole wall-clock seconds (now and the start), so
/// the figure turns 1 at the next full second, possibly a few ms after the
/// start: it waits for the quarantine rounded up to whole seconds plus
/// one. Returns how long it waited; bounded by `quarantine` plus 6 s, and
/// each `INFO` by [`setup::retried`] (a node that does not answer ends
/// the run with its error).
pub async fn await_uptime(addrs: &[String], quarantine: Duration) -> Result<Duration, String> {
    let start = std::time::Instant::now();
    let want = quarantine.as_secs() + u64::from(quarantine.subsec_nanos() > 0) + 1;
    let deadline = start + quarantine + Duration::from_secs(6);
    for (node, addr) in addrs.iter().enumerate() {
        loop {
            let what = format!("node {node}: INFO");
            let up = setup::retried(&what, INSPECT_TIMEOUT, || uptime(addr)).await?;
            if up >= want {
                break;
            }
            if std::time::Instant::now() > deadline {
                return Err(format!(
                    "node {node}: up {up} s after {:?}, waiting for {want} s",
                    start.elapsed()
                ));
            }
            tokio::time::sleep(UPTIME_POLL).await;
        }
    }
    Ok(start.elapsed())
}

/// `uptime_in_seconds` from `INFO server`.
async fn uptime(addr: &str) -> redis::RedisResult<u64> {
    let mut conn = setup::connect(&format!("redis://{addr}")).await?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await?;
    info.lines()
        .find_map(|line| line.strip_prefix("uptime_in_seconds:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| {
            redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "INFO server has no uptime_in_seconds",
            ))
        })
}

/// Lock keys (`redlease:*` but not the `:fence` counters, which are meant
/// to outlive locks, nor waiters' queues and leader records that expire on
/// their own) still present on any node. Each node's scan is
/// retried whole ([`setup::retried`]).
pub async fn leftover_keys(addrs: &[String]) -> Result<Vec<LeftoverKey>, String> {
    let mut out = Vec::new();
    for (node, addr) in addrs.iter().enumerate() {
        let what = format!("node {node}: inspection");
        let keys = setup::retried(&what, INSPECT_TIMEOUT, || scan_node(addr)).await?;
        out.extend(
            keys.into_iter()
                .map(|(key, pttl_ms)| LeftoverKey { node, key, pttl_ms }),
        );
    }
    Ok(out)
}

async fn scan_node(addr: &str) -> redis::RedisResult<Vec<(String, i64)>> {
    let mut conn = setup::connect(&format!("redis://{addr}")).await?;
    let mut cursor: u64 = 0;
    let mut found = Vec::new();
    for _ in 0..MAX_SCANS {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("redlease:*")
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await?;
        for key in keys.into_iter().filter(|k| !k.ends_with(":fence")) {
            let pttl: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut conn).await?;
            // -2: expired between SCAN and PTTL. A waiters' queue outlives
            // the lock by design (the places of waiters whose leaving a
            // fault kept from a node, passed over at their turn) and
            // carries an expiry of its own; so does an election's leader
            // record (the fencing counters' expiry, as its term's), which
            // nobody trusts once its lead's hold is gone. Without one,
            // either is a leak.
            let expiring = (key.ends_with(":queue") || key.ends_with(":leader")) && pttl > 0;
            if pttl != -2 && !expiring {
                found.push((key, pttl));
            }
        }
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    Ok(found)
}
