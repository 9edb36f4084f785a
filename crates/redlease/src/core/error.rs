//! Errors: one enum a caller can match, with per-node detail.

use std::fmt;
use std::time::Duration;

use crate::core::mode::{Hold, LockMode};
use crate::core::node_error::{NodeError, NodeErrorKind, NodeId};
use crate::core::refusal::{Busy, Held, Refusal};

mod message;

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
    /// Deleting it whoever holds it ([`Admin::force_release`](crate::Admin::force_release)).
    ForceRelease,
    /// Turning a write lease into a read lease ([`Lease::downgrade`](crate::Lease::downgrade)).
    Downgrade,
    /// An election's leader saying what it leads with
    /// ([`Leadership::proclaim`](crate::Leadership::proclaim)).
    Proclaim,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Acquire => "acquire",
            Op::Release => "release",
            Op::Extend => "extend",
            Op::ForceRelease => "force-release",
            Op::Downgrade => "downgrade",
            Op::Proclaim => "proclaim",
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
        /// How the refused acquire asked to hold it: a permit refused by
        /// a full semaphore and a lock refused by a semaphore's name say
        /// different things.
        mode: LockMode,
        /// For a semaphore's permits: how many this acquire asked for (1
        /// unless `acquire_many`); 1 otherwise.
        weight: u32,
        /// A lease of this same [`Locker`](crate::Locker) holds the lock.
        /// Locks are not reentrant: a task that asks again for a lock it
        /// holds waits for itself until its wait runs out; hand the lease
        /// down instead (see the crate docs, "Reentrancy").
        by_this_locker: bool,
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
    /// ([`Acquire::with`](crate::Acquire::with)): the work was
    /// stopped, or it finished but the lock was not ours to the end.
    #[non_exhaustive]
    Lost {
        /// The resource name.
        resource: String,
        /// Why the lease could no longer be trusted.
        why: crate::core::lease_state::LostReason,
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
    /// found by [`Admin::check_servers`](crate::Admin::check_servers).
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
    /// A semaphore's permit was asked for with another number of permits
    /// than the name's holders use: the number is fixed while any permit
    /// is held (see [`Locker::semaphore`](crate::Locker::semaphore)).
    /// Nothing was taken.
    #[non_exhaustive]
    PermitsDiffer {
        /// The semaphore's name.
        resource: String,
        /// The number of permits this acquire asked for.
        asked: u32,
        /// The number its holders use, on `node`.
        held: u32,
        /// The node that said so.
        node: NodeId,
    },
    /// A [`blocking`](crate::blocking) call was made on a thread with a
    /// Tokio runtime (in an async task, a `spawn_blocking` closure, or
    /// after `Runtime::enter`), where blocking could stall that runtime or
    /// deadlock on it. Nothing was sent. Use the async API there
    /// ([`blocking::Locker::as_async`](crate::blocking::Locker::as_async)),
    /// or call from a thread without a runtime.
    InsideRuntime,
    /// A [`blocking::Locker`](crate::blocking::Locker), or one of its
    /// leases, was used in a child process that inherited it across
    /// `fork()`: its runtime threads did not survive the fork, and its
    /// connections are the parent's. Nothing was sent. Build a new Locker
    /// in the child.
    #[non_exhaustive]
    Forked {
        /// The process the Locker was built in.
        built_in: u32,
        /// The process that called: the child.
        called_in: u32,
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
    /// [`Advanced::restart_quarantine`](crate::Advanced::restart_quarantine)):
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

    /// For an error of [`Lease::release`](crate::Lease::release): whether
    /// the lock may still be held by a quorum of the nodes for the lease,
    /// until its TTL runs out. `false` when the nodes known free of it
    /// (released now, or our token was already gone) leave too few others
    /// for a quorum, or when nothing was held any more; `true` when nodes
    /// that did not answer could still make a quorum. For other errors,
    /// `true`: nothing is known.
    ///
    /// ```
    /// # async fn demo(lease: redlease::Lease) {
    /// if let Err(e) = lease.release().await {
    ///     if e.may_still_be_held() {
    ///         eprintln!("warning: {e}; the lock frees itself when its TTL runs out");
    ///     }
    /// }
    /// # }
    /// ```
    pub fn may_still_be_held(&self) -> bool {
        match self {
            Error::NoQuorum {
                op: Op::Release,
                succeeded,
                quorum,
                nodes,
                refused_by,
                ..
            } => {
                let free = succeeded.saturating_add(refused_by.len());
                nodes.saturating_sub(free) >= *quorum
            }
            Error::NotHeld { .. } | Error::Closed => false,
            _ => true,
        }
    }

    /// This acquire's error (or, for a wait that gave up, its last
    /// attempt's) with `Error::Taken`'s `by_this_locker` set when
    /// `held_here` says a lease of this Locker holds the lock; asked only
    /// for a refusal.
    pub(crate) fn noting_held_here(mut self, held_here: impl FnOnce() -> bool) -> Error {
        let taken = match &mut self {
            Error::WaitTimeout { last, .. } => last.as_mut(),
            other => other,
        };
        if let Error::Taken { by_this_locker, .. } = taken {
            *by_this_locker = held_here();
        }
        self
    }

    /// The soonest time another owner's hold is due to expire, when the
    /// failed acquire saw one. Waiting longer than this is pointless.
    pub(crate) fn expires_in(&self) -> Option<Duration> {
        let held = match self {
            Error::Taken { held_on, .. } => held_on,
            Error::NoQuorum {
                op: Op::Acquire,
                refused_by,
                ..
            } => refused_by,
            _ => return None,
        };
        held.iter().filter_map(|h| h.expires_in).min()
    }
}

/// A failed acquire attempt: the error the caller may see, and what its
/// refusals said of the holder, for a waiter.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) error: Error,
    pub(crate) busy: Busy,
}

