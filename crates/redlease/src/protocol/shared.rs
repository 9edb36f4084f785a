//! A lock's read (shared) side as typed requests and replies: many
//! readers, or one writer, on one name. The write side is the exclusive
//! lock itself: while readers hold, the lock key holds [`READERS`], so an
//! exclusive acquire (plain `SET NX`, or the acquire script) is refused
//! with no change to its path.
//!
//! The keys of lock key `p{X}` (all in the hash slot of `{X}`):
//!
//! - `p{X}`: a writer's token (as an exclusive lock's), or [`READERS`]
//!   while readers hold, expiring at the latest live reader's expiry;
//! - `p{X}:readers` ([`SharedKeys::readers`]): a sorted set, member a
//!   reader's token (`token|lineage` when bound to a lineage), score its
//!   expiry in the server's milliseconds (`TIME`, never a client's
//!   clock); members whose score has passed are pruned by every script
//!   that writes the set, which expires with its latest member;
//! - `p{X}:writer` ([`SharedKeys::writer`]): the writer-waiting mark, the
//!   token of a writer that readers refused, with the writer's TTL, so
//!   that new readers wait behind it;
//! - `p{X}:fence`: the fencing counter, drawn by writers; a reader reads
//!   it as its generation, never draws it.
//!
//! Each request declares its script's keys, arguments and reply, and
//! builds its call; each reply is read with [`FromRedisValue`], and a
//! reply of another shape is an error, never a guess.

use std::time::Duration;

use std::borrow::Cow;

use redis::{Cmd, FromRedisValue, ParsingError, Value};

use crate::core::mode::Hold;

use super::acquire::{OnRefusal, ServerTime};
use super::lua::{
    malformed, millis, one_or_zero, small_int_array, Flag, PubSub, READ_ACQUIRE, READ_EXTEND,
    READ_EXTEND_MANY, READ_INSPECT, READ_RELEASE, WRITER_CLEAR, WRITER_WAITS,
};

/// The lock key's value while readers hold it: not hexadecimal, so no
/// token (48 hex digits, then perhaps `|lineage` or `*`) can equal it,
/// and no refused acquire marks it for waiters (refused.lua marks only a
/// token). Every script that needs it is given it as an argument.
pub(crate) const READERS: &str = "readers";

const READERS_SUFFIX: &str = ":readers";
const WRITER_SUFFIX: &str = ":writer";
const PERMITS_SUFFIX: &str = ":permits";

/// The members of a lock key's sorted set, and what the lock key holds
/// while there are any: readers, with [`READERS`], or a semaphore's
/// permit holders, with `permits:N` (see [`permits`](super::permits)).
/// The read side's release, extend and renewal serve both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Members {
    Readers,
    Permits(u32),
}

impl Members {
    /// The members of an acquisition held as `hold`; `None` for a lock
    /// held alone, which has none.
    pub(crate) fn of(hold: Hold) -> Option<Members> {
        match hold {
            Hold::Exclusive => None,
            Hold::Shared => Some(Members::Readers),
            Hold::Permit { permits, .. } => Some(Members::Permits(permits.get())),
        }
    }

    /// The sorted set of lock key `lock`: `lock:readers` or `lock:permits`
    /// (same hash tag, same slot).
    pub(crate) fn set_key(self, lock: &str) -> String {
        match self {
            Members::Readers => format!("{lock}{READERS_SUFFIX}"),
            Members::Permits(_) => format!("{lock}{PERMITS_SUFFIX}"),
        }
    }

    /// What the lock key holds while there are members: no token can
    /// equal it (not hexadecimal).
    pub(crate) fn marker(self) -> Cow<'static, str> {
        match self {
            Members::Readers => Cow::Borrowed(READERS),
            Members::Permits(n) => Cow::Owned(format!("permits:{n}")),
        }
    }

    /// Whether every release is announced (a permit is free), or only
    /// the last member's (readers: the lock is free for a writer).
    pub(crate) fn announces_each(self) -> bool {
        matches!(self, Members::Permits(_))
    }
}

