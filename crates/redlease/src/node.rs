//! One Redis deployment: its connection, the lock scripts, and mapping
//! redis-rs errors to [`NodeError`]s. Every request here has a timeout.

use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{Client, Cmd, ConnectionAddr, FromRedisValue, RedisError, Value};

use crate::compare_delete;
use crate::deadline::Deadlines;
use crate::deployment::{Conn, Deployment, Lua};
use crate::error::{NodeError, NodeErrorKind, NodeId};
use crate::keys::{hash_slot, release_channel, LockKeys};
use crate::lock_status::{KeyState, NodeLockState, NodeQuarantine};
use crate::node_url::{redact_url, NodeUrl};
use crate::shard_conn;
use crate::telemetry;
use crate::tls::TlsConfig;
use crate::token::{LockerTag, Token};
use crate::validity::DriftModel;
use crate::vote_guard::{ClockSample, ServerFacts, ServerRegistry, VoteGuard};
use crate::Error;

// EVALSHA first, SCRIPT LOAD and retry on NOSCRIPT (after a restart or
// SCRIPT FLUSH): `Conn::eval` does both, so NOSCRIPT never surfaces.
static ACQUIRE: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("scripts/acquire.lua")));
// Release goes as EVALSHA once this client has seen the node run it, and
// whole (EVAL) before: a whole script is one command, never a NOSCRIPT
// round trip, so it is on the wire as soon as it is first polled, and
// this client's next request to the node (say, acquiring the lock again
// right after releasing it) queues behind it even when `release` returned
// at the quorum. EVALSHA spares Redis hashing the text on every release
// (about half the release's cost); after a server lost its scripts (a
// restart, SCRIPT FLUSH) the first one is retried whole, which may then
// run after that next request: a delay, not an error.
static RELEASE: LazyLock<Lua> = LazyLock::new(|| Lua::new(RELEASE_CODE));
const RELEASE_CODE: &str = include_str!("scripts/release.lua");
// On a cluster the release is announced on the lock's shard channel: the
// same script with SPUBLISH (a separate script, so that no release carries
// the command's name as an argument). Built once per process.
static RELEASE_SHARDED: LazyLock<Lua> = LazyLock::new(|| {
    let code = RELEASE_CODE.replace("'PUBLISH'", "'SPUBLISH'");
    Lua::new(code.leak())
});
const FORCE_RELEASE: &str = include_str!("scripts/force_release.lua");
static RAISE_FENCE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/raise_fence.lua")));
static REFUSED: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("scripts/refused.lua")));
static EXTEND: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("scripts/extend.lua")));

/// The library's script with this SHA1, by its name in messages, and its
/// text: an ACL refusal inside a script names only the script's SHA1 and
/// line (see `error.rs`).
pub(crate) fn script_by_hash(sha: &str) -> Option<(&'static str, &'static str)> {
    static FORCE: LazyLock<Lua> = LazyLock::new(|| Lua::new(FORCE_RELEASE));
    let scripts: [(&str, &Lua); 8] = [
        ("acquire", &ACQUIRE),
        ("release", &RELEASE),
        ("release", &RELEASE_SHARDED),
        ("force-release", &FORCE),
        ("fencing write-back", &RAISE_FENCE),
        ("refused-acquire follow-up", &REFUSED),
        ("extend", &EXTEND),
        ("renewal", &crate::lane::EXTEND_MANY),
    ];
    scripts
        .into_iter()
        .find(|(_, lua)| lua.hash().eq_ignore_ascii_case(sha))
        .map(|(name, lua)| (name, lua.code()))
}

/// The text of the library's script named `name` (tests of the messages
/// that name a script's commands).
#[cfg(test)]
pub(crate) fn script_by_hash_for_tests(name: &str) -> &'static str {
    match name {
        "acquire" => ACQUIRE.code(),
        other => panic!("no script {other}"),
    }
}

/// What the plain acquire's round trips (see [`Node::acquire`]) came to.
enum Plain {
    /// Taken, with the new key's expiry when the clock guard asked for it.
    Taken(Option<u64>),
    /// Refused, with the follow-up's details and the holder's fingerprint.
    Held(crate::set_nx::Refusal, u32),
    /// The server does not know `SET ... NX GET`: nothing was written.
    Unsupported,
}

