//! The acquire without a script, for a lock without a fencing token or
//! durability: `SET key token NX PX ttl GET`, pipelined with `PEXPIRETIME
//! key` when the clock guard watches the server: the new key's absolute
//! expiry, which is the server's clock at the `SET` plus the TTL (see
//! `vote_guard::ClockSample::from_expiry`). It is read as one integer,
//! where `TIME`'s pair of strings cost the client more than the `SET`'s
//! own reply. A script call costs Redis several times a plain `SET`, and
//! this is the command every lock sends.
//!
//! `GET` makes a refusal say who holds the lock (the holder's value, of
//! which only a fingerprint is kept) in the same round trip; only then
//! does a second one, a small script (refused.lua, see
//! [`RefusedRequest`](super::acquire::RefusedRequest)), ask for the holder's
//! remaining TTL and the number of waiting processes, which a refused
//! acquire reports (see retry.rs), and, when the holder is not a task of
//! this Locker and the acquire waits after a refusal, mark it for its
//! waiters so that its release is published (crate docs, "Waiting").
//! A server older than Redis 7.0 refuses `NX` with `GET` as a syntax error,
//! before doing anything; the node then falls back to the acquire script.
//!
//! Parsing only: no I/O here.

use redis::{Pipeline, Value};

use super::server_error::ErrorReply;
use crate::core::owner::Holder;
use crate::core::server_code::ServerErrorCode;

/// What a node's pipelined `SET NX PX GET` (and `PEXPIRETIME`) answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SetNx {
    /// Taken by us, with the key's expiry (Unix milliseconds) when it was
    /// asked for.
    Taken(Option<u64>),
    /// Held by another owner, whose fingerprint is this (see
    /// [`owner_of`]; 0 for a key that is not a string).
    Held {
        owner: u32,
        /// Who the holder's token names, if it names anyone.
        holder: Option<Holder>,
    },
    /// The server does not know `SET ... NX GET` (before Redis 7.0):
    /// nothing was written.
    Unsupported,
}

