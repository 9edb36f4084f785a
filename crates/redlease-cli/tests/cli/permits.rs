//! `redlease run --permits N`: at most N runs of one name at once (one of
//! N permits of a semaphore each), the others waiting for a permit.

use std::path::Path;
use std::time::Duration;

use redlease_testkit::{RedisNode, RedisNodes};

use crate::shared::status;
use crate::support::{eventually, finish, run, start};

const LIMIT: Duration = Duration::from_secs(30);

/// Waits (at most 20 s) for the file `$1` names; exits 3 if it never
/// comes. `sh -c` scripts start with it as a function.
const AWAIT: &str = r#"await() { i=0; while [ ! -e "$1" ]; do i=$((i+1)); [ $i -gt 1000 ] && exit 3; sleep 0.02; done; }; "#;

/// `redlease run --permits N` against `urls` for semaphore `key`.
fn run_cmd(urls: &[String], key: &str, permits: u32) -> std::process::Command {
    let mut cmd = crate::support::redlease();
    cmd.args(["run", "--nodes", &urls.join(","), "--key", key])
        .args(["--permits", &permits.to_string()]);
    cmd
}

fn read(file: &Path) -> String {
    std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

fn token(file: &Path) -> u64 {
    read(file).trim().parse().expect("a numeric fencing token")
}

#[test]
fn two_permits_admit_two_runs_at_once_and_a_third_waits_for_one() {
    // 5 nodes: a permit of 2 is held on 4, so one node may fail.
    let nodes = RedisNodes::start(5);
    let urls = nodes.urls();
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let log = path("log");

    // Each holder marks that it runs and waits for the other's mark (both
    // get there only if they hold permits at the same time), then holds
    // on until told to stop.
    let script = format!(
        r#"{AWAIT}echo "$REDLEASE_FENCING_TOKEN" > "$MINE.token"; touch "$MINE"; await "$OTHER"; await "$STOP"; echo "$NAME" >> "$LOG""#
    );
    let holder = |me: &str, other: &str| {
        start(
            run_cmd(&urls, "encoders", 2)
                .args(["--wait", "20s", "--", "sh", "-c", &script])
                .env("NAME", me)
                .env("MINE", path(me))
                .env("OTHER", path(other))
                .env("STOP", path(&format!("stop-{me}")))
                .env("LOG", &log),
        )
    };
    let (a, b) = (holder("a", "b"), holder("b", "a"));
    eventually(LIMIT, "both permit holders to run", || {
        path("a").exists() && path("b").exists()
    });

    let shown = status(&urls, "encoders");
    shown.expect(0);
    assert!(
        shown
            .stdout
            .contains("HELD on 5 of 5 nodes: 2 of 2 permits held (none free),"),
        "{shown:#?}"
    );
    assert!(
        shown.stdout.contains(
            "semaphore \"encoders\" (key redlease:{encoders}) on 5 nodes, 2 permits, each \
             held on 4 of them"
        ),
        "{shown:#?}"
    );

    // Full: a run that does not wait is refused, and says why.
    let refused = run(
        run_cmd(&urls, "encoders", 2).args(["--no-wait", "--", "true"]),
        LIMIT,
    );
    refused.expect(1);
    assert!(
        refused
            .one_line_error()
            .contains("all 2 permits of \"encoders\" are held"),
        "{refused:#?}"
    );

    // A third run waits for a permit...
    let c = start(
        run_cmd(&urls, "encoders", 2)
            .args(["--wait", "20s", "--", "sh", "-c"])
            .arg(r#"echo "$REDLEASE_FENCING_TOKEN" > "$OUT"; echo c >> "$LOG""#)
            .env("OUT", path("c.token"))
            .env("LOG", &log),
    );
    eventually(Duration::from_secs(10), "the third run to wait", || {
        status(&urls, "encoders")
            .stdout
            .contains("; 1 process waiting;")
    });
    assert!(
        !log.exists(),
        "the third run did not start with 2 permits held"
    );
    // ... and runs once one holder ends, while the other still holds.
    std::fs::write(path("stop-a"), "").unwrap();
    finish(a, LIMIT).expect(0);
    finish(c, LIMIT).expect(0);
    std::fs::write(path("stop-b"), "").unwrap();
    finish(b, LIMIT).expect(0);
    assert_eq!(read(&log), "a\nc\nb\n");
    // Each permit draws a token, as a plain run does: larger than that of
    // every holder before it (two taken at the same time may share one).
    let (ta, tb, tc) = (
        token(&path("a.token")),
        token(&path("b.token")),
        token(&path("c.token")),
    );
    assert!(tc > ta.max(tb), "{ta}, {tb} < {tc}");
    let after = status(&urls, "encoders");
    assert!(after.stdout.contains("FREE"), "{after:#?}");
}

#[test]
fn a_semaphore_no_node_may_fail_on_is_refused_unless_allowed() {
    // 2 permits over 3 nodes: each permit needs all 3.
    let nodes = RedisNodes::start(3);
    let urls = nodes.urls();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let refused = run(
        run_cmd(&urls, "jobs", 2).args(["--", "touch"]).arg(&ran),
        LIMIT,
    );
    refused.expect(2);
    let line = refused.one_line_error();
    assert!(
        line.contains("invalid --permits: 2 permits over 3 nodes need every node"),
        "{line}"
    );
    assert!(line.contains("--allow-no-failures"), "{line}");
    assert!(!ran.exists(), "the command ran: {refused:#?}");

    run(
        run_cmd(&urls, "jobs", 2)
            .args(["--allow-no-failures", "--", "touch"])
            .arg(&ran),
        LIMIT,
    )
    .expect(0);
    assert!(ran.exists(), "the command did not run");
}

#[test]
fn a_run_with_other_permits_than_the_holders_is_a_usage_error() {
    let nodes = RedisNodes::start(1);
    let urls = nodes.urls();
    let dir = tempfile::tempdir().unwrap();
    let (ready, stop, ran) = (
        dir.path().join("ready"),
        dir.path().join("stop"),
        dir.path().join("ran"),
    );
    let holder = start(
        run_cmd(&urls, "slots", 2)
            .args(["--", "sh", "-c"])
            .arg(format!(r#"{AWAIT}touch "$READY"; await "$STOP""#))
            .env("READY", &ready)
            .env("STOP", &stop),
    );
    eventually(LIMIT, "the permit holder to run", || ready.exists());
    // Not waited for (no --wait: it would wait for ever), and not hidden
    // by a conflict code of 0.
    let other = run(
        run_cmd(&urls, "slots", 3)
            .args(["--conflict-exit-code", "0", "--", "touch"])
            .arg(&ran),
        LIMIT,
    );
    std::fs::write(&stop, "").unwrap();
    finish(holder, LIMIT).expect(0);
    other.expect(2);
    let line = other.one_line_error();
    assert!(
        line.contains("semaphore \"slots\" is held with --permits 2"),
        "{line}"
    );
    assert!(line.contains("this run gives --permits 3"), "{line}");
    assert!(!ran.exists(), "the command ran: {other:#?}");
}

#[test]
fn a_permit_run_that_loses_its_lease_is_stopped_and_exits_75() {
    let mut node = RedisNode::start();
    let urls = [node.url()];
    let dir = tempfile::tempdir().unwrap();
    let (started, stopped) = (dir.path().join("started"), dir.path().join("stopped"));
    let script = r#"trap 'echo term > "$STOPPED"; exit 0' TERM; touch "$STARTED"; sleep 30 & wait"#;
    let child = start(
        run_cmd(&urls, "fragile", 3)
            .args(["--ttl", "1s", "--", "sh", "-c", script])
            .env("STARTED", &started)
            .env("STOPPED", &stopped),
    );
    eventually(LIMIT, "the command to start", || started.exists());
    node.pause(); // renewals go unanswered: the permit runs out
    let ended = finish(child, Duration::from_secs(20));
    node.resume();
    ended.expect(75);
    // Stopped before the permit ran out (SIGTERM while renewals do not
    // get through), and told as a lost permit.
    assert!(
        ended.stderr.contains("lost its permit of \"fragile\""),
        "{ended:#?}"
    );
    assert_eq!(read(&stopped).trim(), "term");
}

/// `--weight K` takes K of the N permits at once, and waits in turn: a
/// run for 1 permit that asks after a run for 2 waits behind it, even
/// though 1 is free; a weight beyond the permits is a usage error.
#[test]
fn a_weighted_run_takes_its_permits_at_once_and_in_turn() {
    let nodes = RedisNodes::start(1);
    let urls = nodes.urls();
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let hold = |ready: &str, stop: &str| format!(r#"{AWAIT}touch "{ready}"; await "{stop}""#);
    // Two of three permits held.
    let (ready, stop) = (path("ready"), path("stop"));
    let two = start(
        run_cmd(&urls, "pool", 3)
            .args(["--weight", "2", "--", "sh", "-c"])
            .arg(hold(
                &ready.display().to_string(),
                &stop.display().to_string(),
            )),
    );
    eventually(LIMIT, "the weighted run to start", || ready.exists());
    // Two more do not fit: told so at once.
    let refused = run(
        run_cmd(&urls, "pool", 3).args(["--weight", "2", "--no-wait", "--", "true"]),
        LIMIT,
    );
    refused.expect(1);
    assert!(
        refused
            .one_line_error()
            .contains("fewer than 2 of the 3 permits of \"pool\" are free"),
        "{refused:#?}"
    );
    // A waiter for 2, then one for 1: the 1 waits behind the 2.
    let (second_ready, second_stop) = (path("second"), path("second-stop"));
    let second = start(
        run_cmd(&urls, "pool", 3)
            .args(["--weight", "2", "--wait", "20s", "--", "sh", "-c"])
            .arg(hold(
                &second_ready.display().to_string(),
                &second_stop.display().to_string(),
            )),
    );
    eventually(LIMIT, "the second run to wait in line", || {
        status(&urls, "pool")
            .stdout
            .contains("; 1 process waiting;")
    });
    let small = run(
        run_cmd(&urls, "pool", 3).args(["--no-wait", "--", "true"]),
        LIMIT,
    );
    small.expect(1);
    assert!(
        small
            .one_line_error()
            .contains("others who came first wait in line for the permits"),
        "{small:#?}"
    );
    std::fs::write(&stop, "").unwrap();
    finish(two, LIMIT).expect(0);
    eventually(LIMIT, "the second run to start", || second_ready.exists());
    std::fs::write(&second_stop, "").unwrap();
    finish(second, LIMIT).expect(0);
    // More than all of them: a usage error, before any I/O.
    let usage = run(
        run_cmd(&urls, "pool", 3).args(["--weight", "4", "--", "true"]),
        LIMIT,
    );
    usage.expect(2);
    assert!(
        usage.one_line_error().contains("--weight 4 of --permits 3"),
        "{usage:#?}"
    );
}
