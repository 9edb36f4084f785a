//! Error replies of a server, read once: an error a command inside a lock
//! script raised keeps its own code on every server version, and an ACL
//! refusal inside a script becomes `NOPERM` naming the command.

use crate::core::node_error::{denied_command, NodeErrorKind};

/// The error a command inside a lock script raised, with its own code.
/// Redis 7 and later (and Valkey) pass it on as it is, but Redis before
/// 7 wraps it in a generic `ERR`, e.g. `ERR Error running script (call
/// to f_<sha>): @user_script:7: @user_script: 7: -READONLY You can't
/// write against a read only replica.` or `...: @user_script:1:
/// WRONGTYPE Operation against a key holding the wrong kind of value`;
/// callers that match on `READONLY` or `OOM` must see the same code on
/// every server. Anything else is left as it is.
///
/// A command inside a lock script that the ACL refused comes as `ERR`
/// on every version, with words that differ between them and without
/// the command's name before Redis 7.2 (`The user executing the script
/// can't run this command or subcommand script: <sha>, on
/// @user_script:43.`): it becomes `NOPERM`, and its message names the
/// command (read from the script's line when the reply does not) and
/// the script.
pub(crate) fn unwrap_script_error(kind: NodeErrorKind) -> NodeErrorKind {
    let NodeErrorKind::Redis { code, message } = &kind else {
        return kind;
    };
    if code == "ERR" {
        if let Some(message) = script_acl_refusal(message) {
            return NodeErrorKind::Redis {
                code: "NOPERM".into(),
                message,
            };
        }
    }
    match (code.as_str(), inner_script_error(message)) {
        ("ERR", Some((code, message))) => NodeErrorKind::Redis {
            code: code.to_string(),
            message: message.to_string(),
        },
        _ => kind,
    }
}

/// A refusal by the ACL of a command inside a script (`ERR` on every
/// version), as a `NOPERM` message that names the command and the script:
/// `this user has no permissions to run the 'incr' command (in redlease's
/// acquire script, line 43)`. `None` for any other error.
fn script_acl_refusal(message: &str) -> Option<String> {
    const REDIS_7_0: &str = "can't run this command or subcommand";
    const REDIS_7_2: &str = "ACL failure in script";
    if !message.contains(REDIS_7_0) && !message.contains(REDIS_7_2) {
        return None;
    }
    // `script: <sha>, on @user_script:N.` (7.0 and later), or `(call to
    // f_<sha>): @user_script:N: ...` (before 7).
    let sha = message
        .split_once("(call to f_")
        .or_else(|| message.split_once(" script: "))
        .map(|(_, rest)| rest)
        .map(|rest| {
            rest.split(|c: char| !c.is_ascii_hexdigit())
                .next()
                .unwrap_or_default()
        });
    let line = message.split("@user_script:").nth(1).and_then(|rest| {
        let digits: String = rest
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse::<usize>().ok()
    });
    let script = sha.and_then(crate::protocol::lua::script_by_hash);
    let named = denied_command(message);
    let from_line = || {
        let (_, code) = script?;
        called_command(code.lines().nth(line?.checked_sub(1)?)?)
    };
    let place = match (script, line) {
        (Some((name, _)), Some(line)) => format!("in redlease's {name} script, line {line}"),
        (Some((name, _)), None) => format!("in redlease's {name} script"),
        (None, _) => "in a script".to_string(),
    };
    Some(match named.or_else(from_line) {
        Some(command) => {
            format!("this user has no permissions to run the '{command}' command ({place})")
        }
        None => format!(
            "this user may not run a command {place}: it needs every command the ACL \
             rule grants ({})",
            message.trim_end()
        ),
    })
}

/// The command a line of Lua calls by name (`redis.call('INCR', ...)`),
/// lower-cased as the ACL names it.
fn called_command(line: &str) -> Option<String> {
    let (_, rest) = line.split_once("call('")?;
    let (command, _) = rest.split_once('\'')?;
    (!command.is_empty()).then(|| command.to_ascii_lowercase())
}

