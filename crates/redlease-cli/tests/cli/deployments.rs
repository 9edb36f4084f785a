//! A Redis Cluster and a Sentinel-managed primary as nodes:
//! `redis+cluster://` and `redis+sentinel://` URLs for `run`, `status`
//! and `doctor`.

use std::thread;
use std::time::{Duration, Instant};

use redlease_testkit::cluster::RedisCluster;
use redlease_testkit::sentinel::{SentinelSet, PRIMARY_NAME};

use crate::acl::{add_cluster_user, PASSWORD, USER};
use crate::doctor::row;
use crate::support::{redlease, run, Finished};

const LIMIT: Duration = Duration::from_secs(30);

/// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,...` for the testkit's seeds.
fn cluster_url(cluster: &RedisCluster) -> String {
    let hosts: Vec<String> = cluster
        .urls()
        .iter()
        .map(|url| url.trim_start_matches("redis://").to_string())
        .collect();
    format!("redis+cluster://{}", hosts.join(","))
}

/// The line of `out`'s table whose NODE cell starts with `node` and whose
/// CHECK is `check`.
fn line<'a>(out: &'a Finished, node: &str, check: &str) -> Option<&'a str> {
    out.stdout.lines().find(|line| {
        line.split_once("  ")
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(node))
            && line.contains(&format!("  {check}  "))
    })
}

/// `redis+sentinel://127.0.0.1:S1,.../mymaster`.
fn sentinel_url(set: &SentinelSet) -> String {
    let hosts: Vec<String> = set
        .sentinel_urls()
        .iter()
        .map(|url| url.trim_start_matches("redis://").to_string())
        .collect();
    format!("redis+sentinel://{}/{PRIMARY_NAME}", hosts.join(","))
}

fn doctor(nodes: &str) -> Finished {
    run(
        redlease().args(["doctor", "--nodes", nodes, "--timeout", "1s"]),
        LIMIT,
    )
}

/// `run --key KEY -- true` on `nodes`, then `status` says the lock is free.
fn run_then_free(nodes: &str, key: &str) {
    let ran = run(
        redlease().args([
            "run",
            "--nodes",
            nodes,
            "--key",
            key,
            "--wait",
            "10s",
            "--",
            "sh",
            "-c",
            "echo token=$REDLEASE_FENCING_TOKEN",
        ]),
        LIMIT,
    );
    ran.expect(0);
    assert!(ran.stdout.contains("token=1"), "{ran:#?}");
    // From the environment too, whose commas follow the same rule.
    let status = run(
        redlease()
            .args(["status", "--key", key])
            .env("REDLEASE_NODES", nodes),
        LIMIT,
    );
    status.expect(0);
    assert!(status.stdout.contains("FREE"), "{status:#?}");
    assert!(status.stdout.contains("on 1 node, quorum 1"), "{status:#?}");
    assert!(status.stdout.contains("fencing counter 1"), "{status:#?}");
    run(
        redlease().args(["release", "--force", "--nodes", nodes, "--key", key]),
        LIMIT,
    )
    .expect(0);
}

#[test]
fn run_and_status_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    let url = cluster_url(&cluster);
    run_then_free(&url, "cluster-job");
}

#[test]
fn run_and_status_through_sentinels() {
    let set = SentinelSet::start(1, 3);
    let url = sentinel_url(&set);
    run_then_free(&url, "sentinel-job");
}

#[test]
fn doctor_checks_a_cluster() {
    let cluster = RedisCluster::start(3);
    let url = cluster_url(&cluster);
    let out = doctor(&url);
    out.expect(0);
    let state = row(&out, "0", "cluster");
    assert!(
        state.starts_with("OK")
            && state.contains("cluster_state ok")
            && state.contains("16384 of 16384 slots assigned, 16384 covered"),
        "{state}"
    );
    let shards = row(&out, "0", "shards");
    assert!(shards.contains("3 primaries"), "{shards}");
    for node in cluster.iter() {
        assert!(shards.contains(&node.addr()), "{shards}");
    }
    let server = row(&out, "0", "server");
    assert!(
        server.starts_with("OK") && server.contains("cluster"),
        "{server}"
    );
}

