//! What an [`Error`] says to a person: one sentence per variant, naming
//! the lock, the nodes and the cause, and for a wait that gave up, why its
//! last attempt failed.

use std::fmt;

use super::{Error, Op};
use crate::core::mode::LockMode;
use crate::core::node_error::NodeErrorKind;
use crate::core::owner::Holder;
use crate::core::refusal::{Held, HeldBy};

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

/// A node's refusal with who refused, for refusals that differ.
fn held_by(f: &mut fmt::Formatter<'_>, h: &Held) -> fmt::Result {
    match h.expires_in {
        Some(d) => write!(f, "{} ({}, expires in {d:?})", h.node, h.by),
        None => write!(f, "{} ({}, no expiry set)", h.node, h.by),
    }
}

/// Who holds the lock, if every refusing node said the same.
fn one_holder(held_on: &[Held]) -> Option<HeldBy> {
    let first = held_on.first()?.by;
    held_on.iter().all(|h| h.by == first).then_some(first)
}

/// What kept an acquire in `mode` (of `weight` permits, for a permit)
/// out of `resource`, without the nodes: "all 3 permits of semaphore
/// "deploys" are held".
pub(super) fn refused(resource: &str, held_on: &[Held], mode: LockMode, weight: u32) -> String {
    let permit = mode == LockMode::Permit;
    match one_holder(held_on) {
        Some(HeldBy::Semaphore { permits: 1 }) if permit => {
            format!("the 1 permit of semaphore {resource:?} is held")
        }
        Some(HeldBy::Semaphore { permits }) if permit && weight == 1 => {
            format!("all {permits} permits of semaphore {resource:?} are held")
        }
        Some(HeldBy::Semaphore { permits }) if permit => format!(
            "fewer than the {weight} permits asked for of semaphore {resource:?} ({permits} \
             permits) are free"
        ),
        Some(HeldBy::Semaphore { permits }) => format!(
            "{resource:?} is a semaphore of {permits} permits, not a lock, and its permits \
             are held"
        ),
        Some(HeldBy::Readers) if permit => {
            format!("{resource:?} is held by readers of a lock, not by a semaphore")
        }
        Some(HeldBy::Owner | HeldBy::Unknown) if permit => {
            format!("{resource:?} is held as a lock, not by a semaphore")
        }
        Some(HeldBy::Readers) => format!("lock {resource:?} is held by readers"),
        Some(HeldBy::Queued) if permit => {
            format!("others who came first wait in line for the permits of semaphore {resource:?}")
        }
        Some(HeldBy::Queued) => format!(
            "others who came first wait in line for lock {resource:?} (a reader waits \
             behind a writer that came before it)"
        ),
        Some(HeldBy::Owner | HeldBy::Unknown) => {
            format!("lock {resource:?} is held by another owner")
        }
        None if permit => format!("semaphore {resource:?} has no permit free"),
        None => format!("lock {resource:?} is held by other owners"),
    }
}

