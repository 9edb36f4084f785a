//! The code of a server's error reply, as a value: what the library and
//! its callers match on, never the reply's text. Also what an ACL refusal
//! (`NOPERM`) says was refused, read from its message by a small grammar.

use std::fmt;

/// The code of an error reply: its first word (`-WRONGTYPE Operation
/// against a key ...`), one variant per code the library or its callers
/// act on, and [`Other`](Self::Other) for the rest. For an error a command
/// inside a lock script raised, it is that command's code on every server
/// version (Redis before 7 wraps it in a generic `ERR`), and a refusal by
/// the ACL inside a script is [`NoPerm`](Self::NoPerm) on every version.
///
/// ```
/// use redlease::{NodeErrorKind, ServerErrorCode};
/// fn retry_later(kind: &NodeErrorKind) -> bool {
///     matches!(
///         kind,
///         NodeErrorKind::Redis {
///             code: ServerErrorCode::Loading | ServerErrorCode::Busy | ServerErrorCode::TryAgain,
///             ..
///         }
///     )
/// }
/// assert_eq!(ServerErrorCode::ReadOnly.as_str(), "READONLY");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServerErrorCode {
    /// `ERR`: a generic error (unknown command, wrong arguments, ...).
    Err,
    /// `NOPERM`: the user's ACL rule does not allow the command, key or
    /// channel (see [`NodeErrorKind::missing_permission`](crate::NodeErrorKind::missing_permission)).
    NoPerm,
    /// `NOAUTH`: the server wants a password.
    NoAuth,
    /// `WRONGPASS`: the user name or password is wrong.
    WrongPass,
    /// `READONLY`: a replica (a demoted primary) refused a write.
    ReadOnly,
    /// `OOM`: the server is at `maxmemory` and refuses writes.
    Oom,
    /// `WRONGTYPE`: the key holds another type's value, not a lock's.
    WrongType,
    /// `NOSCRIPT`: the server does not have the script (the library sends
    /// it whole then, so this never reaches a caller).
    NoScript,
    /// `BUSY`: a script runs too long and blocks the server.
    Busy,
    /// `LOADING`: the server is loading its data set.
    Loading,
    /// `MASTERDOWN`: a replica lost its primary.
    MasterDown,
    /// `CLUSTERDOWN`: the cluster does not serve the slot.
    ClusterDown,
    /// `TRYAGAIN`: a slot is migrating; try again.
    TryAgain,
    /// `MOVED`: the slot is served by another node.
    Moved,
    /// `ASK`: the slot is migrating to another node.
    Ask,
    /// `CROSSSLOT`: keys of one request are in different slots.
    CrossSlot,
    /// Any other code, as the server sent it.
    Other(String),
}

impl ServerErrorCode {
    /// The code as the server spells it.
    ///
    /// ```
    /// assert_eq!(redlease::ServerErrorCode::Oom.as_str(), "OOM");
    /// ```
    pub fn as_str(&self) -> &str {
        match self {
            Self::Err => "ERR",
            Self::NoPerm => "NOPERM",
            Self::NoAuth => "NOAUTH",
            Self::WrongPass => "WRONGPASS",
            Self::ReadOnly => "READONLY",
            Self::Oom => "OOM",
            Self::WrongType => "WRONGTYPE",
            Self::NoScript => "NOSCRIPT",
            Self::Busy => "BUSY",
            Self::Loading => "LOADING",
            Self::MasterDown => "MASTERDOWN",
            Self::ClusterDown => "CLUSTERDOWN",
            Self::TryAgain => "TRYAGAIN",
            Self::Moved => "MOVED",
            Self::Ask => "ASK",
            Self::CrossSlot => "CROSSSLOT",
            Self::Other(code) => code,
        }
    }

    /// The variant of the code word `code`, exactly as the server sent it
    /// (the first word of the reply, without the `-`); an unknown code is
    /// [`Other`](Self::Other).
    ///
    /// ```
    /// use redlease::ServerErrorCode;
    /// assert_eq!(ServerErrorCode::from_code("NOAUTH"), ServerErrorCode::NoAuth);
    /// assert_eq!(ServerErrorCode::from_code("X"), ServerErrorCode::Other("X".into()));
    /// ```
    pub fn from_code(code: &str) -> ServerErrorCode {
        match code {
            "ERR" => Self::Err,
            "NOPERM" => Self::NoPerm,
            "NOAUTH" => Self::NoAuth,
            "WRONGPASS" => Self::WrongPass,
            "READONLY" => Self::ReadOnly,
            "OOM" => Self::Oom,
            "WRONGTYPE" => Self::WrongType,
            "NOSCRIPT" => Self::NoScript,
            "BUSY" => Self::Busy,
            "LOADING" => Self::Loading,
            "MASTERDOWN" => Self::MasterDown,
            "CLUSTERDOWN" => Self::ClusterDown,
            "TRYAGAIN" => Self::TryAgain,
            "MOVED" => Self::Moved,
            "ASK" => Self::Ask,
            "CROSSSLOT" => Self::CrossSlot,
            other => Self::Other(other.to_string()),
        }
    }
}

