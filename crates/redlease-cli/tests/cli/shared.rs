//! `redlease run --shared`: readers of one key run together, and a plain
//! run (a writer) runs alone, after the readers, ahead of new ones.

use std::path::Path;
use std::time::Duration;

use redlease_testkit::{RedisNode, RedisNodes};

use crate::support::{eventually, finish, run, signal, start, Finished};

const LIMIT: Duration = Duration::from_secs(30);

/// Waits (at most 20 s) for the file `$1` names; exits 3 if it never
/// comes. `sh -c` scripts start with it as a function.
const AWAIT: &str = r#"await() { i=0; while [ ! -e "$1" ]; do i=$((i+1)); [ $i -gt 1000 ] && exit 3; sleep 0.02; done; }; "#;

/// `redlease run` against `urls` for lock `key`, flags and command to add.
fn run_cmd(urls: &[String], key: &str) -> std::process::Command {
    let mut cmd = crate::support::redlease();
    cmd.args(["run", "--nodes", &urls.join(","), "--key", key]);
    cmd
}

/// `redlease status` of `key`.
pub fn status(urls: &[String], key: &str) -> Finished {
    run(
        crate::support::redlease().args([
            "status",
            "--nodes",
            &urls.join(","),
            "--key",
            key,
            "--timeout",
            "500ms",
        ]),
        LIMIT,
    )
}

fn token(file: &Path) -> u64 {
    std::fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .trim()
        .parse()
        .expect("a numeric fencing token")
}

