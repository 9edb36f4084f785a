//! What went wrong on one node: the node's name, the kind of failure,
//! and the redis-rs error behind it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::core::server_code::{Refused, ServerErrorCode};

/// One Redis node of a [`Locker`](crate::Locker): its position in the URL list
/// and its address. Never carries credentials, so it is safe to log.
///
/// ```
/// # async fn demo() -> Result<(), redlease::Error> {
/// let locker = redlease::Locker::new(["redis://127.0.0.1:7000"])?;
/// match locker.try_lock("report").await {
///     Err(redlease::Error::Taken { held_on, .. }) => {
///         for held in &held_on {
///             println!("{} holds it (node {})", held.node.addr(), held.node.index());
///         }
///     }
///     _ => {}
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NodeId {
    index: usize,
    addr: Arc<str>,
}

impl NodeId {
    pub(crate) fn new(index: usize, addr: impl Into<Arc<str>>) -> Self {
        Self {
            index,
            addr: addr.into(),
        }
    }

    /// Position of the node in the list the [`Locker`](crate::Locker) was
    /// built from, starting at 0.
    ///
    /// ```
    /// # fn show(id: &redlease::NodeId) { println!("node #{}", id.index()); }
    /// ```
    pub fn index(&self) -> usize {
        self.index
    }

    /// `host:port` (with `/db` when not 0), or the socket path; no password.
    ///
    /// ```
    /// # fn show(id: &redlease::NodeId) { println!("at {}", id.addr()); }
    /// ```
    pub fn addr(&self) -> &str {
        &self.addr
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} ({})", self.index, self.addr)
    }
}

/// Why one node gave no usable answer.
///
/// ```
/// use redlease::{NodeErrorKind, ServerErrorCode};
/// fn advice(kind: &NodeErrorKind) -> &'static str {
///     match kind {
///         NodeErrorKind::Timeout(_) => "the node is slow or unreachable",
///         NodeErrorKind::Connection(_) => "the node is down or refuses connections",
///         NodeErrorKind::Redis { code: ServerErrorCode::WrongType, .. } => "the key holds a non-lock value",
///         NodeErrorKind::Redis { .. } => "Redis refused the command",
///         _ => "unexpected reply",
///     }
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeErrorKind {
    /// No reply within the per-node timeout (the node may still apply the
    /// command later, which is why a failed attempt cleans up everywhere).
    Timeout(Duration),
    /// Could not connect, or the connection broke.
    Connection(String),
    /// Redis answered with an error, e.g. `WRONGTYPE`, `OOM`, `READONLY`,
    /// `LOADING`, `NOPERM`. `code` is the first word of the reply; for an
    /// error that a command inside a lock script raised, it is that
    /// command's code on every server version (Redis before 7 wraps it as
    /// `ERR Error running script ...: -OOM ...`, and this unwraps it), and
    /// a refusal by the ACL inside a script is `NOPERM` (see
    /// [`ServerErrorCode`]).
    Redis {
        /// The error code, such as [`ServerErrorCode::Oom`].
        code: ServerErrorCode,
        /// The rest of the error line.
        message: String,
    },
    /// Redis answered something the lock scripts never return.
    Protocol(String),
    /// The TLS handshake failed: the server's certificate is not signed by
    /// a trusted CA or does not name the host, or the server wants a client
    /// certificate we did not present. The text says which, as the TLS
    /// library reported it; the redis-rs error is the `source()`.
    Tls(String),
    /// Not sent: earlier requests to this node timed out and are still
    /// unanswered, so a new one would only queue behind them. Requests
    /// flow again as soon as the node answers (it is paused, overloaded
    /// or cut off).
    Unresponsive {
        /// Requests given up on and still unanswered.
        unanswered: usize,
        /// How long the oldest of them has been owed.
        since: Duration,
    },
    /// The write was applied on the primary but fewer replicas than
    /// [`Durability::required`](crate::Durability::required) asks for
    /// acknowledged it in time (`WAIT`), so it does not count.
    NotReplicated {
        /// Replicas that acknowledged.
        acknowledged: u32,
        /// Replicas required.
        wanted: u32,
    },
    /// Not counted: the server restarted, or its clock jumped forward, too
    /// recently to vouch that no lock it granted was lost (see
    /// [`Advanced::restart_quarantine`](crate::Advanced::restart_quarantine)).
    /// An acquire it took part in is still undone there if it fails, and
    /// its release and extend requests are made as usual.
    Quarantined {
        /// Why.
        cause: Quarantine,
        /// How long it is quarantined for yet.
        left: Duration,
    },
    /// Not counted: this node reached the same Redis server (the same
    /// `run_id`) as the node with index `same_as`, which counts for it.
    /// One server counted twice would fake a majority; give each server
    /// once. [`Admin::check_servers`](crate::Admin::check_servers)
    /// finds this before any lock is taken.
    SameServer {
        /// The index of the node that counts for this server.
        same_as: usize,
    },
    /// The URL's scheme does not match what the server speaks on its
    /// port: `redis://` to a port that serves only TLS (the server closed
    /// the connection before any reply, and answers the start of a TLS
    /// handshake), or `rediss://` to one that serves plain text (no
    /// handshake, and the server answers a plain `PING`). The text says
    /// which scheme to use, e.g. "the server speaks TLS on this port: use
    /// rediss://"; the redis-rs error is the `source()`.
    WrongScheme(String),
}

