//! Extending a lease on request (`Lease::extend`), decided at quorum:
//! directly for a lease that is not kept alive, through the renewer
//! otherwise, so that the extension and the renewals reach each node in
//! order.

use std::time::Instant;

use crate::coord::guard::ReleaseOnDrop;
use crate::coord::renew::ExtendFailure;
use crate::core::error::{Error, Op, Shortfall};
use crate::core::lease_state::LostReason;
use crate::core::node_error::{NodeError, NodeId};
use crate::core::quorum::Decision;
use crate::core::refusal::Refusal;
use crate::core::telemetry;
use crate::core::validity::Timing;

impl ReleaseOnDrop {
    /// Extends the lease to `timing`'s TTL from now, decided at quorum
    /// (through the renewer, in order with its renewals, when kept
    /// alive). The lease can only be trusted until the earlier of its old
    /// validity and the new one while the request runs; a quorum that
    /// answers too late to leave any validity is
    /// [`Error::ValidityExhausted`], and one that no longer holds our token
    /// reports the lease lost. `resource` and `label` name it in an error.
    pub(crate) async fn extend(
        &mut self,
        timing: Timing,
        resource: &str,
        label: impl Fn() -> String,
    ) -> Result<(), Error> {
        let engine = self.engine.clone();
        if let Some(why) = self.lost_reason() {
            return Err(gone(Op::Extend, why, resource, Vec::new(), Vec::new()));
        }
        if let Some(id) = self.renewal {
            return self.extend_kept_alive(id, timing, resource, label).await;
        }
        let start = Instant::now();
        let old_valid_until = self.ownership.state.get().valid_until;
        // Before anything is sent: some nodes may apply a TTL shorter than
        // what is left, so the lease can only be trusted until the earlier.
        let extended_until = timing.valid_until(start);
        let until = old_valid_until.min(extended_until);
        self.ownership.state.modify(|s| s.valid_until = until);
        self.settle().await;
        // Waiting for the acquire's slow requests may have used up what
        // was left: then send nothing.
        if let Some(why) = self.lost_reason() {
            return Err(gone(Op::Extend, why, resource, Vec::new(), Vec::new()));
        }

        let mut replies = self
            .ownership
            .extend_at_quorum(engine.nodes(), timing)
            .await;
        let now = Instant::now();
        match replies.tally.decision() {
            // Too late: the lease was (or was about to be) reported lost,
            // and a lost lease never comes back.
            Decision::Reached if self.lost_reason().is_some() => {
                replies.detach(engine.background());
                let why = self.lost_reason().unwrap_or(LostReason::Expired);
                Err(gone(Op::Extend, why, resource, Vec::new(), Vec::new()))
            }
            Decision::Reached if !timing.usable(now - start) => {
                replies.detach(engine.background());
                Err(Error::ValidityExhausted {
                    op: Op::Extend,
                    resource: resource.to_string(),
                    elapsed: now - start,
                    ttl: timing.ttl,
                    drift: timing.drift,
                })
            }
            Decision::Reached => {
                replies.detach(engine.background());
                self.ownership.state.modify(|s| {
                    s.valid_until = extended_until;
                    s.early = timing.drift;
                });
                self.timing = timing;
                Ok(())
            }
            Decision::Impossible | Decision::Pending => {
                replies.finish().await;
                // Judged after the replies: a lease that ran out meanwhile
                // expired; it was not taken over.
                let expired = self.lost_reason() == Some(LostReason::Expired);
                let error = replies
                    .shortfall(Op::Extend, engine.nodes())
                    .into_error(&label(), expired);
                if matches!(error, Error::NotHeld { .. }) {
                    // A majority no longer has our token: the lease is gone.
                    let why = if expired {
                        LostReason::Expired
                    } else {
                        LostReason::Refused
                    };
                    self.ownership.state.modify(|s| s.lost = Some(why));
                    tracing::warn!(resource, reason = %why, "lease lost");
                    telemetry::lease_lost(why);
                }
                Err(error)
            }
        }
    }

    /// Extends a kept-alive lease through the renewer, in order with its
    /// renewals on every node.
    async fn extend_kept_alive(
        &mut self,
        id: std::num::NonZeroU64,
        timing: Timing,
        resource: &str,
        label: impl Fn() -> String,
    ) -> Result<(), Error> {
        let engine = self.engine.clone();
        match engine.renewer().extend(id, timing).await {
            Ok(()) => {
                self.timing = timing;
                Ok(())
            }
            Err(ExtendFailure::Gone) => {
                let why = self.lost_reason().unwrap_or(LostReason::Expired);
                Err(gone(Op::Extend, why, resource, Vec::new(), Vec::new()))
            }
            Err(ExtendFailure::Lost {
                why: LostReason::NodeErrors,
                refused_on,
                failed,
            }) => {
                let nodes = engine.nodes().len();
                let shortfall = Shortfall {
                    op: Op::Extend,
                    succeeded: nodes - failed.len() - refused_on.len(),
                    nodes,
                    quorum: self.ownership.claim.quorum(nodes),
                    refused: refused_on.into_iter().map(Refusal::bare).collect(),
                    failed,
                };
                Err(shortfall.into_error(&label(), true))
            }
            Err(ExtendFailure::Lost {
                why,
                refused_on,
                failed,
            }) => Err(gone(Op::Extend, why, resource, refused_on, failed)),
        }
    }

    /// Why the lease can no longer be trusted, if it cannot.
    fn lost_reason(&self) -> Option<LostReason> {
        self.ownership.state.get().lost_at(Instant::now())
    }
}

/// The error for an operation on a lease known to be lost, and the
/// nodes that said so, if any.
pub(crate) fn gone(
    op: Op,
    why: LostReason,
    resource: &str,
    not_held_on: Vec<NodeId>,
    failed: Vec<NodeError>,
) -> Error {
    if why == LostReason::Closed {
        return Error::Closed;
    }
    Error::NotHeld {
        op,
        resource: resource.to_string(),
        expired: why != LostReason::Refused,
        not_held_on,
        failed,
    }
}