/// The row of `out`'s table for `node` (see [`line`]) and `check`, with its
/// fix line if it has one.
fn row_and_fix(out: &Finished, node: &str, check: &str) -> String {
    let row = line(out, node, check).unwrap_or_else(|| panic!("no {check} row: {out:#?}"));
    let mut lines = out.stdout.lines().skip_while(|l| *l != row);
    let mut text = lines.next().unwrap_or_default().to_string();
    if let Some(fix) = lines.next().filter(|l| l.trim_start().starts_with("fix:")) {
        text.push_str(fix);
    }
    text
}

#[test]
fn doctor_judges_each_cluster_primary_by_the_restart_quarantine() {
    // The library quarantines a restarted shard (its slots' votes), so
    // doctor's persistence advice and quarantine row agree per primary.
    let cluster = RedisCluster::start(3);
    let url = cluster_url(&cluster);
    let out = run(
        redlease()
            .args(["doctor", "--nodes", &url, "--timeout", "1s"])
            .env("REDLEASE_RESTART_QUARANTINE", "1h"),
        LIMIT,
    );
    assert!(!out.stdout.contains("not applied"), "{out:#?}");
    for node in cluster.iter() {
        let primary = format!("0 primary {}", node.addr());
        let persistence = row_and_fix(&out, &primary, "persistence");
        assert!(
            persistence.contains("no AOF") && persistence.contains("keep the restart quarantine"),
            "{persistence}"
        );
        let quarantine = row_and_fix(&out, &primary, "restart quarantine");
        assert!(
            quarantine.starts_with("WARN")
                && quarantine.contains("its slots cast no vote for a lock for"),
            "{quarantine}"
        );
    }
    // With the quarantine off, both rows say so.
    let out = doctor(&url);
    for node in cluster.iter() {
        let primary = format!("0 primary {}", node.addr());
        let persistence = row_and_fix(&out, &primary, "persistence");
        assert!(
            persistence.contains("turn the restart quarantine back on"),
            "{persistence}"
        );
        let quarantine = row_and_fix(&out, &primary, "restart quarantine");
        assert!(
            quarantine.starts_with("WARN") && quarantine.contains("off:"),
            "{quarantine}"
        );
    }
}

#[test]
fn doctor_checks_a_sentinel_primary_and_warns_of_failover() {
    let set = SentinelSet::start(1, 3);
    let url = sentinel_url(&set);
    let out = doctor(&url);
    out.expect(0);
    let sentinels = row(&out, "0", "sentinels");
    let primary = format!("127.0.0.1:{}", set.primary_port());
    assert!(
        sentinels.starts_with("OK") && sentinels.contains("3 of 3 sentinels answered"),
        "{sentinels}"
    );
    assert!(sentinels.contains(&primary), "{sentinels}");
    let role = row(&out, "0", "primary");
    assert!(
        role.starts_with("OK") && role.contains(&format!("{primary} says ROLE master")),
        "{role}"
    );
    assert!(role.contains("know 1 replica"), "{role}");
    let replication = row(&out, "0", "replication");
    assert!(
        replication.starts_with("WARN")
            && replication.contains("primary with 1 replica")
            && replication.contains("a failover can lose a held lock")
            && replication.contains("see docs/deployments.md"),
        "{replication}"
    );

    // A service the sentinels do not know.
    let unknown = url.replace(PRIMARY_NAME, "nosuchservice");
    let out = doctor(&unknown);
    out.expect(1);
    let sentinels = row(&out, "0", "sentinels");
    assert!(
        sentinels.starts_with("FAIL") && sentinels.contains("none knows a primary named"),
        "{sentinels}"
    );
}