/// What a lease of the same Locker holding the lock means.
const REENTRANT: &str = "a lease of this same Locker holds it: locks are not reentrant, so a \
     task that asks again for a lock it already holds waits for itself (hand the lease down \
     instead)";

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
                mode,
                weight,
                by_this_locker,
            } => {
                let needs = match mode {
                    LockMode::Permit => "a permit needs",
                    _ => "a quorum needs",
                };
                write!(
                    f,
                    "{} on {} of {nodes} nodes ({needs} {quorum}): ",
                    refused(resource, held_on, *mode, *weight),
                    held_on.len()
                )?;
                match one_holder(held_on) {
                    Some(_) => list(f, held_on, held)?,
                    None => list(f, held_on, held_by)?,
                }
                // Who, each once (the time by this machine's clock).
                let named = held_on.iter().filter_map(|h| h.holder.as_ref());
                if let Some(who) = Holder::describe_all(named, std::time::SystemTime::now()) {
                    write!(f, "; held by {who}")?;
                }
                if !failed.is_empty() {
                    f.write_str("; also failed: ")?;
                    list(f, failed, |f, e| write!(f, "{e:#}"))?;
                }
                if *by_this_locker {
                    write!(f, "; {REENTRANT}")?;
                }
                Ok(())
            }
            Error::NoQuorum {
                op: Op::Release,
                resource,
                succeeded,
                quorum,
                nodes,
                failed,
                refused_by,
            } => {
                let free = succeeded + refused_by.len();
                write!(
                    f,
                    "release of lock {resource:?} reached no quorum: {succeeded} of {nodes} \
                     nodes released it, {quorum} needed"
                )?;
                if !refused_by.is_empty() {
                    f.write_str("; our token was already gone on ")?;
                    list(f, refused_by, |f, h| write!(f, "{}", h.node))?;
                }
                match self.may_still_be_held() {
                    false => write!(
                        f,
                        "; {free} of {nodes} nodes are known free of it, so no quorum holds \
                         it any more"
                    )?,
                    true => write!(
                        f,
                        "; {free} of {nodes} nodes are known free of it, and the others may \
                         hold it until it expires"
                    )?,
                }
                if !failed.is_empty() {
                    f.write_str("; failed: ")?;
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
                        list(f, refused_by, held_by)?;
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
                last,
            } => write!(
                f,
                "gave up waiting for lock {resource:?} after {waited:?} and {attempts} \
                 attempts: {}",
                last.why()
            ),
            Error::PermitsDiffer {
                resource,
                asked,
                held,
                node,
            } => write!(
                f,
                "semaphore {resource:?} has {held} permits on {node}, and this acquire asked \
                 for {asked}: every holder of a name must give the same number of permits \
                 (it is fixed while any permit is held); nothing was taken"
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
            Error::InsideRuntime => f.write_str(
                "a redlease::blocking call was made inside a Tokio runtime, where blocking \
                 could stall or deadlock it: use the async API there, or call from a thread \
                 without a runtime",
            ),
            Error::Forked {
                built_in,
                called_in,
            } => write!(
                f,
                "this redlease::blocking::Locker was built in process {built_in} and inherited \
                 across fork() by process {called_in}, where its threads and connections do \
                 not exist: build a new Locker in the child"
            ),
        }
    }
}

impl Error {
    /// Why an attempt failed, in a few words, for a wait that gave up on
    /// it: what kept the lock, or what the nodes did instead of voting.
    /// (The whole error is the wait's `source`.)
    fn why(&self) -> String {
        match self {
            Error::Taken {
                resource,
                held_on,
                nodes,
                mode,
                weight,
                by_this_locker,
                ..
            } => {
                let mut why = format!(
                    "{} on {} of {nodes} nodes",
                    refused(resource, held_on, *mode, *weight),
                    held_on.len()
                );
                if *by_this_locker {
                    why = format!("{why}; {REENTRANT}");
                }
                why
            }
            Error::NoQuorum {
                nodes,
                failed,
                refused_by,
                ..
            } => {
                let quarantined: Vec<_> = failed
                    .iter()
                    .filter_map(|e| match e.kind() {
                        NodeErrorKind::Quarantined { left, .. } => Some(*left),
                        _ => None,
                    })
                    .collect();
                let mut parts = Vec::new();
                if let Some(soonest) = quarantined.iter().min() {
                    parts.push(format!(
                        "{} of {nodes} nodes cast no vote in their restart quarantine (the \
                         first votes again in {soonest:?}; a server votes only once it has \
                         been up as long as the quarantine, which is the TTL unless \
                         advanced.restart_quarantine sets it)",
                        quarantined.len()
                    ));
                }
                let other = failed.len() - quarantined.len();
                if other > 0 {
                    parts.push(format!("{other} of {nodes} nodes failed"));
                }
                if !refused_by.is_empty() {
                    parts.push(format!(
                        "{} of {nodes} nodes refused it (held elsewhere)",
                        refused_by.len()
                    ));
                }
                match parts.is_empty() {
                    true => "no quorum of the nodes agreed".to_string(),
                    false => parts.join("; "),
                }
            }
            Error::ValidityExhausted { ttl, .. } => {
                format!("the round trips spent the {ttl:?} TTL before a quorum answered")
            }
            other => other.to_string(),
        }
    }
}
