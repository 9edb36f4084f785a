//! Taking over an exported lease (`Locker::adopt`): its token extended
//! on a quorum of the nodes, which makes it this Locker's lease.

use std::sync::Arc;
use std::time::Instant;

use crate::coord::acquire::attempt::Grant;
use crate::coord::engine::Engine;
use crate::coord::guard::ReleaseOnDrop;
use crate::coord::ownership::Ownership;
use crate::core::error::{Error, Op};
use crate::core::quorum::{Decision, NodeSet};
use crate::core::validity::Timing;

/// Extends `ownership`'s token to `timing`'s TTL on every node, decided
/// at quorum: the grant of an adopted lease (its fencing tokens are the
/// caller's to fill in), valid from before the request. Short of a
/// quorum, or with no validity left, the error (`label` names the lease).
pub(crate) async fn adopt(
    engine: &Arc<Engine>,
    ownership: Arc<Ownership>,
    timing: Timing,
    label: &str,
) -> Result<Grant, Error> {
    let start = Instant::now();
    let mut replies = ownership.extend_at_quorum(engine.nodes(), timing).await;
    if replies.tally.decision() != Decision::Reached {
        replies.finish().await;
        return Err(replies
            .shortfall(Op::Extend, engine.nodes())
            .into_error(label, false));
    }
    timing.check_usable(Op::Extend, label, start)?;
    let granted_by: NodeSet = replies
        .answers
        .iter()
        .filter(|(_, answer)| matches!(answer, Ok(true)))
        .map(|(i, _)| *i)
        .collect();
    let guard = ReleaseOnDrop::new(engine.clone(), ownership, timing);
    guard.detach(replies, |_, _| {});
    Ok(Grant {
        guard,
        valid_until: timing.valid_until(start),
        fence: None,
        fences: None,
        granted_by,
        late: None,
        replicas: None,
    })
}
