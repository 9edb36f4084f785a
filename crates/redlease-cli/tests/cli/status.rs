//! `redlease status`: held or free per node, the fencing counter, never the
//! token.

use std::time::Duration;

use redlease_testkit::RedisNodes;

use crate::support::{eventually, finish, get, has_key, lock_key, redlease, run, start, Holder};

const LIMIT: Duration = Duration::from_secs(30);

fn status(urls: &[String], key: &str) -> crate::support::Finished {
    run(
        redlease().args([
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

#[test]
fn status_shows_a_held_lock_and_its_counter_but_never_the_token() {
    let mut nodes = RedisNodes::start(3);
    let urls = nodes.urls();
    let mut holder = Holder::take(&urls, "report");
    // The lease is granted at quorum; the third node's SET may land later.
    eventually(Duration::from_secs(10), "the key on every node", || {
        nodes.iter().all(|node| has_key(node, &lock_key("report")))
    });
    let token = get(nodes.node(0), &lock_key("report")).expect("the lock key holds a token");

    let held = status(&urls, "report");
    held.expect(0);
    assert!(held.stdout.contains("HELD on 3 of 3 nodes"), "{held:#?}");
    assert!(
        held.stdout.contains("HELD on 3 of 3 nodes by a writer, "),
        "{held:#?}"
    );
    assert_eq!(
        held.stdout.matches("held by a writer, ").count(),
        3,
        "{held:#?}"
    );
    assert!(
        held.stdout.contains(&holder.fencing_token().to_string()),
        "shows the fencing counter: {held:#?}"
    );
    assert!(!held.stdout.contains(&token) && !held.stderr.contains(&token));

    // A `run` waiting for the lock shows as one waiting process.
    let waiter = start(
        redlease()
            .args([
                "run",
                "--nodes",
                &urls.join(","),
                "--key",
                "report",
                "--wait",
                "20s",
            ])
            .args(["--", "true"]),
    );
    eventually(Duration::from_secs(10), "the waiter to subscribe", || {
        status(&urls, "report")
            .stdout
            .contains("; 1 process waiting;")
    });
    holder.release();
    finish(waiter, LIMIT).expect(0);

    let free = status(&urls, "report");
    free.expect(0);
    assert!(free.stdout.contains("FREE"), "{free:#?}");

    // With 2 of 3 nodes gone, nobody can tell.
    nodes.node_mut(1).kill();
    nodes.node_mut(2).pause();
    let unknown = status(&urls, "report");
    nodes.node_mut(2).resume();
    unknown.expect(69);
    assert!(unknown.stdout.contains("UNKNOWN"), "{unknown:#?}");
    assert!(unknown.stdout.contains("unreachable"), "{unknown:#?}");
    assert!(unknown
        .one_line_error()
        .contains("only 1 of 3 nodes answered"));
}

#[test]
fn status_says_a_port_speaks_no_redis_on_a_line_of_its_own() {
    let other = crate::doctor::NotRedis::start();
    let nodes = RedisNodes::start(1);
    let urls = [nodes.urls()[0].clone(), other.url()];
    let out = status(&urls, "report");
    // One of two nodes: a quorum (2) cannot answer.
    out.expect(69);
    let lines: Vec<&str> = out.stdout.lines().collect();
    let row = lines
        .iter()
        .position(|l| l.starts_with("1 "))
        .unwrap_or_else(|| panic!("no row for node 1: {out:#?}"));
    assert!(lines[row].trim_end().ends_with("unreachable"), "{out:#?}");
    // The reason, under LOCK, on a line of its own.
    let lock = lines[1].find("LOCK").unwrap();
    assert_eq!(
        &lines[row + 1][lock..],
        "does not speak the Redis protocol (is this a Redis port?)",
        "{out:#?}"
    );
    assert!(!out.stdout.contains("Parse error"), "{out:#?}");
    assert!(lines[row - 1].starts_with("0 ") && lines[row - 1].contains("free"));
}

#[test]
fn status_tells_readers_from_a_writer() {
    let nodes = RedisNodes::start(3);
    let urls = nodes.urls();
    let dir = tempfile::tempdir().unwrap();
    let stop = dir.path().join("stop");
    // Marks that it runs, then holds until `$STOP` exists (at most 20 s).
    let hold = r#"touch "$READY"; i=0; while [ ! -e "$STOP" ] && [ $i -lt 1000 ]; do sleep 0.02; i=$((i+1)); done"#;
    let holder = |flags: &[&str], ready: &std::path::Path| {
        start(
            redlease()
                .args(["run", "--nodes", &urls.join(","), "--key", "books"])
                .args(flags)
                .args(["--", "sh", "-c", hold])
                .env("READY", ready)
                .env("STOP", &stop),
        )
    };
    let readers: Vec<_> = ["r1", "r2"]
        .iter()
        .map(|name| {
            let ready = dir.path().join(name);
            (holder(&["--shared"], &ready), ready)
        })
        .collect();
    for (_, ready) in &readers {
        eventually(LIMIT, "a shared run to start", || ready.exists());
    }
    // Granted at quorum; the third node may count its reader later.
    let mut out = status(&urls, "books");
    eventually(Duration::from_secs(10), "2 readers on every node", || {
        out = status(&urls, "books");
        out.stdout.matches("held by 2 readers, ").count() == 3
    });
    out.expect(0);
    assert!(
        out.stdout.contains("HELD on 3 of 3 nodes by 2 readers, "),
        "{out:#?}"
    );
    assert!(!out.stdout.contains("writer"), "{out:#?}");
    std::fs::write(&stop, "").unwrap();
    for (child, _) in readers {
        finish(child, LIMIT).expect(0);
    }

    std::fs::remove_file(&stop).unwrap();
    let ready = dir.path().join("w");
    let writer = holder(&[], &ready);
    eventually(LIMIT, "the plain run to start", || ready.exists());
    let out = status(&urls, "books");
    out.expect(0);
    assert!(
        out.stdout.contains("HELD on 3 of 3 nodes by a writer, "),
        "{out:#?}"
    );
    assert!(!out.stdout.contains("reader"), "{out:#?}");
    std::fs::write(&stop, "").unwrap();
    finish(writer, LIMIT).expect(0);
}
