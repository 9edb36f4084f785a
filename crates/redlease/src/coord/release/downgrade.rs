//! A downgrade: the write hold given back and a read hold of the same
//! token kept in its place, in one step per node, decided at quorum
//! (behind `Lease::downgrade`).

use std::sync::Arc;

use crate::coord::background;
use crate::coord::fanout;
use crate::coord::guard::ReleaseOnDrop;
use crate::coord::ownership::Ownership;
use crate::core::error::{Error, Op};
use crate::core::quorum::Decision;

impl ReleaseOnDrop {
    /// Turns this guard's hold, every name held alone, into a read hold
    /// of the same names, token and validity on a quorum of the nodes.
    /// Returns the read hold's guard, registered with the Locker in place
    /// of this one (disarmed), and whether the write hold was kept alive.
    /// Short of a quorum, the error (`label` names the lease in it); this
    /// guard is left armed, and the read hold's guard, dropped, gives the
    /// hold back in that form too: each node holds one or the other.
    pub(crate) async fn downgrade(
        &mut self,
        label: impl Fn() -> String,
    ) -> Result<(ReleaseOnDrop, bool), Error> {
        let engine = self.engine.clone();
        let old = self.ownership.clone();
        let claim = old.claim.clone();
        let timeout = self.timing.node_timeout;
        // The renewal of the write hold stops: from here on the hold is
        // renewed as a read hold, or not at all.
        let kept_alive = self.renewal.is_some();
        if let Some(id) = self.renewal.take() {
            engine.renewer().remove(id);
        }
        let shared = Arc::new(Ownership::adopted(
            claim.shared(),
            engine.nodes().len(),
            old.token.clone(),
            timeout,
        ));
        shared.state.modify_if(|s| {
            *s = old.state.get();
            false
        });
        let quorum = claim.quorum(engine.nodes().len());
        let mut replies = fanout::until_decided_at(engine.nodes(), quorum, |node| {
            let old = old.clone();
            async move {
                let i = node.id().index();
                background::lowered(&*old, 1 << i).await;
                if !old.written.may_hold(i) {
                    return Ok(false);
                }
                node.downgrade(&old.claim, &old.token, timeout).await
            }
        })
        .await;
        if replies.tally.decision() != Decision::Reached {
            replies.finish().await;
            let error = replies
                .shortfall(Op::Downgrade, engine.nodes())
                .into_error(&label(), false);
            // Given back in both forms: each node holds one or the other.
            let guard = ReleaseOnDrop::new(engine.clone(), shared, self.timing);
            drop(guard);
            return Err(error);
        }
        replies.detach(engine.background());
        for i in 0..engine.nodes().len() {
            if !old.written.may_hold(i) {
                shared.written.ruled_out(i);
            }
        }
        // The write hold is gone: its record leaves the Locker's books
        // without a release, and the read hold takes its place.
        self.unregister();
        self.disarm();
        let mut guard = ReleaseOnDrop::new(engine.clone(), shared.clone(), self.timing);
        match engine.register(shared) {
            Ok(id) => guard.registration = Some(id),
            Err(closed) => return Err(closed),
        }
        Ok((guard, kept_alive))
    }
}
