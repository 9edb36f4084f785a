//! How a node is reached: one server, a Redis Cluster, or the primary that
//! Sentinels name. Each gives the same three things: the node's main
//! connection (lazy: no I/O until the first request), fresh connections of
//! their own for renewal lanes, and a subscription connection for release
//! notifications.
//!
//! A cluster counts as one node of the quorum. redis-rs's cluster client
//! routes each script by its first key (every key of a lock shares the
//! lock's hash slot), follows MOVED and ASK, and refreshes its slot map;
//! each of its shard connections knows the server it reached (see
//! `shard_conn`).
//! Notifications use sharded pub/sub there (SSUBSCRIBE, and the scripts'
//! SPUBLISH), which stays inside the lock's shard; a server without it
//! (before Redis 7) leaves waiters on their timers.
//!
//! A Sentinel-managed primary is found by asking the sentinels for it and
//! confirming with `ROLE` that it is a primary (redis-rs does both); a
//! connection that breaks or answers `READONLY` (the server was demoted by
//! a failover) is dropped, and the next request asks the sentinels again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, Client, Cmd, Pipeline, ProtocolVersion, PushInfo, RedisError,
    RedisFuture, RedisResult, Value,
};
use tokio::sync::mpsc::UnboundedSender;

use crate::core::server_code::ServerErrorCode;
use crate::core::vote_guard::{ServerFacts, ServerRegistry};
use crate::protocol::lua::Lua;
use crate::protocol::server_error::{self, ErrorReply};
use crate::transport::node_url::{is_tls_server_url, NodeUrl};
use crate::transport::server_conn::{Finder, SentinelTarget, ServerConn};
use crate::transport::shard_conn::{self, ShardedCluster};
use crate::transport::tls::TlsConfig;

/// What a node URL leads to, ready to connect (no I/O yet).
pub(crate) enum Deployment {
    Server(Client),
    Cluster(Box<ClusterTarget>),
    Sentinel(SentinelTarget),
}

/// A cluster's clients.
pub(crate) struct ClusterTarget {
    client: ClusterClient,
    /// The same nodes over RESP3, for subscriptions.
    subscriber: ClusterClient,
    /// One client per seed, to tell why the cluster cannot be reached (see
    /// [`Deployment::ask_seeds`]).
    seeds: Arc<Vec<Client>>,
    /// The cluster answered a request, or a seed answered: the seeds can
    /// be reached, and a cluster without connections is no longer theirs
    /// to explain.
    reached: Arc<AtomicBool>,
}

impl Deployment {
    /// The deployment `url` names; a cluster's client connects each shard
    /// within `connect_timeout`. The error is the reason alone, without
    /// the node or its credentials.
    pub(crate) fn open(
        url: &NodeUrl,
        tls: Option<&TlsConfig>,
        connect_timeout: Duration,
    ) -> Result<Deployment, String> {
        match url {
            NodeUrl::Server(url) => open_server(url, tls).map(Deployment::Server),
            NodeUrl::Cluster { seeds } => {
                let client = cluster_client(seeds, tls, ProtocolVersion::RESP2, connect_timeout)?;
                let subscriber =
                    cluster_client(seeds, tls, ProtocolVersion::RESP3, connect_timeout)?;
                let seeds = seeds
                    .iter()
                    .map(|seed| open_server(seed, tls))
                    .collect::<Result<_, _>>()?;
                Ok(Deployment::Cluster(Box::new(ClusterTarget {
                    client,
                    subscriber,
                    seeds: Arc::new(seeds),
                    reached: Arc::default(),
                })))
            }
            NodeUrl::Sentinel(url) => {
                require_tls_support(url.tls)?;
                SentinelTarget::new(url, tls)
                    .map(Deployment::Sentinel)
                    .map_err(|e| e.to_string())
            }
        }
    }

    /// For a Sentinel node: a signal of every failover the sentinels
    /// announced (heard while a connection of the node is in use).
    pub(crate) fn switches(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        match self {
            Deployment::Sentinel(target) => Some(target.switches()),
            _ => None,
        }
    }

