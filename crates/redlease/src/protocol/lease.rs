//! A held lock's replies beside the claim's scripts (see
//! [`claim`](super::claim)): the native compare-and-delete's, and the
//! operator's force release (of any mode) as a typed request and reply.

use redis::{Cmd, FromRedisValue, ParsingError, Value};

use super::lua::{one_or_zero, PubSub, FORCE_RELEASE};

/// A compare-and-delete's reply (see `compare_delete`).
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
/// - `KEYS[1]` the lock key; `KEYS[2]` its readers; `KEYS[3]` a
///   writer-waiting mark an older version may have left; `KEYS[4]` a
///   semaphore's permit holders (see engine.lua).
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
        let key = self.key;
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(FORCE_RELEASE)
            .arg(4)
            .arg(key)
            .arg(format!("{key}:readers"))
            .arg(format!("{key}:writer"))
            .arg(format!("{key}:permits"))
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
