//! The acquire's scripts as typed requests and replies: the acquire
//! script, the follow-up to a refused plain acquire, and the fencing
//! write-back. Each request declares its script's keys, arguments and
//! reply, and builds its call; each reply is read with
//! [`FromRedisValue`], and a reply of another shape is an error, never a
//! guess. (The plain acquire is in [`set_nx`](super::set_nx).)

use std::time::Duration;

use redis::{Cmd, FromRedisValue, ParsingError, Value};

use super::lua::{
    malformed, millis, small_int_array, Flag, PubSub, ACQUIRE, LEAVE_QUEUE, RAISE_FENCE, REFUSED,
};

/// What a refused acquire does to the holder's value: mark it for waiters
/// (docs/library.md, "A release is published only when a waiter marked
/// the lock") or leave it alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnRefusal {
    /// The acquire waits for the lock after a refusal: a holder of another
    /// Locker (for an exclusive waiter in turn, any holder) is marked, so
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

/// A waiter's place in a lock's queue (queue.lua), as the acquire
/// scripts take it: `TAG:ID:WINDOW`, scored by `ticket` (0: the
/// server's clock when it is first queued). Refused, the waiter is queued
/// if it was not, and the queue lives `lifetime` after its latest arrival.
/// Only the acquire script reads it: a waiter with a place always runs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QueuePlace<'a> {
    pub(crate) place: &'a str,
    pub(crate) ticket: u64,
    pub(crate) lifetime: Duration,
}

/// What a queued waiter's look at a lock (`GET` and `PTTL` of the lock
/// key, and the count of waiting processes, no script) found on one node:
/// whether it must try for the lock now, or can sleep on, because the
/// lock will be handed on to the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Look {
    /// Held by a holder whose release hands the lock on (its value is
    /// marked), or reserved for another waiter or set: for this long at
    /// most (`None`: no expiry), with `crowd` processes waiting there.
    HandsOn {
        expires_in: Option<Duration>,
        crowd: u64,
    },
    /// Anything else: free, reserved for this waiter, held by a holder no
    /// waiter marked yet, by readers, or of another kind: only an attempt
    /// can tell, and mark what needs marking.
    Try,
}

impl Look {
    /// Judges the lock key's `value` (never kept: a holder's value is its
    /// token) and `pttl`, for the waiter whose place is `place`, with
    /// `crowd` processes waiting.
    pub(crate) fn of(value: Option<&str>, pttl: i64, place: &str, crowd: u64) -> Look {
        let expires_in = match pttl {
            -2 => return Look::Try,
            -1 => None,
            ms => Some(Duration::from_millis(ms.max(0) as u64)),
        };
        match value {
            Some(v) if v.ends_with('*') => Look::HandsOn { expires_in, crowd },
            Some(v) if v.ends_with('~') && v.strip_suffix('~') != Some(place) => {
                Look::HandsOn { expires_in, crowd }
            }
            _ => Look::Try,
        }
    }
}

/// A waiter leaves a lock's queue (leave_queue.lua): its place is
/// removed, and a lock reserved for it meanwhile is handed on.
///
/// - `KEYS[1]` the lock key.
/// - `ARGV[1]` the place; `ARGV[2]` `PUBLISH` or `SPUBLISH` ([`PubSub`]).
/// - Reply: 1.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeaveQueueRequest<'a> {
    pub(crate) key: &'a str,
    pub(crate) place: &'a str,
    pub(crate) pubsub: PubSub,
}

impl LeaveQueueRequest<'_> {
    /// The script's call (`EVALSHA`).
    pub(crate) fn call(&self) -> Cmd {
        LEAVE_QUEUE.call(|c| {
            c.arg(1)
                .arg(self.key)
                .arg(self.place)
                .arg(self.pubsub.publish());
        })
    }
}

/// The acquire script (acquire.lua): take the lock if it is free, and
/// draw its fencing token if asked, in one round trip.
///
/// - `KEYS[1]` the lock key; `KEYS[2]` the fencing counter (in the same
///   hash slot).
/// - `ARGV[1]` token; `ARGV[2]` TTL (ms); `ARGV[3]` idle expiry of the
///   counter (ms); `ARGV[4]` [`Flag`]: bind the lock to the server's
///   replication lineage (the key holds `token|master_replid`);
///   `ARGV[5]` [`Flag`]: append the server's clock to a "yes"; `ARGV[6]`
///   `NUMSUB` or `SHARDNUMSUB` ([`PubSub`]); `ARGV[7]` [`Flag`]: draw a
///   fencing token; `ARGV[8]` the Locker's tag; `ARGV[9]` [`Flag`]: mark
///   a holder of another Locker for its waiters ([`OnRefusal`]);
///   `ARGV[10..13]` a queued waiter's [`QueuePlace`] (`''` for none),
///   ticket, queue lifetime (ms), and `PUBLISH` or `SPUBLISH`.
/// - Reply ([`AcquireScriptReply`]): taken, `{1, fence}` with `fence` 0
///   when none was drawn, and `seconds, microseconds` of `TIME` after it
///   when the clock was asked for; held, `{0, pttl, waiting, owner}`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AcquireRequest<'a> {
    pub(crate) key: &'a str,
    pub(crate) fence_key: &'a str,
    pub(crate) token: &'a str,
    pub(crate) ttl: Duration,
    pub(crate) fence_expiry: Duration,
    pub(crate) bind_lineage: bool,
    pub(crate) watch_clock: bool,
    pub(crate) pubsub: PubSub,
    pub(crate) fenced: bool,
    pub(crate) tag: &'a str,
    pub(crate) on_refusal: OnRefusal,
    pub(crate) queue: Option<QueuePlace<'a>>,
}

