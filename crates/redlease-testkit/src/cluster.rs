//! A Redis Cluster of real server processes on loopback: primaries sharing
//! the 16,384 hash slots, optionally with replicas, formed with
//! `CLUSTER ADDSLOTSRANGE`, `CLUSTER MEET` and `CLUSTER REPLICATE` (no
//! `redis-cli` needed). For tests of cluster-aware clients: each node can be
//! faulted like any [`RedisNode`], and the cluster can be failed over
//! ([`RedisCluster::failover`], [`RedisCluster::await_new_owner`]) and
//! resharded ([`RedisCluster::migrate_slot`], [`RedisCluster::begin_migration`])
//! while a test holds locks.
//!
//! Who serves what is always asked of the cluster (`CLUSTER NODES` from a
//! node that answers), never remembered: after a failover or a migration the
//! answers follow.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::tls::TestPki;
use crate::{ClientAuth, NodeConfig, RedisNode};

/// How long the nodes may take to agree that the cluster is up, replicas
/// synced.
const FORM_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the live nodes may take to agree on a slot's new owner after
/// `CLUSTER SETSLOT ... NODE`.
const AGREE_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a node may take to answer an admin probe before it counts as
/// down (killed or paused) for that probe.
const ANSWER_TIMEOUT: Duration = Duration::from_millis(500);

/// How long one admin command (e.g. a `MIGRATE` batch) may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// How long moving a slot's keys may take in all.
const MOVE_KEYS_TIMEOUT: Duration = Duration::from_secs(60);

/// Keys per `CLUSTER GETKEYSINSLOT` / `MIGRATE` round, as redis-cli uses.
const MIGRATE_BATCH: usize = 100;

/// At most this many `MIGRATE` rounds per slot (100,000 keys), so a slot that
/// keeps refilling cannot loop forever.
const MAX_MIGRATE_ROUNDS: usize = 1_000;

/// `MIGRATE`'s own timeout (ms) for talking to the target.
const MIGRATE_TIMEOUT_MS: u64 = 5_000;

/// A manual failover the server gives up on (it allows 5 s) is asked again
/// after this long.
const MANUAL_FAILOVER_RETRY: Duration = Duration::from_secs(6);

/// How often bounded waits re-check their condition.
const POLL: Duration = Duration::from_millis(50);

/// Hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16_384;

/// Cluster nodes: primaries sharing every slot, each with the same number of
/// replicas.
///
/// Nodes are numbered in start order: primaries first (`0..primaries`), then
/// the replicas grouped by primary (replica `j` of primary `i` is node
/// `primaries + i * replicas_per_primary + j`). Those are the roles at start;
/// after a failover, ask [`owner_of`](RedisCluster::owner_of),
/// [`primaries`](RedisCluster::primaries) and
/// [`replicas_of`](RedisCluster::replicas_of), which ask the cluster.
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
    /// Primaries first, then replicas grouped by primary.
    nodes: Vec<RedisNode>,
    primaries: usize,
    replicas_per_primary: usize,
}

impl RedisCluster {
    /// Starts `n` (at least 1) primaries without replicas; the same as
    /// [`start_with_replicas(n, 0)`](RedisCluster::start_with_replicas).
    ///
    /// Panics if the cluster does not form within 30 s.
    ///
    /// ```no_run
    /// let cluster = redlease_testkit::cluster::RedisCluster::start(3);
    /// ```
    pub fn start(n: usize) -> RedisCluster {
        Self::start_with_replicas(n, 0)
    }

    /// Starts `primaries` (at least 1) primaries that split the slots in
    /// order, and `replicas_per_primary` replicas of each; waits until every
    /// node reports `cluster_state:ok`, knows all the others with their
    /// roles, and every replica has synced (`master_link_status:up`).
    ///
    /// Nodes declare a silent peer failed after 2 s (`cluster-node-timeout`),
    /// so a replica takes over a killed primary within a few seconds.
    ///
    /// Panics if the cluster does not form within 30 s.
    ///
    /// ```no_run
    /// use redlease_testkit::cluster::RedisCluster;
    ///
    /// let cluster = RedisCluster::start_with_replicas(3, 1);
    /// assert_eq!(cluster.len(), 6);
    /// assert_eq!(cluster.replicas_of(cluster.node(0).port()).len(), 1);
    /// ```
    pub fn start_with_replicas(primaries: usize, replicas_per_primary: usize) -> RedisCluster {
        Self::start_configured(primaries, replicas_per_primary, NodeConfig::new())
    }

    /// Starts `n` (at least 1) primaries without replicas, like
    /// [`start`](RedisCluster::start), each under a fake wall clock
    /// ([`NodeConfig::fake_clock`]): [`RedisNode::jump_clock`] on one node
    /// moves that shard's clock (its keys expire early, `TIME` answers
    /// ahead) while the other shards keep the host's clock. The cluster bus
    /// times its peers on the wall clock too, but a jump alone does not
    /// mark them failing (that needs a ping left unanswered for
    /// cluster-node-timeout, and they answer within milliseconds).
    ///
    /// Panics if libfaketime is missing (see [`NodeConfig::fake_clock`]) or
    /// the cluster does not form within 30 s.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlease_testkit::cluster::RedisCluster;
    ///
    /// let cluster = RedisCluster::start_with_fake_clock(3);
    /// cluster.node(0).jump_clock(Duration::from_secs(30)); // one shard jumps
    /// assert_eq!(cluster.node(1).clock_offset(), Duration::ZERO);
    /// ```
    pub fn start_with_fake_clock(n: usize) -> RedisCluster {
        Self::start_configured(n, 0, NodeConfig::new().fake_clock())
    }

