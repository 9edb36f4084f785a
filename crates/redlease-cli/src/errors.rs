//! Errors as one line for people: the error and every cause behind it,
//! with the library's field names as the flags that set them, and what a
//! node's failure most likely means when that can be told.

use std::error::Error;
use std::fmt;

use redis::RedisError;

/// The error's message followed by `: <cause>` for each
/// [`source`](Error::source) down the chain, so that a wrapper such as
/// `redlease::Error::WaitTimeout`, which keeps its last attempt's error only
/// as its source, does not hide why it failed. A cause whose text the line
/// already contains (an error that repeats its source in its own message)
/// is not added again.
///
/// A `redlease::Error::InvalidInput` names the flag (`--key` for the
/// library's `resource`), and the nodes that failed for a reason
/// [`diagnose`] tells are named with it at the end.
pub fn chain(e: &(dyn Error + 'static)) -> String {
    let library = e.downcast_ref::<redlease::Error>();
    let mut line = match library {
        Some(redlease::Error::InvalidInput { field, reason, .. }) => {
            format!("invalid {}: {}", flag(field), flags_in(reason))
        }
        _ => e.to_string(),
    };
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        next = cause.source();
    }
    let told: Vec<String> = library
        .map(redlease::Error::node_errors)
        .unwrap_or_default()
        .iter()
        .filter_map(|failed| {
            let diagnosis = diagnose(failed)?;
            Some(format!("node {}: {diagnosis}", failed.node().index()))
        })
        .collect();
    if !told.is_empty() {
        line.push_str(&format!(" ({})", told.join("; ")));
    }
    line
}

/// The command-line flag behind a setting the library names: the flags
/// are what the person typed.
fn flag(field: &str) -> &str {
    match field {
        "resource" => "--key",
        "urls" => "--nodes",
        "key_prefix" => "--key-prefix",
        "permits" => "--permits",
        "advanced.restart_quarantine" => "--restart-quarantine",
        "durability" => "--durable",
        "ttl" => "--ttl",
        "lock_delay" => "--lock-delay",
        "owner" => "--owner",
        // Only status, release --force and doctor set it: their --timeout.
        "connect_timeout" => "--timeout",
        other => other,
    }
}

/// The library's settings a reason tells of, as the flags that set them
/// (`.allow_no_failures()` is `run --allow-no-failures`, and no replica
/// to wait for, `Durability::off()`, is no `--durable` at all).
fn flags_in(reason: &str) -> String {
    reason
        .replace(".allow_no_failures()", "--allow-no-failures")
        .replace(
            "use Durability::off()",
            "leave out --durable not to wait for replicas",
        )
        .replace(
            "raise node_timeout or lower the durability timeout",
            "raise --ttl, whose 5% is the node timeout, or lower --durable-timeout",
        )
}

/// What a node's failure means for the person at the keyboard, when that
/// can be told for sure; neither waiting nor ACL grants fix these, the URL
/// does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Diagnosis {
    /// The server wants a password and got none (`NOAUTH`).
    NeedsPassword,
    /// The server refused the user name or password (`WRONGPASS`, or
    /// `AUTH` refused).
    WrongPassword,
    /// What answered is no Redis server: its reply does not parse.
    NotRedis,
    /// A `redis://` URL, the server closed the connection before any
    /// reply, and it answers the start of a TLS handshake: it serves only
    /// TLS on the port.
    SpeaksTls,
    /// A `rediss://` URL, and the server answers plain text on the port.
    SpeaksPlain,
}

impl fmt::Display for Diagnosis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Diagnosis::NeedsPassword => {
                "needs a password: put it in the URL, redis://user:password@host"
            }
            Diagnosis::WrongPassword => "wrong user name or password (or the user is disabled)",
            Diagnosis::NotRedis => "does not speak the Redis protocol (is this a Redis port?)",
            Diagnosis::SpeaksTls => {
                "closed the connection before any reply: the server speaks TLS on this port \
                 (use rediss://)"
            }
            Diagnosis::SpeaksPlain => {
                "no TLS handshake: the server does not speak TLS on this port, it answers plain \
                 text (use redis://)"
            }
        })
    }
}

/// What `e`, or an error behind it, means ([`Diagnosis`]), if it is a
/// redis-rs error that tells. The library keeps the redis-rs error of a
/// failed connection as its node error's source.
pub fn diagnose(e: &(dyn Error + 'static)) -> Option<Diagnosis> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(told) = e.downcast_ref::<RedisError>().and_then(diagnose_redis) {
            return Some(told);
        }
        // A reply with an error code is kept as the code, without a source.
        if let Some(redlease::NodeErrorKind::Redis { code, .. }) =
            e.downcast_ref::<redlease::NodeError>().map(|e| e.kind())
        {
            if let Some(told) = diagnose_code(code) {
                return Some(told);
            }
        }
        next = e.source();
    }
    None
}

