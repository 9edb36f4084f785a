//! A waiter's place in a lock's queue on the servers (see
//! [`turn`](crate::coord::turn)): how the acquire script names it, and
//! its removal when the waiter stops waiting.

use std::sync::Arc;
use std::time::Duration;

use crate::coord::engine::Engine;
use crate::core::keys::LockKeys;
use crate::core::validity::Timing;
use crate::protocol::acquire::QueuePlace;

/// How long a lock's queue lives after the latest waiter joined it: it is
/// garbage once its waiters are gone without leaving (killed). Should it
/// expire under waiters that wait longer than this, with nobody joining
/// meanwhile, the next release finds nobody queued and announces itself
/// to every waiting Locker, whose next attempts queue again.
pub(crate) const QUEUE_LIFETIME: Duration = Duration::from_secs(3600);

/// The shortest handoff window: a woken waiter's attempt must reach the
/// server within it (twice the node timeout, if that is longer).
const MIN_WINDOW: Duration = Duration::from_millis(250);

/// A waiter's place in a lock's queue: `TAG:ID:WINDOW` (its Locker's tag,
/// its number there, its handoff window in ms). Dropped before the waiter
/// took the lock, or after it took it over several nodes (where some may
/// still queue it), it leaves the queue on every node in the background.
pub(crate) struct Place {
    engine: Arc<Engine>,
    keys: LockKeys,
    spelled: Spelled,
    timeout: Duration,
    /// Taken on the only node, which took the place off its queue.
    used: bool,
}

/// A place as the acquire script takes it (see [`QueuePlace`]).
#[derive(Clone)]
pub(crate) struct Spelled {
    pub(crate) member: Arc<str>,
    pub(crate) ticket: u64,
}

impl Spelled {
    pub(crate) fn args(&self) -> QueuePlace<'_> {
        QueuePlace {
            place: &self.member,
            ticket: self.ticket,
            lifetime: QUEUE_LIFETIME,
        }
    }
}

impl Place {
    pub(crate) fn new(engine: &Arc<Engine>, keys: &LockKeys, id: u64, timing: Timing) -> Place {
        let window = (2 * timing.node_timeout).max(MIN_WINDOW);
        let tag = engine.settings().tag.as_str();
        let member = format!("{tag}:{id}:{}", window.as_millis());
        // One node orders by its own clock; several by ours, alike.
        let ticket = match engine.nodes().len() {
            1 => 0,
            _ => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |since| since.as_micros() as u64),
        };
        Place {
            engine: engine.clone(),
            keys: keys.clone(),
            spelled: Spelled {
                member: member.into(),
                ticket,
            },
            timeout: timing.node_timeout,
            used: false,
        }
    }

    /// The place as the acquire script takes it.
    pub(crate) fn spelled(&self) -> Spelled {
        self.spelled.clone()
    }

    /// The waiter took the lock on `nodes` nodes: with one, its place is
    /// used up there.
    pub(crate) fn took(&mut self, nodes: usize) {
        self.used = nodes == 1;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.used || tokio::runtime::Handle::try_current().is_err() {
            // Without a runtime, the place is passed over at its turn (its
            // Locker no longer listens) or after the handoff window.
            return;
        }
        let engine = self.engine.clone();
        let (keys, member, timeout) =
            (self.keys.clone(), self.spelled.member.clone(), self.timeout);
        let background = engine.background().clone();
        background.spawn(async move {
            let leaves = engine.nodes().iter().map(|node| {
                let (keys, member) = (&keys, &member);
                async move {
                    if let Err(e) = node.leave_queue(&keys.lock, member, timeout).await {
                        tracing::debug!(error = %e, "leaving the queue failed; the place is passed over");
                    }
                }
            });
            futures_util::future::join_all(leaves).await;
        });
    }
}
