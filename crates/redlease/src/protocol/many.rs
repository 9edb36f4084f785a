//! Several locks taken together, all or none: the multi-key acquire and
//! release as typed requests and replies. Renewal and extend use the
//! batch renewal (see [`lease`](super::lease)), which already takes any
//! number of keys.

use std::time::Duration;

use redis::{Cmd, FromRedisValue, ParsingError, Value};

use super::acquire::{OnRefusal, ServerTime};
use super::lua::{malformed, millis, Flag, PubSub, ACQUIRE_ALL, RELEASE_ALL, UNRESERVE};
use super::shared::READERS;
use crate::core::mode::Hold;

/// The multi-key acquire (acquire_all.lua): take every lock or none.
///
/// - `KEYS[1..k]` the lock keys, in order; with fencing,
///   `KEYS[k+1..2k]` their counters in the same order. On a cluster, all
///   in one hash slot.
/// - `ARGV[1]` token; `ARGV[2]` TTL (ms); `ARGV[3]` the counters' idle
///   expiry (ms); `ARGV[4]` [`Flag`]: bind to the replication lineage;
///   `ARGV[5]` [`Flag`]: append the server's clock to a "yes"; `ARGV[6]`
///   `NUMSUB` or `SHARDNUMSUB` ([`PubSub`]); `ARGV[7]` [`Flag`]: draw
///   fencing tokens; `ARGV[8]` the Locker's tag; `ARGV[9]` [`Flag`]: mark
///   the holders of another Locker for its waiters ([`OnRefusal`]);
///   `ARGV[10]` k; `ARGV[11]` the waiter's reservation mark (`''`: none);
///   `ARGV[12]` how long a reservation lasts (ms, the TTL); `ARGV[13]`
///   `PUBLISH` or `SPUBLISH` ([`PubSub`]); `ARGV[14]` each key's mode
///   ([`modes`]); `ARGV[15]` [`READERS`].
/// - Reply ([`AcquireAllReply`]): all taken, `{1, fence_1..fence_k}` and
///   `seconds, microseconds` of `TIME` when asked for; lock `i` held,
///   `{0, i, pttl, waiting, owner}`.
#[derive(Clone, Debug)]
pub(crate) struct AcquireAllRequest<'a> {
    pub(crate) keys: &'a [&'a str],
    /// The fencing counters of `keys`, in order, when drawn.
    pub(crate) fence_keys: &'a [String],
    pub(crate) token: &'a str,
    pub(crate) ttl: Duration,
    pub(crate) fence_expiry: Duration,
    pub(crate) bind_lineage: bool,
    pub(crate) watch_clock: bool,
    pub(crate) pubsub: PubSub,
    pub(crate) tag: &'a str,
    pub(crate) on_refusal: OnRefusal,
    /// A waiting caller's reservation mark: a refusal reserves the free
    /// names before the first held one and claims that one (see
    /// acquire_all.lua). Only with [`OnRefusal::Mark`]: an attempt after
    /// which nobody waits reserves nothing.
    pub(crate) reserve: Option<&'a str>,
    /// Each key's hold, in the order of `keys`: exclusive or shared.
    pub(crate) holds: &'a [Hold],
}

/// The keys' modes as the multi-key scripts read them: one character per
/// key, `w` for an exclusive lock, `r` for a read hold.
pub(crate) fn modes(holds: &[Hold]) -> String {
    holds
        .iter()
        .map(|hold| match hold {
            Hold::Shared => 'r',
            // A multi-lock takes no permits (refused before any I/O).
            Hold::Exclusive | Hold::Permit { .. } => 'w',
        })
        .collect()
}

impl AcquireAllRequest<'_> {
    fn fenced(&self) -> bool {
        !self.fence_keys.is_empty()
    }

    /// The script's call (`EVALSHA`).
    pub(crate) fn call(&self) -> Cmd {
        ACQUIRE_ALL.call(|c| {
            c.arg(self.keys.len() + self.fence_keys.len());
            for key in self.keys {
                c.arg(*key);
            }
            for key in self.fence_keys {
                c.arg(key);
            }
            c.arg(self.token)
                .arg(millis(self.ttl))
                .arg(millis(self.fence_expiry))
                .arg(Flag(self.bind_lineage))
                .arg(Flag(self.watch_clock))
                .arg(self.pubsub.numsub())
                .arg(Flag(self.fenced()))
                .arg(self.tag)
                .arg(Flag(self.on_refusal == OnRefusal::Mark))
                .arg(self.keys.len())
                .arg(match self.on_refusal {
                    OnRefusal::Mark => self.reserve.unwrap_or(""),
                    OnRefusal::LeaveAlone => "",
                })
                .arg(millis(self.ttl))
                .arg(self.pubsub.publish())
                .arg(modes(self.holds))
                .arg(READERS);
        })
    }

    /// `reply`, if it answers this request: a fence per key exactly when
    /// drawn, the clock exactly when watched, a held key among ours.
    pub(crate) fn check(&self, reply: AcquireAllReply) -> Result<AcquireAllReply, String> {
        let k = self.keys.len();
        let fits = match &reply {
            AcquireAllReply::Taken { fences, clock } => {
                fences.len() == k
                    && clock.is_some() == self.watch_clock
                    && fences.iter().all(|&f| (f != 0) == self.fenced())
            }
            AcquireAllReply::Held { index, .. } => *index < k,
        };
        match fits {
            true => Ok(reply),
            false => Err(format!(
                "the multi-key acquire script returned {reply:?} to a request for {k} keys \
                 {} fencing tokens and {} the clock",
                if self.fenced() { "with" } else { "without" },
                if self.watch_clock { "with" } else { "without" },
            )),
        }
    }
}