    /// [`start_with_replicas`](RedisCluster::start_with_replicas) with
    /// nodes that serve TLS only, with `pki`'s server certificate: clients,
    /// the cluster bus (`tls-cluster yes`) and replication
    /// (`tls-replication yes`) all go over TLS. With
    /// [`ClientAuth::Required`] every client must present a certificate
    /// signed by `pki`'s CA (the nodes present their server certificate to
    /// each other). [`cluster_url`](RedisCluster::cluster_url) is then a
    /// `rediss+cluster://` URL.
    ///
    /// Panics if the cluster does not form within 30 s.
    ///
    /// ```no_run
    /// use redlease_testkit::cluster::RedisCluster;
    /// use redlease_testkit::{tls::TestPki, ClientAuth};
    ///
    /// let pki = TestPki::generate();
    /// let cluster = RedisCluster::start_tls(3, 0, &pki, ClientAuth::None);
    /// assert!(cluster.cluster_url().starts_with("rediss+cluster://"));
    /// ```
    pub fn start_tls(
        primaries: usize,
        replicas_per_primary: usize,
        pki: &TestPki,
        auth: ClientAuth,
    ) -> RedisCluster {
        let config = NodeConfig::new()
            .tls(pki, auth)
            .arg("tls-cluster", "yes")
            .arg("tls-replication", "yes");
        Self::start_configured(primaries, replicas_per_primary, config)
    }

    fn start_configured(
        primaries: usize,
        replicas_per_primary: usize,
        base: NodeConfig,
    ) -> RedisCluster {
        assert!(primaries >= 1, "a cluster needs a primary");
        let total = primaries * (1 + replicas_per_primary);
        // Spawn all first, then wait: boots overlap without extra threads.
        let mut nodes: Vec<RedisNode> = (0..total)
            .map(|_| {
                RedisNode::launch(
                    base.clone()
                        .cluster()
                        .arg("cluster-config-file", "nodes.conf")
                        .arg("cluster-node-timeout", "2000")
                        // A full sync starts at once instead of waiting 5 s
                        // for more replicas to join it.
                        .arg("repl-diskless-sync-delay", "0"),
                )
            })
            .collect();
        nodes.iter_mut().for_each(RedisNode::await_started);
        let cluster = RedisCluster {
            nodes,
            primaries,
            replicas_per_primary,
        };
        cluster.form();
        cluster
    }

    /// Assigns the slots, introduces the nodes, attaches the replicas, and
    /// waits until everyone agrees.
    fn form(&self) {
        let n = self.primaries;
        for (i, node) in self.nodes[..n].iter().enumerate() {
            let (first, last) = slot_range(i, n);
            let _: () = run(
                node,
                redis::cmd("CLUSTER")
                    .arg("ADDSLOTSRANGE")
                    .arg(first)
                    .arg(last),
            );
        }
        let first = &self.nodes[0];
        for node in &self.nodes[1..] {
            let bus = config_get(node, "cluster-port");
            let _: () = run(
                first,
                redis::cmd("CLUSTER")
                    .arg("MEET")
                    .arg("127.0.0.1")
                    .arg(node.port())
                    .arg(bus),
            );
        }
        let ids: Vec<String> = self
            .nodes
            .iter()
            .map(|node| run(node, redis::cmd("CLUSTER").arg("MYID")))
            .collect();
        // A replica can follow its primary only once the handshake has
        // told it the primary's id: retry until each one is accepted.
        let mut pending: Vec<usize> = (n..self.nodes.len()).collect();
        poll(FORM_TIMEOUT, "replicas could not attach", || {
            let mut refused = String::new();
            pending.retain(|&r| {
                let node = &self.nodes[r];
                let primary = &ids[self.primary_index_at_start(r)];
                let attach: redis::RedisResult<()> = try_query(
                    node,
                    redis::cmd("CLUSTER").arg("REPLICATE").arg(primary),
                    COMMAND_TIMEOUT,
                );
                match attach {
                    Ok(()) => false,
                    Err(e) => {
                        let _ = write!(refused, "{}: {e}; ", node.addr());
                        true
                    }
                }
            });
            if pending.is_empty() {
                Ok(())
            } else {
                Err(refused)
            }
        });
        let total = self.nodes.len();
        poll(FORM_TIMEOUT, "the cluster did not form", || {
            for (i, node) in self.nodes.iter().enumerate() {
                let info: String =
                    try_query(node, redis::cmd("CLUSTER").arg("INFO"), ANSWER_TIMEOUT)
                        .map_err(|e| format!("CLUSTER INFO on {}: {e}", node.addr()))?;
                if !info.contains("cluster_state:ok")
                    || !info.contains(&format!("cluster_known_nodes:{total}\r"))
                {
                    return Err(format!("{} reports:\n{info}", node.addr()));
                }
                // Every node sees every other one settled, in its role.
                let view =
                    view_of(node).map_err(|e| format!("CLUSTER NODES on {}: {e}", node.addr()))?;
                for (j, other) in self.nodes.iter().enumerate() {
                    let entry = view
                        .by_id(&ids[j])
                        .filter(|e| e.port == other.port() && e.settled())
                        .ok_or_else(|| {
                            format!("{} does not know {} yet", node.addr(), other.addr())
                        })?;
                    let master = (j >= n).then(|| ids[self.primary_index_at_start(j)].as_str());
                    if entry.master.as_deref() != master {
                        return Err(format!(
                            "{} sees {} as {}",
                            node.addr(),
                            other.addr(),
                            entry.flags.join(",")
                        ));
                    }
                }
                if i >= n {
                    let replication = info_replication(node, ANSWER_TIMEOUT)
                        .map_err(|e| format!("INFO replication on {}: {e}", node.addr()))?;
                    if !replication.contains("master_link_status:up") {
                        return Err(format!(
                            "replica {} has not synced:\n{replication}",
                            node.addr()
                        ));
                    }
                }
            }
            Ok(())
        });
    }