/// The code and message of the error inside a pre-7 Redis "Error running
/// script" reply, if it carries one (an upper-case first word).
fn inner_script_error(message: &str) -> Option<(&str, &str)> {
    let mut rest = message
        .strip_prefix("Error running script")?
        .split_once("): ")?
        .1;
    // One `@user_script:N:` layer or more, with or without a space.
    while let Some(layer) = rest.strip_prefix("@user_script:") {
        rest = layer.split_once(": ")?.1;
    }
    let rest = rest.strip_prefix('-').unwrap_or(rest);
    let (code, message) = rest.split_once(' ').unwrap_or((rest, ""));
    let is_code = code.len() >= 2
        && code
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    is_code.then(|| (code, message.trim_end()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::node_error::tests::redis;

    #[test]
    fn script_errors_of_redis_before_7_keep_their_own_code() {
        // As Redis 5.0 and 6.0 reply (seen on 5.0.7 and 6.0.9).
        let cases = [
            (
                "Error running script (call to f_b284abde348b693c7c198725c2b7cae366f4dcd4): \
                 @user_script:7: @user_script: 7: -READONLY You can't write against a read \
                 only replica.",
                redis("READONLY", "You can't write against a read only replica."),
            ),
            (
                "Error running script (call to f_8fb8): @user_script:1: @user_script: 1: -OOM \
                 command not allowed when used memory > 'maxmemory'. ",
                redis("OOM", "command not allowed when used memory > 'maxmemory'."),
            ),
            (
                "Error running script (call to f_d3c2): @user_script:1: WRONGTYPE Operation \
                 against a key holding the wrong kind of value",
                redis(
                    "WRONGTYPE",
                    "Operation against a key holding the wrong kind of value",
                ),
            ),
        ];
        for (message, unwrapped) in cases {
            assert_eq!(unwrap_script_error(redis("ERR", message)), unwrapped);
        }
    }

    #[test]
    fn other_errors_are_left_as_they_are() {
        for kind in [
            // No code inside: stays a plain ERR.
            redis(
                "ERR",
                "Error running script (call to f_7ae0): @user_script:1: @user_script: 1: \
                 Unknown Redis command called from Lua script",
            ),
            // Redis 7 and Valkey already give the inner code.
            redis(
                "READONLY",
                "You can't write against a read only replica. script: x",
            ),
            redis("ERR", "unknown command 'HELLO'"),
            NodeErrorKind::Protocol("Error running script (call to f_1): -OOM x".into()),
        ] {
            assert_eq!(unwrap_script_error(kind.clone()), kind);
        }
    }

    #[test]
    fn a_command_refused_inside_a_lock_script_is_named_from_its_line() {
        let acquire = crate::protocol::lua::ACQUIRE.code();
        let line = acquire
            .lines()
            .position(|l| l.contains("redis.call('INCR'"))
            .expect("the acquire script counts with INCR")
            + 1;
        let sha = redis::Script::new(acquire).get_hash().to_string();
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
            let kind = unwrap_script_error(redis("ERR", &message));
            assert!(kind.is_permission_refused(), "{kind:?}");
            assert_eq!(kind.missing_permission().as_deref(), Some("+incr"));
            assert!(
                kind.to_string()
                    .contains(&format!("acquire script, line {line}")),
                "{kind}"
            );
        }
        // A script not of the library: still a permission refusal, named
        // as the server said.
        let kind = unwrap_script_error(redis(
            "ERR",
            "The user executing the script can't run this command or subcommand script: \
             0123abcd, on @user_script:1.",
        ));
        assert!(kind.is_permission_refused());
        assert_eq!(kind.missing_permission(), None);
        assert!(kind.to_string().contains("doctor"), "{kind}");
        // Later versions name the command themselves.
        let kind = unwrap_script_error(redis(
            "ERR",
            "ACL failure in script: User app has no permissions to run the 'time' command \
             script: 0123abcd, on @user_script:45.",
        ));
        assert_eq!(kind.missing_permission().as_deref(), Some("+time"));
    }
}
