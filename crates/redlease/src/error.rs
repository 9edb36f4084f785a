//! Errors: one enum a caller can match, with per-node detail.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

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
/// use redlease::NodeErrorKind;
/// fn advice(kind: &NodeErrorKind) -> &'static str {
///     match kind {
///         NodeErrorKind::Timeout(_) => "the node is slow or unreachable",
///         NodeErrorKind::Connection(_) => "the node is down or refuses connections",
///         NodeErrorKind::Redis { code, .. } if code == "WRONGTYPE" => "the key holds a non-lock value",
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
    /// `ERR Error running script ...: -OOM ...`, and this unwraps it).
    Redis {
        /// The error code, such as `"OOM"`.
        code: String,
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
    /// [`LockerBuilder::restart_quarantine`](crate::LockerBuilder::restart_quarantine)).
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
    /// once. [`Locker::check_servers`](crate::Locker::check_servers)
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
        matches!(self, Self::Redis { code, .. } if code == "NOPERM")
    }

    /// For a permission refusal ([`is_permission_refused`](Self::is_permission_refused)),
    /// the right the ACL rule needs: for a command as `ACL SETUSER` spells
    /// it (`+pttl`, `+pubsub|numsub`); for a key or a channel, whose name
    /// the reply does not give, `~<prefix>* (...)` or `&<prefix>* (...)`
    /// with a word on what the pattern must cover. `None` otherwise, or
    /// when the reply does not say.
    ///
    /// ```
    /// use redlease::NodeErrorKind;
    /// let refused = NodeErrorKind::Redis {
    ///     code: "NOPERM".into(),
    ///     message: "User app has no permissions to run the 'pttl' command".into(),
    /// };
    /// assert_eq!(refused.missing_permission().as_deref(), Some("+pttl"));
    /// ```
    pub fn missing_permission(&self) -> Option<String> {
        let Self::Redis { code, message } = self else {
            return None;
        };
        if code != "NOPERM" {
            return None;
        }
        if let Some(command) = denied_command(message) {
            return Some(format!("+{command}"));
        }
        let lower = message.to_ascii_lowercase();
        if lower.contains("access a key") || lower.contains("one of the keys") {
            Some("~<prefix>* (the lock keys' pattern)".to_string())
        } else if lower.contains("access a channel") || lower.contains("one of the channels") {
            Some("&<prefix>* (the release channels' pattern)".to_string())
        } else {
            None
        }
    }

    /// Whether the request was never sent, so it cannot have changed
    /// anything on the node.
    pub(crate) fn never_sent(&self) -> bool {
        matches!(self, Self::Unresponsive { .. })
    }

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
    fn unwrap_script_error(self) -> Self {
        let Self::Redis { code, message } = &self else {
            return self;
        };
        if code == "ERR" {
            if let Some(message) = script_acl_refusal(message) {
                return Self::Redis {
                    code: "NOPERM".into(),
                    message,
                };
            }
        }
        match (code.as_str(), inner_script_error(message)) {
            ("ERR", Some((code, message))) => Self::Redis {
                code: code.to_string(),
                message: message.to_string(),
            },
            _ => self,
        }
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
    let script = sha.and_then(crate::node::script_by_hash);
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
            "this user may not run a command {place}: it needs every command README's ACL \
             rule grants ({})",
            message.trim_end()
        ),
    })
}