#[test]
fn doctor_fails_a_cluster_whose_slots_are_not_all_covered() {
    let mut cluster = RedisCluster::start(3);
    let url = cluster_url(&cluster);
    let gone = cluster.node(2).addr();
    cluster.node_mut(2).kill();
    // The others mark it failing after the node timeout (2 s); until then
    // only its own rows FAIL.
    let deadline = Instant::now() + Duration::from_secs(20);
    let out = loop {
        let out = doctor(&url);
        out.expect(1);
        let state = line(&out, "0 cluster", "cluster").unwrap_or_else(|| panic!("{out:#?}"));
        if state.starts_with("FAIL") {
            break out;
        }
        assert!(
            Instant::now() < deadline,
            "the cluster row never FAILed: {out:#?}"
        );
        thread::sleep(Duration::from_millis(500));
    };
    let state = line(&out, "0 cluster", "cluster").unwrap();
    assert!(state.contains("of 16384 slots assigned"), "{state}");
    assert!(!state.contains("16384 covered"), "{state}");
    let primary = line(&out, &format!("0 primary {gone}"), "reachable");
    assert!(primary.is_some_and(|l| l.starts_with("FAIL")), "{out:#?}");
    let seeds = line(&out, "0 cluster", "seeds").unwrap_or_else(|| panic!("{out:#?}"));
    assert!(
        seeds.starts_with("WARN") && seeds.contains(&gone),
        "{seeds}"
    );
}

#[test]
fn doctor_on_a_cluster_as_a_least_privilege_user_skips_what_it_may_not_run() {
    let cluster = RedisCluster::start(3);
    // the documented cluster rule, on every node.
    cluster.iter().for_each(add_cluster_user);
    let hosts: Vec<String> = cluster.iter().map(|node| node.addr()).collect();
    let url = format!("redis+cluster://{USER}:{PASSWORD}@{}", hosts.join(","));
    let out = doctor(&url);
    // What it cannot check is a WARN, not a FAIL.
    out.expect(0);
    let state = row(&out, "0", "cluster");
    assert!(
        state.starts_with("OK")
            && state.contains("may not run CLUSTER INFO")
            && state.contains("16384 of 16384 slots assigned, 16384 covered"),
        "{state}"
    );
    let shards = row(&out, "0", "shards");
    assert!(shards.contains("3 primaries (CLUSTER SLOTS)"), "{shards}");
    assert!(!out.stdout.contains(PASSWORD), "{out:#?}");
}

#[test]
fn durable_run_needs_a_replica_to_acknowledge() {
    let mut set = SentinelSet::start(1, 3);
    let url = sentinel_url(&set);
    let durable_run = |key: &str| {
        run(
            redlease().args([
                "run",
                "--nodes",
                &url,
                "--key",
                key,
                "--durable",
                "1",
                "--no-wait",
                "--",
                "true",
            ]),
            LIMIT,
        )
    };
    // The replica may still be in its first sync: bounded retries.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let ran = durable_run("durable-job");
        if ran.status.code() == Some(0) {
            break;
        }
        assert!(Instant::now() < deadline, "never acknowledged: {ran:#?}");
        thread::sleep(Duration::from_millis(200));
    }
    set.node_mut(1).pause();
    let ran = durable_run("durable-job");
    set.node_mut(1).resume();
    ran.expect(69);
    assert!(ran.stderr.contains("replica"), "{ran:#?}");
}

/// A port nothing listens on (bound, then let go).
fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = listener.local_addr().expect("its address").port();
    drop(listener);
    format!("redis://127.0.0.1:{port}")
}

