//! Redis Sentinel from the testkit: the sentinels name the primary, and
//! after it is killed they promote the replica.

use std::time::Duration;

use redlease_testkit::sentinel::SentinelSet;

#[test]
fn sentinels_fail_a_killed_primary_over_to_its_replica() {
    let mut set = SentinelSet::start(1, 3);
    assert_eq!(set.sentinel_urls().len(), 3);
    let primary = set.primary_port();
    assert_eq!(primary, set.node(0).port());

    set.node_mut(0).kill();
    let promoted = set.await_failover(primary, Duration::from_secs(30));
    assert_eq!(
        promoted,
        set.node(1).port(),
        "the replica is the new primary"
    );
    let mut con = set.node(1).client().get_connection().unwrap();
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut con).unwrap();
    assert_eq!(
        role.first(),
        Some(&redis::Value::BulkString(b"master".to_vec())),
        "{role:?}"
    );
}

/// Sentinels and servers that serve TLS only: the sentinels find the
/// primary and its replica over TLS and name it to a TLS client.
#[test]
fn a_tls_sentinel_set_names_its_primary() {
    use redlease_testkit::{tls::TestPki, ClientAuth};

    let pki = TestPki::generate();
    let set = SentinelSet::start_tls(1, 3, &pki, ClientAuth::Required);
    assert!(set
        .sentinel_urls()
        .iter()
        .all(|u| u.starts_with("rediss://")));
    assert!(set.node(0).url().starts_with("rediss://"));
    assert_eq!(set.primary_port(), set.node(0).port());
    let mut con = set.node(1).client().get_connection().unwrap();
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut con)
        .unwrap();
    assert!(info.contains("role:slave"), "{info}");
}
