//! Giving a lease back: at quorum when its holder releases it and waits
//! for the answer ([`ReleaseOnDrop::release`], behind `Lease::release`),
//! or on every node in the background when nobody waits (an attempt that
//! failed or was dropped, a lease dropped without `release`, a Locker
//! closing: [`release_on`]); an exported lease is given back without
//! being adopted ([`release_adopted`]). A downgrade gives back the write hold and
//! keeps a read hold ([`downgrade`]).

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use crate::coord::background;
use crate::coord::engine::Engine;
use crate::coord::fanout;
use crate::coord::guard::ReleaseOnDrop;
use crate::coord::ownership::Ownership;
use crate::coord::renew::gone;
use crate::core::error::{Error, Op};
use crate::core::quorum::Decision;
use crate::core::token::ReleaseId;
use crate::transport::node::Node;

pub(crate) mod downgrade;

impl ReleaseOnDrop {
    /// Gives the lease back on every node where it still holds our token,
    /// decided at quorum, and tells its waiters; `label` names it in an
    /// error (called only for one). `Ok` means a quorum confirmed the lease was still ours until
    /// now; [`Error::Closed`] that the Locker's `close` released it first.
    /// The guard is disarmed either way: a failed release is not retried
    /// in the background (the keys expire by their TTL).
    pub(crate) async fn release(&mut self, label: impl Fn() -> String) -> Result<(), Error> {
        let kept = self.kept_for_lock_delay();
        if !self.unregister() {
            // `close` released it already.
            return Err(Error::Closed);
        }
        if let Some(why) = kept {
            // Lost under a lock-delay: its holds stay until it is over.
            self.disarm();
            return Err(gone(Op::Release, why, &label(), Vec::new(), Vec::new()));
        }
        let engine = self.engine.clone();
        let ownership = self.ownership.clone();
        let timeout = self.timing.node_timeout;
        // Nodes whose acquire still runs get the release once it is done
        // there (it must not overtake it), the others at once.
        let deferred = ownership.in_flight.nodes() != 0;
        // Worked out only if a task of this Locker waits, and then once.
        let release_id = std::sync::OnceLock::new();
        let release_id = || *release_id.get_or_init(|| ReleaseId::of(&ownership.token));
        let quorum = ownership.claim.quorum(engine.nodes().len());
        // A task of this Locker that waits for the lock marked it; the
        // first of them, if it waits out of line for this lease alone, goes
        // in line where others wait (see release.lua).
        let notifier = engine.started_notifier();
        let marked = notifier.is_some_and(|n| {
            ownership
                .each_key()
                .any(|key| n.has_waiters(&crate::core::keys::release_channel(key)))
        });
        let next: Option<(Arc<str>, u64)> = match (marked, ownership.claim.alone()) {
            (true, Some(keys)) => {
                notifier.and_then(|n| n.next_place(&crate::core::keys::release_channel(&keys.lock)))
            }
            _ => None,
        };
        let next = Arc::new(next);
        let decided = fanout::until_decided_at(engine.nodes(), quorum, |node| {
            let (ownership, next) = (ownership.clone(), next.clone());
            async move {
                let i = node.id().index();
                background::lowered(&*ownership, 1 << i).await;
                if !ownership.written.may_hold(i) {
                    return Ok(false);
                }
                ownership
                    .release_on_node(&node, true, marked, next.as_ref().as_ref(), timeout)
                    .await
            }
        });
        let mut decided = std::pin::pin!(decided);
        // The first poll writes the release to every node's connection
        // (unless one waits for its acquire): the next waiter of this
        // Locker may send its acquire now, behind it (see
        // `Notifier::released`).
        let first = std::future::poll_fn(|cx| Poll::Ready(decided.as_mut().poll(cx))).await;
        let mut replies = match first {
            Poll::Ready(replies) => replies,
            Poll::Pending if deferred => decided.await,
            Poll::Pending => {
                for key in ownership.each_key() {
                    engine.announce_release(key, release_id);
                }
                decided.await
            }
        };
        let result = match replies.tally.decision() {
            Decision::Reached => {
                replies.detach(engine.background());
                for key in ownership.each_key() {
                    engine.announce_release(key, release_id);
                }
                Ok(())
            }
            Decision::Impossible | Decision::Pending => {
                replies.finish().await;
                let expired = Instant::now() >= ownership.state.get().valid_until;
                Err(replies
                    .shortfall(Op::Release, engine.nodes())
                    .into_error(&label(), expired))
            }
        };
        self.disarm();
        result
    }
}

/// Gives back an exported lease without adopting it
/// (`Locker::release_handle`): released on every node that holds its
/// token, decided at quorum, and its waiters told. Short of a quorum, the
/// error (`label` names the lease).
pub(crate) async fn release_adopted(
    engine: &Arc<Engine>,
    ownership: Arc<Ownership>,
    timeout: Duration,
    label: &str,
) -> Result<(), Error> {
    let quorum = ownership.claim.quorum(engine.nodes().len());
    let mut replies = fanout::until_decided_at(engine.nodes(), quorum, |node| {
        let ownership = ownership.clone();
        async move {
            ownership
                .release_on_node(&node, true, false, None, timeout)
                .await
        }
    })
    .await;
    match replies.tally.decision() {
        Decision::Reached => {
            replies.detach(engine.background());
            let id = ReleaseId::of(&ownership.token);
            for key in ownership.each_key() {
                engine.announce_release(key, || id);
            }
            Ok(())
        }
        _ => {
            replies.finish().await;
            Err(replies
                .shortfall(Op::Release, engine.nodes())
                .into_error(label, false))
        }
    }
}

/// Whether a release tells the lock's waiters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Announce {
    /// A lock that was held is free: waiters retry at once.
    Waiters,
    /// The cleanup of an attempt that failed: the lock was never ours, so
    /// nothing was freed, and waking waiters (the attempt's own task first)
    /// would only turn waiting into a busy loop of failing attempts.
    Nobody,
}

/// Runs the compare-and-delete on every node that may hold our token,
/// concurrently, and waits for all of them (each bounded by `timeout`).
/// Returns whether it was announced and some node deleted the key, for the
/// caller to tell local waiters too (see [`ReleaseId::of`]). Failures are only logged: the
/// keys carry a TTL, so a node that missed the release frees the lock by
/// expiry.
pub(crate) async fn release_on(
    nodes: &[Arc<Node>],
    ownership: &Ownership,
    timeout: Duration,
    announce: Announce,
) -> bool {
    let announce = announce == Announce::Waiters;
    let results = join_all(
        nodes
            .iter()
            .filter(|n| ownership.written.may_hold(n.id().index()))
            .map(|n| ownership.release_on_node(n, announce, false, None, timeout)),
    )
    .await;
    let mut deleted = false;
    for result in results {
        match result {
            Ok(d) => deleted |= d,
            Err(e) => tracing::debug!(error = %e, "release failed; the key expires by its TTL"),
        }
    }
    announce && deleted
}
