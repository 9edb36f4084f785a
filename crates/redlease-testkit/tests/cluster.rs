//! A real Redis Cluster from the testkit: every slot served, a key answered
//! by its owner and redirected elsewhere, replicas that take over (asked to,
//! or after a kill), and slots that move with their keys.

use std::time::Duration;

use redlease_testkit::cluster::RedisCluster;
use redlease_testkit::RedisNode;

const LIMIT: Duration = Duration::from_secs(30);

fn query<T: redis::FromRedisValue>(
    node: &RedisNode,
    cmd: &mut redis::Cmd,
) -> redis::RedisResult<T> {
    let mut con = node.client().get_connection()?;
    cmd.query(&mut con)
}

fn slot_of(cluster: &RedisCluster, key: &str) -> u16 {
    query(
        cluster.node(0),
        redis::cmd("CLUSTER").arg("KEYSLOT").arg(key),
    )
    .unwrap()
}

fn get(node: &RedisNode, key: &str) -> redis::RedisResult<Option<String>> {
    query(node, redis::cmd("GET").arg(key))
}

/// Asserts `err` is a `code` redirection (MOVED or ASK) to `to`.
fn assert_redirect(err: &redis::RedisError, code: &str, slot: u16, to: &RedisNode) {
    assert_eq!(err.code(), Some(code), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("{slot} {}", to.addr())),
        "{code} names slot {slot} and {}: {text}",
        to.addr()
    );
}

#[test]
fn three_primaries_serve_every_slot_and_redirect_the_rest() {
    let cluster = RedisCluster::start(3);
    for node in cluster.iter() {
        let info: String = query(node, redis::cmd("CLUSTER").arg("INFO")).unwrap();
        assert!(info.contains("cluster_slots_assigned:16384"), "{info}");
        assert!(info.contains("cluster_known_nodes:3"), "{info}");
    }
    // The lock key's hash tag picks the slot; its owner takes the write,
    // the others answer MOVED.
    let key = "redlease:{orders}";
    let slot = slot_of(&cluster, key);
    let owner = cluster.owner_of(slot);
    let _: () = query(owner, redis::cmd("SET").arg(key).arg("x")).unwrap();
    let other = cluster
        .iter()
        .find(|n| n.port() != owner.port())
        .expect("another primary");
    let moved = query::<()>(other, redis::cmd("SET").arg(key).arg("y")).unwrap_err();
    assert_redirect(&moved, "MOVED", slot, owner);
}

#[test]
fn replicas_join_their_primaries_and_sync() {
    let cluster = RedisCluster::start_with_replicas(3, 1);
    assert_eq!(cluster.len(), 6);
    let addrs: Vec<String> = cluster.iter().map(RedisNode::addr).collect();
    assert_eq!(
        cluster.cluster_url(),
        format!("redis+cluster://{}", addrs.join(","))
    );
    assert_eq!(cluster.urls().len(), 6);
    for node in cluster.iter() {
        let info: String = query(node, redis::cmd("CLUSTER").arg("INFO")).unwrap();
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_known_nodes:6"), "{info}");
    }
    let primaries: Vec<u16> = cluster.primaries().iter().map(|n| n.port()).collect();
    let started: Vec<u16> = (0..3).map(|i| cluster.node(i).port()).collect();
    assert_eq!(primaries, started);
    for i in 0..3 {
        let primary = cluster.node(i);
        let replica = cluster.node(3 + i);
        let replicas: Vec<u16> = cluster
            .replicas_of(primary.port())
            .iter()
            .map(|n| n.port())
            .collect();
        assert_eq!(replicas, [replica.port()]);
        let info: String = query(replica, redis::cmd("INFO").arg("replication")).unwrap();
        assert!(info.contains("master_link_status:up"), "{info}");
        assert!(
            info.contains(&format!("master_port:{}\r", primary.port())),
            "{info}"
        );
    }
    // Slots start split in order.
    assert_eq!(cluster.owner_of(0).port(), cluster.node(0).port());
    assert_eq!(cluster.owner_of(16_383).port(), cluster.node(2).port());
}

#[test]
fn failover_hands_a_slot_and_its_keys_to_the_replica_and_back() {
    let cluster = RedisCluster::start_with_replicas(3, 1);
    let key = "redlease:{failover}";
    let slot = slot_of(&cluster, key);
    let old = cluster.owner_of(slot);
    let replica = cluster.replicas_of(old.port())[0];
    let _: () = query(old, redis::cmd("SET").arg(key).arg("kept")).unwrap();
    let acked: i64 = query(old, redis::cmd("WAIT").arg(1).arg(5000)).unwrap();
    assert_eq!(acked, 1, "the replica has the write");

    let new = cluster.failover(slot, LIMIT);
    assert_eq!(new.port(), replica.port(), "the replica took over");
    assert_eq!(cluster.owner_of(slot).port(), new.port());
    assert_eq!(get(new, key).unwrap().as_deref(), Some("kept"));
    let replicas: Vec<u16> = cluster
        .replicas_of(new.port())
        .iter()
        .map(|n| n.port())
        .collect();
    assert_eq!(replicas, [old.port()], "the old primary follows it");
    // A replica (without READONLY) sends clients to the primary.
    let moved = get(old, key).unwrap_err();
    assert_redirect(&moved, "MOVED", slot, new);

    // Straight back: waits for the old primary's resync first.
    let back = cluster.failover(slot, LIMIT);
    assert_eq!(back.port(), old.port());
    assert_eq!(get(back, key).unwrap().as_deref(), Some("kept"));
}

