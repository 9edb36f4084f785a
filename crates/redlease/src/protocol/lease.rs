//! A held lock's scripts as typed requests and replies: release, force
//! release (of either mode), extend, and the renewal lanes' batched extend. Each request
//! declares its script's keys, arguments and reply, and builds its call;
//! each reply is read with [`FromRedisValue`], and a reply of another
//! shape is an error, never a guess.

use std::time::Duration;

use redis::{Cmd, FromRedisValue, ParsingError, Value};

use super::lua::{
    malformed, millis, one_or_zero, Flag, Lua, PubSub, EXTEND, EXTEND_MANY, FORCE_RELEASE, RELEASE,
    RELEASE_SHARDED,
};
use super::shared::{Members, SharedKeys};

/// The release (release.lua, or on a cluster release_sharded.lua, which
/// publishes with `SPUBLISH`): delete the lock only if it holds our token,
/// and announce it if another Locker's waiter marked it.
///
/// - `KEYS[1]` the lock key.
/// - `ARGV[1]` the token; `ARGV[2]` present only for the cleanup of a
///   failed attempt, which announces nothing: `0`, or the waiter's place
///   in the lock's queue when the attempt was a waiter's in turn, which
///   keeps its turn (the lock is reserved for it again) unless a waiter
///   with an earlier ticket queues there; then `ARGV[3]` its ticket.
/// - Reply ([`ReleaseReply`]): 1 if deleted, 0 if not ours. `DELIFEQ key
///   token` answers the same way.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReleaseRequest<'a> {
    pub(crate) key: &'a str,
    pub(crate) token: &'a str,
    pub(crate) announce: bool,
    pub(crate) pubsub: PubSub,
    /// For a cleanup (`announce` false): the waiter's place and ticket,
    /// if any.
    pub(crate) keep_turn: Option<(&'a str, u64)>,
}

impl ReleaseRequest<'_> {
    /// The script the release runs: one per pub/sub, each with its own
    /// SHA1, so that no release carries the publish command's name.
    pub(crate) fn script(&self) -> &'static Lua {
        match self.pubsub {
            PubSub::Classic => &RELEASE,
            PubSub::Sharded => &RELEASE_SHARDED,
        }
    }

    /// The script's call (`EVALSHA`), with its buffers sized up front:
    /// one per release.
    pub(crate) fn call(&self) -> Cmd {
        // ARGV[2]'s presence is what the script reads.
        const SILENT: u8 = 0;
        let bytes = 7 + 40 + 1 + self.key.len() + self.token.len() + 1;
        self.script().call_sized(5, bytes, |c| {
            c.arg(1).arg(self.key).arg(self.token);
            match (self.announce, self.keep_turn) {
                (true, _) => {}
                (false, Some((place, ticket))) => {
                    c.arg(place).arg(ticket);
                }
                (false, None) => {
                    c.arg(SILENT);
                }
            }
        })
    }
}

/// A release's reply (see [`ReleaseRequest`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReleaseReply {
    /// The key held our token and is deleted.
    Released,
    /// The key does not hold our token (gone, or another owner's); for
    /// `DELIFEQ`, not exactly our token.
    NotOurs,
}

impl FromRedisValue for ReleaseReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Ok(match one_or_zero("release", &v)? {
            true => ReleaseReply::Released,
            false => ReleaseReply::NotOurs,
        })
    }
}

/// The operator's force release (force_release.lua, sent whole): delete
/// the lock whoever holds it, in any mode, and announce it.
///
/// - `KEYS[1]` the lock key; `KEYS[2]`, `KEYS[3]` its readers and its
///   writer-waiting mark ([`SharedKeys`], spelled from the lock key);
///   `KEYS[4]` a semaphore's permit holders ([`Members::set_key`]).
/// - `ARGV[1]` the release channel; `ARGV[2]` an id of this release;
///   `ARGV[3]` `PUBLISH` or `SPUBLISH` ([`PubSub`]).
/// - Reply ([`ForceReleaseReply`]): 1 if a key of the lock was deleted,
///   0 if there was none.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ForceReleaseRequest<'a> {
    pub(crate) key: &'a str,
    pub(crate) channel: &'a str,
    pub(crate) release_id: &'a str,
    pub(crate) pubsub: PubSub,
}