/// What an error reply's code says, if it is about authentication.
fn diagnose_code(code: &redlease::ServerErrorCode) -> Option<Diagnosis> {
    match code {
        redlease::ServerErrorCode::NoAuth => Some(Diagnosis::NeedsPassword),
        redlease::ServerErrorCode::WrongPass => Some(Diagnosis::WrongPassword),
        _ => None,
    }
}

/// [`diagnose`] for one redis-rs error.
pub fn diagnose_redis(e: &RedisError) -> Option<Diagnosis> {
    match e.kind() {
        redis::ErrorKind::AuthenticationFailed => return Some(Diagnosis::WrongPassword),
        redis::ErrorKind::Parse => return Some(Diagnosis::NotRedis),
        _ => {}
    }
    // A connection's set-up runs as a pipeline, whose error lists each
    // command's reply; the first code that tells decides.
    let codes: Vec<redlease::ServerErrorCode> = match e.code() {
        Some(code) => vec![redlease::ServerErrorCode::from_code(code)],
        None => e
            .clone()
            .into_server_errors()
            .map(|errors| {
                errors
                    .iter()
                    .map(|(_, e)| redlease::ServerErrorCode::from_code(e.code()))
                    .collect()
            })
            .unwrap_or_default(),
    };
    codes.iter().find_map(diagnose_code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt;
    use std::io;

    /// An error with a fixed message and an optional cause.
    #[derive(Debug)]
    struct Wrapped(&'static str, Option<Box<dyn Error + 'static>>);

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for Wrapped {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref()
        }
    }

    #[test]
    fn every_cause_follows_its_error() {
        let root = io::Error::new(io::ErrorKind::ConnectionRefused, "connection refused");
        let middle = Wrapped("acquire reached no quorum", Some(Box::new(root)));
        let top = Wrapped("gave up waiting for lock \"k\"", Some(Box::new(middle)));
        assert_eq!(
            chain(&top),
            "gave up waiting for lock \"k\": acquire reached no quorum: connection refused"
        );
    }

    #[test]
    fn an_error_without_a_source_is_its_message() {
        assert_eq!(chain(&Wrapped("bad input", None)), "bad input");
    }

    #[test]
    fn the_librarys_field_names_become_the_flags() {
        let locker_error = redlease::NodeId::from_url(0, "127.0.0.1:7300").unwrap_err();
        let line = chain(&locker_error);
        assert!(
            line.starts_with("invalid --nodes: node 0 (127.0.0.1:7300)"),
            "{line}"
        );
    }

    #[test]
    fn a_reason_names_the_flags_not_the_library_calls() {
        let reason = "2 permits over 3 nodes need every node for each permit: ... or accept \
                      it with .allow_no_failures()";
        assert_eq!(
            flags_in(reason),
            "2 permits over 3 nodes need every node for each permit: ... or accept it with \
             --allow-no-failures"
        );
        assert_eq!(flag("permits"), "--permits");
    }

    #[test]
    fn durability_is_told_as_the_durable_flags() {
        let zero = redlease::Locker::builder(["redis://127.0.0.1:1"])
            .durability(redlease::Durability::required(
                0,
                std::time::Duration::from_millis(100),
            ))
            .build()
            .unwrap_err();
        let line = chain(&zero);
        assert!(line.starts_with("invalid --durable: "), "{line}");
        assert!(line.contains("leave out --durable"), "{line}");
        assert!(!line.contains("Durability::"), "{line}");
        let slow = redlease::Locker::builder(["redis://127.0.0.1:1"])
            .durability(redlease::Durability::required(
                1,
                std::time::Duration::from_secs(1),
            ))
            .build()
            .unwrap_err();
        let line = chain(&slow);
        assert!(line.contains("lower --durable-timeout"), "{line}");
        assert!(!line.contains("node_timeout"), "{line}");
    }

    #[test]
    fn auth_and_protocol_failures_are_told() {
        let wrong: RedisError = (
            redis::ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        )
            .into();
        assert_eq!(diagnose_redis(&wrong), Some(Diagnosis::WrongPassword));
        let noauth =
            redis::make_extension_error("NOAUTH".into(), Some("Authentication required.".into()));
        assert_eq!(diagnose_redis(&noauth), Some(Diagnosis::NeedsPassword));
        let wrongpass = redis::make_extension_error("WRONGPASS".into(), None);
        let behind = Wrapped("connection failed", Some(Box::new(wrongpass)));
        assert_eq!(diagnose(&behind), Some(Diagnosis::WrongPassword));
        let refused = io::Error::new(io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(diagnose_redis(&RedisError::from(refused)), None);
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let root = Wrapped("timed out", None);
        let top = Wrapped("node 1: timed out", Some(Box::new(root)));
        assert_eq!(chain(&top), "node 1: timed out");
    }
}
