//! The tracing spans an operator sees: acquire, extend, release, renewal
//! batches, with node, outcome and elapsed time, and never a token.
//!
//! A test binary of its own: the subscriber is the process's global
//! default, so no other test's threads can race it for tracing's per-call
//! site interest cache.

#[allow(dead_code)]
#[path = "../it/support.rs"]
mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlease::{Error, Locker};
use redlease_testkit::RedisNodes;
use tracing_subscriber::fmt::format::FmtSpan;

use support::*;

/// Collects what the fmt subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// The lines of `text` that close a span named `name`.
fn closed<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.contains(name) && l.contains("close"))
        .collect()
}

/// The process's subscriber (installed by the first test that asks),
/// whose output every test reads, each picking its own lines.
fn captured() -> &'static Captured {
    static CAPTURED: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    CAPTURED.get_or_init(|| {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_span_events(FmtSpan::CLOSE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        captured
    })
}

/// Waits (at most `limit`, looking every 20 ms) until the captured output
/// has a line with `needle`; that line.
async fn line_with(needle: &str, limit: Duration) -> String {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(line) = captured().text().lines().find(|l| l.contains(needle)) {
            return line.to_string();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no line with {needle:?} within {limit:?}:\n{}",
            captured().text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn operations_are_traced_with_outcome_and_time() {
    let captured = captured();

    let nodes = RedisNodes::start(3);
    let locker = locker_with_timeout(&nodes, 50 * MS);
    let mut lease = locker.lock("traced").keep_alive().await.unwrap();
    let token = get(nodes.node(0), &locker.admin().key("traced"))
        .await
        .unwrap();
    lease.extend(Duration::from_secs(5)).await.unwrap();
    assert!(matches!(
        locker.try_lock("traced").await,
        Err(Error::Taken { .. })
    ));
    tokio::time::sleep(Duration::from_secs(2)).await; // a renewal batch
    lease.release().await.unwrap();
    // With fencing on, the acquire span also shows the token drawn.
    let fenced = fenced_locker(&nodes);
    let fenced_lease = fenced.try_lock("fenced").await.unwrap();
    let fencing_token = support::token(&fenced_lease);
    fenced_lease.release().await.unwrap();

    let text = captured.text();
    // This test's own spans (another test's run in the same process).
    let acquires: Vec<&str> = closed(&text, "redlease.acquire")
        .into_iter()
        .filter(|l| l.contains("resource=traced") || l.contains("resource=fenced"))
        .collect();
    assert_eq!(acquires.len(), 3, "{text}");
    assert!(acquires[0].contains("outcome=\"ok\""), "{}", acquires[0]);
    // Fencing off: no token drawn, none shown.
    assert!(!acquires[0].contains("fencing_token="), "{}", acquires[0]);
    assert!(acquires[0].contains("resource=traced"), "{}", acquires[0]);
    assert!(acquires[1].contains("outcome=\"taken\""), "{}", acquires[1]);
    assert!(acquires[2].contains("resource=fenced"), "{}", acquires[2]);
    assert!(acquires[2].contains("outcome=\"ok\""), "{}", acquires[2]);
    assert!(
        acquires[2].contains(&format!("fencing_token={fencing_token}")),
        "{}",
        acquires[2]
    );
    assert!(
        closed(&text, "redlease.extend")[0].contains("outcome=\"ok\""),
        "{text}"
    );
    let release = closed(&text, "redlease.release")
        .into_iter()
        .find(|l| l.contains("resource=\"traced\""))
        .unwrap_or_else(|| panic!("no release span of traced:\n{text}"));
    assert!(release.contains("outcome=\"ok\""), "{text}");
    let batches = closed(&text, "redlease.renewal_batch");
    assert!(!batches.is_empty(), "{text}");
    assert!(
        batches[0].contains("node=") && batches[0].contains("outcome=\"answered\""),
        "{}",
        batches[0]
    );
    assert!(text.contains("elapsed_ms="), "{text}");
    assert!(!text.contains(&token), "the token never reaches the logs");
}

/// Issue 52: renewals that cannot keep to their timetable are told while
/// the leases are still valid, once for the Locker, naming the load; and
/// told again when they keep to it. A node whose every answer takes
/// 900 ms, for a lease renewed every 500 ms: each renewal leaves about
/// 400 ms after it was due, past half an interval, while the lease
/// (valid 1.5 s from each send) is still renewed in time.
#[tokio::test]
async fn renewals_falling_behind_are_told_before_any_lease_is_lost() {
    use redlease_testkit::proxy::{Mode, Proxy};
    let _ = captured();
    let nodes = RedisNodes::start(1);
    let slow = Proxy::start(&nodes.node(0).addr());
    let locker = Locker::builder([slow.url()])
        .advanced(|a| a.restart_quarantine(Duration::ZERO))
        .ttl(Duration::from_millis(1_500))
        .node_timeout(Duration::from_millis(400))
        .build()
        .unwrap();
    let lease = locker.lock("lagging").keep_alive().await.unwrap();
    // Two renewals at full speed first: the renewal lane's connection is
    // made and its script loaded, which take round trips of their own.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    slow.set(Mode::Delay {
        fixed: Duration::from_millis(450),
        jitter: Duration::ZERO,
    });
    let warning = line_with("renewals are falling behind", Duration::from_secs(10)).await;
    assert!(lease.lost_reason().is_none(), "told only after a loss");
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains("1 leases kept alive"), "{warning}");
    assert!(warning.contains("kept_alive=1"), "{warning}");
    slow.set(Mode::Pass);
    line_with(
        "renewals keep to their timetable again",
        Duration::from_secs(10),
    )
    .await;
    assert!(lease.lost_reason().is_none());
    let told = captured().text();
    assert_eq!(
        told.matches("renewals are falling behind").count(),
        1,
        "{told}"
    );
    lease.release().await.unwrap();
}
