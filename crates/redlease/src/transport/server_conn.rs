//! A connection to one Redis server process that knows which process it
//! reached: a fixed address, or the primary the sentinels name. On every
//! (re)connect, before any request goes out on it, it reads the server's
//! `run_id`, uptime and clock (`INFO server` and `TIME`, one round trip);
//! a server restart always breaks the connection, so no restart goes
//! unseen. The lock logic uses these facts to keep restarted, duplicated
//! and clock-jumped servers from voting (see `vote_guard`). The same reply
//! says whether the server has a native compare-and-delete for releases
//! (see `compare_delete`).
//!
//! The connection is dropped when it breaks, or, behind Sentinel, when the
//! server answers `READONLY` (a failover demoted it) or the sentinels
//! announce `+switch-master`; the next request connects (and asks the
//! sentinels) again.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Client, Cmd, IntoConnectionInfo, Pipeline, RedisError, RedisFuture,
    RedisResult, Value,
};

use crate::core::server_code::ServerErrorCode;
use crate::core::vote_guard::{parse_info_server, ClockSample, ServerFacts, ServerRegistry};
use crate::protocol::capabilities::Capabilities;
use crate::protocol::server_error::{self, ErrorReply};
use crate::transport::express::{self, Express, Found, Lent};
use crate::transport::node_url::SentinelUrl;
use crate::transport::tls::{self, TlsConfig};

/// Everything needed to ask the sentinels for the primary again.
#[derive(Clone)]
pub(crate) struct SentinelTarget {
    url: SentinelUrl,
    #[cfg(feature = "tls-rustls")]
    certificates: Option<redis::TlsCertificates>,
    /// Counts the failovers heard of (`+switch-master`), for the
    /// subscription connection, which must follow the primary too.
    switches: Arc<tokio::sync::watch::Sender<u64>>,
}

impl SentinelTarget {
    /// The sentinels of `url`; no I/O.
    pub(crate) fn new(url: &SentinelUrl, tls: Option<&TlsConfig>) -> RedisResult<SentinelTarget> {
        #[cfg(not(feature = "tls-rustls"))]
        let _ = tls;
        let target = SentinelTarget {
            url: url.clone(),
            #[cfg(feature = "tls-rustls")]
            certificates: tls.map(TlsConfig::certificates),
            switches: Arc::new(tokio::sync::watch::Sender::new(0)),
        };
        // Built once now so a bad address fails here, not later.
        target.client()?;
        Ok(target)
    }

    /// The database the URL names.
    pub(crate) fn db(&self) -> i64 {
        self.url.db
    }

    /// A signal of every failover the sentinels announced (heard while a
    /// connection to the primary is in use).
    pub(crate) fn switches(&self) -> tokio::sync::watch::Receiver<u64> {
        self.switches.subscribe()
    }

    fn client(&self) -> RedisResult<SentinelClient> {
        let url = &self.url;
        let scheme = if url.tls { "rediss" } else { "redis" };
        let sentinels = url
            .sentinels
            .iter()
            .map(|s| {
                format!("{scheme}://{s}")
                    .into_connection_info()
                    .map(|i| i.addr().clone())
            })
            .collect::<RedisResult<Vec<_>>>()?;
        let mut builder =
            SentinelClientBuilder::new(sentinels, &url.service, SentinelServerType::Master)?
                .set_client_to_redis_db(url.db);
        if let Some(user) = &url.username {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = &url.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(user) = &url.sentinel_username {
            builder = builder.set_client_to_sentinel_username(user);
        }
        if let Some(password) = &url.sentinel_password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if url.tls {
            builder = builder
                .set_client_to_redis_tls_mode(redis::TlsMode::Secure)
                .set_client_to_sentinel_tls_mode(redis::TlsMode::Secure);
            #[cfg(feature = "tls-rustls")]
            if let Some(certificates) = &self.certificates {
                builder = builder
                    .set_client_to_redis_certificates(certificates.clone())
                    .set_client_to_sentinel_certificates(certificates.clone());
            }
        }
        builder.build()
    }

    /// A client of one sentinel (`host:port`), with the sentinels'
    /// credentials and, for `rediss+sentinel://`, the TLS settings.
    fn sentinel_client(&self, sentinel: &str) -> RedisResult<Client> {
        let url = &self.url;
        let scheme = if url.tls { "rediss" } else { "redis" };
        let info = format!("{scheme}://{sentinel}").into_connection_info()?;
        let mut redis = info.redis_settings().clone();
        if let Some(user) = &url.sentinel_username {
            redis = redis.set_username(user);
        }
        if let Some(password) = &url.sentinel_password {
            redis = redis.set_password(password);
        }
        let info = info.set_redis_settings(redis);
        #[cfg(feature = "tls-rustls")]
        if let (true, Some(certificates)) = (url.tls, &self.certificates) {
            return Client::build_with_tls(info, certificates.clone());
        }
        Client::open(info)
    }

    /// Asks the sentinels for the primary and confirms its role, within
    /// twice the connect timeout (each sentinel may be slow to answer).
    pub(crate) async fn primary_client(&self, connect_timeout: Duration) -> RedisResult<Client> {
        let mut sentinels = self.client()?;
        match tokio::time::timeout(2 * connect_timeout, sentinels.async_get_client()).await {
            Ok(result) => result,
            Err(_) => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no sentinel named the primary in time",
            ))),
        }
    }
}

