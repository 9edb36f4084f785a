//! `-v`/`RUST_LOG`: log lines go to redlease's stderr only, the command's
//! own output passes through untouched.

use std::time::Duration;

use redlease_testkit::RedisNode;

use crate::support::{redlease, run};

const LIMIT: Duration = Duration::from_secs(30);

/// Writes one line to stdout and one to stderr.
const SPEAK: [&str; 3] = ["sh", "-c", "echo out; echo err >&2"];

#[test]
fn by_default_only_the_commands_output_appears() {
    let node = RedisNode::start();
    let out = run(
        redlease()
            .args(["run", "--nodes", &node.url(), "--key", "logs", "--"])
            .args(SPEAK),
        LIMIT,
    );
    out.expect(0);
    assert_eq!(out.stdout, "out\n");
    assert_eq!(out.stderr, "err\n");
}

#[test]
fn v_logs_to_stderr_and_leaves_stdout_to_the_command() {
    let node = RedisNode::start();
    // -v is global: before or after the subcommand.
    for args in [
        &["-v", "run", "--nodes", &node.url(), "--key", "logs", "--"][..],
        &["run", "-vv", "--nodes", &node.url(), "--key", "logs", "--"],
    ] {
        let out = run(redlease().args(args).args(SPEAK), LIMIT);
        out.expect(0);
        assert_eq!(out.stdout, "out\n", "{args:?}");
        assert!(out.stderr.contains("took the lock"), "{args:?}: {out:#?}");
        assert!(out.stderr.lines().any(|l| l == "err"), "{args:?}: {out:#?}");
    }
}

#[test]
fn rust_log_overrides_v() {
    let node = RedisNode::start();
    let out = run(
        redlease()
            .args(["-vvv", "run", "--nodes", &node.url(), "--key", "logs", "--"])
            .args(SPEAK)
            .env("RUST_LOG", "off"),
        LIMIT,
    );
    out.expect(0);
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("out\n", "err\n")
    );

    let out = run(
        redlease()
            .args(["run", "--nodes", &node.url(), "--key", "logs", "--"])
            .args(SPEAK)
            .env("RUST_LOG", "redlease=info"),
        LIMIT,
    );
    out.expect(0);
    assert_eq!(out.stdout, "out\n");
    assert!(out.stderr.contains("took the lock"), "{out:#?}");
}

/// docs/cli.md: `run` "says once when a node stops answering renewals and
/// once when it answers again", at the default verbosity.
#[test]
fn a_node_that_stops_answering_renewals_and_comes_back_is_told_both_ways() {
    let mut nodes = redlease_testkit::RedisNodes::start(3);
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let (log, ready, stop) = (path("stderr"), path("ready"), path("stop"));
    // Marks that it runs, then holds until `$STOP` exists (at most 30 s).
    let hold = r#"touch "$READY"; i=0; while [ ! -e "$STOP" ] && [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done"#;
    let child = redlease()
        .args([
            "run",
            "--nodes",
            &nodes.urls().join(","),
            "--key",
            "comeback",
        ])
        .args(["--ttl", "3s", "--", "sh", "-c", hold])
        .env("READY", &ready)
        .env("STOP", &stop)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start redlease");
    let said = |what: &str| {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|line| line.contains(what))
            .count()
    };
    crate::support::eventually(LIMIT, "the command to start", || ready.exists());
    // Renewals go every second; a paused node's time out.
    nodes.node_mut(2).pause();
    crate::support::eventually(LIMIT, "the failing renewals told", || {
        said("renewals to a node are failing") > 0
    });
    nodes.node_mut(2).resume();
    crate::support::eventually(LIMIT, "the working renewals told", || {
        said("renewals to the node work again") > 0
    });
    std::fs::write(&stop, "").unwrap();
    crate::support::finish(child, LIMIT).expect(0);
    let text = std::fs::read_to_string(&log).unwrap();
    let port = nodes.node(2).port().to_string();
    let failing: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("renewals to a node are failing"))
        .collect();
    assert_eq!(failing.len(), 1, "{text}");
    assert!(
        failing[0].starts_with("redlease: warning: renewals to a node are failing: node 2 (")
            && failing[0].contains(&port),
        "{text}"
    );
    let again: Vec<&str> = text.lines().filter(|l| l.contains("work again")).collect();
    assert_eq!(
        again,
        [format!(
            "redlease: renewals to the node work again: node 2 (127.0.0.1:{port})"
        )],
        "{text}"
    );
}
