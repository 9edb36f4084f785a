//! A claim's exchanges with a server, for every mode: one typed request
//! per step of a lease's life (acquire, release, renew, downgrade, leave
//! the queue, inspect), each taking the claim's description as it is (a
//! name or several, each with its [`Hold`]), and its typed reply. The
//! scripts share one model of a name's holds and its first come, first
//! served queue (engine.lua).
//!
//! Every request runs on one server and, on a cluster, on one hash slot:
//! the caller groups a claim's names by slot and sends one request per
//! group.

use std::time::Duration;

use redis::{Cmd, FromRedisValue, ParsingError, Value};

use super::acquire::{OnRefusal, ServerTime};
use super::lua::{malformed, millis, Flag, PubSub};
use super::lua::{ACQUIRE, DOWNGRADE, EXTEND, INSPECT, LEAVE, RELEASE};
use crate::core::leader::LeaderRecord;
use crate::core::mode::Hold;
use crate::core::owner::Holder;

#[cfg(test)]
mod servers;

/// A queued waiter as the scripts take it: its place `TAG:ID:WINDOW`
/// (its Locker's tag, its number there, its handoff window in ms; each
/// name's hold is added to it), and its arrival ticket, the same on
/// every node (microseconds since the Unix epoch by the waiter's clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct InLine<'a> {
    pub(crate) place: &'a str,
    pub(crate) ticket: u64,
}

/// What a name's key holds while readers hold it (engine.lua): no token
/// is this.
pub(crate) const READERS: &str = "readers";

/// How long a name's queue lives after its latest arrival: it is garbage
/// once its waiters are gone without leaving (killed).
pub(crate) const QUEUE_LIFETIME: Duration = Duration::from_secs(3600);

/// The acquire (acquire.lua): take every name of the claim in its
/// hold, or none.
///
/// - `KEYS[1..k]` the lock keys, in the canonical order; `KEYS[k+1..2k]`
///   their fencing counters.
/// - `ARGV[1]` token; `ARGV[2]` TTL (ms); `ARGV[3]` the counters' idle
///   expiry (ms); `ARGV[4]` [`Flag`]: bind to the replication lineage;
///   `ARGV[5]` [`Flag`]: append the server's clock to a "yes"; `ARGV[6]`
///   `NUMSUB` or `SHARDNUMSUB` ([`PubSub`]); `ARGV[7]` [`Flag`]: draw
///   fencing tokens; `ARGV[8]` the Locker's tag; `ARGV[9]` [`Flag`]: the
///   caller waits if refused ([`OnRefusal`]); `ARGV[10]`, `ARGV[11]` the
///   waiter's place and ticket ([`InLine`], `''` and 0 for none);
///   `ARGV[12]` the queue's lifetime (ms); `ARGV[13]` `PUBLISH` or
///   `SPUBLISH`; `ARGV[14]` k; `ARGV[15..14+k]` the holds, spelled.
/// - Reply ([`ClaimAcquireReply`]).
#[derive(Clone, Debug)]
pub(crate) struct ClaimAcquire<'a> {
    pub(crate) keys: &'a [&'a str],
    /// The fencing counters of `keys`, in order (always given: the
    /// script's keys are laid out alike whether it draws or not).
    pub(crate) fence_keys: &'a [String],
    pub(crate) holds: &'a [Hold],
    pub(crate) token: &'a str,
    pub(crate) ttl: Duration,
    pub(crate) fence_expiry: Duration,
    pub(crate) bind_lineage: bool,
    pub(crate) watch_clock: bool,
    pub(crate) pubsub: PubSub,
    pub(crate) fenced: bool,
    pub(crate) tag: &'a str,
    pub(crate) on_refusal: OnRefusal,
    pub(crate) in_line: Option<InLine<'a>>,
}