/// Why a node is quarantined ([`NodeErrorKind::Quarantined`]).
///
/// ```
/// use redlease::{NodeErrorKind, Quarantine};
/// fn explain(kind: &NodeErrorKind) -> Option<String> {
///     match kind {
///         NodeErrorKind::Quarantined { cause: Quarantine::Restarted { up }, left } => {
///             Some(format!("restarted {up:?} ago; votes again in {left:?}"))
///         }
///         NodeErrorKind::Quarantined { cause: Quarantine::ClockJumped { ahead }, left } => {
///             Some(format!("its clock jumped {ahead:?} ahead; votes again in {left:?}"))
///         }
///         _ => None,
///     }
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Quarantine {
    /// The server process has surely been up this long (its `uptime` less
    /// a second: the server counts whole wall-clock seconds): without
    /// fsync'd persistence it may have come back without locks it had
    /// granted.
    Restarted {
        /// How long it has been up.
        up: Duration,
    },
    /// The server's clock moved this much further than ours (beyond the
    /// drift allowance) between two of our requests: it expired its keys
    /// that much early.
    ClockJumped {
        /// How far it jumped ahead.
        ahead: Duration,
    },
}

impl NodeErrorKind {
    /// Whether the server refused the request for lack of an ACL permission
    /// (`NOPERM`, also for a command inside a lock script): the user's
    /// rule is missing a right. Nothing about the node being down.
    ///
    /// ```
    /// use redlease::NodeErrorKind;
    /// fn says(kind: &NodeErrorKind) -> String {
    ///     if kind.is_permission_refused() {
    ///         format!("not allowed: {}", kind.missing_permission().unwrap_or_default())
    ///     } else {
    ///         kind.to_string()
    ///     }
    /// }
    /// ```
    pub fn is_permission_refused(&self) -> bool {
        matches!(
            self,
            Self::Redis {
                code: ServerErrorCode::NoPerm,
                ..
            }
        )
    }

    /// For a permission refusal ([`is_permission_refused`](Self::is_permission_refused)),
    /// the right the ACL rule needs: for a command as `ACL SETUSER` spells
    /// it (`+pttl`, `+pubsub|numsub`); for a key or a channel, whose name
    /// the reply does not give, `~<prefix>* (...)` or `&<prefix>* (...)`
    /// with a word on what the pattern must cover. `None` otherwise, or
    /// when the reply does not say.
    ///
    /// ```
    /// use redlease::{NodeErrorKind, ServerErrorCode};
    /// let refused = NodeErrorKind::Redis {
    ///     code: ServerErrorCode::NoPerm,
    ///     message: "User app has no permissions to run the 'pttl' command".into(),
    /// };
    /// assert_eq!(refused.missing_permission().as_deref(), Some("+pttl"));
    /// ```
    pub fn missing_permission(&self) -> Option<String> {
        match self {
            Self::Redis {
                code: ServerErrorCode::NoPerm,
                message,
            } => Refused::parse(message).map(|refused| refused.right()),
            _ => None,
        }
    }

    /// Whether the request was never sent, so it cannot have changed
    /// anything on the node.
    pub(crate) fn never_sent(&self) -> bool {
        matches!(self, Self::Unresponsive { .. })
    }
}

impl fmt::Display for NodeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout(after) => write!(f, "no reply within {after:?}"),
            Self::Connection(why) => write!(f, "connection failed: {why}"),
            Self::Redis {
                code: ServerErrorCode::NoPerm,
                message,
            } => {
                write!(f, "Redis replied NOPERM {message}: ")?;
                match self.missing_permission() {
                    Some(right) => write!(
                        f,
                        "add {right} to the user's ACL rule (docs/deployments.md, \"ACL: the least privilege\")"
                    ),
                    None => f.write_str(
                        "the user's ACL rule lacks a right (docs/deployments.md, \"ACL: the least privilege\"; \
                         `redlease doctor` names it)",
                    ),
                }
            }
            Self::Redis { code, message } => write!(f, "Redis replied {code} {message}"),
            Self::Protocol(what) => write!(f, "unexpected reply: {what}"),
            Self::Tls(why) => write!(
                f,
                "TLS handshake failed, a certificate problem: {why} (check the CA the client \
                 trusts, the name in the server's certificate, and the client certificate)"
            ),
            Self::Unresponsive { unanswered, since } => write!(
                f,
                "not sent: {unanswered} earlier request(s) given up on are still unanswered \
                 after {since:?} (the node is paused, overloaded or cut off)"
            ),
            Self::NotReplicated {
                acknowledged,
                wanted,
            } => write!(
                f,
                "written, but only {acknowledged} of the {wanted} required replica(s) acknowledged it in time"
            ),
            Self::Quarantined {
                cause: Quarantine::Restarted { up },
                left,
            } => write!(
                f,
                "not counted: the server restarted {up:?} ago and votes again in {left:?} \
                 (restart quarantine: it may have lost locks it granted)"
            ),
            Self::Quarantined {
                cause: Quarantine::ClockJumped { ahead },
                left,
            } => write!(
                f,
                "not counted: the server's clock jumped {ahead:?} ahead, expiring its keys \
                 early; it votes again in {left:?}"
            ),
            Self::SameServer { same_as } => write!(
                f,
                "not counted: the same Redis server as node {same_as} (same run_id); give \
                 each server once"
            ),
            Self::WrongScheme(why) => write!(f, "wrong URL scheme: {why}"),
        }
    }
}