/// The command a `NOPERM` reply names, as the ACL does (`pttl`,
/// `pubsub|numsub`): Redis 6 and later say `... no permissions to run the
/// 'pttl' command`.
fn denied_command(message: &str) -> Option<String> {
    let (_, rest) = message.split_once("permissions to run the '")?;
    let (command, _) = rest.split_once('\'')?;
    (!command.is_empty() && !command.contains(' ')).then(|| command.to_ascii_lowercase())
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

impl fmt::Display for NodeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout(after) => write!(f, "no reply within {after:?}"),
            Self::Connection(why) => write!(f, "connection failed: {why}"),
            Self::Redis { code, message } if code == "NOPERM" => {
                write!(f, "Redis replied NOPERM {message}: ")?;
                match self.missing_permission() {
                    Some(right) => write!(
                        f,
                        "add {right} to the user's ACL rule (README: \"ACL: the least privilege\")"
                    ),
                    None => f.write_str(
                        "the user's ACL rule lacks a right (README: \"ACL: the least privilege\"; \
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
            kind: kind.unwrap_script_error(),
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

/// A node on which the lock is held by another owner, with the remaining
/// time the node reported.
///
/// ```
/// fn soonest(held_on: &[redlease::Held]) -> Option<std::time::Duration> {
///     held_on.iter().filter_map(|h| h.expires_in).min()
/// }
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Held {
    /// The node.
    pub node: NodeId,
    /// The key's remaining TTL there; `None` when the key never expires
    /// (someone wrote it without a TTL).
    pub expires_in: Option<Duration>,
    /// How many processes wait for the lock there (subscriptions to its
    /// release channel): spreads a crowd's checks of a held lock.
    pub(crate) waiting: u64,
    /// 28 bits of a hash of the owner's token (0: unknown): the same owner
    /// on a quorum of nodes holds the lock; different ones are contenders
    /// of a split vote, about to undo their partial grants.
    pub(crate) owner: u32,
}

impl Held {
    pub(crate) fn new(
        node: NodeId,
        expires_in: Option<Duration>,
        waiting: u64,
        owner: u32,
    ) -> Self {
        Held {
            node,
            expires_in,
            waiting,
            owner,
        }
    }
}

/// The node and the expiry; the bookkeeping for waiters is left out.
impl fmt::Debug for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Held")
            .field("node", &self.node)
            .field("expires_in", &self.expires_in)
            .finish_non_exhaustive()
    }
}

/// The lock operation an error is about.
///
/// ```
/// assert_eq!(redlease::Op::Extend.to_string(), "extend");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// Taking the lock.
    Acquire,
    /// Giving it back.
    Release,
    /// Moving its expiry.
    Extend,
    /// Deleting it whoever holds it ([`Locker::force_release`](crate::Locker::force_release)).
    ForceRelease,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Acquire => "acquire",
            Op::Release => "release",
            Op::Extend => "extend",
            Op::ForceRelease => "force-release",
        })
    }
}

/// Everything that can go wrong, as one enum to match on.
///
/// Each variant carries the per-node detail behind it; `Display` renders a
/// sentence a person can act on.
///
/// ```
/// use redlease::{Error, Locker};
/// # async fn demo() -> Result<(), Error> {
/// let locker = Locker::new(["redis://127.0.0.1:7000"])?;
/// match locker.try_lock("nightly-report").await {
///     Ok(lease) => { /* do the work */ lease.release().await?; }
///     Err(Error::Taken { .. }) => println!("another worker runs it"),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Error {
    /// Bad input, rejected before any network I/O: nothing was written.
    #[non_exhaustive]
    InvalidInput {
        /// The setting or argument at fault, e.g. `"ttl"`.
        field: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// Another owner holds the lock on so many nodes that no quorum is possible.
    #[non_exhaustive]
    Taken {
        /// The resource name.
        resource: String,
        /// The nodes where another owner holds it.
        held_on: Vec<Held>,
        /// Nodes that failed during the same attempt.
        failed: Vec<NodeError>,
        /// How many nodes the [`Locker`](crate::Locker) has.
        nodes: usize,
        /// How many must agree.
        quorum: usize,
    },
    /// Too few nodes answered for the operation to reach a quorum.
    #[non_exhaustive]
    NoQuorum {
        /// Which operation.
        op: Op,
        /// The resource name.
        resource: String,
        /// Nodes that did what was asked.
        succeeded: usize,
        /// How many had to.
        quorum: usize,
        /// How many nodes the [`Locker`](crate::Locker) has.
        nodes: usize,
        /// The nodes that failed, and why.
        failed: Vec<NodeError>,
        /// Nodes where another owner held the lock (acquire) or where our
        /// token was already gone (release, extend).
        refused_by: Vec<Held>,
    },
    /// A quorum agreed, but so late that no validity was left (the TTL was
    /// spent on the round trip). Everything taken was released again.
    #[non_exhaustive]
    ValidityExhausted {
        /// Which operation.
        op: Op,
        /// The resource name.
        resource: String,
        /// Time from before the first request to the quorum's answer.
        elapsed: Duration,
        /// The TTL asked for.
        ttl: Duration,
        /// The clock-drift allowance subtracted from it.
        drift: Duration,
    },
    /// Release or extend of a lease we no longer hold: it expired, or the
    /// lock was taken over. Never reported as success; nothing was written.
    #[non_exhaustive]
    NotHeld {
        /// Which operation.
        op: Op,
        /// The resource name.
        resource: String,
        /// The lease's validity had run out before the call: no command was
        /// sent (extend) or Redis confirmed it (release).
        expired: bool,
        /// Nodes where our token was gone.
        not_held_on: Vec<NodeId>,
        /// Nodes that failed during the same call.
        failed: Vec<NodeError>,
    },
    /// The lease was lost while work ran under it
    /// ([`Locker::with_lock`](crate::Locker::with_lock)): the work was
    /// stopped, or it finished but the lock was not ours to the end.
    #[non_exhaustive]
    Lost {
        /// The resource name.
        resource: String,
        /// Why the lease could no longer be trusted.
        why: crate::LostReason,
    },
    /// [`LockerBuilder::build`](crate::LockerBuilder::build) was called
    /// outside a Tokio runtime: the Locker's connections and background
    /// work need one. Build it inside `#[tokio::main]`, a runtime's
    /// `block_on`, or after `Runtime::enter`.
    NoRuntime,
    /// The [`Locker`](crate::Locker) was closed
    /// ([`Locker::close`](crate::Locker::close)): it takes no more locks,
    /// and the leases it held were released by `close` (their holders saw
    /// [`LostReason::Closed`](crate::LostReason::Closed)).
    Closed,
    /// Two nodes of the [`Locker`](crate::Locker) are one Redis server
    /// (the same `run_id`, e.g. `localhost:6379` and `127.0.0.1:6379`),
    /// found by [`Locker::check_servers`](crate::Locker::check_servers).
    /// Its vote would count twice; the later node's never counts (see
    /// [`NodeErrorKind::SameServer`]).
    #[non_exhaustive]
    SameServer {
        /// The node whose vote does not count.
        node: NodeId,
        /// The node that counts for the server.
        same_as: NodeId,
    },
    /// [`Locker::lock`](crate::Locker::lock) gave up: the wait deadline
    /// passed. The last attempt's error is the [`source`](std::error::Error::source)
    /// (not repeated in `Display`).
    #[non_exhaustive]
    WaitTimeout {
        /// The resource name.
        resource: String,
        /// How long it waited.
        waited: Duration,
        /// How many attempts it made.
        attempts: u32,
        /// Why the last attempt failed.
        last: Box<Error>,
    },
}

