//! One node of the quorum: its deployment and main connection, the
//! requests it serves (each bounded by a timeout, behind the owed-request
//! gate and the connect back-off), and redis-rs errors as [`NodeError`]s.
//! The lock requests are in [`acquire`] and [`ops`]; the node's health in
//! [`health`].

mod acquire;
mod claim;
mod health;
mod ops;

pub(crate) use crate::protocol::acquire::OnRefusal;
pub(crate) use acquire::AcquireReply;
pub(crate) use claim::Take;
pub(crate) use health::write_off_after;
use health::{owe, Health, ServerHealth};

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::{Client, Cmd, ConnectionAddr, FromRedisValue, RedisError};

use crate::core::error::Error;
use crate::core::keys::hash_slot;
use crate::core::node_error::{NodeError, NodeErrorKind, NodeId};
use crate::core::server_code::ServerErrorCode;
use crate::core::telemetry;
use crate::core::token::LockerTag;
use crate::core::validity::DriftModel;
use crate::core::vote_guard::{ServerRegistry, VoteGuard};
use crate::protocol::lua::{Lua, PubSub};
use crate::protocol::server_error::ErrorReply;
use crate::transport::deadline::Deadlines;
use crate::transport::deployment::{Conn, Deployment};
use crate::transport::node_url::{redact_url, NodeUrl};
use crate::transport::tls::TlsConfig;

/// Connection settings shared by all nodes of a Locker.
#[derive(Clone, Debug)]
pub(crate) struct ConnectSettings {
    /// The Locker's tag: a refusal by a lock holding one of its tokens
    /// marks nothing (see [`Node::acquire`]).
    pub(crate) tag: LockerTag,
    pub(crate) connect_timeout: Duration,
    /// `WAIT` after every write of a lease.
    pub(crate) durability: crate::core::durability::Durability,
    /// How long a server that started casts no "yes" (zero: off).
    pub(crate) quarantine: Duration,
    /// How long after its clock jumped (`None`: the clock is not watched).
    pub(crate) clock_suspension: Option<Duration>,
    pub(crate) drift: DriftModel,
    /// Which node reached which server first, shared by a Locker's nodes.
    pub(crate) registry: Arc<ServerRegistry>,
    /// Whether a node that is one server gets an express connection (see
    /// `express`).
    pub(crate) express: bool,
}

/// One Redis deployment.
pub(crate) struct Node {
    id: NodeId,
    deployment: Deployment,
    conn: Conn,
    settings: ConnectSettings,
    health: Health,
    /// Bounds every request (one timer for the node, not one per request).
    deadlines: Deadlines,
    /// Whether the server may vote "yes".
    guard: VoteGuard,
    /// Set once the main connection has claimed its server (claims are
    /// never withdrawn), so the check on every granted acquire is one load.
    server_known: std::sync::atomic::AtomicBool,
    /// The server facts whose `run_id` this node last claimed with
    /// success. A claim that succeeded always does again (claims are never
    /// withdrawn), so a grant from the same connection skips the registry.
    claimed: std::sync::Mutex<Option<Arc<crate::core::vote_guard::ServerFacts>>>,
    /// Whether the server takes `SET ... NX GET` (Redis 7.0 and later):
    /// believed until it refuses it once.
    set_nx_get: std::sync::atomic::AtomicBool,
    /// Whether the release script is believed cached on the server, so it
    /// goes as `EVALSHA` (see [`Node::release`]).
    release_cached: std::sync::atomic::AtomicBool,
}

/// Whether a request waits behind the owed-request gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gate {
    /// New work (acquire, extend, fence): refused while requests are owed.
    New,
    /// Undoing our own writes (release): always sent. Queued behind an
    /// owed acquire on the same connection, it runs right after it when the
    /// node wakes, so a failed acquire leaves nothing behind; there is at
    /// most one per lease or failed attempt, so it cannot pile up.
    Cleanup,
    /// A look at the server before any lock (`Admin::check_servers`):
    /// gated as new work, but a connection it cannot open starts no
    /// back-off, so the first lock request after it connects itself and
    /// says why it failed, rather than that a connection failed moments
    /// ago.
    Check,
}