/// A node's answer to an acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// Taken by us, with this node's fencing number (when one was drawn)
    /// and, with durability on, how many replicas acknowledged it.
    Acquired(Option<u64>, Option<u32>),
    /// Held by another owner, who has this long left (`None`: no expiry),
    /// with how many processes (subscriptions) wait for its release there,
    /// and a fingerprint of the owner (see acquire.lua).
    Held(Option<Duration>, u64, u32),
}

/// What a refused acquire does to the holder's value: mark it for waiters
/// (crate docs, "A release is published only when another Locker waits")
/// or leave it alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnRefusal {
    /// The acquire waits for the lock after a refusal: a holder of another
    /// Locker is marked, so that its release is published to the waiter.
    Mark,
    /// The acquire gives up after a refusal (`try_lock`, the last attempt
    /// of a bounded wait): nobody will listen for the release, so the
    /// holder is left as it is and its release publishes nothing.
    LeaveAlone,
}

impl OnRefusal {
    /// The scripts' argument: `"1"` to mark.
    fn flag(self) -> &'static str {
        match self {
            OnRefusal::Mark => "1",
            OnRefusal::LeaveAlone => "0",
        }
    }
}

/// Connection settings shared by all nodes of a Locker.
#[derive(Clone, Debug)]
pub(crate) struct ConnectSettings {
    /// The Locker's tag: a refusal by a lock holding one of its tokens
    /// marks nothing (see [`Node::acquire`]).
    pub(crate) tag: LockerTag,
    pub(crate) connect_timeout: Duration,
    /// `WAIT` after every write of a lease.
    pub(crate) durability: crate::Durability,
    /// How long a server that started casts no "yes" (zero: off).
    pub(crate) quarantine: Duration,
    /// How long after its clock jumped (`None`: the clock is not watched).
    pub(crate) clock_suspension: Option<Duration>,
    pub(crate) drift: DriftModel,
    /// Which node reached which server first, shared by a Locker's nodes.
    pub(crate) registry: Arc<ServerRegistry>,
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
    claimed: std::sync::Mutex<Option<Arc<crate::vote_guard::ServerFacts>>>,
    /// Whether the server takes `SET ... NX GET` (Redis 7.0 and later):
    /// believed until it refuses it once.
    set_nx_get: std::sync::atomic::AtomicBool,
    /// Whether the release script is believed cached on the server, so it
    /// goes as `EVALSHA` (see [`Node::release`]).
    release_cached: std::sync::atomic::AtomicBool,
}

/// What the node's recent requests say about it: the backoff after a
/// refused connection and the requests it still owes. A cluster keeps this
/// per hash slot, so one dead or stalled shard does not hold up the
/// others' locks.
enum Health {
    Whole(Arc<ServerHealth>),
    PerSlot(std::sync::Mutex<std::collections::HashMap<u16, Arc<ServerHealth>>>),
}

#[derive(Default)]
struct ServerHealth {
    /// After a refused connection, requests fail at once until this
    /// instant, instead of each one trying to connect again.
    down: std::sync::Mutex<Backoff>,
    /// Whether `down` holds anything but the default: a healthy node's
    /// requests, every lock's, then skip its lock.
    troubled: std::sync::atomic::AtomicBool,
    /// Requests the client gave up on that the node has not answered yet.
    owed: Arc<Owed>,
}

impl ServerHealth {
    fn backoff(&self) -> std::sync::MutexGuard<'_, Backoff> {
        self.down.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The back-off's end and cause, while it lasts.
    /// `now` is called only while in trouble: a healthy node's requests
    /// do not read the clock here.
    fn backing_off(&self, now: impl FnOnce() -> std::time::Instant) -> Option<BackingOff> {
        if !self.troubled.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        let now = now();
        let b = self.backoff();
        b.until
            .filter(|&until| now < until)
            .map(|until| (until, b.cause.clone()))
    }