impl Error {
    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidInput {
            field,
            reason: reason.into(),
        }
    }

    /// Whether another attempt might succeed: the lock is busy or nodes
    /// failed, as opposed to bad input or a lease that is gone.
    ///
    /// ```
    /// // Outside a Tokio runtime: a setup mistake, not worth retrying.
    /// let e = redlease::Locker::new(["redis://127.0.0.1:6379"]).unwrap_err();
    /// assert!(!e.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Taken { .. } | Error::NoQuorum { .. } | Error::ValidityExhausted { .. }
        )
    }

    /// The per-node failures behind this error, if any.
    ///
    /// ```
    /// # fn f(e: &redlease::Error) {
    /// for failure in e.node_errors() {
    ///     eprintln!("{failure}");
    /// }
    /// # }
    /// ```
    pub fn node_errors(&self) -> &[NodeError] {
        match self {
            Error::Taken { failed, .. }
            | Error::NoQuorum { failed, .. }
            | Error::NotHeld { failed, .. } => failed,
            Error::WaitTimeout { last, .. } => last.node_errors(),
            _ => &[],
        }
    }

    /// How long until the first quarantined node of a failed acquire votes
    /// again, if any was quarantined.
    pub(crate) fn quarantine_left(&self) -> Option<Duration> {
        match self {
            Error::NoQuorum {
                op: Op::Acquire,
                failed,
                ..
            } => failed
                .iter()
                .filter_map(|f| match f.kind() {
                    NodeErrorKind::Quarantined { left, .. } => Some(*left),
                    _ => None,
                })
                .min(),
            _ => None,
        }
    }

    /// For an acquire that failed because quarantined nodes' "yes" did not
    /// count ([`NodeErrorKind::Quarantined`], see
    /// [`LockerBuilder::restart_quarantine`](crate::LockerBuilder::restart_quarantine)):
    /// how long until enough of them vote again to make a quorum with the
    /// nodes that said yes, if the nodes answer as they did. `None` when no
    /// node was quarantined, or when their votes would not make a quorum
    /// even then (the lock is held elsewhere, or other nodes failed). For
    /// [`Error::WaitTimeout`], that of the last attempt.
    ///
    /// ```
    /// # async fn demo(locker: &redlease::Locker) -> Result<(), redlease::Error> {
    /// match locker.try_lock("nightly-report").await {
    ///     Ok(lease) => lease.release().await?,
    ///     Err(e) => match e.quarantine_wait() {
    ///         Some(wait) => eprintln!("the servers just restarted: takeable in {wait:?}"),
    ///         None => return Err(e),
    ///     },
    /// }
    /// # Ok(()) }
    /// ```
    pub fn quarantine_wait(&self) -> Option<Duration> {
        let (succeeded, quorum, failed) = match self {
            Error::NoQuorum {
                op: Op::Acquire,
                succeeded,
                quorum,
                failed,
                ..
            } => (*succeeded, *quorum, failed),
            Error::WaitTimeout { last, .. } => return last.quarantine_wait(),
            _ => return None,
        };
        let mut left: Vec<Duration> = failed
            .iter()
            .filter_map(|f| match f.kind() {
                NodeErrorKind::Quarantined { left, .. } => Some(*left),
                _ => None,
            })
            .collect();
        left.sort();
        // The shortest quarantines that make up the missing votes.
        let missing = quorum.checked_sub(succeeded).filter(|&n| n > 0)?;
        left.get(missing - 1).copied()
    }

    /// For a failed acquire: the nodes where another owner held the lock,
    /// and the quorum. What a waiter reads of a busy lock comes from here.
    fn refusals(&self) -> Option<(&[Held], usize)> {
        match self {
            Error::Taken {
                held_on, quorum, ..
            } => Some((held_on, *quorum)),
            Error::NoQuorum {
                op: Op::Acquire,
                refused_by,
                quorum,
                ..
            } => Some((refused_by, *quorum)),
            _ => None,
        }
    }

    /// The soonest time another owner's hold is due to expire, when the
    /// failed attempt saw one. Waiting longer than this is pointless.
    pub(crate) fn expires_in(&self) -> Option<Duration> {
        let (held, _) = self.refusals()?;
        held.iter().filter_map(|h| h.expires_in).min()
    }

    /// For a busy lock: whether one owner holds it on a quorum of the
    /// nodes, as the refusals show (not a split vote between contenders,
    /// whose partial grants are undone at once and announced to no one).
    pub(crate) fn held_by_one_owner(&self) -> bool {
        let Some((held, quorum)) = self.refusals() else {
            return false;
        };
        held.iter()
            .filter(|h| h.owner != 0)
            .any(|h| held.iter().filter(|o| o.owner == h.owner).count() >= quorum)
    }

    /// For a busy lock: the most processes any refusing node counted as
    /// waiting for it (every waiter subscribes on every node).
    pub(crate) fn waiting(&self) -> u64 {
        self.refusals()
            .and_then(|(held, _)| held.iter().map(|h| h.waiting).max())
            .unwrap_or(0)
    }
}