    /// For a cluster that never answered: its seeds asked now, each on a
    /// connection of its own within `connect_timeout`, by a task whose
    /// result is why none can be reached (the first seed's own error: a
    /// TLS handshake that failed, a refused connection, a scheme that does
    /// not match the port), which the cluster client does not pass on; or
    /// `None` once a seed answered. Asked alongside a request, so that a
    /// request that fails for want of any connection can say why within
    /// its own timeout (the cluster client retries before it gives up).
    pub(crate) fn ask_seeds(
        &self,
        connect_timeout: Duration,
    ) -> Option<tokio::task::JoinHandle<Option<RedisError>>> {
        let Deployment::Cluster(cluster) = self else {
            return None;
        };
        if cluster.reached.load(Ordering::Relaxed) {
            return None;
        }
        let (seeds, reached) = (cluster.seeds.clone(), cluster.reached.clone());
        Some(tokio::spawn(async move {
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(connect_timeout))
                .set_response_timeout(Some(connect_timeout));
            let schemes = ("rediss+cluster://", "redis+cluster://");
            let tries = seeds.iter().map(|seed| async {
                let addr = seed.get_connection_info().addr();
                // A PING too: a server that wants a client certificate
                // says so only after the handshake (TLS 1.3).
                let tried = async {
                    let mut conn = seed
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?;
                    redis::cmd("PING").query_async::<()>(&mut conn).await
                };
                match tried.await {
                    // Any reply is an answer, a refusal (NOPERM) too.
                    Err(e) if e.code().is_none() => {
                        Err(
                            crate::transport::tls::wrong_scheme(e, addr, connect_timeout, schemes)
                                .await,
                        )
                    }
                    _ => Ok(()),
                }
            });
            let mut first = None;
            for tried in futures_util::future::join_all(tries).await {
                match tried {
                    Ok(()) => {
                        reached.store(true, Ordering::Relaxed);
                        return None;
                    }
                    Err(why) => {
                        first.get_or_insert(why);
                    }
                }
            }
            first
        }))
    }

    /// A request to the cluster was answered (see
    /// [`ask_seeds`](Self::ask_seeds)).
    pub(crate) fn reached(&self) {
        if let Deployment::Cluster(cluster) = self {
            cluster.reached.store(true, Ordering::Relaxed);
        }
    }

    /// Whether notifications go through sharded pub/sub.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Deployment::Cluster(_))
    }

    /// The node's main connection: connects on first use, and again after
    /// it broke. One connection attempt per request, no backoff: a request
    /// to a node that is down fails at once (instead of waiting out retries
    /// inside its timeout), and the next one tries again. Our per-node
    /// timeout bounds every request; a second, fixed one inside redis-rs
    /// would cut long TTLs' short. Each server it reaches is claimed for
    /// `claim`'s node index (on a cluster, by the node, as each shard's
    /// votes arrive: see `shard_conn`).
    pub(crate) fn main_connection(
        &self,
        connect_timeout: Duration,
        claim: (Arc<ServerRegistry>, usize),
        express: bool,
    ) -> RedisResult<Conn> {
        match self {
            Deployment::Server(client) => Ok(Conn::Server(ServerConn::new(
                Finder::Address(client.clone()),
                client.get_connection_info().redis_settings().db(),
                connect_timeout,
                Some(claim),
                express,
            ))),
            Deployment::Cluster(cluster) => {
                Ok(Conn::Cluster(ShardedCluster::new(cluster.client.clone())))
            }
            Deployment::Sentinel(target) => Ok(Conn::Server(ServerConn::new(
                Finder::Sentinel(target.clone()),
                target.db(),
                connect_timeout,
                Some(claim),
                express,
            ))),
        }
    }

    /// A new connection of its own (a renewal lane's), connected now.
    pub(crate) async fn connect(&self, connect_timeout: Duration) -> RedisResult<Conn> {
        match self {
            Deployment::Server(client) => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(connect_timeout))
                    // The caller's patience bounds every request.
                    .set_response_timeout(None);
                client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map(Conn::Plain)
            }
            Deployment::Cluster(cluster) => {
                let conn = ShardedCluster::new(cluster.client.clone());
                conn.get().await?;
                Ok(Conn::Cluster(conn))
            }
            Deployment::Sentinel(target) => {
                let conn = ServerConn::new(
                    Finder::Sentinel(target.clone()),
                    target.db(),
                    connect_timeout,
                    None,
                    false,
                );
                conn.connect().await?;
                Ok(Conn::Server(conn))
            }
        }
    }

    /// A subscription connection whose messages go to `pushes`. It
    /// reconnects and subscribes again on its own after it broke (RESP3);
    /// a Sentinel's is opened to the primary of the moment, and opened
    /// again by the caller after a disconnection.
    pub(crate) async fn subscriber(
        &self,
        connect_timeout: Duration,
        pushes: UnboundedSender<PushInfo>,
    ) -> RedisResult<Subscriber> {
        let manager = |client: &Client| {
            let info = client.get_connection_info().clone();
            let redis = info
                .redis_settings()
                .clone()
                .set_protocol(ProtocolVersion::RESP3);
            let client = Client::open(info.set_redis_settings(redis))?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(connect_timeout))
                // Nobody else triggers a reconnect here: keep trying for a
                // few seconds so a node that restarts is heard again.
                .set_number_of_retries(8)
                .set_max_delay(Duration::from_secs(1))
                .set_push_sender(pushes.clone())
                .set_automatic_resubscription();
            ConnectionManager::new_lazy_with_config(client, config)
        };
        match self {
            Deployment::Server(client) => manager(client).map(Subscriber::Plain),
            Deployment::Cluster(cluster) => {
                let config = cluster_config(connect_timeout).set_push_sender(pushes);
                Ok(Subscriber::Sharded(
                    cluster
                        .subscriber
                        .get_pending_async_connection_with_config(config),
                ))
            }
            Deployment::Sentinel(target) => {
                let client = target.primary_client(connect_timeout).await?;
                manager(&client).map(Subscriber::Plain)
            }
        }
    }
}

