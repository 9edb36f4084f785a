//! `redlease run`'s guardian: a redlease killed with SIGKILL takes its
//! command's whole process group with it, well before the lease could
//! expire; a normal or a lost-lease end leaves no guardian behind.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Child;
use std::time::Duration;

use redlease_testkit::RedisNode;
use rustix::process::Signal;

use crate::support::{
    eventually, finish, gone, has_key, lock_key, recorded_pid, redlease, signal, start,
};

const LIMIT: Duration = Duration::from_secs(30);

/// Starts the background `sleep 60` and records its pid; it lets go of the
/// output pipes, so that only its own fate is measured.
const GRANDCHILD: &str = r#"sleep 60 >/dev/null 2>&1 & echo $! > "$PIDS"; wait"#;

/// `redlease run` with `flags`, running `script` with `$PIDS` set.
fn run_script(node: &RedisNode, key: &str, flags: &[&str], script: &str, pids: &Path) -> Child {
    start(
        redlease()
            .args(["run", "--nodes", &node.url(), "--key", key])
            .args(flags)
            .args(["--", "sh", "-c", script])
            .env("PIDS", pids),
    )
}

/// The guardian that redlease `parent` started: its child running
/// `redlease __guardian`.
fn guardian_of(parent: u32) -> u32 {
    let mut found = None;
    eventually(LIMIT, "redlease to start its guardian", || {
        found = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .find(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let ppid = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                ppid == Some(parent) && cmdline.ends_with(b"__guardian\0")
            });
        found.is_some()
    });
    found.unwrap()
}

#[test]
fn a_killed_redlease_takes_its_commands_whole_group_with_it() {
    let node = RedisNode::start();
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    // A TTL far above the bound below: the group is stopped when redlease
    // dies, not when the lease would run out.
    let child = run_script(&node, "orphaned", &["--ttl", "60s"], GRANDCHILD, &pids);
    let grandchild = recorded_pid(&pids);
    let guardian = guardian_of(child.id());
    signal(&child, Signal::KILL);
    let ended = finish(child, LIMIT);
    assert_eq!(ended.status.signal(), Some(Signal::KILL.as_raw()));
    eventually(
        Duration::from_secs(5),
        "the command's child to be gone",
        || gone(grandchild),
    );
    eventually(Duration::from_secs(5), "the guardian to exit", || {
        gone(guardian)
    });
    assert!(
        ended
            .stderr
            .contains("renews the lock no more; sent SIGTERM"),
        "{ended:#?}"
    );
    // Not released: redlease died. The key expires by its TTL.
    assert!(has_key(&node, &lock_key("orphaned")));
}

#[test]
fn a_group_that_ignores_sigterm_is_killed_before_the_lease_could_expire() {
    let node = RedisNode::start();
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    // The grace alone would leave it a minute; the lease's end comes first.
    let script = format!("trap '' TERM; {GRANDCHILD}");
    let child = run_script(
        &node,
        "stubborn-orphan",
        &["--ttl", "3s", "--grace", "60s"],
        &script,
        &pids,
    );
    let grandchild = recorded_pid(&pids);
    let guardian = guardian_of(child.id());
    signal(&child, Signal::KILL);
    let ended = finish(child, LIMIT);
    eventually(
        Duration::from_secs(15),
        "the command's child to be gone",
        || gone(grandchild),
    );
    eventually(Duration::from_secs(5), "the guardian to exit", || {
        gone(guardian)
    });
    assert!(ended.stderr.contains("sent SIGKILL"), "{ended:#?}");
}

#[test]
fn normal_and_lost_lease_ends_leave_no_guardian_behind() {
    let mut node = RedisNode::start();
    let dir = tempfile::tempdir().unwrap();
    let (pids, stop) = (dir.path().join("pids"), dir.path().join("stop"));
    // Runs until told to stop (at most 20 s), or until SIGTERM.
    let script = r#"echo $$ > "$PIDS"; i=0; while [ ! -e "$STOP" ] && [ $i -lt 1000 ]; do sleep 0.02; i=$((i+1)); done"#;

    let child = start(
        redlease()
            .args(["run", "--nodes", &node.url(), "--key", "tidy", "--"])
            .args(["sh", "-c", script])
            .env("PIDS", &pids)
            .env("STOP", &stop),
    );
    recorded_pid(&pids);
    let guardian = guardian_of(child.id());
    std::fs::write(&stop, "").unwrap();
    let ended = finish(child, LIMIT);
    ended.expect(0);
    assert_eq!(ended.stderr, "", "nothing said on a normal end");
    assert!(gone(guardian), "reaped before redlease exited");
    assert!(!has_key(&node, &lock_key("tidy")));

    std::fs::remove_file(&stop).unwrap();
    std::fs::remove_file(&pids).unwrap();
    let child = start(
        redlease()
            .args(["run", "--nodes", &node.url(), "--key", "tidy"])
            .args(["--ttl", "1s", "--", "sh", "-c", script])
            .env("PIDS", &pids)
            .env("STOP", &stop),
    );
    recorded_pid(&pids);
    let guardian = guardian_of(child.id());
    node.pause(); // renewals go unanswered: the lease runs out
    let ended = finish(child, LIMIT);
    node.resume();
    // As before the guardian: the command got SIGTERM from redlease.
    ended.expect(75);
    assert!(ended.stderr.contains("lost the lock"), "{ended:#?}");
    assert!(
        !ended.stderr.contains("renews the lock no more"),
        "{ended:#?}"
    );
    assert!(gone(guardian), "reaped before redlease exited");
}
