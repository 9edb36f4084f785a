//! Leases end: after the TTL another client gets the lock, and the old
//! lease can neither release nor extend it.

use std::time::{Duration, Instant};

use redlease::{Error, Op};
use redlease_testkit::RedisNodes;

use crate::support::*;

async fn expired_lease_is_not_held(n: usize) {
    let nodes = RedisNodes::start(n);
    // A short TTL needs a node timeout well below it; the other client
    // takes its locks with the default TTL, so it keeps the usual timeout.
    let locker = locker_with_timeout(&nodes, 100 * MS);
    let other = locker_with_timeout(&nodes, NODE_TIMEOUT);
    let key = locker.admin().key("job");

    let mut old = locker.try_lock("job").ttl(500 * MS).await.unwrap();
    match other.try_lock("job").await {
        Err(Error::Taken { .. }) => {}
        // Over five nodes the acquire returns at its quorum: a slow server
        // of the other two may not have run its SET yet, and may run this
        // attempt's first. A quorum still refuses it.
        Err(Error::NoQuorum { refused_by, .. }) if refused_by.len() > n / 2 => {}
        r => panic!("expected the lock to be held, got {r:?}"),
    }
    // Past the TTL, with room for a late SET on a slow node.
    tokio::time::sleep(800 * MS).await;
    let new = other
        .try_lock("job")
        .ttl(Duration::from_secs(5))
        .await
        .expect("expired lock is free");
    let before = values(&nodes, &key).await;
    assert!(before.iter().all(Option::is_some));

    match old.extend(Duration::from_secs(5)).await {
        Err(Error::NotHeld {
            op: Op::Extend,
            expired,
            ..
        }) => assert!(expired),
        other => panic!("expected NotHeld, got {other:?}"),
    }
    match old.release().await {
        Err(Error::NotHeld {
            op: Op::Release,
            not_held_on,
            failed,
            ..
        }) => {
            assert_eq!(
                not_held_on.len(),
                n,
                "every node holds the new owner's token"
            );
            assert!(failed.is_empty());
        }
        other => panic!("expected NotHeld, got {other:?}"),
    }
    // Nothing was written: the new owner's keys and TTLs are untouched.
    assert_eq!(values(&nodes, &key).await, before);
    for node in nodes.iter() {
        let left = pttl(node, &key).await;
        assert!(
            left > 4_000 && left <= 5_000,
            "new owner's TTL changed: {left}"
        );
    }
    new.release().await.expect("the new owner still holds it");
}

#[tokio::test]
async fn one_node_expired_lease_is_not_held() {
    expired_lease_is_not_held(1).await;
}

#[tokio::test]
async fn five_nodes_expired_lease_is_not_held() {
    expired_lease_is_not_held(5).await;
}

#[tokio::test]
async fn release_after_expiry_without_a_new_owner_is_not_held() {
    let nodes = RedisNodes::start(3);
    let locker = locker_with_timeout(&nodes, 30 * MS);
    let lease = locker.try_lock("job").ttl(100 * MS).await.unwrap();
    tokio::time::sleep(150 * MS).await;
    match lease.release().await {
        Err(Error::NotHeld {
            expired,
            not_held_on,
            ..
        }) => {
            assert!(expired);
            assert_eq!(indices(&not_held_on), [0, 1, 2]);
        }
        other => panic!("expected NotHeld, got {other:?}"),
    }
}

async fn extend_keeps_the_lease_alive(n: usize) {
    let nodes = RedisNodes::start(n);
    let locker = locker_with_timeout(&nodes, 50 * MS);
    let other = locker_with_timeout(&nodes, 50 * MS);
    let ttl = 300 * MS;
    let drift = ttl / 100 + 2 * MS;
    let first = Instant::now();
    let mut lease = locker.try_lock("job").ttl(ttl).await.unwrap();
    // Six extends 100 ms apart: twice the original TTL.
    for _ in 0..6 {
        tokio::time::sleep(100 * MS).await;
        let before = Instant::now();
        lease.extend(ttl).await.expect("extend within validity");
        let after = Instant::now();
        let until = lease.valid_until();
        assert!(
            until >= before + ttl - drift,
            "valid_until moved too little"
        );
        assert!(
            until <= after + ttl - drift,
            "valid_until past start + ttl - drift"
        );
    }
    assert!(first.elapsed() > ttl + 200 * MS);
    assert!(
        matches!(other.try_lock("job").await, Err(Error::Taken { .. })),
        "still held"
    );
    lease.release().await.expect("still ours");
}

