//! Node failures: a minority down is tolerated, a majority down is a typed
//! error naming the nodes, and a restarted node is used again.

use std::time::{Duration, Instant};

use redlease::{Error, NodeErrorKind, ServerErrorCode};
use redlease_testkit::RedisNodes;

use crate::support::*;

/// The longest one attempt may take: acquire plus cleanup, each bounded by
/// the node timeout, plus scheduling slack.
const ATTEMPT_BOUND: Duration = Duration::from_millis(2 * 500 + 600);

#[tokio::test]
async fn two_of_five_killed_still_locks() {
    let mut nodes = RedisNodes::start(5);
    let locker = locker(&nodes);
    nodes.node_mut(1).kill();
    nodes.node_mut(3).kill();

    let lease = locker
        .try_lock("job")
        .await
        .expect("3 of 5 nodes are a quorum");
    let key = locker.admin().key("job");
    let held: Vec<bool> = values(&nodes, &key)
        .await
        .iter()
        .map(Option::is_some)
        .collect();
    assert_eq!(held, [true, false, true, false, true]);
    lease.release().await.expect("release on the live quorum");
    assert_eq!(values(&nodes, &key).await, vec![None; 5]);
}

#[tokio::test]
async fn three_of_five_killed_is_no_quorum_naming_them() {
    let mut nodes = RedisNodes::start(5);
    let locker = locker(&nodes);
    for i in [0, 2, 4] {
        nodes.node_mut(i).kill();
    }
    let started = Instant::now();
    let err = locker
        .try_lock("job")
        .await
        .expect_err("2 of 5 is no quorum");
    assert!(
        started.elapsed() < ATTEMPT_BOUND,
        "took {:?}",
        started.elapsed()
    );
    match &err {
        Error::NoQuorum {
            succeeded,
            quorum,
            nodes: n,
            failed,
            ..
        } => {
            assert_eq!((*succeeded, *quorum, *n), (2, 3, 5));
            assert_eq!(indices(failed.iter().map(|e| e.node())), [0, 2, 4]);
            assert!(failed.iter().all(|e| matches!(
                e.kind(),
                NodeErrorKind::Connection(_) | NodeErrorKind::Timeout(_)
            )));
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    let message = err.to_string();
    for i in [0, 2, 4] {
        assert!(message.contains(&nodes.node(i).addr()), "{message}");
    }
    // The two live nodes took the key, then gave it back.
    assert_eq!(
        values(&nodes, &locker.admin().key("job")).await,
        vec![None; 5]
    );
}

#[tokio::test]
async fn three_of_five_paused_times_out_within_the_bound() {
    let mut nodes = RedisNodes::start(5);
    let locker = locker(&nodes);
    // Warm the connections so the pause hits requests, not connects.
    warm_up(&locker).await;
    for i in [1, 2, 3] {
        nodes.node_mut(i).pause();
    }
    let started = Instant::now();
    let err = locker.try_lock("job").await.expect_err("no quorum");
    let took = started.elapsed();
    for i in [1, 2, 3] {
        nodes.node_mut(i).resume();
    }
    assert!(took < ATTEMPT_BOUND, "took {took:?}");
    match &err {
        Error::NoQuorum { failed, .. } => {
            assert_eq!(indices(failed.iter().map(|e| e.node())), [1, 2, 3]);
            assert!(
                failed
                    .iter()
                    .all(|e| matches!(e.kind(), NodeErrorKind::Timeout(_))),
                "{err}"
            );
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    // The paused nodes ran the acquire after waking up; the cleanup that was
    // queued behind it on the same connection removed it again.
    let key = locker.admin().key("job");
    assert_eq!(
        values_once_gone(&nodes, &key, Duration::from_secs(2)).await,
        vec![None; 5]
    );
}

#[tokio::test]
async fn foreign_value_on_two_of_five_is_outvoted() {
    let nodes = RedisNodes::start(5);
    let locker = locker(&nodes);
    let key = locker.admin().key("job");
    set(nodes.node(0), &key, "someone-else").await;
    set(nodes.node(4), &key, "someone-else").await;

    let lease = locker
        .try_lock("job")
        .await
        .expect("3 free nodes are a quorum");
    lease.release().await.unwrap();
    // Release never deletes another owner's value.
    assert_eq!(
        values(&nodes, &key).await,
        [
            Some("someone-else".into()),
            None,
            None,
            None,
            Some("someone-else".into())
        ]
    );
}

#[tokio::test]
async fn foreign_value_on_three_of_five_is_taken_and_leaves_nothing() {
    let nodes = RedisNodes::start(5);
    let locker = locker(&nodes);
    let key = locker.admin().key("job");
    for i in [1, 2, 4] {
        set(nodes.node(i), &key, "someone-else").await;
    }
    let err = locker.try_lock("job").await.expect_err("taken");
    match &err {
        Error::Taken {
            held_on,
            failed,
            nodes: n,
            quorum,
            ..
        } => {
            assert_eq!(indices(held_on.iter().map(|h| &h.node)), [1, 2, 4]);
            assert!(
                held_on.iter().all(|h| h.expires_in.is_none()),
                "set without TTL"
            );
            assert!(failed.is_empty());
            assert_eq!((*n, *quorum), (5, 3));
        }
        other => panic!("expected Taken, got {other:?}"),
    }
    // Our key was set on nodes 0 and 3 and must be gone again.
    let foreign = Some("someone-else".to_string());
    assert_eq!(
        values(&nodes, &key).await,
        [None, foreign.clone(), foreign.clone(), None, foreign]
    );
}

#[tokio::test]
async fn taken_reports_the_holders_remaining_ttl() {
    let nodes = RedisNodes::start(1);
    let locker = locker(&nodes);
    let _held = locker
        .try_lock("job")
        .ttl(Duration::from_secs(3))
        .await
        .unwrap();
    match locker.try_lock("job").await {
        Err(Error::Taken { held_on, .. }) => {
            let left = held_on[0].expires_in.expect("the holder's key has a TTL");
            assert!(
                left <= Duration::from_secs(3) && left > Duration::from_secs(2),
                "{left:?}"
            );
        }
        other => panic!("expected Taken, got {other:?}"),
    }
}

#[tokio::test]
async fn a_restarted_node_is_used_again() {
    let mut nodes = RedisNodes::start(5);
    let locker = locker(&nodes);
    let key = locker.admin().key("job");
    locker
        .try_lock("job")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    nodes.node_mut(0).kill();
    let lease = locker.try_lock("job").await.expect("4 of 5 suffice");
    lease.release().await.unwrap();
    nodes.node_mut(0).restart();

    // The first request after the restart may meet the dead connection;
    // reconnecting is automatic, so within a few tries node 0 holds the key.
    let mut seen = false;
    for _ in 0..40 {
        let lease = locker.try_lock("job").await.expect("a quorum is up");
        seen = get(nodes.node(0), &key).await.is_some();
        lease.release().await.unwrap();
        if seen {
            break;
        }
        tokio::time::sleep(50 * MS).await;
    }
    assert!(seen, "the restarted node never got the lock key");
}

#[tokio::test]
async fn one_node_down_then_back() {
    let mut nodes = RedisNodes::start(1);
    // Without the restart quarantine (restarts.rs tests it): a server that
    // cannot lose a lock it granted, as with `appendfsync always`.
    let locker = redlease::Locker::builder(nodes.urls())
        .ttl(Duration::from_secs(5))
        .node_timeout(crate::support::NODE_TIMEOUT)
        .advanced(|a| a.restart_quarantine(Duration::ZERO))
        .build()
        .unwrap();
    nodes.node_mut(0).kill();
    match locker.try_lock("job").await {
        Err(Error::NoQuorum { failed, .. }) => {
            assert_eq!(indices(failed.iter().map(|e| e.node())), [0])
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    nodes.node_mut(0).restart();
    let mut acquired = false;
    for _ in 0..40 {
        if let Ok(lease) = locker.try_lock("job").await {
            lease.release().await.unwrap();
            acquired = true;
            break;
        }
        tokio::time::sleep(50 * MS).await;
    }
    assert!(acquired, "the Locker never used the restarted node");
}

#[tokio::test]
async fn a_locker_builds_while_its_nodes_are_down() {
    let mut nodes = RedisNodes::start(3);
    nodes.node_mut(2).kill();
    let locker = locker(&nodes);
    let lease = locker.try_lock("job").await.expect("2 of 3 are up");
    lease.release().await.unwrap();
}

#[tokio::test]
async fn redis_errors_map_to_node_errors() {
    let nodes = RedisNodes::start(2);
    let (a, b) = (nodes.node(0), nodes.node(1));
    // Node b becomes a replica of a: writes there get READONLY.
    command(b, &["REPLICAOF", "127.0.0.1", &a.port().to_string()]).await;
    // Node a is out of memory for writes.
    command(a, &["CONFIG", "SET", "maxmemory", "1"]).await;
    let locker = locker(&nodes);
    let err = locker
        .try_lock("job")
        .await
        .expect_err("both nodes refuse writes");
    let mut codes: Vec<_> = err
        .node_errors()
        .iter()
        .map(|e| match e.kind() {
            NodeErrorKind::Redis { code, .. } => (e.node().index(), code.clone()),
            other => panic!("expected a Redis error, got {other}"),
        })
        .collect();
    codes.sort_by_key(|(index, _)| *index);
    codes.dedup();
    assert_eq!(
        codes,
        [(0, ServerErrorCode::Oom), (1, ServerErrorCode::ReadOnly)],
        "{err}"
    );
}

#[tokio::test]
async fn wrongtype_on_release_is_a_node_error() {
    let nodes = RedisNodes::start(1);
    let locker = locker_with_timeout(&nodes, 30 * MS);
    let key = locker.admin().key("job");
    let lease = locker
        .try_lock("job")
        .ttl(Duration::from_millis(100))
        .await
        .unwrap();
    tokio::time::sleep(150 * MS).await;
    // After expiry someone stores a list under the same key.
    command(nodes.node(0), &["RPUSH", &key, "x"]).await;
    match lease.release().await {
        Err(Error::NoQuorum { failed, .. }) => match failed[0].kind() {
            NodeErrorKind::Redis { code, .. } => assert_eq!(*code, ServerErrorCode::WrongType),
            other => panic!("expected WRONGTYPE, got {other}"),
        },
        other => panic!("expected NoQuorum, got {other:?}"),
    }
}

#[tokio::test]
async fn noscript_after_script_flush_is_recovered() {
    let nodes = RedisNodes::start(1);
    // Fencing on: its acquire is a script (the default one is plain
    // commands; plain_acquire.rs flushes under a default Locker's release).
    let locker = fenced_locker(&nodes);
    locker
        .try_lock("job")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    flush_scripts(&nodes).await;
    let mut lease = locker
        .try_lock("job")
        .await
        .expect("acquire reloads its script");
    flush_scripts(&nodes).await;
    lease
        .extend(Duration::from_secs(5))
        .await
        .expect("extend reloads its script");
    lease.release().await.expect("release reloads its script");
}

#[tokio::test]
async fn a_connection_failure_keeps_the_redis_error_as_its_source() {
    let mut nodes = RedisNodes::start(1);
    let locker = locker(&nodes);
    nodes.node_mut(0).kill();
    let err = locker.try_lock("job").await.unwrap_err();
    let failed = err.node_errors();
    assert_eq!(failed.len(), 1, "{err:?}");
    let e = &failed[0];
    assert!(
        matches!(e.kind(), NodeErrorKind::Connection(_)),
        "{:?}",
        e.kind()
    );
    let source = std::error::Error::source(e).expect("the redis-rs error is the source");
    let redis = source
        .downcast_ref::<redis::RedisError>()
        .expect("a redis::RedisError");
    // Printed once by a reporter that walks the chain: the node error's
    // own text does not repeat its source's, the alternate form adds it,
    // and the aggregate error names it for each node.
    let (plain, alternate) = (e.to_string(), format!("{e:#}"));
    assert!(!plain.contains(&redis.to_string()), "{plain}");
    assert!(alternate.contains(&redis.to_string()), "{alternate}");
    assert!(err.to_string().contains(&redis.to_string()), "{err}");
}