#[test]
fn durable_locks_no_quorum_of_replicas_can_acknowledge_are_refused_at_once() {
    let lone = redlease_testkit::RedisNode::start();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    // Without a replica, a durable write would wait for ever: exit 2 at
    // once, naming the node and its replicas.
    let out = run(
        redlease()
            .args(["run", "--nodes", &lone.url(), "--key", "durable"])
            .args(["--durable", "1", "--", "touch"])
            .arg(&ran),
        Duration::from_secs(10),
    );
    out.expect(2);
    let line = out.one_line_error();
    assert!(
        line.starts_with(&format!(
            "redlease: --durable 1 cannot be met: node 0 (127.0.0.1:{}) has 0 connected replicas \
             (INFO replication)",
            lone.port()
        )),
        "{line}"
    );
    assert!(
        line.contains("leave it out not to wait for replicas"),
        "{line}"
    );
    assert!(line.ends_with("the command was not run"), "{line}");
    assert!(!ran.exists(), "the command ran: {out:#?}");
    let out = run(
        redlease()
            .args(["acquire", "--nodes", &lone.url(), "--key", "durable"])
            .args(["--durable", "2"]),
        Duration::from_secs(10),
    );
    out.expect(2);
    assert!(
        out.one_line_error().contains("--durable 2 cannot be met") && out.stdout.is_empty(),
        "{out:#?}"
    );
    assert!(!crate::support::has_key(&lone, "redlease:{durable}"));

    // --durable 0 names the CLI's way to want no replica.
    let out = run(
        redlease()
            .args(["run", "--nodes", &lone.url(), "--key", "durable"])
            .args(["--durable", "0", "--", "true"]),
        Duration::from_secs(10),
    );
    out.expect(2);
    let line = out.one_line_error();
    assert!(
        line.starts_with("redlease: invalid --durable: ")
            && line.contains("leave out --durable")
            && !line.contains("Durability::"),
        "{line}"
    );

    // Doctor FAILs it the same way.
    let out = run(
        redlease().args(["doctor", "--nodes", &lone.url(), "--durable", "1"]),
        LIMIT,
    );
    out.expect(1);
    let durable = row(&out, "all", "durable");
    assert!(
        durable.starts_with("FAIL") && durable.contains("--durable 1 cannot be met: node 0 ("),
        "{durable}"
    );
    let replication = row(&out, "0", "replication");
    assert!(
        replication.starts_with("FAIL") && replication.contains("--durable 1"),
        "{replication}"
    );
}

#[test]
fn durable_locks_are_refused_only_on_what_the_nodes_say() {
    let (a, b) = (
        redlease_testkit::RedisNode::start(),
        redlease_testkit::RedisNode::start(),
    );
    let down = closed_port_url();
    let durable_run = |nodes: &[String]| {
        run(
            redlease()
                .args(["run", "--nodes", &nodes.join(","), "--key", "durable"])
                .args(["--durable", "1", "--no-wait", "--", "true"]),
            LIMIT,
        )
    };
    // One node short of replicas, two that do not tell: they might have
    // them, so the lock is tried (and finds no quorum).
    let out = durable_run(&[a.url(), down.clone(), closed_port_url()]);
    out.expect(69);
    assert!(!out.stderr.contains("cannot be met"), "{out:#?}");
    // Two of three short: no quorum can ever acknowledge, whatever the
    // third would say.
    let out = durable_run(&[a.url(), b.url(), down]);
    out.expect(2);
    let line = out.one_line_error();
    assert!(
        line.contains(&format!(
            "node 0 (127.0.0.1:{}) has 0 connected replicas; node 1 (127.0.0.1:{}) has 0 \
             connected replicas",
            a.port(),
            b.port()
        )) && line.contains("a lock needs 1 on each of 2 of the 3 nodes"),
        "{line}"
    );
    // A doctor that cannot reach a node says what it knows.
    let out = run(
        redlease().args([
            "doctor",
            "--nodes",
            &[a.url(), closed_port_url(), closed_port_url()].join(","),
            "--durable",
            "--timeout",
            "500ms",
        ]),
        LIMIT,
    );
    let durable = row(&out, "all", "durable");
    assert!(
        durable.starts_with("WARN") && durable.contains("(2 did not tell)"),
        "{durable}"
    );
}