    /// The node index of the primary that node `i` was started to replicate.
    fn primary_index_at_start(&self, i: usize) -> usize {
        (i - self.primaries) / self.replicas_per_primary
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,...` naming every node,
    /// primaries first: the node URL form for a cluster deployment
    /// (`rediss+cluster://` for a [`start_tls`](RedisCluster::start_tls)
    /// cluster).
    ///
    /// ```no_run
    /// let cluster = redlease_testkit::cluster::RedisCluster::start(3);
    /// let url = cluster.cluster_url();
    /// assert!(url.starts_with("redis+cluster://127.0.0.1:"));
    /// ```
    pub fn cluster_url(&self) -> String {
        let hosts: Vec<String> = self.nodes.iter().map(RedisNode::addr).collect();
        let scheme = if self.nodes[0].config.tls.is_some() {
            "rediss+cluster"
        } else {
            "redis+cluster"
        };
        format!("{scheme}://{}", hosts.join(","))
    }

    /// `redis://127.0.0.1:PORT` (`rediss://` over TLS) of every node,
    /// primaries first.
    ///
    /// ```no_run
    /// let urls = redlease_testkit::cluster::RedisCluster::start(3).urls();
    /// ```
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisNode::url).collect()
    }

    /// Number of nodes, replicas included.
    ///
    /// ```no_run
    /// use redlease_testkit::cluster::RedisCluster;
    /// assert_eq!(RedisCluster::start_with_replicas(3, 1).len(), 6);
    /// ```
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: a cluster has at least one primary. (Here for
    /// symmetry with [`len`](RedisCluster::len).)
    ///
    /// ```no_run
    /// assert!(!redlease_testkit::cluster::RedisCluster::start(1).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `i` in start order (primaries first, then replicas grouped by
    /// primary); panics if out of range.
    ///
    /// ```no_run
    /// let cluster = redlease_testkit::cluster::RedisCluster::start(3);
    /// let url = cluster.node(0).url();
    /// ```
    pub fn node(&self, i: usize) -> &RedisNode {
        &self.nodes[i]
    }

    /// Node `i`, mutably (to fault it); panics if out of range.
    ///
    /// ```no_run
    /// let mut cluster = redlease_testkit::cluster::RedisCluster::start(3);
    /// cluster.node_mut(0).kill();
    /// ```
    pub fn node_mut(&mut self, i: usize) -> &mut RedisNode {
        &mut self.nodes[i]
    }

    /// The node on `port`, if it is one of this cluster's.
    ///
    /// ```no_run
    /// let cluster = redlease_testkit::cluster::RedisCluster::start(3);
    /// let port = cluster.node(1).port();
    /// assert!(cluster.node_on(port).is_some());
    /// ```
    pub fn node_on(&self, port: u16) -> Option<&RedisNode> {
        self.nodes.iter().find(|n| n.port() == port)
    }

    /// The node on `port`, mutably, e.g. to kill a slot's owner:
    /// `owner_of` borrows the cluster, its port does not.
    ///
    /// ```no_run
    /// let mut cluster = redlease_testkit::cluster::RedisCluster::start_with_replicas(3, 1);
    /// let port = cluster.owner_of(42).port();
    /// cluster.node_on_mut(port).expect("ours").kill();
    /// ```
    pub fn node_on_mut(&mut self, port: u16) -> Option<&mut RedisNode> {
        self.nodes.iter_mut().find(|n| n.port() == port)
    }

    /// Every node in start order: primaries first, then replicas grouped
    /// by primary.
    ///
    /// ```no_run
    /// let cluster = redlease_testkit::cluster::RedisCluster::start_with_replicas(2, 1);
    /// let ports: Vec<u16> = cluster.iter().map(|n| n.port()).collect();
    /// assert_eq!(ports.len(), 4);
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = &RedisNode> {
        self.nodes.iter()
    }

    /// The nodes the cluster sees as primaries now (not flagged failed), in
    /// start order; after a failover this includes promoted replicas.
    ///
    /// Panics if no node answers.
    ///
    /// ```no_run
    /// let cluster = redlease_testkit::cluster::RedisCluster::start_with_replicas(3, 1);
    /// assert_eq!(cluster.primaries().len(), 3);
    /// ```
    pub fn primaries(&self) -> Vec<&RedisNode> {
        let (_, view) = self.any_view();
        self.nodes
            .iter()
            .filter(|node| {
                view.by_port(node.port())
                    .is_some_and(|e| e.is_primary() && !e.failed())
            })
            .collect()
    }

    /// The primary that serves hash `slot`, as the first node that answers
    /// (killed and paused ones are skipped) sees it now. During a migration
    /// that is still the source, until the migration finishes.
    ///
    /// Panics if no node answers or the slot has no owner.
    ///
    /// ```no_run
    /// let cluster = redlease_testkit::cluster::RedisCluster::start(3);
    /// assert_eq!(cluster.owner_of(0).port(), cluster.node(0).port());
    /// ```
    pub fn owner_of(&self, slot: u16) -> &RedisNode {
        let (asked, view) = self.any_view();
        let entry = view
            .owner(slot)
            .unwrap_or_else(|| panic!("slot {slot} has no owner in the view of {}", asked.addr()));
        self.ours(entry.port, asked)
    }

    /// The replicas of the primary on `primary_port`, as the first node
    /// that answers sees them now (ones it flags failed are left out), in
    /// start order.
    ///
    /// Panics if no node answers or none knows a node on that port.
    ///
    /// ```no_run
    /// let cluster = redlease_testkit::cluster::RedisCluster::start_with_replicas(3, 1);
    /// let replicas = cluster.replicas_of(cluster.node(0).port());
    /// assert_eq!(replicas[0].port(), cluster.node(3).port());
    /// ```
    pub fn replicas_of(&self, primary_port: u16) -> Vec<&RedisNode> {
        let (asked, view) = self.any_view();
        let primary = view
            .by_port(primary_port)
            .unwrap_or_else(|| panic!("{} knows no node on port {primary_port}", asked.addr()));
        self.nodes
            .iter()
            .filter(|node| {
                view.by_port(node.port()).is_some_and(|e| {
                    e.master.as_deref() == Some(primary.id.as_str()) && !e.failed()
                })
            })
            .collect()
    }

    /// A manual, coordinated failover of `slot`'s owner: `CLUSTER FAILOVER`
    /// to one of its replicas (whose link is up), which waits until it has
    /// every write the primary took, then takes over. Returns once every
    /// live node agrees the replica owns `slot` and the old primary
    /// reports `role:slave`; returns the new owner.
    ///
    /// The owner must answer (the coordination needs it): after a kill or
    /// pause, use [`await_new_owner`](RedisCluster::await_new_owner).
    /// Writes the primary acknowledged but had not yet sent on are not lost
    /// here, unlike in an automatic failover; `WAIT` before it anyway if a
    /// test must not depend on that.
    ///
    /// Panics after `limit` with what the cluster last said.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlease_testkit::cluster::RedisCluster;
    ///
    /// let cluster = RedisCluster::start_with_replicas(3, 1);
    /// let before = cluster.owner_of(42).port();
    /// let after = cluster.failover(42, Duration::from_secs(30));
    /// assert_ne!(after.port(), before);
    /// assert_eq!(cluster.replicas_of(after.port())[0].port(), before);
    /// ```
    pub fn failover(&self, slot: u16, limit: Duration) -> &RedisNode {
        let deadline = Instant::now() + limit;
        let old = self.owner_of(slot);
        let what = format!(
            "failover of slot {slot} from {} to a replica did not complete",
            old.addr()
        );
        let answers = if may_answer(old) {
            view_of(old).map(drop)
        } else {
            Err("killed or paused".to_string())
        };
        if let Err(e) = answers {
            panic!(
                "{what}: the owner does not answer ({e}); a coordinated failover needs it, \
                 use await_new_owner after a kill or pause"
            );
        }
        // A replica whose link is up; after a previous failover the old
        // primary may still be resyncing.
        let replica = poll(limit, &format!("{what}: no synced replica"), || {
            let replicas = self.replicas_of(old.port());
            if replicas.is_empty() {
                return Err(format!("{} has no replicas", old.addr()));
            }
            replicas
                .into_iter()
                .find(|r| {
                    may_answer(r)
                        && info_replication(r, ANSWER_TIMEOUT)
                            .is_ok_and(|text| text.contains("master_link_status:up"))
                })
                .ok_or_else(|| "no replica has master_link_status:up".to_string())
        });
        let start_failover = || {
            let _: () = run(replica, redis::cmd("CLUSTER").arg("FAILOVER"));
            Instant::now()
        };
        let mut asked_at = start_failover();
        let remaining = deadline.saturating_duration_since(Instant::now());
        self.await_owner(slot, remaining, &what, |owner, views| {
            if owner != replica.port() {
                // The server drops a manual failover it could not finish in
                // 5 s; ask again while time is left.
                let still_replica = info_replication(replica, ANSWER_TIMEOUT)
                    .is_ok_and(|text| text.contains("role:slave"));
                if still_replica && asked_at.elapsed() > MANUAL_FAILOVER_RETRY {
                    asked_at = start_failover();
                }
                return Err(format!("owner is still port {owner}"));
            }
            let role = info_replication(old, ANSWER_TIMEOUT)
                .map_err(|e| format!("INFO replication on {}: {e}", old.addr()))?;
            if !role.contains("role:slave") {
                return Err(format!("{} is not a replica yet", old.addr()));
            }
            // Every live node also sees the old primary follow the new one,
            // so replicas_of is right whichever node it asks.
            for (node, view) in views {
                let new_id = view.by_port(owner).map(|e| e.id.as_str());
                let follows = view
                    .by_port(old.port())
                    .is_some_and(|e| e.master.is_some() && e.master.as_deref() == new_id);
                if !follows {
                    return Err(format!(
                        "{} does not see {} as a replica of port {owner} yet",
                        node.addr(),
                        old.addr()
                    ));
                }
            }
            Ok(())
        })
    }

    /// Waits until the live nodes agree that a node other than the one on
    /// `old_port` owns `slot` (after a test killed or paused it: the
    /// automatic failover), and returns the new owner. Takes a few seconds:
    /// the node timeout (2 s), then a replica's election.
    ///
    /// Panics after `limit` with what the cluster last said.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlease_testkit::cluster::RedisCluster;
    ///
    /// let mut cluster = RedisCluster::start_with_replicas(3, 1);
    /// let old = cluster.owner_of(42).port();
    /// cluster.node_on_mut(old).expect("ours").kill();
    /// let new = cluster.await_new_owner(42, old, Duration::from_secs(30));
    /// assert_ne!(new.port(), old);
    /// ```
    pub fn await_new_owner(&self, slot: u16, old_port: u16, limit: Duration) -> &RedisNode {
        let what = format!("no node took slot {slot} over from port {old_port}");
        self.await_owner(slot, limit, &what, |owner, _| {
            if owner == old_port {
                Err(format!("owner is still port {owner}"))
            } else {
                Ok(())
            }
        })
    }

    /// Moves `slot` with its keys to the primary on `to_port`, the way
    /// `redis-cli --cluster reshard` does: the slot is marked importing on
    /// the target and migrating on the source, the keys go over with
    /// `MIGRATE` in batches, then every primary is told the new owner.
    /// Returns once all live nodes agree.
    ///
    /// The same as [`begin_migration`](RedisCluster::begin_migration)
    /// followed by [`Migration::finish`].
    ///
    /// ```no_run
    /// let cluster = redlease_testkit::cluster::RedisCluster::start(3);
    /// let target = cluster.node(2).port();
    /// cluster.migrate_slot(42, target);
    /// assert_eq!(cluster.owner_of(42).port(), target);
    /// ```
    pub fn migrate_slot(&self, slot: u16, to_port: u16) {
        self.begin_migration(slot, to_port).finish();
    }

    /// Starts moving `slot` to the primary on `to_port`, and stops half way
    /// so a test can act while the slot is in flight: the target is marked
    /// `IMPORTING`, the source `MIGRATING`, no key has moved yet.
    ///
    /// Meanwhile the source still serves the keys it holds, and answers
    /// `-ASK slot 127.0.0.1:TARGET` for keys it does not have (new keys
    /// are created on the target, after `ASKING`); a command naming keys
    /// on both sides gets `-TRYAGAIN`. Then [`Migration::move_keys`] moves
    /// the keys over, and [`Migration::finish`] hands the slot to the
    /// target. A migration dropped without `finish` leaves the slot in
    /// flight.
    ///
    /// Panics if `to_port` is not a primary of this cluster or already
    /// owns `slot`, or a node refuses. Valkey (8 and later) has each
    /// `SETSLOT` acknowledged by the primary's replicas first: a paused
    /// replica of the source or target makes it fail with `NOREPLICAS`
    /// after 2 s (a killed one does not count).
    ///
    /// ```no_run
    /// let cluster = redlease_testkit::cluster::RedisCluster::start(3);
    /// let migration = cluster.begin_migration(42, cluster.node(1).port());
    /// // ... a missing key in slot 42 now goes ASK to node 1 ...
    /// migration.move_keys(); // ... and every existing key too
    /// migration.finish();
    /// ```
    pub fn begin_migration(&self, slot: u16, to_port: u16) -> Migration<'_> {
        assert!(slot < SLOTS, "slot {slot} is out of range");
        let (asked, view) = self.any_view();
        let source_entry = view
            .owner(slot)
            .unwrap_or_else(|| panic!("slot {slot} has no owner in the view of {}", asked.addr()));
        assert_ne!(
            source_entry.port, to_port,
            "slot {slot} is already on port {to_port}"
        );
        let target_entry = view
            .by_port(to_port)
            .filter(|e| e.is_primary() && !e.failed())
            .unwrap_or_else(|| {
                panic!(
                    "port {to_port} is not a live primary in the view of {}",
                    asked.addr()
                )
            });
        let source = self.ours(source_entry.port, asked);
        let target = self.ours(to_port, asked);
        let migration = Migration {
            cluster: self,
            slot,
            source,
            target,
            source_id: source_entry.id.clone(),
            target_id: target_entry.id.clone(),
        };
        // Importing first, as redis-cli does: once the source sends ASK,
        // the target must accept.
        let _: () = run(
            target,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("IMPORTING")
                .arg(&migration.source_id),
        );
        let _: () = run(
            source,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("MIGRATING")
                .arg(&migration.target_id),
        );
        migration
    }

    /// Waits until every live node names the same owner of `slot` and
    /// `accept` takes it; returns that owner.
    fn await_owner(
        &self,
        slot: u16,
        limit: Duration,
        what: &str,
        mut accept: impl FnMut(u16, &[(&RedisNode, ClusterView)]) -> Result<(), String>,
    ) -> &RedisNode {
        let port = poll(limit, what, || {
            let views = self.live_views();
            let mut owners = views
                .iter()
                .map(|(node, view)| (node.port(), view.owner(slot).map(|e| e.port)));
            let (_, first) = owners.next().ok_or_else(|| "no node answers".to_string())?;
            let agreed = first.filter(|&p| owners.all(|(_, o)| o == Some(p)));
            let Some(owner) = agreed else {
                let said: Vec<String> = views
                    .iter()
                    .map(|(node, view)| {
                        let owner = view.owner(slot).map(|e| e.port);
                        format!("{} says {owner:?}", node.port())
                    })
                    .collect();
                return Err(format!("nodes disagree: {}", said.join(", ")));
            };
            accept(owner, &views).map(|()| owner)
        });
        self.node_on(port).unwrap_or_else(|| {
            panic!("slot {slot} went to port {port}, not a node of this cluster")
        })
    }

    /// The view of the first node that answers, primaries first.
    fn any_view(&self) -> (&RedisNode, ClusterView) {
        let mut errors = String::new();
        for node in self.nodes.iter().filter(|n| may_answer(n)) {
            match view_of(node) {
                Ok(view) => return (node, view),
                Err(e) => {
                    let _ = write!(errors, " {}: {e};", node.addr());
                }
            }
        }
        panic!("no node of the cluster answers CLUSTER NODES:{errors}");
    }

    /// The views of every node that answers now (killed and paused ones
    /// are left out).
    fn live_views(&self) -> Vec<(&RedisNode, ClusterView)> {
        self.nodes
            .iter()
            .filter(|n| may_answer(n))
            .filter_map(|node| view_of(node).ok().map(|view| (node, view)))
            .collect()
    }

    /// Our node on `port`, which `asked` named; panics if it is a stranger.
    fn ours(&self, port: u16, asked: &RedisNode) -> &RedisNode {
        self.node_on(port).unwrap_or_else(|| {
            panic!(
                "{} names port {port}, not a node of this cluster",
                asked.addr()
            )
        })
    }
}

