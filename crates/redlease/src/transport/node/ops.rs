//! A node's other lock requests: release, extend, and the operator's
//! inspect and force release.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, RedisError, Value};

use crate::core::keys::{release_channel, LockKeys};
use crate::core::lock_status::{KeyState, NodeLockState, NodeQuarantine};
use crate::core::mode::LockMode;
use crate::core::node_error::{NodeError, NodeErrorKind};
use crate::core::token::Token;
use crate::core::vote_guard::ServerFacts;
use crate::protocol::acquire::Look;
use crate::protocol::compare_delete;
use crate::protocol::lease::{
    ExtendReply, ExtendRequest, ForceReleaseReply, ForceReleaseRequest, ReleaseReply,
    ReleaseRequest,
};
use crate::protocol::lua::{Lua, EXTEND, READ_INSPECT};
use crate::protocol::shared::{Mode, ReadInspectRequest, SharedState};
use crate::transport::deployment::Conn;
use crate::transport::shard_conn;

use super::{Gate, Node, Request};

impl Node {
    /// Deletes the key if it holds `token` and, if `announce` and another
    /// Locker's waiter marked the lock, announces it on the lock's release
    /// channel with [`ReleaseId::of`] the token; `Ok(false)` if the key
    /// does not hold `token`. Where the server has `DELIFEQ`, that goes
    /// first, and the script only if the key did not hold exactly `token`
    /// (see `compare_delete`).
    ///
    /// `marked`: the value is known to be marked for waiters, so not
    /// exactly our token: the script goes first, not `DELIFEQ` (whose
    /// refusal would cost a round trip, and let a waiter woken in this
    /// process send its acquire before the script). `keep_turn`: for the
    /// cleanup of a waiter's attempt in turn, its place and ticket, which
    /// keep its turn (see release.lua).
    pub(crate) async fn release(
        &self,
        key: &Arc<str>,
        token: &Token,
        announce: bool,
        marked: bool,
        keep_turn: Option<&(Arc<str>, u64)>,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        use std::sync::atomic::Ordering;
        let request = ReleaseRequest {
            key,
            token: token.as_str(),
            announce,
            pubsub: self.pubsub(),
            keep_turn: keep_turn.map(|(p, t)| (&**p, *t)),
        };
        let script = request.script();
        let cached = self.release_cached.load(Ordering::Relaxed);
        let mut conn = self.conn.clone();
        // A durable lock's value always has its lineage after the token.
        let native = !marked && !self.binds_lineage() && conn.has_delifeq();
        // The reply, and whether the script ran (so is cached there now).
        let request: Request<(ReleaseReply, bool)> = if native {
            let delifeq = compare_delete::delifeq(key, token.as_str());
            let (key, token) = (key.clone(), token.clone());
            let (pubsub, keep_turn) = (request.pubsub, keep_turn.cloned());
            Box::pin(async move {
                match conn.query::<ReleaseReply>(&delifeq).await {
                    // Not exactly our token: marked, bound, or not ours.
                    Ok(ReleaseReply::NotOurs) => {}
                    Ok(released) => return Ok((released, false)),
                    Err(e) => match compare_delete::failure(&e) {
                        compare_delete::Failure::NoAnswer => return Err(e),
                        compare_delete::Failure::Refused => conn.refuse_delifeq(),
                        compare_delete::Failure::Other => {}
                    },
                }
                let call = ReleaseRequest {
                    key: &key,
                    token: token.as_str(),
                    announce,
                    pubsub,
                    keep_turn: keep_turn.as_ref().map(|(p, t)| (&**p, *t)),
                }
                .call();
                let reply = release_by_script(&mut conn, script, &call, cached).await?;
                Ok((reply, true))
            })
        } else {
            let call = request.call();
            Box::pin(async move {
                let reply = release_by_script(&mut conn, script, &call, cached).await?;
                Ok((reply, true))
            })
        };
        let (reply, scripted) = self.bounded(timeout, Gate::Cleanup, key, request).await?;
        if scripted {
            self.release_cached.store(true, Ordering::Relaxed);
        }
        Ok(reply == ReleaseReply::Released)
    }

