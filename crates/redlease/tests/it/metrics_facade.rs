//! Metrics through the `metrics` facade (the feature is on for tests):
//! operations by outcome, their latency, leases held and node errors.

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;
use redlease::Error;
use redlease_testkit::RedisNodes;

use crate::support::*;

// Current-thread runtime: the recorder is this thread's, and every task
// of the test runs on this thread.
#[tokio::test(flavor = "current_thread")]
async fn metrics_count_operations_leases_and_node_errors() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let mut nodes = RedisNodes::start(3);
    let locker = locker_with_timeout(&nodes, 50 * MS);
    let first = locker.lock("counted").await.unwrap();
    let second = locker.lock("other").await.unwrap();
    assert!(matches!(
        locker.try_lock("counted").await,
        Err(Error::Taken { .. })
    ));
    first.release().await.unwrap();
    nodes.node_mut(2).kill();
    let third = locker.lock("counted").await.unwrap();

    let snapshot = snapshotter.snapshot().into_vec();
    let value = |kind: MetricKind, name: &str, labels: &[(&str, &str)]| {
        snapshot
            .iter()
            .filter(|(key, _, _, _)| {
                key.kind() == kind
                    && key.key().name() == name
                    && labels
                        .iter()
                        .all(|(k, v)| key.key().labels().any(|l| l.key() == *k && l.value() == *v))
            })
            .map(|(_, _, _, value)| match value {
                DebugValue::Counter(n) => *n as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(h) => h.len() as f64,
            })
            .sum::<f64>()
    };
    let ops = "redlease_operations_total";
    assert_eq!(
        value(
            MetricKind::Counter,
            ops,
            &[("op", "acquire"), ("outcome", "ok")]
        ),
        3.0
    );
    assert_eq!(
        value(
            MetricKind::Counter,
            ops,
            &[("op", "acquire"), ("outcome", "taken")]
        ),
        1.0
    );
    assert_eq!(
        value(
            MetricKind::Counter,
            ops,
            &[("op", "release"), ("outcome", "ok")]
        ),
        1.0
    );
    assert_eq!(
        value(
            MetricKind::Histogram,
            "redlease_operation_seconds",
            &[("op", "acquire")]
        ),
        4.0
    );
    assert_eq!(value(MetricKind::Gauge, "redlease_leases_held", &[]), 2.0);
    let dead = nodes.node(2).addr();
    assert!(
        value(
            MetricKind::Counter,
            "redlease_node_errors_total",
            &[("node", &dead)]
        ) >= 1.0,
        "{snapshot:?}"
    );
    drop(second);
    drop(third);
}