impl ClaimAcquire<'_> {
    /// The script's call (`EVALSHA`).
    pub(crate) fn call(&self) -> Cmd {
        let k = self.keys.len();
        ACQUIRE.call_sized(17 + 3 * k, 320 + 64 * k, |c| {
            c.arg(2 * k);
            for key in self.keys {
                c.arg(*key);
            }
            for key in self.fence_keys {
                c.arg(key);
            }
            let (place, ticket) = self.in_line.map_or(("", 0), |l| (l.place, l.ticket));
            c.arg(self.token)
                .arg(millis(self.ttl))
                .arg(millis(self.fence_expiry))
                .arg(Flag(self.bind_lineage))
                .arg(Flag(self.watch_clock))
                .arg(self.pubsub.numsub())
                .arg(Flag(self.fenced))
                .arg(self.tag)
                .arg(Flag(self.on_refusal == OnRefusal::Mark))
                .arg(place)
                .arg(ticket)
                .arg(millis(QUEUE_LIFETIME))
                .arg(self.pubsub.publish())
                .arg(k);
            for hold in self.holds {
                c.arg(&*hold.spelled());
            }
        })
    }

    /// `reply`, if it answers this request: a fence per name (drawn
    /// exactly when asked, a read hold's aside, which may be 0), the clock
    /// exactly when watched, a refusing name among ours.
    pub(crate) fn check(&self, reply: ClaimAcquireReply) -> Result<ClaimAcquireReply, String> {
        let k = self.keys.len();
        let fits = match &reply {
            ClaimAcquireReply::Taken { fences, clock } => {
                fences.len() == k
                    && clock.is_some() == self.watch_clock
                    && fences
                        .iter()
                        .zip(self.holds)
                        .all(|(&f, h)| *h == Hold::Shared || (f != 0) == self.fenced)
            }
            ClaimAcquireReply::Held { index, .. } => *index < k,
            ClaimAcquireReply::PermitsDiffer { permits } => self.holds.iter().any(
                |h| matches!(h, Hold::Permit { permits: asked, .. } if asked.get() != *permits),
            ),
        };
        match fits {
            true => Ok(reply),
            false => Err(format!(
                "the acquire script returned {reply:?} to a request for {k} names, {} fencing \
                 tokens and {} the clock",
                if self.fenced { "with" } else { "without" },
                if self.watch_clock { "with" } else { "without" },
            )),
        }
    }
}

/// An acquire's reply (see [`ClaimAcquire`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ClaimAcquireReply {
    /// Every name taken, with each one's fencing token (0 where none was
    /// drawn) and the server's clock when asked for.
    Taken {
        fences: Vec<u64>,
        clock: Option<ServerTime>,
    },
    /// Name `index` (0-based) was not ready: for this long at most
    /// (`None`: no expiry) before its holders' first hold or the
    /// reservation ends, with `waiting` places in its queue, and who holds
    /// it (owner.lua). Nothing was taken.
    Held {
        index: usize,
        expires_in: Option<Duration>,
        waiting: u64,
        owner: u32,
        /// Who the holder alone's token names, if anyone.
        holder: Option<Holder>,
    },
    /// A name is a semaphore of this many permits, not the number asked.
    PermitsDiffer { permits: u32 },
}

impl FromRedisValue for ClaimAcquireReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Self::from_redis_value_ref(&v)
    }

    fn from_redis_value_ref(v: &Value) -> Result<Self, ParsingError> {
        let bad = || malformed("acquire", v);
        let Value::Array(items) = v else {
            return Err(bad());
        };
        let int = |i: usize| match items.get(i) {
            Some(Value::Int(n)) => Ok(*n),
            _ => Err(bad()),
        };
        let natural = |i: usize| int(i).and_then(|n| u64::try_from(n).map_err(|_| bad()));
        match int(0)? {
            1 => {
                let rest: Vec<u64> = (1..items.len()).map(natural).collect::<Result<_, _>>()?;
                // The clock's two numbers come last when asked for: the
                // request's `check` tells which.
                Ok(ClaimAcquireReply::Taken {
                    fences: rest,
                    clock: None,
                })
            }
            0 if items.len() == 5 || items.len() == 6 => Ok(ClaimAcquireReply::Held {
                index: usize::try_from(natural(1)?)
                    .ok()
                    .and_then(|i| i.checked_sub(1))
                    .ok_or_else(bad)?,
                expires_in: match int(2)? {
                    -1 => None,
                    ms => Some(Duration::from_millis(u64::try_from(ms).map_err(|_| bad())?)),
                },
                waiting: natural(3)?,
                owner: u32::try_from(int(4)?).map_err(|_| bad())?,
                holder: match items.get(5) {
                    None => None,
                    Some(part) => Holder::of_owner_part(&owner_part(part).ok_or_else(bad)?),
                },
            }),
            3 if items.len() == 2 => Ok(ClaimAcquireReply::PermitsDiffer {
                permits: u32::try_from(int(1)?).map_err(|_| bad())?,
            }),
            _ => Err(bad()),
        }
    }
}