/// A failure with no refusal to learn from.
impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure {
            error,
            busy: Busy::default(),
        }
    }
}

/// How a quorum operation fell short, from the nodes' answers: the one
/// place that decides which error that is.
pub(crate) struct Shortfall {
    pub(crate) op: Op,
    /// Nodes that did what was asked.
    pub(crate) succeeded: usize,
    pub(crate) nodes: usize,
    /// How many nodes had to agree: a majority, or a permit's quorum.
    pub(crate) quorum: usize,
    /// Nodes that refused: another owner holds the lock (acquire), or our
    /// token is gone (extend, release).
    pub(crate) refused: Vec<Refusal>,
    pub(crate) failed: Vec<NodeError>,
}

impl Shortfall {
    /// `Taken` (acquire) or `NotHeld` (extend, release) when refusals alone
    /// rule out a quorum, whatever the failed nodes would have said;
    /// otherwise `NoQuorum`. `expired`: the lease's validity had run out.
    pub(crate) fn into_error(self, resource: &str, expired: bool) -> Error {
        self.into_error_as(resource, expired, Hold::Exclusive)
    }

    /// [`into_error`](Self::into_error) for an acquire in `mode`.
    fn into_error_as(self, resource: &str, expired: bool, hold: Hold) -> Error {
        let quorum = self.quorum;
        let resource = resource.to_string();
        let refused_quorum = crate::core::quorum::refused(self.refused.len(), self.nodes, quorum);
        match self.op {
            Op::Acquire if refused_quorum => Error::Taken {
                resource,
                held_on: self.refused.into_iter().map(|r| r.held).collect(),
                failed: self.failed,
                nodes: self.nodes,
                quorum,
                mode: hold.mode(),
                weight: match hold {
                    Hold::Permit { weight, .. } => weight.get(),
                    _ => 1,
                },
                by_this_locker: false,
            },
            op if refused_quorum => Error::NotHeld {
                op,
                resource,
                expired,
                not_held_on: self.refused.into_iter().map(|r| r.held.node).collect(),
                failed: self.failed,
            },
            op => Error::NoQuorum {
                op,
                resource,
                succeeded: self.succeeded,
                quorum,
                nodes: self.nodes,
                failed: self.failed,
                refused_by: self.refused.into_iter().map(|r| r.held).collect(),
            },
        }
    }

    /// An acquire's shortfall (it asked for `hold`) as its error, with
    /// what the refusals said of the holder for a waiter.
    pub(crate) fn into_failure(self, resource: &str, hold: Hold) -> Failure {
        let busy = Busy::of(&self.refused, crate::core::quorum::quorum(self.nodes));
        Failure {
            error: self.into_error_as(resource, false, hold),
            busy,
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
    use crate::core::node_error::Quarantine;

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
        let taken = Error::Taken {
            resource: "job".into(),
            held_on: Vec::new(),
            nodes: 5,
            quorum: 3,
            failed: Vec::new(),
            mode: LockMode::Exclusive,
            weight: 1,
            by_this_locker: false,
        };
        assert_eq!(taken.quarantine_wait(), None);
    }
}