/// Where a [`ServerConn`] finds its server.
#[derive(Clone)]
pub(crate) enum Finder {
    /// Always the same address.
    Address(Client),
    /// Whichever server the sentinels name as the primary.
    Sentinel(SentinelTarget),
}

impl Finder {
    async fn client(&self, connect_timeout: Duration) -> RedisResult<Client> {
        match self {
            Finder::Address(client) => Ok(client.clone()),
            Finder::Sentinel(target) => target.primary_client(connect_timeout).await,
        }
    }
}

/// A connection to one server process; see the module docs.
#[derive(Clone)]
pub(crate) struct ServerConn {
    shared: Arc<Shared>,
    db: i64,
}

struct Shared {
    /// Held while connecting, so concurrent requests connect once.
    resolving: tokio::sync::Mutex<()>,
    /// Behind Sentinel: listens for `+switch-master` while a primary is in
    /// use; restarted when it ended (its runtime did).
    watcher: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Numbers each connection.
    generations: AtomicU64,
    finder: Finder,
    current: Mutex<Option<Current>>,
    /// What the newest connection learned about its server. Never cleared:
    /// a reply is judged by the newest server seen, which is the one that
    /// sent it or a later one.
    latest: Mutex<Option<Arc<ServerFacts>>>,
    /// Whether the newest connection's server has `DELIFEQ` and it was not
    /// refused since (see `compare_delete`).
    delifeq: AtomicBool,
    /// Where a node's main connection records the server it reached, as
    /// node `index`, so a Locker knows of one server under two names as
    /// soon as both connected.
    claim: Option<(Arc<ServerRegistry>, usize)>,
    connect_timeout: Duration,
    /// A node's main connection has an express connection beside it (see
    /// `express`), unless the Locker turned it off; a renewal lane's has
    /// not.
    express: Option<Express>,
}

