//! Lease handles on the command line: `redlease acquire` prints one, and
//! `extend` and `release --handle` take it from `--handle` or from
//! `REDLEASE_HANDLE`. A handle is a secret like the lease's token (whoever
//! has it can release the lock): it is never logged or shown, not in
//! Debug output either.

use std::ffi::OsString;
use std::fmt;
use std::time::Duration;

use redlease::{Durability, Error, Locker};

use crate::errors::chain;
use crate::exit::{self, Exit};
use crate::nodes::NodesArg;

/// The environment variable a handle is read from when `--handle` is not
/// given: `export REDLEASE_HANDLE=$(redlease acquire ...)`.
pub const ENV: &str = "REDLEASE_HANDLE";

/// A lease handle's text, as given.
#[derive(Clone)]
pub struct Handle(String);

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No text: a handle in the logs would release the lease.
        f.write_str("Handle(..)")
    }
}

/// `--handle H`: any text (the library reads it, and says why one is not a
/// handle); the newline `$(...)` or a file may leave is dropped.
pub fn parse(text: &str) -> Result<Handle, String> {
    Ok(Handle(text.trim().to_string()))
}

impl Handle {
    /// The handle `--handle` gave, else `REDLEASE_HANDLE`'s; a usage error
    /// when neither gives one (an empty one too: the `$(redlease acquire)`
    /// it came from failed).
    pub fn given(flag: Option<Handle>) -> Result<Handle, Exit> {
        let (handle, from) = match flag {
            Some(handle) => (handle, "--handle"),
            None => (from_env(std::env::var_os(ENV))?, ENV),
        };
        if handle.0.is_empty() {
            return Err(Exit::with(
                exit::USAGE,
                format!(
                    "{from} is empty: no lease handle (did the `redlease acquire` it came from \
                     fail?)"
                ),
            ));
        }
        Ok(handle)
    }

    /// The text, for the library.
    pub fn text(&self) -> &str {
        &self.0
    }

    /// What the handle's text tells before the library reads it (see
    /// [`Facts`]); `None` for a text that does not read so, which the
    /// library then refuses, saying why.
    pub fn facts(&self) -> Option<Facts> {
        let info = redlease::HandleInfo::parse(&self.0).ok()?;
        Some(Facts {
            ttl: info.ttl,
            prefix: info.key_prefix,
            names: info.names,
        })
    }

    /// A Locker that takes the handle: over `nodes`, with its key prefix,
    /// a TTL as long as the longer of its own and `ttl` (`extend --ttl`),
    /// so that the restart quarantine covers both, and `durability` for
    /// its writes. No I/O.
    pub fn locker(
        &self,
        nodes: &NodesArg,
        ttl: Option<Duration>,
        durability: Durability,
    ) -> Result<Locker, Exit> {
        let (_, mut builder) = nodes.builder()?;
        let facts = self.facts();
        if let Some(facts) = &facts {
            builder = builder.key_prefix(facts.prefix.as_str());
        }
        if let Some(longest) = facts.map(|f| f.ttl).into_iter().chain(ttl).max() {
            builder = builder.ttl(longest);
        }
        builder
            .durability(durability)
            .build()
            .map_err(|e| Exit::with(exit::USAGE, chain(&e)))
    }
}

/// What a Locker must be built with to take a handle, and what it holds,
/// for messages: read from its text. The library checks the whole handle
/// when it takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The TTL the lease was taken with.
    pub ttl: Duration,
    /// The key prefix of its Locker.
    pub prefix: String,
    /// Its names, sorted.
    pub names: Vec<String>,
}

impl Facts {
    /// The names, for messages: `"a"`, or `"a", "b"`.
    pub fn listed(&self) -> String {
        listed(self.names.iter().map(String::as_str))
    }
}

/// Names as messages show them: `"a", "b"`.
pub fn listed<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let quoted: Vec<String> = names.map(|n| format!("{n:?}")).collect();
    quoted.join(", ")
}

/// The handle in `REDLEASE_HANDLE` (`value`), or why there is none.
fn from_env(value: Option<OsString>) -> Result<Handle, Exit> {
    match value.map(OsString::into_string) {
        Some(Ok(text)) => parse(&text).map_err(|why| Exit::with(exit::USAGE, why)),
        Some(Err(_)) => Err(Exit::with(
            exit::USAGE,
            format!("{ENV} is not UTF-8 text: not a lease handle"),
        )),
        None => Err(Exit::with(
            exit::USAGE,
            format!(
                "no lease handle: give --handle HANDLE or set {ENV} to the handle \
                 `redlease acquire` printed"
            ),
        )),
    }
}

/// The exit for a handle the library could not extend or release: a
/// stale handle (the lease is gone) is [`exit::LOST`], never a success;
/// text that is not a handle a usage error. `done` says what was not done.
pub fn failed(e: &Error, done: &str) -> Exit {
    match e {
        Error::InvalidInput { .. } => Exit::with(exit::USAGE, chain(e)),
        Error::NotHeld { .. } => Exit::with(
            exit::LOST,
            format!(
                "{}: the handle is stale (its lease expired, was released, or was taken \
                 over); {done}",
                chain(e)
            ),
        ),
        Error::NoQuorum { .. } | Error::ValidityExhausted { .. } => Exit::with(
            exit::UNAVAILABLE,
            format!("{}; {done} (`redlease doctor` checks the nodes)", chain(e)),
        ),
        _ => Exit::with(exit::INTERNAL, format!("{}; {done}", chain(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_the_handle() {
        let handle = parse(" rlh1.x.60000.secret.72.61.1\n").unwrap();
        assert_eq!(handle.text(), "rlh1.x.60000.secret.72.61.1");
        assert_eq!(format!("{handle:?}"), "Handle(..)");
        assert_eq!(format!("{:?}", Some(handle)), "Some(Handle(..))");
    }

    #[test]
    fn the_ttl_prefix_and_names_are_read_from_the_text() {
        // "redlease:" and the names "a.b", "c-d", hex-encoded, fencing
        // tokens 7 and 9, and the check of all that.
        let token = "0".repeat(48);
        let body = format!("rlh2.x.300000.{token}.7265646c656173653a.612e62-632d64.7-9");
        let text = format!("{body}.423bb43bfb498b5e");
        let facts = Handle(text.clone()).facts().unwrap();
        assert_eq!(facts.ttl, Duration::from_secs(300));
        assert_eq!(facts.prefix, "redlease:");
        assert_eq!(facts.names, ["a.b", "c-d"]);
        assert_eq!(facts.listed(), r#""a.b", "c-d""#);
        for bad in [
            "",
            "hello",
            "rlh2.x.1.t.61.61.",
            "rlh1.x.soon.t.61.61.",
            "rlh1.x.1.t.6.61.",
            // Cut short, edited (fencing token 8 for 7), unchecked.
            &text[..text.len() - 3],
            &text.replacen(".7-9.", ".8-9.", 1),
            &body,
        ] {
            assert_eq!(Handle(bad.into()).facts(), None, "{bad}");
        }
    }

    #[test]
    fn no_handle_and_an_empty_one_are_usage_errors() {
        let missing = from_env(None).unwrap_err();
        let empty = Handle::given(Some(parse("").unwrap())).unwrap_err();
        for (exit, says) in [(missing, "give --handle"), (empty, "--handle is empty")] {
            assert_eq!(exit.code, exit::USAGE, "{exit:?}");
            assert!(exit.message.contains(says), "{exit:?}");
        }
    }
}