    /// A connection failed (with `cause`, if known).
    fn failed(&self, cause: Option<Arc<RedisError>>) {
        let mut b = self.backoff();
        b.failed(std::time::Instant::now(), cause);
        self.troubled
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// The node answered: any back-off is over.
    fn answered(&self) {
        if self.troubled.load(std::sync::atomic::Ordering::Acquire) {
            let mut b = self.backoff();
            *b = Backoff::default();
            self.troubled
                .store(false, std::sync::atomic::Ordering::Release);
        }
    }
}

/// When a back-off ends, and why it started.
type BackingOff = (std::time::Instant, Option<Arc<RedisError>>);

/// Requests whose caller timed out but which are still queued on the
/// connection. While any is unanswered the node is not sent anything new:
/// it would only queue behind them, time out as well and pile more work on
/// a node that is already behind (congestion collapse). The oldest owed
/// request is the probe: once the node answers it, requests flow again.
#[derive(Default)]
struct Owed {
    /// How many are owed, readable without the lock (almost always zero);
    /// changed only under `since`'s lock, so the two agree.
    count: std::sync::atomic::AtomicUsize,
    /// Since when requests have been owed, while any is.
    since: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Owed {
    /// How many are owed and since when, if any.
    fn pending(&self) -> Option<(usize, std::time::Instant)> {
        use std::sync::atomic::Ordering;
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        let since = self.lock();
        since.map(|since| (self.count.load(Ordering::Acquire), since))
    }

    fn add(&self) {
        let mut since = self.lock();
        self.count
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        since.get_or_insert_with(std::time::Instant::now);
    }

    fn paid(&self) {
        use std::sync::atomic::Ordering;
        let mut since = self.lock();
        let left = self.count.load(Ordering::Acquire).saturating_sub(1);
        self.count.store(left, Ordering::Release);
        if left == 0 {
            *since = None;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<std::time::Instant>> {
        self.since.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Keeps waiting, in the background, for a request its caller gave up on,
/// and counts it as owed until the node answers it (or it is written off).
fn owe<T: Send + 'static>(owed: &Arc<Owed>, request: Request<T>, timeout: Duration) {
    let owed = owed.clone();
    owed.add();
    tokio::spawn(async move {
        let _ = tokio::time::timeout(write_off_after(timeout), request).await;
        owed.paid();
    });
}

/// How long a request given up on is still waited for before it is
/// written off (the connection is then presumed dead, and new requests go
/// out again: at most one burst of given-up work per this period).
pub(crate) fn write_off_after(timeout: Duration) -> Duration {
    (8 * timeout).max(Duration::from_secs(2))
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
    /// A look at the server before any lock (`Locker::check_servers`):
    /// gated as new work, but a connection it cannot open starts no
    /// back-off, so the first lock request after it connects itself and
    /// says why it failed, rather than that a connection failed moments
    /// ago.
    Check,
}

type Request<T> = std::pin::Pin<Box<dyn Future<Output = Result<T, RedisError>> + Send>>;

/// How long requests to a node that refused a connection skip it.
#[derive(Clone, Debug, Default)]
struct Backoff {
    until: Option<std::time::Instant>,
    next: Duration,
    /// Why the last connection failed (NOAUTH, refused, ...): the errors
    /// of the back-off carry it, so they say more than "moments ago".
    cause: Option<Arc<redis::RedisError>>,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(50);
    const MAX: Duration = Duration::from_millis(250);

    fn failed(&mut self, now: std::time::Instant, cause: Option<Arc<redis::RedisError>>) {
        let wait = self.next.clamp(Self::FIRST, Self::MAX);
        self.until = Some(now + wait);
        self.next = wait * 2;
        self.cause = cause;
    }
}

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
            .main_connection(settings.connect_timeout, (settings.registry.clone(), index))
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

    /// The `PUBSUB` subcommand that counts a release channel's
    /// subscribers: sharded on a cluster, like the channel.
    fn numsub_command(&self) -> &'static str {
        if self.deployment.is_cluster() {
            "SHARDNUMSUB"
        } else {
            "NUMSUB"
        }
    }

    /// The command that announces a release: sharded on a cluster, so the
    /// message stays in the lock's shard.
    fn publish_command(&self) -> &'static str {
        if self.deployment.is_cluster() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        }
    }

    pub(crate) fn connect_timeout(&self) -> Duration {
        self.settings.connect_timeout
    }