/// The request: `SET key token NX PX ttl GET`, then `PEXPIRETIME key` if
/// `clock`, then `publish` (`PUBLISH` or `SPUBLISH`) on the name's
/// watchers' channel (see engine.lua, `E.changed`): sent whether the `SET`
/// takes the name or not, as a pipeline cannot choose, and cheap with
/// nobody listening. Errors come back as values, so no reply is lost to
/// another's error (a user without channel rights still takes locks).
pub(crate) fn request(key: &str, token: &str, ttl_ms: u64, clock: bool, publish: &str) -> Pipeline {
    // Every buffer sized up front: this is built for every lock.
    let mut pipe = Pipeline::with_capacity(3);
    let mut set = redis::Cmd::with_capacity(7, 3 + key.len() + token.len() + 2 + 2 + 20 + 3);
    set.arg("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(ttl_ms)
        .arg("GET");
    pipe.ignore_errors().add_command(set);
    if clock {
        let mut expiry = redis::Cmd::with_capacity(2, 11 + key.len());
        expiry.arg("PEXPIRETIME").arg(key);
        pipe.add_command(expiry);
    }
    let channel_len = key.len() + ":changed".len();
    let mut told = redis::Cmd::with_capacity(3, publish.len() + channel_len + 5);
    told.arg(publish)
        .arg(crate::core::keys::changed_channel(key))
        .arg("taken");
    pipe.add_command(told);
    pipe
}

/// Reads the replies to [`request`], but for the `PUBLISH`'s, which says
/// nothing of the lock (see [`told`]). `Err` carries what was wrong: a
/// server error (its code and message), or a reply of the wrong shape.
pub(crate) fn parse(replies: &[Value], clock: bool) -> Result<SetNx, Reply> {
    let expected = if clock { 2 } else { 1 };
    if replies.len() != expected {
        return Err(Reply::Shape(format!(
            "{} replies to SET NX GET{}",
            replies.len(),
            if clock { " and PEXPIRETIME" } else { "" }
        )));
    }
    match &replies[0] {
        Value::Nil => {}
        Value::BulkString(holder) => {
            return Ok(SetNx::Held {
                owner: owner_of(holder),
                holder: Holder::of_stored(holder),
            })
        }
        Value::SimpleString(s) if s == "OK" => {
            return Err(Reply::Shape("SET NX GET answered OK".into()))
        }
        Value::ServerError(e) => {
            let reply = ErrorReply::of_value(e);
            return match reply.code {
                // Redis 6.2 (and older) refuse NX with GET this way.
                _ if reply.is_syntax_error() => Ok(SetNx::Unsupported),
                // Another type's key under our name: held, but not by a lock.
                ServerErrorCode::WrongType => Ok(SetNx::Held {
                    owner: 0,
                    holder: None,
                }),
                _ => Err(Reply::Server(reply)),
            };
        }
        other => return Err(Reply::Shape(format!("SET NX GET answered {other:?}"))),
    }
    if !clock {
        return Ok(SetNx::Taken(None));
    }
    match &replies[1] {
        Value::Int(ms) if *ms >= 0 => Ok(SetNx::Taken(Some(*ms as u64))),
        // -2: the key is gone, -1: it has no expiry. Either way it is no
        // longer the key just set (an operator deleted or overwrote it in
        // between), and the vote must not count; the caller undoes it.
        Value::Int(n) => Err(Reply::Shape(format!(
            "PEXPIRETIME answered {n}: the key just set was deleted or overwritten at once"
        ))),
        // The lock is ours all the same; the caller must undo it.
        Value::ServerError(e) => Err(Reply::Server(ErrorReply::of_value(e))),
        other => Err(Reply::Shape(format!("PEXPIRETIME answered {other:?}"))),
    }
}

/// Takes the watchers' `PUBLISH` reply off the end of [`request`]'s
/// replies (after any the caller added behind it was taken), before
/// [`parse`].
pub(crate) fn told(replies: &mut Vec<Value>) -> Option<Value> {
    replies.pop()
}

/// What was wrong with a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// The server answered with an error.
    Server(ErrorReply),
    /// Not the reply these commands give.
    Shape(String),
}