/// A slot in flight between two primaries, from
/// [`RedisCluster::begin_migration`]: marked importing on the target and
/// migrating on the source. Move its keys with
/// [`move_keys`](Migration::move_keys) (as often as needed), then hand it
/// over with [`finish`](Migration::finish).
///
/// ```no_run
/// use redlease_testkit::cluster::RedisCluster;
///
/// let cluster = RedisCluster::start(2);
/// let migration = cluster.begin_migration(42, cluster.node(1).port());
/// assert_eq!(migration.source().port(), cluster.node(0).port());
/// migration.finish();
/// assert_eq!(cluster.owner_of(42).port(), cluster.node(1).port());
/// ```
#[derive(Debug)]
pub struct Migration<'a> {
    cluster: &'a RedisCluster,
    slot: u16,
    source: &'a RedisNode,
    target: &'a RedisNode,
    source_id: String,
    target_id: String,
}

impl<'a> Migration<'a> {
    /// The slot in flight.
    ///
    /// ```no_run
    /// let cluster = redlease_testkit::cluster::RedisCluster::start(2);
    /// assert_eq!(cluster.begin_migration(7, cluster.node(1).port()).slot(), 7);
    /// ```
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The primary the slot leaves (it owns the slot until `finish`).
    ///
    /// ```no_run
    /// let cluster = redlease_testkit::cluster::RedisCluster::start(2);
    /// let migration = cluster.begin_migration(7, cluster.node(1).port());
    /// assert_eq!(migration.source().port(), cluster.node(0).port());
    /// ```
    pub fn source(&self) -> &'a RedisNode {
        self.source
    }

    /// The primary the slot goes to.
    ///
    /// ```no_run
    /// let cluster = redlease_testkit::cluster::RedisCluster::start(2);
    /// let migration = cluster.begin_migration(7, cluster.node(1).port());
    /// assert_eq!(migration.target().port(), cluster.node(1).port());
    /// ```
    pub fn target(&self) -> &'a RedisNode {
        self.target
    }

    /// Moves every key of the slot still on the source to the target
    /// (`CLUSTER GETKEYSINSLOT` + `MIGRATE ... KEYS`, 100 at a time, TTLs
    /// kept) and returns how many moved. Keys move one batch at a time,
    /// atomically each: a client sees each key on exactly one side.
    ///
    /// Panics if a `MIGRATE` fails (e.g. the target already holds one of
    /// the keys) or the slot does not empty within 60 s.
    ///
    /// ```no_run
    /// let cluster = redlease_testkit::cluster::RedisCluster::start(2);
    /// let migration = cluster.begin_migration(7, cluster.node(1).port());
    /// let moved = migration.move_keys();
    /// ```
    pub fn move_keys(&self) -> usize {
        let deadline = Instant::now() + MOVE_KEYS_TIMEOUT;
        let mut moved = 0;
        for _ in 0..MAX_MIGRATE_ROUNDS {
            let keys: Vec<Vec<u8>> = run(
                self.source,
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(self.slot)
                    .arg(MIGRATE_BATCH),
            );
            if keys.is_empty() {
                return moved;
            }
            assert!(
                Instant::now() < deadline,
                "slot {} still has keys on {} after {MOVE_KEYS_TIMEOUT:?} of MIGRATE",
                self.slot,
                self.source.addr()
            );
            // "OK", or "NOKEY" if they all expired meanwhile.
            let _: redis::Value = run(
                self.source,
                redis::cmd("MIGRATE")
                    .arg("127.0.0.1")
                    .arg(self.target.port())
                    .arg("")
                    .arg(0)
                    .arg(MIGRATE_TIMEOUT_MS)
                    .arg("KEYS")
                    .arg(&keys),
            );
            moved += keys.len();
        }
        panic!(
            "slot {} still has keys on {} after {MAX_MIGRATE_ROUNDS} MIGRATE rounds",
            self.slot,
            self.source.addr()
        );
    }

    /// Moves the remaining keys, then assigns the slot to the target
    /// (`CLUSTER SETSLOT slot NODE`) on the target, the source and the other
    /// primaries, and waits until every live node agrees.
    ///
    /// A primary that does not answer (killed, paused) is skipped: it
    /// learns the new owner from the others. Panics if the source or the
    /// target refuses, or the nodes do not agree within 15 s.
    ///
    /// ```no_run
    /// let cluster = redlease_testkit::cluster::RedisCluster::start(2);
    /// let target = cluster.node(1).port();
    /// cluster.begin_migration(7, target).finish();
    /// assert_eq!(cluster.owner_of(7).port(), target);
    /// ```
    pub fn finish(self) {
        self.move_keys();
        let assign = || {
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(self.slot)
                .arg("NODE")
                .arg(&self.target_id)
                .clone()
        };
        // The target first, so it bumps its config epoch and claims the
        // slot; then the source, which stops sending ASK.
        let _: () = run(self.target, &mut assign());
        let _: () = run(self.source, &mut assign());
        for node in self.cluster.primaries() {
            let ends = [self.source.port(), self.target.port()];
            // Not answering: gossip tells it later.
            if ends.contains(&node.port()) || !may_answer(node) {
                continue;
            }
            match try_query::<()>(node, &mut assign(), ANSWER_TIMEOUT) {
                Ok(()) => {}
                Err(e) if e.is_io_error() || e.is_timeout() => {}
                Err(e) => panic!(
                    "CLUSTER SETSLOT {} NODE {} on {}: {e}",
                    self.slot,
                    self.target_id,
                    node.addr()
                ),
            }
        }
        let target = self.target.port();
        let what = format!(
            "the nodes did not agree that slot {} moved to {}",
            self.slot,
            self.target.addr()
        );
        self.cluster
            .await_owner(self.slot, AGREE_TIMEOUT, &what, |owner, _| {
                if owner == target {
                    Ok(())
                } else {
                    Err(format!("owner is still port {owner}"))
                }
            });
    }
}