/// How a quorum operation fell short, from the nodes' answers: the one
/// place that decides which error that is.
pub(crate) struct Shortfall {
    pub(crate) op: Op,
    /// Nodes that did what was asked.
    pub(crate) succeeded: usize,
    pub(crate) nodes: usize,
    /// Nodes that refused: another owner holds the lock (acquire), or our
    /// token is gone (extend, release).
    pub(crate) refused: Vec<Held>,
    pub(crate) failed: Vec<NodeError>,
}

impl Shortfall {
    /// `Taken` (acquire) or `NotHeld` (extend, release) when refusals alone
    /// rule out a quorum, whatever the failed nodes would have said;
    /// otherwise `NoQuorum`. `expired`: the lease's validity had run out.
    pub(crate) fn into_error(self, resource: &str, expired: bool) -> Error {
        let quorum = crate::quorum::quorum(self.nodes);
        let resource = resource.to_string();
        let refused_quorum = crate::quorum::refused(self.refused.len(), self.nodes);
        match self.op {
            Op::Acquire if refused_quorum => Error::Taken {
                resource,
                held_on: self.refused,
                failed: self.failed,
                nodes: self.nodes,
                quorum,
            },
            op if refused_quorum => Error::NotHeld {
                op,
                resource,
                expired,
                not_held_on: self.refused.into_iter().map(|h| h.node).collect(),
                failed: self.failed,
            },
            op => Error::NoQuorum {
                op,
                resource,
                succeeded: self.succeeded,
                quorum,
                nodes: self.nodes,
                failed: self.failed,
                refused_by: self.refused,
            },
        }
    }
}

