//! Settling the fencing token of a granted acquisition: the largest counter
//! the granting nodes reported, written back to a quorum when they disagree,
//! and still within the lease's validity when it is settled.

use std::sync::Arc;
use std::time::Instant;

use crate::coord::engine::Engine;
use crate::coord::fanout;
use crate::core::error::{Error, Op};
use crate::core::fencing;
use crate::core::keys::LockKeys;
use crate::core::quorum::{quorum, Decision};
use crate::core::validity::Timing;

/// The fencing token of the acquisition of `resource` that the nodes
/// answering `granted` (their counters) agreed to, `start` being when its
/// first request was sent. An error when the write-back misses its quorum
/// (reported as this acquire's failures) or the validity ran out meanwhile.
///
/// Cancel safe: the write-back raises a counter, which only ever grows.
pub(crate) async fn settle(
    engine: &Arc<Engine>,
    resource: &str,
    keys: &LockKeys,
    granted: &[u64],
    timing: Timing,
    start: Instant,
) -> Result<u64, Error> {
    let (fence, write_back) = fencing::choose(granted, quorum(engine.nodes().len()));
    if write_back {
        let mut raised = fanout::until_decided(engine.nodes(), |node| {
            let keys = keys.clone();
            async move { node.raise_fence(&keys, fence, timing.node_timeout).await }
        })
        .await;
        if raised.tally.decision() != Decision::Reached {
            raised.finish().await;
            // Raising the counter is never refused: a shortfall there is
            // failures, reported as this acquire's.
            return Err(raised
                .shortfall(Op::Acquire, engine.nodes())
                .into_error(resource, false));
        }
        raised.detach(engine.background());
    }
    timing.check_usable(Op::Acquire, resource, start)?;
    Ok(fence)
}