    /// `SET key token NX PX ttl`, or the holder's remaining TTL. A "yes"
    /// from a server that may not vote (see [`VoteGuard`]) is an error: the
    /// key was written there, so a failed attempt still undoes it.
    ///
    /// `fenced`: also draw a fencing token. With it, or with durability on,
    /// or on a server older than Redis 7.0, this is the acquire script;
    /// otherwise plain commands (see [`set_nx`](crate::set_nx)).
    /// `on_refusal`: whether a refusal marks the holder for waiters.
    pub(crate) async fn acquire(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl_ms: u64,
        timeout: Duration,
        fenced: bool,
        on_refusal: OnRefusal,
    ) -> Result<AcquireReply, NodeError> {
        use std::sync::atomic::Ordering;
        let plain = !fenced
            && self.settings.durability.wait().is_none()
            && self.set_nx_get.load(Ordering::Relaxed);
        if plain {
            match self
                .acquire_plain(keys, token, ttl_ms, timeout, on_refusal)
                .await?
            {
                Some(reply) => return Ok(reply),
                // Nothing was written: the script does it the old way.
                None => self.set_nx_get.store(false, Ordering::Relaxed),
            }
        }
        // Boxed, so that the plain path's futures do not carry its state.
        Box::pin(self.acquire_scripted(keys, token, ttl_ms, timeout, fenced, on_refusal)).await
    }

    /// The acquire with plain commands; `None` if the server does not know
    /// `SET ... NX GET`.
    async fn acquire_plain(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl_ms: u64,
        timeout: Duration,
        on_refusal: OnRefusal,
    ) -> Result<Option<AcquireReply>, NodeError> {
        use crate::set_nx::{self, SetNx};
        let clock = self.watches_clock();
        let mut request = set_nx::request(&keys.lock, token.as_str(), ttl_ms, clock);
        // On a cluster: which shard's server voted (see `shard_conn`).
        let ask_shard = self.deployment.is_cluster();
        if ask_shard {
            request.add_command(shard_conn::which_shard());
        }
        let (key, numsub) = (keys.lock.clone(), self.numsub_command());
        let tag = self.settings.tag;
        let mut conn = self.conn.clone();
        let sent = std::time::Instant::now();
        // Both round trips under one timeout: the second only on a refusal.
        let exchange = Box::pin(async move {
            let mut replies = conn.query_pipeline(&request).await?;
            let received = std::time::Instant::now();
            let shard = match ask_shard {
                true => replies.pop().as_ref().and_then(shard_conn::facts_of),
                false => None,
            };
            let answer = match set_nx::parse(&replies, clock) {
                Ok(SetNx::Held { owner }) => {
                    // Marks a holder of another Locker for our waiters
                    // if we wait (see refused.lua).
                    let call = REFUSED.call(|c| {
                        c.arg(1)
                            .arg(&*key)
                            .arg(tag.as_str())
                            .arg(numsub)
                            .arg(on_refusal.flag());
                    });
                    let reply: Value = conn.eval(&REFUSED, &call).await?;
                    set_nx::parse_refusal(&reply).map(|refusal| Plain::Held(refusal, owner))
                }
                Ok(SetNx::Taken(expiry)) => Ok(Plain::Taken(expiry)),
                Ok(SetNx::Unsupported) => Ok(Plain::Unsupported),
                Err(reply) => Err(reply),
            };
            Ok((answer, received, shard))
        });
        let (answer, received, shard) = self
            .bounded(timeout, Gate::New, &keys.lock, exchange)
            .await?;
        let clock = match answer {
            Ok(Plain::Taken(expiry)) => {
                expiry.map(|expiry| ClockSample::from_expiry(sent, received, expiry, ttl_ms))
            }
            Ok(Plain::Held(refusal, owner)) => {
                let held = AcquireReply::Held(refusal.expires_in, refusal.waiting, owner);
                return self.judge_refusal(shard, held).map(Some);
            }
            Ok(Plain::Unsupported) => return Ok(None),
            Err(set_nx::Reply::Server { code, message }) => {
                return Err(self.error(NodeErrorKind::Redis { code, message }))
            }
            Err(set_nx::Reply::Shape(what)) => {
                return Err(self.error(NodeErrorKind::Protocol(what)))
            }
        };
        self.judge_grant(shard, clock, None, None).map(Some)
    }

