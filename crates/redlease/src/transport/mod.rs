pub(crate) mod deadline;
pub(crate) mod deployment;
pub(crate) mod node;
pub(crate) mod node_url;
pub(crate) mod server_conn;
pub(crate) mod shard_conn;
pub(crate) mod tls;
