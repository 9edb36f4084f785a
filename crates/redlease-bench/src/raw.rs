//! The two baselines, sent with plain redis-rs over one multiplexed
//! connection per node shared by all workers (for a node that is a Redis
//! Cluster, one redis-rs cluster connection), waiting for every node. They
//! are what a lock costs with no library at all: no timeouts, no quorum
//! early exit, no undo on faults, no drop guards, no release notifications
//! (a busy lock is polled with the same delays).
//!
//! - **raw**: the library's own Redis commands with its default settings
//!   (fencing off): `SET key token NX PX ttl GET` pipelined with
//!   `PEXPIRETIME key` (the clock guard's reading; not on a cluster), on a
//!   refusal its follow-up script (`PTTL` and `PUBSUB NUMSUB` of the
//!   release channel; it marks no holder here, as the library marks only a
//!   holder of another Locker and the raw workers share one tag), and its
//!   release script with the same key and arguments (a 48-hex-char token
//!   that begins with the tag), or, where the server has it (Valkey 9 and
//!   later, told by `INFO server` as the library tells it), `DELIFEQ` with
//!   the key and the token. Its ratio shows what the library's client side
//!   costs on top of its commands.
//! - **plain**: the leanest lock there is, as the lightest peers send it:
//!   `SET key token NX PX ttl` to take, a compare-and-delete script
//!   (`EVALSHA`) to give back; no fencing token, no notification, no
//!   holder's TTL on a refusal. Its server CPU is the floor the library's
//!   extras are measured against.
//!
//! The raw argument layout mirrors `crates/redlease/src/node.rs`; if the
//! library changes it, the scripts fail here with a Redis error and the
//! run stops, rather than measuring something else.

use std::sync::LazyLock;
use std::time::Instant;

use futures_util::future::join_all;
use rand::Rng;
use redis::Script;

use crate::client::{key_for, BenchError, LockClient, RETRY_MAX, RETRY_MIN, TTL, WAIT};
use crate::conn::NodeConn;

// Read from the library's sources, so the baseline sends byte-for-byte the
// script the library sends (and the same EVALSHA digest).
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_CODE));
/// The library's follow-up to a refused acquire (marks a holder of another
/// Locker; the raw workers share one tag, so none is ever marked here).
static REFUSED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(include_str!(
        "../../redlease/src/protocol/scripts/refused.lua"
    ))
});
/// The release as the library sends it: its common case, the engine's
/// preludes, then the release script.
const RELEASE_CODE: &str = concat!(
    include_str!("../../redlease/src/protocol/scripts/release_alone.lua"),
    include_str!("../../redlease/src/protocol/scripts/owner.lua"),
    include_str!("../../redlease/src/protocol/scripts/engine.lua"),
    include_str!("../../redlease/src/protocol/scripts/release.lua")
);
/// The plain baseline's release: delete only our own token.
pub(crate) static COMPARE_AND_DELETE: LazyLock<Script> =
    LazyLock::new(|| Script::new(COMPARE_AND_DELETE_CODE));
/// Its code, for what sends it otherwise (redis-benchmark, `floor.rs`).
pub(crate) const COMPARE_AND_DELETE_CODE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
           return redis.call('DEL', KEYS[1]) \
         end \
         return 0";

/// Which commands a baseline sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// The library's scripts.
    Raw,
    /// `SET NX PX` and compare-and-delete.
    Plain,
}

/// Plain redis-rs over one connection per node.
pub struct Raw {
    conns: Vec<NodeConn>,
    quorum: usize,
    ttl_ms: u64,
    flavor: Flavor,
    /// Begins every token, as a Locker's tag begins its tokens.
    tag: u64,
    /// Per node: whether raw releases with `DELIFEQ`, as the library does.
    delifeq: Vec<bool>,
}

/// A lock held through the raw baseline.
pub struct RawGuard {
    key: String,
    token: String,
}

impl Raw {
    /// Opens one connection per node (this does I/O): multiplexed, or a
    /// cluster connection for a `redis+cluster://` node.
    pub async fn connect(urls: &[String], flavor: Flavor) -> Result<Self, BenchError> {
        let mut conns = Vec::with_capacity(urls.len());
        let mut delifeq = Vec::with_capacity(urls.len());
        for url in urls {
            let mut conn = NodeConn::connect(url).await?;
            let native = if conn.is_cluster() {
                false
            } else {
                let info: String = redis::cmd("INFO")
                    .arg("server")
                    .query_async(&mut conn)
                    .await?;
                redlease::Capabilities::from_info(&info).is_some_and(|c| c.delifeq())
            };
            conns.push(conn);
            delifeq.push(native);
        }
        Ok(Raw {
            quorum: conns.len() / 2 + 1,
            conns,
            ttl_ms: u64::try_from(TTL.as_millis())?,
            flavor,
            tag: rand::rng().random(),
            delifeq,
        })
    }

