//! A node's other lock requests: release, extend, and the operator's
//! inspect and force release.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, RedisError, Value};

use crate::core::keys::{release_channel, LockKeys};
use crate::core::lock_status::{KeyState, NodeLockState, NodeQuarantine};
use crate::core::node_error::{NodeError, NodeErrorKind};
use crate::core::token::Token;
use crate::core::vote_guard::ServerFacts;
use crate::protocol::compare_delete;
use crate::protocol::lua::{Lua, EXTEND, FORCE_RELEASE, RELEASE, RELEASE_SHARDED};
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
