//! Least privilege on a Redis Cluster, behind Sentinel and with
//! durability: a user with exactly the rule the library makes for the
//! form (`redlease::acl`) can lock, wait (woken by the release), renew with
//! durability, inspect and release, and each server's ACL LOG shows
//! nothing of that user's refused.

use std::time::{Duration, Instant};

use redlease::acl::{AclRule, Deployment};
use redlease::{Capabilities, Durability, Error, Locker, RetryPolicy};
use redlease_testkit::cluster::RedisCluster;
use redlease_testkit::sentinel::{SentinelSet, PRIMARY_NAME};
use redlease_testkit::{NodeConfig, RedisNode};

use crate::support::*;

/// The durability the lock cycles run with: `WAIT 1 50`, which a node
/// without a replica answers late with 0, and best effort takes.
const DURABLE: Durability = Durability::best_effort(1, Duration::from_millis(50));

/// The library's rule for `deployment` with `durability`, as the words
/// after `ACL SETUSER <name> on ><password>`.
fn rule(deployment: Deployment, durability: Durability) -> String {
    AclRule::new(deployment)
        .durability(durability)
        .rights()
        .join(" ")
}

const PASSWORD: &str = "locker-pw";

async fn add_user(node: &RedisNode, rule: &str) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg(&["SETUSER", "locker", "on", &format!(">{PASSWORD}")])
        .arg(rule.split_whitespace().collect::<Vec<_>>());
    let _: () = cmd
        .query_async(&mut conn(node).await)
        .await
        .expect("ACL SETUSER");
    let _: () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query_async(&mut conn(node).await)
        .await
        .unwrap();
}

/// What `node` refused the `locker` user: (reason, object) per entry.
async fn refused(node: &RedisNode) -> Vec<(String, String)> {
    acl_log_entries(&mut conn(node).await)
        .await
        .into_iter()
        .filter(|(user, _, _)| user == "locker")
        .map(|(_, reason, object)| (reason, object))
        // redis-rs names each connection and ignores a refusal.
        .filter(|(_, object)| object != "client|setinfo")
        .collect()
}

