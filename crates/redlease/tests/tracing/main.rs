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

use redlease::Error;
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

#[tokio::test]
async fn operations_are_traced_with_outcome_and_time() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_span_events(FmtSpan::CLOSE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");

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
    let acquires = closed(&text, "redlease.acquire");
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
    assert!(
        closed(&text, "redlease.release")[0].contains("outcome=\"ok\""),
        "{text}"
    );
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