    /// Deletes the key on the given nodes if it still holds `token` (the
    /// script also publishes the release); returns how many nodes deleted
    /// it. Waits for every node.
    async fn release_on(
        &self,
        nodes: impl Iterator<Item = usize>,
        key: &str,
        token: &str,
    ) -> Result<usize, BenchError> {
        let replies = join_all(nodes.map(|i| {
            let mut conn = self.conns[i].clone();
            let native = self.delifeq[i];
            async move {
                match self.flavor {
                    Flavor::Raw => {
                        if native {
                            let deleted: i64 = redis::cmd("DELIFEQ")
                                .arg(key)
                                .arg(token)
                                .query_async(&mut conn)
                                .await?;
                            if deleted == 1 {
                                return Ok(1);
                            }
                        }
                        // One name held alone, announced, nobody put in
                        // line, as the library's release of a plain lock.
                        let (publish, numsub) = match conn.is_cluster() {
                            true => ("SPUBLISH", "SHARDNUMSUB"),
                            false => ("PUBLISH", "NUMSUB"),
                        };
                        let released: String = RELEASE
                            .key(key)
                            .arg(token)
                            .arg(0)
                            .arg(publish)
                            .arg(numsub)
                            .arg(1)
                            .arg(1)
                            .arg("w")
                            .arg("")
                            .arg(0)
                            .arg(0)
                            .arg(3_600_000)
                            .invoke_async(&mut conn)
                            .await?;
                        Ok(i64::from(released == "1"))
                    }
                    Flavor::Plain => {
                        COMPARE_AND_DELETE
                            .key(key)
                            .arg(token)
                            .invoke_async::<i64>(&mut conn)
                            .await
                    }
                }
            }
        }))
        .await;
        let mut released = 0;
        for reply in replies {
            released += usize::from(reply? == 1);
        }
        Ok(released)
    }
}

/// A token as the library makes one: the tag, then 128 random bits, as 48
/// lowercase hex chars.
fn token(tag: u64) -> String {
    format!("{tag:016x}{:032x}", rand::rng().random::<u128>())
}

impl LockClient for Raw {
    type Guard = RawGuard;

    fn label(&self) -> &'static str {
        match self.flavor {
            Flavor::Raw => "raw",
            Flavor::Plain => "plain",
        }
    }

    async fn acquire(&self, name: &str) -> Result<RawGuard, BenchError> {
        let key = key_for(name);
        let deadline = Instant::now() + WAIT;
        // Bounded by the wait deadline, like the library's lock().
        loop {
            let token = token(self.tag);
            let replies = join_all(self.conns.iter().map(|conn| {
                let mut conn = conn.clone();
                let (key, token) = (&key, &token);
                async move {
                    match self.flavor {
                        Flavor::Raw => {
                            let mut pipe = redis::pipe();
                            pipe.cmd("SET")
                                .arg(key)
                                .arg(token)
                                .arg("NX")
                                .arg("PX")
                                .arg(self.ttl_ms)
                                .arg("GET");
                            if !conn.is_cluster() {
                                pipe.cmd("PEXPIRETIME").arg(key).ignore();
                            }
                            let (holder,): (Option<String>,) = pipe.query_async(&mut conn).await?;
                            if holder.is_some() {
                                // What the library asks a refusing node.
                                let _: (i64, i64) = REFUSED
                                    .key(key)
                                    .arg(format!("{:016x}", self.tag))
                                    .arg(conn.numsub_command())
                                    .arg("1") // raw waits after a refusal
                                    .invoke_async(&mut conn)
                                    .await?;
                            }
                            Ok(holder.is_none())
                        }
                        Flavor::Plain => redis::cmd("SET")
                            .arg(key)
                            .arg(token)
                            .arg("NX")
                            .arg("PX")
                            .arg(self.ttl_ms)
                            .query_async::<Option<String>>(&mut conn)
                            .await
                            .map(|ok| ok.is_some()),
                    }
                }
            }))
            .await;
            let mut taken = Vec::with_capacity(replies.len());
            for (i, reply) in replies.into_iter().enumerate() {
                if reply? {
                    taken.push(i);
                }
            }
            if taken.len() >= self.quorum {
                return Ok(RawGuard { key, token });
            }
            if !taken.is_empty() {
                // A split vote: give back the minority we got, or the key
                // would block everyone until its TTL ends.
                self.release_on(taken.into_iter(), &key, &token).await?;
            }
            if Instant::now() >= deadline {
                return Err(format!("raw: {key} still busy after {WAIT:?}").into());
            }
            let spread = (RETRY_MAX - RETRY_MIN).mul_f64(rand::rng().random::<f64>());
            tokio::time::sleep(RETRY_MIN + spread).await;
        }
    }

    async fn release(&self, guard: RawGuard) -> Result<(), BenchError> {
        let all = 0..self.conns.len();
        let released = self.release_on(all, &guard.key, &guard.token).await?;
        if released < self.quorum {
            return Err(format!(
                "raw: {} released on only {released} of {} nodes: the lock was lost",
                guard.key,
                self.conns.len()
            )
            .into());
        }
        Ok(())
    }
}