/// A failure on one node, named by [`NodeId`].
///
/// ```
/// fn log(errors: &[redlease::NodeError]) {
///     for e in errors {
///         eprintln!("{}: {}", e.node(), e.kind());
///     }
/// }
/// ```
///
/// `Display` names the node and the kind of failure; the alternate form
/// (`{:#}`) adds the underlying redis-rs error, which is also the
/// [`source`](std::error::Error::source) of a connection or protocol
/// failure.
#[derive(Clone, Debug)]
pub struct NodeError {
    node: NodeId,
    kind: NodeErrorKind,
    source: Option<Arc<redis::RedisError>>,
}

/// Equal when the same node failed the same way, whatever redis-rs said.
impl PartialEq for NodeError {
    fn eq(&self, other: &Self) -> bool {
        self.node == other.node && self.kind == other.kind
    }
}

impl Eq for NodeError {}

impl NodeError {
    pub(crate) fn new(node: NodeId, kind: NodeErrorKind) -> Self {
        Self {
            node,
            kind,
            source: None,
        }
    }

    pub(crate) fn caused_by(mut self, e: redis::RedisError) -> Self {
        self.source = Some(Arc::new(e));
        self
    }

    /// The same redis-rs cause as another error of this node had.
    pub(crate) fn with_cause_of(mut self, earlier: Option<Arc<redis::RedisError>>) -> Self {
        self.source = earlier;
        self
    }

    /// The redis-rs error behind this one, shared.
    pub(crate) fn cause(&self) -> Option<Arc<redis::RedisError>> {
        self.source.clone()
    }

    /// The node that failed.
    ///
    /// ```
    /// # fn f(e: &redlease::NodeError) { let _ = e.node().addr(); }
    /// ```
    pub fn node(&self) -> &NodeId {
        &self.node
    }

    /// What went wrong there.
    ///
    /// ```
    /// # fn f(e: &redlease::NodeError) -> bool {
    /// matches!(e.kind(), redlease::NodeErrorKind::Timeout(_))
    /// # }
    /// ```
    pub fn kind(&self) -> &NodeErrorKind {
        &self.kind
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = self.kind.to_string();
        write!(f, "{}: {kind}", self.node)?;
        match &self.source {
            // The cause, unless the kind already says it in full.
            Some(source) if f.alternate() => {
                let source = source.to_string();
                if kind.contains(&source) {
                    Ok(())
                } else {
                    write!(f, " ({source})")
                }
            }
            _ => Ok(()),
        }
    }
}

impl std::error::Error for NodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn redis(code: &str, message: &str) -> NodeErrorKind {
        NodeErrorKind::Redis {
            code: ServerErrorCode::from_code(code),
            message: message.into(),
        }
    }

    #[test]
    fn a_refused_permission_names_the_right_to_add() {
        // Redis 7.0 and 6.x, outside a script.
        for message in [
            "User app has no permissions to run the 'pttl' command",
            "this user has no permissions to run the 'pttl' command or its subcommand",
        ] {
            let kind = redis("NOPERM", message);
            assert!(kind.is_permission_refused());
            assert_eq!(kind.missing_permission().as_deref(), Some("+pttl"));
            let shown = kind.to_string();
            assert!(
                shown.contains("'pttl'") && shown.contains("add +pttl"),
                "{shown}"
            );
        }
        let sub = redis(
            "NOPERM",
            "User app has no permissions to run the 'pubsub|numsub' command",
        );
        assert_eq!(sub.missing_permission().as_deref(), Some("+pubsub|numsub"));
        let key = redis("NOPERM", "No permissions to access a key");
        assert!(key.missing_permission().unwrap().starts_with('~'));
        assert!(!redis("ERR", "no permissions to run the 'x' command").is_permission_refused());
    }
}
