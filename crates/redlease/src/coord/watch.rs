//! Looking at a name, and watching it: what every node says of it
//! (one inspection, fanned out), and the same again each time it changes.
//!
//! A watcher subscribes to the name's watchers' channel on every node
//! (through the Locker's shared subscriptions, see
//! [`subscription`](crate::coord::acquire::subscription)), on which every
//! script that changes the name tells it (taken, released, a waiter came
//! or left, a leader proclaimed; engine.lua, `E.changed`), and reads the
//! name again when told. What changes with no message, it reads again when
//! it is due: a hold running out (its holder died, or renews late), a
//! lock-delay or a quarantine ending; and, while its subscription stands
//! on fewer than a quorum of nodes, every second. With nothing due it
//! looks once a minute, in case a message was lost with its connection
//! unnoticed. A renewal is not told: a watcher of a name held by a lease
//! kept alive reads it again about once per TTL, when the hold it last saw
//! would have ended.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use crate::coord::acquire::subscription::Waiter;
use crate::coord::engine::Engine;
use crate::core::error::Error;
use crate::core::keys::changed_channel;
use crate::core::lock_status::{LockStatus, Summary, Verdict};

/// What every node says of `resource` now, its election's leader record
/// included. One round trip per node, at once, each bounded by the
/// timeout a lock with the default TTL gets.
pub(crate) async fn inspect(engine: &Engine, resource: &str) -> Result<LockStatus, Error> {
    let settings = engine.settings();
    crate::core::keys::check_resource(&settings.prefix, resource)?;
    let timeout = engine.timing("ttl", settings.ttl)?.node_timeout;
    let keys = engine.keys(resource);
    let answers = join_all(engine.nodes().iter().map(|node| {
        let keys = &keys;
        async move { (node.id().clone(), node.inspect(keys, timeout).await) }
    }))
    .await;
    Ok(LockStatus {
        resource: resource.to_string(),
        key: keys.lock.to_string(),
        nodes: answers,
    })
}

/// The longest a watcher goes without a look when nothing is due.
const SAFETY_LOOK: Duration = Duration::from_secs(60);
/// How often a watcher looks while its subscription stands on fewer than a
/// quorum of nodes (a change may go unheard).
const UNHEARD_LOOK: Duration = Duration::from_secs(1);
/// How long after a hold is due to end a watcher looks: the server's
/// expiry and this machine's timer need not agree to the millisecond.
const LATE_BY: Duration = Duration::from_millis(5);

/// One watcher of one name (see the module docs).
pub(crate) struct Watching {
    engine: Arc<Engine>,
    resource: String,
    waiter: Option<Waiter>,
    /// What the last state told said, and when to look again unless told.
    last: Option<(Summary, Instant)>,
}

impl std::fmt::Debug for Watching {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watching")
            .field("resource", &self.resource)
            .finish_non_exhaustive()
    }
}

impl Watching {
    pub(crate) fn new(engine: Arc<Engine>, resource: String) -> Watching {
        Watching {
            engine,
            resource,
            waiter: None,
            last: None,
        }
    }

    pub(crate) fn resource(&self) -> &str {
        &self.resource
    }

    /// The name's state now, on the first call; then the next state that
    /// differs from the last one returned. Cancel safe: a state read and
    /// not returned is read again.
    pub(crate) async fn changed(&mut self) -> Result<LockStatus, Error> {
        let engine = self.engine.clone();
        if self.waiter.is_none() {
            // The name is checked before anything is subscribed.
            crate::core::keys::check_resource(&engine.settings().prefix, &self.resource)?;
            let channel = changed_channel(&engine.key(&self.resource));
            let mut waiter = engine.notifier().watch(&channel);
            // Subscribed before the first look: a change after the look
            // is then heard.
            waiter.subscribed(engine.settings().connect_timeout).await;
            self.waiter = Some(waiter);
        }
        loop {
            if engine.is_closed() {
                return Err(Error::Closed);
            }
            if let Some((_, due)) = &self.last {
                let waiter = self.waiter.as_ref().expect("subscribed above");
                let due = match waiter.heard() {
                    true => *due,
                    false => (*due).min(Instant::now() + UNHEARD_LOOK),
                };
                tokio::select! {
                    () = waiter.woken() => {}
                    () = tokio::time::sleep_until(due) => {}
                }
            }
            let status = inspect(&engine, &self.resource).await?;
            let summary = status.summary();
            let due = Instant::now() + next_look(&status);
            match &mut self.last {
                Some((seen, when)) if *seen == summary => *when = due,
                last => {
                    *last = Some((summary, due));
                    return Ok(status);
                }
            }
        }
    }
}

