//! The library's Lua scripts, each declared once: its text (the files
//! beside this module), its SHA1 for `EVALSHA`, and its name in messages;
//! and how the scripts' arguments are encoded: a yes/no argument is a
//! [`Flag`], the pub/sub commands a [`PubSub`], a duration whole
//! milliseconds ([`millis`]). The typed requests that run the scripts
//! (in [`acquire`](super::acquire), [`lease`](super::lease) and
//! [`shared`](super::shared)) declare
//! each script's keys, arguments and reply, and build its call through
//! [`Lua`].

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Cmd, RedisWrite, ToRedisArgs, Value};

/// A Lua script run by its SHA1 (`EVALSHA`), with its text at hand for
/// loading it where it is missing.
pub(crate) struct Lua {
    code: &'static str,
    script: redis::Script,
}

impl Lua {
    pub(crate) fn new(code: &'static str) -> Lua {
        Lua {
            code,
            script: redis::Script::new(code),
        }
    }

    /// The script's SHA1, as `EVALSHA` names it.
    pub(crate) fn hash(&self) -> &str {
        self.script.get_hash()
    }

    /// The script's text.
    pub(crate) fn code(&self) -> &'static str {
        self.code
    }

    /// An `EVALSHA` of this script; `fill` adds the key count, keys and
    /// arguments.
    pub(crate) fn call(&self, fill: impl FnOnce(&mut Cmd)) -> Cmd {
        self.call_sized(12, 192, fill)
    }

    /// [`call`](Self::call) with room for `args` arguments in all and
    /// `bytes` of them, so that the command is built without growing.
    pub(crate) fn call_sized(&self, args: usize, bytes: usize, fill: impl FnOnce(&mut Cmd)) -> Cmd {
        let mut cmd = Cmd::with_capacity(args, bytes);
        cmd.arg("EVALSHA").arg(self.script.get_hash());
        fill(&mut cmd);
        cmd
    }

    /// `call` (an `EVALSHA` of this script) as an `EVAL` of its text, with
    /// the same keys and arguments.
    pub(crate) fn whole(&self, call: &Cmd) -> Cmd {
        let mut eval = redis::cmd("EVAL");
        eval.arg(self.code);
        for arg in call.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                eval.arg(bytes);
            }
        }
        eval
    }
}

/// A yes/no argument of a script, which the script compares as
/// `ARGV[n] == '1'`: written as the integer 1 or 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Flag(pub(crate) bool);

impl ToRedisArgs for Flag {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        u8::from(self.0).write_redis_args(out)
    }
}

/// How many leases `leases` holds, and the bytes of their keys, tokens and
/// TTLs as arguments (a TTL at most 20 digits).
pub(crate) fn sized<'a>(
    leases: impl Iterator<Item = (&'a str, &'a str, Duration)>,
) -> (usize, usize) {
    leases.fold((0, 0), |(n, bytes), (key, token, _)| {
        (n + 1, bytes + key.len() + token.len() + 20)
    })
}

/// A duration as the scripts and `PX` take it: whole milliseconds (a
/// fraction is dropped).
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Which pub/sub a node's release channels are on: the classic one, or
/// on a cluster the sharded one, so that a release's message stays in the
/// lock's shard. Needs `+publish` (and `+pubsub|numsub`) in a standalone
/// user's ACL rule, `+spublish` (and `+pubsub|shardnumsub`) in a
/// cluster's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PubSub {
    Classic,
    Sharded,
}

impl PubSub {
    /// The `PUBSUB` subcommand that counts a channel's subscribers.
    pub(crate) fn numsub(self) -> &'static str {
        match self {
            PubSub::Classic => "NUMSUB",
            PubSub::Sharded => "SHARDNUMSUB",
        }
    }

    /// The command that publishes on a channel.
    pub(crate) fn publish(self) -> &'static str {
        match self {
            PubSub::Classic => "PUBLISH",
            PubSub::Sharded => "SPUBLISH",
        }
    }
}

/// The error of a script's reply that is not of the shape it declares.
pub(crate) fn malformed(script: &str, reply: &Value) -> redis::ParsingError {
    format!("the {script} script returned {reply:?}").into()
}

/// A reply of 1 (`true`) or 0 (`false`) from `script`.
pub(crate) fn one_or_zero(script: &str, reply: &Value) -> Result<bool, redis::ParsingError> {
    match reply {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        other => Err(malformed(script, other)),
    }
}