impl ForceReleaseRequest<'_> {
    /// The script's call (`EVAL` of its text).
    pub(crate) fn call(&self) -> Cmd {
        let shared = SharedKeys::of(self.key);
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(FORCE_RELEASE)
            .arg(4)
            .arg(self.key)
            .arg(shared.readers)
            .arg(shared.writer)
            .arg(Members::Permits(1).set_key(self.key))
            .arg(self.channel)
            .arg(self.release_id)
            .arg(self.pubsub.publish());
        cmd
    }
}

/// A force release's reply (see [`ForceReleaseRequest`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ForceReleaseReply {
    Deleted,
    NoKey,
}

impl FromRedisValue for ForceReleaseReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Ok(match one_or_zero("force-release", &v)? {
            true => ForceReleaseReply::Deleted,
            false => ForceReleaseReply::NoKey,
        })
    }
}

/// The extend (extend.lua): set a new TTL only if the lock holds our
/// token (never re-creating an expired key).
///
/// - `KEYS[1]` the lock key.
/// - `ARGV[1]` the token; `ARGV[2]` the new TTL (ms); `ARGV[3]`
///   [`Flag`]: the lock is bound to the lineage it was taken in (see
///   [`AcquireRequest`](super::acquire::AcquireRequest)).
/// - Reply ([`ExtendReply`]): 1 if extended, 0 if not ours.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ExtendRequest<'a> {
    pub(crate) key: &'a str,
    pub(crate) token: &'a str,
    pub(crate) ttl: Duration,
    pub(crate) bind_lineage: bool,
}

impl ExtendRequest<'_> {
    /// The script's call (`EVALSHA`).
    pub(crate) fn call(&self) -> Cmd {
        EXTEND.call(|c| {
            c.arg(1)
                .arg(self.key)
                .arg(self.token)
                .arg(millis(self.ttl))
                .arg(Flag(self.bind_lineage));
        })
    }
}

/// An extend's reply (see [`ExtendRequest`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExtendReply {
    Extended,
    NotOurs,
}

impl FromRedisValue for ExtendReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Ok(match one_or_zero("extend", &v)? {
            true => ExtendReply::Extended,
            false => ExtendReply::NotOurs,
        })
    }
}

/// The renewal lanes' batch (extend_many.lua): for each lease, set a new
/// TTL only if its key holds its token.
///
/// - `KEYS[1..=n]` the lock keys.
/// - `ARGV[2i-1]` the token of `KEYS[i]`, `ARGV[2i]` its new TTL (ms);
///   `ARGV[2n+1]` [`Flag`]: the locks are bound to the lineage they were
///   taken in.
/// - Reply ([`Renewed`]): one byte per key, `1` extended or `0` not ours
///   (one bulk string is far cheaper to read than thousands of integers).
pub(crate) struct ExtendManyRequest<I> {
    /// `(key, token, ttl)` of each lease.
    pub(crate) leases: I,
    pub(crate) bind_lineage: bool,
}

impl<'a, I> ExtendManyRequest<I>
where
    I: Iterator<Item = (&'a str, &'a str, Duration)> + Clone,
{
    /// The script's call (`EVALSHA`), and how many leases it renews.
    pub(crate) fn call(self) -> (Cmd, usize) {
        let (len, bytes) = super::lua::sized(self.leases.clone());
        // EVALSHA, its hash, the key count, a key, token and TTL per lease,
        // the flag: sized up front, as a batch holds up to a thousand.
        let cmd = EXTEND_MANY.call_sized(4 + 3 * len, 64 + bytes, |cmd| {
            cmd.arg(len);
            for (key, _, _) in self.leases.clone() {
                cmd.arg(key);
            }
            for (_, token, ttl) in self.leases {
                cmd.arg(token).arg(millis(ttl));
            }
            cmd.arg(Flag(self.bind_lineage));
        });
        (cmd, len)
    }
}

