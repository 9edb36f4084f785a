//! `redlease elect` and `redlease leader`: a command run while leading an
//! election, its term and value, the next campaigner taking over when it
//! resigns, and who leads, once, as JSON and watched.

use std::path::Path;
use std::time::Duration;

use redlease_testkit::{RedisNode, RedisNodes};
use rustix::process::Signal;
use serde_json::Value;

use crate::support::{eventually, finish, redlease, run, signal, start, Finished, Lines};

const LIMIT: Duration = Duration::from_secs(30);

/// `redlease elect` of `key` over `urls` with `value`; the caller adds
/// its flags and command.
fn elect(urls: &[String], key: &str, value: &str) -> std::process::Command {
    let mut cmd = redlease();
    cmd.args([
        "elect",
        "--nodes",
        &urls.join(","),
        "--key",
        key,
        "--value",
        value,
    ]);
    cmd
}

/// `redlease leader` of `key` over `urls`, with `extra` flags.
fn leader(urls: &[String], key: &str, extra: &[&str]) -> Finished {
    run(
        redlease()
            .args(["leader", "--nodes", &urls.join(","), "--key", key])
            .args(extra),
        LIMIT,
    )
}

/// `redlease status --json` of `key`: its one line.
fn status_json(urls: &[String], key: &str) -> String {
    let out = run(
        redlease().args(["status", "--nodes", &urls.join(","), "--key", key, "--json"]),
        LIMIT,
    );
    out.expect(0);
    out.stdout
}

/// A command that records its election environment in the file $OUT,
/// then waits (at most 30 s) for the file $GO to exist.
fn leading() -> [&'static str; 4] {
    let script = r#"echo "$REDLEASE_TERM $REDLEASE_LEADER_VALUE $REDLEASE_FENCING_TOKEN $REDLEASE_KEY" > "$OUT.tmp" && mv "$OUT.tmp" "$OUT"; i=0; while [ ! -e "$GO" ] && [ $i -lt 1500 ]; do sleep 0.02; i=$((i + 1)); done"#;
    ["--", "sh", "-c", script]
}

/// What [`leading`] recorded: the term, the value, the fencing token and
/// the key.
fn recorded(out: &Path) -> (u64, String, u64, String) {
    eventually(LIMIT, "the leader's command to start", || out.exists());
    let text = std::fs::read_to_string(out).unwrap();
    let words: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(words.len(), 4, "{text:?}");
    (
        words[0].parse().expect("a numeric term"),
        words[1].to_string(),
        words[2].parse().expect("a numeric fencing token"),
        words[3].to_string(),
    )
}

#[test]
fn elect_runs_the_command_as_leader_and_resigns_for_the_next() {
    let mut nodes = RedisNodes::start(3);
    let urls = nodes.urls();
    let dir = tempfile::tempdir().unwrap();
    let (out_a, go_a) = (dir.path().join("a"), dir.path().join("go-a"));
    let (out_b, go_b) = (dir.path().join("b"), dir.path().join("go-b"));
    let with_paths = |cmd: &mut std::process::Command, out: &Path, go: &Path| {
        cmd.env("OUT", out).env("GO", go);
    };

    let mut first = elect(&urls, "scheduler", "10.0.0.5:8080");
    first.args(leading());
    with_paths(&mut first, &out_a, &go_a);
    let first = start(&mut first);
    let (term_a, value_a, token_a, key_a) = recorded(&out_a);
    assert_eq!(value_a, "10.0.0.5:8080");
    assert_eq!(term_a, token_a, "the term is the lead's fencing token");
    assert_eq!(key_a, "scheduler");

    // Who leads: the value, the term, and who holds it.
    let now = leader(&urls, "scheduler", &[]);
    now.expect(0);
    assert!(
        now.stdout
            .starts_with(&format!("10.0.0.5:8080 (term {term_a}, held by ")),
        "{now:#?}"
    );
    let json = leader(&urls, "scheduler", &["--json"]);
    json.expect(0);
    let object: Value = serde_json::from_str(json.stdout.trim()).expect("one JSON object");
    assert_eq!(object["key"], "scheduler");
    assert_eq!(object["leader"]["value"], "10.0.0.5:8080");
    assert_eq!(object["leader"]["term"], term_a);
    assert_eq!(object["leader"]["revision"], 1);
    assert!(
        object["leader"]["owner"]
            .as_str()
            .is_some_and(|o| o.contains("(sh -c")),
        "the owner names the command: {object}"
    );
    assert!(object["leader"]["since_ms"].as_u64().is_some(), "{object}");

    // A second campaigner waits in line, then leads once the first resigns.
    let mut second = elect(&urls, "scheduler", "10.0.0.6:8080");
    second.args(["--wait", "30s"]).args(leading());
    with_paths(&mut second, &out_b, &go_b);
    let second = start(&mut second);
    eventually(LIMIT, "the second campaigner to wait in line", || {
        status_json(&urls, "scheduler").contains("\"queued\":1")
            || status_json(&urls, "scheduler").contains("\"waiting\":1")
    });
    assert!(!out_b.exists(), "the second ran while the first led");
    std::fs::write(&go_a, "").unwrap();
    finish(first, LIMIT).expect(0);
    let (term_b, value_b, _, _) = recorded(&out_b);
    assert_eq!(value_b, "10.0.0.6:8080");
    assert!(
        term_b > term_a,
        "a new leader's term is higher: {term_b} <= {term_a}"
    );
    std::fs::write(&go_b, "").unwrap();
    finish(second, LIMIT).expect(0);

    // Both resigned: nobody leads.
    let none = leader(&urls, "scheduler", &[]);
    none.expect(1);
    assert_eq!(none.stdout, "no leader\n", "{none:#?}");
    let json = leader(&urls, "scheduler", &["--json"]);
    json.expect(1);
    let object: Value = serde_json::from_str(json.stdout.trim()).expect("one JSON object");
    assert_eq!(object["leader"], Value::Null, "{object}");

    // With 2 of 3 nodes gone, nobody can tell.
    nodes.node_mut(1).kill();
    nodes.node_mut(2).kill();
    let unknown = leader(&urls, "scheduler", &["--timeout", "500ms"]);
    unknown.expect(69);
    assert_eq!(unknown.stdout, "", "{unknown:#?}");
    assert!(
        unknown
            .one_line_error()
            .contains("only 1 of 3 nodes answered"),
        "{unknown:#?}"
    );
}