/// The slots primary `i` of `n` serves at start, both ends included.
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

/// The cluster as one node sees it: its `CLUSTER NODES` lines.
#[derive(Debug)]
struct ClusterView {
    entries: Vec<Entry>,
}

/// One line of `CLUSTER NODES`:
/// `<id> <ip:port@cport[,hostname]> <flags> <master> <ping> <pong> <epoch> <link> <slot>...`
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    id: String,
    /// 0 while the address is unknown (`noaddr`).
    port: u16,
    flags: Vec<String>,
    /// The primary's id, for a replica.
    master: Option<String>,
    /// Owned slot ranges, both ends included (not the `[slot->-id]`
    /// migration markers).
    slots: Vec<(u16, u16)>,
}

impl Entry {
    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    fn is_primary(&self) -> bool {
        self.has_flag("master")
    }

    /// Flagged failed by a majority (`fail`), not only suspected (`fail?`).
    fn failed(&self) -> bool {
        self.has_flag("fail")
    }

    /// Handshake done, address known, not suspected or failed.
    fn settled(&self) -> bool {
        !["handshake", "noaddr", "fail", "fail?"]
            .iter()
            .any(|f| self.has_flag(f))
    }
}

impl ClusterView {
    fn parse(text: &str) -> Result<ClusterView, String> {
        let entries = text
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| Entry::parse(line).ok_or_else(|| format!("unreadable line {line:?}")))
            .collect::<Result<_, _>>()?;
        Ok(ClusterView { entries })
    }

    fn owner(&self, slot: u16) -> Option<&Entry> {
        self.entries.iter().find(|e| {
            e.slots
                .iter()
                .any(|&(first, last)| first <= slot && slot <= last)
        })
    }

    fn by_port(&self, port: u16) -> Option<&Entry> {
        self.entries.iter().find(|e| e.port == port)
    }

    fn by_id(&self, id: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.id == id)
    }
}