/// The keys a lock's read side adds beside its lock key, spelled from it:
/// the same hash tag, so the same slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SharedKeys {
    pub(crate) readers: String,
    pub(crate) writer: String,
}

impl SharedKeys {
    /// The read side's keys of lock key `lock`.
    pub(crate) fn of(lock: &str) -> SharedKeys {
        SharedKeys {
            readers: format!("{lock}{READERS_SUFFIX}"),
            writer: format!("{lock}{WRITER_SUFFIX}"),
        }
    }
}

/// The read acquire (read_acquire.lua): take a read hold if no writer
/// holds the lock or waits for it.
///
/// - `KEYS[1]` the lock key; `KEYS[2]` the readers; `KEYS[3]` the fencing
///   counter; `KEYS[4]` the writer-waiting mark.
/// - `ARGV[1]` token; `ARGV[2]` TTL (ms); `ARGV[3]` [`READERS`];
///   `ARGV[4]` [`Flag`]: append the server's clock to a "yes"; `ARGV[5]`
///   [`Flag`]: bind the hold to the server's replication lineage;
///   `ARGV[6]` `NUMSUB` or `SHARDNUMSUB` ([`PubSub`]); `ARGV[7]` the
///   Locker's tag; `ARGV[8]` [`Flag`]: mark a writer of another Locker
///   for its waiters ([`OnRefusal`]); `ARGV[9]` [`Flag`]: read the
///   generation (the Locker draws fencing tokens), restarting a missing
///   counter as a writer would; `ARGV[10]` the counter's idle expiry (ms).
/// - Reply ([`ReadAcquireReply`]): taken, `{1, generation}` and `seconds,
///   microseconds` of `TIME` when the clock was asked for; held by a
///   writer, `{0, pttl, waiting, owner}` as the acquire script answers; a
///   writer waits, `{2, pttl of its mark, waiting, owner}` (the waiting
///   writer's fingerprint).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadAcquireRequest<'a> {
    pub(crate) key: &'a str,
    pub(crate) set_key: &'a str,
    pub(crate) fence_key: &'a str,
    pub(crate) writer_key: &'a str,
    pub(crate) token: &'a str,
    pub(crate) ttl: Duration,
    pub(crate) watch_clock: bool,
    pub(crate) bind_lineage: bool,
    pub(crate) pubsub: PubSub,
    pub(crate) tag: &'a str,
    pub(crate) on_refusal: OnRefusal,
    /// The Locker draws fencing tokens: read the generation.
    pub(crate) fenced: bool,
    pub(crate) fence_expiry: Duration,
}

impl ReadAcquireRequest<'_> {
    /// The script's call (`EVALSHA`).
    pub(crate) fn call(&self) -> Cmd {
        READ_ACQUIRE.call(|c| {
            c.arg(4)
                .arg(self.key)
                .arg(self.set_key)
                .arg(self.fence_key)
                .arg(self.writer_key);
            c.arg(self.token)
                .arg(millis(self.ttl))
                .arg(READERS)
                .arg(Flag(self.watch_clock))
                .arg(Flag(self.bind_lineage))
                .arg(self.pubsub.numsub())
                .arg(self.tag)
                .arg(Flag(self.on_refusal == OnRefusal::Mark))
                .arg(Flag(self.fenced))
                .arg(millis(self.fence_expiry));
        })
    }

    /// `reply`, if it answers this request: a "yes" carries the server's
    /// clock exactly when it was watched.
    pub(crate) fn check(&self, reply: ReadAcquireReply) -> Result<ReadAcquireReply, String> {
        match reply {
            ReadAcquireReply::Taken { clock, .. } if clock.is_some() != self.watch_clock => {
                Err(format!(
                    "the read acquire script returned {reply:?} to a request {} the clock",
                    if self.watch_clock { "with" } else { "without" },
                ))
            }
            reply => Ok(reply),
        }
    }
}

