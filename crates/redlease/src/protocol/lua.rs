//! The library's Lua scripts, each declared once: its text (the files
//! beside this module), its SHA1 for `EVALSHA`, and its name in messages.
//! Every exchange that runs one builds its call through [`Lua`].

use std::sync::LazyLock;

use redis::Cmd;

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

// EVALSHA first, SCRIPT LOAD and retry on NOSCRIPT (after a restart or
// SCRIPT FLUSH): `Conn::eval` does both, so NOSCRIPT never surfaces.
pub(crate) static ACQUIRE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/acquire.lua")));
// Release goes as EVALSHA once this client has seen the node run it, and
// whole (EVAL) before: a whole script is one command, never a NOSCRIPT
// round trip, so it is on the wire as soon as it is first polled, and
// this client's next request to the node (say, acquiring the lock again
// right after releasing it) queues behind it even when `release` returned
// at the quorum. EVALSHA spares Redis hashing the text on every release
// (about half the release's cost); after a server lost its scripts (a
// restart, SCRIPT FLUSH) the first one is retried whole, which may then
// run after that next request: a delay, not an error.
pub(crate) static RELEASE: LazyLock<Lua> = LazyLock::new(|| Lua::new(RELEASE_CODE));
const RELEASE_CODE: &str = include_str!("scripts/release.lua");
// On a cluster the release is announced on the lock's shard channel: the
// same script with SPUBLISH (a separate script, so that no release carries
// the command's name as an argument). Built once per process.
pub(crate) static RELEASE_SHARDED: LazyLock<Lua> = LazyLock::new(|| {
    let code = RELEASE_CODE.replace("'PUBLISH'", "'SPUBLISH'");
    Lua::new(code.leak())
});
pub(crate) const FORCE_RELEASE: &str = include_str!("scripts/force_release.lua");
pub(crate) static RAISE_FENCE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/raise_fence.lua")));
pub(crate) static REFUSED: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/refused.lua")));
pub(crate) static EXTEND: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/extend.lua")));

/// The library's script with this SHA1, by its name in messages, and its
/// text: an ACL refusal inside a script names only the script's SHA1 and
/// line (see `server_error`).
pub(crate) fn script_by_hash(sha: &str) -> Option<(&'static str, &'static str)> {
    static FORCE: LazyLock<Lua> = LazyLock::new(|| Lua::new(FORCE_RELEASE));
    let scripts: [(&str, &Lua); 8] = [
        ("acquire", &ACQUIRE),
        ("release", &RELEASE),
        ("release", &RELEASE_SHARDED),
        ("force-release", &FORCE),
        ("fencing write-back", &RAISE_FENCE),
        ("refused-acquire follow-up", &REFUSED),
        ("extend", &EXTEND),
        ("renewal", &EXTEND_MANY),
    ];
    scripts
        .into_iter()
        .find(|(_, lua)| lua.hash().eq_ignore_ascii_case(sha))
        .map(|(name, lua)| (name, lua.code()))
}

// A batch of renewals: compare-and-`PEXPIRE` for many leases at once.
pub(crate) static EXTEND_MANY: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/extend_many.lua")));