#[derive(Clone)]
struct Current {
    conn: MultiplexedConnection,
    /// Where its express connection connects, if it can have one.
    express: Option<Arc<express::Target>>,
    /// The runtime it was made on, which drives its I/O. Its express
    /// connection is opened and used there only: a socket is served by the
    /// runtime it was registered with, which another runtime's request
    /// cannot count on being driven (a current-thread runtime between two
    /// `block_on`s).
    runtime: tokio::runtime::Id,
    /// Tells this connection apart from a later one, so a failure seen on
    /// it never drops its successor.
    generation: u64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ServerConn {
    /// A connection that connects on first use, with an express
    /// connection beside it if `express`; no I/O here.
    pub(crate) fn new(
        finder: Finder,
        db: i64,
        connect_timeout: Duration,
        claim: Option<(Arc<ServerRegistry>, usize)>,
        express: bool,
    ) -> ServerConn {
        ServerConn {
            shared: Arc::new(Shared {
                resolving: tokio::sync::Mutex::new(()),
                watcher: Mutex::new(None),
                generations: AtomicU64::new(0),
                finder,
                current: Mutex::new(None),
                latest: Mutex::new(None),
                delifeq: AtomicBool::new(false),
                express: express.then(Express::default),
                claim,
                connect_timeout,
            }),
            db,
        }
    }

    /// What the newest connection learned about its server, once one was
    /// made.
    pub(crate) fn facts(&self) -> Option<Arc<ServerFacts>> {
        lock(&self.shared.latest).clone()
    }

    pub(crate) fn db(&self) -> i64 {
        self.db
    }

    /// Whether releases may send `DELIFEQ` (see `compare_delete`).
    pub(crate) fn has_delifeq(&self) -> bool {
        self.shared.delifeq.load(Ordering::Relaxed)
    }

    /// `DELIFEQ` was refused: releases use the script until the next
    /// connection asks the server again.
    pub(crate) fn refuse_delifeq(&self) {
        if self.shared.delifeq.swap(false, Ordering::Relaxed) {
            tracing::debug!("DELIFEQ refused; releases use the script");
        }
    }

    /// Connects now, unless connected.
    pub(crate) async fn connect(&self) -> RedisResult<()> {
        self.current().await.map(drop)
    }

    async fn current(&self) -> RedisResult<Current> {
        if let Some(c) = lock(&self.shared.current).clone() {
            return Ok(c);
        }
        // Boxed: the connect path's state (several kilobytes) would
        // otherwise sit inside every request's future.
        Box::pin(self.reconnect()).await
    }

    /// Makes the connection (one caller at a time), unless another caller
    /// made it meanwhile.
    async fn reconnect(&self) -> RedisResult<Current> {
        let _resolving = self.shared.resolving.lock().await;
        if let Some(c) = lock(&self.shared.current).clone() {
            return Ok(c);
        }
        let timeout = self.shared.connect_timeout;
        let client = self.shared.finder.client(timeout).await?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            // The caller's patience bounds every request.
            .set_response_timeout(None);
        // Before the server's first reply, a failure may say that the URL's
        // scheme does not match the port.
        let schemes = match &self.shared.finder {
            Finder::Address(_) => ("rediss://", "redis://"),
            Finder::Sentinel(_) => ("rediss+sentinel://", "redis+sentinel://"),
        };
        let addr = client.get_connection_info().addr();
        let mut conn = tls::connect(&client, &config, timeout, schemes).await?;
        let (facts, delifeq) = match tokio::time::timeout(timeout, handshake(&mut conn)).await {
            Ok(Ok(facts)) => facts,
            Ok(Err(e)) => return Err(tls::wrong_scheme(e, addr, timeout, schemes).await),
            Err(_) => {
                return Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the server did not say who it is (INFO server) in time",
                )))
            }
        };
        if let Finder::Sentinel(target) = &self.shared.finder {
            self.watch_switches(target);
        }
        // The facts first: no request goes out on the connection before
        // its server is known.
        if let Some((registry, index)) = &self.shared.claim {
            // A refused claim is recorded as the Locker's pair.
            let _ = registry.claim(&facts.run_id, *index);
        }
        *lock(&self.shared.latest) = Some(Arc::new(facts));
        self.shared.delifeq.store(delifeq, Ordering::Relaxed);
        let generation = self.shared.generations.fetch_add(1, Ordering::Relaxed);
        let express = express::Target::of(&client).map(Arc::new);
        let current = Current {
            conn,
            express,
            runtime: tokio::runtime::Handle::current().id(),
            generation,
        };
        *lock(&self.shared.current) = Some(current.clone());
        Ok(current)
    }

    /// Starts listening for failovers, unless already listening. Until a
    /// deposed primary is told to follow the new one, it still answers
    /// (and takes writes): waiting for its READONLY could take seconds.
    fn watch_switches(&self, target: &SentinelTarget) {
        let mut watcher = lock(&self.shared.watcher);
        if watcher.as_ref().is_some_and(|w| !w.is_finished()) {
            return;
        }
        let shared = Arc::downgrade(&self.shared);
        let timeout = self.shared.connect_timeout;
        *watcher = Some(tokio::spawn(watch_switches(
            shared,
            target.clone(),
            timeout,
        )));
    }

    /// Drops the connection of `generation` if `outcome` shows the server
    /// is gone or (behind Sentinel) no longer the primary.
    fn check(&self, generation: u64, outcome: Outcome) {
        let drop_it = match outcome {
            Outcome::Fine => false,
            Outcome::Broken => true,
            // A fixed address that is a replica stays what it is.
            Outcome::Demoted => matches!(self.shared.finder, Finder::Sentinel(_)),
        };
        if !drop_it {
            return;
        }
        let mut slot = lock(&self.shared.current);
        if slot.as_ref().is_some_and(|c| c.generation == generation) {
            *slot = None;
            tracing::debug!(?outcome, "dropped the connection to the server");
        }
    }

    /// The express connection, if it is idle, belongs to the current main
    /// connection and this request runs on that one's runtime. Finding it
    /// closed, this opens it in the background (see `express`).
    fn express(&self) -> Option<Lent<'_>> {
        let express = self.shared.express.as_ref()?;
        let here = tokio::runtime::Handle::try_current().ok()?.id();
        let generation = match &*lock(&self.shared.current) {
            Some(current) if current.express.is_some() && current.runtime == here => {
                current.generation
            }
            _ => return None,
        };
        let patience = self.shared.connect_timeout + express::OPENER_GRACE;
        match express.find(generation, patience) {
            Found::Lane(lent) => Some(lent),
            Found::Open => {
                self.open_express(generation);
                None
            }
            Found::Pass => None,
        }
    }

    /// Opens the express connection of main connection `generation` on a
    /// task of its own, which holds the connection's state only to store
    /// what it opened.
    fn open_express(&self, generation: u64) {
        let target = match &*lock(&self.shared.current) {
            Some(current) if current.generation == generation => current.express.clone(),
            _ => None,
        };
        let run_id = self.facts().map(|facts| facts.run_id.clone());
        let (Some(target), Some(run_id)) = (target, run_id) else {
            return;
        };
        let shared = Arc::downgrade(&self.shared);
        let timeout = self.shared.connect_timeout;
        // On this request's runtime, the main connection's (see `express`).
        tokio::spawn(async move {
            let opened = express::Lane::open(&target, generation, &run_id, timeout).await;
            if let Some(express) = shared.upgrade().as_ref().and_then(|s| s.express.as_ref()) {
                express.opened(opened);
            }
        });
    }

    /// Ends a request on the express connection `lent`: gives it back if
    /// the request read its replies (else it closes), and drops the main
    /// connection if `result` shows the server gone or demoted.
    fn settle<T>(
        &self,
        lent: Lent<'_>,
        result: &RedisResult<T>,
        outcome_of: impl FnOnce(&T) -> Outcome,
    ) {
        let generation = lent.generation();
        let outcome = match result {
            Ok(replies) => {
                lent.done();
                outcome_of(replies)
            }
            Err(e) => Outcome::of_error(e),
        };
        self.check(generation, outcome);
    }

    /// Sends `cmd` and reads its reply, dropping the connection if the
    /// reply shows the server gone or demoted.
    pub(crate) async fn send(&self, cmd: &Cmd) -> RedisResult<Value> {
        if let Some(mut lent) = self.express() {
            let result = lent.lane().send(cmd).await;
            self.settle(lent, &result, Outcome::of_value);
            return result;
        }
        let mut current = self.current().await?;
        // The connection's own method, not `ConnectionLike`'s, which boxes
        // its future: one allocation less per request.
        let result = current.conn.send_packed_command(cmd).await;
        let outcome = match &result {
            Ok(value) => Outcome::of_value(value),
            Err(e) => Outcome::of_error(e),
        };
        self.check(current.generation, outcome);
        result
    }

    /// [`send`](Self::send) for commands `offset..offset + count` of a
    /// pipeline.
    pub(crate) async fn send_pipeline(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let express = match pipeline.is_transaction() {
            false => self.express(),
            // EXEC's reply gathers the others': the main connection's work.
            true => None,
        };
        if let Some(mut lent) = express {
            let result = lent.lane().pipeline(pipeline, offset, count).await;
            self.settle(lent, &result, |values| Outcome::of_values(values));
            return result;
        }
        let mut current = self.current().await?;
        let result = current
            .conn
            .send_packed_commands(pipeline, offset, count)
            .await;
        let outcome = match &result {
            Ok(values) => Outcome::of_values(values),
            Err(e) => Outcome::of_error(e),
        };
        self.check(current.generation, outcome);
        result
    }

    pub(crate) fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.send(cmd))
    }

    pub(crate) fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.send_pipeline(pipeline, offset, count))
    }
}

