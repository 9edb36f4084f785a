//! `run` against servers that may have forgotten locks: one server given
//! twice is refused before anything is locked, and a brand-new (or
//! restarted) server is waited for until its restart quarantine is over.

use std::time::{Duration, Instant};

use redlease_testkit::RedisNodes;

use crate::support::{has_key, lock_key, redlease, run};

#[test]
fn one_server_given_twice_is_refused_before_anything_runs() {
    let nodes = RedisNodes::start(2);
    let port = nodes.node(0).port();
    let list = format!(
        "redis://127.0.0.1:{port},redis://localhost:{port},{}",
        nodes.urls()[1]
    );
    let out = run(
        redlease().args(["run", "--key", "dup", "--nodes", &list, "--", "true"]),
        Duration::from_secs(20),
    );
    out.expect(2);
    let error = out.one_line_error();
    assert!(error.contains("same Redis server"), "{error}");
    assert!(error.contains("node 1 (localhost:"), "{error}");
    assert!(
        !has_key(nodes.node(0), &lock_key("dup")),
        "nothing was locked"
    );
}

#[test]
fn a_brand_new_server_is_waited_for_until_its_quarantine_is_over() {
    let nodes = RedisNodes::start(1);
    let started = Instant::now();
    let mut cmd = redlease();
    cmd.env_remove("REDLEASE_RESTART_QUARANTINE").args([
        "run",
        "--key",
        "fresh",
        "--ttl",
        "2s",
        "--nodes",
        &nodes.urls()[0],
        "--",
        "true",
    ]);
    let out = run(&mut cmd, Duration::from_secs(20));
    out.expect(0);
    // Quarantined for the TTL plus drift after the server started.
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(2_022), "ran after {took:?}");
}

#[test]
fn doctor_shows_a_brand_new_server_in_its_quarantine() {
    let nodes = RedisNodes::start(1);
    let mut cmd = redlease();
    cmd.env_remove("REDLEASE_RESTART_QUARANTINE").args([
        "doctor",
        "--ttl",
        "30s",
        "--nodes",
        &nodes.urls()[0],
    ]);
    let out = run(&mut cmd, Duration::from_secs(20));
    let line = crate::doctor::row(&out, "0", "restart quarantine");
    assert!(
        line.starts_with("WARN") && line.contains("casts no vote"),
        "{line}"
    );
}