impl ClaimAcquireReply {
    /// The reply with its last two numbers read as the server's clock when
    /// the request asked for it (`watched`): a "yes" has no other way to
    /// tell them from fences.
    pub(crate) fn with_clock(self, watched: bool) -> Result<Self, String> {
        match self {
            ClaimAcquireReply::Taken { mut fences, .. } if watched => {
                let (Some(micros), Some(secs)) = (fences.pop(), fences.pop()) else {
                    return Err("the acquire script's yes carried no clock".to_string());
                };
                Ok(ClaimAcquireReply::Taken {
                    fences,
                    clock: Some(ServerTime { secs, micros }),
                })
            }
            reply => Ok(reply),
        }
    }
}

/// The release (release.lua): give back the claim's holds where
/// they are still ours, and serve each name's queue.
///
/// - `KEYS[1..k]` the lock keys.
/// - `ARGV[1]` token; `ARGV[2]` [`Flag`]: the holds were bound to a
///   lineage; `ARGV[3]` `PUBLISH` or `SPUBLISH`; `ARGV[4]` `NUMSUB` or
///   `SHARDNUMSUB`; `ARGV[5]` [`Flag`]: announce what nobody in line took
///   (not for the cleanup of a failed attempt); `ARGV[6]` k;
///   `ARGV[7..6+k]` the holds; then a waiter put in line before the
///   queue is served ([`InLine`], `''` and 0 for none) and [`Flag`]: it
///   is the caller's own (it keeps its turn); then the queue's lifetime
///   (ms).
/// - Reply ([`PerName`]): per name, whether it was ours and given back.
#[derive(Clone, Debug)]
pub(crate) struct ClaimRelease<'a> {
    pub(crate) keys: &'a [&'a str],
    pub(crate) holds: &'a [Hold],
    pub(crate) token: &'a str,
    pub(crate) bound: bool,
    pub(crate) pubsub: PubSub,
    pub(crate) announce: bool,
    /// A waiter put in line first: the caller's own (`true`), or the next
    /// waiter of its Locker, which waits in the process (`false`).
    pub(crate) in_line: Option<(InLine<'a>, bool)>,
}

impl ClaimRelease<'_> {
    /// The script's call (`EVALSHA`), its buffers sized up front: one per
    /// release.
    pub(crate) fn call(&self) -> Cmd {
        let k = self.keys.len();
        let bytes =
            160 + self.token.len() + self.keys.iter().map(|key| key.len() + 8).sum::<usize>();
        RELEASE.call_sized(13 + 2 * k, bytes, |c| {
            c.arg(k);
            for key in self.keys {
                c.arg(*key);
            }
            c.arg(self.token)
                .arg(Flag(self.bound))
                .arg(self.pubsub.publish())
                .arg(self.pubsub.numsub())
                .arg(Flag(self.announce))
                .arg(k);
            for hold in self.holds {
                c.arg(&*hold.spelled());
            }
            match self.in_line {
                Some((line, own)) => c.arg(line.place).arg(line.ticket).arg(Flag(own)),
                None => c.arg("").arg(0).arg(Flag(false)),
            };
            c.arg(millis(QUEUE_LIFETIME));
        })
    }
}

/// Per name of a claim, in order, whether the step was done there (one
/// character each, `1` or `0`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PerName(pub(crate) Vec<bool>);

impl PerName {
    /// Done for every name.
    pub(crate) fn all(&self) -> bool {
        self.0.iter().all(|&done| done)
    }
}

impl FromRedisValue for PerName {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let Value::BulkString(bytes) = &v else {
            return Err(malformed("per-name", &v));
        };
        bytes
            .iter()
            .map(|b| match b {
                b'1' => Ok(true),
                b'0' => Ok(false),
                _ => Err(malformed("per-name", &v)),
            })
            .collect::<Result<_, _>>()
            .map(PerName)
    }
}

