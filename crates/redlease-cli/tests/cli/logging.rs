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
