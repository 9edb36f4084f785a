//! Reaching servers: a node's URL, its deployment (one server, a Redis
//! Cluster, a Sentinel primary), its connections and TLS, the deadline
//! on every request, and the node's health and server identity.

pub(crate) mod deadline;
pub(crate) mod deployment;
pub(crate) mod express;
pub(crate) mod node;
pub(crate) mod node_url;
pub(crate) mod server_conn;
pub(crate) mod shard_conn;
pub(crate) mod tls;
