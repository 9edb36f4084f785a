//! A real Redis Cluster from the testkit: every slot served, and a key
//! answered by its owner and redirected elsewhere.

use redlease_testkit::cluster::RedisCluster;

fn query<T: redis::FromRedisValue>(
    node: &redlease_testkit::RedisNode,
    cmd: &mut redis::Cmd,
) -> redis::RedisResult<T> {
    let mut con = node.client().get_connection()?;
    cmd.query(&mut con)
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
    let slot: u16 = query(
        cluster.node(0),
        redis::cmd("CLUSTER").arg("KEYSLOT").arg(key),
    )
    .unwrap();
    let owner = cluster.owner_of(slot);
    let _: () = query(owner, redis::cmd("SET").arg(key).arg("x")).unwrap();
    let other = cluster
        .iter()
        .find(|n| n.port() != owner.port())
        .expect("another primary");
    let moved = query::<()>(other, redis::cmd("SET").arg(key).arg("y")).unwrap_err();
    assert_eq!(moved.code(), Some("MOVED"), "{moved}");
}