fn require_tls_support(tls: bool) -> Result<(), String> {
    if tls && !cfg!(feature = "tls-rustls") {
        return Err("build redlease with the `tls-rustls` feature for TLS URLs".to_string());
    }
    #[cfg(feature = "tls-rustls")]
    if tls {
        crate::transport::tls::install_crypto_provider();
    }
    Ok(())
}

fn open_server(url: &str, tls: Option<&TlsConfig>) -> Result<Client, String> {
    let secure = is_tls_server_url(url);
    let client = Client::open(url).map_err(|e| {
        let mut reason = e.to_string();
        if secure && !cfg!(feature = "tls-rustls") {
            reason.push_str(" (build redlease with the `tls-rustls` feature for rediss:// URLs)");
        }
        reason
    })?;
    require_tls_support(secure)?;
    match tls {
        #[cfg(feature = "tls-rustls")]
        Some(tls) if secure => {
            Client::build_with_tls(client.get_connection_info().clone(), tls.certificates())
                .map_err(|e| e.to_string())
        }
        _ => Ok(client),
    }
}

fn cluster_client(
    seeds: &[String],
    tls: Option<&TlsConfig>,
    protocol: ProtocolVersion,
    connect_timeout: Duration,
) -> Result<ClusterClient, String> {
    let secure = seeds.iter().any(|s| is_tls_server_url(s));
    require_tls_support(secure)?;
    let builder = ClusterClientBuilder::new(seeds.iter().map(String::as_str))
        .use_protocol(protocol)
        .connection_timeout(connect_timeout)
        // A request is retried (after MOVED, ASK, a broken connection) a
        // few times within its timeout, briefly: our timeout bounds it, and
        // a long retry loop would keep working for a caller that gave up.
        .retries(3)
        .min_retry_wait(10)
        .max_retry_wait(100);
    #[cfg(feature = "tls-rustls")]
    let builder = match tls {
        Some(tls) if secure => builder.certs(tls.certificates()),
        _ => builder,
    };
    #[cfg(not(feature = "tls-rustls"))]
    let _ = tls;
    builder.build().map_err(|e| e.to_string())
}

fn cluster_config(connect_timeout: Duration) -> ClusterConfig {
    ClusterConfig::new().set_connection_timeout(connect_timeout)
}

/// A connection of any deployment; redis-rs's `Script`, `Cmd` and
/// `Pipeline` run on it as on any connection.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server process (a fixed address or the sentinels' primary),
    /// known by its `run_id`.
    Server(ServerConn),
    Plain(MultiplexedConnection),
    /// A cluster, whose shard connections know their servers.
    Cluster(ShardedCluster),
}

