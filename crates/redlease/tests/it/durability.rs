//! Durability across failover: `WAIT` after every write of a lease, on a
//! real primary with a real replica (paused to stop acknowledging).

use std::time::{Duration, Instant};

use redlease::{Durability, Error, Locker, NodeErrorKind};
use redlease_testkit::{NodeConfig, RedisNode};

use crate::support::*;

const WAIT: Duration = Duration::from_millis(100);

/// A primary and one replica that has synced with it.
async fn primary_and_replica() -> (RedisNode, RedisNode) {
    let primary = RedisNode::start();
    let replica = RedisNode::start_with(
        NodeConfig::new().arg("replicaof", &format!("127.0.0.1 {}", primary.port())),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn(&replica).await)
            .await
            .unwrap();
        if info.contains("master_link_status:up") {
            break;
        }
        assert!(Instant::now() < deadline, "the replica never synced");
        tokio::time::sleep(20 * MS).await;
    }
    (primary, replica)
}

fn durable_locker(primary: &RedisNode, durability: Durability) -> Locker {
    Locker::builder([primary.url()])
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .ttl(Duration::from_secs(1))
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(NODE_TIMEOUT)
        .durability(durability)
        .build()
        .expect("valid test settings")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_durability_undoes_an_acquire_no_replica_acknowledged() {
    let (primary, mut replica) = primary_and_replica().await;
    let locker = durable_locker(&primary, Durability::required(1, WAIT));

    let lease = locker.try_lock("acked").await.expect("the replica acks");
    assert_eq!(lease.replicas_acknowledged(), Some(1));
    let key = locker.admin().key("acked");
    assert!(pttl(&replica, &key).await > 0, "the replica has the key");
    lease.release().await.unwrap();

    replica.pause();
    let started = Instant::now();
    let err = locker.try_lock("unacked").await.unwrap_err();
    let took = started.elapsed();
    let Error::NoQuorum { .. } = &err else {
        panic!("expected NoQuorum, got {err:?}")
    };
    assert!(
        matches!(
            err.node_errors()[0].kind(),
            NodeErrorKind::NotReplicated {
                acknowledged: 0,
                wanted: 1
            }
        ),
        "{err}"
    );
    assert!(took >= WAIT, "WAIT was waited for: {took:?}");
    assert_eq!(
        pttl(&primary, &locker.admin().key("unacked")).await,
        -2,
        "the unacknowledged acquire was undone on the primary"
    );
    replica.resume();
    locker.close().await;
}

/// A write too few replicas acknowledged is a reason to wait, like a busy
/// lock: a waiting lock keeps trying while the replica is away (right
/// after a failover, say) and takes the lock once it acknowledges again,
/// within its wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_lock_waits_for_a_replica_to_acknowledge() {
    let (primary, mut replica) = primary_and_replica().await;
    let locker = durable_locker(&primary, Durability::required(1, WAIT));
    warm_up(&locker).await;
    replica.pause();
    let waiting = tokio::spawn({
        let locker = locker.clone();
        async move { locker.lock("job").wait(Duration::from_secs(20)).await }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let early = waiting.is_finished();
    replica.resume();
    assert!(
        !early,
        "gave up while the replica was away: {:?}",
        waiting.await
    );
    let lease = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("locked within the wait once the replica is back")
        .unwrap()
        .expect("locked");
    assert_eq!(lease.replicas_acknowledged(), Some(1));
    assert!(
        pttl(&replica, &locker.admin().key("job")).await > 0,
        "replicated"
    );
    lease.release().await.unwrap();
    locker.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn best_effort_durability_reports_what_was_acknowledged() {
    let (primary, mut replica) = primary_and_replica().await;
    let locker = durable_locker(&primary, Durability::best_effort(1, WAIT));
    replica.pause();
    let lease = locker
        .try_lock("job")
        .await
        .expect("best effort still locks");
    assert_eq!(lease.replicas_acknowledged(), Some(0));
    replica.resume();
    lease.release().await.unwrap();

    let plain = durable_locker(&primary, Durability::off());
    let lease = plain.try_lock("job").await.unwrap();
    assert_eq!(lease.replicas_acknowledged(), None);
    lease.release().await.unwrap();
    locker.close().await;
    plain.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_lease_whose_renewals_are_not_replicated_is_lost() {
    let (primary, mut replica) = primary_and_replica().await;
    let locker = durable_locker(&primary, Durability::required(1, WAIT));
    let lease = locker.try_lock("job").keep_alive().await.unwrap();
    // Renewed while the replica acknowledges.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!lease.is_lost(), "{:?}", lease.lost_reason());

    replica.pause();
    let lost = tokio::time::timeout(Duration::from_secs(3), lease.lost()).await;
    replica.resume();
    assert!(
        lost.is_ok(),
        "renewals no replica acknowledged must not keep the lease"
    );
    let _ = lease.release().await;
    locker.close().await;
}

#[tokio::test]
async fn durability_that_cannot_fit_the_node_timeout_is_refused() {
    let err = Locker::builder(["redis://127.0.0.1:1"])
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .node_timeout(Duration::from_millis(100))
        .durability(Durability::required(1, Duration::from_millis(100)))
        .build()
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidInput { field, .. } if *field == "durability"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("shorter than the node timeout"),
        "{err}"
    );
    let err = Locker::builder(["redis://127.0.0.1:1"])
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .durability(Durability::required(0, Duration::from_millis(10)))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("at least 1 replica"), "{err}");
}

/// `REPLICAOF host port` (or `NO ONE`) on `node`.
async fn replicaof(node: &RedisNode, target: Option<&RedisNode>) {
    let mut cmd = redis::cmd("REPLICAOF");
    match target {
        Some(t) => cmd.arg("127.0.0.1").arg(t.port()),
        None => cmd.arg("NO").arg("ONE"),
    };
    let _: () = cmd.query_async(&mut conn(node).await).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_lease_whose_primary_changed_lineage_is_reported_lost() {
    // The same data under a new replication lineage, as a promoted replica
    // has: the primary follows its replica for a moment, then is made
    // primary again (a new master_replid, the lock key still there).
    let (primary, replica) = primary_and_replica().await;
    let durable = durable_locker(&primary, Durability::best_effort(1, WAIT));
    let plain = durable_locker(&primary, Durability::off());
    let bound = durable.try_lock("bound").keep_alive().await.unwrap();
    let free = plain.try_lock("free").keep_alive().await.unwrap();

    replicaof(&replica, None).await;
    replicaof(&primary, Some(&replica)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn(&primary).await)
            .await
            .unwrap();
        if info.contains("master_link_status:up") {
            break;
        }
        assert!(Instant::now() < deadline, "the primary never synced back");
        tokio::time::sleep(20 * MS).await;
    }
    replicaof(&primary, None).await;
    assert!(
        pttl(&primary, &durable.admin().key("bound")).await > 0,
        "the key survived"
    );

    let lost = tokio::time::timeout(Duration::from_secs(3), bound.lost()).await;
    assert_eq!(lost.ok(), Some(redlease::LostReason::Refused));
    assert!(!free.is_lost(), "a lease without durability is not bound");
    let _ = bound.release().await;
    free.release().await.unwrap();
    durable.close().await;
    plain.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsync_durability_waits_for_the_aof_where_the_server_has_waitaof() {
    // appendfsync always: with everysec a fsync may be a second away, far
    // beyond the 100 ms the writes wait.
    let aof = || {
        NodeConfig::new()
            .arg("appendonly", "yes")
            .arg("appendfsync", "always")
    };
    let primary = RedisNode::start_with(aof());
    let replica =
        RedisNode::start_with(aof().arg("replicaof", &format!("127.0.0.1 {}", primary.port())));
    let info: Vec<redis::Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("WAITAOF")
        .query_async(&mut conn(&primary).await)
        .await
        .unwrap();
    let has_waitaof = !matches!(info.first(), None | Some(redis::Value::Nil));
    // A replica reports the offset it fsynced when the primary asks
    // (REPLCONF GETACK), which can come before its fsync of that very
    // write, and then only once a second: 100 ms failed under load, so
    // WAITAOF gets more than a second here.
    let locker = Locker::builder([primary.url()])
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .ttl(Duration::from_secs(10))
        .node_timeout(Duration::from_secs(2))
        .connect_timeout(NODE_TIMEOUT)
        .durability(Durability::required(1, Duration::from_millis(1500)).fsync())
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let outcome = loop {
        let outcome = locker.try_lock("on-disk").await;
        // Required durability fails while the replica still syncs.
        if outcome.is_ok() || !has_waitaof || Instant::now() >= deadline {
            break outcome;
        }
        tokio::time::sleep(50 * MS).await;
    };
    if has_waitaof {
        let lease = outcome.expect("the primary and the replica fsynced it");
        assert_eq!(lease.replicas_acknowledged(), Some(1));
        assert!(pttl(&replica, &locker.admin().key("on-disk")).await > 0);
        lease.release().await.unwrap();
    } else {
        // Before Redis 7.2 every write fails with the server's own error,
        // and the lock taken by the script is undone.
        let err = outcome.unwrap_err();
        let kind = err.node_errors()[0].kind();
        assert!(
            matches!(kind, NodeErrorKind::Redis { message, .. } if message.to_lowercase().contains("waitaof")),
            "{err}"
        );
        assert_eq!(pttl(&primary, &locker.admin().key("on-disk")).await, -2);
    }
    locker.close().await;
}
