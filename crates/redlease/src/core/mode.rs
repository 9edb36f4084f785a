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

/// How an acquisition holds one name, as the coordination layer and the
/// nodes need it: the public mode, and for a semaphore its number of
/// permits and how many of them this hold takes. The one description of
/// a hold: it travels unchanged from the request to the scripts, which
/// spell it as [`Hold::spelled`] says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Hold {
    Exclusive,
    Shared,
    /// `weight` of a semaphore's `permits` (at most that many).
    /// `majority`: counted at a plain majority instead of the permit
    /// quorum, which is unsafe beyond one permit (only for the soak's
    /// negative control that shows it: see `Semaphore::unsafe_majority`).
    Permit {
        permits: NonZeroU32,
        weight: NonZeroU32,
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

    /// The hold as the scripts read it: `w` alone, `r` shared, `pN:W` for
    /// `W` of a semaphore's `N` permits.
    pub(crate) fn spelled(self) -> std::borrow::Cow<'static, str> {
        match self {
            Hold::Exclusive => "w".into(),
            Hold::Shared => "r".into(),
            Hold::Permit {
                permits, weight, ..
            } => format!("p{permits}:{weight}").into(),
        }
    }

    /// A hold as [`spelled`](Self::spelled), if it is one.
    pub(crate) fn parse(spelled: &str) -> Option<Hold> {
        match spelled {
            "w" => Some(Hold::Exclusive),
            "r" => Some(Hold::Shared),
            _ => {
                let (permits, weight) = spelled.strip_prefix('p')?.split_once(':')?;
                let (permits, weight) = (permits.parse().ok()?, weight.parse().ok()?);
                (weight <= permits).then_some(Hold::Permit {
                    permits,
                    weight,
                    majority: false,
                })
            }
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