    /// The acquire script: with a fencing token, durability, or on a
    /// server older than Redis 7.0.
    async fn acquire_scripted(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl_ms: u64,
        timeout: Duration,
        fenced: bool,
        on_refusal: OnRefusal,
    ) -> Result<AcquireReply, NodeError> {
        let watch_clock = self.watches_clock();
        let call = ACQUIRE.call(|c| {
            c.arg(2).arg(&*keys.lock).arg(keys.fence());
            c.arg(token.as_str())
                .arg(ttl_ms)
                .arg(keys.fence_expiry_ms)
                .arg(self.lineage_flag())
                .arg(if watch_clock { "1" } else { "0" })
                .arg(self.numsub_command())
                .arg(if fenced { "1" } else { "0" })
                .arg(self.settings.tag.as_str())
                .arg(on_refusal.flag());
        });
        let sent = std::time::Instant::now();
        let mut conn = self.conn.clone();
        let durability = self.settings.durability;
        let request = Box::pin(async move { conn.eval_voted(&ACQUIRE, &call, durability).await });
        let (reply, replicas, shard): (Vec<i64>, _, _) = self
            .bounded(timeout, Gate::New, &keys.lock, request)
            .await?;
        // A "yes" carries the server's clock when asked for.
        let (acquired, value, clock, waiting, owner) = match reply[..] {
            [0, pttl, waiting, owner] => (0, pttl, None, waiting.max(0) as u64, owner as u32),
            [1, v] if !watch_clock => (1, v, None, 0, 0),
            [1, v, secs, micros] if watch_clock && secs >= 0 && micros >= 0 => {
                let received = std::time::Instant::now();
                let clock = ClockSample::new(sent, received, secs as u64, micros as u64);
                (1, v, Some(clock), 0, 0)
            }
            _ => {
                return Err(self.error(NodeErrorKind::Protocol(format!(
                    "acquire script returned {reply:?}"
                ))))
            }
        };
        match (acquired, value) {
            (1, fence) if fence > 0 && fenced => {
                self.judge_grant(shard, clock, Some(fence as u64), replicas)
            }
            (1, 0) if !fenced => self.judge_grant(shard, clock, None, replicas),
            (0, pttl) if pttl >= 0 => self.judge_refusal(
                shard,
                AcquireReply::Held(Some(Duration::from_millis(pttl as u64)), waiting, owner),
            ),
            (0, -1) => self.judge_refusal(shard, AcquireReply::Held(None, waiting, owner)),
            other => Err(self.error(NodeErrorKind::Protocol(format!(
                "acquire script returned {other:?}"
            )))),
        }
    }

    /// A "yes", unless this server may not vote (see [`VoteGuard`]) or
    /// too few replicas acknowledged it: then an error (the key was
    /// written, so a failed attempt still undoes it).
    fn judge_grant(
        &self,
        shard: Option<Arc<ServerFacts>>,
        clock: Option<ClockSample>,
        fence: Option<u64>,
        replicas: Option<u32>,
    ) -> Result<AcquireReply, NodeError> {
        if let Some(kind) = self.objection(shard, clock) {
            return Err(self.error(kind));
        }
        self.replicated(replicas)?;
        Ok(AcquireReply::Acquired(fence, replicas))
    }

    /// A "no" counts, except from a node that is another node's server:
    /// its answer is that node's.
    fn judge_refusal(
        &self,
        shard: Option<Arc<ServerFacts>>,
        held: AcquireReply,
    ) -> Result<AcquireReply, NodeError> {
        match self.objection(shard, None) {
            Some(kind @ NodeErrorKind::SameServer { .. }) => Err(self.error(kind)),
            _ => Ok(held),
        }
    }

    /// Raises the fencing counter to at least `fence`.
    pub(crate) async fn raise_fence(
        &self,
        keys: &LockKeys,
        fence: u64,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        let fence_key = keys.fence();
        let call = RAISE_FENCE.call(|c| {
            c.arg(1)
                .arg(&fence_key)
                .arg(fence)
                .arg(keys.fence_expiry_ms);
        });
        let (n, _) = self
            .run(&RAISE_FENCE, call, timeout, Gate::New, &fence_key)
            .await?;
        self.as_flag(n, "raise-fence")
    }

