//! A Redis Cluster of real server processes on loopback: `n` primaries
//! sharing the 16,384 hash slots, formed with `CLUSTER ADDSLOTSRANGE` and
//! `CLUSTER MEET` (no `redis-cli` needed). For tests of cluster-aware
//! clients; each primary can be faulted like any [`RedisNode`].

use std::time::Duration;

use crate::{process, NodeConfig, RedisNode};

/// How long the primaries may take to agree that the cluster is up.
const FORM_TIMEOUT: Duration = Duration::from_secs(15);

/// Hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16_384;

/// `n` cluster primaries, no replicas, every slot assigned.
///
/// ```no_run
/// use redlease_testkit::cluster::RedisCluster;
///
/// let cluster = RedisCluster::start(3);
/// let seeds = cluster.urls(); // any of them leads a cluster client to all
/// assert_eq!(seeds.len(), 3);
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    primaries: Vec<RedisNode>,
}

impl RedisCluster {
    /// Starts `n` (at least 1) primaries, splits the slots among them in
    /// order, and waits until every one reports `cluster_state:ok`.
    ///
    /// Panics if the cluster does not form within 15 s.
    pub fn start(n: usize) -> RedisCluster {
        assert!(n >= 1, "a cluster needs a primary");
        let primaries: Vec<RedisNode> = (0..n)
            .map(|_| {
                // The bus port is set, not port + 10000, which may be taken
                // or out of range.
                let bus = process::free_port().to_string();
                RedisNode::start_with(
                    NodeConfig::new()
                        .arg("cluster-enabled", "yes")
                        .arg("cluster-config-file", "nodes.conf")
                        .arg("cluster-port", &bus)
                        .arg("cluster-node-timeout", "2000"),
                )
            })
            .collect();
        let cluster = RedisCluster { primaries };
        cluster.form();
        cluster
    }

    fn form(&self) {
        let n = self.primaries.len();
        for (i, node) in self.primaries.iter().enumerate() {
            let (first, last) = slot_range(i, n);
            let _: () = query(
                node,
                redis::cmd("CLUSTER")
                    .arg("ADDSLOTSRANGE")
                    .arg(first)
                    .arg(last),
            );
        }
        let first = &self.primaries[0];
        for node in &self.primaries[1..] {
            let bus: String = config_get(node, "cluster-port");
            let _: () = query(
                first,
                redis::cmd("CLUSTER")
                    .arg("MEET")
                    .arg("127.0.0.1")
                    .arg(node.port())
                    .arg(bus),
            );
        }
        process::poll_until(FORM_TIMEOUT, "the cluster did not form", || {
            let formed = self.primaries.iter().all(|node| {
                let info: String = query(node, redis::cmd("CLUSTER").arg("INFO"));
                info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{n}\r"))
            });
            formed.then_some(())
        });
    }

    /// `redis://127.0.0.1:PORT` of every primary, in order.
    pub fn urls(&self) -> Vec<String> {
        self.primaries.iter().map(RedisNode::url).collect()
    }

    /// Primary `i`.
    pub fn node(&self, i: usize) -> &RedisNode {
        &self.primaries[i]
    }

    /// Primary `i`, to fault it.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisNode {
        &mut self.primaries[i]
    }

    /// The primaries, in order.
    pub fn iter(&self) -> impl Iterator<Item = &RedisNode> {
        self.primaries.iter()
    }

    /// The primary that serves hash `slot` (slots are split in order).
    pub fn owner_of(&self, slot: u16) -> &RedisNode {
        let n = self.primaries.len();
        let i = (0..n)
            .find(|&i| slot <= slot_range(i, n).1)
            .expect("every slot is assigned");
        &self.primaries[i]
    }
}

/// The slots primary `i` of `n` serves, both ends included.
fn slot_range(i: usize, n: usize) -> (u16, u16) {
    let per = SLOTS as usize / n;
    let first = i * per;
    let last = if i + 1 == n {
        SLOTS as usize - 1
    } else {
        first + per - 1
    };
    (first as u16, last as u16)
}

fn query<T: redis::FromRedisValue>(node: &RedisNode, cmd: &mut redis::Cmd) -> T {
    let mut con = node
        .client()
        .get_connection()
        .expect("connect to a primary");
    cmd.query(&mut con)
        .unwrap_or_else(|e| panic!("{:?} on {}: {e}", cmd.args_iter().next(), node.addr()))
}

fn config_get(node: &RedisNode, name: &str) -> String {
    let pair: Vec<String> = query(node, redis::cmd("CONFIG").arg("GET").arg(name));
    pair.get(1).cloned().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_split_in_order_and_all_assigned() {
        assert_eq!(slot_range(0, 1), (0, 16_383));
        assert_eq!(slot_range(0, 3), (0, 5_460));
        assert_eq!(slot_range(1, 3), (5_461, 10_921));
        assert_eq!(slot_range(2, 3), (10_922, 16_383));
    }
}
