//! A node's refusal: the public [`Held`] that errors show (the node, when
//! the other owner's hold expires, and who that owner is: [`HeldBy`]), and
//! what it tells a waiter beyond that: how many processes wait for the
//! lock, and whose lock it is. That bookkeeping travels beside the error,
//! from the vote to the waiter's next sleep.

use std::time::Duration;

use crate::core::node_error::NodeId;
use crate::core::owner::Holder;

/// A node on which the lock is held by another owner, with the remaining
/// time the node reported and who holds it there.
///
/// ```
/// fn soonest(held_on: &[redlease::Held]) -> Option<std::time::Duration> {
///     held_on.iter().filter_map(|h| h.expires_in).min()
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Held {
    /// The node.
    pub node: NodeId,
    /// The key's remaining TTL there; `None` when the key never expires
    /// (someone wrote it without a TTL).
    pub expires_in: Option<Duration>,
    /// Who keeps the lock from us there.
    pub by: HeldBy,
    /// The holder alone, as its lease names its owner
    /// ([`LockerBuilder::owner`](crate::LockerBuilder::owner)), when it
    /// does.
    pub holder: Option<Holder>,
}

/// Who keeps a lock from being taken on a node, as its refusal said.
///
/// ```
/// use redlease::{Error, HeldBy};
/// # async fn demo(locker: &redlease::Locker) -> Result<(), Error> {
/// match locker.semaphore("deploys", 3).try_acquire().await {
///     Ok(permit) => permit.release().await?,
///     Err(Error::Taken { held_on, .. })
///         if held_on.iter().all(|h| h.by == HeldBy::Semaphore { permits: 3 }) =>
///     {
///         println!("all 3 permits are in use");
///     }
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeldBy {
    /// One owner holds the lock alone: a lease of `lock`, `write_lock`
    /// or `lock_all`.
    Owner,
    /// Readers share the lock (`read_lock`): a writer waits for them.
    Readers,
    /// Nobody holds what this request needs, but others who came first
    /// wait in line for the name (a reader behind a waiting writer, a
    /// small permit behind a large one): every mode waits its turn.
    Queued,
    /// The name is a semaphore's of `permits` permits: for a permit, all
    /// of them are held; for a lock of the same name, the semaphore holds
    /// the name while any of its permits is held.
    Semaphore {
        /// The number of permits its holders gave.
        permits: u32,
    },
    /// The refusal did not say: a key another program wrote under the
    /// lock's name, or a release or extend that found our token gone.
    Unknown,
}

impl std::fmt::Display for HeldBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeldBy::Owner => f.write_str("held by another owner"),
            HeldBy::Readers => f.write_str("held by readers"),
            HeldBy::Queued => f.write_str("wanted by waiters who came first"),
            HeldBy::Semaphore { permits: 1 } => f.write_str("a semaphore's 1 permit is held"),
            HeldBy::Semaphore { permits } => write!(f, "all {permits} permits are held"),
            HeldBy::Unknown => f.write_str("held by another owner"),
        }
    }
}

/// Who a refusal names as the holder, by the number the acquire scripts
/// return for it (owner.lua; [`owner_of`](crate::protocol::set_nx::owner_of)
/// for the plain path): a token's fingerprint below
/// [`MARKERS`](Self::MARKERS), the readers' marker at it, a semaphore's
/// of N permits at `MARKERS + N`, waiters in line at
/// [`QUEUED`](Self::QUEUED), 0 when unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    Unknown,
    /// A holder's token, by its fingerprint.
    Token(u32),
    Readers,
    Semaphore(u32),
    /// Nobody holds what the request needs, but waiters who came first
    /// are in line (engine.lua).
    Queued,
}

impl Owner {
    /// Where the markers' numbers begin: token fingerprints are 27 bits.
    pub(crate) const MARKERS: u32 = 1 << 27;
    /// Refused for the waiters in line: the largest 28-bit number, above
    /// any semaphore's.
    pub(crate) const QUEUED: u32 = (1 << 28) - 1;

    /// The owner a refusal's number names.
    pub(crate) fn of(number: u32) -> Owner {
        match number {
            0 => Owner::Unknown,
            n if n < Self::MARKERS => Owner::Token(n),
            Self::MARKERS => Owner::Readers,
            Self::QUEUED => Owner::Queued,
            n => Owner::Semaphore(n - Self::MARKERS),
        }
    }

    /// The number the scripts give this owner.
    pub(crate) fn number(self) -> u32 {
        match self {
            Owner::Unknown => 0,
            Owner::Token(n) => n,
            Owner::Readers => Self::MARKERS,
            Owner::Semaphore(n) => Self::MARKERS.saturating_add(n),
            Owner::Queued => Self::QUEUED,
        }
    }
}