/// Writes `a, b, c` for any list.
fn list<T>(
    f: &mut fmt::Formatter<'_>,
    items: &[T],
    mut one: impl FnMut(&mut fmt::Formatter<'_>, &T) -> fmt::Result,
) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str("; ")?;
        }
        one(f, item)?;
    }
    Ok(())
}

fn held(f: &mut fmt::Formatter<'_>, h: &Held) -> fmt::Result {
    match h.expires_in {
        Some(d) => write!(f, "{} (expires in {d:?})", h.node),
        None => write!(f, "{} (no expiry set)", h.node),
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidInput { field, reason } => write!(f, "invalid {field}: {reason}"),
            Error::Taken {
                resource,
                held_on,
                failed,
                nodes,
                quorum,
            } => {
                write!(
                    f,
                    "lock {resource:?} is held by another owner on {} of {nodes} nodes \
                     (a quorum needs {quorum}): ",
                    held_on.len()
                )?;
                list(f, held_on, held)?;
                if !failed.is_empty() {
                    f.write_str("; also failed: ")?;
                    list(f, failed, |f, e| write!(f, "{e:#}"))?;
                }
                Ok(())
            }
            Error::NoQuorum {
                op,
                resource,
                succeeded,
                quorum,
                nodes,
                failed,
                refused_by,
            } => {
                write!(
                    f,
                    "{op} of lock {resource:?} reached no quorum: {succeeded} of {nodes} nodes \
                     succeeded, {quorum} needed"
                )?;
                if !failed.is_empty() {
                    f.write_str("; failed: ")?;
                    list(f, failed, |f, e| write!(f, "{e:#}"))?;
                }
                if !refused_by.is_empty() {
                    if *op == Op::Acquire {
                        f.write_str("; held by another owner on: ")?;
                        list(f, refused_by, held)?;
                    } else {
                        f.write_str("; our token was gone on: ")?;
                        list(f, refused_by, |f, h| write!(f, "{}", h.node))?;
                    }
                }
                Ok(())
            }
            Error::ValidityExhausted {
                op,
                resource,
                elapsed,
                ttl,
                drift,
            } => write!(
                f,
                "{op} of lock {resource:?} took {elapsed:?}, leaving no validity of the \
                 {ttl:?} TTL after the {drift:?} drift allowance; it was undone"
            ),
            Error::NotHeld {
                op,
                resource,
                expired,
                not_held_on,
                failed,
            } => {
                write!(
                    f,
                    "{op} of lock {resource:?} failed: the lease is no longer held"
                )?;
                if *expired {
                    f.write_str(" (its validity had run out)")?;
                }
                if !not_held_on.is_empty() {
                    f.write_str("; our token is gone on: ")?;
                    list(f, not_held_on, |f, n| write!(f, "{n}"))?;
                }
                if !failed.is_empty() {
                    f.write_str("; failed: ")?;
                    list(f, failed, |f, e| write!(f, "{e:#}"))?;
                }
                Ok(())
            }
            Error::Lost { resource, why } => {
                write!(
                    f,
                    "lost the lock {resource:?} while working under it: {why}"
                )
            }
            Error::WaitTimeout {
                resource,
                waited,
                attempts,
                ..
            } => write!(
                f,
                "gave up waiting for lock {resource:?} after {waited:?} and {attempts} \
                 attempts"
            ),
            Error::SameServer { node, same_as } => write!(
                f,
                "{node} is the same Redis server as {same_as} (same run_id): one server \
                 counted twice would fake a majority, so it casts no vote; give each server once"
            ),
            Error::Closed => f.write_str(
                "the Locker was closed: it takes no more locks, and close() released the \
                 leases it held",
            ),
            Error::NoRuntime => f.write_str(
                "no Tokio runtime: build the Locker inside a runtime (#[tokio::main], \
                 block_on, or Runtime::enter)",
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::WaitTimeout { last, .. } => Some(last.as_ref()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(owners: &[u32], nodes: usize) -> Error {
        Error::Taken {
            resource: "job".into(),
            held_on: owners
                .iter()
                .enumerate()
                .map(|(i, &owner)| Held::new(NodeId::new(i, "n"), None, 0, owner))
                .collect(),
            nodes,
            quorum: crate::quorum::quorum(nodes),
            failed: Vec::new(),
        }
    }

    #[test]
    fn one_owner_on_a_quorum_holds_the_lock_and_a_split_vote_does_not() {
        assert!(taken(&[7], 1).held_by_one_owner());
        assert!(taken(&[7, 7, 7], 5).held_by_one_owner());
        assert!(taken(&[7, 9, 7, 7], 5).held_by_one_owner());
        assert!(!taken(&[7, 9, 7], 5).held_by_one_owner(), "a split vote");
        assert!(!taken(&[1, 2, 3, 4, 5], 5).held_by_one_owner());
        assert!(!taken(&[0, 0, 0], 5).held_by_one_owner(), "unknown owners");
        let held = format!("{:?}", taken(&[7], 1));
        assert!(!held.contains("owner"), "{held}");
    }

    /// A failed acquire on 5 nodes: `yes` votes, and the node errors.
    fn no_quorum(yes: usize, failed: &[NodeErrorKind]) -> Error {
        Error::NoQuorum {
            op: Op::Acquire,
            resource: "job".into(),
            succeeded: yes,
            quorum: 3,
            nodes: 5,
            failed: failed
                .iter()
                .enumerate()
                .map(|(i, kind)| NodeError::new(NodeId::new(i, "n"), kind.clone()))
                .collect(),
            refused_by: Vec::new(),
        }
    }

    fn quarantined(secs: u64) -> NodeErrorKind {
        NodeErrorKind::Quarantined {
            cause: Quarantine::Restarted {
                up: Duration::from_secs(1),
            },
            left: Duration::from_secs(secs),
        }
    }

    #[test]
    fn a_quarantine_wait_lasts_until_enough_quarantined_nodes_vote() {
        let sec = Duration::from_secs;
        let down = NodeErrorKind::Connection("refused".into());
        let q = [quarantined(30), quarantined(10), quarantined(20)];
        // Five quarantined: the third shortest quarantine.
        let all = [
            q[0].clone(),
            q[1].clone(),
            q[2].clone(),
            quarantined(40),
            quarantined(50),
        ];
        assert_eq!(no_quorum(0, &all).quarantine_wait(), Some(sec(30)));
        // Two said yes: the first quarantined node to vote again suffices.
        assert_eq!(no_quorum(2, &q).quarantine_wait(), Some(sec(10)));
        // One said yes, one is down: two of the three quarantined.
        let mixed = [down.clone(), q[0].clone(), q[1].clone(), q[2].clone()];
        assert_eq!(no_quorum(1, &mixed).quarantine_wait(), Some(sec(20)));
        // Too few quarantined to make the quorum, or none at all.
        let short = [down.clone(), down.clone(), down.clone(), q[0].clone()];
        assert_eq!(no_quorum(1, &short).quarantine_wait(), None);
        assert_eq!(no_quorum(2, &[down]).quarantine_wait(), None);
        let waited = Error::WaitTimeout {
            resource: "job".into(),
            waited: sec(1),
            attempts: 2,
            last: Box::new(no_quorum(2, &q)),
        };
        assert_eq!(waited.quarantine_wait(), Some(sec(10)));
        assert_eq!(taken(&[7, 7, 7], 5).quarantine_wait(), None);
    }

    fn redis(code: &str, message: &str) -> NodeErrorKind {
        NodeErrorKind::Redis {
            code: code.into(),
            message: message.into(),
        }
    }

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
            assert_eq!(redis("ERR", message).unwrap_script_error(), unwrapped);
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
            assert_eq!(kind.clone().unwrap_script_error(), kind);
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

    #[test]
    fn a_command_refused_inside_a_lock_script_is_named_from_its_line() {
        let acquire = crate::node::script_by_hash_for_tests("acquire");
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
            let kind = redis("ERR", &message).unwrap_script_error();
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
        let kind = redis(
            "ERR",
            "The user executing the script can't run this command or subcommand script: \
             0123abcd, on @user_script:1.",
        )
        .unwrap_script_error();
        assert!(kind.is_permission_refused());
        assert_eq!(kind.missing_permission(), None);
        assert!(kind.to_string().contains("doctor"), "{kind}");
        // Later versions name the command themselves.
        let kind = redis(
            "ERR",
            "ACL failure in script: User app has no permissions to run the 'time' command \
             script: 0123abcd, on @user_script:45.",
        )
        .unwrap_script_error();
        assert_eq!(kind.missing_permission().as_deref(), Some("+time"));
    }
}
