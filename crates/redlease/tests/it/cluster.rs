//! A Redis Cluster as one node of the quorum (`redis+cluster://`): the
//! whole lock cycle on real cluster processes, with keys, fencing counters
//! and release channels in the lock's slot, sharded notifications, and
//! renewal batches that never cross slots.

use std::time::{Duration, Instant};

use redlease::{Durability, Error, KeyState, Locker, Verdict};
use redlease_testkit::cluster::RedisCluster;
use redlease_testkit::RedisNode;

use crate::support::*;

/// `redis+cluster://` over every node of `cluster`.
pub fn cluster_url(cluster: &RedisCluster) -> String {
    let hosts: Vec<String> = cluster.iter().map(RedisNode::addr).collect();
    format!("redis+cluster://{}", hosts.join(","))
}

async fn slot_of(cluster: &RedisCluster, key: &str) -> u16 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        // Not node 0: some tests stall it.
        .query_async(&mut conn(cluster.node(1)).await)
        .await
        .expect("CLUSTER KEYSLOT")
}

async fn shard_numsub(node: &RedisNode, channel: &str) -> i64 {
    let reply: Vec<(String, i64)> = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(channel)
        .query_async(&mut conn(node).await)
        .await
        .expect("PUBSUB SHARDNUMSUB");
    reply.first().map_or(0, |(_, n)| *n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_cycle_runs_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    let url = cluster_url(&cluster);
    // Fencing on: the counter sits beside the key, and tokens grow.
    let locker = fenced_locker_at(&url, Duration::from_secs(10), 5 * MS);
    assert_eq!(locker.admin().quorum(), 1, "a cluster is one node");
    assert!(
        locker
            .admin()
            .nodes()
            .next()
            .unwrap()
            .to_string()
            .contains("cluster"),
        "the node is named as a cluster"
    );

    let lease = locker.try_lock("orders:42").await.expect("a free lock");
    let key = locker.admin().key("orders:42");
    let slot = slot_of(&cluster, &key).await;
    let owner = cluster.owner_of(slot);
    assert!(
        pttl(owner, &key).await > 0,
        "the key is on its slot's owner"
    );
    let counter: Option<String> = redis::cmd("GET")
        .arg(locker.admin().fence_key("orders:42"))
        .query_async(&mut conn(owner).await)
        .await
        .unwrap();
    assert_eq!(
        counter.map(|c| c.parse::<u64>().unwrap()),
        Some(token(&lease)),
        "the fencing counter sits beside the key"
    );
    match locker.try_lock("orders:42").await {
        Err(Error::Taken { .. }) => {}
        other => panic!("a held lock is refused, got {other:?}"),
    }

    // A waiter with a 5 s fallback timer is woken by the sharded release.
    let waiter_side = fenced_locker_at(&url, Duration::from_secs(10), Duration::from_secs(5));
    let channel = waiter_side.admin().release_channel("orders:42");
    let waiter = tokio::spawn(async move {
        let lease = waiter_side.lock("orders:42").await;
        (Instant::now(), lease, waiter_side)
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while shard_numsub(owner, &channel).await != 1 {
        assert!(Instant::now() < deadline, "the waiter never subscribed");
        tokio::time::sleep(10 * MS).await;
    }
    let status = locker.admin().inspect("orders:42").await.unwrap();
    assert_eq!(status.waiting(), 1, "inspect counts the sharded subscriber");
    tokio::time::sleep(100 * MS).await;
    let first_token = token(&lease);
    let released = Instant::now();
    lease.release().await.unwrap();
    let (acquired, second, waiter_side) = waiter.await.unwrap();
    let second = second.expect("the waiter gets the lock");
    let gap = acquired - released;
    assert!(
        gap < Duration::from_millis(500),
        "handoff took {gap:?}; the fallback timer is 5 s"
    );
    assert!(token(&second) > first_token, "tokens grow");
    second.release().await.unwrap();
    assert_eq!(pttl(owner, &key).await, -2, "released");
    waiter_side.close().await;
    locker.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_alive_leases_over_many_slots_are_renewed_slot_by_slot() {
    let cluster = RedisCluster::start(3);
    let locker = locker_at(&cluster_url(&cluster), Duration::from_secs(1), 5 * MS);
    let mut leases = Vec::new();
    for i in 0..120 {
        let lease = locker
            .try_lock(format!("job:{i}"))
            .keep_alive()
            .await
            .unwrap_or_else(|e| panic!("job:{i}: {e}"));
        leases.push(lease);
    }
    // Three TTLs: every lease was renewed at least twice.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut slots = std::collections::HashSet::new();
    for lease in &leases {
        assert!(
            !lease.is_lost(),
            "{}: {:?}",
            lease.resource(),
            lease.lost_reason()
        );
        let key = locker.admin().key(lease.resource());
        let slot = slot_of(&cluster, &key).await;
        slots.insert(slot);
        let left = pttl(cluster.owner_of(slot), &key).await;
        assert!(left > 0, "{key} has {left} ms left on its owner");
    }
    assert!(slots.len() > 100, "the leases spread over many slots");
    let owners: std::collections::HashSet<u16> =
        slots.iter().map(|&s| cluster.owner_of(s).port()).collect();
    assert_eq!(owners.len(), 3, "and over every primary");
    let stats = locker.admin().renewal_stats();
    assert!(stats.round_trips >= 2, "{stats:?}");
    for lease in leases {
        lease.release().await.unwrap();
    }
    locker.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_and_independent_servers_form_one_quorum() {
    // Redlock over a cluster and two single servers: three nodes, quorum 2.
    let cluster = RedisCluster::start(3);
    let mut servers = redlease_testkit::RedisNodes::start(2);
    let mut urls = vec![cluster_url(&cluster)];
    urls.extend(servers.urls());
    let locker = Locker::builder(urls)
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(NODE_TIMEOUT)
        .build()
        .unwrap();
    assert_eq!(locker.admin().quorum(), 2);
    servers.node_mut(0).kill();
    let lease = locker
        .try_lock("mixed")
        .keep_alive()
        .await
        .expect("the cluster and one server are a quorum");
    let status = locker.admin().inspect("mixed").await.unwrap();
    let held = status
        .nodes
        .iter()
        .filter(|(_, state)| matches!(state, Ok(s) if matches!(s.key, KeyState::Held { .. })))
        .count();
    assert_eq!(held, 2, "{status:?}");
    lease.release().await.unwrap();
    locker.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_a_dead_primary_refuses_only_its_slots() {
    let mut cluster = RedisCluster::start(3);
    let url = cluster_url(&cluster);
    let locker = locker_at(&url, Duration::from_secs(5), 5 * MS);
    // Find a resource on the first primary and one elsewhere.
    let dead_port = cluster.node(0).port();
    let mut on_dead = None;
    let mut elsewhere = None;
    for i in 0..200 {
        let name = format!("r{i}");
        let slot = slot_of(&cluster, &locker.admin().key(&name)).await;
        if cluster.owner_of(slot).port() == dead_port {
            on_dead.get_or_insert(name);
        } else {
            elsewhere.get_or_insert(name);
        }
    }
    let (on_dead, elsewhere) = (on_dead.unwrap(), elsewhere.unwrap());
    // Connect while all are up, then lose a primary without replicas.
    locker
        .try_lock(&elsewhere)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    cluster.node_mut(0).kill();
    let started = Instant::now();
    match locker.try_lock(&on_dead).await {
        Err(e @ Error::NoQuorum { .. }) | Err(e @ Error::Taken { .. }) => {
            // Said in words: not the redirection redis-rs gave up on.
            assert!(!e.to_string().contains("replied MOVED"), "{e}");
        }
        other => panic!("a lock on a dead shard is refused, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "refused within its timeout, took {:?}",
        started.elapsed()
    );
    let lease = locker
        .try_lock(&elsewhere)
        .await
        .expect("other shards still lock");
    lease.release().await.unwrap();
    locker.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_shard_costs_only_its_own_leases() {
    let mut cluster = RedisCluster::start(3);
    // By default a cluster stops serving every slot (CLUSTERDOWN) once a
    // shard has been unreachable for cluster-node-timeout (2 s here); with
    // this setting the others go on, and so must their leases.
    for node in cluster.iter() {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-require-full-coverage")
            .arg("no")
            .query_async(&mut conn(node).await)
            .await
            .unwrap();
    }
    let locker = locker_at(&cluster_url(&cluster), Duration::from_secs(1), 5 * MS);
    let stalled_port = cluster.node(0).port();
    let mut leases = Vec::new();
    for i in 0..60 {
        let lease = locker
            .try_lock(format!("job:{i}"))
            .keep_alive()
            .await
            .unwrap();
        let slot = slot_of(&cluster, &locker.admin().key(lease.resource())).await;
        let on_stalled = cluster.owner_of(slot).port() == stalled_port;
        leases.push((lease, on_stalled));
    }
    assert!(leases.iter().any(|(_, s)| *s) && leases.iter().any(|(_, s)| !*s));

    cluster.node_mut(0).pause();
    // Two TTLs without the first shard: its leases cannot be renewed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Meanwhile the other shards still take new locks at once.
    let mut fresh = None;
    for i in 0..50 {
        let name = format!("fresh:{i}");
        let slot = slot_of(&cluster, &locker.admin().key(&name)).await;
        if cluster.owner_of(slot).port() != stalled_port {
            let started = Instant::now();
            fresh = Some(locker.try_lock(&name).await.expect("a healthy shard"));
            assert!(started.elapsed() < NODE_TIMEOUT, "{:?}", started.elapsed());
            break;
        }
    }
    cluster.node_mut(0).resume();
    for (lease, on_stalled) in &leases {
        assert_eq!(
            lease.is_lost(),
            *on_stalled,
            "{} (on the stalled shard: {on_stalled}): {:?}",
            lease.resource(),
            lease.lost_reason()
        );
    }
    fresh
        .expect("a resource on a healthy shard")
        .release()
        .await
        .unwrap();
    for (lease, _) in leases {
        let _ = lease.release().await;
    }
    locker.close().await;
}

/// Runs blocking testkit calls (its own Redis connections) off the async
/// workers.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_stay_renewed_while_their_slot_migrates() {
    let cluster = RedisCluster::start(3);
    let locker = locker_at(&cluster.cluster_url(), Duration::from_secs(1), 5 * MS);
    let lease = locker.try_lock("moving").keep_alive().await.unwrap();
    let key = locker.admin().key("moving");
    let slot = slot_of(&cluster, &key).await;
    let source = blocking(|| cluster.owner_of(slot).port());
    let target = blocking(|| {
        cluster
            .primaries()
            .into_iter()
            .find(|n| n.port() != source)
            .expect("another primary")
            .port()
    });

    let migration = blocking(|| cluster.begin_migration(slot, target));
    // Renewed while the slot is MIGRATING (the key still on the source)...
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!lease.is_lost(), "{:?}", lease.lost_reason());
    // ...and once the key moved (renewals follow ASK to the target, which
    // may not have the script yet)...
    let moved = blocking(|| migration.move_keys());
    assert_eq!(moved, 1, "the lock key (fencing off: no counter beside it)");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!lease.is_lost(), "{:?}", lease.lost_reason());
    let target_node = cluster.node_on(target).unwrap();
    // The slot is still importing there: ASKING first.
    let (_, left): ((), i64) = redis::pipe()
        .cmd("ASKING")
        .cmd("PTTL")
        .arg(&key)
        .query_async(&mut conn(target_node).await)
        .await
        .unwrap();
    assert!(left > 0, "renewed on the target");
    // ...and after the slot is the target's (MOVED).
    blocking(|| migration.finish());
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!lease.is_lost(), "{:?}", lease.lost_reason());
    assert!(pttl(target_node, &key).await > 0);
    lease.release().await.unwrap();
    assert_eq!(pttl(target_node, &key).await, -2, "released on the target");
    locker.close().await;
}

/// How a primary of a cluster goes away while a lease on it is held.
#[derive(Clone, Copy, Debug)]
enum Failover {
    /// `CLUSTER FAILOVER` on its replica: coordinated, nothing written is
    /// lost.
    Manual,
    /// The primary is killed; its replica takes over after
    /// cluster-node-timeout.
    Kill,
}

/// Holds a kept-alive lease through a failover of its shard; checks that
/// while the holder believes it holds the lock, the new owner has the key
/// and nobody else gets it. Whether the lease survived.
async fn cluster_failover_while_held(how: Failover, durability: Durability) -> bool {
    let mut cluster = RedisCluster::start_with_replicas(3, 1);
    let url = cluster.cluster_url();
    let locker = Locker::builder([url.as_str()])
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .ttl(Duration::from_secs(10))
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(NODE_TIMEOUT)
        .durability(durability)
        .build()
        .unwrap();
    let lease = locker.try_lock("job").keep_alive().await.unwrap();
    let key = locker.admin().key("job");
    let slot = slot_of(&cluster, &key).await;
    tokio::time::sleep(200 * MS).await;
    let old = blocking(|| cluster.owner_of(slot).port());
    let new = match how {
        Failover::Manual => blocking(|| cluster.failover(slot, Duration::from_secs(30)).port()),
        Failover::Kill => {
            cluster.node_on_mut(old).unwrap().kill();
            blocking(|| {
                cluster
                    .await_new_owner(slot, old, Duration::from_secs(30))
                    .port()
            })
        }
    };
    let rival = locker_at(&url, Duration::from_secs(10), 5 * MS);
    // Past the old TTL: only renewals on the new owner keep the key.
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if lease.is_lost() {
            break;
        }
        let left = pttl(cluster.node_on(new).unwrap(), &key).await;
        assert!(left > 0, "held here, but the new owner has {left} ms");
        assert!(
            matches!(rival.try_lock("job").await, Err(Error::Taken { .. })),
            "nobody else gets a held lock"
        );
    }
    let survived = !lease.is_lost();
    eprintln!(
        "{how:?} failover with {durability:?}: lease {}",
        if survived {
            "survived".to_string()
        } else {
            format!("lost ({:?})", lease.lost_reason())
        }
    );
    let _ = lease.release().await;
    rival.close().await;
    locker.close().await;
    survived
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_cluster_failover_keeps_plain_leases_and_ends_durable_ones() {
    // The key reaches the replica, so a plain lease lives on; a durable
    // one is bound to the old primary's lineage and is reported lost.
    assert!(cluster_failover_while_held(Failover::Manual, Durability::off()).await);
    let required = Durability::required(1, Duration::from_millis(100));
    assert!(!cluster_failover_while_held(Failover::Manual, required).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_cluster_primary_never_doubles_a_held_lease() {
    // Without durability the replica had the key (it synced long before),
    // so the lease lives on; with required(1) it is bound to the dead
    // primary's lineage (and the new primary has no replica left to
    // acknowledge), so it is reported lost.
    assert!(cluster_failover_while_held(Failover::Kill, Durability::off()).await);
    let required = Durability::required(1, Duration::from_millis(100));
    assert!(!cluster_failover_while_held(Failover::Kill, required).await);
}

/// A resource whose lock key lives on `primary`'s slots, and one whose key
/// lives elsewhere.
async fn resources_on(cluster: &RedisCluster, locker: &Locker, primary: u16) -> (String, String) {
    let (mut on, mut elsewhere) = (None, None);
    for i in 0..200 {
        let name = format!("r{i}");
        let slot = slot_of(cluster, &locker.admin().key(&name)).await;
        if blocking(|| cluster.owner_of(slot).port()) == primary {
            on.get_or_insert(name);
        } else {
            elsewhere.get_or_insert(name);
        }
    }
    (on.unwrap(), elsewhere.unwrap())
}

/// The restart quarantines of a failed acquire: (up, left) each.
fn restarted(e: &Error) -> Vec<(Duration, Duration)> {
    e.node_errors()
        .iter()
        .filter_map(|f| match f.kind() {
            redlease::NodeErrorKind::Quarantined {
                cause: redlease::Quarantine::Restarted { up },
                left,
            } => Some((*up, *left)),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_primary_restarted_empty_is_quarantined_alone() {
    // A primary without replicas or persistence, killed and restarted at
    // once: it keeps its slots (nodes.conf) but not its keys. Its shard
    // casts no "yes" until it has been up for the quarantine; the others
    // vote all along.
    let mut cluster = RedisCluster::start(3);
    let ttl = Duration::from_secs(1);
    let quarantine = Duration::from_secs(6);
    let locker = Locker::builder([cluster_url(&cluster)])
        .ttl(ttl)
        .advanced(|a| a.restart_quarantine(quarantine))
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(NODE_TIMEOUT)
        .retry(once())
        .build()
        .unwrap();
    let victim = cluster.node(0).port();
    let (on_victim, elsewhere) = resources_on(&cluster, &locker, victim).await;
    // Brand-new shards are quarantined too; wait that out, on both
    // shards: each reads its uptime in whole seconds, so one may come out
    // of it a second after the other.
    let born = Instant::now();
    for name in [&on_victim, &elsewhere] {
        loop {
            match locker.try_lock(name).await {
                Ok(lease) => {
                    lease.release().await.unwrap();
                    break;
                }
                Err(e) if born.elapsed() < quarantine + Duration::from_secs(10) => {
                    assert!(!restarted(&e).is_empty(), "{e}");
                    tokio::time::sleep(100 * MS).await;
                }
                Err(e) => panic!("no lock on a new cluster: {e}"),
            }
        }
    }
    let held = locker
        .try_lock(&elsewhere)
        .keep_alive()
        .await
        .expect("another shard");

    blocking(|| {
        cluster.node_mut(0).kill();
        cluster.node_mut(0).restart();
    });
    let back = Instant::now();
    let e = loop {
        match locker.try_lock(&on_victim).await {
            // The first requests may meet the broken connection, and the
            // node says CLUSTERDOWN until it has heard from the others.
            Err(e) if restarted(&e).is_empty() && back.elapsed() < quarantine / 2 => {
                tokio::time::sleep(20 * MS).await;
            }
            Err(e) => break e,
            Ok(_) => panic!("a shard up for {:?} voted", back.elapsed()),
        }
    };
    match restarted(&e)[..] {
        [(up, left)] => {
            assert!(up < quarantine, "up {up:?}");
            assert_eq!(up + left, quarantine);
        }
        ref other => panic!("expected the shard quarantined, got {other:?}: {e}"),
    }
    assert!(e.to_string().contains("restart quarantine"), "{e}");
    // inspect tells the same of the lock's shard, and nothing of another's.
    let status = locker.admin().inspect(&on_victim).await.unwrap();
    let shard = status.nodes[0].1.as_ref().expect("the shard answers");
    assert!(
        matches!(shard.quarantine, Some(q) if q.left <= quarantine),
        "{status:?}"
    );
    assert!(
        matches!(status.verdict(), Verdict::Quarantined { .. }),
        "{status:?}"
    );
    let other = locker.admin().inspect(&elsewhere).await.unwrap();
    assert_eq!(other.nodes[0].1.as_ref().unwrap().quarantine, None);
    // The other shards are not: the held lock is still refused as taken,
    // and a new one is granted.
    let taken = locker.try_lock(&elsewhere).await;
    assert!(matches!(taken, Err(Error::Taken { .. })), "{taken:?}");
    held.release().await.unwrap();
    locker
        .try_lock(&elsewhere)
        .await
        .expect("a shard that did not restart votes")
        .release()
        .await
        .unwrap();
    // The restarted shard votes again once up for the quarantine.
    let lease = loop {
        match locker.try_lock(&on_victim).await {
            Ok(lease) => break lease,
            Err(e) if back.elapsed() < quarantine + Duration::from_secs(10) => {
                assert!(!restarted(&e).is_empty(), "{e}");
                tokio::time::sleep(100 * MS).await;
            }
            Err(e) => panic!("still refused {:?} after the restart: {e}", back.elapsed()),
        }
    };
    // Up since before `back`, by at most the second a restart takes.
    let after = back.elapsed();
    assert!(after + Duration::from_secs(1) >= quarantine, "{after:?}");
    lease.release().await.unwrap();
    locker.close().await;
}

/// The script of the soak's `control-cluster-empty-restart`, with the
/// quarantine on: A holds a lock on a shard whose primary (no replica, no
/// persistence) is killed and restarted at once; it serves its slots again,
/// empty, while A's lease is valid, and B is refused (`Quarantined`) until
/// the quarantine has passed. The control, with it off, gets two holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_shard_restarted_empty_keeps_a_held_lock_from_a_second_client() {
    let mut cluster = RedisCluster::start(3);
    let url = cluster_url(&cluster);
    // Longer than the restarted node's rejoin (cluster-node-timeout 2 s).
    let ttl = Duration::from_secs(5);
    let build = |quarantine: Option<Duration>| {
        let mut builder = Locker::builder([url.as_str()])
            .ttl(ttl)
            .node_timeout(NODE_TIMEOUT)
            .connect_timeout(NODE_TIMEOUT)
            .retry(once());
        if let Some(quarantine) = quarantine {
            builder = builder.advanced(|a| a.restart_quarantine(quarantine));
        }
        builder.build().unwrap()
    };
    // A's own quarantine is off, so it locks on the brand-new cluster at
    // once; B has the default (the TTL plus drift).
    let (a, b) = (build(Some(Duration::ZERO)), build(None));
    let quarantine = ttl + ttl / 100 + 2 * MS;
    let lease = a.try_lock("job").await.expect("a free lock");
    let key = a.admin().key("job");
    let slot = slot_of(&cluster, &key).await;
    let victim = blocking(|| cluster.owner_of(slot).port());

    blocking(|| {
        let node = cluster.node_on_mut(victim).unwrap();
        node.kill();
        node.restart();
    });
    let back = Instant::now();
    // Until A's lease ends, B is refused; once the shard serves its slots
    // again (the first refusals are the broken connection and CLUSTERDOWN)
    // the refusal is the quarantine.
    let mut quarantined = 0;
    while lease.remaining() > 200 * MS {
        match b.try_lock("job").await {
            Ok(_) => panic!(
                "B got a held lock {:?} after its shard restarted empty",
                back.elapsed()
            ),
            Err(e) => match restarted(&e)[..] {
                [(up, left)] => {
                    assert!(up < quarantine && up + left == quarantine, "{e}");
                    quarantined += 1;
                }
                [] => assert!(quarantined == 0, "a refusal after the quarantine's: {e}"),
                _ => panic!("one shard, one quarantine: {e}"),
            },
        }
        tokio::time::sleep(100 * MS).await;
    }
    assert!(
        quarantined > 0,
        "the shard never served within A's lease: the script did not run"
    );
    assert_eq!(
        pttl(cluster.node_on(victim).unwrap(), &key).await,
        -2,
        "A's key is gone"
    );
    // B gets the lock once the shard has been up for the quarantine.
    let second = loop {
        match b.try_lock("job").await {
            Ok(second) => break second,
            Err(e) if back.elapsed() < quarantine + Duration::from_secs(10) => {
                assert_eq!(restarted(&e).len(), 1, "{e}");
                tokio::time::sleep(100 * MS).await;
            }
            Err(e) => panic!("still refused {:?} after the restart: {e}", back.elapsed()),
        }
    };
    // Up since before `back`, by at most the second a restart takes.
    let after = back.elapsed();
    assert!(after + Duration::from_secs(1) >= quarantine, "{after:?}");
    assert_eq!(lease.remaining(), Duration::ZERO, "A's lease is over");
    second.release().await.unwrap();
    a.close().await;
    b.close().await;
}

/// A shard whose primary's wall clock steps forward expires its keys
/// early, like a restart that lost them. A Locker that read that shard's
/// clock before the jump counts no "yes" from it (`ClockJumped`), while a
/// shard whose clock did not move still votes; with the guard off (the
/// control), a second client takes a lock held there. The cluster-shard
/// form of `restarts::a_server_whose_clock_jumped_casts_no_vote`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_whose_clock_jumped_casts_no_vote() {
    let cluster = RedisCluster::start_with_fake_clock(3);
    let url = cluster_url(&cluster);
    let ttl = Duration::from_secs(2);
    let jump = 2 * ttl;
    let jumped = cluster.node(0);
    for guarded in [true, false] {
        // The quarantine off, to test the guard alone. Fencing on in the
        // control, whose overlap the tokens still order.
        let build = || {
            Locker::builder([url.as_str()])
                .fencing(!guarded)
                .ttl(ttl)
                .node_timeout(NODE_TIMEOUT)
                .connect_timeout(NODE_TIMEOUT)
                .advanced(|a| {
                    a.restart_quarantine(Duration::ZERO)
                        .clock_jump_guard(guarded)
                })
                .retry(once())
                .build()
                .unwrap()
        };
        let (holder, rival) = (build(), build());
        let (on_jumped, elsewhere) = resources_on(&cluster, &rival, jumped.port()).await;
        // The rival has read both shards' clocks before the jump.
        for name in [&on_jumped, &elsewhere] {
            rival.try_lock(name).await.unwrap().release().await.unwrap();
        }
        let lease = holder.try_lock(&on_jumped).await.expect("a free lock");

        jumped.jump_clock(jump);
        // The fault under test: the jump expired the holder's key.
        wait_until_gone(jumped, &holder.admin().key(&on_jumped), ttl / 4).await;
        let second = rival.try_lock(&on_jumped).await;
        assert!(
            lease.remaining() > Duration::ZERO,
            "the lease is still valid"
        );
        match (guarded, second) {
            (true, Err(e)) => {
                let jumps: Vec<_> = e
                    .node_errors()
                    .iter()
                    .filter_map(|f| match f.kind() {
                        redlease::NodeErrorKind::Quarantined {
                            cause: redlease::Quarantine::ClockJumped { ahead },
                            left,
                        } => Some((*ahead, *left)),
                        _ => None,
                    })
                    .collect();
                match jumps[..] {
                    [(ahead, left)] => {
                        assert!(ahead > jump - Duration::from_secs(1), "{ahead:?}");
                        assert!(ahead <= jump, "{ahead:?}");
                        assert!(left > ttl && left <= ttl + ttl / 50, "{left:?}");
                    }
                    _ => panic!("expected the shard's clock jump, got {e}"),
                }
                assert!(e.to_string().contains("clock jumped"), "{e}");
                // The shard whose clock did not move votes on.
                rival
                    .try_lock(&elsewhere)
                    .await
                    .expect("a shard whose clock did not jump")
                    .release()
                    .await
                    .unwrap();
            }
            (false, Ok(second)) => {
                // The overlap the guard prevents.
                assert!(token(&second) > token(&lease));
                let _ = second.release().await;
            }
            (guarded, other) => panic!("guard {guarded}: {other:?}"),
        }
        let _ = lease.release().await;
        holder.close().await;
        rival.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_cluster_under_two_names_is_refused() {
    let cluster = RedisCluster::start(3);
    let by_ip = cluster_url(&cluster);
    let by_name = by_ip.replace("127.0.0.1", "localhost");
    assert_ne!(by_ip, by_name);
    let build = || {
        Locker::builder([by_ip.as_str(), by_name.as_str()])
            .advanced(|a| a.restart_quarantine(Duration::ZERO))
            .node_timeout(NODE_TIMEOUT)
            .connect_timeout(NODE_TIMEOUT)
            .build()
            .unwrap()
    };
    let locker = build();
    match locker.admin().check_servers().await {
        Err(Error::SameServer { node, same_as, .. }) => {
            assert_eq!((node.index(), same_as.index()), (1, 0));
        }
        other => panic!("expected SameServer, got {other:?}"),
    }
    match locker.try_lock("job").await {
        Err(e @ Error::SameServer { .. }) => assert!(!e.is_retryable()),
        other => panic!("expected SameServer, got {other:?}"),
    }
    // A Locker that meets the pair through its first lock refuses too.
    let fresh = build();
    for _ in 0..3 {
        let refused = fresh.try_lock("job").await;
        assert!(
            matches!(refused, Err(Error::SameServer { .. })),
            "{refused:?}"
        );
    }
    locker.close().await;
    fresh.close().await;
}