/// The read acquire's reply (see [`ReadAcquireRequest`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadAcquireReply {
    /// Held by us among any other readers. `generation` is the fencing
    /// counter's value, the token of the last fenced write this node has
    /// seen (a missing counter is restarted from the clock, as a writer
    /// would restart it: above every earlier token); 0 when not asked.
    Taken {
        generation: u64,
        clock: Option<ServerTime>,
    },
    /// A writer holds the lock: for this long (`None`: its key has no
    /// expiry), with this many connections waiting for its release, and
    /// the writer's fingerprint (as the acquire script's refusal).
    HeldByWriter {
        expires_in: Option<Duration>,
        waiting: u64,
        owner: u32,
    },
    /// Readers may hold the lock, but a writer waits for it: its mark
    /// lasts this long (`None`: no expiry), with this many connections
    /// waiting for a release, and the waiting writer's fingerprint.
    WriterWaits {
        expires_in: Option<Duration>,
        waiting: u64,
        owner: u32,
    },
}

impl FromRedisValue for ReadAcquireReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Self::from_redis_value_ref(&v)
    }

    fn from_redis_value_ref(v: &Value) -> Result<Self, ParsingError> {
        let bad = || malformed("read acquire", v);
        let (ints, n) = small_int_array("read acquire", v)?;
        let natural = |i: i64| u64::try_from(i).map_err(|_| bad());
        let ttl = |pttl: i64| match pttl {
            -1 => Ok(None),
            ms => natural(ms).map(|ms| Some(Duration::from_millis(ms))),
        };
        match (n, ints) {
            (2 | 4, [1, generation, secs, micros]) => Ok(ReadAcquireReply::Taken {
                generation: natural(generation)?,
                clock: match n {
                    4 => Some(ServerTime {
                        secs: natural(secs)?,
                        micros: natural(micros)?,
                    }),
                    _ => None,
                },
            }),
            (4, [0, pttl, waiting, owner]) => Ok(ReadAcquireReply::HeldByWriter {
                expires_in: ttl(pttl)?,
                // Counted by the server: never below zero in fact.
                waiting: waiting.max(0) as u64,
                owner: u32::try_from(owner).map_err(|_| bad())?,
            }),
            (4, [2, pttl, waiting, owner]) => Ok(ReadAcquireReply::WriterWaits {
                expires_in: ttl(pttl)?,
                waiting: waiting.max(0) as u64,
                owner: u32::try_from(owner).map_err(|_| bad())?,
            }),
            _ => Err(bad()),
        }
    }
}

/// The read release (read_release.lua): remove our reader, and when none
/// is left, delete the lock key and announce the release (as release.lua
/// does) so that waiting writers go at once.
///
/// - `KEYS[1]` the lock key; `KEYS[2]` the readers.
/// - `ARGV[1]` the token; `ARGV[2]` [`READERS`]; `ARGV[3]` [`Flag`]: the
///   hold was bound to a lineage (ours in any lineage, at the cost of one
///   read of the set); `ARGV[4]` `PUBLISH` or `SPUBLISH` ([`PubSub`]);
///   `ARGV[5]` [`Flag`]: announce a freed lock (not for the cleanup of a
///   failed attempt).
/// - Reply ([`ReadReleaseReply`]): 1 if our token was a live reader, 0
///   if not.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadReleaseRequest<'a> {
    pub(crate) key: &'a str,
    pub(crate) set_key: &'a str,
    /// What the lock key holds while there are members ([`Members::marker`]).
    pub(crate) marker: &'a str,
    /// Announce every release, not only the last member's.
    pub(crate) announce_each: bool,
    pub(crate) token: &'a str,
    pub(crate) bind_lineage: bool,
    pub(crate) pubsub: PubSub,
    pub(crate) announce: bool,
}