/// The renewal (extend.lua): holds of one kind, many in one call,
/// each given a new expiry if it is still ours (never re-created). A
/// lease of several names has one hold in each.
///
/// - `KEYS[i]` the lock key of hold `i`.
/// - `ARGV[1]` [`Flag`]: the holds are bound to the lineage they were
///   taken in; `ARGV[2]` their [`Hold`], spelled; `ARGV[2i+1]` the token
///   of hold `i`, `ARGV[2i+2]` its new TTL (ms).
/// - Reply ([`PerName`], here per hold): renewed or not ours.
pub(crate) struct ClaimRenew<I> {
    /// `(key, token, ttl)` of each hold.
    pub(crate) holds: I,
    pub(crate) hold: Hold,
    pub(crate) bound: bool,
}

impl<'a, I> ClaimRenew<I>
where
    I: Iterator<Item = (&'a str, &'a str, Duration)> + Clone,
{
    /// The script's call (`EVALSHA`), and how many holds it renews.
    pub(crate) fn call(self) -> (Cmd, usize) {
        let (len, bytes) = super::lua::sized(self.holds.clone());
        // EVALSHA, its hash, the key count, a key, token and TTL per hold,
        // the flag and the hold: sized up front, as a batch holds up to a
        // thousand.
        let cmd = EXTEND.call_sized(5 + 3 * len, 72 + bytes, |c| {
            c.arg(len);
            for (key, _, _) in self.holds.clone() {
                c.arg(key);
            }
            c.arg(Flag(self.bound)).arg(&*self.hold.spelled());
            for (_, token, ttl) in self.holds {
                c.arg(token).arg(millis(ttl));
            }
        });
        (cmd, len)
    }
}

/// The downgrade (downgrade.lua): where the claim's names are ours
/// alone, make them shared holds of the same token, atomically, and
/// serve the queues (readers first in line join).
///
/// - `KEYS[1..k]` the lock keys.
/// - `ARGV[1]` token; `ARGV[2]` [`Flag`]: bound to a lineage; `ARGV[3]`
///   `PUBLISH` or `SPUBLISH`; `ARGV[4]` `NUMSUB` or `SHARDNUMSUB`;
///   `ARGV[5]` k.
/// - Reply ([`PerName`]): per name, whether it is now a shared hold.
#[derive(Clone, Debug)]
pub(crate) struct ClaimDowngrade<'a> {
    pub(crate) keys: &'a [&'a str],
    pub(crate) token: &'a str,
    pub(crate) bound: bool,
    pub(crate) pubsub: PubSub,
}

impl ClaimDowngrade<'_> {
    /// The script's call (`EVALSHA`).
    pub(crate) fn call(&self) -> Cmd {
        DOWNGRADE.call(|c| {
            c.arg(self.keys.len());
            for key in self.keys {
                c.arg(*key);
            }
            c.arg(self.token)
                .arg(Flag(self.bound))
                .arg(self.pubsub.publish())
                .arg(self.pubsub.numsub())
                .arg(self.keys.len());
        })
    }
}

/// Leaving the queues (leave.lua): the waiter's place goes from each
/// name's queue, and what was reserved for it is handed on.
///
/// - `KEYS[1..k]` the lock keys.
/// - `ARGV[1]` the place; `ARGV[2]` `PUBLISH` or `SPUBLISH`; `ARGV[3]`
///   `NUMSUB` or `SHARDNUMSUB`; `ARGV[4]` k; `ARGV[5..4+k]` the holds.
/// - Reply: 1.
#[derive(Clone, Debug)]
pub(crate) struct ClaimLeave<'a> {
    pub(crate) keys: &'a [&'a str],
    pub(crate) holds: &'a [Hold],
    pub(crate) place: &'a str,
    pub(crate) pubsub: PubSub,
}

impl ClaimLeave<'_> {
    /// The script's call (`EVALSHA`).
    pub(crate) fn call(&self) -> Cmd {
        LEAVE.call(|c| {
            c.arg(self.keys.len());
            for key in self.keys {
                c.arg(*key);
            }
            c.arg(self.place)
                .arg(self.pubsub.publish())
                .arg(self.pubsub.numsub())
                .arg(self.keys.len());
            for hold in self.holds {
                c.arg(&*hold.spelled());
            }
        })
    }
}