/// The multi-key acquire's reply (see [`AcquireAllRequest`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AcquireAllReply {
    /// Every lock taken by us, with a fencing token each (0: none drawn).
    Taken {
        fences: Vec<u64>,
        clock: Option<ServerTime>,
    },
    /// Lock `index` (0-based, the first held in the request's order) is
    /// held by another owner, as the acquire script's refusal says;
    /// nothing was taken.
    Held {
        index: usize,
        expires_in: Option<Duration>,
        waiting: u64,
        owner: u32,
    },
}

impl FromRedisValue for AcquireAllReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let bad = || malformed("multi-key acquire", &v);
        let Value::Array(items) = &v else {
            return Err(bad());
        };
        let int = |item: &Value| match item {
            Value::Int(i) => Ok(*i),
            _ => Err(bad()),
        };
        let natural = |i: i64| u64::try_from(i).map_err(|_| bad());
        let head = items.first().map(int).transpose()?;
        match (head, items.len()) {
            (Some(0), 5) => {
                let [_, index, pttl, waiting, owner] = [0, 1, 2, 3, 4].map(|i| int(&items[i]));
                let (index, pttl, waiting, owner) = (index?, pttl?, waiting?, owner?);
                Ok(AcquireAllReply::Held {
                    index: usize::try_from(index)
                        .ok()
                        .and_then(|i| i.checked_sub(1))
                        .ok_or_else(bad)?,
                    expires_in: match pttl {
                        -1 => None,
                        ms => Some(Duration::from_millis(natural(ms)?)),
                    },
                    // Counted by the server: never below zero in fact.
                    waiting: waiting.max(0) as u64,
                    owner: u32::try_from(owner).map_err(|_| bad())?,
                })
            }
            // The clock's two numbers cannot be told from two fences by
            // shape: `check` holds the reply to what was asked.
            (Some(1), 2..) => Ok(AcquireAllReply::Taken {
                fences: items[1..]
                    .iter()
                    .map(|f| int(f).and_then(natural))
                    .collect::<Result<_, _>>()?,
                clock: None,
            }),
            _ => Err(bad()),
        }
    }
}

impl AcquireAllReply {
    /// Reads the clock off the end of a "yes" to a request that watched
    /// it (the last two numbers are `TIME`'s, not fences).
    pub(crate) fn with_clock(self, watched: bool) -> Result<Self, String> {
        match self {
            AcquireAllReply::Taken { mut fences, clock } if watched && clock.is_none() => {
                if fences.len() < 3 {
                    return Err(format!(
                        "a multi-key acquire's yes without its clock: {fences:?}"
                    ));
                }
                let micros = fences.pop().expect("checked");
                let secs = fences.pop().expect("checked");
                Ok(AcquireAllReply::Taken {
                    fences,
                    clock: Some(ServerTime { secs, micros }),
                })
            }
            reply => Ok(reply),
        }
    }
}

/// The multi-key release (release_all.lua): delete each key that still
/// holds our token, and announce those a waiter marked.
///
/// - `KEYS[1..k]` the lock keys (one hash slot on a cluster).
/// - `ARGV[1]` the token; `ARGV[2]` `PUBLISH` or `SPUBLISH` ([`PubSub`]);
///   `ARGV[3]` [`Flag`]: announce (not for the cleanup of a failed
///   attempt); `ARGV[4]` each key's mode ([`modes`]); `ARGV[5]`
///   [`READERS`].
/// - Reply ([`Renewed`], one flag per key): deleted, or not ours.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReleaseAllRequest<'a> {
    pub(crate) keys: &'a [&'a str],
    pub(crate) token: &'a str,
    pub(crate) pubsub: PubSub,
    pub(crate) announce: bool,
    /// Each key's hold, in the order of `keys`.
    pub(crate) holds: &'a [Hold],
}

