//! What an acquire needs beside the claim's own script (see
//! [`claim`](super::claim)): how a refusal is met, the server's clock of
//! a "yes", the follow-up to a refused plain acquire, and the fencing
//! write-back, as typed requests and replies. (The plain acquire is in
//! [`set_nx`](super::set_nx).)

use std::time::Duration;

use redis::{Cmd, FromRedisValue, ParsingError, Value};

use super::lua::{malformed, millis, Flag, PubSub, RAISE_FENCE, REFUSED};

/// What a refused acquire does to the holder's value: mark it for waiters
/// (docs/library.md, "A release is published only where someone waits")
/// or leave it alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnRefusal {
    /// The acquire waits for the lock after a refusal: a holder of another
    /// Locker (for a waiter in line, any holder) is marked, so
    /// that its release is handed on or published to the waiter.
    Mark,
    /// The acquire gives up after a refusal (`try_lock`, the last attempt
    /// of a bounded wait): nobody will listen for the release, so the
    /// holder is left as it is and its release publishes nothing.
    LeaveAlone,
}

impl OnRefusal {
    fn marks(self) -> Flag {
        Flag(self == OnRefusal::Mark)
    }
}

/// The server's clock (`TIME`) when it took a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ServerTime {
    pub(crate) secs: u64,
    pub(crate) micros: u64,
}

/// The follow-up to a refused plain acquire (refused.lua): mark the holder
/// for its waiters (if the acquire waits), and say how long it holds and
/// how many wait.
///
/// - `KEYS[1]` the lock key.
/// - `ARGV[1]` the Locker's tag; `ARGV[2]` `NUMSUB` or `SHARDNUMSUB`
///   ([`PubSub`]); `ARGV[3]` [`Flag`]: mark a holder of another Locker
///   ([`OnRefusal`]).
/// - Reply ([`RefusedReply`]): `{pttl, waiting}`, the key's `PTTL` (-2
///   gone, -1 no expiry) and the subscribers of its release channel.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RefusedRequest<'a> {
    pub(crate) key: &'a str,
    pub(crate) tag: &'a str,
    pub(crate) pubsub: PubSub,
    pub(crate) on_refusal: OnRefusal,
}

impl RefusedRequest<'_> {
    /// The script's call (`EVALSHA`).
    pub(crate) fn call(&self) -> Cmd {
        REFUSED.call(|c| {
            c.arg(1)
                .arg(self.key)
                .arg(self.tag)
                .arg(self.pubsub.numsub())
                .arg(self.on_refusal.marks());
        })
    }
}

/// What a refused node said about its holder (see [`RefusedRequest`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RefusedReply {
    /// `None`: the key has no expiry. A key gone meanwhile (PTTL -2) is
    /// reported as expiring now.
    pub(crate) expires_in: Option<Duration>,
    pub(crate) waiting: u64,
}

impl FromRedisValue for RefusedReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Self::from_redis_value_ref(&v)
    }

    fn from_redis_value_ref(v: &Value) -> Result<Self, ParsingError> {
        let Value::Array(pair) = v else {
            return Err(malformed("refused-acquire follow-up", v));
        };
        let [Value::Int(pttl), Value::Int(waiting)] = pair[..] else {
            return Err(malformed("refused-acquire follow-up", v));
        };
        Ok(RefusedReply {
            expires_in: match pttl {
                -1 => None,
                ms => Some(Duration::from_millis(ms.max(0) as u64)),
            },
            waiting: waiting.max(0) as u64,
        })
    }
}

/// The fencing write-back (raise_fence.lua): raise the fencing counter to
/// at least a token, so every later quorum meets a node that has seen it.
///
/// - `KEYS[1]` the fencing counter.
/// - `ARGV[1]` the token; `ARGV[2]` the counter's idle expiry (ms).
/// - Reply ([`FenceRaised`]): 1.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RaiseFenceRequest<'a> {
    pub(crate) fence_key: &'a str,
    pub(crate) fence: u64,
    pub(crate) expiry: Duration,
}

impl RaiseFenceRequest<'_> {
    /// The script's call (`EVALSHA`).
    pub(crate) fn call(&self) -> Cmd {
        RAISE_FENCE.call(|c| {
            c.arg(1)
                .arg(self.fence_key)
                .arg(self.fence)
                .arg(millis(self.expiry));
        })
    }
}

/// The fencing write-back's reply: the counter is at least the token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FenceRaised;

impl FromRedisValue for FenceRaised {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        match v {
            Value::Int(1) => Ok(FenceRaised),
            other => Err(malformed("fencing write-back", &other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(items: &[i64]) -> Value {
        Value::Array(items.iter().map(|&i| Value::Int(i)).collect())
    }

    #[test]
    fn a_refusal_reads_ttl_and_waiters() {
        let read = |pttl, waiting| RefusedReply::from_redis_value(ints(&[pttl, waiting]));
        assert_eq!(
            read(1500, 3),
            Ok(RefusedReply {
                expires_in: Some(Duration::from_millis(1500)),
                waiting: 3
            })
        );
        assert_eq!(
            read(-1, 0),
            Ok(RefusedReply {
                expires_in: None,
                waiting: 0
            })
        );
        // Gone meanwhile: expiring now.
        assert_eq!(
            read(-2, 0),
            Ok(RefusedReply {
                expires_in: Some(Duration::ZERO),
                waiting: 0
            })
        );
        for reply in [ints(&[5]), ints(&[1, 2, 3]), Value::Nil, Value::Int(5)] {
            assert!(RefusedReply::from_redis_value(reply).is_err());
        }
        assert_eq!(
            FenceRaised::from_redis_value(Value::Int(1)),
            Ok(FenceRaised)
        );
        assert!(FenceRaised::from_redis_value(Value::Int(0)).is_err());
    }
}