/// The number a refusal names the holder of `value` by, as owner.lua
/// computes it on the server, so that refusals from either path compare:
/// the readers' and a semaphore's markers have numbers of their own (see
/// [`Owner`](crate::core::refusal::Owner)); a token's is 27 bits of its
/// SHA-1, taken from the part of the value before any `|` (a lock bound to
/// a lineage holds `token|replid`) or `*` (a mark for waiters). Waiters
/// compare it across nodes to tell one owner on a quorum from a split
/// vote; it reveals nothing usable of the token.
pub(crate) fn owner_of(value: &[u8]) -> u32 {
    use crate::core::refusal::Owner;
    if value == crate::protocol::claim::READERS.as_bytes() {
        return Owner::Readers.number();
    }
    if let Some(permits) = value
        .strip_prefix(b"permits:")
        .and_then(|n| std::str::from_utf8(n).ok())
        .and_then(|n| n.parse::<u32>().ok())
    {
        return Owner::Semaphore(permits).number();
    }
    // A value marked for waiters ends in '*' (refused.lua).
    let token = value
        .split(|&b| b == b'|' || b == b'*')
        .next()
        .unwrap_or(value);
    let digest = sha1_smol::Sha1::from(token).digest().bytes();
    (u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]) >> 4) % Owner::MARKERS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_set_nx_px_get_then_pexpiretime() {
        for clock in [false, true] {
            let mut expected = redis::pipe();
            expected
                .cmd("SET")
                .arg("app:{x}")
                .arg("t0k3n")
                .arg("NX")
                .arg("PX")
                .arg(1500)
                .arg("GET");
            if clock {
                expected.cmd("PEXPIRETIME").arg("app:{x}");
            }
            expected.cmd("PUBLISH").arg("app:{x}:changed").arg("taken");
            let request = request("app:{x}", "t0k3n", 1500, clock, "PUBLISH");
            assert_eq!(
                request.get_packed_pipeline(),
                expected.get_packed_pipeline()
            );
            assert_eq!(request.len(), 2 + usize::from(clock));
            let mut replies = vec![Value::Nil, Value::Int(0)];
            assert_eq!(told(&mut replies), Some(Value::Int(0)));
            assert_eq!(replies, [Value::Nil]);
        }
    }

    /// A server error value as redis-rs parses one from the wire.
    fn err(text: &str) -> Value {
        redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap()
    }

    #[test]
    fn a_nil_is_ours_with_the_keys_expiry() {
        let expiry = Value::Int(1_700_000_010_123);
        assert_eq!(
            parse(&[Value::Nil, expiry], true),
            Ok(SetNx::Taken(Some(1_700_000_010_123)))
        );
        assert_eq!(parse(&[Value::Nil], false), Ok(SetNx::Taken(None)));
        // A key gone or made persistent at once is not a vote.
        for gone in [-2, -1] {
            assert!(matches!(
                parse(&[Value::Nil, Value::Int(gone)], true),
                Err(Reply::Shape(_))
            ));
        }
        assert_eq!(
            parse(&[Value::Nil, err("NOPERM no pexpiretime")], true),
            Err(Reply::Server(ErrorReply {
                code: ServerErrorCode::NoPerm,
                message: "no pexpiretime".into()
            }))
        );
    }

    #[test]
    fn a_value_is_held_by_its_fingerprint() {
        let reply = parse(&[Value::BulkString(b"abc".to_vec())], false);
        // SHA-1("abc") = a9993e36...: the first 7 hex digits, below 2^27.
        assert_eq!(
            reply,
            Ok(SetNx::Held {
                owner: 0x29993e3,
                holder: None
            })
        );
        assert_eq!(owner_of(b"abc|0123"), 0x29993e3);
        // Marked for waiters, with or without a lineage.
        assert_eq!(owner_of(b"abc*"), 0x29993e3);
        assert_eq!(owner_of(b"abc|0123*"), 0x29993e3);
    }

    #[test]
    fn markers_are_named_by_what_they_mark() {
        use crate::core::refusal::Owner;
        assert_eq!(Owner::of(owner_of(b"readers")), Owner::Readers);
        assert_eq!(Owner::of(owner_of(b"permits:3")), Owner::Semaphore(3));
        assert_eq!(
            Owner::of(owner_of(b"permits:100000")),
            Owner::Semaphore(100_000)
        );
        // Not a marker: a token (or another program's value).
        assert!(matches!(Owner::of(owner_of(b"permits:")), Owner::Token(_)));
        assert!(matches!(Owner::of(owner_of(b"permits:x")), Owner::Token(_)));
        assert!(matches!(Owner::of(owner_of(b"readers*")), Owner::Token(_)));
        assert_eq!(Owner::of(0), Owner::Unknown);
    }

    #[test]
    fn old_servers_and_foreign_types_are_recognised() {
        assert_eq!(
            parse(&[err("ERR syntax error")], false),
            Ok(SetNx::Unsupported)
        );
        assert_eq!(
            parse(
                &[err(
                    "WRONGTYPE Operation against a key holding the wrong kind of value"
                )],
                false
            ),
            Ok(SetNx::Held {
                owner: 0,
                holder: None
            })
        );
        assert_eq!(
            parse(&[err("NOPERM no permissions")], false),
            Err(Reply::Server(ErrorReply {
                code: ServerErrorCode::NoPerm,
                message: "no permissions".into()
            }))
        );
        assert!(matches!(parse(&[Value::Nil], true), Err(Reply::Shape(_))));
    }
}