/// What a name's keys say of it (inspect.lua), for the operator:
/// writes nothing.
///
/// - `KEYS[1]` the lock key; `KEYS[2]`, when given, its election's
///   leader record.
/// - Reply ([`Inspected`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClaimInspect<'a> {
    pub(crate) key: &'a str,
    pub(crate) leader: Option<&'a str>,
}

impl ClaimInspect<'_> {
    /// The script's call (`EVALSHA`).
    pub(crate) fn call(&self) -> Cmd {
        INSPECT.call(|c| match self.leader {
            Some(leader) => {
                c.arg(2).arg(self.key).arg(leader);
            }
            None => {
                c.arg(1).arg(self.key);
            }
        })
    }
}

/// How a name is held (see [`ClaimInspect`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Inspected {
    pub(crate) how: HeldAs,
    /// The lock key's remaining TTL: `None` without one (or no key).
    pub(crate) expires_in: Option<Duration>,
    /// Live members of the readers or permits (reservations included).
    pub(crate) members: u64,
    /// A semaphore's number of permits (0 unless one holds the name).
    pub(crate) permits: u32,
    /// Places in the queue.
    pub(crate) waiting: u64,
    /// Of those, places that want the name alone.
    pub(crate) writers: u64,
    /// Each holder, with its weight and how long its hold lasts yet
    /// (unnamed where its token names no owner).
    pub(crate) holders: Vec<Holder>,
    /// The election's leader record, when one was asked for and it is the
    /// holder's.
    pub(crate) leader: Option<LeaderRecord>,
}

/// How a name's key is held (see [`Inspected`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HeldAs {
    Free,
    Alone,
    Readers,
    Permits,
    Reserved,
}