impl ReadReleaseRequest<'_> {
    /// The script's call (`EVALSHA`).
    pub(crate) fn call(&self) -> Cmd {
        READ_RELEASE.call(|c| {
            c.arg(2).arg(self.key).arg(self.set_key);
            c.arg(self.token)
                .arg(self.marker)
                .arg(Flag(self.bind_lineage))
                .arg(self.pubsub.publish())
                .arg(Flag(self.announce))
                .arg(Flag(self.announce_each));
        })
    }
}

/// A read release's reply (see [`ReadReleaseRequest`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadReleaseReply {
    /// Our token was a live reader and is removed.
    Released,
    /// Our token was no live reader (expired, or never ours).
    NotOurs,
}

impl FromRedisValue for ReadReleaseReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Ok(match one_or_zero("read release", &v)? {
            true => ReadReleaseReply::Released,
            false => ReadReleaseReply::NotOurs,
        })
    }
}

/// The read extend (read_extend.lua): a new TTL for a live reader only,
/// never resurrecting an expired or foreign one.
///
/// - `KEYS[1]` the lock key; `KEYS[2]` the readers.
/// - `ARGV[1]` the token; `ARGV[2]` the new TTL (ms); `ARGV[3]`
///   [`READERS`]; `ARGV[4]` [`Flag`]: the hold is bound to the lineage it
///   was taken in.
/// - Reply ([`ReadExtendReply`]): 1 if extended, 0 if not ours.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadExtendRequest<'a> {
    pub(crate) key: &'a str,
    pub(crate) set_key: &'a str,
    /// What the lock key holds while there are members ([`Members::marker`]).
    pub(crate) marker: &'a str,
    pub(crate) token: &'a str,
    pub(crate) ttl: Duration,
    pub(crate) bind_lineage: bool,
}

impl ReadExtendRequest<'_> {
    /// The script's call (`EVALSHA`).
    pub(crate) fn call(&self) -> Cmd {
        READ_EXTEND.call(|c| {
            c.arg(2).arg(self.key).arg(self.set_key);
            c.arg(self.token)
                .arg(millis(self.ttl))
                .arg(self.marker)
                .arg(Flag(self.bind_lineage));
        })
    }
}

/// A read extend's reply (see [`ReadExtendRequest`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadExtendReply {
    Extended,
    NotOurs,
}

impl FromRedisValue for ReadExtendReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Ok(match one_or_zero("read extend", &v)? {
            true => ReadExtendReply::Extended,
            false => ReadExtendReply::NotOurs,
        })
    }
}

/// A batch of read renewals (read_extend_many.lua): the read extend for
/// many holds in one call, as [`ExtendManyRequest`](super::lease::ExtendManyRequest)
/// for exclusive leases.
///
/// - `KEYS[2i-1]` lease i's lock key, `KEYS[2i]` its readers.
/// - `ARGV[2i-1]` its token, `ARGV[2i]` its new TTL (ms); `ARGV[2n+1]`
///   [`READERS`]; `ARGV[2n+2]` [`Flag`]: the holds are bound to their
///   lineage.
/// - Reply ([`Renewed`](super::lease::Renewed)): one `'1'` or `'0'` per
///   lease.
pub(crate) struct ReadExtendManyRequest<I> {
    /// `(lock key, token, ttl)` of each hold.
    pub(crate) leases: I,
    /// Whose holds they are: all of one kind (one marker per call).
    pub(crate) members: Members,
    pub(crate) bind_lineage: bool,
}