#[test]
fn shared_runs_of_one_key_run_at_the_same_time() {
    let nodes = RedisNodes::start(3);
    let urls = nodes.urls();
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let show = r#"echo "$REDLEASE_FENCING_TOKEN" > "$OUT""#;
    run(
        run_cmd(&urls, "catalog")
            .args(["--", "sh", "-c", show])
            .env("OUT", path("writer1")),
        LIMIT,
    )
    .expect(0);

    // Each reader marks that it runs, then waits for the other's mark:
    // both finish only if they held the lock at the same time.
    let script =
        format!(r#"{AWAIT}touch "$MINE"; echo "$REDLEASE_FENCING_TOKEN" > "$OUT"; await "$OTHER""#);
    let reader = |me: &str, other: &str| {
        start(
            run_cmd(&urls, "catalog")
                .args(["--shared", "--wait", "20s", "--", "sh", "-c", &script])
                .env("MINE", path(me))
                .env("OTHER", path(other))
                .env("OUT", path(&format!("{me}.token"))),
        )
    };
    let (a, b) = (reader("a", "b"), reader("b", "a"));
    finish(a, LIMIT).expect(0);
    finish(b, LIMIT).expect(0);

    run(
        run_cmd(&urls, "catalog")
            .args(["--", "sh", "-c", show])
            .env("OUT", path("writer2")),
        LIMIT,
    )
    .expect(0);
    // A reader's token is the write generation it reads after: at least
    // the writer's before it, below the writer's after it.
    let (before, after) = (token(&path("writer1")), token(&path("writer2")));
    for reader in ["a", "b"] {
        let t = token(&path(&format!("{reader}.token")));
        assert!(before <= t && t < after, "{before} <= {t} < {after}");
    }
}

#[test]
fn a_plain_run_waits_for_the_shared_run_and_new_readers_wait_behind_it() {
    let nodes = RedisNodes::start(3);
    let urls = nodes.urls();
    let dir = tempfile::tempdir().unwrap();
    let (ready, stop, log) = (
        dir.path().join("ready"),
        dir.path().join("stop"),
        dir.path().join("log"),
    );
    let reader = start(
        run_cmd(&urls, "ledger")
            .args(["--shared", "--", "sh", "-c"])
            .arg(format!(
                r#"{AWAIT}touch "$READY"; await "$STOP"; echo reader-done >> "$LOG""#
            ))
            .env("READY", &ready)
            .env("STOP", &stop)
            .env("LOG", &log),
    );
    eventually(LIMIT, "the shared run to start", || ready.exists());
    let writer = start(
        run_cmd(&urls, "ledger")
            .args([
                "--wait",
                "20s",
                "--",
                "sh",
                "-c",
                r#"echo writer >> "$LOG""#,
            ])
            .env("LOG", &log),
    );
    // The writer is seen waiting for the reader...
    eventually(Duration::from_secs(10), "a waiting writer", || {
        status(&urls, "ledger")
            .stdout
            .contains("; a writer waits (new readers wait behind it);")
    });
    assert!(!log.exists(), "the plain run did not start under a reader");
    // ... and a new reader does not get past it.
    let late = run(
        run_cmd(&urls, "ledger")
            .args(["--shared", "--no-wait", "--", "sh", "-c"])
            .arg(r#"echo late-reader >> "$LOG""#)
            .env("LOG", &log),
        LIMIT,
    );
    late.expect(1);
    assert!(
        late.one_line_error()
            .contains("others who came first wait in line for lock"),
        "{late:#?}"
    );

    std::fs::write(&stop, "").unwrap();
    finish(reader, LIMIT).expect(0);
    finish(writer, LIMIT).expect(0);
    // The writer's line comes after the reader's last one: it ran once
    // the reader had finished, and the late reader never ran.
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "reader-done\nwriter\n"
    );
}

#[test]
fn a_shared_run_that_loses_its_lease_is_stopped_and_exits_75() {
    let mut node = RedisNode::start();
    let urls = [node.url()];
    let dir = tempfile::tempdir().unwrap();
    let (started, stopped) = (dir.path().join("started"), dir.path().join("stopped"));
    let script = r#"trap 'echo term > "$STOPPED"; exit 0' TERM; touch "$STARTED"; sleep 30 & wait"#;
    let child = start(
        run_cmd(&urls, "fragile")
            .args(["--shared", "--ttl", "1s", "--", "sh", "-c", script])
            .env("STARTED", &started)
            .env("STOPPED", &stopped),
    );
    eventually(LIMIT, "the command to start", || started.exists());
    node.pause(); // renewals go unanswered: the read hold runs out
    let ended = finish(child, Duration::from_secs(20));
    node.resume();
    ended.expect(75);
    assert!(ended.stderr.contains("lost the lock"), "{ended:#?}");
    assert_eq!(std::fs::read_to_string(&stopped).unwrap().trim(), "term");
}

/// A shared run of "ledger" that holds it until the file `stop` exists,
/// and a writer waiting behind it (TTL 60 s, far beyond the tests'
/// bounds), returned once `status` shows the writer waiting.
fn a_reader_and_a_waiting_writer(
    urls: &[String],
    dir: &Path,
    stop: &Path,
) -> (std::process::Child, std::process::Child) {
    let ready = dir.join("ready");
    let reader = start(
        run_cmd(urls, "ledger")
            .args(["--shared", "--", "sh", "-c"])
            .arg(format!(r#"{AWAIT}touch "$READY"; await "$STOP""#))
            .env("READY", &ready)
            .env("STOP", stop),
    );
    eventually(LIMIT, "the shared run to start", || ready.exists());
    let writer =
        start(run_cmd(urls, "ledger").args(["--ttl", "60s", "--wait", "60s", "--", "true"]));
    eventually(Duration::from_secs(10), "a waiting writer", || {
        status(urls, "ledger")
            .stdout
            .contains("; a writer waits (new readers wait behind it);")
    });
    (reader, writer)
}

/// A waiting writer that was killed keeps no reader out: its place in
/// line is passed over once its process no longer listens, not after the
/// writer's TTL.
#[test]
fn a_killed_waiting_writer_lets_new_readers_in_at_once() {
    let nodes = RedisNodes::start(3);
    let urls = nodes.urls();
    let dir = tempfile::tempdir().unwrap();
    let stop = dir.path().join("stop");
    let (reader, writer) = a_reader_and_a_waiting_writer(&urls, dir.path(), &stop);
    let refused = run(
        run_cmd(&urls, "ledger").args(["--shared", "--no-wait", "--", "true"]),
        LIMIT,
    );
    assert_eq!(refused.code(), 1, "a reader got past a live waiting writer");
    signal(&writer, rustix::process::Signal::KILL);
    let killed = std::time::Instant::now();
    finish(writer, LIMIT);
    // A new reader gets in well within the writer's 60 s TTL.
    eventually(
        Duration::from_secs(10),
        "a reader past the killed writer",
        || {
            run(
                run_cmd(&urls, "ledger").args(["--shared", "--no-wait", "--", "true"]),
                LIMIT,
            )
            .code()
                == 0
        },
    );
    assert!(killed.elapsed() < Duration::from_secs(10));
    std::fs::write(&stop, "").unwrap();
    finish(reader, LIMIT).expect(0);
}

/// A reader that waits in line behind a writer that is then killed moves
/// up at its next look (within a second), not when the readers holding
/// the name finish.
#[test]
fn a_reader_queued_behind_a_killed_writer_moves_up() {
    let nodes = RedisNodes::start(3);
    let urls = nodes.urls();
    let dir = tempfile::tempdir().unwrap();
    let (stop, second) = (dir.path().join("stop"), dir.path().join("second"));
    let (reader, writer) = a_reader_and_a_waiting_writer(&urls, dir.path(), &stop);
    // A second reader waits in line behind the writer.
    let queued = start(
        run_cmd(&urls, "ledger")
            .args(["--shared", "--wait", "30s", "--", "sh", "-c"])
            .arg(r#"touch "$SECOND""#)
            .env("SECOND", &second),
    );
    eventually(Duration::from_secs(10), "two processes waiting", || {
        status(&urls, "ledger")
            .stdout
            .contains("; 2 processes waiting")
    });
    assert!(
        !second.exists(),
        "the reader got past a live waiting writer"
    );
    signal(&writer, rustix::process::Signal::KILL);
    finish(writer, LIMIT);
    // The first reader still holds the name: only the queue moved.
    eventually(
        Duration::from_secs(5),
        "the queued reader past the killed writer",
        || second.exists(),
    );
    finish(queued, LIMIT).expect(0);
    std::fs::write(&stop, "").unwrap();
    finish(reader, LIMIT).expect(0);
}

/// A `--shared` run of a name that a semaphore's permits hold is told
/// that the name is a semaphore of N permits, not that a writer holds it.
#[test]
fn a_shared_run_of_a_semaphores_name_is_told_it_is_a_semaphore() {
    let nodes = RedisNodes::start(1);
    let urls = nodes.urls();
    let dir = tempfile::tempdir().unwrap();
    let (ready, stop) = (dir.path().join("ready"), dir.path().join("stop"));
    let permit = start(
        run_cmd(&urls, "encoders")
            .args(["--permits", "3", "--", "sh", "-c"])
            .arg(format!(r#"{AWAIT}touch "$READY"; await "$STOP""#))
            .env("READY", &ready)
            .env("STOP", &stop),
    );
    eventually(LIMIT, "the permit's run to start", || ready.exists());
    let refused = run(
        run_cmd(&urls, "encoders").args(["--shared", "--no-wait", "--", "true"]),
        LIMIT,
    );
    refused.expect(1);
    assert!(
        refused
            .one_line_error()
            .contains("\"encoders\" is a semaphore of 3 permits (--permits 3), not a lock"),
        "{refused:#?}"
    );
    std::fs::write(&stop, "").unwrap();
    finish(permit, LIMIT).expect(0);
}