#[test]
fn elect_exits_with_the_commands_status_or_the_conflict_code() {
    let node = RedisNode::start();
    let urls = [node.url()];
    run(
        elect(&urls, "job", "me").args(["--", "sh", "-c", "exit 7"]),
        LIMIT,
    )
    .expect(7);
    let dir = tempfile::tempdir().unwrap();
    let (out, go) = (dir.path().join("out"), dir.path().join("go"));
    let mut holder = elect(&urls, "job", "holder");
    holder.args(leading()).env("OUT", &out).env("GO", &go);
    let holder = start(&mut holder);
    recorded(&out);
    let busy = run(
        elect(&urls, "job", "other").args(["--no-wait", "--", "touch", "never"]),
        LIMIT,
    );
    busy.expect(1);
    assert!(
        busy.one_line_error()
            .contains("the lead of \"job\" is held by "),
        "{busy:#?}"
    );
    // A signal ends a wait in line: the command never runs.
    let never = dir.path().join("never");
    let waiting =
        start(elect(&urls, "job", "waiter").args(["--", "touch", &never.display().to_string()]));
    eventually(LIMIT, "the waiter to stand in line", || {
        let status = run(
            redlease().args(["status", "--nodes", &urls.join(","), "--key", "job"]),
            LIMIT,
        );
        status.stdout.contains("; 1 process waiting;")
    });
    signal(&waiting, Signal::TERM);
    finish(waiting, LIMIT).expect(128 + 15);
    assert!(!never.exists(), "the waiter ran its command");
    std::fs::write(&go, "").unwrap();
    finish(holder, LIMIT).expect(0);
}

#[test]
fn elect_refuses_what_a_lead_cannot_be() {
    for extra in [
        &["--shared"][..],
        &["--permits", "2"],
        &["--read-key", "other"],
        &["--key", "second"],
    ] {
        let out = run(
            redlease()
                .args(["elect", "--nodes", "redis://127.0.0.1:1", "--key", "k"])
                .args(["--value", "v"])
                .args(extra)
                .args(["--", "true"]),
            LIMIT,
        );
        out.expect(2);
        let line = out.one_line_error();
        assert!(line.contains("elect takes no "), "{extra:?}: {line}");
    }
    let out = run(
        redlease().args(["elect", "--key", "k", "--", "true"]),
        LIMIT,
    );
    out.expect(2);
    assert!(out.one_line_error().contains("--value"), "{out:#?}");
}

#[test]
fn leader_watch_prints_a_line_per_change_until_sigterm() {
    let node = RedisNode::start();
    let urls = [node.url()];
    let mut watcher = start(redlease().args([
        "leader",
        "--nodes",
        &urls.join(","),
        "--key",
        "scheduler",
        "--watch",
    ]));
    let lines = Lines::of(&mut watcher);
    assert_eq!(lines.next(LIMIT), "no leader");
    let dir = tempfile::tempdir().unwrap();
    let (out, go) = (dir.path().join("out"), dir.path().join("go"));
    let mut first = elect(&urls, "scheduler", "one");
    first.args(leading()).env("OUT", &out).env("GO", &go);
    let first = start(&mut first);
    let (term, ..) = recorded(&out);
    let led = lines.until(LIMIT, "the new leader", |l| l != "no leader");
    assert!(
        led.starts_with(&format!("one (term {term}, held by ")),
        "{led}"
    );
    std::fs::write(&go, "").unwrap();
    finish(first, LIMIT).expect(0);
    assert_eq!(lines.next(LIMIT), "no leader");
    // A second leader, as JSON from another watcher.
    let mut json = start(redlease().args([
        "leader",
        "--nodes",
        &urls.join(","),
        "--key",
        "scheduler",
        "--watch",
        "--json",
    ]));
    let objects = Lines::of(&mut json);
    let first_object: Value = serde_json::from_str(&objects.next(LIMIT)).unwrap();
    assert_eq!(first_object["leader"], Value::Null);
    run(elect(&urls, "scheduler", "two").args(["--", "true"]), LIMIT).expect(0);
    let led = objects.until(LIMIT, "the second leader", |l| l.contains("\"two\""));
    let led: Value = serde_json::from_str(&led).unwrap();
    assert!(led["leader"]["term"].as_u64().unwrap() > term, "{led}");
    lines.until(LIMIT, "the second leader", |l| l.starts_with("two (term "));
    signal(&watcher, Signal::TERM);
    signal(&json, Signal::INT);
    finish(watcher, LIMIT).expect(0);
    finish(json, LIMIT).expect(0);
}