/// How long until something about `status` may change without a message:
/// the soonest hold (or lock-delay) to end, the soonest quarantine to end;
/// a second when nodes failed to answer; at most [`SAFETY_LOOK`].
pub(crate) fn next_look(status: &LockStatus) -> Duration {
    let mut soonest = SAFETY_LOOK;
    let mut at = |d: Duration| soonest = soonest.min(d + LATE_BY);
    for (_, answer) in &status.nodes {
        let Ok(state) = answer else {
            at(UNHEARD_LOOK);
            continue;
        };
        for holder in &state.holders {
            if let Some(left) = holder.expires_in {
                at(left);
                // Entering its lock-delay (the lease's own end).
                if let Some(delay) = holder.lock_delay.filter(|d| *d < left) {
                    at(left - delay);
                }
            }
        }
        if let crate::core::lock_status::KeyState::Held {
            expires_in: Some(left),
        } = state.key
        {
            at(left);
        }
        if let Some(q) = state.quarantine {
            at(q.left);
        }
    }
    if matches!(status.verdict(), Verdict::Unknown { .. }) {
        at(UNHEARD_LOOK);
    }
    soonest
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lock_status::{KeyState, NodeLockState};
    use crate::core::mode::LockMode;
    use crate::core::node_error::{NodeError, NodeErrorKind, NodeId};
    use crate::core::owner::Holder;

    fn held(left: Option<Duration>, holders: Vec<Holder>) -> NodeLockState {
        NodeLockState {
            key: match left {
                Some(left) => KeyState::Held {
                    expires_in: Some(left),
                },
                None => KeyState::Free,
            },
            fencing_counter: None,
            waiting: 0,
            quarantine: None,
            mode: left.map(|_| LockMode::Exclusive),
            readers: 0,
            permits: None,
            writer_waits: false,
            reserved: false,
            holders,
            queued: 0,
            leader: None,
        }
    }

    fn status(nodes: Vec<Result<NodeLockState, NodeError>>) -> LockStatus {
        LockStatus {
            resource: "r".into(),
            key: "redlease:{r}".into(),
            nodes: nodes
                .into_iter()
                .enumerate()
                .map(|(i, a)| (NodeId::new(i, format!("n{i}")), a))
                .collect(),
        }
    }

    #[test]
    fn a_watcher_looks_when_a_hold_or_its_lock_delay_is_due_to_end() {
        let ms = Duration::from_millis;
        // Free everywhere: nothing is due; the safety look.
        assert_eq!(
            next_look(&status(vec![Ok(held(None, vec![]))])),
            SAFETY_LOOK
        );
        // A hold with 2 s left: looked at as it ends.
        let plain = Holder::of_value(&format!("{}\tci:1\t5", "a".repeat(48)));
        let node = held(Some(ms(2_000)), vec![plain.lasting(Some(ms(2_000)))]);
        assert_eq!(next_look(&status(vec![Ok(node)])), ms(2_000) + LATE_BY);
        // With a 1.5 s lock-delay: first as the lease ends (the delay
        // begins), 0.5 s from now.
        let delayed = Holder::of_value(&format!("{}\tci:1\t5\t1500", "a".repeat(48)));
        let node = held(Some(ms(2_000)), vec![delayed.lasting(Some(ms(2_000)))]);
        assert_eq!(next_look(&status(vec![Ok(node)])), ms(500) + LATE_BY);
        // A node that failed to answer: within a second.
        let failed = NodeError::new(
            NodeId::new(1, "n1".to_string()),
            NodeErrorKind::Timeout(ms(5)),
        );
        let look = next_look(&status(vec![Ok(held(None, vec![])), Err(failed)]));
        assert_eq!(look, UNHEARD_LOOK + LATE_BY);
    }
}