impl fmt::Display for ServerErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an ACL refusal (`NOPERM`) says was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// A command, as the ACL names it (`pttl`, `pubsub|numsub`).
    Command(String),
    /// A key (the reply does not say which, or the library does not need
    /// to: every lock key has the Locker's prefix).
    Key,
    /// A pub/sub channel.
    Channel,
}

impl Refused {
    /// Reads a `NOPERM` message, whose grammar is `... permissions to`
    /// followed by `run the '<command>' command ...` (Redis 6 and later)
    /// or `access <object>`, the object being `a key`, `the '<name>' key`
    /// or `one of the keys used as arguments` (likewise for channels).
    /// `None` for any other message.
    pub(crate) fn parse(message: &str) -> Option<Refused> {
        let (_, what) = message.split_once("permissions to ")?;
        if let Some(rest) = what.strip_prefix("run the '") {
            let (command, _) = rest.split_once('\'')?;
            let named = !command.is_empty() && !command.contains(char::is_whitespace);
            return named.then(|| Refused::Command(command.to_ascii_lowercase()));
        }
        let object = what.strip_prefix("access ")?;
        let noun = if let Some(quoted) = object.strip_prefix("the '") {
            quoted.rsplit_once("' ")?.1
        } else if let Some(rest) = object.strip_prefix("one of the ") {
            rest
        } else {
            object.strip_prefix("a ")?
        };
        let noun = noun.split([' ', '.', ',', ')']).next()?;
        match noun {
            "key" | "keys" => Some(Refused::Key),
            "channel" | "channels" => Some(Refused::Channel),
            _ => None,
        }
    }

    /// The right an `ACL SETUSER` rule needs for it: `+<command>`, or the
    /// key or channel pattern with a word on what it must cover.
    pub(crate) fn right(&self) -> String {
        match self {
            Refused::Command(command) => format!("+{command}"),
            Refused::Key => "~<prefix>* (the lock keys' pattern)".to_string(),
            Refused::Channel => "&<prefix>* (the release channels' pattern)".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_code_reads_back_as_it_is_spelled() {
        for code in [
            "ERR",
            "NOPERM",
            "NOAUTH",
            "WRONGPASS",
            "READONLY",
            "OOM",
            "WRONGTYPE",
            "NOSCRIPT",
            "BUSY",
            "LOADING",
            "MASTERDOWN",
            "CLUSTERDOWN",
            "TRYAGAIN",
            "MOVED",
            "ASK",
            "CROSSSLOT",
            "EXECABORT",
        ] {
            assert_eq!(ServerErrorCode::from_code(code).as_str(), code);
        }
        assert_eq!(
            ServerErrorCode::from_code("EXECABORT"),
            ServerErrorCode::Other("EXECABORT".into())
        );
        // Codes are matched whole and as sent, never by a part.
        assert_eq!(
            ServerErrorCode::from_code("READONLYX"),
            ServerErrorCode::Other("READONLYX".into())
        );
        assert_eq!(
            ServerErrorCode::from_code("readonly"),
            ServerErrorCode::Other("readonly".into())
        );
    }

    #[test]
    fn a_refusal_says_what_was_refused() {
        let command = |c: &str| Some(Refused::Command(c.into()));
        for (message, refused) in [
            // Redis 7.0 and later, and 6.x.
            (
                "User app has no permissions to run the 'pttl' command",
                command("pttl"),
            ),
            (
                "this user has no permissions to run the 'PTTL' command or its subcommand",
                command("pttl"),
            ),
            (
                "User app has no permissions to run the 'pubsub|numsub' command",
                command("pubsub|numsub"),
            ),
            ("No permissions to access a key", Some(Refused::Key)),
            ("No permissions to access the 'a b' key", Some(Refused::Key)),
            (
                "this user has no permissions to access one of the keys used as arguments",
                Some(Refused::Key),
            ),
            ("No permissions to access a channel", Some(Refused::Channel)),
            (
                "No permissions to access the 'app:{x}:released' channel",
                Some(Refused::Channel),
            ),
            (
                "this user has no permissions to access one of the channels used as arguments",
                Some(Refused::Channel),
            ),
            // What the library writes for a refusal inside a script.
            (
                "this user has no permissions to run the 'incr' command (in redlease's \
                 acquire script, line 43)",
                command("incr"),
            ),
            (
                "this user has no permissions to access a key (in a script)",
                Some(Refused::Key),
            ),
            // Nothing said, or something else.
            ("no permissions to run the '' command", None),
            ("no permissions to run the 'a b' command", None),
            ("no permissions to access a database", None),
            ("this user may not run a command in a script", None),
            ("", None),
        ] {
            assert_eq!(Refused::parse(message), refused, "{message}");
        }
        assert_eq!(Refused::Command("pttl".into()).right(), "+pttl");
        assert!(Refused::Key.right().starts_with('~'));
        assert!(Refused::Channel.right().starts_with('&'));
    }
}