impl AcquireRequest<'_> {
    /// The script's call (`EVALSHA`).
    pub(crate) fn call(&self) -> Cmd {
        ACQUIRE.call(|c| {
            c.arg(2).arg(self.key).arg(self.fence_key);
            c.arg(self.token)
                .arg(millis(self.ttl))
                .arg(millis(self.fence_expiry))
                .arg(Flag(self.bind_lineage))
                .arg(Flag(self.watch_clock))
                .arg(self.pubsub.numsub())
                .arg(Flag(self.fenced))
                .arg(self.tag)
                .arg(self.on_refusal.marks());
            if let Some(q) = self.queue {
                c.arg(q.place)
                    .arg(q.ticket)
                    .arg(millis(q.lifetime))
                    .arg(self.pubsub.publish());
            }
        })
    }

    /// `reply`, if it answers this request: a "yes" carries a fencing
    /// token exactly when one was asked for, and the server's clock
    /// exactly when it was watched.
    pub(crate) fn check(&self, reply: AcquireScriptReply) -> Result<AcquireScriptReply, String> {
        match reply {
            AcquireScriptReply::Taken { fence, clock }
                if fence.is_some() != self.fenced || clock.is_some() != self.watch_clock =>
            {
                Err(format!(
                    "the acquire script returned {reply:?} to a request {} a fencing token \
                     and {} the clock",
                    if self.fenced { "with" } else { "without" },
                    if self.watch_clock { "with" } else { "without" },
                ))
            }
            reply => Ok(reply),
        }
    }
}

/// The server's clock (`TIME`) when it took a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ServerTime {
    pub(crate) secs: u64,
    pub(crate) micros: u64,
}

/// The acquire script's reply (see [`AcquireRequest`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcquireScriptReply {
    /// Taken by us, with the fencing token drawn (if one was) and the
    /// server's clock (if it was asked for).
    Taken {
        fence: Option<u64>,
        clock: Option<ServerTime>,
    },
    /// Held by another owner: for this long (`None`: its key has no
    /// expiry), with this many connections waiting for its release there,
    /// and a fingerprint of the owner (see acquire.lua).
    Held {
        expires_in: Option<Duration>,
        waiting: u64,
        owner: u32,
    },
}

