//! [`ReleaseOnDrop`]: the part of an acquisition that gives the lock back if
//! nobody else does, behind both an attempt dropped mid-flight and a lease
//! dropped without `release`.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Instant;

use crate::coord::background;
use crate::coord::engine::Engine;
use crate::coord::fanout::{Answer, Replies};
use crate::coord::ownership::Ownership;
use crate::core::lease_state::LostReason;
use crate::core::node_error::NodeError;
use crate::core::validity::Timing;

/// Releases a token on every node when dropped, unless disarmed.
pub(crate) struct ReleaseOnDrop {
    pub(crate) engine: Arc<Engine>,
    pub(crate) ownership: Arc<Ownership>,
    /// The TTL and timeouts of the latest acquire or extend.
    pub(crate) timing: Timing,
    /// The lease's entry in the engine's record of held leases, once the
    /// acquisition became a lease.
    pub(crate) registration: Option<NonZeroU64>,
    /// The lease's registration with the renewer, if kept alive.
    pub(crate) renewal: Option<NonZeroU64>,
    armed: bool,
}

impl ReleaseOnDrop {
    pub(crate) fn new(engine: Arc<Engine>, ownership: Arc<Ownership>, timing: Timing) -> Self {
        ReleaseOnDrop {
            engine,
            ownership,
            timing,
            registration: None,
            renewal: None,
            armed: true,
        }
    }

    /// Takes the lease off the renewer and the engine's record: no renewal
    /// of it is sent after this. One already on the wire may still land,
    /// which is harmless (the renew script never re-creates a deleted key),
    /// so nothing waits for it. `false` if the Locker's `close` took the
    /// lease first and released it: then nobody else may.
    pub(crate) fn unregister(&mut self) -> bool {
        if let Some(id) = self.renewal.take() {
            self.engine.renewer().remove(id);
        }
        match self.registration.take() {
            Some(id) => self.engine.unregister(id),
            None => true,
        }
    }

    /// Lets this token's requests still in flight in `replies` finish in
    /// the background, handing each late answer to `observe`; a release
    /// of the lease waits for them first, each node's for that node's
    /// (see [`settle`](Self::settle)).
    pub(crate) fn detach<R: Answer>(
        &self,
        replies: Replies<R>,
        mut observe: impl FnMut(usize, &Result<R, NodeError>) + Send + 'static,
    ) {
        let mut raised = background::raise(self.ownership.clone(), replies.pending_nodes());
        replies.detach_observed(self.engine.background(), move |i, answer| {
            observe(i, answer);
            raised.lower(i);
        });
    }

    /// Waits until no earlier request for this token is still in flight
    /// (each is bounded by its node timeout): acquire requests still on
    /// their way to slow nodes. A release sent now could reach a node
    /// before a request that is still connecting or reloading its script,
    /// and leave a key behind.
    pub(crate) async fn settle(&self) {
        background::lowered(&*self.ownership, u64::MAX).await;
    }

    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }

    /// Why a lease is not given back on the servers: with a lock-delay, a
    /// lease that was lost (expired, refused or closed) keeps its holds
    /// until they expire, the delay past its end, so that the next holder
    /// starts only after the writes of this one could land. `None` for an
    /// attempt (its partial holds are always cleaned up), without a
    /// lock-delay, and for a lease still valid.
    pub(crate) fn kept_for_lock_delay(&self) -> Option<LostReason> {
        if self.timing.lock_delay.is_zero() || self.registration.is_none() {
            return None;
        }
        self.ownership.state.get().lost_at(Instant::now())
    }
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let kept = self.kept_for_lock_delay();
        // Unregister now, so no renewal starts after the lease is gone.
        if !self.unregister() || kept.is_some() {
            return;
        }
        // Background::spawn needs a runtime; without one the keys simply
        // expire.
        if tokio::runtime::Handle::try_current().is_err() {
            tracing::warn!(key = %self.ownership.key(), "lock dropped outside a Tokio runtime; it stays until its TTL ends");
            return;
        }
        let engine = self.engine.clone();
        let ownership = self.ownership.clone();
        let timeout = self.timing.node_timeout;
        self.engine.background().spawn(async move {
            background::lowered(&*ownership, u64::MAX).await;
            engine.release(&ownership, timeout).await;
        });
    }
}
