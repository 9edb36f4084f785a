//! A node's requests for a lock's read side: the read acquire, release
//! and extend, and the writer-waiting mark (see
//! [`shared`](crate::protocol::shared)).

use std::num::NonZeroU32;
use std::time::Duration;

use crate::core::mode::Hold;

use crate::core::keys::LockKeys;
use crate::core::node_error::NodeError;
use crate::core::token::Token;
use crate::protocol::acquire::OnRefusal;
use crate::protocol::lua::{PERMIT_ACQUIRE, READ_ACQUIRE, READ_EXTEND, READ_RELEASE};
use crate::protocol::lua::{WRITER_CLEAR, WRITER_WAITS};
use crate::protocol::permits::{PermitAcquireReply, PermitAcquireRequest};
use crate::protocol::shared::{
    Members, ReadAcquireReply, ReadAcquireRequest, ReadExtendReply, ReadExtendRequest,
    ReadReleaseReply, ReadReleaseRequest, SharedKeys, WriterClearReply, WriterClearRequest,
    WriterMarkReply, WriterWaitsRequest,
};

use super::acquire::Scripted;
use super::{AcquireReply, Gate, Node};

impl Node {
    /// Takes a read hold on the lock, or says who keeps it from us: a
    /// writer holding it, or a writer waiting for it (both a
    /// [`AcquireReply::Held`], the latter with the mark's expiry and its
    /// writer's fingerprint). A "yes" carries, as its fence, the node's
    /// fencing counter (the last write generation it saw), and is judged
    /// like an exclusive acquire's (vote guard, durability).
    pub(crate) async fn read_acquire(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl_ms: u64,
        timeout: Duration,
        on_refusal: OnRefusal,
        fenced: bool,
    ) -> Result<AcquireReply, NodeError> {
        let shared = SharedKeys::of(&keys.lock);
        let fence_key = keys.fence();
        let request = ReadAcquireRequest {
            key: &keys.lock,
            set_key: &shared.readers,
            fence_key: &fence_key,
            writer_key: &shared.writer,
            token: token.as_str(),
            ttl: Duration::from_millis(ttl_ms),
            watch_clock: self.watches_clock(),
            bind_lineage: self.binds_lineage(),
            pubsub: self.pubsub(),
            tag: self.settings.tag.as_str(),
            on_refusal,
            fenced,
            fence_expiry: Duration::from_millis(keys.fence_expiry_ms),
        };
        let call = request.call();
        let sent = std::time::Instant::now();
        let mut conn = self.conn.clone();
        let durability = self.settings.durability;
        let exchange =
            Box::pin(async move { conn.eval_voted(&READ_ACQUIRE, &call, durability).await });
        let (reply, replicas, shard) = self
            .bounded(timeout, Gate::New, &keys.lock, exchange)
            .await?;
        let answer = request.check(reply).map(|reply| match reply {
            ReadAcquireReply::Taken { generation, clock } => Scripted::Taken {
                fence: Some(generation),
                clock,
            },
            ReadAcquireReply::HeldByWriter {
                expires_in,
                waiting,
                owner,
            } => Scripted::Refused(AcquireReply::Held {
                expires_in,
                waiting,
                owner,
                writer_waits: false,
            }),
            ReadAcquireReply::WriterWaits {
                expires_in,
                waiting,
                owner,
            } => Scripted::Refused(AcquireReply::Held {
                expires_in,
                waiting,
                owner,
                writer_waits: true,
            }),
        });
        self.judge_scripted(sent, shard, replicas, answer)
    }

    /// Removes our read hold or permit (`hold`); `Ok(false)` if it was not
    /// live. `announce`: tell the lock's waiters, if it was the last
    /// reader, or of every permit.
    pub(crate) async fn read_release(
        &self,
        key: &str,
        token: &Token,
        hold: Hold,
        announce: bool,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        let members = Members::of(hold).expect("a hold with members");
        let (set_key, marker) = (members.set_key(key), members.marker());
        let call = ReadReleaseRequest {
            key,
            set_key: &set_key,
            marker: &marker,
            announce_each: members.announces_each(),
            token: token.as_str(),
            bind_lineage: self.binds_lineage(),
            pubsub: self.pubsub(),
            announce,
        }
        .call();
        let reply: ReadReleaseReply = self
            .unwaited(&READ_RELEASE, call, timeout, Gate::Cleanup, key)
            .await?;
        Ok(reply == ReadReleaseReply::Released)
    }

