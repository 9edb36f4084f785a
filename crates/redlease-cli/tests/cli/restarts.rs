//! `run` against servers that may have forgotten locks: one server given
//! twice is refused before anything is locked, and a brand-new (or
//! restarted) server is waited for until its restart quarantine is over.

use std::time::{Duration, Instant};

use redlease_testkit::RedisNodes;

use crate::support::{has_key, lock_key, redlease, run, Holder};

#[test]
fn one_server_given_twice_is_refused_before_anything_runs() {
    let nodes = RedisNodes::start(2);
    let port = nodes.node(0).port();
    let list = format!(
        "redis://127.0.0.1:{port},redis://localhost:{port},{}",
        nodes.urls()[1]
    );
    let out = run(
        redlease().args(["run", "--key", "dup", "--nodes", &list, "--", "true"]),
        Duration::from_secs(20),
    );
    out.expect(2);
    let error = out.one_line_error();
    assert!(error.contains("same Redis server"), "{error}");
    assert!(error.contains("node 1 (localhost:"), "{error}");
    assert!(
        !has_key(nodes.node(0), &lock_key("dup")),
        "nothing was locked"
    );
}

#[test]
fn a_brand_new_server_is_waited_for_until_its_quarantine_is_over() {
    let nodes = RedisNodes::start(1);
    let started = Instant::now();
    let mut cmd = redlease();
    cmd.env_remove("REDLEASE_RESTART_QUARANTINE").args([
        "run",
        "--key",
        "fresh",
        "--ttl",
        "2s",
        "--nodes",
        &nodes.urls()[0],
        "--",
        "true",
    ]);
    let out = run(&mut cmd, Duration::from_secs(20));
    out.expect(0);
    // Quarantined for the TTL plus drift after the server started.
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(2_022), "ran after {took:?}");
    // Said once, at the default verbosity, before the wait: for how long,
    // why, and how to turn it off where it is not needed.
    let notes: Vec<&str> = out
        .stderr
        .lines()
        .filter(|line| line.contains("quarantine"))
        .collect();
    assert_eq!(notes.len(), 1, "{out:#?}");
    let note = notes[0];
    assert!(
        note.starts_with("redlease: waiting ")
            && note.contains(" for the restart quarantine: node 0 ("),
        "{note}"
    );
    assert!(note.contains("up for 2.0s"), "{note}");
    assert!(note.contains("--restart-quarantine 0s"), "{note}");
    assert!(note.contains("appendfsync always"), "{note}");
    // The wait it announced: at most the quarantine.
    let wait = note["redlease: waiting ".len()..]
        .split_once(' ')
        .and_then(|(wait, _)| wait.strip_suffix('s'))
        .and_then(|secs| secs.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no wait in {note}"));
    assert!(wait > 0.0 && wait <= 2.1, "{note}");

    // --quiet says nothing of it.
    let other = RedisNodes::start(1);
    let mut cmd = redlease();
    cmd.env_remove("REDLEASE_RESTART_QUARANTINE").args([
        "run",
        "--quiet",
        "--key",
        "fresh",
        "--ttl",
        "2s",
        "--nodes",
        &other.urls()[0],
        "--",
        "true",
    ]);
    let out = run(&mut cmd, Duration::from_secs(20));
    out.expect(0);
    assert_eq!(out.stderr, "", "{out:#?}");
}

#[test]
fn doctor_shows_a_brand_new_server_in_its_quarantine() {
    let nodes = RedisNodes::start(1);
    let mut cmd = redlease();
    cmd.env_remove("REDLEASE_RESTART_QUARANTINE").args([
        "doctor",
        "--ttl",
        "30s",
        "--nodes",
        &nodes.urls()[0],
    ]);
    let out = run(&mut cmd, Duration::from_secs(20));
    let line = crate::doctor::row(&out, "0", "restart quarantine");
    assert!(
        line.starts_with("WARN") && line.contains("casts no vote"),
        "{line}"
    );
}

#[test]
fn status_shows_a_quarantined_node_and_a_lock_not_yet_takeable() {
    let nodes = RedisNodes::start(3);
    let status = |quarantine: &str| {
        let mut cmd = redlease();
        cmd.args([
            "status",
            "--key",
            "fresh",
            "--restart-quarantine",
            quarantine,
            "--nodes",
            &nodes.urls().join(","),
        ]);
        run(&mut cmd, Duration::from_secs(20))
    };
    // Brand-new servers, a 30 s quarantine: every node quarantined, and
    // the lock free but not takeable.
    let out = status("30s");
    out.expect(0);
    let rows: Vec<&str> = out.stdout.lines().collect();
    for i in 0..3 {
        let row = rows
            .iter()
            .position(|line| line.starts_with(&format!("{i} 127.0.0.1:")))
            .unwrap_or_else(|| panic!("no row for node {i}: {out:#?}"));
        assert!(rows[row].contains("free, quarantined"), "{out:#?}");
        let note = rows[row + 1].trim();
        assert!(
            note.starts_with("quarantined: ") && note.contains("votes for a lock again in "),
            "{out:#?}"
        );
    }
    assert!(
        out.stdout.contains("FREE, but not takeable for ")
            && out.stdout.contains(": all 3 nodes are quarantined"),
        "{out:#?}"
    );
    // Without the quarantine they vote: free, and nothing quarantined.
    let out = status("0s");
    out.expect(0);
    assert!(!out.stdout.contains("quarantined"), "{out:#?}");
    assert!(out.stdout.contains("\nFREE;"), "{out:#?}");
    // A held lock is shown held, quarantine or not.
    let mut holder = Holder::take(&nodes.urls(), "fresh");
    let out = status("30s");
    out.expect(0);
    assert!(out.stdout.contains("HELD on 3 of 3 nodes"), "{out:#?}");
    holder.release();
}