impl Entry {
    fn parse(line: &str) -> Option<Entry> {
        let mut fields = line.split_whitespace();
        let id = fields.next()?.to_owned();
        // "127.0.0.1:7000@17000,hostname"; ":0@0" while unknown.
        let addr = fields.next()?;
        let addr = addr.split(',').next()?.split('@').next()?;
        let port = addr.rsplit(':').next()?.parse().ok()?;
        let flags = fields.next()?.split(',').map(str::to_owned).collect();
        let master = Some(fields.next()?)
            .filter(|m| *m != "-")
            .map(str::to_owned);
        // ping-sent, pong-recv, config-epoch, link-state.
        let mut fields = fields.skip(4);
        let slots = fields
            .by_ref()
            .filter(|s| !s.starts_with('['))
            .map(|s| match s.split_once('-') {
                Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                None => s.parse().ok().map(|one| (one, one)),
            })
            .collect::<Option<_>>()?;
        Some(Entry {
            id,
            port,
            flags,
            master,
            slots,
        })
    }
}

/// False for a node that is killed or paused (its process stopped), so
/// probes skip it at once instead of waiting out a timeout.
fn may_answer(node: &RedisNode) -> bool {
    let Some(pid) = node.pid() else {
        return false;
    };
    // "pid (comm) S ...": the state follows the last ')'.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, Some("T" | "t"))
}