impl ReleaseAllRequest<'_> {
    /// The script's call (`EVALSHA`).
    pub(crate) fn call(&self) -> Cmd {
        RELEASE_ALL.call(|c| {
            c.arg(self.keys.len());
            for key in self.keys {
                c.arg(*key);
            }
            c.arg(self.token)
                .arg(self.pubsub.publish())
                .arg(Flag(self.announce))
                .arg(modes(self.holds))
                .arg(READERS);
        })
    }
}

/// A waiting multi-lock's reservations given back (unreserve.lua).
///
/// - `KEYS[1..k]` the lock keys (one hash slot on a cluster).
/// - `ARGV[1]` the reservation mark; `ARGV[2]` `PUBLISH` or `SPUBLISH`
///   ([`PubSub`]).
/// - Reply: how many reservations were given back.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UnreserveRequest<'a> {
    pub(crate) keys: &'a [&'a str],
    pub(crate) mark: &'a str,
    pub(crate) pubsub: PubSub,
}

impl UnreserveRequest<'_> {
    /// The script's call (`EVALSHA`).
    pub(crate) fn call(&self) -> Cmd {
        UNRESERVE.call(|c| {
            c.arg(self.keys.len());
            for key in self.keys {
                c.arg(*key);
            }
            c.arg(self.mark).arg(self.pubsub.publish());
        })
    }
}

#[cfg(test)]
mod servers;

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(values: &[i64]) -> Value {
        Value::Array(values.iter().map(|&i| Value::Int(i)).collect())
    }

    fn args(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "?".into(),
            })
            .collect()
    }

    fn request<'a>(keys: &'a [&'a str], fence_keys: &'a [String]) -> AcquireAllRequest<'a> {
        AcquireAllRequest {
            keys,
            fence_keys,
            token: "t",
            ttl: Duration::from_secs(1),
            fence_expiry: Duration::from_secs(600),
            bind_lineage: false,
            watch_clock: false,
            pubsub: PubSub::Classic,
            tag: "tag",
            on_refusal: OnRefusal::Mark,
            reserve: Some("m"),
            holds: &[Hold::Exclusive, Hold::Shared],
        }
    }

    #[test]
    fn calls_are_laid_out_as_the_scripts_read_them() {
        let fences = ["p{a}:fence".to_string(), "p{b}:fence".to_string()];
        let acquire = request(&["p{a}", "p{b}"], &fences);
        assert_eq!(
            args(&acquire.call())[2..],
            [
                "4",
                "p{a}",
                "p{b}",
                "p{a}:fence",
                "p{b}:fence",
                "t",
                "1000",
                "600000",
                "0",
                "0",
                "NUMSUB",
                "1",
                "tag",
                "1",
                "2",
                "m",
                "1000",
                "PUBLISH",
                "wr",
                "readers"
            ]
        );
        let release = ReleaseAllRequest {
            keys: &["p{a}", "p{b}"],
            token: "t",
            pubsub: PubSub::Sharded,
            announce: false,
            holds: &[Hold::Exclusive, Hold::Exclusive],
        };
        assert_eq!(
            args(&release.call())[2..],
            ["2", "p{a}", "p{b}", "t", "SPUBLISH", "0", "ww", "readers"]
        );
    }

    #[test]
    fn replies_are_read_and_checked_strictly() {
        let read = |v: &[i64]| AcquireAllReply::from_redis_value(ints(v));
        let fences = ["f1".to_string(), "f2".to_string()];
        let fenced = request(&["a", "b"], &fences);
        let plain = request(&["a", "b"], &[]);
        let taken = read(&[1, 7, 9]).unwrap();
        assert!(fenced.check(taken.clone()).is_ok());
        assert!(plain.check(taken).is_err(), "fences nobody asked for");
        assert!(plain.check(read(&[1, 0, 0]).unwrap()).is_ok());
        assert!(
            plain.check(read(&[1, 0]).unwrap()).is_err(),
            "one key short"
        );
        let clocked = read(&[1, 0, 0, 1_700_000_000, 5])
            .unwrap()
            .with_clock(true)
            .unwrap();
        assert_eq!(
            clocked,
            AcquireAllReply::Taken {
                fences: vec![0, 0],
                clock: Some(ServerTime {
                    secs: 1_700_000_000,
                    micros: 5
                })
            }
        );
        let watched = AcquireAllRequest {
            watch_clock: true,
            ..request(&["a", "b"], &[])
        };
        assert!(watched.check(clocked).is_ok());
        assert_eq!(
            read(&[0, 2, 300, 1, 42]).unwrap(),
            AcquireAllReply::Held {
                index: 1,
                expires_in: Some(Duration::from_millis(300)),
                waiting: 1,
                owner: 42
            }
        );
        assert!(plain.check(read(&[0, 3, 300, 1, 42]).unwrap()).is_err());
        for bad in [
            &[][..],
            &[1],
            &[0, 0, 1, 1, 1],
            &[0, 1, -2, 0, 0],
            &[2, 1],
            &[1, -1],
        ] {
            assert!(read(bad).is_err(), "{bad:?}");
        }
    }
}