type Request<T> = std::pin::Pin<Box<dyn Future<Output = Result<T, RedisError>> + Send>>;

impl NodeId {
    /// How the node at `url` is named in errors and logs: `index` and its
    /// address, never its credentials. Parses the URL; no I/O.
    ///
    /// ```
    /// let id = redlease::NodeId::from_url(2, "redis://app:secret@10.0.0.3:6380/1")?;
    /// assert_eq!(id.to_string(), "node 2 (10.0.0.3:6380/1)");
    /// # Ok::<(), redlease::Error>(())
    /// ```
    pub fn from_url(index: usize, url: &str) -> Result<NodeId, Error> {
        open(index, url, None, Duration::from_secs(1)).map(|(id, _)| id)
    }
}

/// The deployment of node `index` at `url`, and its name; a bad URL is an
/// input error that names the node without its password.
fn open(
    index: usize,
    url: &str,
    tls: Option<&TlsConfig>,
    connect_timeout: Duration,
) -> Result<(NodeId, Deployment), Error> {
    let bad = |reason: String| {
        Error::invalid(
            "urls",
            format!("node {index} ({}): {reason}", redact_url(url)),
        )
    };
    let parsed = NodeUrl::parse_reason(url).map_err(bad)?;
    let deployment = Deployment::open(&parsed, tls, connect_timeout).map_err(bad)?;
    let addr = match (&deployment, parsed.describe()) {
        (_, Some(name)) => name,
        (Deployment::Server(client), None) => describe(client),
        (_, None) => unreachable!("only a server URL is described by redis-rs"),
    };
    Ok((NodeId::new(index, addr), deployment))
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.id)
    }
}

