//! Owner labels (`LockerBuilder::owner`): every lease names who holds it,
//! stored with the hold and shown by `inspect` and by a contender's
//! `Error::Taken`, never with the token.

use std::time::{Duration, SystemTime};

use redlease::{Error, Locker, RetryPolicy};
use redlease_testkit::cluster::RedisCluster;
use redlease_testkit::RedisNodes;

use crate::support::{get, MS};

fn owned_by(urls: Vec<String>, owner: Option<&str>, fencing: bool) -> Locker {
    let mut b = Locker::builder(urls)
        .advanced(|a| a.restart_quarantine(Duration::ZERO)) // brand-new test servers
        .ttl(Duration::from_secs(5))
        .node_timeout(500 * MS)
        .fencing(fencing)
        .retry(RetryPolicy::within(Duration::from_secs(10)).delay(MS, 5 * MS));
    if let Some(owner) = owner {
        b = b.owner(owner);
    }
    b.build().expect("valid test settings")
}

/// The labels `inspect` shows for `name`, with their weights.
async fn owners(locker: &Locker, name: &str) -> Vec<(String, u32)> {
    let status = locker.admin().inspect(name).await.unwrap();
    status
        .holders()
        .into_iter()
        .map(|h| (h.owner, h.weight))
        .collect()
}

#[tokio::test]
async fn a_lease_names_its_owner_to_inspect_and_to_a_contender() {
    let nodes = RedisNodes::start(3);
    // Both acquire paths: the plain commands (no fencing) and the script.
    for fencing in [false, true] {
        let holder = owned_by(nodes.urls(), Some("billing-3 (nightly invoices)"), fencing);
        let other = owned_by(nodes.urls(), None, fencing);
        let before = SystemTime::now() - Duration::from_secs(1);
        let lease = holder.lock("job").await.unwrap();
        let status = holder.admin().inspect("job").await.unwrap();
        let holders = status.holders();
        assert_eq!(holders.len(), 1, "one lease on 3 nodes: {holders:?}");
        assert_eq!(holders[0].owner, "billing-3 (nightly invoices)");
        assert_eq!(holders[0].weight, 1);
        let since = holders[0].since.expect("when it was taken");
        assert!(since >= before && since <= SystemTime::now(), "{since:?}");
        // Granted at a quorum: a node's write may land later. Each node
        // tells how long the hold lasts there.
        for (_, node) in &status.nodes {
            let there = &node.as_ref().unwrap().holders;
            let unexpiring = |h: &Vec<redlease::Holder>| -> Vec<_> {
                h.iter()
                    .map(|h| (h.owner.clone(), h.since, h.weight))
                    .collect()
            };
            assert!(
                there.is_empty() || unexpiring(there) == unexpiring(&holders),
                "{there:?}"
            );
            assert!(there.iter().all(|h| h.expires_in.is_some()), "{there:?}");
        }

        let refused = other.try_lock("job").await.unwrap_err();
        let said = refused.to_string();
        assert!(
            said.contains("held by billing-3 (nightly invoices) for "),
            "{said}"
        );
        match &refused {
            Error::Taken { held_on, .. } => {
                assert!(held_on
                    .iter()
                    .all(|h| h.holder.as_ref().map(|h| h.owner.as_str())
                        == Some("billing-3 (nightly invoices)")));
            }
            other => panic!("{other:?}"),
        }
        // Nothing shown holds the token.
        let value = get(nodes.node(0), &holder.admin().key("job"))
            .await
            .unwrap();
        let token = &value[..48];
        assert!(!said.contains(token) && !format!("{status:?}").contains(token));
        lease.release().await.unwrap();
        assert!(owners(&holder, "job").await.is_empty());
    }
}

#[tokio::test]
async fn the_default_owner_is_this_process() {
    let nodes = RedisNodes::start(1);
    let locker = owned_by(nodes.urls(), None, false);
    let lease = locker.lock("job").await.unwrap();
    let me = redlease::default_owner();
    assert!(me.ends_with(&format!(":{}", std::process::id())), "{me}");
    assert_eq!(owners(&locker, "job").await, vec![(me, 1)]);
    lease.release().await.unwrap();
}

#[tokio::test]
async fn readers_and_permit_holders_are_each_listed() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (
        owned_by(nodes.urls(), Some("reader-a"), false),
        owned_by(nodes.urls(), Some("reader-b"), false),
    );
    let ra = a.read_lock("doc").await.unwrap();
    let rb = b.read_lock("doc").await.unwrap();
    let mut seen = owners(&a, "doc").await;
    seen.sort();
    assert_eq!(seen, vec![("reader-a".into(), 1), ("reader-b".into(), 1)]);
    ra.release().await.unwrap();
    rb.release().await.unwrap();

    let sem = a.semaphore("slots", 5).allow_no_failures();
    let two = sem.acquire_many(2).await.unwrap();
    let one = b
        .semaphore("slots", 5)
        .allow_no_failures()
        .acquire()
        .await
        .unwrap();
    let mut seen = owners(&a, "slots").await;
    seen.sort();
    assert_eq!(seen, vec![("reader-a".into(), 2), ("reader-b".into(), 1)]);
    two.release().await.unwrap();
    one.release().await.unwrap();
}

#[tokio::test]
async fn an_adopted_lease_keeps_its_owner_and_releases() {
    let nodes = RedisNodes::start(3);
    let first = owned_by(nodes.urls(), Some("exporter"), true);
    let second = owned_by(nodes.urls(), Some("adopter"), true);
    let handle = first.lock("job").await.unwrap().export();
    let lease = second.adopt(&handle).await.unwrap();
    assert_eq!(owners(&second, "job").await, vec![("exporter".into(), 1)]);
    lease.release().await.unwrap();
    assert!(owners(&second, "job").await.is_empty());
}

#[tokio::test]
async fn on_a_cluster_a_set_names_its_owner_in_every_slot() {
    let cluster = RedisCluster::start(3);
    let url = crate::cluster::cluster_url(&cluster);
    let locker = owned_by(vec![url], Some("cluster-worker"), false);
    let set = locker.lock_all(["a", "b", "c"]).await.unwrap();
    for name in ["a", "b", "c"] {
        assert_eq!(
            owners(&locker, name).await,
            vec![("cluster-worker".into(), 1)]
        );
    }
    set.release().await.unwrap();
}

#[tokio::test]
async fn labels_the_servers_could_misread_are_refused_before_any_io() {
    let nodes = RedisNodes::start(1);
    for bad in [
        "",
        "a|b",
        "star*",
        "tab\there",
        &"x".repeat(redlease::MAX_OWNER_LEN + 1),
    ] {
        let refused = Locker::builder(nodes.urls())
            .owner(bad)
            .build()
            .unwrap_err();
        assert!(
            matches!(refused, Error::InvalidInput { field: "owner", .. }),
            "{bad:?}: {refused:?}"
        );
    }
    // Lossy: the same text made a label.
    let locker = Locker::builder(nodes.urls())
        .advanced(|a| a.restart_quarantine(Duration::ZERO))
        .owner_lossy("sh -c 'a | b'")
        .build()
        .unwrap();
    let lease = locker.lock("job").await.unwrap();
    assert_eq!(
        owners(&locker, "job").await,
        vec![("sh -c 'a _ b'".into(), 1)]
    );
    lease.release().await.unwrap();
}