/// `CLUSTER NODES` from `node`, within [`ANSWER_TIMEOUT`].
fn view_of(node: &RedisNode) -> Result<ClusterView, String> {
    let text: String = try_query(node, redis::cmd("CLUSTER").arg("NODES"), ANSWER_TIMEOUT)
        .map_err(|e| e.to_string())?;
    ClusterView::parse(&text).map_err(|e| format!("CLUSTER NODES on {}: {e}", node.addr()))
}

fn info_replication(node: &RedisNode, timeout: Duration) -> redis::RedisResult<String> {
    try_query(node, redis::cmd("INFO").arg("replication"), timeout)
}

/// Runs `cmd` on `node` with connect, read and write bounded by `timeout`.
fn try_query<T: redis::FromRedisValue>(
    node: &RedisNode,
    cmd: &mut redis::Cmd,
    timeout: Duration,
) -> redis::RedisResult<T> {
    let mut con = node.client().get_connection_with_timeout(timeout)?;
    con.set_read_timeout(Some(timeout))?;
    con.set_write_timeout(Some(timeout))?;
    cmd.query(&mut con)
}

/// Runs an admin command that must succeed; panics naming it and the node.
fn run<T: redis::FromRedisValue>(node: &RedisNode, cmd: &mut redis::Cmd) -> T {
    try_query(node, cmd, COMMAND_TIMEOUT)
        .unwrap_or_else(|e| panic!("`{}` on {}: {e}", describe(cmd), node.addr()))
}

