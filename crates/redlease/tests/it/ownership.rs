//! Ownership is the token: it never shows in Debug output, and nobody but
//! its holder can release the lock. Also: ACL authentication from the URL.

use std::time::Duration;

use redlease::{Error, Locker, NodeErrorKind};
use redlease_testkit::{RedisNode, RedisNodes};

use crate::support::*;

#[tokio::test]
async fn debug_output_never_shows_the_token() {
    let nodes = RedisNodes::start(1);
    let locker = locker(&nodes);
    let lease = locker.try_lock("job").await.unwrap();
    let value = get(nodes.node(0), &locker.admin().key("job"))
        .await
        .unwrap();
    // The token, then its owner (this process by default).
    let (token, owner) = value.split_at(48);
    assert!(
        token.bytes().all(|b| b.is_ascii_hexdigit()),
        "the Locker's 64-bit tag and 128 random bits, hex: {value:?}"
    );
    let label = format!(":{}\t", std::process::id());
    assert!(
        owner.starts_with('\t') && owner.contains(&label),
        "{value:?}"
    );
    let shown = format!("{lease:?} {locker:?}");
    assert!(!shown.contains(token), "{shown}");
    assert!(shown.contains("job"));
    lease.release().await.unwrap();
}

#[tokio::test]
async fn tokens_differ_per_acquisition() {
    let nodes = RedisNodes::start(1);
    let locker = locker(&nodes);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..50 {
        let lease = locker.try_lock("job").await.unwrap();
        assert!(seen.insert(
            get(nodes.node(0), &locker.admin().key("job"))
                .await
                .unwrap()
        ));
        lease.release().await.unwrap();
    }
}

#[tokio::test]
async fn a_lease_moves_between_tasks() {
    let nodes = RedisNodes::start(3);
    let locker = locker(&nodes);
    let lease = locker.try_lock("job").await.unwrap();
    let released = tokio::spawn(async move { lease.release().await })
        .await
        .unwrap();
    released.expect("released from another task");
}

/// A node with an ACL user `alice` and a password on the default user.
async fn acl_node() -> RedisNode {
    let node = RedisNode::start();
    command(
        &node,
        &[
            "ACL",
            "SETUSER",
            "alice",
            "on",
            ">wonderland",
            "~*",
            "+@all",
        ],
    )
    .await;
    command(&node, &["CONFIG", "SET", "requirepass", "defaultpass"]).await;
    node
}

#[tokio::test]
async fn acl_user_and_password_from_the_url() {
    let node = acl_node().await;
    let url = format!("redis://alice:wonderland@{}", node.addr());
    let locker = Locker::builder([url])
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .node_timeout(200 * MS)
        .build()
        .unwrap();
    let lease = locker
        .try_lock("job")
        .await
        .expect("authenticated as alice");
    lease.release().await.unwrap();
}

#[tokio::test]
async fn a_wrong_password_is_a_node_error_that_hides_it() {
    let node = acl_node().await;
    let url = format!("redis://alice:not-the-password@{}", node.addr());
    let locker = Locker::builder([url])
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .node_timeout(200 * MS)
        .build()
        .unwrap();
    let err = locker.try_lock("job").await.expect_err("auth fails");
    assert!(!err.node_errors().is_empty(), "{err:?}");
    assert!(matches!(
        err.node_errors()[0].kind(),
        NodeErrorKind::Connection(_) | NodeErrorKind::Redis { .. }
    ));
    let shown = format!("{err} {err:?} {locker:?}");
    assert!(!shown.contains("not-the-password"), "{shown}");
    assert!(shown.contains(&node.addr()), "{shown}");
}

#[tokio::test]
async fn a_database_number_in_the_url_is_used() {
    let node = RedisNode::start();
    let url = format!("{}/3", node.url());
    let locker = Locker::builder([url])
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .node_timeout(200 * MS)
        .build()
        .unwrap();
    let lease = locker
        .try_lock("job")
        .ttl(Duration::from_secs(5))
        .await
        .unwrap();
    let mut c = conn(&node).await;
    let _: () = redis::cmd("SELECT")
        .arg(3)
        .query_async(&mut c)
        .await
        .unwrap();
    let in_db3: Option<String> = redis::cmd("GET")
        .arg(locker.admin().key("job"))
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(in_db3.is_some());
    assert_eq!(dbsize(&node).await, 0, "db 0 untouched");
    assert_eq!(
        locker.admin().nodes().next().unwrap().addr(),
        format!("{}/3", node.addr())
    );
    lease.release().await.unwrap();
}

#[tokio::test]
async fn another_owners_lock_is_never_released() {
    let nodes = RedisNodes::start(3);
    let a = locker(&nodes);
    let b = crate::support::locker(&nodes);
    let held = a.try_lock("job").await.unwrap();
    // b cannot take it, and its failed attempt leaves a's keys alone.
    assert!(matches!(b.try_lock("job").await, Err(Error::Taken { .. })));
    // a holds a quorum (a slow node may have gone to b and back), and every
    // node that has a value has a's.
    let values_now: Vec<String> = values(&nodes, &a.admin().key("job"))
        .await
        .into_iter()
        .flatten()
        .collect();
    assert!(values_now.len() >= a.admin().quorum(), "{values_now:?}");
    assert!(
        values_now.iter().all(|v| *v == values_now[0]),
        "{values_now:?}"
    );
    held.release().await.unwrap();
}