/// A batch's reply (see [`ExtendManyRequest`]): per lease in order,
/// whether it was extended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Renewed(pub(crate) Vec<bool>);

impl FromRedisValue for Renewed {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let Value::BulkString(bytes) = &v else {
            return Err(malformed("renewal", &v));
        };
        bytes
            .iter()
            .map(|b| match b {
                b'1' => Ok(true),
                b'0' => Ok(false),
                _ => Err(malformed("renewal", &v)),
            })
            .collect::<Result<_, _>>()
            .map(Renewed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "?".into(),
            })
            .collect()
    }

    #[test]
    fn calls_are_laid_out_as_the_scripts_read_them() {
        let release = ReleaseRequest {
            key: "k",
            token: "t",
            announce: true,
            pubsub: PubSub::Classic,
            keep_turn: None,
        };
        assert_eq!(
            args(&release.call()),
            ["EVALSHA", RELEASE.hash(), "1", "k", "t"]
        );
        let silent = ReleaseRequest {
            announce: false,
            pubsub: PubSub::Sharded,
            ..release
        };
        assert_eq!(
            args(&silent.call()),
            ["EVALSHA", RELEASE_SHARDED.hash(), "1", "k", "t", "0"]
        );
        let in_turn = ReleaseRequest {
            keep_turn: Some(("0a1b:7:250", 42)),
            ..silent
        };
        assert_eq!(args(&in_turn.call())[5..], ["0a1b:7:250", "42"]);
        let force = ForceReleaseRequest {
            key: "k",
            channel: "k:released",
            release_id: "id",
            pubsub: PubSub::Sharded,
        };
        assert_eq!(
            args(&force.call())[2..],
            [
                "4",
                "k",
                "k:readers",
                "k:writer",
                "k:permits",
                "k:released",
                "id",
                "SPUBLISH"
            ]
        );
        let extend = ExtendRequest {
            key: "k",
            token: "t",
            ttl: Duration::from_millis(2500),
            bind_lineage: true,
        };
        assert_eq!(args(&extend.call())[2..], ["1", "k", "t", "2500", "1"]);
        let leases = [
            ("a", "ta", Duration::from_secs(1)),
            ("b", "tb", Duration::from_secs(2)),
        ];
        let (cmd, len) = ExtendManyRequest {
            leases: leases.iter().copied(),
            bind_lineage: false,
        }
        .call();
        assert_eq!(len, 2);
        assert_eq!(
            args(&cmd)[2..],
            ["2", "a", "b", "ta", "1000", "tb", "2000", "0"]
        );
    }

    #[test]
    fn flags_and_batches_are_read_strictly() {
        assert_eq!(
            ReleaseReply::from_redis_value(Value::Int(1)),
            Ok(ReleaseReply::Released)
        );
        assert_eq!(
            ReleaseReply::from_redis_value(Value::Int(0)),
            Ok(ReleaseReply::NotOurs)
        );
        assert_eq!(
            ExtendReply::from_redis_value(Value::Int(1)),
            Ok(ExtendReply::Extended)
        );
        assert_eq!(
            ForceReleaseReply::from_redis_value(Value::Int(0)),
            Ok(ForceReleaseReply::NoKey)
        );
        for reply in [Value::Int(2), Value::Int(-1), Value::Nil, Value::Okay] {
            assert!(ReleaseReply::from_redis_value(reply.clone()).is_err());
            assert!(ExtendReply::from_redis_value(reply.clone()).is_err());
            assert!(ForceReleaseReply::from_redis_value(reply).is_err());
        }
        assert_eq!(
            Renewed::from_redis_value(Value::BulkString(b"101".to_vec())),
            Ok(Renewed(vec![true, false, true]))
        );
        assert_eq!(
            Renewed::from_redis_value(Value::BulkString(Vec::new())),
            Ok(Renewed(Vec::new()))
        );
        for reply in [
            Value::BulkString(b"1x0".to_vec()),
            Value::Int(1),
            Value::Array(vec![Value::Int(1)]),
        ] {
            let e = Renewed::from_redis_value(reply).unwrap_err();
            assert!(e.to_string().contains("the renewal script returned"), "{e}");
        }
    }
}