#[tokio::test]
async fn one_node_extend_keeps_the_lease_alive() {
    extend_keeps_the_lease_alive(1).await;
}

#[tokio::test]
async fn five_nodes_extend_keeps_the_lease_alive() {
    extend_keeps_the_lease_alive(5).await;
}

async fn valid_until_is_inside_every_nodes_expiry(n: usize) {
    let nodes = RedisNodes::start(n);
    let locker = locker(&nodes);
    let key = locker.admin().key("job");
    let ttl = Duration::from_secs(2);
    let drift = ttl / 100 + 2 * MS;
    for _ in 0..20 {
        let before = Instant::now();
        let lease = locker.try_lock("job").ttl(ttl).await.unwrap();
        let after = Instant::now();
        let until = lease.valid_until();
        assert!(
            until <= after + ttl - drift,
            "valid_until later than start + ttl - drift"
        );
        assert!(until >= before + ttl - drift);
        // A quorum has the key (the others may still be applying it), and
        // every node that has it keeps it at least until valid_until.
        let mut holding = 0;
        for node in nodes.iter() {
            let asked = Instant::now();
            let left = pttl(node, &key).await;
            if left > 0 {
                holding += 1;
                let expires = asked + Duration::from_millis(left as u64) + MS;
                assert!(expires >= until, "node expires first");
            }
        }
        assert!(
            holding >= locker.admin().quorum(),
            "only {holding} nodes hold the key"
        );
        lease.release().await.unwrap();
    }
}

#[tokio::test]
async fn one_node_valid_until_is_inside_the_keys_expiry() {
    valid_until_is_inside_every_nodes_expiry(1).await;
}

#[tokio::test]
async fn five_nodes_valid_until_is_inside_every_keys_expiry() {
    valid_until_is_inside_every_nodes_expiry(5).await;
}

#[tokio::test]
async fn a_dropped_lease_is_released_in_the_background() {
    let nodes = RedisNodes::start(3);
    let locker = locker(&nodes);
    let key = locker.admin().key("job");
    // Warm up, so the background release is not racing a cold start
    // against its node timeout.
    warm_up(&locker).await;
    let lease = locker.try_lock("job").await.unwrap();
    drop(lease);
    assert_eq!(
        values_once_gone(&nodes, &key, Duration::from_secs(2)).await,
        vec![None; 3]
    );
    locker
        .try_lock("job")
        .await
        .expect("free again")
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn lock_waits_for_a_held_lock_and_times_out() {
    let nodes = RedisNodes::start(3);
    let locker = locker(&nodes);
    let holder = locker
        .try_lock("job")
        .ttl(Duration::from_secs(5))
        .await
        .unwrap();

    let started = Instant::now();
    match locker.lock("job").wait(300 * MS).await {
        Err(Error::WaitTimeout {
            attempts,
            last,
            waited,
            ..
        }) => {
            assert!(attempts > 1, "it retried");
            assert!(waited >= 300 * MS);
            assert!(matches!(*last, Error::Taken { .. }));
        }
        other => panic!("expected WaitTimeout, got {other:?}"),
    }
    // Bound: the wait plus one attempt's node timeouts, with slack.
    assert!(started.elapsed() < 300 * MS + Duration::from_secs(1));

    // A waiter gets the lock once the holder lets go.
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.lock("job").wait(Duration::from_secs(5)).await })
    };
    tokio::time::sleep(50 * MS).await;
    holder.release().await.unwrap();
    let lease = waiter.await.unwrap().expect("acquired after release");
    lease.release().await.unwrap();
}

#[tokio::test]
async fn lock_gives_up_after_its_attempts() {
    let nodes = RedisNodes::start(1);
    let locker = locker(&nodes);
    let _holder = locker.try_lock("job").await.unwrap();
    let policy = attempts(3).delay(MS, MS);
    match locker.lock("job").retry(policy).await {
        Err(Error::Taken { .. }) => {}
        other => panic!("expected Taken after 3 attempts, got {other:?}"),
    }
}

