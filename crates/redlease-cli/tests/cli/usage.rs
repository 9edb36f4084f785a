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
        &["acquire", "--help"],
        &["extend", "--help"],
        &["release", "--help"],
        &["status", "--help"],
        &["elect", "--help"],
        &["leader", "--help"],
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
    assert!(out.stdout.contains("REDLEASE_FENCING_TOKENS"), "{out:#?}");
    for command in ["acquire", "extend", "release"] {
        let out = run(redlease().args([command, "--help"]), LIMIT);
        assert!(
            out.stdout.contains("REDLEASE_HANDLE"),
            "{command}: {out:#?}"
        );
    }
    let out = run(redlease().arg("--help"), LIMIT);
    for text in ["--verbose", "-vv", "RUST_LOG"] {
        assert!(out.stdout.contains(text), "--help lacks {text}");
    }
}

/// `redlease SUBCOMMAND NODES ARGS...`: the node flags before any `--`.
fn with_nodes(args: &[&str], nodes: &[&str]) -> std::process::Command {
    let mut cmd = redlease();
    cmd.arg(args[0]).args(nodes).args(&args[1..]);
    cmd
}

#[test]
fn negative_durations_and_a_missing_dash_dash_say_what_to_write() {
    let nodes = ["--nodes", "redis://127.0.0.1:1"];
    // Clap's own tip here, `use '-- -1'`, would make `-1` run's command.
    for (args, says) in [
        (
            &["run", "--key", "k", "--ttl", "-1", "--", "true"][..],
            "--ttl -1: durations cannot be negative",
        ),
        (
            &["run", "--key", "k", "--wait", "-500ms", "--", "true"],
            "--wait -500ms: durations cannot be negative",
        ),
        (
            &["run", "--key", "k", "--ttl=-1s", "--", "true"],
            "durations cannot be negative",
        ),
        (
            &["doctor", "--ttl", "-1"],
            "--ttl -1: durations cannot be negative",
        ),
    ] {
        let out = run(&mut with_nodes(args, &nodes), LIMIT);
        out.expect(2);
        let line = out.one_line_error();
        assert!(line.contains(says), "{args:?}: {line}");
        assert!(!line.contains("'-- -1'"), "{args:?}: {line}");
    }

    let out = run(
        redlease().args([
            "run",
            "--nodes",
            "redis://127.0.0.1:1",
            "--key",
            "k",
            "echo",
            "hi",
        ]),
        LIMIT,
    );
    out.expect(2);
    let line = out.one_line_error();
    assert!(
        line.contains(
            "put the command after `--`: redlease run --nodes redis://127.0.0.1:1 --key k -- \
             echo hi"
        ),
        "{line}"
    );
}

#[test]
fn zero_durations_are_refused_where_they_mean_nothing() {
    let nodes = ["--nodes", "redis://127.0.0.1:1"];
    for args in [
        &["doctor", "--ttl", "0s"][..],
        &["doctor", "--timeout", "0s"],
        &["status", "--key", "k", "--timeout", "0s"],
        &["release", "--force", "--key", "k", "--timeout", "0ms"],
        &["run", "--key", "k", "--ttl", "0s", "--", "true"],
        &[
            "run",
            "--key",
            "k",
            "--durable",
            "1",
            "--durable-timeout",
            "0s",
            "--",
            "true",
        ],
    ] {
        let out = run(&mut with_nodes(args, &nodes), LIMIT);
        out.expect(2);
        let line = out.one_line_error();
        assert!(line.contains("is zero"), "{args:?}: {line}");
        assert!(line.contains("--help"), "{args:?}: {line}");
    }
}

#[test]
fn bad_lock_names_get_one_message_everywhere() {
    let nodes = ["--nodes", "redis://127.0.0.1:1"];
    let long = "n".repeat(100_000);
    for key in ["", long.as_str()] {
        for args in [
            &["run", "--key", key, "--", "true"][..],
            &["run", "--key", "fine", "--key", key, "--", "true"],
            &["acquire", "--key", key],
            &["status", "--key", key],
            &["release", "--force", "--key", key],
        ] {
            let out = run(&mut with_nodes(args, &nodes), LIMIT);
            out.expect(2);
            let line = out.one_line_error();
            let says = if key.is_empty() {
                "invalid --key: the lock name is empty".to_string()
            } else {
                "invalid --key: the lock name \"nnn".to_string()
            };
            assert!(line.starts_with(&format!("redlease: {says}")), "{line}");
            // The length and a prefix, not the name.
            assert!(line.len() < 400, "{}...", &line[..400]);
        }
    }
}

#[test]
fn node_url_typos_say_what_was_typed_and_what_to_write() {
    for (nodes, says) in [
        (
            "127.0.0.1:7300",
            "node 0 (127.0.0.1:7300): no scheme: write redis://127.0.0.1:7300",
        ),
        ("localhost", "write redis://localhost"),
        (
            "redis:/127.0.0.1:7300",
            "must be followed by `//`: write redis://127.0.0.1:7300",
        ),
        (
            "http://admin:hunter2@10.0.0.1:6379",
            "a Redis node is redis://10.0.0.1:6379",
        ),
        (
            "redis://admin:hunter2@h:99999",
            "the port in `h:99999` is not a port number",
        ),
    ] {
        for sub in [
            &["run", "--key", "k", "--", "true"][..],
            &["status", "--key", "k"],
            &["doctor"],
        ] {
            let out = run(&mut with_nodes(sub, &["--nodes", nodes]), LIMIT);
            out.expect(2);
            let line = out.one_line_error();
            assert!(
                line.contains("invalid --nodes: "),
                "{sub:?} {nodes}: {line}"
            );
            assert!(line.contains(says), "{sub:?} {nodes}: {line}");
            assert!(!line.contains("hunter2"), "{line}");
        }
    }
}

#[test]
fn durations_too_long_for_the_clock_are_refused_not_a_panic() {
    let nodes = ["--nodes", "redis://127.0.0.1:1"];
    let huge = "18446744073709551615s";
    for (args, says) in [
        (
            &["run", "--key", "k", "--ttl", huge, "--", "true"][..],
            "invalid --ttl: ",
        ),
        (&["acquire", "--key", "k", "--ttl", huge], "invalid --ttl: "),
        (
            &["run", "--key", "k", "--lock-delay", huge, "--", "true"][..],
            "invalid --lock-delay: ",
        ),
        (
            &["status", "--key", "k", "--timeout", huge],
            "invalid --timeout: ",
        ),
        (
            &["release", "--force", "--key", "k", "--timeout", huge],
            "invalid --timeout: ",
        ),
    ] {
        let out = run(&mut with_nodes(args, &nodes), LIMIT);
        out.expect(2);
        let line = out.one_line_error();
        assert!(
            line.starts_with(&format!("redlease: {says}")),
            "{args:?}: {line}"
        );
    }
    // Doctor takes any TTL: its advice is arithmetic, not a lock.
    let out = run(
        &mut with_nodes(&["doctor", "--ttl", huge, "--timeout", "200ms"], &nodes),
        LIMIT,
    );
    out.expect(1);
    assert!(!out.stderr.contains("internal error"), "{out:#?}");
}