/// Asks the server who it is: `INFO server` (run_id, uptime) and `TIME`,
/// in one round trip; also whether it has `DELIFEQ` (by its
/// [`Capabilities`]).
pub(crate) async fn handshake(
    conn: &mut MultiplexedConnection,
) -> RedisResult<(ServerFacts, bool)> {
    let mut pipe = redis::pipe();
    pipe.cmd("INFO").arg("server").cmd("TIME");
    let sent = Instant::now();
    let (info, (secs, micros)): (String, (u64, u64)) = pipe.query_async(conn).await?;
    let received = Instant::now();
    let clock = ClockSample::new(sent, received, secs, micros);
    let facts = parse_info_server(&info, received, Some(clock)).map_err(|why| {
        RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "the server did not say who it is",
            why,
        ))
    })?;
    let delifeq = Capabilities::from_info(&info).is_some_and(|c| c.delifeq());
    Ok((facts, delifeq))
}

/// Follows the sentinels' `+switch-master` announcements (from the first
/// sentinel that answers) and drops the connection to the primary when
/// `url`'s service moved, so the next request asks the sentinels again.
/// Ends when the connection it serves is gone.
async fn watch_switches(
    shared: std::sync::Weak<Shared>,
    target: SentinelTarget,
    timeout: Duration,
) {
    use futures_util::StreamExt;
    let url = &target.url;
    let switches = &target.switches;
    for sentinel in url.sentinels.iter().cycle() {
        if shared.strong_count() == 0 {
            return;
        }
        let pubsub = async {
            let mut pubsub = target.sentinel_client(sentinel)?.get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
            Ok::<_, RedisError>(pubsub)
        };
        let mut pubsub = match tokio::time::timeout(timeout, pubsub).await {
            Ok(Ok(pubsub)) => pubsub,
            _ => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let mut messages = pubsub.on_message();
        loop {
            let message = tokio::select! {
                m = messages.next() => m,
                // Look now and then whether anyone still needs this.
                () = tokio::time::sleep(Duration::from_secs(1)) => {
                    if shared.strong_count() == 0 {
                        return;
                    }
                    continue;
                }
            };
            let Some(message) = message else { break };
            let payload: String = message.get_payload().unwrap_or_default();
            if payload.split(' ').next() == Some(url.service.as_str()) {
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                let mut slot = lock(&shared.current);
                if slot.take().is_some() {
                    tracing::info!(switch = %payload, "the sentinels moved the primary");
                }
                switches.send_modify(|n| *n += 1);
            }
        }
    }
}

/// What a reply says about the connection to the sentinels' primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Fine,
    /// The server answered `READONLY`: a failover made it a replica.
    Demoted,
    /// The connection broke.
    Broken,
}

impl Outcome {
    fn of_error(e: &RedisError) -> Outcome {
        if server_error::code_of(e) == Some(ServerErrorCode::ReadOnly) {
            Outcome::Demoted
        } else if e.is_connection_dropped() || e.is_io_error() || e.is_connection_refusal() {
            Outcome::Broken
        } else {
            Outcome::Fine
        }
    }

    /// Error replies come back as values; a script's `READONLY` is read
    /// out of its wrapper (see `server_error`).
    fn of_value(value: &Value) -> Outcome {
        match value {
            Value::ServerError(e) if ErrorReply::of_value(e).code == ServerErrorCode::ReadOnly => {
                Outcome::Demoted
            }
            _ => Outcome::Fine,
        }
    }

    /// The first of `values`' outcomes that is not fine.
    fn of_values(values: &[Value]) -> Outcome {
        values
            .iter()
            .map(Outcome::of_value)
            .find(|o| *o != Outcome::Fine)
            .unwrap_or(Outcome::Fine)
    }
}

#[cfg(test)]
mod tests;