/// One node's refusal: the other owner's hold, and what the waiter
/// reads of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) held: Held,
    /// How many wait for the lock there (the places in its queue, or,
    /// refused by the plain acquire, the subscribers to its release
    /// channel): spreads a crowd's checks of a held lock.
    pub(crate) waiting: u64,
    /// Who holds it, as [`Owner`]'s number (0: unknown): the same owner
    /// on a quorum of nodes holds the lock; different ones are contenders
    /// of a split vote, about to undo their partial grants.
    pub(crate) owner: u32,
}

impl Refusal {
    /// A refusal by the holder `owner` (its number: see [`Owner`]).
    pub(crate) fn new(
        node: NodeId,
        expires_in: Option<Duration>,
        waiting: u64,
        owner: u32,
    ) -> Self {
        let by = match Owner::of(owner) {
            Owner::Queued => HeldBy::Queued,
            Owner::Unknown => HeldBy::Unknown,
            Owner::Token(_) => HeldBy::Owner,
            Owner::Readers => HeldBy::Readers,
            Owner::Semaphore(permits) => HeldBy::Semaphore { permits },
        };
        Refusal {
            held: Held {
                node,
                expires_in,
                by,
                holder: None,
            },
            waiting,
            owner,
        }
    }

    /// The same refusal, by the holder `holder` names.
    pub(crate) fn naming(mut self, holder: Option<Holder>) -> Self {
        self.held.holder = holder;
        self
    }

    /// A refusal that says nothing of the holder (a release or extend
    /// that found our token gone).
    pub(crate) fn bare(node: NodeId) -> Self {
        Refusal::new(node, None, 0, 0)
    }
}

/// The owner number of a lock held by readers: that of the value its key
/// holds meanwhile (`READERS` in `protocol::claim`), the same on every
/// node, so readers on a quorum are "one owner" to a waiting writer.
#[cfg(test)]
pub(crate) const READERS_OWNER: u32 = Owner::MARKERS;

/// What a failed acquire's refusals said of the lock's holder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Busy {
    /// One owner holds the lock on a quorum of the nodes (not a split vote
    /// between contenders, whose partial grants are undone at once and
    /// announced to no one).
    pub(crate) one_owner: bool,
    /// The most waiters any refusing node counted: the places in its
    /// queue (or, refused by the plain acquire, the subscribers to its
    /// release channel).
    pub(crate) crowd: u64,
}

impl Busy {
    /// From the refusals of one attempt, with `quorum` the nodes that
    /// must agree.
    pub(crate) fn of(refusals: &[Refusal], quorum: usize) -> Busy {
        let one_owner = refusals
            .iter()
            .filter(|r| r.owner != 0)
            .any(|r| refusals.iter().filter(|o| o.owner == r.owner).count() >= quorum);
        Busy {
            one_owner,
            crowd: refusals.iter().map(|r| r.waiting).max().unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(owners: &[u32], nodes: usize) -> Busy {
        let refusals: Vec<Refusal> = owners
            .iter()
            .enumerate()
            .map(|(i, &owner)| Refusal::new(NodeId::new(i, "n"), None, i as u64, owner))
            .collect();
        Busy::of(&refusals, crate::core::quorum::quorum(nodes))
    }

    #[test]
    fn one_owner_on_a_quorum_holds_the_lock_and_a_split_vote_does_not() {
        assert!(busy(&[7], 1).one_owner);
        assert!(busy(&[7, 7, 7], 5).one_owner);
        assert!(busy(&[7, 9, 7, 7], 5).one_owner);
        assert!(!busy(&[7, 9, 7], 5).one_owner, "a split vote");
        assert!(!busy(&[1, 2, 3, 4, 5], 5).one_owner);
        assert!(!busy(&[0, 0, 0], 5).one_owner, "unknown owners");
    }

    #[test]
    fn the_crowd_is_the_most_any_node_counted() {
        assert_eq!(busy(&[7, 7, 7], 5).crowd, 2);
        assert_eq!(busy(&[], 5), Busy::default());
    }

    #[test]
    fn the_public_error_keeps_only_the_node_and_the_expiry() {
        let refused = Refusal::new(NodeId::new(0, "n"), Some(Duration::from_secs(1)), 5, 7);
        let shown = format!("{:?}", refused.held);
        assert!(
            !shown.contains("owner") && !shown.contains("waiting"),
            "{shown}"
        );
        assert_eq!(refused.held.expires_in, Some(Duration::from_secs(1)));
    }
}