impl Conn {
    /// What the newest connection learned about its server; `None` for a
    /// cluster (each reply says which shard's server sent it: see
    /// [`eval_voted`](Self::eval_voted)) and a renewal lane's plain
    /// connection.
    pub(crate) fn server_facts(&self) -> Option<Arc<ServerFacts>> {
        match self {
            Conn::Server(c) => c.facts(),
            Conn::Plain(_) | Conn::Cluster(_) => None,
        }
    }

    /// Whether releases may send `DELIFEQ` (see `compare_delete`); never
    /// on a cluster, whose shards are not asked.
    pub(crate) fn has_delifeq(&self) -> bool {
        match self {
            Conn::Server(c) => c.has_delifeq(),
            Conn::Plain(_) | Conn::Cluster(_) => false,
        }
    }

    /// `DELIFEQ` was refused: releases use the script (see
    /// `compare_delete`).
    pub(crate) fn refuse_delifeq(&self) {
        if let Conn::Server(c) = self {
            c.refuse_delifeq();
        }
    }

    /// Runs `cmd` (an `EVALSHA` of `lua`); if the server lost the script (a
    /// restart, `SCRIPT FLUSH`, a new shard), sends it whole as `EVAL`,
    /// which also caches it there.
    ///
    /// Not `SCRIPT LOAD`: redis-rs sends that to every primary of a
    /// cluster, so one stalled shard would hold up every script call behind
    /// it; and while a slot migrates, the call goes to the importing shard
    /// through an ASK redirection that a separate `SCRIPT LOAD` would not
    /// follow.
    pub(crate) async fn eval<T: redis::FromRedisValue>(
        &mut self,
        lua: &Lua,
        cmd: &Cmd,
    ) -> RedisResult<T> {
        match self.query(cmd).await {
            Err(e) if is_noscript(&e) => lua.whole(cmd).query_async(self).await,
            other => other,
        }
    }

    /// `cmd.query_async(self)`, without the boxed future that going
    /// through [`ConnectionLike`] adds (but on a cluster): this carries
    /// every lock's requests.
    pub(crate) async fn query<T: redis::FromRedisValue>(&mut self, cmd: &Cmd) -> RedisResult<T> {
        let value = match self {
            Conn::Server(c) => c.send(cmd).await?,
            Conn::Plain(c) => c.send_packed_command(cmd).await?,
            other => other.req_packed_command(cmd).await?,
        };
        Ok(T::from_redis_value(value.extract_error()?)?)
    }

    /// The replies to every command of `pipeline`, errors among them as
    /// values (the pipeline must ignore errors), without the boxed future
    /// that going through [`ConnectionLike`] adds (but on a cluster). Not
    /// for a transaction, nor with commands marked
    /// `ignore()`: their replies would be returned too.
    pub(crate) async fn query_pipeline(&mut self, pipeline: &Pipeline) -> RedisResult<Vec<Value>> {
        debug_assert!(!pipeline.is_transaction());
        let count = pipeline.len();
        match self {
            Conn::Server(c) => c.send_pipeline(pipeline, 0, count).await,
            Conn::Plain(c) => c.send_packed_commands(pipeline, 0, count).await,
            other => other.req_packed_commands(pipeline, 0, count).await,
        }
    }

    /// [`eval`](Self::eval), followed in the same round trip by `WAIT
    /// replicas timeout` if `wait` is given (a pipeline goes where its first
    /// key does, so on a cluster the `WAIT` reaches the server that took
    /// the write); the number of replicas that acknowledged.
    pub(crate) async fn eval_waited<T: redis::FromRedisValue>(
        &mut self,
        lua: &Lua,
        cmd: &Cmd,
        durability: crate::core::durability::Durability,
    ) -> RedisResult<(T, Option<u32>)> {
        let (value, acked, _) = self.eval_asked(lua, cmd, durability, false).await?;
        Ok((value, acked))
    }

