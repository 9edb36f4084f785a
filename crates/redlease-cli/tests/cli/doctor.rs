//! `redlease doctor`: flags what breaks locks, passes what does not.

use std::time::Duration;

use redlease_testkit::{NodeConfig, RedisNode, RedisNodes};

use crate::support::{redlease, run, server_kind_and_version, Finished};

const LIMIT: Duration = Duration::from_secs(30);

pub fn doctor(urls: &[String]) -> Finished {
    run(
        redlease().args(["doctor", "--nodes", &urls.join(","), "--timeout", "500ms"]),
        LIMIT,
    )
}

/// The table row for `check` on `node` ("0", "all", ...).
pub fn row<'a>(out: &'a Finished, node: &str, check: &str) -> &'a str {
    // Columns are apart by two spaces or more; words in a cell by one.
    let cell = format!("  {check}  ");
    out.stdout
        .lines()
        .find(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            cells.len() > 2 && cells[1] == node && line.contains(&cell)
        })
        .unwrap_or_else(|| panic!("no {check} row for node {node}: {out:#?}"))
}

#[test]
fn doctor_flags_an_evicting_node_and_a_server_listed_twice() {
    let plain = RedisNode::start();
    let lru = RedisNode::start_with(NodeConfig::new().arg("maxmemory-policy", "allkeys-lru"));
    // The same server under another name: the library cannot tell, the
    // server's run_id can.
    let alias = format!("redis://localhost:{}", plain.port());
    let out = doctor(&[plain.url(), lru.url(), alias]);
    out.expect(1);

    let eviction = row(&out, "1", "maxmemory-policy");
    assert!(
        eviction.starts_with("FAIL") && eviction.contains("allkeys-lru"),
        "{eviction}"
    );
    assert!(out
        .stdout
        .contains("fix: CONFIG SET maxmemory-policy noeviction"));
    assert!(row(&out, "0", "maxmemory-policy").starts_with("OK"));

    let twice = row(&out, "all", "distinct servers");
    assert!(
        twice.starts_with("FAIL") && twice.contains("node 0 = node 2"),
        "{twice}"
    );
    assert!(out.stdout.contains("FAIL, "), "a summary line: {out:#?}");
}

#[test]
fn doctor_passes_durable_independent_nodes() {
    let nodes = RedisNodes::start_with(
        3,
        NodeConfig::new()
            .arg("appendonly", "yes")
            .arg("appendfsync", "always"),
    );
    let out = doctor(&nodes.urls());
    out.expect(0);
    assert!(out.stdout.contains("0 FAIL, 0 WARN"), "{out:#?}");
    assert!(row(&out, "2", "persistence").starts_with("OK"));
    assert!(row(&out, "all", "clock skew").starts_with("OK"));
}

#[test]
fn doctor_reports_down_and_paused_nodes() {
    let mut nodes = RedisNodes::start(4);
    nodes.node_mut(1).kill();
    nodes.node_mut(2).pause();
    let out = doctor(&nodes.urls());
    nodes.node_mut(2).resume();
    out.expect(1);
    assert!(row(&out, "1", "reachable").starts_with("FAIL"));
    let paused = row(&out, "2", "reachable");
    assert!(
        paused.starts_with("FAIL") && paused.contains("no reply"),
        "{paused}"
    );
    let count = row(&out, "all", "node count");
    assert!(
        count.starts_with("FAIL") && count.contains("2 of 4 reachable"),
        "{count}"
    );
    // Without persistence, a WARN names the delayed-restart rule (the
    // tests run with the restart quarantine off), and one that the
    // quarantine is off.
    let persistence = row(&out, "0", "persistence");
    assert!(persistence.starts_with("WARN"), "{persistence}");
    assert!(out.stdout.contains("longer than your largest TTL"));
    let quarantine = row(&out, "0", "restart quarantine");
    assert!(
        quarantine.starts_with("WARN") && quarantine.contains("off"),
        "{quarantine}"
    );
}

#[test]
fn doctor_names_the_servers_kind_and_version() {
    let node = RedisNode::start();
    let out = doctor(&[node.url()]);
    // Whatever the testkit runs (REDLEASE_SERVER: redis-server by default,
    // or valkey-server), as its --version says.
    let (kind, version) = server_kind_and_version();
    let server = row(&out, "0", "server");
    assert!(
        server.contains(&format!("  {kind} {version}")) && server.contains("standalone"),
        "{server}"
    );
    let major: u32 = version.split('.').next().unwrap().parse().unwrap();
    if kind == "redis" && major < 6 {
        assert!(
            server.starts_with("WARN") && server.contains("older than Redis 6.0"),
            "{server}"
        );
    } else {
        assert!(server.starts_with("OK"), "{server}");
    }
    if kind != "redis" {
        // Valkey keeps the Redis version it is compatible with in INFO.
        assert!(server.contains(" compatible)"), "{server}");
    }
}
