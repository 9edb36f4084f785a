//! A node's operator requests: inspect and force release.

use std::time::Duration;

use redis::Value;

use crate::core::keys::{leader_key, release_channel, LockKeys};
use crate::core::lock_status::{KeyState, NodeLockState, NodeQuarantine};
use crate::core::mode::LockMode;
use crate::core::node_error::{NodeError, NodeErrorKind};
use crate::core::vote_guard::ServerFacts;
use crate::protocol::claim::{ClaimInspect, HeldAs, Inspected};
use crate::protocol::election::{Proclaim, Proclaimed};
use crate::protocol::lease::{ForceReleaseReply, ForceReleaseRequest};
use crate::protocol::lua::{INSPECT, PROCLAIM};
use crate::transport::shard_conn;

use super::{Gate, Node};

impl Node {
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

    /// What this node holds of a lock: the key's TTL (never its value, the
    /// holder's token), the fencing counter, the subscribers of its
    /// release channel, and its election's leader record.
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
        // How it is held, in the same round trip: sent whole (EVAL), an
        // operator's rare request need not be cached on the server.
        let leader = leader_key(&keys.lock);
        let held = ClaimInspect {
            key: &keys.lock,
            leader: Some(&leader),
        };
        pipe.add_command(INSPECT.whole(&held.call()));
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
        let (pttl, fence, subscribers, held): (i64, Option<String>, Vec<(String, u64)>, Inspected) =
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
            mode: match held.how {
                HeldAs::Free | HeldAs::Reserved => None,
                HeldAs::Alone => Some(LockMode::Exclusive),
                HeldAs::Readers => Some(LockMode::Shared),
                HeldAs::Permits => Some(LockMode::Permit),
            },
            permits: (held.how == HeldAs::Permits).then_some(held.permits),
            readers: held.members,
            writer_waits: held.writers > 0,
            reserved: held.how == HeldAs::Reserved,
            holders: held.holders,
            queued: held.waiting,
            leader: held.leader,
        })
    }

    /// Writes the leader record of the election on `key` for the lease
    /// of `token` (see [`Proclaim`]); `Ok(false)` when the name is not
    /// held by it there.
    pub(crate) async fn proclaim(
        &self,
        request: Proclaim<'_>,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        let request = Proclaim {
            pubsub: self.pubsub(),
            ..request
        };
        let (Proclaimed(written), _) = self
            .run(&PROCLAIM, request.call(), timeout, Gate::New, request.key)
            .await?;
        Ok(written)
    }

    /// Whether the server `facts` describes (the main connection's, or on
    /// a cluster the lock's shard's) is quarantined now, as the guard
    /// tells (no I/O).
    fn quarantine(&self, facts: &ServerFacts) -> Option<NodeQuarantine> {
        let (cause, left) = self.guard.quarantine(facts, std::time::Instant::now())?;
        Some(NodeQuarantine::new(cause, left))
    }
}
