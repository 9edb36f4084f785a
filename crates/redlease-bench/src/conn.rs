//! A connection to one node of the quorum for the raw baseline and the
//! contended workload's counter: one server over a multiplexed connection,
//! or a Redis Cluster (`redis+cluster://...`, one node of the quorum) over
//! redis-rs's cluster client, which routes each command by its first key
//! the way the library's cluster connection does.

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use redlease::NodeUrl;

use crate::client::BenchError;

/// One node's connection; cheap to clone (clones share the sockets).
#[derive(Clone)]
pub enum NodeConn {
    Server(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl NodeConn {
    /// Connects to the node `url` names (this does I/O): a cluster URL
    /// through its seeds, anything else as redis-rs reads it.
    pub async fn connect(url: &str) -> Result<NodeConn, BenchError> {
        if let Ok(NodeUrl::Cluster { seeds }) = NodeUrl::parse(url) {
            // RESP2, the redis-rs default, as the library's main connection.
            let client = ClusterClient::new(seeds)?;
            return Ok(NodeConn::Cluster(client.get_async_connection().await?));
        }
        let client = redis::Client::open(url)?;
        Ok(NodeConn::Server(
            client.get_multiplexed_async_connection().await?,
        ))
    }
}

impl NodeConn {
    /// Whether this is a cluster connection (the library does not read a
    /// cluster's clock).
    pub fn is_cluster(&self) -> bool {
        matches!(self, NodeConn::Cluster(_))
    }

    /// The `PUBSUB` subcommand that counts a channel's subscribers, as the
    /// library picks it.
    pub fn numsub_command(&self) -> &'static str {
        match self {
            NodeConn::Server(_) => "NUMSUB",
            NodeConn::Cluster(_) => "SHARDNUMSUB",
        }
    }
}

impl ConnectionLike for NodeConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            NodeConn::Server(c) => c.req_packed_command(cmd),
            NodeConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            NodeConn::Server(c) => c.req_packed_commands(pipeline, offset, count),
            NodeConn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            NodeConn::Server(c) => c.get_db(),
            NodeConn::Cluster(c) => c.get_db(),
        }
    }
}