// One engine for every mode and every step of a claim's life (see
// `claim`): a name's holds and its queue, engine.lua (with owner.lua,
// who refuses), in front of each step's script.
//
// EVALSHA first, SCRIPT LOAD and retry on NOSCRIPT (after a restart or
// SCRIPT FLUSH): `Conn::eval` does both, so NOSCRIPT never surfaces.
macro_rules! engine_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Lua::new(concat!(
                include_str!("scripts/owner.lua"),
                include_str!("scripts/engine.lua"),
                include_str!($file)
            ))
        })
    };
    // `$head` runs first: a common case that needs none of the engine.
    ($head:literal, $file:literal) => {
        LazyLock::new(|| {
            Lua::new(concat!(
                include_str!($head),
                include_str!("scripts/owner.lua"),
                include_str!("scripts/engine.lua"),
                include_str!($file)
            ))
        })
    };
}
pub(crate) static ACQUIRE: LazyLock<Lua> = engine_script!("scripts/acquire.lua");
// Release goes as EVALSHA once this client has seen the node run it, and
// whole (EVAL) before: a whole script is one command, never a NOSCRIPT
// round trip, so it is on the wire as soon as it is first polled, and
// this client's next request to the node (say, acquiring the lock again
// right after releasing it) queues behind it even when `release` returned
// at the quorum. EVALSHA spares Redis hashing the text on every release
// (about half the release's cost); after a server lost its scripts (a
// restart, SCRIPT FLUSH) the first one is retried whole, which may then
// run after that next request: a delay, not an error.
pub(crate) static RELEASE: LazyLock<Lua> =
    engine_script!("scripts/release_alone.lua", "scripts/release.lua");
// Renewal and extend: many holds of one kind per call.
pub(crate) static EXTEND: LazyLock<Lua> = engine_script!("scripts/extend.lua");
pub(crate) static DOWNGRADE: LazyLock<Lua> = engine_script!("scripts/downgrade.lua");
pub(crate) static LEAVE: LazyLock<Lua> = engine_script!("scripts/leave.lua");
pub(crate) static INSPECT: LazyLock<Lua> = engine_script!("scripts/inspect.lua");
// An election's leader record (see `election`).
pub(crate) static PROCLAIM: LazyLock<Lua> = engine_script!("scripts/proclaim.lua");
// The plain acquire's follow-up to a refusal (see `set_nx`).
pub(crate) static REFUSED: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/refused.lua")));
pub(crate) static RAISE_FENCE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/raise_fence.lua")));
// Sent whole (EVAL): an operator's rare command.
pub(crate) const FORCE_RELEASE: &str = include_str!("scripts/force_release.lua");

/// The library's script with this SHA1, by its name in messages, and its
/// text: an ACL refusal inside a script names only the script's SHA1 and
/// line (see `server_error`).
pub(crate) fn script_by_hash(sha: &str) -> Option<(&'static str, &'static str)> {
    static FORCE: LazyLock<Lua> = LazyLock::new(|| Lua::new(FORCE_RELEASE));
    let scripts: [(&str, &Lua); 10] = [
        ("acquire", &ACQUIRE),
        ("release", &RELEASE),
        ("extend", &EXTEND),
        ("downgrade", &DOWNGRADE),
        ("queue leave", &LEAVE),
        ("inspect", &INSPECT),
        ("proclaim", &PROCLAIM),
        ("refused-acquire follow-up", &REFUSED),
        ("fencing write-back", &RAISE_FENCE),
        ("force-release", &FORCE),
    ];
    scripts
        .into_iter()
        .find(|(_, lua)| lua.hash().eq_ignore_ascii_case(sha))
        .map(|(name, lua)| (name, lua.code()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_is_the_integer_the_scripts_compare() {
        let mut cmd = Cmd::new();
        cmd.arg(Flag(true)).arg(Flag(false));
        let args: Vec<_> = cmd
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(bytes) => bytes.to_vec(),
                _ => b"?".to_vec(),
            })
            .collect();
        assert_eq!(args, [b"1".to_vec(), b"0".to_vec()]);
        assert_eq!(millis(Duration::from_micros(1_500_900)), 1_500);
    }

    #[test]
    fn every_script_is_found_by_its_hash() {
        for (lua, name) in [
            (&*ACQUIRE, "acquire"),
            (&*RELEASE, "release"),
            (&*INSPECT, "inspect"),
        ] {
            assert_eq!(script_by_hash(lua.hash()).unwrap().0, name);
        }
        assert!(script_by_hash("0000").is_none());
    }
}