    /// A new TTL for our read hold or permit (`hold`) if it is still live;
    /// `Ok(false)` if not.
    pub(crate) async fn read_extend(
        &self,
        key: &str,
        token: &Token,
        hold: Hold,
        ttl_ms: u64,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        let members = Members::of(hold).expect("a hold with members");
        let (set_key, marker) = (members.set_key(key), members.marker());
        let call = ReadExtendRequest {
            key,
            set_key: &set_key,
            marker: &marker,
            token: token.as_str(),
            ttl: Duration::from_millis(ttl_ms),
            bind_lineage: self.binds_lineage(),
        }
        .call();
        let (reply, replicas): (ReadExtendReply, _) = self
            .run(&READ_EXTEND, call, timeout, Gate::New, key)
            .await?;
        let extended = reply == ReadExtendReply::Extended;
        if extended {
            self.replicated(replicas)?;
        }
        Ok(extended)
    }

    /// Takes one of a semaphore's `permits`, or says why not: none is free
    /// or the name is locked ([`AcquireReply::Held`]), or the semaphore
    /// has another number of permits ([`AcquireReply::PermitsDiffer`]).
    /// A "yes" is judged like an exclusive acquire's (vote guard,
    /// durability), and carries the fencing token when `fenced`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn permit_acquire(
        &self,
        keys: &LockKeys,
        token: &Token,
        permits: NonZeroU32,
        ttl_ms: u64,
        timeout: Duration,
        fenced: bool,
    ) -> Result<AcquireReply, NodeError> {
        let set_key = Members::Permits(permits.get()).set_key(&keys.lock);
        let fence_key = keys.fence();
        let request = PermitAcquireRequest {
            key: &keys.lock,
            set_key: &set_key,
            fence_key: &fence_key,
            token: token.as_str(),
            ttl: Duration::from_millis(ttl_ms),
            permits: permits.get(),
            watch_clock: self.watches_clock(),
            bind_lineage: self.binds_lineage(),
            pubsub: self.pubsub(),
            fenced,
            fence_expiry: Duration::from_millis(keys.fence_expiry_ms),
        };
        let call = request.call();
        let sent = std::time::Instant::now();
        let mut conn = self.conn.clone();
        let durability = self.settings.durability;
        let exchange =
            Box::pin(async move { conn.eval_voted(&PERMIT_ACQUIRE, &call, durability).await });
        let (reply, replicas, shard) = self
            .bounded(timeout, Gate::New, &keys.lock, exchange)
            .await?;
        let answer = request.check(reply).map(|reply| match reply {
            PermitAcquireReply::Taken { fence, clock } => Scripted::Taken { fence, clock },
            PermitAcquireReply::Held {
                expires_in,
                waiting,
                owner,
            } => Scripted::Refused(AcquireReply::Held {
                expires_in,
                waiting,
                owner,
                writer_waits: false,
            }),
            PermitAcquireReply::Differs { permits } => {
                Scripted::Refused(AcquireReply::PermitsDiffer { permits })
            }
        });
        self.judge_scripted(sent, shard, replicas, answer)
    }

    /// Marks a writer refused by readers as waiting, for `ttl`, so that
    /// new readers wait behind it; `Ok(false)` if readers no longer hold
    /// the lock.
    pub(crate) async fn writer_waits(
        &self,
        key: &str,
        token: &Token,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        let shared = SharedKeys::of(key);
        let call = WriterWaitsRequest {
            key,
            writer_key: &shared.writer,
            token: token.as_str(),
            ttl,
        }
        .call();
        let reply: WriterMarkReply = self
            .unwaited(&WRITER_WAITS, call, timeout, Gate::New, key)
            .await?;
        Ok(reply == WriterMarkReply::Marked)
    }

    /// Removes our writer-waiting mark `token`, if it is ours: because the
    /// writer `took` the lock with that lease token (its release is what
    /// the readers behind the mark wait for: it is marked to be
    /// announced), or because it gave up (`None`: announced now, so the
    /// readers go on).
    pub(crate) async fn writer_clear(
        &self,
        key: &str,
        token: &Token,
        took: Option<&Token>,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        let shared = SharedKeys::of(key);
        let call = WriterClearRequest {
            key,
            writer_key: &shared.writer,
            token: token.as_str(),
            pubsub: self.pubsub(),
            announce: took.is_none(),
            holder: took.map_or("", Token::as_str),
        }
        .call();
        let reply: WriterClearReply = self
            .unwaited(&WRITER_CLEAR, call, timeout, Gate::Cleanup, key)
            .await?;
        Ok(reply == WriterClearReply::Cleared)
    }

    /// Runs `call`, an `EVALSHA` of `lua` whose first key is `key`, with
    /// no durability `WAIT` after it: for requests that give something
    /// back or only steer waiters, which a failover may lose without
    /// harm (as an exclusive release is sent).
    async fn unwaited<T: redis::FromRedisValue + Send + 'static>(
        &self,
        lua: &'static crate::protocol::lua::Lua,
        call: redis::Cmd,
        timeout: Duration,
        gate: Gate,
        key: &str,
    ) -> Result<T, NodeError> {
        let mut conn = self.conn.clone();
        let request = Box::pin(async move { conn.eval(lua, &call).await });
        self.bounded(timeout, gate, key, request).await
    }
}