/// Takes a kept-alive lease through `url` with `durability`, has a second
/// Locker wait for it (woken by the release, its timer being 5 s),
/// inspects it.
async fn lock_cycle(url: &str, durability: Durability) {
    let build = |delay: Duration| {
        Locker::builder([url])
            .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
            .ttl(Duration::from_secs(1))
            .node_timeout(NODE_TIMEOUT)
            .connect_timeout(NODE_TIMEOUT)
            .durability(durability)
            .retry(RetryPolicy::within(Duration::from_secs(20)).delay(delay, delay))
            .build()
            .unwrap()
    };
    let holder = build(5 * MS);
    let lease = holder.try_lock("job").keep_alive().await.expect("locked");
    let waiter_side = build(Duration::from_secs(5));
    let waiter = tokio::spawn(async move {
        let lease = waiter_side.lock("job").await;
        (Instant::now(), lease, waiter_side)
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while holder
        .admin()
        .inspect("job")
        .await
        .expect("inspect")
        .waiting()
        != 1
    {
        assert!(Instant::now() < deadline, "the waiter never subscribed");
        tokio::time::sleep(10 * MS).await;
    }
    // Renewed twice over.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!lease.is_lost(), "{:?}", lease.lost_reason());
    let released = Instant::now();
    lease.release().await.unwrap();
    let (acquired, second, waiter_side) = waiter.await.unwrap();
    second.expect("the waiter gets it").release().await.unwrap();
    assert!(
        acquired - released < Duration::from_millis(500),
        "woken by the release, not its 5 s timer: {:?}",
        acquired - released
    );
    read_cycle(&holder, waiter_side).await;
    permit_cycle(&holder, build(Duration::from_secs(5))).await;
    set_cycle(&holder, build(Duration::from_secs(5))).await;
    crate::elections::election_cycle(&holder).await;
    holder.close().await;
}

/// Several names through the same deployment, one of them read: a kept
/// -alive set renewed twice over, a second set that waits for two of its
/// names (reserving and claiming them) and is woken by the release (its
/// timer being 5 s), and a third that gives up (its reservations given
/// back).
async fn set_cycle(holder: &Locker, other: Locker) {
    let set = holder
        .lock_all(["set-a", "set-b"])
        .and_read(["set-r"])
        .keep_alive()
        .await
        .expect("a set");
    // It reserves once it has waited its TTL (0.6 s), from its next
    // attempt on (0.9 s).
    let gave_up = holder
        .lock_all(["set-0", "set-a"])
        .ttl(Duration::from_millis(600))
        .wait(Duration::from_millis(1400))
        .await;
    assert!(
        matches!(gave_up, Err(Error::WaitTimeout { .. })),
        "{gave_up:?}"
    );
    let waiter = tokio::spawn(async move {
        let lease = other.lock_all(["set-a", "set-b"]).await;
        (Instant::now(), lease, other)
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!set.is_lost(), "{:?}", set.lost_reason());
    assert!(!waiter.is_finished());
    let released = Instant::now();
    set.release().await.unwrap();
    let (acquired, second, other) = waiter.await.unwrap();
    second.expect("the waiter gets it").release().await.unwrap();
    assert!(
        acquired - released < Duration::from_millis(500),
        "woken by the release, not its 5 s timer: {:?}",
        acquired - released
    );
    holder.admin().wait_for_background().await;
    let free = holder
        .try_lock_all(["set-0", "set-a", "set-b", "set-r"])
        .await;
    free.expect("nothing left reserved")
        .release()
        .await
        .unwrap();
    other.close().await;
}

/// A semaphore's permits through the same deployment: two held (one kept
/// alive, renewed twice over), a third taker waits and is woken by a
/// release (its timer being 5 s).
async fn permit_cycle(holder: &Locker, other: Locker) {
    let pool = holder.semaphore("pool", 2);
    let kept = pool.acquire().keep_alive().await.expect("a permit");
    let second = pool.try_acquire().keep_alive().await.expect("a second");
    let third = tokio::spawn(async move {
        let permit = other.semaphore("pool", 2).acquire().await;
        (Instant::now(), permit, other)
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!kept.is_lost(), "{:?}", kept.lost_reason());
    assert!(!third.is_finished(), "two permits");
    let status = holder.admin().inspect("pool").await.unwrap();
    assert_eq!((status.permits(), status.readers()), (Some(2), 2));
    let released = Instant::now();
    second.release().await.unwrap();
    let (acquired, permit, other) = third.await.unwrap();
    permit.expect("the third gets it").release().await.unwrap();
    assert!(
        acquired - released < Duration::from_millis(500),
        "woken by the release, not its 5 s timer: {:?}",
        acquired - released
    );
    kept.release().await.unwrap();
    other.close().await;
}

/// The read side through the same deployment: a kept-alive reader
/// renewed twice over beside a second reader, a writer that waits behind
/// them (marked, so a new reader is refused) and is woken by the last
/// release (its timer being 5 s).
async fn read_cycle(holder: &Locker, writer_side: Locker) {
    let reader = holder.read_lock("doc").keep_alive().await.expect("read");
    let other = holder
        .try_read_lock("doc")
        .keep_alive()
        .await
        .expect("a second reader");
    let writer = tokio::spawn(async move {
        let lease = writer_side.write_lock("doc").await;
        (Instant::now(), lease, writer_side)
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while !holder.admin().inspect("doc").await.unwrap().writer_waits() {
        assert!(Instant::now() < deadline, "the writer never marked itself");
        tokio::time::sleep(10 * MS).await;
    }
    let late = holder.try_read_lock("doc").await;
    assert!(late.is_err(), "a new reader waits behind the writer");
    other.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!reader.is_lost(), "{:?}", reader.lost_reason());
    let status = holder.admin().inspect("doc").await.unwrap();
    assert_eq!(status.mode(), Some(redlease::LockMode::Shared));
    assert_eq!(status.readers(), 1);
    let released = Instant::now();
    reader.release().await.unwrap();
    let (acquired, written, writer_side) = writer.await.unwrap();
    written
        .expect("the writer gets it")
        .release()
        .await
        .unwrap();
    assert!(
        acquired - released < Duration::from_millis(500),
        "woken by the last reader's release, not its 5 s timer: {:?}",
        acquired - released
    );
    writer_side.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_rule_is_enough() {
    let cluster = RedisCluster::start(3);
    for node in cluster.iter() {
        add_user(node, &rule(Deployment::Cluster, DURABLE)).await;
    }
    let hosts: Vec<String> = cluster.iter().map(RedisNode::addr).collect();
    let url = format!("redis+cluster://locker:{PASSWORD}@{}", hosts.join(","));
    lock_cycle(&url, DURABLE).await;
    for node in cluster.iter() {
        assert_eq!(refused(node).await, [], "{}", node.addr());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sentinel_primary_rule_is_enough() {
    let set = SentinelSet::start(1, 3);
    // ACL SETUSER is not replicated: every data node gets the user.
    for i in 0..2 {
        add_user(set.node(i), &rule(Deployment::Sentinel, DURABLE)).await;
    }
    let hosts: Vec<String> = set
        .sentinel_urls()
        .iter()
        .map(|u| u.trim_start_matches("redis://").to_string())
        .collect();
    let url = format!(
        "redis+sentinel://locker:{PASSWORD}@{}/{PRIMARY_NAME}",
        hosts.join(",")
    );
    lock_cycle(&url, DURABLE).await;
    for i in 0..2 {
        assert_eq!(refused(set.node(i)).await, [], "{}", set.node(i).addr());
    }
}

/// A single server's rule with durability: `WAIT`, and where the server
/// has `WAITAOF` (Redis 7.2 and later, Valkey) `WAITAOF` with `fsync`, on
/// a node that fsyncs its AOF on every write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standalone_durable_rules_are_enough() {
    let node = RedisNode::start_with(
        NodeConfig::new()
            .arg("appendonly", "yes")
            .arg("appendfsync", "always"),
    );
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn(&node).await)
        .await
        .unwrap();
    let server = Capabilities::from_info(&info).expect("a version");
    let mut forms = vec![(DURABLE, "wait")];
    if server.waitaof() {
        forms.push((DURABLE.fsync(), "waitaof"));
    } else {
        eprintln!(
            "WAITAOF not tried: {} {} has none",
            server.server(),
            server.version()
        );
    }
    let url = format!("redis://locker:{PASSWORD}@{}", node.addr());
    for (durability, command) in forms {
        add_user(&node, &rule(Deployment::Standalone, durability)).await;
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut conn(&node).await)
            .await
            .unwrap();
        lock_cycle(&url, durability).await;
        assert_eq!(refused(&node).await, [], "{command}");
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn(&node).await)
            .await
            .unwrap();
        assert!(
            stats.contains(&format!("cmdstat_{command}:calls=")),
            "{command} was sent: {stats}"
        );
    }
}
