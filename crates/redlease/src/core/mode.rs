//! [`LockMode`]: whether a lease holds a lock alone, shares it with other
//! readers, or holds one of a semaphore's permits; and [`Hold`], the same
//! with what the layers below need to know of it.

use std::num::NonZeroU32;

use crate::core::quorum::{permit_quorum, quorum};

/// How a [`Lease`](crate::Lease) holds its lock: alone, as a writer (what
/// [`Locker::lock`](crate::Locker::lock) and
/// [`Locker::write_lock`](crate::Locker::write_lock) take), or shared
/// with any number of other readers ([`Locker::read_lock`](crate::Locker::read_lock)).
/// Readers and a writer of one name exclude each other.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redlease::Error> {
/// # let nodes = redlease_testkit::RedisNodes::start(1);
/// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
/// let lease = locker.read_lock("catalog").await?;
/// assert_eq!(lease.mode(), redlease::LockMode::Shared);
/// # lease.release().await }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockMode {
    /// One writer, and nobody else.
    Exclusive,
    /// Readers, any number of them, and no writer.
    Shared,
    /// One of a semaphore's permits ([`Locker::semaphore`](crate::Locker::semaphore)):
    /// at most its number of holders at once.
    Permit,
}

/// How an acquisition holds its name, as the coordination layer and the
/// nodes need it: the public mode, and a semaphore's number of permits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Hold {
    Exclusive,
    Shared,
    /// `majority`: counted at a plain majority instead of the permit
    /// quorum, which is unsafe beyond one permit (only for the soak's
    /// negative control that shows it: see `Semaphore::unsafe_majority`).
    Permit {
        permits: NonZeroU32,
        majority: bool,
    },
}

impl Hold {
    pub(crate) fn mode(self) -> LockMode {
        match self {
            Hold::Exclusive => LockMode::Exclusive,
            Hold::Shared => LockMode::Shared,
            Hold::Permit { .. } => LockMode::Permit,
        }
    }

    /// How many of `nodes` nodes must hold it for it to be held: a
    /// majority, or for a semaphore's permit the larger
    /// [`permit_quorum`].
    pub(crate) fn quorum(self, nodes: usize) -> usize {
        match self {
            Hold::Exclusive | Hold::Shared => quorum(nodes),
            Hold::Permit { majority: true, .. } => quorum(nodes),
            Hold::Permit { permits, .. } => permit_quorum(nodes, permits.get()),
        }
    }
}
