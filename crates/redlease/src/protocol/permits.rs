//! A semaphore's permits as typed requests and replies: at most `N`
//! holders of one name at once, each expiring on its own by the server's
//! clock.
//!
//! The keys of lock key `p{X}` (all in the hash slot of `{X}`):
//!
//! - `p{X}`: `permits:N` ([`Members::marker`]) while permits are held,
//!   expiring with the latest holder; so the number of permits is fixed
//!   while any is held, and a lock (or read lock) of the same name is
//!   refused meanwhile, as the semaphore is while the name is locked;
//! - `p{X}:permits` ([`Members::set_key`]): a sorted set, member a
//!   holder's token (`token|lineage` when bound to a lineage), score its
//!   expiry in the server's milliseconds; members whose score has passed
//!   are pruned before every count;
//! - `p{X}:fence`: the fencing counter, drawn by each permit as a lock
//!   draws it.
//!
//! A permit is released, extended and renewed by the read side's
//! requests with [`Members::Permits`] (see [`shared`](super::shared)):
//! the same sorted set of holders under another marker, every release
//! announced (a permit is free).

use std::time::Duration;

use redis::{Cmd, FromRedisValue, ParsingError, Value};

use super::acquire::ServerTime;
use super::lua::{malformed, millis, small_int_array, Flag, PubSub, PERMIT_ACQUIRE};
use super::shared::Members;

/// The acquire of a permit (permit_acquire.lua): take one if fewer than
/// `permits` live holders have one.
///
/// - `KEYS[1]` the lock key; `KEYS[2]` the holders; `KEYS[3]` the fencing
///   counter.
/// - `ARGV[1]` token; `ARGV[2]` TTL (ms); `ARGV[3]` the marker
///   (`permits:N`); `ARGV[4]` N; `ARGV[5]` [`Flag`]: append the server's
///   clock to a "yes"; `ARGV[6]` [`Flag`]: bind the permit to the
///   server's replication lineage; `ARGV[7]` `NUMSUB` or `SHARDNUMSUB`
///   ([`PubSub`]); `ARGV[8]` [`Flag`]: draw a fencing token; `ARGV[9]` the
///   counter's idle expiry (ms).
/// - Reply ([`PermitAcquireReply`]): taken, `{1, fence}` and `seconds,
///   microseconds` of `TIME` when the clock was asked for; none free or
///   the name locked, `{0, pttl, waiting, owner}` as the acquire script
///   answers; a semaphore of another size, `{3, n}`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PermitAcquireRequest<'a> {
    pub(crate) key: &'a str,
    pub(crate) set_key: &'a str,
    pub(crate) fence_key: &'a str,
    pub(crate) token: &'a str,
    pub(crate) ttl: Duration,
    pub(crate) permits: u32,
    pub(crate) watch_clock: bool,
    pub(crate) bind_lineage: bool,
    pub(crate) pubsub: PubSub,
    pub(crate) fenced: bool,
    pub(crate) fence_expiry: Duration,
}

impl PermitAcquireRequest<'_> {
    /// The script's call (`EVALSHA`).
    pub(crate) fn call(&self) -> Cmd {
        let marker = Members::Permits(self.permits).marker();
        PERMIT_ACQUIRE.call(|c| {
            c.arg(3).arg(self.key).arg(self.set_key).arg(self.fence_key);
            c.arg(self.token)
                .arg(millis(self.ttl))
                .arg(&*marker)
                .arg(self.permits)
                .arg(Flag(self.watch_clock))
                .arg(Flag(self.bind_lineage))
                .arg(self.pubsub.numsub())
                .arg(Flag(self.fenced))
                .arg(millis(self.fence_expiry));
        })
    }

    /// `reply`, if it answers this request: a "yes" carries the server's
    /// clock exactly when it was watched, and a fence only when drawn.
    pub(crate) fn check(&self, reply: PermitAcquireReply) -> Result<PermitAcquireReply, String> {
        match reply {
            PermitAcquireReply::Taken { clock, fence }
                if clock.is_some() != self.watch_clock || fence.is_some() != self.fenced =>
            {
                Err(format!(
                    "the permit acquire script returned {reply:?} to a request {} the clock, \
                     {} a fencing token",
                    if self.watch_clock { "with" } else { "without" },
                    if self.fenced { "with" } else { "without" },
                ))
            }
            PermitAcquireReply::Differs { permits } if permits == self.permits => Err(format!(
                "the permit acquire script said the semaphore has {permits} permits, \
                 as asked, and refused"
            )),
            reply => Ok(reply),
        }
    }
}