    /// Deletes the lock key whatever it holds, and announces it on the
    /// lock's release channel; `Ok(false)` if there was no key.
    pub(crate) async fn force_release(
        &self,
        key: &str,
        release_id: &str,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        let channel = release_channel(key);
        let cmd = ForceReleaseRequest {
            key,
            channel: &channel,
            release_id,
            pubsub: self.pubsub(),
        }
        .call();
        let mut conn = self.conn.clone();
        // Past the owed-request gate (see [`Gate::Cleanup`]).
        let request = Box::pin(async move { cmd.query_async(&mut conn).await });
        let reply: ForceReleaseReply = self.bounded(timeout, Gate::Cleanup, key, request).await?;
        Ok(reply == ForceReleaseReply::Deleted)
    }

    /// A queued waiter's look at the lock of `key` (see [`Look`]): `GET`,
    /// `PTTL` and the release channel's subscribers in one round trip,
    /// without a script.
    pub(crate) async fn look(
        &self,
        key: &str,
        place: &str,
        timeout: Duration,
    ) -> Result<Look, NodeError> {
        let mut pipe = redis::pipe();
        pipe.cmd("GET").arg(key).cmd("PTTL").arg(key);
        pipe.cmd("PUBSUB")
            .arg(self.pubsub().numsub())
            .arg(release_channel(key));
        let mut conn = self.conn.clone();
        let request = Box::pin(async move {
            pipe.query_async::<(Option<String>, i64, Vec<(String, u64)>)>(&mut conn)
                .await
        });
        let (value, pttl, crowd) = self.bounded(timeout, Gate::New, key, request).await?;
        let crowd = crowd.iter().map(|(_, n)| n).sum();
        Ok(Look::of(value.as_deref(), pttl, place, crowd))
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
            .arg(self.pubsub().numsub())
            .arg(release_channel(&keys.lock));
        // The two modes, in the same round trip: sent whole (EVAL), an
        // operator's rare request need not be cached on the server.
        let modes = ReadInspectRequest { key: &keys.lock };
        pipe.add_command(READ_INSPECT.whole(&modes.call()));
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
        let (pttl, fence, subscribers, modes): (
            i64,
            Option<String>,
            Vec<(String, u64)>,
            SharedState,
        ) = redis::from_redis_value(Value::Array(replies))
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
            mode: match modes.mode {
                Mode::Free | Mode::Reserved => None,
                Mode::Exclusive => Some(LockMode::Exclusive),
                Mode::Shared => Some(LockMode::Shared),
                Mode::Permits(_) => Some(LockMode::Permit),
            },
            permits: match modes.mode {
                Mode::Permits(n) => Some(n),
                _ => None,
            },
            readers: modes.readers,
            writer_waits: modes.writer_waits.is_some(),
            reserved: modes.mode == Mode::Reserved,
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
        let call = ExtendRequest {
            key,
            token: token.as_str(),
            ttl: Duration::from_millis(ttl_ms),
            bind_lineage: self.binds_lineage(),
        }
        .call();
        let (reply, replicas): (ExtendReply, _) =
            self.run(&EXTEND, call, timeout, Gate::New, key).await?;
        let extended = reply == ExtendReply::Extended;
        if extended {
            self.replicated(replicas)?;
        }
        Ok(extended)
    }
}

/// Runs the release script's `call`: by its hash once it is believed
/// `cached` on the server, else whole, which caches it there.
async fn release_by_script(
    conn: &mut Conn,
    script: &Lua,
    call: &Cmd,
    cached: bool,
) -> Result<ReleaseReply, RedisError> {
    if cached {
        conn.eval(script, call).await
    } else {
        script.whole(call).query_async(conn).await
    }
}
