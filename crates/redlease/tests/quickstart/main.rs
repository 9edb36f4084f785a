//! The quickstart example, run as a newcomer runs it: against a Redis
//! Cluster named by one `redis+cluster://` URL in `REDLEASE_NODES`, and
//! against two standalone servers in one comma-separated list.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use redlease_testkit::cluster::RedisCluster;
use redlease_testkit::RedisNodes;

/// The example's binary, built by `cargo test` beside this test's own
/// (`target/<profile>/examples/quickstart`); built here when missing or
/// older than this test, as when only this test target was asked for.
fn quickstart() -> PathBuf {
    let profile_dir = std::env::current_exe()
        .expect("the test's path")
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>")
        .to_path_buf();
    let exe = profile_dir.join("examples").join("quickstart");
    let built = |path: &PathBuf| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let this = built(&std::env::current_exe().expect("the test's path"));
    if built(&exe).is_none_or(|example| this.is_some_and(|this| example < this)) {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-q", "-p", "redlease", "--example", "quickstart"])
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the quickstart failed");
    }
    exe
}

/// Runs the quickstart with `nodes`, bounded by 60 s.
fn run(nodes: &str) -> Output {
    let mut child = Command::new(quickstart())
        .env("REDLEASE_NODES", nodes)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the quickstart starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

fn assert_ran(out: &Output, nodes: usize) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{stdout}\n{stderr}", out.status);
    assert!(stdout.starts_with(&format!("{nodes} node(s)")), "{stdout}");
    assert!(stdout.contains("second try_lock refused"), "{stdout}");
    assert!(
        stdout.contains("4 workers x 25 critical sections, never two at once"),
        "{stdout}"
    );
}

#[test]
fn a_cluster_url_is_one_node() {
    let cluster = RedisCluster::start(3);
    let out = run(&cluster.cluster_url());
    assert_ran(&out, 1);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("cluster 127.0.0.1:"), "{stdout}");
}

#[test]
fn a_comma_before_a_scheme_starts_a_new_node() {
    let nodes = RedisNodes::start(2);
    let out = run(&nodes.urls().join(" , "));
    assert_ran(&out, 2);
}

#[test]
fn a_host_list_without_a_cluster_scheme_is_refused_with_the_rule() {
    let out = run("redis://127.0.0.1:1,127.0.0.1:2");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("redis+cluster://"), "{stderr}");
}

/// With no Redis answering, the quickstart says so at once, names each
/// node and how to start one, and exits 2 (README says so).
#[test]
fn no_redis_answering_is_said_at_once_with_exit_2() {
    // A port nothing listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let started = Instant::now();
    let out = run(&format!("redis://127.0.0.1:{port}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr.contains("no Redis node answered"), "{stderr}");
    assert!(stderr.contains(&port.to_string()), "{stderr}");
    assert!(stderr.contains("redis-server"), "{stderr}");
    // Not after the 15 s wait for the first lock.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}
