//! Error replies of a server, read once into an [`ErrorReply`]: a
//! [`ServerErrorCode`] and the rest of the line. An error a command inside
//! a lock script raised keeps its own code on every server version, and an
//! ACL refusal inside a script becomes `NOPERM` naming what was refused.

use redis::RedisError;

use crate::core::node_error::NodeErrorKind;
use crate::core::server_code::{Refused, ServerErrorCode};

/// An error reply of a server, classified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ErrorReply {
    pub(crate) code: ServerErrorCode,
    pub(crate) message: String,
}

impl ErrorReply {
    /// The reply `-<code> <message>`, classified by its code. An `ERR`
    /// that a lock script's command raised is read further:
    ///
    /// - Redis before 7 wraps the command's own error, e.g. `ERR Error
    ///   running script (call to f_<sha>): @user_script:7: @user_script: 7:
    ///   -READONLY You can't write against a read only replica.`: it
    ///   becomes that error (`READONLY`, `OOM`, `WRONGTYPE`, ...), so that
    ///   callers see the same code on every server.
    /// - A command the ACL refused inside a script comes as `ERR` on every
    ///   version, with words that differ between them and without the
    ///   command's name before Redis 7.2 (`The user executing the script
    ///   can't run this command or subcommand script: <sha>, on
    ///   @user_script:43.`): it becomes `NOPERM`, and its message names
    ///   what was refused (the command read from the script's line when
    ///   the reply does not say) and the script.
    ///
    /// Anything else is left as it is.
    pub(crate) fn read(code: &str, message: &str) -> ErrorReply {
        let code = ServerErrorCode::from_code(code);
        if code == ServerErrorCode::Err {
            let script = InScript::parse(message);
            if let Some(refused) = script.acl_refusal() {
                return ErrorReply {
                    code: ServerErrorCode::NoPerm,
                    message: script.refusal_message(refused, message),
                };
            }
            if let Some((inner, rest)) = script.wrapped_error() {
                return ErrorReply {
                    code: ServerErrorCode::from_code(inner),
                    message: rest.to_string(),
                };
            }
        }
        ErrorReply {
            code,
            message: message.to_string(),
        }
    }

    /// An error reply that came back as a value (in a pipeline).
    pub(crate) fn of_value(e: &redis::ServerError) -> ErrorReply {
        ErrorReply::read(e.code(), e.details().unwrap_or_default())
    }

    /// The error reply behind a redis-rs error, if it is one. A pipeline's
    /// error (a connection's `INFO` and `TIME`, inspect's reads) has no
    /// detail of its own: its first failed command's.
    pub(crate) fn of_error(e: &RedisError) -> Option<ErrorReply> {
        let code = e.code()?;
        let message = match e.detail() {
            Some(detail) => detail.to_string(),
            None => e
                .clone()
                .into_server_errors()
                .and_then(|errors| {
                    let (_, first) = errors.first()?;
                    Some(first.details().unwrap_or_default().to_string())
                })
                .unwrap_or_default(),
        };
        Some(ErrorReply::read(code, &message))
    }

    /// Whether this is `ERR syntax error`, the reply to a command whose
    /// arguments the server does not take (`SET ... NX GET` before Redis
    /// 7.0): the message's first word.
    pub(crate) fn is_syntax_error(&self) -> bool {
        self.code == ServerErrorCode::Err && self.message.split(' ').next() == Some("syntax")
    }

    pub(crate) fn into_kind(self) -> NodeErrorKind {
        NodeErrorKind::Redis {
            code: self.code,
            message: self.message,
        }
    }
}

/// The code of the error reply behind a redis-rs error, if it is one.
pub(crate) fn code_of(e: &RedisError) -> Option<ServerErrorCode> {
    ErrorReply::of_error(e).map(|reply| reply.code)
}

/// An `ERR` message read as the error of a script: which script and line,
/// if the message says, and the error itself.
#[derive(Debug, PartialEq, Eq)]
struct InScript<'a> {
    /// The script's SHA1.
    sha: Option<&'a str>,
    line: Option<usize>,
    /// The error without the script's place.
    body: &'a str,
    /// Whether the server wrapped the error (before Redis 7): then the
    /// body may be another error reply, with its own code.
    wrapped: bool,
}