    /// [`eval_waited`](Self::eval_waited) for a vote: on a cluster, also
    /// what the connection that carried it learned about its shard's
    /// server (asked in the same pipeline, of the connection itself: see
    /// `shard_conn`), which is `None` only if that connection is gone.
    /// Elsewhere `None`: the server is [`server_facts`](Self::server_facts)'.
    pub(crate) async fn eval_voted<T: redis::FromRedisValue>(
        &mut self,
        lua: &Lua,
        cmd: &Cmd,
        durability: crate::core::durability::Durability,
    ) -> RedisResult<(T, Option<u32>, Option<Arc<ServerFacts>>)> {
        let ask = matches!(self, Conn::Cluster(_));
        self.eval_asked(lua, cmd, durability, ask).await
    }

    async fn eval_asked<T: redis::FromRedisValue>(
        &mut self,
        lua: &Lua,
        cmd: &Cmd,
        durability: crate::core::durability::Durability,
        ask_shard: bool,
    ) -> RedisResult<(T, Option<u32>, Option<Arc<ServerFacts>>)> {
        let wait = durability.wait();
        if wait.is_none() && !ask_shard {
            return self.eval(lua, cmd).await.map(|v| (v, None, None));
        }
        let fsync = durability.fsynced();
        let pipeline = |cmd: Cmd| {
            let mut pipe = redis::pipe();
            // Each reply on its own: a pipeline's error otherwise comes as
            // one aggregate without the server's message.
            pipe.ignore_errors().add_command(cmd);
            if let Some((replicas, timeout)) = wait {
                if fsync {
                    pipe.cmd("WAITAOF").arg(1).arg(replicas);
                } else {
                    pipe.cmd("WAIT").arg(replicas);
                }
                pipe.arg(timeout.as_millis() as u64);
            }
            if ask_shard {
                pipe.add_command(shard_conn::which_shard());
            }
            pipe
        };
        let mut replies: Vec<Value> = pipeline(cmd.clone()).query_async(self).await?;
        if matches!(replies.first(), Some(Value::ServerError(e))
            if ErrorReply::of_value(e).code == ServerErrorCode::NoScript)
        {
            replies = pipeline(lua.whole(cmd)).query_async(self).await?;
        }
        let expected = 1 + usize::from(wait.is_some()) + usize::from(ask_shard);
        if replies.len() != expected {
            return Err(RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "a script and its WAIT did not answer once each",
            )));
        }
        let shard = match ask_shard {
            true => replies.pop().as_ref().and_then(shard_conn::facts_of),
            false => None,
        };
        let answer = wait.and_then(|_| replies.pop());
        let value = replies.pop().expect("counted above");
        // The script's error first: the WAIT's means less.
        let value = T::from_redis_value(value.extract_error()?)?;
        let acked = match answer {
            Some(answer) => Some(acknowledged(&answer.extract_error()?)?),
            None => None,
        };
        Ok((value, acked, shard))
    }
}

/// Replicas that acknowledged, from `WAIT`'s count or `WAITAOF`'s pair
/// (local fsyncs, replica fsyncs): without the local fsync, none count.
fn acknowledged(answer: &Value) -> RedisResult<u32> {
    use redis::FromRedisValue;
    match answer {
        Value::Array(pair) if pair.len() == 2 => {
            let local = u32::from_redis_value_ref(&pair[0])?;
            let replicas = u32::from_redis_value_ref(&pair[1])?;
            Ok(if local >= 1 { replicas } else { 0 })
        }
        other => Ok(u32::from_redis_value_ref(other)?),
    }
}

fn is_noscript(e: &RedisError) -> bool {
    server_error::code_of(e) == Some(ServerErrorCode::NoScript)
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Plain(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
            Conn::Server(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Plain(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Server(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Plain(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Server(c) => c.db(),
        }
    }
}

/// A node's subscription connection.
pub(crate) enum Subscriber {
    /// SUBSCRIBE on one server (or the sentinels' primary).
    Plain(ConnectionManager),
    /// SSUBSCRIBE through a cluster connection, which subscribes on the
    /// shard that owns each channel's slot.
    Sharded(ClusterConnection),
}

impl Subscriber {
    pub(crate) async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Subscriber::Plain(c) => c.subscribe(channel).await,
            Subscriber::Sharded(c) => c.ssubscribe(channel).await,
        }
    }

    pub(crate) async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Subscriber::Plain(c) => c.unsubscribe(channel).await,
            Subscriber::Sharded(c) => c.sunsubscribe(channel).await,
        }
    }
}
