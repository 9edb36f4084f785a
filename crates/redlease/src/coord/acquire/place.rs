//! A waiter's place in line for its claim on the servers (engine.lua):
//! how the scripts name it, its arrival ticket, and its removal when the
//! waiter stops waiting.

use std::sync::Arc;
use std::time::Duration;

use crate::coord::engine::Engine;
use crate::core::claim::Claim;
use crate::core::validity::Timing;
use crate::protocol::claim::InLine;

/// The shortest handoff window: a woken waiter's attempt must reach the
/// server within it (twice the node timeout, if that is longer).
const MIN_WINDOW: Duration = Duration::from_millis(250);

/// A waiter's place: `TAG:ID:WINDOW` (its Locker's tag, its number
/// there, its handoff window in ms), and its arrival ticket. A single
/// name's handoff window is short: the woken waiter takes it at once. A
/// set keeps what is reserved for it while it waits for its other names,
/// so its window is its TTL, renewed by each of its attempts.
///
/// A place is ready from the waiter's first refusal on, but goes in line
/// only when the waiter waits for a holder of another Locker, or for
/// waiters in line (see [`enter`](Self::enter)): one that waits for
/// another task of its own Locker is handed the name in the process, and
/// put in line by that task's release only where others wait (see
/// release.lua). Dropped once in line, it leaves the queues on every
/// node in the background.
pub(crate) struct Place {
    engine: Arc<Engine>,
    claim: Claim,
    spelled: Spelled,
    timeout: Duration,
    in_line: bool,
    /// Taken on the only node, which took the place out of its queue.
    used: bool,
}

/// A place as the scripts take it.
#[derive(Clone, Debug)]
pub(crate) struct Spelled {
    pub(crate) member: Arc<str>,
    /// Microseconds since the Unix epoch by this machine's clock when the
    /// waiter began to wait: the same number on every node, so that every
    /// node orders the waiters alike.
    pub(crate) ticket: u64,
}

impl Spelled {
    pub(crate) fn in_line(&self) -> InLine<'_> {
        InLine {
            place: &self.member,
            ticket: self.ticket,
        }
    }
}

/// Now, as an arrival ticket (see [`Spelled::ticket`]); `waited` ago.
pub(crate) fn ticket(waited: Duration) -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(1, |since| {
        u64::try_from(since.saturating_sub(waited).as_micros()).unwrap_or(u64::MAX)
    })
}

impl Place {
    /// The place of waiter `id` of this Locker for `claim`, which began to
    /// wait `waited` ago; not in line yet.
    pub(crate) fn new(
        engine: &Arc<Engine>,
        claim: &Claim,
        id: u64,
        timing: Timing,
        waited: Duration,
    ) -> Place {
        let window = match claim.is_set() {
            true => timing.ttl,
            false => (2 * timing.node_timeout).max(MIN_WINDOW),
        };
        let tag = engine.settings().tag.as_str();
        let member = format!("{tag}:{id}:{}", window.as_millis());
        Place {
            engine: engine.clone(),
            claim: claim.clone(),
            spelled: Spelled {
                member: member.into(),
                ticket: ticket(waited),
            },
            timeout: timing.node_timeout,
            in_line: false,
            used: false,
        }
    }

    /// The place as the scripts take it.
    pub(crate) fn spelled(&self) -> Spelled {
        self.spelled.clone()
    }

    /// Whether it is in line on the servers (attempts carry it).
    pub(crate) fn is_in_line(&self) -> bool {
        self.in_line
    }

    /// From now on, attempts carry the place: the waiter is in line.
    pub(crate) fn enter(&mut self) {
        self.in_line = true;
    }

    /// The waiter took its claim on `nodes` nodes: with one, its place is
    /// used up there.
    pub(crate) fn took(&mut self, nodes: usize) {
        self.used = nodes == 1;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if !self.in_line || self.used || tokio::runtime::Handle::try_current().is_err() {
            // Without a runtime, the place is passed over at its turn (its
            // Locker no longer listens) or after its handoff window.
            return;
        }
        let engine = self.engine.clone();
        let (claim, member, timeout) = (
            self.claim.clone(),
            self.spelled.member.clone(),
            self.timeout,
        );
        let background = engine.background().clone();
        background.spawn(async move {
            let leaves = engine.nodes().iter().map(|node| {
                let (claim, member) = (&claim, &member);
                async move {
                    if let Err(e) = node.leave(claim, member, timeout).await {
                        tracing::debug!(error = %e, "leaving the queue failed; the place is passed over");
                    }
                }
            });
            futures_util::future::join_all(leaves).await;
        });
    }
}