impl<'a> InScript<'a> {
    /// Reads the two grammars servers use: before Redis 7,
    /// `Error running script (call to f_<sha>): @user_script:<line>:
    /// [@user_script: <line>: ]<body>`; from Redis 7, `<body> script:
    /// <sha>, on @user_script:<line>.`. Any other message is all body.
    fn parse(message: &'a str) -> InScript<'a> {
        if let Some((sha, rest)) = message
            .strip_prefix("Error running script (call to f_")
            .and_then(|rest| rest.split_once("): "))
        {
            let (mut body, mut line) = (rest, None);
            // One `@user_script:N:` layer or more, with or without a space.
            while let Some((at, rest)) = body
                .strip_prefix("@user_script:")
                .and_then(|layer| layer.split_once(": "))
            {
                line = line.or_else(|| at.trim().parse().ok());
                body = rest;
            }
            return InScript {
                sha: is_sha(sha).then_some(sha),
                line,
                body: body.trim_end(),
                wrapped: true,
            };
        }
        if let Some((body, place)) = message.rsplit_once(" script: ")
            && let Some((sha, at)) = place.split_once(", on @user_script:")
        {
            let at = at.trim_end();
            if is_sha(sha) {
                return InScript {
                    sha: Some(sha),
                    line: at.strip_suffix('.').unwrap_or(at).parse().ok(),
                    body,
                    wrapped: false,
                };
            }
        }
        InScript {
            sha: None,
            line: None,
            body: message,
            wrapped: false,
        }
    }

    /// If the body is a refusal by the ACL, what it names (`None` inside:
    /// it does not say).
    fn acl_refusal(&self) -> Option<Option<Refused>> {
        // Redis 7.0 (and 6.x, wrapped).
        const UNNAMED: &str = "The user executing the script can't run this command or subcommand";
        // Redis 7.2 and later, and Valkey: a NOPERM message follows.
        const NAMED: &str = "ACL failure in script: ";
        if self.body.starts_with(UNNAMED) {
            return Some(None);
        }
        let named = self.body.strip_prefix(NAMED)?;
        Some(Refused::parse(named))
    }

    /// The error reply a wrapped body is (`-READONLY You can't ...`, or
    /// `WRONGTYPE Operation ...`): its code (an upper-case word) and the
    /// rest.
    fn wrapped_error(&self) -> Option<(&'a str, &'a str)> {
        if !self.wrapped {
            return None;
        }
        let body = self.body.strip_prefix('-').unwrap_or(self.body);
        let (code, message) = body.split_once(' ').unwrap_or((body, ""));
        let is_code = code.len() >= 2
            && code
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        is_code.then(|| (code, message.trim_end()))
    }

    /// A `NOPERM` message for a refusal inside this script: `this user has
    /// no permissions to run the 'incr' command (in redlease's acquire
    /// script, line 43)`. A refusal that names nothing is named from the
    /// script's line, when the script is the library's.
    fn refusal_message(&self, refused: Option<Refused>, message: &str) -> String {
        let script = self.sha.and_then(crate::protocol::lua::script_by_hash);
        let from_line = || {
            let (_, code) = script?;
            let text = code.lines().nth(self.line?.checked_sub(1)?)?;
            called_command(text).map(Refused::Command)
        };
        let place = match (script, self.line) {
            (Some((name, _)), Some(line)) => format!("in redlease's {name} script, line {line}"),
            (Some((name, _)), None) => format!("in redlease's {name} script"),
            (None, _) => "in a script".to_string(),
        };
        match refused.or_else(from_line) {
            Some(Refused::Command(command)) => {
                format!("this user has no permissions to run the '{command}' command ({place})")
            }
            Some(Refused::Key) => format!("this user has no permissions to access a key ({place})"),
            Some(Refused::Channel) => {
                format!("this user has no permissions to access a channel ({place})")
            }
            None => format!(
                "this user may not run a command {place}: it needs every command the ACL \
                 rule grants ({})",
                message.trim_end()
            ),
        }
    }
}

/// Whether `text` can be a script's SHA1 (hex digits).
fn is_sha(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The command a line of Lua calls by name (`redis.call('INCR', ...)`),
/// lower-cased as the ACL names it.
fn called_command(line: &str) -> Option<String> {
    let (_, rest) = line.split_once("call('")?;
    let (command, _) = rest.split_once('\'')?;
    (!command.is_empty()).then(|| command.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(code: &str, message: &str) -> NodeErrorKind {
        ErrorReply::read(code, message).into_kind()
    }

    fn redis(code: ServerErrorCode, message: &str) -> NodeErrorKind {
        NodeErrorKind::Redis {
            code,
            message: message.into(),
        }
    }

    #[test]
    fn codes_are_read_whole() {
        use ServerErrorCode::*;
        for (code, read_as) in [
            ("NOPERM", NoPerm),
            ("READONLY", ReadOnly),
            ("OOM", Oom),
            ("WRONGTYPE", WrongType),
            ("LOADING", Loading),
            ("MOVED", Moved),
            ("NOTACODE", Other("NOTACODE".into())),
        ] {
            assert_eq!(ErrorReply::read(code, "x").code, read_as);
        }
        // A plain ERR that only mentions a code stays ERR.
        assert_eq!(
            read("ERR", "READONLY is not a command here"),
            redis(Err, "READONLY is not a command here")
        );
    }

    #[test]
    fn script_errors_of_redis_before_7_keep_their_own_code() {
        use ServerErrorCode::*;
        // As Redis 5.0 and 6.0 reply (seen on 5.0.7 and 6.0.9).
        let cases = [
            (
                "Error running script (call to f_b284abde348b693c7c198725c2b7cae366f4dcd4): \
                 @user_script:7: @user_script: 7: -READONLY You can't write against a read \
                 only replica.",
                redis(ReadOnly, "You can't write against a read only replica."),
            ),
            (
                "Error running script (call to f_8fb8): @user_script:1: @user_script: 1: -OOM \
                 command not allowed when used memory > 'maxmemory'. ",
                redis(Oom, "command not allowed when used memory > 'maxmemory'."),
            ),
            (
                "Error running script (call to f_d3c2): @user_script:1: WRONGTYPE Operation \
                 against a key holding the wrong kind of value",
                redis(
                    WrongType,
                    "Operation against a key holding the wrong kind of value",
                ),
            ),
        ];
        for (message, unwrapped) in cases {
            assert_eq!(read("ERR", message), unwrapped);
        }
    }

    #[test]
    fn other_errors_are_left_as_they_are() {
        for (code, message) in [
            // No code inside: stays a plain ERR.
            (
                "ERR",
                "Error running script (call to f_7ae0): @user_script:1: @user_script: 1: \
                 Unknown Redis command called from Lua script",
            ),
            // Redis 7 and Valkey already give the inner code.
            (
                "READONLY",
                "You can't write against a read only replica. script: x",
            ),
            ("ERR", "unknown command 'HELLO'"),
            // Not the wrapper's grammar: no code is taken from it.
            ("ERR", "Error running script: -OOM x"),
            ("ERR", "Error running script (call to f_1): @user_script:1"),
            ("ERR", ""),
        ] {
            assert_eq!(
                read(code, message),
                redis(ServerErrorCode::from_code(code), message)
            );
        }
    }

    #[test]
    fn the_place_in_a_script_is_read_from_either_grammar() {
        let old = InScript::parse(
            "Error running script (call to f_ab12): @user_script:7: @user_script: 7: -OOM x",
        );
        assert_eq!(
            old,
            InScript {
                sha: Some("ab12"),
                line: Some(7),
                body: "-OOM x",
                wrapped: true,
            }
        );
        let new = InScript::parse(
            "ACL failure in script: No permissions to access a key script: ab12, on \
             @user_script:45.",
        );
        assert_eq!(
            new,
            InScript {
                sha: Some("ab12"),
                line: Some(45),
                body: "ACL failure in script: No permissions to access a key",
                wrapped: false,
            }
        );
        // " script: " inside the body without a place after it.
        let bare = InScript::parse("ACL failure in script: User u has no permissions");
        assert_eq!((bare.sha, bare.line), (None, None));
        assert_eq!(
            bare.body,
            "ACL failure in script: User u has no permissions"
        );
    }

    #[test]
    fn a_command_refused_inside_a_lock_script_is_named_from_its_line() {
        let acquire = crate::protocol::lua::ACQUIRE.code();
        let line = acquire
            .lines()
            .position(|l| called_command(l).as_deref() == Some("incr"))
            .expect("the acquire script counts with INCR")
            + 1;
        let sha = ::redis::Script::new(acquire).get_hash().to_string();
        // Redis 7.0, and Redis 6.x's wrapped form.
        for message in [
            format!(
                "The user executing the script can't run this command or subcommand script: \
                 {sha}, on @user_script:{line}."
            ),
            format!(
                "Error running script (call to f_{sha}): @user_script:{line}: @user_script: \
                 {line}: The user executing the script can't run this command or subcommand "
            ),
        ] {
            let kind = read("ERR", &message);
            assert!(kind.is_permission_refused(), "{kind:?}");
            assert_eq!(kind.missing_permission().as_deref(), Some("+incr"));
            let shown = kind.to_string();
            let place = format!("acquire script, line {line}");
            assert!(shown.split_once(&place).is_some(), "{shown}");
        }
        // A script not of the library: still a permission refusal, named
        // as the server said.
        let kind = read(
            "ERR",
            "The user executing the script can't run this command or subcommand script: \
             0123abcd, on @user_script:1.",
        );
        assert!(kind.is_permission_refused());
        assert_eq!(kind.missing_permission(), None);
        assert!(kind.to_string().split_once("doctor").is_some(), "{kind}");
        // Later versions name the command, or the key, themselves.
        let kind = read(
            "ERR",
            "ACL failure in script: User app has no permissions to run the 'time' command \
             script: 0123abcd, on @user_script:45.",
        );
        assert_eq!(kind.missing_permission().as_deref(), Some("+time"));
        let kind = read(
            "ERR",
            &format!(
                "ACL failure in script: No permissions to access a key script: {sha}, on \
                 @user_script:{line}."
            ),
        );
        assert!(kind.is_permission_refused());
        assert!(
            kind.missing_permission().unwrap().starts_with('~'),
            "{kind}"
        );
    }

    #[test]
    fn a_syntax_error_is_told_by_its_first_word() {
        assert!(ErrorReply::read("ERR", "syntax error").is_syntax_error());
        assert!(
            !ErrorReply::read("ERR", "unknown command 'x', with args: syntax").is_syntax_error()
        );
        assert!(!ErrorReply::read("WRONGTYPE", "syntax error").is_syntax_error());
    }
}