/// A permit acquire's reply (see [`PermitAcquireRequest`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PermitAcquireReply {
    /// A permit is ours, with its fencing token if one was drawn.
    Taken {
        fence: Option<u64>,
        clock: Option<ServerTime>,
    },
    /// No permit is free (or the name is held as a lock): for this long
    /// at most before one frees by expiry (`None`: the lock key never
    /// expires), with this many connections waiting, and the holder's
    /// fingerprint (a full semaphore's is its marker's, the same on every
    /// node).
    Held {
        expires_in: Option<Duration>,
        waiting: u64,
        owner: u32,
    },
    /// The name is a semaphore of this many permits, not the number asked.
    Differs { permits: u32 },
}

impl FromRedisValue for PermitAcquireReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Self::from_redis_value_ref(&v)
    }

    fn from_redis_value_ref(v: &Value) -> Result<Self, ParsingError> {
        let bad = || malformed("permit acquire", v);
        let (ints, n) = small_int_array("permit acquire", v)?;
        let natural = |i: i64| u64::try_from(i).map_err(|_| bad());
        match (n, ints) {
            (2 | 4, [1, fence, secs, micros]) => Ok(PermitAcquireReply::Taken {
                fence: match natural(fence)? {
                    0 => None,
                    fence => Some(fence),
                },
                clock: match n {
                    4 => Some(ServerTime {
                        secs: natural(secs)?,
                        micros: natural(micros)?,
                    }),
                    _ => None,
                },
            }),
            (4, [0, pttl, waiting, owner]) => Ok(PermitAcquireReply::Held {
                expires_in: match pttl {
                    -1 => None,
                    ms => Some(Duration::from_millis(natural(ms)?)),
                },
                // Counted by the server: never below zero in fact.
                waiting: waiting.max(0) as u64,
                owner: u32::try_from(owner).map_err(|_| bad())?,
            }),
            (2, [3, permits, ..]) => Ok(PermitAcquireReply::Differs {
                permits: u32::try_from(permits)
                    .ok()
                    .filter(|&p| p > 0)
                    .ok_or_else(bad)?,
            }),
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(values: &[i64]) -> Value {
        Value::Array(values.iter().map(|&i| Value::Int(i)).collect())
    }

    fn read(values: &[i64]) -> Result<PermitAcquireReply, String> {
        PermitAcquireReply::from_redis_value(ints(values)).map_err(|e| e.to_string())
    }

    fn request() -> PermitAcquireRequest<'static> {
        PermitAcquireRequest {
            key: "p{x}",
            set_key: "p{x}:permits",
            fence_key: "p{x}:fence",
            token: "t",
            ttl: Duration::from_secs(2),
            permits: 3,
            watch_clock: true,
            bind_lineage: false,
            pubsub: PubSub::Classic,
            fenced: true,
            fence_expiry: Duration::from_secs(600),
        }
    }

    #[test]
    fn the_call_is_laid_out_as_the_script_reads_it() {
        let args: Vec<String> = request()
            .call()
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "?".into(),
            })
            .collect();
        assert_eq!(
            args[2..],
            [
                "3",
                "p{x}",
                "p{x}:permits",
                "p{x}:fence",
                "t",
                "2000",
                "permits:3",
                "3",
                "1",
                "0",
                "NUMSUB",
                "1",
                "600000"
            ]
        );
    }

    #[test]
    fn replies_are_read_strictly() {
        assert_eq!(
            read(&[1, 42, 1_700_000_000, 5]),
            Ok(PermitAcquireReply::Taken {
                fence: Some(42),
                clock: Some(ServerTime {
                    secs: 1_700_000_000,
                    micros: 5
                })
            })
        );
        assert_eq!(
            read(&[1, 0]),
            Ok(PermitAcquireReply::Taken {
                fence: None,
                clock: None
            })
        );
        assert_eq!(
            read(&[0, 250, 2, 7]),
            Ok(PermitAcquireReply::Held {
                expires_in: Some(Duration::from_millis(250)),
                waiting: 2,
                owner: 7
            })
        );
        assert_eq!(
            read(&[3, 5]),
            Ok(PermitAcquireReply::Differs { permits: 5 })
        );
        for bad in [
            &[][..],
            &[1],
            &[1, -1],
            &[0, 250, 2],
            &[0, -2, 0, 0],
            &[3, 0],
            &[3, -1],
            &[3, 5, 0],
            &[2, 1, 1, 1],
        ] {
            assert!(read(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_reply_must_answer_what_was_asked() {
        let req = request();
        let clock = Some(ServerTime { secs: 1, micros: 2 });
        let taken = |fence, clock| PermitAcquireReply::Taken { fence, clock };
        assert!(req.check(taken(Some(1), clock)).is_ok());
        assert!(req.check(taken(None, clock)).is_err(), "no fence drawn");
        assert!(req.check(taken(Some(1), None)).is_err(), "no clock");
        assert!(req
            .check(PermitAcquireReply::Differs { permits: 3 })
            .is_err());
        assert!(req
            .check(PermitAcquireReply::Differs { permits: 4 })
            .is_ok());
    }
}
