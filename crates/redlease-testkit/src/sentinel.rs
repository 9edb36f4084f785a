//! Redis Sentinel on loopback: a primary, its replicas, and sentinels that
//! watch it and fail it over, all real server processes. For tests of
//! clients that find the primary through the sentinels.

use std::time::Duration;

use crate::tls::TestPki;
use crate::{process, ClientAuth, NodeConfig, RedisNode};

/// The name the sentinels know the primary by.
pub const PRIMARY_NAME: &str = "mymaster";

/// A primary with `replicas` replicas, watched by `sentinels` sentinels
/// that agree on a failure with a majority (`sentinels / 2 + 1`).
///
/// The sentinels declare the primary down after 1 s without an answer and
/// fail it over at once, so tests need not wait long.
///
/// ```no_run
/// use redlease_testkit::sentinel::SentinelSet;
///
/// let mut set = SentinelSet::start(1, 3);
/// let before = set.primary_port();
/// set.node_mut(0).kill(); // the primary
/// let after = set.await_failover(before, std::time::Duration::from_secs(30));
/// assert_ne!(after, before);
/// ```
#[derive(Debug)]
pub struct SentinelSet {
    /// The data nodes: the first started as primary, the rest as replicas.
    nodes: Vec<RedisNode>,
    sentinels: Vec<RedisNode>,
}

impl SentinelSet {
    /// Starts the primary, its replicas (waiting until each has synced) and
    /// the sentinels (waiting until each knows the primary and replicas).
    pub fn start(replicas: usize, sentinels: usize) -> SentinelSet {
        Self::start_configured(replicas, sentinels, NodeConfig::new())
    }

    /// [`start`](SentinelSet::start) with every server, sentinels
    /// included, serving TLS only with `pki`'s server certificate;
    /// replication and the sentinels' own connections to the servers and
    /// to each other go over TLS too (`tls-replication yes`). With
    /// [`ClientAuth::Required`] every client must present a certificate
    /// signed by `pki`'s CA. [`sentinel_urls`](SentinelSet::sentinel_urls)
    /// are then `rediss://` URLs.
    ///
    /// ```no_run
    /// use redlease_testkit::sentinel::SentinelSet;
    /// use redlease_testkit::{tls::TestPki, ClientAuth};
    ///
    /// let pki = TestPki::generate();
    /// let set = SentinelSet::start_tls(1, 3, &pki, ClientAuth::Required);
    /// assert!(set.sentinel_urls()[0].starts_with("rediss://"));
    /// ```
    pub fn start_tls(
        replicas: usize,
        sentinels: usize,
        pki: &TestPki,
        auth: ClientAuth,
    ) -> SentinelSet {
        let config = NodeConfig::new()
            .tls(pki, auth)
            .arg("tls-replication", "yes");
        Self::start_configured(replicas, sentinels, config)
    }

    fn start_configured(replicas: usize, sentinels: usize, base: NodeConfig) -> SentinelSet {
        assert!(sentinels >= 1, "at least one sentinel");
        let primary = RedisNode::start_with(base.clone());
        let mut nodes = vec![primary];
        for _ in 0..replicas {
            let port = nodes[0].port().to_string();
            let replica =
                RedisNode::start_with(base.clone().arg("replicaof", &format!("127.0.0.1 {port}")));
            nodes.push(replica);
        }
        let quorum = sentinels / 2 + 1;
        let config = format!(
            "sentinel monitor {PRIMARY_NAME} 127.0.0.1 {} {quorum}\n\
             sentinel down-after-milliseconds {PRIMARY_NAME} 1000\n\
             sentinel failover-timeout {PRIMARY_NAME} 5000\n\
             sentinel parallel-syncs {PRIMARY_NAME} 1\n",
            nodes[0].port()
        );
        let sentinels = (0..sentinels)
            .map(|_| RedisNode::start_with(base.clone().sentinel(config.clone())))
            .collect();
        let set = SentinelSet { nodes, sentinels };
        set.await_known(replicas, Duration::from_secs(20));
        set
    }

    /// Waits until every sentinel sees `replicas` replicas and the others.
    fn await_known(&self, replicas: usize, limit: Duration) {
        let others = self.sentinels.len() - 1;
        process::poll_until(limit, "sentinels did not see the set", || {
            let known = self.sentinels.iter().all(|s| {
                let fields = primary_fields(s);
                let num = |name: &str| {
                    fields
                        .windows(2)
                        .find(|w| w[0] == name)
                        .and_then(|w| w[1].parse::<usize>().ok())
                };
                num("num-slaves") == Some(replicas) && num("num-other-sentinels") == Some(others)
            });
            known.then_some(())
        });
    }

    /// `redis://127.0.0.1:PORT` (`rediss://` over TLS) of every sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisNode::url).collect()
    }

    /// The port the sentinels name as primary now.
    pub fn primary_port(&self) -> u16 {
        let mut con = self.sentinels[0]
            .client()
            .get_connection()
            .expect("a sentinel");
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(PRIMARY_NAME)
            .query(&mut con)
            .expect("the sentinel knows the primary");
        port
    }

    /// Waits until the sentinels name another primary than `old_port`, and
    /// returns its port. Panics after `limit`.
    pub fn await_failover(&self, old_port: u16, limit: Duration) -> u16 {
        process::poll_until(limit, "no failover", || {
            Some(self.primary_port()).filter(|&now| now != old_port)
        })
    }

    /// Data node `i` (0 started as primary), to fault it.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisNode {
        &mut self.nodes[i]
    }

    /// Data node `i`.
    pub fn node(&self, i: usize) -> &RedisNode {
        &self.nodes[i]
    }

    /// Sentinel `i`, e.g. to ask who its clients are.
    pub fn sentinel(&self, i: usize) -> &RedisNode {
        &self.sentinels[i]
    }

    /// The data node on `port`, if any.
    pub fn node_on(&self, port: u16) -> Option<&RedisNode> {
        self.nodes.iter().find(|n| n.port() == port)
    }
}

/// `SENTINEL MASTER` as a flat field/value list.
fn primary_fields(sentinel: &RedisNode) -> Vec<String> {
    let Ok(mut con) = sentinel.client().get_connection() else {
        return Vec::new();
    };
    redis::cmd("SENTINEL")
        .arg("MASTER")
        .arg(PRIMARY_NAME)
        .query(&mut con)
        .unwrap_or_default()
}
