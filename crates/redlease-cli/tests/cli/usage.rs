//! Usage errors: one line on stderr, exit 2; `--help` everywhere.

use std::time::Duration;

use crate::support::{redlease, run};

const LIMIT: Duration = Duration::from_secs(10);

#[test]
fn usage_errors_are_one_line_with_exit_code_2() {
    // No node is contacted: all of these fail while parsing.
    let nodes = ["--nodes", "redis://127.0.0.1:1"];
    let cases: [(&[&str], &str); 7] = [
        (
            &["run", "--key", "k", "--ttl", "10", "--", "true"],
            "no unit",
        ),
        (
            &["run", "--key", "k", "--wait", "soon", "--", "true"],
            "not a duration",
        ),
        (
            &["run", "--key", "k", "--ttl", "2M", "--", "true"],
            "M means months",
        ),
        (
            &["run", "--key", "k", "--frobnicate", "--", "true"],
            "--frobnicate",
        ),
        (&["run", "--key", "k"], "after `--`"),
        (
            &[
                "run",
                "--key",
                "k",
                "--wait",
                "1s",
                "--no-wait",
                "--",
                "true",
            ],
            "cannot be used with",
        ),
        (&["status"], "--key"),
    ];
    for (args, says) in cases {
        let out = run(redlease().args(args).args(nodes), LIMIT);
        out.expect(2);
        let line = out.one_line_error();
        assert!(line.contains(says), "{args:?}: {line}");
        assert!(line.contains("--help"), "{args:?}: {line}");
    }
}

#[test]
fn bad_node_urls_are_usage_errors_that_hide_passwords() {
    for nodes in ["http://admin:hunter2@10.0.0.1:6379", " , "] {
        let out = run(
            redlease()
                .args(["run", "--key", "k", "--", "true"])
                .env("REDLEASE_NODES", nodes),
            LIMIT,
        );
        out.expect(2);
        assert!(!out.one_line_error().contains("hunter2"), "{out:#?}");
    }
    // The library refuses one server listed twice.
    let twice = "redis://127.0.0.1:1,redis://127.0.0.1:1";
    let out = run(
        redlease().args(["run", "--nodes", twice, "--key", "k", "--", "true"]),
        LIMIT,
    );
    out.expect(2);
    assert!(out.one_line_error().contains("fake a majority"));
}

#[test]
fn every_command_has_help_with_its_exit_codes() {
    for args in [
        &["--help"][..],
        &["run", "--help"],
        &["status", "--help"],
        &["doctor", "--help"],
        &["demo", "--help"],
    ] {
        let out = run(redlease().args(args), LIMIT);
        out.expect(0);
        assert!(out.stdout.contains("Usage: redlease"), "{args:?}: {out:#?}");
        assert!(out.stdout.contains("Exit codes"), "{args:?}: {out:#?}");
    }
    let out = run(redlease().args(["run", "--help"]), LIMIT);
    for flag in [
        "--nodes",
        "REDLEASE_NODES",
        "--key",
        "--ttl",
        "--wait",
        "--no-wait",
        "--conflict-exit-code",
        "REDLEASE_FENCING_TOKEN",
    ] {
        assert!(out.stdout.contains(flag), "run --help lacks {flag}");
    }
    let out = run(redlease().arg("--help"), LIMIT);
    for text in ["--verbose", "-vv", "RUST_LOG"] {
        assert!(out.stdout.contains(text), "--help lacks {text}");
    }
}