#[test]
fn a_killed_owner_is_replaced_by_its_replica() {
    let mut cluster = RedisCluster::start_with_replicas(3, 1);
    let key = "redlease:{killed}";
    let slot = slot_of(&cluster, key);
    let old = cluster.owner_of(slot).port();
    let replica = cluster.replicas_of(old)[0].port();
    let owner = cluster.node_on(old).unwrap();
    let _: () = query(owner, redis::cmd("SET").arg(key).arg("kept")).unwrap();
    let acked: i64 = query(owner, redis::cmd("WAIT").arg(1).arg(5000)).unwrap();
    assert_eq!(acked, 1, "the replica has the write");

    cluster.node_on_mut(old).unwrap().kill();
    let new = cluster.await_new_owner(slot, old, LIMIT);
    assert_eq!(new.port(), replica);
    assert_eq!(cluster.owner_of(slot).port(), replica);
    assert_eq!(get(new, key).unwrap().as_deref(), Some("kept"));
}

#[test]
fn migrate_slot_moves_its_keys_and_the_old_owner_redirects() {
    let cluster = RedisCluster::start_with_replicas(3, 1);
    let key = "redlease:{moving}";
    let slot = slot_of(&cluster, key);
    let source = cluster.owner_of(slot);
    let target = cluster
        .primaries()
        .into_iter()
        .find(|n| n.port() != source.port())
        .expect("another primary");
    let _: () = query(
        source,
        redis::cmd("SET").arg(key).arg("v").arg("PX").arg(60_000),
    )
    .unwrap();
    // More than one MIGRATE batch, all in the same slot.
    for i in 0..250 {
        let other = format!("redlease:{{moving}}:{i}");
        let _: () = query(source, redis::cmd("SET").arg(other).arg(i)).unwrap();
    }

    cluster.migrate_slot(slot, target.port());
    assert_eq!(cluster.owner_of(slot).port(), target.port());
    let count = |node: &RedisNode| -> i64 {
        query(node, redis::cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(slot)).unwrap()
    };
    assert_eq!(count(target), 251);
    assert_eq!(count(source), 0);
    assert_eq!(get(target, key).unwrap().as_deref(), Some("v"));
    let ttl: i64 = query(target, redis::cmd("PTTL").arg(key)).unwrap();
    assert!(0 < ttl && ttl <= 60_000, "the TTL came along: {ttl}");
    let moved = get(source, key).unwrap_err();
    assert_redirect(&moved, "MOVED", slot, target);
}

#[test]
fn mid_migration_the_source_sends_missing_keys_to_the_target() {
    let cluster = RedisCluster::start(3);
    let present = "redlease:{flight}:present";
    let missing = "redlease:{flight}:missing";
    let slot = slot_of(&cluster, present);
    let source = cluster.owner_of(slot);
    let target = cluster
        .primaries()
        .into_iter()
        .find(|n| n.port() != source.port())
        .expect("another primary");
    let _: () = query(source, redis::cmd("SET").arg(present).arg("here")).unwrap();

    let migration = cluster.begin_migration(slot, target.port());
    assert_eq!(migration.slot(), slot);
    assert_eq!(migration.source().port(), source.port());
    assert_eq!(migration.target().port(), target.port());
    // The source still serves what it has, and sends the rest ASK.
    assert_eq!(get(source, present).unwrap().as_deref(), Some("here"));
    let ask = get(source, missing).unwrap_err();
    assert_redirect(&ask, "ASK", slot, target);
    // The target takes the key only after ASKING; it does not own the slot.
    let moved = query::<()>(target, redis::cmd("SET").arg(missing).arg("new")).unwrap_err();
    assert_redirect(&moved, "MOVED", slot, source);
    let mut con = target.client().get_connection().unwrap();
    let _: () = redis::cmd("ASKING").query(&mut con).unwrap();
    let _: () = redis::cmd("SET")
        .arg(missing)
        .arg("new")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        cluster.owner_of(slot).port(),
        source.port(),
        "still in flight"
    );

    assert_eq!(migration.move_keys(), 1);
    let ask = get(source, present).unwrap_err();
    assert_redirect(&ask, "ASK", slot, target);
    migration.finish();
    assert_eq!(cluster.owner_of(slot).port(), target.port());
    assert_eq!(get(target, present).unwrap().as_deref(), Some("here"));
    assert_eq!(get(target, missing).unwrap().as_deref(), Some("new"));
}

/// A cluster that serves TLS only, with client certificates required:
/// it forms (bus and replication over TLS), answers a client that trusts
/// the test CA and presents its certificate, and offers no plain port.
#[test]
fn a_tls_cluster_forms_and_serves_tls_only() {
    use redlease_testkit::{tls::TestPki, ClientAuth};

    let pki = TestPki::generate();
    let cluster = RedisCluster::start_tls(3, 1, &pki, ClientAuth::Required);
    assert_eq!(cluster.len(), 6);
    let url = cluster.cluster_url();
    assert!(url.starts_with("rediss+cluster://127.0.0.1:"), "{url}");
    assert!(cluster.urls().iter().all(|u| u.starts_with("rediss://")));
    for node in cluster.iter() {
        let info: String = query(node, redis::cmd("CLUSTER").arg("INFO")).unwrap();
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_known_nodes:6"), "{info}");
    }
    assert_eq!(cluster.replicas_of(cluster.node(0).port()).len(), 1);
    // A plain-text client gets nothing from a TLS port.
    let plain = redis::Client::open(format!("redis://{}", cluster.node(0).addr())).unwrap();
    let refused = plain
        .get_connection_with_timeout(Duration::from_secs(2))
        .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con));
    assert!(refused.is_err(), "{refused:?}");
    let key = "redlease:{tls}";
    let owner = cluster.owner_of(slot_of(&cluster, key));
    let _: () = query(owner, redis::cmd("SET").arg(key).arg("x")).unwrap();
    assert_eq!(get(owner, key).unwrap().as_deref(), Some("x"));
}
