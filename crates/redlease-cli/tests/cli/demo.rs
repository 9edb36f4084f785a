//! `redlease demo` in its short form, and without redis-server.

use std::time::Duration;

use crate::support::{redlease, run};

/// Whether a process titled `redis-server 127.0.0.1:PORT` (or the server
/// program REDLEASE_SERVER names, such as valkey-server) still exists.
fn redis_server_on(port: &str) -> bool {
    let program = redlease_testkit::server_program();
    let name = program.rsplit('/').next().unwrap_or(&program);
    let title = format!("{name} 127.0.0.1:{port}");
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(Result::ok)
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .map(|cmdline| String::from_utf8_lossy(&cmdline).replace('\0', " "))
        .any(|cmdline| cmdline.contains(&title))
}

#[test]
fn demo_runs_to_completion_and_cleans_up_its_servers() {
    let out = run(
        redlease().args(["demo", "--duration", "3s", "--workers", "4"]),
        Duration::from_secs(40),
    );
    out.expect(0);
    let ports: Vec<&str> = out
        .stdout
        .lines()
        .find_map(|line| line.split_once("ports "))
        .map(|(_, ports)| ports.trim_end_matches('.').split(", ").collect())
        .expect("the demo names its ports");
    assert_eq!(ports.len(), 5, "{out:#?}");
    for port in &ports {
        assert!(
            !redis_server_on(port),
            "redis-server on {port} outlived the demo"
        );
    }
    for expected in [
        "killed node 3",
        "critical sections",
        "lost updates          0",
        "overlapping holders   0",
        "handoff latency       p50",
        "node failures survived 2 of 5 nodes killed",
    ] {
        assert!(
            out.stdout.contains(expected),
            "missing {expected:?}: {out:#?}"
        );
    }
    // Not a TTY: one progress line per second, no carriage returns.
    assert!(!out.stdout.contains('\r'));
    assert!(out.stdout.contains("nodes up 3/5"), "{out:#?}");
}

#[test]
fn demo_without_redis_server_says_how_to_install_it() {
    let empty = tempfile::tempdir().unwrap();
    let out = run(
        redlease()
            .arg("demo")
            .env("PATH", empty.path())
            .env_remove("REDLEASE_SERVER"),
        Duration::from_secs(10),
    );
    out.expect(69);
    assert!(out
        .one_line_error()
        .contains("apt-get install -y redis-server"));
}
