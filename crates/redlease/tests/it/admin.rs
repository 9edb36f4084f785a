//! Looking at a lock from outside (`inspect`) and breaking a stuck one
//! (`force_release`).

use std::time::Duration;

use redlease::{Error, KeyState, LostReason, Op, Verdict};
use redlease_testkit::RedisNodes;

use crate::support::*;

#[tokio::test]
async fn inspect_reports_each_node_and_never_the_token() {
    let mut nodes = RedisNodes::start(3);
    // Fencing on: inspect shows the fencing counter.
    let locker = fenced_locker(&nodes);
    let status = locker.admin().inspect("report").await.unwrap();
    assert_eq!(status.verdict(), Verdict::Free { leftover_on: 0 });
    assert_eq!(status.fencing_counter(), None);
    assert_eq!(status.key, locker.admin().key("report"));

    let lease = locker.lock("report").await.unwrap();
    // A waiter in another process (Locker) subscribes to the release channel.
    let waiter = {
        let other = crate::support::locker(&nodes);
        tokio::spawn(async move { other.lock("report").wait(Duration::from_secs(3)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    nodes.node_mut(2).kill();

    let status = locker.admin().inspect("report").await.unwrap();
    match status.verdict() {
        Verdict::Held {
            on: 2,
            for_at_most: Some(left),
        } => {
            assert!(
                left <= Duration::from_secs(5) && left > Duration::from_secs(3),
                "{left:?}"
            )
        }
        other => panic!("held on the two live nodes: {other:?}"),
    }
    crate::support::assert_fence_stored(&status, token(&lease));
    assert_eq!(status.waiting(), 1, "one waiting process");
    assert!(
        status.nodes[2].1.is_err(),
        "the killed node is reported in place"
    );
    let shown = format!("{status:?}");
    let token = get(nodes.node(0), &locker.admin().key("report"))
        .await
        .unwrap();
    assert!(!shown.contains(&token), "no token in {shown}");

    lease.release().await.unwrap();
    let next = waiter.await.unwrap().expect("the waiter gets it");
    next.release().await.unwrap();
    assert!(matches!(
        locker.admin().inspect("").await,
        Err(Error::InvalidInput {
            field: "resource",
            ..
        })
    ));
}

#[tokio::test]
async fn inspect_shows_a_key_without_expiry() {
    let nodes = RedisNodes::start(1);
    let locker = locker(&nodes);
    set(nodes.node(0), &locker.admin().key("stuck"), "not-ours").await;
    let status = locker.admin().inspect("stuck").await.unwrap();
    let state = status.nodes[0].1.as_ref().unwrap();
    assert_eq!(state.key, KeyState::Held { expires_in: None });
    assert_eq!(
        status.verdict(),
        Verdict::Held {
            on: 1,
            for_at_most: None
        }
    );
}

#[tokio::test]
async fn force_release_frees_a_stuck_lock_and_keeps_the_fencing_counter() {
    let mut nodes = RedisNodes::start(3);
    let holder = fenced_locker(&nodes);
    let operator = fenced_locker(&nodes);
    let lease = holder.lock("stuck").keep_alive().await.unwrap();
    let old_token = token(&lease);

    assert_eq!(operator.admin().force_release("stuck").await.unwrap(), 3);
    let next = operator.try_lock("stuck").await.expect("free at once");
    assert!(token(&next) > old_token, "tokens keep growing");
    // The old holder learns at its next renewal that the lock is gone.
    let why = tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .expect("the old holder hears of it within a renewal interval");
    assert_eq!(why, LostReason::Refused);
    next.release().await.unwrap();
    assert_eq!(
        operator.admin().force_release("stuck").await.unwrap(),
        0,
        "nothing left"
    );

    // A node that is down is named; the others are still cleared.
    let again = holder.lock("stuck").await.unwrap();
    nodes.node_mut(1).kill();
    match operator.admin().force_release("stuck").await {
        Err(Error::NoQuorum {
            op: Op::ForceRelease,
            failed,
            ..
        }) => assert_eq!(failed.len(), 1, "{failed:?}"),
        other => panic!("the dead node must be reported: {other:?}"),
    }
    assert_eq!(
        get(nodes.node(0), &operator.admin().key("stuck")).await,
        None
    );
    assert_eq!(
        get(nodes.node(2), &operator.admin().key("stuck")).await,
        None
    );
    drop(again);
}