impl<'a, I> ReadExtendManyRequest<I>
where
    I: Iterator<Item = (&'a str, &'a str, Duration)> + Clone,
{
    /// The script's call (`EVALSHA`), and how many holds it renews.
    pub(crate) fn call(self) -> (Cmd, usize) {
        let (len, bytes) = super::lua::sized(self.leases.clone());
        // Each lease's key twice (its set's key is the key and a suffix).
        let keys: usize = self.leases.clone().map(|(key, _, _)| key.len() + 16).sum();
        let cmd = READ_EXTEND_MANY.call_sized(5 + 4 * len, 96 + bytes + keys, |cmd| {
            cmd.arg(2 * len);
            for (key, _, _) in self.leases.clone() {
                cmd.arg(key).arg(self.members.set_key(key));
            }
            for (_, token, ttl) in self.leases {
                cmd.arg(token).arg(millis(ttl));
            }
            cmd.arg(&*self.members.marker())
                .arg(Flag(self.bind_lineage));
        });
        (cmd, len)
    }
}

/// The writer-waiting mark (writer_waits.lua): after readers refused a
/// writer that will wait, mark the lock so new readers wait behind it.
/// Worth sending only when the refusal's owner is the readers' (the
/// fingerprint of [`READERS`]): a lock without readers never pays for it.
///
/// - `KEYS[1]` the lock key; `KEYS[2]` the writer-waiting mark.
/// - `ARGV[1]` the writer's token; `ARGV[2]` how long the mark lasts
///   (ms): the writer's TTL, refreshed by each refused attempt, so that a
///   writer that gives up or vanishes leaves no mark for longer;
///   `ARGV[3]` [`READERS`].
/// - Reply ([`WriterMarkReply`]): 1 if marked, 0 if readers no longer
///   hold the lock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WriterWaitsRequest<'a> {
    pub(crate) key: &'a str,
    pub(crate) writer_key: &'a str,
    pub(crate) token: &'a str,
    pub(crate) ttl: Duration,
}

impl WriterWaitsRequest<'_> {
    /// The script's call (`EVALSHA`).
    pub(crate) fn call(&self) -> Cmd {
        WRITER_WAITS.call(|c| {
            c.arg(2).arg(self.key).arg(self.writer_key);
            c.arg(self.token).arg(millis(self.ttl)).arg(READERS);
        })
    }
}

/// The writer-waiting mark's reply (see [`WriterWaitsRequest`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriterMarkReply {
    /// The mark holds the writer's token, for its TTL.
    Marked,
    /// Readers no longer hold the lock (free, or a writer's): nothing
    /// was marked; the writer may retry at once.
    NotShared,
}

impl FromRedisValue for WriterMarkReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Ok(match one_or_zero("writer-waiting mark", &v)? {
            true => WriterMarkReply::Marked,
            false => WriterMarkReply::NotShared,
        })
    }
}

/// The clear of a writer-waiting mark (writer_clear.lua): delete it only
/// if it holds our token, when the writer took the lock or gives up.
///
/// - `KEYS[1]` the lock key; `KEYS[2]` the writer-waiting mark.
/// - `ARGV[1]` the writer's token; `ARGV[2]` `PUBLISH` or `SPUBLISH`
///   ([`PubSub`]); `ARGV[3]` [`Flag`]: announce it on the release
///   channel (a writer giving up, so the readers behind it go on);
///   `ARGV[4]` the token of the lease the writer took (empty when it
///   gives up), whose value gets the readers' wish to hear its release.
/// - Reply ([`WriterClearReply`]): 1 if the mark was ours and is
///   deleted, 0 if not.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WriterClearRequest<'a> {
    pub(crate) key: &'a str,
    pub(crate) writer_key: &'a str,
    pub(crate) token: &'a str,
    /// The token of the lease the writer took, when it took the lock
    /// (empty when it gives up).
    pub(crate) holder: &'a str,
    pub(crate) pubsub: PubSub,
    pub(crate) announce: bool,
}

impl WriterClearRequest<'_> {
    /// The script's call (`EVALSHA`).
    pub(crate) fn call(&self) -> Cmd {
        WRITER_CLEAR.call(|c| {
            c.arg(2).arg(self.key).arg(self.writer_key);
            c.arg(self.token)
                .arg(self.pubsub.publish())
                .arg(Flag(self.announce))
                .arg(self.holder);
        })
    }
}