    /// Deletes the key if it holds `token` and, if `announce` and another
    /// Locker's waiter marked the lock, announces it on the lock's release
    /// channel with [`ReleaseId::of`] the token; `Ok(false)` if the key
    /// does not hold `token`. Where the server has `DELIFEQ`, that goes
    /// first, and the script only if the key did not hold exactly `token`
    /// (see `compare_delete`).
    pub(crate) async fn release(
        &self,
        key: &Arc<str>,
        token: &Token,
        announce: bool,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        use std::sync::atomic::Ordering;
        let script: &'static Lua = if self.deployment.is_cluster() {
            &RELEASE_SHARDED
        } else {
            &RELEASE
        };
        let cached = self.release_cached.load(Ordering::Relaxed);
        let mut conn = self.conn.clone();
        // A durable lock's value always has its lineage after the token.
        let native = !self.binds_lineage() && conn.has_delifeq();
        // The reply, and whether the script ran (so is cached there now).
        let request: Request<(i64, bool)> = if native {
            let delifeq = compare_delete::delifeq(key, token.as_str());
            let (key, token) = (key.clone(), token.clone());
            Box::pin(async move {
                match conn.query::<i64>(&delifeq).await {
                    // Not exactly our token: marked, bound, or not ours.
                    Ok(0) => {}
                    Ok(n) => return Ok((n, false)),
                    Err(e) => match compare_delete::failure(&e) {
                        compare_delete::Failure::NoAnswer => return Err(e),
                        compare_delete::Failure::Refused => conn.refuse_delifeq(),
                        compare_delete::Failure::Other => {}
                    },
                }
                let call = release_call(script, &key, &token, announce);
                let n = release_by_script(&mut conn, script, &call, cached).await?;
                Ok((n, true))
            })
        } else {
            let call = release_call(script, key, token, announce);
            Box::pin(async move {
                let n = release_by_script(&mut conn, script, &call, cached).await?;
                Ok((n, true))
            })
        };
        let (n, scripted) = self.bounded(timeout, Gate::Cleanup, key, request).await?;
        if scripted {
            self.release_cached.store(true, Ordering::Relaxed);
        }
        self.as_flag(n, "release")
    }

    /// Deletes the lock key whatever it holds, and announces it on the
    /// lock's release channel; `Ok(false)` if there was no key.
    pub(crate) async fn force_release(
        &self,
        key: &str,
        release_id: &str,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(FORCE_RELEASE)
            .arg(1)
            .arg(key)
            .arg(release_channel(key))
            .arg(release_id)
            .arg(self.publish_command());
        self.cleanup(cmd, timeout, key, "force-release").await
    }

    /// Sends a whole `EVAL` that deletes (past the owed-request gate: see
    /// [`Gate::Cleanup`]) and answers 1 or 0.
    async fn cleanup(
        &self,
        cmd: redis::Cmd,
        timeout: Duration,
        key: &str,
        what: &str,
    ) -> Result<bool, NodeError> {
        let mut conn = self.conn.clone();
        let request = Box::pin(async move { cmd.query_async(&mut conn).await });
        let n = self.bounded(timeout, Gate::Cleanup, key, request).await?;
        self.as_flag(n, what)
    }