impl FromRedisValue for AcquireScriptReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Self::from_redis_value_ref(&v)
    }

    fn from_redis_value_ref(v: &Value) -> Result<Self, ParsingError> {
        let bad = || malformed("acquire", v);
        let (ints, n) = small_int_array("acquire", v)?;
        let natural = |i: i64| u64::try_from(i).map_err(|_| bad());
        match (n, ints) {
            (2 | 4, [1, fence, secs, micros]) => Ok(AcquireScriptReply::Taken {
                fence: Some(natural(fence)?).filter(|&f| f > 0),
                clock: match n {
                    4 => Some(ServerTime {
                        secs: natural(secs)?,
                        micros: natural(micros)?,
                    }),
                    _ => None,
                },
            }),
            (4, [0, pttl, waiting, owner]) => Ok(AcquireScriptReply::Held {
                expires_in: match pttl {
                    -1 => None,
                    ms => Some(Duration::from_millis(natural(ms)?)),
                },
                // Counted by the server: never below zero in fact.
                waiting: waiting.max(0) as u64,
                owner: u32::try_from(owner).map_err(|_| bad())?,
            }),
            _ => Err(bad()),
        }
    }
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

    #[test]
    fn a_look_sleeps_only_on_a_lock_that_will_be_handed_on() {
        let place = "0a1b:7:250";
        let left = Some(Duration::from_millis(900));
        let marked = format!("{}*", "f".repeat(48));
        let hands_on = Look::HandsOn {
            expires_in: left,
            crowd: 3,
        };
        assert_eq!(Look::of(Some(&marked), 900, place, 3), hands_on);
        assert_eq!(Look::of(Some("0a1b:8:250~"), 900, place, 3), hands_on);
        // Ours, free, unmarked, or readers': an attempt must look.
        assert_eq!(Look::of(Some("0a1b:7:250~"), 200, place, 3), Look::Try);
        assert_eq!(Look::of(None, -2, place, 3), Look::Try);
        assert_eq!(Look::of(Some(&"f".repeat(48)), 900, place, 3), Look::Try);
        assert_eq!(Look::of(Some("readers"), 900, place, 3), Look::Try);
    }

    fn ints(items: &[i64]) -> Value {
        Value::Array(items.iter().map(|&i| Value::Int(i)).collect())
    }

    fn args(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "?".into(),
            })
            .collect()
    }

    fn request() -> AcquireRequest<'static> {
        AcquireRequest {
            key: "app:{x}",
            fence_key: "app:{x}:fence",
            token: "t0k3n",
            ttl: Duration::from_millis(1500),
            fence_expiry: Duration::from_secs(86_400),
            bind_lineage: false,
            watch_clock: true,
            pubsub: PubSub::Sharded,
            fenced: true,
            tag: "tag",
            on_refusal: OnRefusal::Mark,
            queue: None,
        }
    }

    #[test]
    fn the_acquire_call_is_laid_out_as_the_script_reads_it() {
        let cmd = request().call();
        assert_eq!(
            args(&cmd)[2..],
            [
                "2",
                "app:{x}",
                "app:{x}:fence",
                "t0k3n",
                "1500",
                "86400000",
                "0",
                "1",
                "SHARDNUMSUB",
                "1",
                "tag",
                "1"
            ]
        );
        assert_eq!(args(&cmd)[1], ACQUIRE.hash());
        let refused = RefusedRequest {
            key: "k",
            tag: "t",
            pubsub: PubSub::Classic,
            on_refusal: OnRefusal::LeaveAlone,
        };
        assert_eq!(args(&refused.call())[2..], ["1", "k", "t", "NUMSUB", "0"]);
        let raise = RaiseFenceRequest {
            fence_key: "f",
            fence: 7,
            expiry: Duration::from_secs(1),
        };
        assert_eq!(args(&raise.call())[2..], ["1", "f", "7", "1000"]);
    }

    #[test]
    fn acquire_replies_are_read_by_their_shape() {
        let read = |items: &[i64]| AcquireScriptReply::from_redis_value(ints(items));
        assert_eq!(
            read(&[1, 0]),
            Ok(AcquireScriptReply::Taken {
                fence: None,
                clock: None
            })
        );
        assert_eq!(
            read(&[1, 42, 1_700_000_000, 250_000]),
            Ok(AcquireScriptReply::Taken {
                fence: Some(42),
                clock: Some(ServerTime {
                    secs: 1_700_000_000,
                    micros: 250_000
                })
            })
        );
        assert_eq!(
            read(&[0, 1200, 3, 0xa9993e3]),
            Ok(AcquireScriptReply::Held {
                expires_in: Some(Duration::from_millis(1200)),
                waiting: 3,
                owner: 0xa9993e3
            })
        );
        assert_eq!(
            read(&[0, -1, -5, 0]),
            Ok(AcquireScriptReply::Held {
                expires_in: None,
                waiting: 0,
                owner: 0
            })
        );
    }

    #[test]
    fn a_malformed_acquire_reply_is_an_error() {
        for reply in [
            ints(&[]),
            ints(&[1]),
            ints(&[1, 0, 5]),
            ints(&[1, -3]),
            ints(&[1, 1, -1, 0]),
            ints(&[0, 1200]),
            ints(&[0, -2, 0, 0]),
            ints(&[0, 5, 0, -1]),
            ints(&[0, 5, 0, 1 << 40]),
            ints(&[2, 0]),
            ints(&[1, 0, 0, 0, 0]),
            Value::Array(vec![Value::Int(1), Value::BulkString(b"7".to_vec())]),
            Value::Int(1),
            Value::Nil,
            Value::BulkString(b"1".to_vec()),
        ] {
            let read = AcquireScriptReply::from_redis_value_ref(&reply);
            let e = read.expect_err(&format!("{reply:?}"));
            assert!(e.to_string().contains("the acquire script returned"), "{e}");
        }
    }

    #[test]
    fn a_yes_must_answer_what_was_asked() {
        let taken = |fence, clock| AcquireScriptReply::Taken { fence, clock };
        let clock = Some(ServerTime { secs: 1, micros: 2 });
        let req = request();
        assert!(req.check(taken(Some(9), clock)).is_ok());
        assert!(req.check(taken(None, clock)).is_err());
        assert!(req.check(taken(Some(9), None)).is_err());
        let plain = AcquireRequest {
            fenced: false,
            watch_clock: false,
            ..request()
        };
        assert!(plain.check(taken(None, None)).is_ok());
        assert!(plain.check(taken(Some(9), None)).is_err());
        assert!(plain.check(taken(None, clock)).is_err());
        let held = AcquireScriptReply::Held {
            expires_in: None,
            waiting: 0,
            owner: 1,
        };
        assert_eq!(plain.check(held), Ok(held));
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