/// A writer-waiting clear's reply (see [`WriterClearRequest`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriterClearReply {
    Cleared,
    /// The mark is gone or another writer's: left alone.
    NotOurs,
}

impl FromRedisValue for WriterClearReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Ok(match one_or_zero("writer-waiting clear", &v)? {
            true => WriterClearReply::Cleared,
            false => WriterClearReply::NotOurs,
        })
    }
}

/// What a node's keys say of how a lock is held (read_inspect.lua):
/// alone, by readers, or as a semaphore's permits; writing nothing: for
/// the operator.
///
/// - `KEYS[1]` the lock key; `KEYS[2]` the readers; `KEYS[3]` the
///   writer-waiting mark; `KEYS[4]` the permit holders.
/// - `ARGV[1]` [`READERS`].
/// - Reply ([`SharedState`]): `{mode, pttl, members, writer, permits}`,
///   mode 0 free, 1 a writer's, 2 readers', 3 a semaphore's; the lock
///   key's `PTTL`; the live readers or permit holders by the server's
///   clock; the mark's `PTTL` (-2: none); the semaphore's permits (0
///   unless mode 3).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadInspectRequest<'a> {
    pub(crate) key: &'a str,
}

impl ReadInspectRequest<'_> {
    /// The script's call (`EVALSHA`).
    pub(crate) fn call(&self) -> Cmd {
        let shared = SharedKeys::of(self.key);
        READ_INSPECT.call(|c| {
            c.arg(4)
                .arg(self.key)
                .arg(shared.readers)
                .arg(shared.writer)
                .arg(Members::Permits(1).set_key(self.key))
                .arg(READERS);
        })
    }
}

/// Who holds a lock on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Free,
    /// A writer (an exclusive lock), or a value that is not a lock's.
    Exclusive,
    /// Readers.
    Shared,
    /// A semaphore's holders, of this many permits.
    Permits(u32),
    /// Reserved for a waiting multi-lock (see acquire_all.lua).
    Reserved,
}

/// A node's view of a lock's two modes (see [`ReadInspectRequest`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SharedState {
    pub(crate) mode: Mode,
    /// The lock key's time left (`None`: free, or no expiry).
    pub(crate) expires_in: Option<Duration>,
    /// Live readers or permit holders, by the server's clock.
    pub(crate) readers: u64,
    /// A waiting writer's mark, and its time left (`Some(None)`: no
    /// expiry).
    pub(crate) writer_waits: Option<Option<Duration>>,
}

impl FromRedisValue for SharedState {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let bad = || malformed("read inspect", &v);
        let Value::Array(items) = &v else {
            return Err(bad());
        };
        let [Value::Int(mode), Value::Int(pttl), Value::Int(readers), Value::Int(writer), Value::Int(permits)] =
            items[..]
        else {
            return Err(bad());
        };
        let ttl = |pttl: i64| match pttl {
            -2 | -1 => Ok(None),
            ms => u64::try_from(ms)
                .map(|ms| Some(Duration::from_millis(ms)))
                .map_err(|_| bad()),
        };
        let mode = match (mode, pttl, permits) {
            (0, -2, 0) => Mode::Free,
            (1, -1 | 0.., 0) => Mode::Exclusive,
            (2, -1 | 0.., 0) => Mode::Shared,
            (3, -1 | 0.., 1..) => Mode::Permits(u32::try_from(permits).map_err(|_| bad())?),
            (4, -1 | 0.., 0) => Mode::Reserved,
            _ => return Err(bad()),
        };
        Ok(SharedState {
            mode,
            expires_in: ttl(pttl)?,
            readers: u64::try_from(readers).map_err(|_| bad())?,
            writer_waits: match writer {
                -2 => None,
                -1 => Some(None),
                ms => Some(ttl(ms)?),
            },
        })
    }
}

#[cfg(test)]
mod replies;
#[cfg(test)]
mod servers;
