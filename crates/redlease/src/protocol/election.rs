//! An election's leader record as the leader writes it (proclaim.lua):
//! the typed call and its reply. Who leads is read with inspect (see
//! [`claim`](super::claim)). Building and parsing only: no I/O here.

use std::time::Duration;

use redis::{Cmd, FromRedisValue, ParsingError, Value};

use super::lua::{millis, one_or_zero, PubSub, PROCLAIM};

/// An election's leader says what it leads with (proclaim.lua): its
/// record, kept while its hold of the name is.
///
/// - `KEYS[1]` the lock key; `KEYS[2]` the leader record.
/// - `ARGV[1]` the token; `ARGV[2]` `TERM\tREV\tVALUE`; `ARGV[3]` the
///   record's expiry (ms); `ARGV[4]` `PUBLISH` or `SPUBLISH`.
/// - Reply: 1 written, 0 the name is not held by this token.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Proclaim<'a> {
    pub(crate) key: &'a str,
    pub(crate) record_key: &'a str,
    pub(crate) token: &'a str,
    pub(crate) term: u64,
    pub(crate) revision: u64,
    pub(crate) value: &'a str,
    pub(crate) expiry: Duration,
    pub(crate) pubsub: PubSub,
}

impl Proclaim<'_> {
    /// The script's call (`EVALSHA`).
    pub(crate) fn call(&self) -> Cmd {
        PROCLAIM.call_sized(8, 96 + self.value.len(), |c| {
            c.arg(2)
                .arg(self.key)
                .arg(self.record_key)
                .arg(self.token)
                .arg(format!("{}\t{}\t{}", self.term, self.revision, self.value))
                .arg(millis(self.expiry))
                .arg(self.pubsub.publish());
        })
    }
}

/// Whether a [`Proclaim`] was written: the name is still held by its
/// token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Proclaimed(pub(crate) bool);

impl FromRedisValue for Proclaimed {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        one_or_zero("proclaim", &v).map(Proclaimed)
    }
}