impl Node {
    /// Parses the URL and sets up a lazily connecting, auto-reconnecting
    /// multiplexed connection. No I/O happens here, so a Locker builds while
    /// its nodes are down and uses them once they answer.
    pub(crate) fn new(
        index: usize,
        url: &str,
        settings: ConnectSettings,
        tls: Option<&TlsConfig>,
    ) -> Result<Node, Error> {
        let (id, deployment) = open(index, url, tls, settings.connect_timeout)?;
        let conn = deployment
            .main_connection(
                settings.connect_timeout,
                (settings.registry.clone(), index),
                settings.express,
            )
            .map_err(|e| {
                Error::invalid("urls", format!("node {index} ({}): {e}", redact_url(url)))
            })?;
        let health = if deployment.is_cluster() {
            Health::PerSlot(std::sync::Mutex::default())
        } else {
            Health::Whole(Arc::default())
        };
        let guard = VoteGuard::new(
            settings.quarantine,
            settings.clock_suspension,
            settings.drift,
        );
        Ok(Node {
            id,
            deployment,
            conn,
            settings,
            health,
            deadlines: Deadlines::new(),
            guard,
            server_known: std::sync::atomic::AtomicBool::new(false),
            claimed: std::sync::Mutex::new(None),
            set_nx_get: std::sync::atomic::AtomicBool::new(true),
            release_cached: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub(crate) fn id(&self) -> &NodeId {
        &self.id
    }

    /// How the node is reached, for connections of its own (renewal lanes,
    /// subscriptions).
    pub(crate) fn deployment(&self) -> &Deployment {
        &self.deployment
    }

    /// A connection for renewals: a new one of its own, or on a cluster
    /// the main one. A cluster connection keeps one socket per shard and
    /// mends each by itself, whereas a new one would first have to reach
    /// every shard, a stalled one included.
    pub(crate) async fn renewal_connection(&self) -> Result<Conn, RedisError> {
        if self.deployment.is_cluster() {
            return Ok(self.conn.clone());
        }
        self.deployment.connect(self.connect_timeout()).await
    }

    /// The pub/sub of the release channels: sharded on a cluster, so
    /// that a release's message stays in the lock's shard.
    fn pubsub(&self) -> PubSub {
        if self.deployment.is_cluster() {
            PubSub::Sharded
        } else {
            PubSub::Classic
        }
    }

    pub(crate) fn connect_timeout(&self) -> Duration {
        self.settings.connect_timeout
    }

    /// The pair of nodes (the later, the earlier) known to be one server,
    /// if any: each main connection claims its server when it connects
    /// (no I/O here).
    pub(crate) fn known_pair(&self) -> Option<(usize, usize)> {
        self.settings.registry.pair()
    }

    /// Whether this node has never reached its server, so it is not known
    /// which server it is (it may be another node's under another name).
    /// A cluster is known once any shard's server was claimed.
    pub(crate) fn server_unknown(&self) -> bool {
        use std::sync::atomic::Ordering;
        if self.server_known.load(Ordering::Relaxed) {
            return false;
        }
        let known = self.settings.registry.has_claimed(self.id.index());
        if known {
            self.server_known.store(true, Ordering::Relaxed);
        }
        !known
    }

    /// Connects, if not connected, so the connection claims its server
    /// (see [`known_pair`](Self::known_pair)); on a cluster, claims the
    /// server of every primary it is connected to.
    pub(crate) async fn connect(&self, timeout: Duration) -> Result<(), NodeError> {
        let mut conn = self.conn.clone();
        // TIME, which the ACL rule allows: any request connects first.
        let request = Box::pin(async move {
            let () = redis::cmd("TIME").query_async(&mut conn).await?;
            match &conn {
                Conn::Cluster(cluster) => cluster.primaries().await,
                _ => Ok(Vec::new()),
            }
        });
        let primaries = self.bounded(timeout, Gate::Check, "", request).await?;
        for facts in primaries {
            // A refused claim is recorded as the Locker's pair.
            let _ = self.settings.registry.claim(&facts.run_id, self.id.index());
        }
        Ok(())
    }

    /// `Err` if durability is required and fewer replicas acknowledged.
    fn replicated(&self, acknowledged: Option<u32>) -> Result<(), NodeError> {
        let acknowledged = acknowledged.unwrap_or(0);
        match self.settings.durability.shortfall(acknowledged) {
            None => Ok(()),
            Some(wanted) => Err(self.error(NodeErrorKind::NotReplicated {
                acknowledged,
                wanted,
            })),
        }
    }

    /// Runs `call`, an `EVALSHA` of `lua` whose first key is `key`, and
    /// the durability `WAIT` after it; the replicas that acknowledged.
    async fn run<T: FromRedisValue + Send + 'static>(
        &self,
        lua: &'static Lua,
        call: Cmd,
        timeout: Duration,
        gate: Gate,
        key: &str,
    ) -> Result<(T, Option<u32>), NodeError> {
        let mut conn = self.conn.clone();
        let durability = self.settings.durability;
        self.bounded(
            timeout,
            gate,
            key,
            Box::pin(async move { conn.eval_waited(lua, &call, durability).await }),
        )
        .await
    }

    /// Whether this node's locks hold `token|lineage` rather than the bare
    /// token: with durability on, the scripts bind a lock to the
    /// replication lineage (`master_replid`) of the server that took it,
    /// so a lease whose primary changed (a promoted replica, a restart that
    /// lost the data) is not ours there and is reported lost.
    pub(crate) fn binds_lineage(&self) -> bool {
        self.settings.durability.wait().is_some()
    }

    /// The durability setting, for the renewal lanes.
    pub(crate) fn durability(&self) -> crate::core::durability::Durability {
        self.settings.durability
    }

    async fn bounded<T: Send + 'static>(
        &self,
        timeout: Duration,
        gate: Gate,
        key: &str,
        mut request: Request<T>,
    ) -> Result<T, NodeError> {
        let health = self.health(key);
        // The clock is read only for a node in trouble (see `backing_off`).
        let now = std::time::Instant::now;
        if let Some((until, cause)) = health.backing_off(now) {
            return Err(self
                .error(NodeErrorKind::Connection(format!(
                    "refused a connection moments ago; next try in {:?}",
                    until.saturating_duration_since(now())
                )))
                .with_cause_of(cause));
        }
        if let Some((count, since)) = health.owed.pending().filter(|_| gate != Gate::Cleanup) {
            return Err(self.error(NodeErrorKind::Unresponsive {
                unanswered: count,
                since: now().saturating_duration_since(since),
            }));
        }
        let deadline = tokio::time::Instant::now() + timeout;
        // A cluster that never answered: why, if it does not now.
        let seeds = self.deployment.ask_seeds(self.settings.connect_timeout);
        let result = match self.deadlines.until(deadline, &mut request).await {
            Ok(Ok(value)) => {
                if let Some(seeds) = seeds {
                    seeds.abort();
                    self.deployment.reached();
                }
                Ok(value)
            }
            Ok(Err(e)) => match seeds {
                // No connection to any shard (no error reply from one):
                // the seeds' own reason, which the cluster client drops.
                Some(seeds) if e.code().is_none() => {
                    let e = match self.deadlines.until(deadline, seeds).await {
                        Ok(Ok(Some(why))) => why,
                        _ => e,
                    };
                    Err(self.redis_error(e, timeout))
                }
                _ => Err(self.redis_error(e, timeout)),
            },
            Err(_) => {
                owe(&health.owed, request, timeout);
                Err(self.error(NodeErrorKind::Timeout(timeout)))
            }
        };
        match result.as_ref().map_err(NodeError::kind) {
            // Only a broken connection backs off: a slow or paused node
            // still gets every request (its timeout bounds them).
            Err(NodeErrorKind::Connection(_) | NodeErrorKind::WrongScheme(_))
                if gate != Gate::Check =>
            {
                health.failed(result.as_ref().err().and_then(NodeError::cause))
            }
            Ok(_) => health.answered(),
            Err(_) => {}
        }
        result
    }

    /// The health record that covers `key`.
    fn health(&self, key: &str) -> Arc<ServerHealth> {
        match &self.health {
            Health::Whole(health) => health.clone(),
            Health::PerSlot(slots) => slots
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(hash_slot(key))
                .or_default()
                .clone(),
        }
    }

    pub(crate) fn error(&self, kind: NodeErrorKind) -> NodeError {
        let error = NodeError::new(self.id.clone(), redirect_in_words(kind));
        telemetry::node_error(&error);
        error
    }

    /// A redis-rs error from this node, as a [`NodeError`]. A connection
    /// or protocol failure keeps the redis-rs error as its `source()` (the
    /// kind holds only its category, so a reporter that prints the chain
    /// does not print it twice); a Redis error reply is fully described by
    /// its code and message (see [`ErrorReply`]), and a timeout by its
    /// duration. A reply that could not be read says what was wrong with
    /// it in the kind as well.
    pub(crate) fn redis_error(&self, e: RedisError, timeout: Duration) -> NodeError {
        if let Some(reply) = ErrorReply::of_error(&e) {
            return self.error(reply.into_kind());
        }
        if let Some(why) = crate::transport::tls::WrongScheme::find(&e) {
            return self.error(NodeErrorKind::WrongScheme(why)).caused_by(e);
        }
        if e.is_timeout() {
            return self.error(NodeErrorKind::Timeout(timeout));
        }
        if let Some(why) = crate::transport::tls::handshake_failure(&e) {
            return self.error(NodeErrorKind::Tls(why)).caused_by(e);
        }
        // A reply that could not be read (a typed reply of another shape,
        // or no Redis protocol at all): what was wrong, in the kind too.
        if e.kind() == redis::ErrorKind::Parse {
            return self
                .error(NodeErrorKind::Protocol(e.to_string()))
                .caused_by(e);
        }
        let category = e.category().to_string();
        let kind = match e.kind() {
            redis::ErrorKind::Parse | redis::ErrorKind::UnexpectedReturnType => {
                NodeErrorKind::Protocol(category)
            }
            _ => NodeErrorKind::Connection(category),
        };
        self.error(kind).caused_by(e)
    }
}

/// A cluster redirection that redis-rs gave up following, said in words.
/// It follows `MOVED` and `ASK` a few times within a request; one that
/// still comes back means the address it names did not answer when it
/// went there (a killed primary, which the shard's other nodes name until
/// a replica takes over), so it is a connection failure of that slot, not
/// a reply.
fn redirect_in_words(kind: NodeErrorKind) -> NodeErrorKind {
    let NodeErrorKind::Redis { code, message } = &kind else {
        return kind;
    };
    if !matches!(code, ServerErrorCode::Moved | ServerErrorCode::Ask) {
        return kind;
    }
    let Some((slot, addr)) = message.trim().split_once(' ') else {
        return kind;
    };
    if slot.parse::<u16>().is_err() || addr.is_empty() || addr.contains(' ') {
        return kind;
    }
    match code {
        ServerErrorCode::Moved => NodeErrorKind::Connection(format!(
            "the primary {addr} of slot {slot} does not answer (the cluster still names it: \
             MOVED; a failover may be under way)"
        )),
        ServerErrorCode::Ask => NodeErrorKind::Connection(format!(
            "slot {slot} is moving to {addr}, which does not answer (ASK)"
        )),
        _ => kind,
    }
}

/// `host:port`, plus `/db` when not 0; never the credentials.
fn describe(client: &Client) -> String {
    let info = client.get_connection_info();
    let db = info.redis_settings().db();
    let addr = match info.addr() {
        ConnectionAddr::Unix(path) => path.display().to_string(),
        other => other.to_string(),
    };
    if db == 0 {
        addr
    } else {
        format!("{addr}/{db}")
    }
}

/// Identity of a server for spotting the same node given twice: host
/// (lower-cased) and port, or the socket path. The database number is left
/// out on purpose: two databases of one server fail together. A cluster or
/// Sentinel URL is identified by its list of addresses.
pub(crate) fn server_identity(url: &str) -> Option<String> {
    match NodeUrl::parse_reason(url).ok()? {
        NodeUrl::Server(_) => {}
        // The same seeds in another order are the same cluster.
        NodeUrl::Cluster { mut seeds } => {
            for seed in &mut seeds {
                *seed = server_identity(seed)?;
            }
            seeds.sort();
            return Some(format!("cluster {}", seeds.join(",")));
        }
        other => return other.describe().map(|name| name.to_ascii_lowercase()),
    }
    let client = Client::open(url).ok()?;
    Some(match client.get_connection_info().addr() {
        ConnectionAddr::Unix(path) => path.display().to_string(),
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            format!("{}:{port}", host.to_ascii_lowercase())
        }
        other => other.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redirection_given_up_on_says_which_primary_does_not_answer() {
        let moved = NodeErrorKind::Redis {
            code: ServerErrorCode::Moved,
            message: "5598 127.0.0.1:8101".into(),
        };
        match redirect_in_words(moved) {
            NodeErrorKind::Connection(why) => assert!(
                why.starts_with("the primary 127.0.0.1:8101 of slot 5598 does not answer"),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
        let ask = NodeErrorKind::Redis {
            code: ServerErrorCode::Ask,
            message: "12182 10.0.0.7:7001".into(),
        };
        assert_eq!(
            redirect_in_words(ask).to_string(),
            "connection failed: slot 12182 is moving to 10.0.0.7:7001, which does not answer (ASK)"
        );
        // Anything else stays what the server said.
        for (code, message) in [
            ("MOVED", "soon"),
            ("OOM", "command not allowed when used memory > 'maxmemory'"),
            ("ERR", "5598 127.0.0.1:8101"),
        ] {
            let kind = NodeErrorKind::Redis {
                code: ServerErrorCode::from_code(code),
                message: message.into(),
            };
            assert_eq!(redirect_in_words(kind.clone()), kind);
        }
    }

    #[test]
    fn server_identity_ignores_db_and_case() {
        assert_eq!(
            server_identity("redis://LocalHost:7000/1"),
            server_identity("redis://localhost:7000/2")
        );
        assert_ne!(
            server_identity("redis://localhost:7000"),
            server_identity("redis://localhost:7001")
        );
        assert_eq!(
            server_identity("redis+cluster://a:7000,B:7001"),
            server_identity("redis+cluster://b:7001,a:7000")
        );
    }
}