/// A release right after acquire must not overtake an acquire request that
/// is still connecting or reloading its script on a slow node: that would
/// leave a key behind until its TTL.
#[tokio::test]
async fn an_immediate_release_leaves_no_key_behind() {
    let nodes = RedisNodes::start(5);
    for round in 0..20 {
        flush_scripts(&nodes).await;
        // A fresh Locker connects lazily, so every request starts by
        // connecting; with fencing on, its acquire script then meets
        // NOSCRIPT too (the default acquire is plain commands).
        let locker = if round % 4 < 2 {
            fenced_locker(&nodes)
        } else {
            locker(&nodes)
        };
        let key = locker.admin().key("job");
        let lease = locker.try_lock("job").await.unwrap();
        if round % 2 == 0 {
            lease.release().await.unwrap();
        } else {
            drop(lease);
        }
        let left = values_once_gone(&nodes, &key, Duration::from_secs(2)).await;
        assert_eq!(left, vec![None; 5], "round {round}");
    }
}

/// The same with a node that is slow to connect: node 4 is paused while a
/// fresh Locker acquires (so its request waits for the connection) and
/// resumes while the release is under way. Without waiting for the slow
/// acquire, the release can reach node 4 first and the SET lands after it.
#[tokio::test]
async fn a_release_waits_for_a_slow_nodes_acquire() {
    let mut nodes = RedisNodes::start(5);
    for round in 0..5 {
        flush_scripts(&nodes).await;
        nodes.node_mut(4).pause();
        let pid = nodes.node(4).pid().unwrap().to_string();
        let locker = locker(&nodes);
        let key = locker.admin().key("job");
        let lease = locker.try_lock("job").await.unwrap();
        let resume = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20 + 10 * round)).await;
            std::process::Command::new("kill")
                .args(["-CONT", &pid])
                .status()
                .unwrap();
        });
        lease.release().await.unwrap();
        resume.await.unwrap();
        nodes.node_mut(4).resume();
        tokio::time::sleep(300 * MS).await;
        assert_eq!(values(&nodes, &key).await, vec![None; 5], "round {round}");
    }
}

/// Only the slow node's release waits for its acquire: the other nodes
/// release at once, so a release's answer does not wait for the slowest
/// acquire. Node 4 is paused through the acquire and the release (with a
/// node timeout longer than the pause, so its acquire is still owed); the
/// release returns while it is paused, and once it resumes its key goes
/// too, released after its late SET.
#[tokio::test]
async fn a_release_waits_only_on_the_slow_node() {
    let mut nodes = RedisNodes::start(5);
    let locker = locker_with_timeout(&nodes, Duration::from_secs(3));
    let key = locker.admin().key("job");
    warm_up(&locker).await;
    nodes.node_mut(4).pause();
    let pid = nodes.node(4).pid().unwrap().to_string();
    let lease = locker.try_lock("job").await.expect("4 nodes answer");
    let resumed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let resume = tokio::spawn({
        let resumed = resumed.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            resumed.store(true, std::sync::atomic::Ordering::SeqCst);
            std::process::Command::new("kill")
                .args(["-CONT", &pid])
                .status()
                .unwrap();
        }
    });
    lease.release().await.unwrap();
    assert!(
        !resumed.load(std::sync::atomic::Ordering::SeqCst),
        "the release waited for the paused node"
    );
    resume.await.unwrap();
    nodes.node_mut(4).resume();
    locker.admin().wait_for_background().await;
    assert_eq!(values(&nodes, &key).await, vec![None; 5]);
}

/// `Admin::wait_for_background` waits for the requests a release left to a
/// slow node, so a process can exit without leaving that node holding the
/// key.
#[tokio::test]
async fn waiting_for_the_background_waits_for_the_slowest_node() {
    let mut nodes = RedisNodes::start(5);
    let locker = locker(&nodes);
    let key = locker.admin().key("job");
    warm_up(&locker).await;
    nodes.node_mut(4).pause();
    let pid = nodes.node(4).pid().unwrap().to_string();
    let lease = locker.try_lock("job").await.expect("4 nodes answer");
    let resume = tokio::spawn(async move {
        tokio::time::sleep(100 * MS).await;
        std::process::Command::new("kill")
            .args(["-CONT", &pid])
            .status()
            .unwrap();
    });
    lease.release().await.unwrap();
    locker.admin().wait_for_background().await;
    // No waiting here: every node has answered by now.
    assert_eq!(values(&nodes, &key).await, vec![None; 5]);
    resume.await.unwrap();
    nodes.node_mut(4).resume();
}