    /// What this node holds of a lock: the key's TTL (never its value, the
    /// holder's token), the fencing counter, and the subscribers of its
    /// release channel.
    pub(crate) async fn inspect(
        &self,
        keys: &LockKeys,
        timeout: Duration,
    ) -> Result<NodeLockState, NodeError> {
        let mut pipe = redis::pipe();
        pipe.cmd("PTTL")
            .arg(&*keys.lock)
            .cmd("GET")
            .arg(keys.fence())
            .cmd("PUBSUB")
            .arg(self.numsub_command())
            .arg(release_channel(&keys.lock));
        let cluster = self.deployment.is_cluster();
        if cluster {
            // Which shard answered, for its quarantine (see `shard_conn`).
            pipe.add_command(shard_conn::which_shard());
        }
        let mut conn = self.conn.clone();
        let request = Box::pin(async move { pipe.query_async(&mut conn).await });
        let mut replies: Vec<Value> = self
            .bounded(timeout, Gate::New, &keys.lock, request)
            .await?;
        let shard = match cluster {
            true => replies.pop().as_ref().and_then(shard_conn::facts_of),
            false => self.conn.server_facts(),
        };
        let (pttl, fence, subscribers): (i64, Option<String>, Vec<(String, u64)>) =
            redis::from_redis_value(Value::Array(replies))
                .map_err(|e| self.error(NodeErrorKind::Protocol(format!("inspect replied {e}"))))?;
        let key = match pttl {
            -2 => KeyState::Free,
            -1 => KeyState::Held { expires_in: None },
            ms if ms >= 0 => KeyState::Held {
                expires_in: Some(Duration::from_millis(ms as u64)),
            },
            other => {
                return Err(self.error(NodeErrorKind::Protocol(format!("PTTL returned {other}"))))
            }
        };
        let fencing_counter = match fence {
            None => None,
            Some(text) => Some(text.parse().map_err(|_| {
                self.error(NodeErrorKind::Protocol(format!(
                    "the fencing counter {} is not a number",
                    keys.fence()
                )))
            })?),
        };
        Ok(NodeLockState {
            key,
            fencing_counter,
            waiting: subscribers.iter().map(|(_, n)| n).sum(),
            quarantine: shard.and_then(|facts| self.quarantine(&facts)),
        })
    }

    /// Whether the server `facts` describes (the main connection's, or on
    /// a cluster the lock's shard's) is quarantined now, as the guard
    /// tells (no I/O).
    fn quarantine(&self, facts: &ServerFacts) -> Option<NodeQuarantine> {
        let (cause, left) = self.guard.quarantine(facts, std::time::Instant::now())?;
        Some(NodeQuarantine::new(cause, left))
    }

    /// Sets a new TTL if the key holds `token`; `Ok(false)` if it does not.
    pub(crate) async fn extend(
        &self,
        key: &str,
        token: &Token,
        ttl_ms: u64,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        let call = EXTEND.call(|c| {
            c.arg(1)
                .arg(key)
                .arg(token.as_str())
                .arg(ttl_ms)
                .arg(self.lineage_flag());
        });
        let (n, replicas) = self.run(&EXTEND, call, timeout, Gate::New, key).await?;
        let extended = self.as_flag(n, "extend")?;
        if extended {
            self.replicated(replicas)?;
        }
        Ok(extended)
    }

    /// Whether acquire replies carry the server's clock: with the guard
    /// on (a cluster's replies say which shard's server sent them).
    fn watches_clock(&self) -> bool {
        self.settings.clock_suspension.is_some()
    }