/// The command as text, shortened, for error messages.
fn describe(cmd: &redis::Cmd) -> String {
    let mut text = String::new();
    for arg in cmd.args_iter() {
        if let redis::Arg::Simple(bytes) = arg {
            if !text.is_empty() {
                text.push(' ');
            }
            text.push_str(&String::from_utf8_lossy(bytes));
        }
        if text.len() > 120 {
            text.truncate(120);
            text.push_str("...");
            break;
        }
    }
    text
}

fn config_get(node: &RedisNode, name: &str) -> String {
    let pair: Vec<String> = run(node, redis::cmd("CONFIG").arg("GET").arg(name));
    pair.get(1).cloned().unwrap_or_default()
}

/// Calls `probe` every 50 ms until it succeeds, and returns its value;
/// panics saying `what` did not happen, with the probe's last reason, if
/// `limit` passes first.
fn poll<T>(limit: Duration, what: &str, mut probe: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        let reason = match probe() {
            Ok(value) => return value,
            Err(reason) => reason,
        };
        assert!(
            Instant::now() < deadline,
            "{what} within {limit:?}; last: {reason}"
        );
        std::thread::sleep(POLL);
    }
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

    #[test]
    fn cluster_nodes_lines_are_read() {
        let text = "\
07c3 127.0.0.1:30004@31004,host slave e7d1 0 1426238317239 4 connected
e7d1 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 7000 [5461->-292f]
292f :0@0 master,fail?,noaddr - 1426238316232 1426238315000 2 disconnected
";
        let view = ClusterView::parse(text).unwrap();
        assert_eq!(view.entries.len(), 3);
        let replica = view.by_port(30004).unwrap();
        assert_eq!(replica.master.as_deref(), Some("e7d1"));
        assert!(!replica.is_primary() && replica.settled());
        assert_eq!(view.owner(5460).unwrap().id, "e7d1");
        assert_eq!(view.owner(7000).unwrap().id, "e7d1");
        assert!(view.owner(5461).is_none(), "a migration marker is no owner");
        let unknown = view.by_id("292f").unwrap();
        assert_eq!(unknown.port, 0);
        assert!(!unknown.settled() && !unknown.failed());
        assert!(ClusterView::parse("x y").is_err());
    }
}
