//! The release as one native command where the server has one. Valkey 9.0
//! and later have `DELIFEQ key value`: delete the key if it holds exactly
//! `value`, atomically, and answer 1, or answer 0 and leave it alone. That
//! is the release of a lock holding just our token, which is nearly every
//! release, and it costs the server less than a script call.
//!
//! A 0 is not the end of it: the key may hold our token with something
//! after it, a waiters mark (`*`, crate docs, "Waiting") or a lineage
//! (`|replid`, durability.rs), and then the release script decides, and
//! announces the release if it was marked. That costs a second round trip,
//! only when another Locker's task waits for the lock (a durable lock,
//! always bound to a lineage, goes to the script at once). Whatever is
//! decided, it is decided by one atomic command or script on the server:
//! between the two, only we can delete our token, so nothing is lost by
//! asking twice.
//!
//! Whether a server has `DELIFEQ` is read from the `INFO server` reply that
//! every connection reads before its first request (server_conn.rs), at no
//! extra cost (see `capabilities`), and believed until the command is
//! refused: a renamed or disabled command, or an ACL user without
//! `+delifeq`, gets an error that sends this release and every later one
//! on that connection to the script.
//!
//! Redis 8.4's `DELEX key IFEQ value` is the same thing under another name;
//! it is not used yet, for want of a Redis 8.4 to test it against here.
//!
//! Parsing and building only: no I/O here.

use redis::{Cmd, RedisError};

use crate::core::server_code::ServerErrorCode;
use crate::protocol::server_error;

/// `DELIFEQ key token`, with its buffers sized up front: one per release.
pub(crate) fn delifeq(key: &str, token: &str) -> Cmd {
    let mut cmd = Cmd::with_capacity(3, 7 + key.len() + token.len());
    cmd.arg("DELIFEQ").arg(key).arg(token);
    cmd
}

/// [`delifeq`], then `publish` (`PUBLISH`) on the name's watchers'
/// channel (engine.lua, `E.changed`), as the release script tells them:
/// sent whether the key is deleted or not, as a pipeline cannot choose.
/// Errors come back as values: the first reply is the `DELIFEQ`'s.
pub(crate) fn delifeq_told(key: &str, token: &str, publish: &str) -> redis::Pipeline {
    let mut pipe = redis::Pipeline::with_capacity(2);
    pipe.ignore_errors().add_command(delifeq(key, token));
    let mut told = Cmd::with_capacity(3, publish.len() + key.len() + 20);
    told.arg(publish)
        .arg(crate::core::keys::changed_channel(key))
        .arg("released");
    pipe.add_command(told);
    pipe
}

/// What a `DELIFEQ` that failed says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The command is not there for us (unknown, renamed away, not
    /// allowed to this user, or not passed on by a proxy): the script, now
    /// and from now on.
    Refused,
    /// Another error reply (`WRONGTYPE`: the key is not a lock's value;
    /// `READONLY`: a demoted primary; ...): the script, which answers as it
    /// always did.
    Other,
    /// No answer (a broken connection): the release failed.
    NoAnswer,
}

/// Sorts a `DELIFEQ`'s error. A plain `ERR` is taken as a refusal of the
/// command whatever its text (`unknown command` from a server or a proxy
/// without it, a proxy's own wording, wrong arguments): a well-formed
/// `DELIFEQ` has no other `ERR` to give, and believing in the command
/// after one would cost every later release a round trip.
pub(crate) fn failure(e: &RedisError) -> Failure {
    match server_error::code_of(e) {
        Some(ServerErrorCode::NoPerm | ServerErrorCode::Err) => Failure::Refused,
        Some(_) => Failure::Other,
        None => Failure::NoAnswer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_tells_the_watchers_in_the_same_round_trip() {
        let pipe = delifeq_told("lock:{a}", "0123", "PUBLISH");
        let mut expected = redis::pipe();
        expected
            .cmd("DELIFEQ")
            .arg("lock:{a}")
            .arg("0123")
            .cmd("PUBLISH")
            .arg("lock:{a}:changed")
            .arg("released");
        assert_eq!(pipe.get_packed_pipeline(), expected.get_packed_pipeline());
    }

    #[test]
    fn the_command_is_the_key_and_the_token() {
        let cmd = delifeq("lock:{a}", "0123");
        let args: Vec<_> = cmd
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(bytes) => bytes.to_vec(),
                _ => b"?".to_vec(),
            })
            .collect();
        assert_eq!(args, [&b"DELIFEQ"[..], b"lock:{a}", b"0123"]);
    }

    #[test]
    fn errors_about_the_command_turn_it_off_and_others_do_not() {
        let reply = |text: &str| {
            let value = redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap();
            value.extract_error().unwrap_err()
        };
        assert_eq!(
            failure(&reply("ERR unknown command 'DELIFEQ'")),
            Failure::Refused
        );
        assert_eq!(
            failure(&reply(
                "NOPERM User u has no permissions to run the 'delifeq' command"
            )),
            Failure::Refused
        );
        assert_eq!(
            failure(&reply("ERR command not supported by this proxy")),
            Failure::Refused
        );
        assert_eq!(
            failure(&reply(
                "WRONGTYPE Operation against a key holding the wrong kind of value"
            )),
            Failure::Other
        );
        assert_eq!(
            failure(&reply(
                "READONLY You can't write against a read only replica."
            )),
            Failure::Other
        );
        let broken = RedisError::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert_eq!(failure(&broken), Failure::NoAnswer);
    }
}