/// A token's tail as the scripts give it (`\tLABEL\tMS`, or empty).
fn owner_part(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

impl FromRedisValue for Inspected {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let bad = || malformed("inspect", &v);
        let Value::Array(items) = &v else {
            return Err(bad());
        };
        let (counts, holders, leader) = match items.split_at_checked(6) {
            Some((counts, [Value::Array(holders), leader])) => {
                (counts, &holders[..], owner_part(leader).ok_or_else(bad)?)
            }
            _ => return Err(bad()),
        };
        let leader = match leader.as_str() {
            "" => None,
            text => Some(LeaderRecord::parse(text).ok_or_else(bad)?),
        };
        let [Value::Int(mode), Value::Int(pttl), Value::Int(members), Value::Int(permits), Value::Int(waiting), Value::Int(writers)] =
            *counts
        else {
            return Err(bad());
        };
        let holders = holders
            .chunks(3)
            .map(|triple| match triple {
                [part, Value::Int(weight), Value::Int(left)] => Some(
                    Holder::of_value(&owner_part(part)?)
                        .weighing(u32::try_from(*weight).ok()?)
                        .lasting(u64::try_from(*left).ok().map(Duration::from_millis)),
                ),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(bad)?;
        let natural = |n: i64| u64::try_from(n).map_err(|_| bad());
        Ok(Inspected {
            how: match mode {
                0 => HeldAs::Free,
                1 => HeldAs::Alone,
                2 => HeldAs::Readers,
                3 => HeldAs::Permits,
                4 => HeldAs::Reserved,
                _ => return Err(bad()),
            },
            expires_in: u64::try_from(pttl).ok().map(Duration::from_millis),
            members: natural(members)?,
            permits: u32::try_from(permits).map_err(|_| bad())?,
            waiting: natural(waiting)?,
            writers: natural(writers)?,
            holders,
            leader,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(items: &[i64]) -> Value {
        Value::Array(items.iter().map(|&i| Value::Int(i)).collect())
    }

    #[test]
    fn acquire_replies_are_read_by_their_shape() {
        let read = |items: &[i64]| ClaimAcquireReply::from_redis_value(ints(items));
        assert_eq!(
            read(&[1, 7, 9]),
            Ok(ClaimAcquireReply::Taken {
                fences: vec![7, 9],
                clock: None
            })
        );
        assert_eq!(
            read(&[0, 2, 1500, 3, 42]),
            Ok(ClaimAcquireReply::Held {
                index: 1,
                expires_in: Some(Duration::from_millis(1500)),
                waiting: 3,
                owner: 42,
                holder: None
            })
        );
        assert_eq!(
            read(&[0, 1, -1, 0, 0]),
            Ok(ClaimAcquireReply::Held {
                index: 0,
                expires_in: None,
                waiting: 0,
                owner: 0,
                holder: None
            })
        );
        assert_eq!(
            read(&[3, 4]),
            Ok(ClaimAcquireReply::PermitsDiffer { permits: 4 })
        );
        // A name index of 0, a negative count, a short refusal, another
        // code: not the script's replies.
        for bad in [
            &[0, 0, 1, 1, 1][..],
            &[0, 1, 1, -1, 1],
            &[0, 1, 1],
            &[5, 1],
            &[],
        ] {
            assert!(read(bad).is_err(), "{bad:?}");
        }
        // The clock comes last when asked for.
        let watched = read(&[1, 7, 1_700_000_000, 250]).unwrap().with_clock(true);
        assert_eq!(
            watched,
            Ok(ClaimAcquireReply::Taken {
                fences: vec![7],
                clock: Some(ServerTime {
                    secs: 1_700_000_000,
                    micros: 250
                })
            })
        );
        assert!(read(&[1]).unwrap().with_clock(true).is_err());
    }

    #[test]
    fn per_name_and_inspect_replies_are_read_strictly() {
        let per = |s: &[u8]| PerName::from_redis_value(Value::BulkString(s.to_vec()));
        assert_eq!(per(b"101"), Ok(PerName(vec![true, false, true])));
        assert!(!per(b"10").unwrap().all());
        assert!(per(b"1x").is_err() && PerName::from_redis_value(Value::Int(1)).is_err());
        // The six counts, the holders (owner, weight, ms left) and the
        // leader record ('' for none).
        let inspected = |counts: &[i64], holders: Vec<Value>, leader: &str| {
            let mut items: Vec<Value> = counts.iter().map(|&i| Value::Int(i)).collect();
            items.push(Value::Array(holders));
            items.push(Value::BulkString(leader.as_bytes().to_vec()));
            Inspected::from_redis_value(Value::Array(items))
        };
        let holder = |part: &str, weight: i64, left: i64| {
            vec![
                Value::BulkString(part.as_bytes().to_vec()),
                Value::Int(weight),
                Value::Int(left),
            ]
        };
        let seen = inspected(&[3, 900, 2, 5, 1, 0], holder("\tci:1\t5", 2, 900), "").unwrap();
        assert_eq!(
            (
                seen.how,
                seen.expires_in,
                seen.members,
                seen.permits,
                seen.waiting
            ),
            (HeldAs::Permits, Some(Duration::from_millis(900)), 2, 5, 1)
        );
        assert_eq!(seen.holders[0].owner, "ci:1");
        assert_eq!(seen.holders[0].weight, 2);
        assert_eq!(seen.holders[0].expires_in, Some(Duration::from_millis(900)));
        let led = inspected(&[1, 900, 0, 0, 0, 0], holder("", 1, 900), "7\t2\tha\tt").unwrap();
        assert_eq!(
            led.leader,
            Some(LeaderRecord {
                term: 7,
                revision: 2,
                value: "ha\tt".into()
            })
        );
        assert_eq!(
            inspected(&[0, -2, 0, 0, 0, 0], vec![], "")
                .unwrap()
                .expires_in,
            None
        );
        assert!(inspected(&[1, 9, 0, 0, 0, 0], vec![], "x\t1\tv").is_err());
        assert!(inspected(&[1, 9, 0, 0, 0, 0], holder("", 1, 9)[..2].to_vec(), "").is_err());
        for bad in [
            &[9, 0, 0, 0, 0, 0][..],
            &[0, 0, 0, 0, 0],
            &[0, 0, -1, 0, 0, 0],
        ] {
            assert!(inspected(bad, vec![], "").is_err(), "{bad:?}");
        }
    }
}