    /// Why the server that sent the reply being judged may not vote "yes"
    /// now, if it may not: the same server as another node, restarted or
    /// with a jumped clock. That server is the main connection's, or on a
    /// cluster `shard`, the one the reply's shard connection reached
    /// (`None` there: that connection is gone, and the vote cannot be
    /// judged). `clock` is a reading from the reply.
    fn objection(
        &self,
        shard: Option<Arc<ServerFacts>>,
        clock: Option<ClockSample>,
    ) -> Option<NodeErrorKind> {
        let facts = match self.deployment.is_cluster() {
            true => match shard {
                Some(facts) => facts,
                None => {
                    return Some(NodeErrorKind::Connection(
                        "the shard connection that carried the vote closed before it was \
                         judged; it is not counted"
                            .to_string(),
                    ))
                }
            },
            false => self.conn.server_facts()?,
        };
        let mut claimed = self.claimed.lock().unwrap_or_else(|p| p.into_inner());
        if !claimed.as_ref().is_some_and(|c| Arc::ptr_eq(c, &facts)) {
            if let Err(same_as) = self.settings.registry.claim(&facts.run_id, self.id.index()) {
                return Some(NodeErrorKind::SameServer { same_as });
            }
            *claimed = Some(facts.clone());
        }
        drop(claimed);
        // The reply's arrival stands for now: a few microseconds earlier,
        // so a quarantine is judged, if anything, a little longer.
        let now = clock.map_or_else(std::time::Instant::now, |c| c.received);
        self.guard.objection(&facts, clock, now)
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

    fn as_flag(&self, n: i64, what: &str) -> Result<bool, NodeError> {
        match n {
            1 => Ok(true),
            0 => Ok(false),
            n => Err(self.error(NodeErrorKind::Protocol(format!(
                "{what} script returned {n}"
            )))),
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

    /// `"1"` when durability is on: the scripts bind a lock to the
    /// replication lineage (`master_replid`) of the server that took it,
    /// so a lease whose primary changed (a promoted replica, a restart that
    /// lost the data) is not ours there and is reported lost.
    pub(crate) fn lineage_flag(&self) -> &'static str {
        if self.binds_lineage() {
            "1"
        } else {
            "0"
        }
    }

    /// Whether this node's locks hold `token|lineage` (see
    /// [`lineage_flag`](Self::lineage_flag)) rather than the bare token.
    fn binds_lineage(&self) -> bool {
        self.settings.durability.wait().is_some()
    }

    /// The durability setting, for the renewal lanes.
    pub(crate) fn durability(&self) -> crate::Durability {
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
    /// its code and message, and a timeout by its duration.
    pub(crate) fn redis_error(&self, e: RedisError, timeout: Duration) -> NodeError {
        if let Some(code) = e.code() {
            // A pipeline's error (a connection's INFO and TIME, inspect's
            // reads) has no detail of its own: its first failed command's.
            let message = match e.detail() {
                Some(detail) => detail.to_string(),
                None => e
                    .clone()
                    .into_server_errors()
                    .and_then(|errors| {
                        let (_, first) = errors.first()?;
                        Some(first.details().unwrap_or_default().to_string())
                    })
                    .unwrap_or_default(),
            };
            return self.error(NodeErrorKind::Redis {
                code: code.to_string(),
                message,
            });
        }
        if let Some(why) = crate::tls::WrongScheme::find(&e) {
            return self.error(NodeErrorKind::WrongScheme(why)).caused_by(e);
        }
        if e.is_timeout() {
            return self.error(NodeErrorKind::Timeout(timeout));
        }
        if let Some(why) = tls_failure(&e) {
            return self.error(NodeErrorKind::Tls(why)).caused_by(e);
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
    let Some((slot, addr)) = message.trim().split_once(' ') else {
        return kind;
    };
    if slot.parse::<u16>().is_err() || addr.is_empty() || addr.contains(' ') {
        return kind;
    }
    match code.as_str() {
        "MOVED" => NodeErrorKind::Connection(format!(
            "the primary {addr} of slot {slot} does not answer (the cluster still names it: \
             MOVED; a failover may be under way)"
        )),
        "ASK" => NodeErrorKind::Connection(format!(
            "slot {slot} is moving to {addr}, which does not answer (ASK)"
        )),
        _ => kind,
    }
}

/// `host:port`, plus `/db` when not 0; never the credentials.
/// The TLS library's words, if `e` is a failed TLS handshake: the
/// innermost cause that speaks of certificates, a handshake or TLS (redis-rs
/// reports the failure as an I/O error around the TLS library's).
fn tls_failure(e: &RedisError) -> Option<String> {
    let mut innermost = None;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        let text = c.to_string();
        let lower = text.to_lowercase();
        if lower.contains("certificate") || lower.contains("handshake") || lower.contains("tls") {
            innermost = Some(text);
        }
        cause = c.source();
    }
    innermost
}

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

/// The release script's call: `EVALSHA`, its hash, 1, the key, the token,
/// and, if `!announce`, a byte that asks for no announcement.
fn release_call(script: &Lua, key: &str, token: &Token, announce: bool) -> Cmd {
    let bytes = 7 + 40 + 1 + key.len() + token.as_str().len() + 1;
    script.call_sized(5, bytes, |c| {
        c.arg(1).arg(key).arg(token.as_str());
        if !announce {
            c.arg(0);
        }
    })
}

/// Runs the release script's `call`: by its hash once it is believed
/// `cached` on the server, else whole, which caches it there.
async fn release_by_script(
    conn: &mut Conn,
    script: &Lua,
    call: &Cmd,
    cached: bool,
) -> Result<i64, RedisError> {
    if cached {
        conn.eval(script, call).await
    } else {
        script.whole(call).query_async(conn).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redirection_given_up_on_says_which_primary_does_not_answer() {
        let moved = NodeErrorKind::Redis {
            code: "MOVED".into(),
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
            code: "ASK".into(),
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
                code: code.into(),
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
