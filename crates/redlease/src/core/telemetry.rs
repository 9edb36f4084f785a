//! The metrics the library reports (with the `metrics` feature), in one
//! place so that their names and labels stay consistent, and the labels
//! its tracing spans share. Without the feature every function here is
//! empty and compiles away. No I/O: the application installs the
//! recorder (a Prometheus exporter, say) and decides where figures go.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `redlease_operations_total` | counter | `op` (acquire, extend, release, force-release), `outcome` |
//! | `redlease_operation_seconds` | histogram | `op`, `outcome` |
//! | `redlease_node_errors_total` | counter | `node`, `kind` |
//! | `redlease_leases_held` | gauge | |
//! | `redlease_leases_lost_total` | counter | `reason` |
//! | `redlease_renewal_round_trips_total` | counter | `node`, `outcome` (answered, abandoned, unsent) |
//! | `redlease_renewals_total` | counter | `node`: lease renewals sent |

use std::time::{Duration, Instant};

use crate::core::error::{Error, Op};
use crate::core::lease_state::LostReason;
use crate::core::node_error::{NodeError, NodeErrorKind};

/// The `outcome` label of an operation: `ok`, or the error's kind.
pub(crate) fn outcome(result: Result<(), &Error>) -> &'static str {
    match result {
        Ok(()) => "ok",
        Err(e) => match e {
            Error::InvalidInput { .. } => "invalid_input",
            Error::Taken { .. } => "taken",
            Error::NoQuorum { .. } => "no_quorum",
            Error::ValidityExhausted { .. } => "validity_exhausted",
            Error::NotHeld { .. } => "not_held",
            Error::Lost { .. } => "lost",
            Error::NoRuntime => "no_runtime",
            Error::Closed => "closed",
            Error::WaitTimeout { .. } => "wait_timeout",
            Error::SameServer { .. } => "same_server",
            Error::PermitsDiffer { .. } => "permits_differ",
            Error::InsideRuntime => "inside_runtime",
            Error::Forked { .. } => "forked",
        },
    }
}

/// The `kind` label of a node error.
fn error_kind(kind: &NodeErrorKind) -> &'static str {
    match kind {
        NodeErrorKind::Timeout(_) => "timeout",
        NodeErrorKind::Connection(_) => "connection",
        NodeErrorKind::Redis { .. } => "redis",
        NodeErrorKind::Protocol(_) => "protocol",
        NodeErrorKind::Tls(_) => "tls",
        NodeErrorKind::Unresponsive { .. } => "unresponsive",
        NodeErrorKind::NotReplicated { .. } => "not_replicated",
        NodeErrorKind::Quarantined { .. } => "quarantined",
        NodeErrorKind::SameServer { .. } => "same_server",
        NodeErrorKind::WrongScheme(_) => "wrong_scheme",
    }
}

/// The `reason` label of a lost lease.
fn lost_reason(why: LostReason) -> &'static str {
    match why {
        LostReason::Refused => "refused",
        LostReason::Expired => "expired",
        LostReason::NodeErrors => "node_errors",
        LostReason::Closed => "closed",
    }
}

/// Whether anything will record how long the operation of `span` took:
/// the span or the debug log, if some subscriber takes them, or the
/// metrics. If not, the operation reads no clock for it (`started` is
/// `None` below): a clock read costs tens of nanoseconds on a VM, and a
/// lock cycle made a dozen of them.
pub(crate) fn is_timed(span: &tracing::Span) -> bool {
    cfg!(feature = "metrics") || !span.is_disabled() || tracing::enabled!(tracing::Level::DEBUG)
}

/// An operation finished: records its outcome and time (since `started`,
/// if timed: see [`is_timed`]) on the current span (the operation's own),
/// logs it at debug level, and counts it.
pub(crate) fn finished(op: Op, result: Result<(), &Error>, started: Option<Instant>) {
    let elapsed = started.map_or(Duration::ZERO, |s| s.elapsed());
    let outcome = outcome(result);
    let elapsed_ms = elapsed.as_secs_f64() * 1e3;
    let span = tracing::Span::current();
    span.record("outcome", outcome);
    span.record("elapsed_ms", elapsed_ms);
    match result {
        Ok(()) => tracing::debug!(%op, outcome, elapsed_ms, "done"),
        Err(e) => tracing::debug!(%op, outcome, elapsed_ms, error = %e, "failed"),
    }
    #[cfg(feature = "metrics")]
    {
        let op = op.to_string();
        metrics::counter!("redlease_operations_total", "op" => op.clone(), "outcome" => outcome)
            .increment(1);
        metrics::histogram!("redlease_operation_seconds", "op" => op, "outcome" => outcome)
            .record(elapsed.as_secs_f64());
    }
}

/// A node answered with an error, or gave no answer.
pub(crate) fn node_error(error: &NodeError) {
    let kind = error_kind(error.kind());
    tracing::trace!(node = %error.node(), kind, "node error");
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "redlease_node_errors_total",
        "node" => error.node().addr().to_string(),
        "kind" => kind
    )
    .increment(1);
}

/// Leases held by the process went up or down by `delta`.
pub(crate) fn leases_held(delta: i64) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("redlease_leases_held").increment(delta as f64);
    #[cfg(not(feature = "metrics"))]
    let _ = delta;
}

/// A lease was reported lost.
pub(crate) fn lease_lost(why: LostReason) {
    let _reason = lost_reason(why);
    #[cfg(feature = "metrics")]
    metrics::counter!("redlease_leases_lost_total", "reason" => _reason).increment(1);
}

/// A renewal batch to `node` left `late` after its most overdue lease was
/// due: near 0 while renewals keep up with the leases kept alive.
pub(crate) fn renewal_lateness(node: &str, late: std::time::Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("redlease_renewal_lateness_seconds", "node" => node.to_string())
        .record(late.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (node, late);
}

/// A renewal batch to `node` carrying `leases` leases ended with `outcome`.
pub(crate) fn renewal_batch(node: &str, leases: usize, outcome: &'static str) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!(
            "redlease_renewal_round_trips_total",
            "node" => node.to_string(),
            "outcome" => outcome
        )
        .increment(1);
        metrics::counter!("redlease_renewals_total", "node" => node.to_string())
            .increment(leases as u64);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (node, leases, outcome);
}
