//! A lease handle carries a check of its fields: one cut short or edited
//! is refused as `InvalidInput` before any I/O, by `adopt`,
//! `release_handle`, `HandleInfo::parse` and the blocking API, and the
//! fencing token an adopter gets is the one the servers granted.

use std::time::Duration;

use proptest::prelude::*;
use redlease::{Error, HandleInfo, Locker};
use redlease_testkit::{RedisNode, RedisNodes};

use crate::support::*;

/// The reason of an `InvalidInput` for the field "handle"; panics on any
/// other outcome.
fn refused_handle<T: std::fmt::Debug>(result: Result<T, Error>) -> String {
    match result {
        Err(Error::InvalidInput {
            field: "handle",
            reason,
            ..
        }) => reason,
        other => panic!("expected InvalidInput for the handle, got {other:?}"),
    }
}

/// Every command the server of `con` ran so far but `INFO` (which this
/// asks), and the connections it accepted: what shows any I/O.
async fn traffic(con: &mut redis::aio::MultiplexedConnection) -> (u64, String) {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(con)
        .await
        .expect("INFO commandstats");
    let calls = stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum::<u64>();
    let info: redis::InfoDict = redis::cmd("INFO")
        .arg("stats")
        .query_async(con)
        .await
        .expect("INFO stats");
    let connections: String = info.get("total_connections_received").expect("a count");
    (calls, connections)
}

/// The cases and every other truncation: refused before any I/O
/// by a Locker of the same nodes, and the lease left as it was, with the
/// fencing token the servers granted.
#[tokio::test]
async fn a_handle_cut_short_is_refused_before_any_io() {
    let nodes = RedisNodes::start(1);
    let node = nodes.node(0);
    let mut admin = conn(node).await;
    let (owner, adopter) = (fenced_locker(&nodes), locker(&nodes));
    warm_up(&adopter).await;
    let lease = owner.lock("job").await.unwrap();
    let fence = token(&lease);
    let key = owner.admin().key("job");
    let value = get(node, &key).await;
    let handle = lease.export();
    let before = traffic(&mut admin).await;

    for cut in [1, 3, 10] {
        let short = &handle[..handle.len() - cut];
        let why = refused_handle(adopter.adopt(short).await);
        assert!(why.contains("cut short or altered"), "{why}");
        assert!(!why.contains(short), "the reason never quotes the handle");
        refused_handle(adopter.release_handle(short).await);
        refused_handle(HandleInfo::parse(short));
    }
    for len in 0..handle.len() {
        let short = &handle[..len];
        refused_handle(adopter.adopt(short).await);
        refused_handle(adopter.release_handle(short).await);
    }
    // A fencing token edited: every digit of it, one at a time.
    let fence_text = fence.to_string();
    let at = handle.find(&format!(".{fence_text}.")).expect("the fence") + 1;
    for i in at..at + fence_text.len() {
        let mut edited = handle.clone().into_bytes();
        edited[i] = if edited[i] == b'9' {
            b'1'
        } else {
            edited[i] + 1
        };
        let edited = String::from_utf8(edited).unwrap();
        let why = refused_handle(adopter.adopt(&edited).await);
        assert!(why.contains("cut short or altered"), "{why}");
    }
    assert_eq!(
        traffic(&mut admin).await,
        before,
        "no command, no connection"
    );
    assert_eq!(get(node, &key).await, value, "the lease is as it was");

    // The whole handle: the fencing token the servers granted, which the
    // counter still holds.
    let adopted = adopter.adopt(&handle).await.unwrap();
    assert_eq!(adopted.fencing_token(), Some(fence));
    let counter = get(node, &owner.admin().fence_key("job")).await;
    assert_eq!(counter, Some(fence.to_string()));
    adopted.release().await.unwrap();
}

/// What was said of `adopt`, through the blocking API, on the caller's
/// thread.
#[test]
fn the_blocking_api_refuses_a_cut_handle_too() {
    let node = RedisNode::start();
    let locker = redlease::blocking::Locker::builder([node.url()])
        .advanced(|a| a.restart_quarantine(Duration::ZERO)) // a brand-new server
        .fencing(true)
        .build()
        .unwrap();
    let handle = locker.lock("job").unwrap().export();
    for cut in [1, 3, 10] {
        let short = &handle[..handle.len() - cut];
        refused_handle(locker.adopt(short));
        refused_handle(locker.release_handle(short));
    }
    locker.release_handle(&handle).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any single character replaced, put in or taken out, anywhere in a
    /// real handle, and any text at all: `InvalidInput` from a Locker
    /// whose node does not listen, so that any I/O would have been a node
    /// error instead.
    #[test]
    fn no_edit_of_a_handle_gets_past_its_check(
        at in any::<prop::sample::Index>(),
        by in any::<char>(),
        text in "\\PC{0,200}",
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let handle = real_handle();
        runtime.block_on(async {
            let nowhere = Locker::builder(["redis://127.0.0.1:1"]).build().unwrap();
            let i = at.index(handle.len());
            let mut edited = handle.clone();
            edited.replace_range(i..i + 1, by.encode_utf8(&mut [0; 4]));
            let mut inserted = handle.clone();
            inserted.insert(i.max(1), by);
            let mut removed = handle.clone();
            removed.remove(i);
            for text in [edited, inserted, removed, text] {
                if text == handle {
                    continue;
                }
                refused_handle(nowhere.adopt(&text).await);
                refused_handle(nowhere.release_handle(&text).await);
            }
        });
    }
}

/// A handle a real server granted, made once for every case.
fn real_handle() -> String {
    static HANDLE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let node = RedisNode::start();
            let locker = redlease::blocking::Locker::builder([node.url()])
                .advanced(|a| a.restart_quarantine(Duration::ZERO)) // a brand-new server
                .fencing(true)
                .build()
                .unwrap();
            let lease = locker.lock_all(["a.b", "c-d"]).unwrap();
            lease.export()
        })
        .clone()
}
