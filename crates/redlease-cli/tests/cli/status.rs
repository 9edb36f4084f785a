//! `redlease status`: held or free per node, the fencing counter, never the
//! token.

use std::time::Duration;

use redlease_testkit::RedisNodes;
use rustix::process::Signal;
use serde_json::Value;

use crate::support::{
    eventually, finish, get, has_key, lock_key, redlease, run, signal, start, Holder, Lines,
};

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

/// `redlease run` of `key` over `urls`; the caller adds its flags.
fn run_of(urls: &[String], key: &str) -> std::process::Command {
    let mut cmd = redlease();
    cmd.args(["run", "--nodes", &urls.join(","), "--key", key]);
    cmd
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
    let value = get(nodes.node(0), &lock_key("report")).expect("the lock key holds a token");
    // The secret token, then the owner the lease names.
    let token = value[..48].to_string();

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
    // Who: this test process, the holder's default owner.
    let me = format!("held by {} for ", redlease::default_owner());
    assert!(held.stdout.contains(&me), "{held:#?}");

    // A `run` waiting for the lock shows as one waiting process.
    let waiter = start(
        run_of(&urls, "report")
            .args(["--wait", "20s"])
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
            run_of(&urls, "books")
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

/// `status --key K` with `extra` flags over `urls`.
fn status_with(urls: &[String], key: &str, extra: &[&str]) -> crate::support::Finished {
    run(
        redlease()
            .args(["status", "--nodes", &urls.join(","), "--key", key])
            .args(["--timeout", "500ms"])
            .args(extra),
        LIMIT,
    )
}

/// The summary: status's last line.
fn summary(out: &crate::support::Finished) -> &str {
    out.stdout.lines().last().unwrap_or_default()
}

/// Permits of semaphore `name` (of `permits`) held by the test on `urls`
/// alone, as a run over those nodes only would hold them.
struct Permits {
    leases: Vec<redlease::Lease>,
    _locker: redlease::Locker,
    runtime: tokio::runtime::Runtime,
}

impl Permits {
    fn take(urls: &[String], name: &str, permits: u32, count: usize) -> Permits {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (locker, leases) = runtime.block_on(async {
            let locker = redlease::Locker::builder(urls)
                .ttl(Duration::from_secs(30))
                // Brand-new test servers: see `redlease()`.
                .advanced(|a| a.restart_quarantine(Duration::ZERO))
                .build()
                .expect("locker");
            let mut leases = Vec::new();
            for _ in 0..count {
                let permit = locker
                    .semaphore(name, permits)
                    .allow_no_failures()
                    .try_acquire()
                    .await
                    .expect("the test takes a permit");
                leases.push(permit);
            }
            (locker, leases)
        });
        Permits {
            leases,
            _locker: locker,
            runtime,
        }
    }

    fn release(&mut self) {
        for lease in self.leases.drain(..) {
            self.runtime
                .block_on(lease.release())
                .expect("the test releases its permit");
        }
    }
}

impl Drop for Permits {
    fn drop(&mut self) {
        for lease in self.leases.drain(..) {
            let _ = self.runtime.block_on(lease.release());
        }
    }
}

#[test]
fn a_semaphore_is_not_free_when_too_few_nodes_have_room_for_a_permit() {
    // 5 nodes, 2 permits: a permit needs 4 of them. Both permits held on
    // nodes 3 and 4 alone: a majority (nodes 0 to 2) is free, 3 nodes have
    // room, and no permit can be taken.
    let nodes = RedisNodes::start(5);
    let urls = nodes.urls();
    let mut held = Permits::take(&urls[3..], "encoders", 2, 2);
    let out = status_with(&urls, "encoders", &[]);
    out.expect(0);
    assert!(
        out.stdout.starts_with(
            "semaphore \"encoders\" (key redlease:{encoders}) on 5 nodes, 2 permits, each held \
             on 4 of them"
        ),
        "{out:#?}"
    );
    assert_eq!(
        out.stdout
            .matches("2 of 2 permits held (none free)")
            .count(),
        2,
        "{out:#?}"
    );
    assert!(
        summary(&out).starts_with(
            "NOT TAKEABLE: no permit can be taken, as 3 of 5 nodes have room for one and a \
             permit needs 4"
        ),
        "{out:#?}"
    );
    assert!(!out.stdout.contains("FREE"), "{out:#?}");
    // As a run finds it.
    let refused = run(
        run_of(&urls, "encoders").args(["--permits", "2", "--no-wait", "--", "true"]),
        LIMIT,
    );
    refused.expect(1);
    // A run with another N would be refused: said.
    let other = status_with(&urls, "encoders", &["--permits", "3"]);
    other.expect(0);
    assert!(
        other
            .stdout
            .contains("note: its permits are held with --permits 2, not 3"),
        "{other:#?}"
    );
    held.release();
    let free = status_with(&urls, "encoders", &[]);
    free.expect(0);
    assert!(summary(&free).starts_with("FREE;"), "{free:#?}");
}

#[test]
fn permits_judges_a_name_none_of_whose_permits_is_held() {
    // 2 of 5 nodes down: a lock's majority answers free, but a permit of 3
    // needs 4 nodes.
    let mut nodes = RedisNodes::start(5);
    let urls = nodes.urls();
    nodes.node_mut(3).kill();
    nodes.node_mut(4).kill();
    let lock = status_with(&urls, "encoders", &[]);
    lock.expect(0);
    assert!(summary(&lock).starts_with("FREE;"), "{lock:#?}");
    let permits = status_with(&urls, "encoders", &["--permits", "3"]);
    permits.expect(69);
    assert!(
        permits.stdout.starts_with(
            "semaphore \"encoders\" (key redlease:{encoders}) on 5 nodes, 3 permits, each held \
             on 4 of them"
        ),
        "{permits:#?}"
    );
    assert!(
        summary(&permits).starts_with(
            "UNKNOWN: 3 of 5 nodes answered, 3 with room for a permit, and a permit needs 4"
        ),
        "{permits:#?}"
    );
    assert!(
        permits
            .one_line_error()
            .contains("only 3 of 5 nodes answered; a permit needs 4"),
        "{permits:#?}"
    );
}

#[test]
fn a_semaphore_with_two_of_five_nodes_quarantined_is_not_takeable() {
    // Nodes 3 and 4 restarted; the others have been up for the quarantine
    // (which is at least status's TTL, 10 s, plus its drift).
    let mut nodes = RedisNodes::start(5);
    let urls = nodes.urls();
    let quarantine = ["--restart-quarantine", "10200ms"];
    let up = |node: &redlease_testkit::RedisNode| -> u64 {
        let mut con = node.client().get_connection().expect("connect");
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut con)
            .expect("INFO");
        info.lines()
            .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
            .and_then(|s| s.trim().parse().ok())
            .expect("uptime_in_seconds")
    };
    eventually(
        Duration::from_secs(30),
        "the nodes up for the quarantine",
        || (0..3).all(|i| up(nodes.node(i)) > 11),
    );
    nodes.node_mut(3).restart();
    nodes.node_mut(4).restart();
    let both = [&quarantine[..], &["--permits", "3"]].concat();
    let (lock, permits) = (
        status_with(&urls, "encoders", &quarantine),
        status_with(&urls, "encoders", &both),
    );
    lock.expect(0);
    permits.expect(0);
    // By the majority, free; by the permit quorum (4), not takeable yet.
    assert!(summary(&lock).starts_with("FREE;"), "{lock:#?}");
    let line = summary(&permits);
    assert!(
        line.starts_with("FREE, but no permit takeable for ")
            && line.contains(
                ": 2 of 5 nodes are quarantined, and a permit needs 4 with room that vote"
            ),
        "{permits:#?}"
    );
}

#[test]
fn status_and_a_refused_run_name_the_running_command() {
    let nodes = RedisNodes::start(1);
    let urls = nodes.urls();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let child = start(
        run_of(&urls, "deploy")
            .args(["--", "sh", "-c", r#"touch "$STARTED"; exec sleep 30"#])
            .env("STARTED", &started),
    );
    eventually(LIMIT, "the command to start", || started.exists());
    let owner = format!(
        "{}:{} (sh -c touch \"$STARTED\"; exec sleep 30)",
        hostname(),
        child.id()
    );
    let held = status(&urls, "deploy");
    held.expect(0);
    assert!(
        held.stdout.contains(&format!("held by {owner} for ")),
        "{held:#?}"
    );
    let refused = run(
        run_of(&urls, "deploy")
            .args(["--no-wait"])
            .args(["--", "true"]),
        LIMIT,
    );
    refused.expect(1);
    assert!(
        refused.stderr.contains(&format!("held by {owner} for ")),
        "{refused:#?}"
    );
    // --owner says who instead.
    crate::support::signal(&child, rustix::process::Signal::TERM);
    finish(child, LIMIT);
    let named = start(
        run_of(&urls, "deploy")
            .args(["--owner", "deploy of v2.3 by ana"])
            .args([
                "--",
                "sh",
                "-c",
                r#"rm "$STARTED"; touch "$STARTED"; exec sleep 30"#,
            ])
            .env("STARTED", &started),
    );
    eventually(LIMIT, "the named run to hold it", || {
        status(&urls, "deploy")
            .stdout
            .contains("held by deploy of v2.3 by ana for ")
    });
    crate::support::signal(&named, rustix::process::Signal::TERM);
    finish(named, LIMIT);
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn status_watch_json_prints_an_object_when_the_lock_is_taken_and_released() {
    let node = redlease_testkit::RedisNode::start();
    let urls = [node.url()];
    let mut watcher = start(redlease().args([
        "status",
        "--nodes",
        &urls.join(","),
        "--key",
        "report",
        "--watch",
        "--json",
    ]));
    let lines = Lines::of(&mut watcher);
    let object = |line: String| -> Value { serde_json::from_str(&line).expect("a JSON object") };
    let now = object(lines.next(LIMIT));
    assert_eq!(now["key"], "report");
    assert_eq!(now["verdict"], "free", "{now}");
    assert_eq!(now["holders"], serde_json::json!([]), "{now}");
    assert_eq!(now["leader"], Value::Null, "{now}");

    let mut holder = Holder::take(&urls, "report");
    let taken = object(lines.until(LIMIT, "the lock taken", |l| {
        l.contains("\"verdict\":\"held\"")
    }));
    assert_eq!(taken["mode"], "exclusive", "{taken}");
    assert_eq!(taken["held_on"], 1, "{taken}");
    assert_eq!(taken["nodes"], 1, "{taken}");
    assert_eq!(taken["fencing_counter"], holder.fencing_token(), "{taken}");
    let holders = taken["holders"].as_array().expect("holders");
    assert_eq!(holders.len(), 1, "{taken}");
    assert_eq!(holders[0]["owner"], redlease::default_owner(), "{taken}");
    assert_eq!(holders[0]["weight"], 1, "{taken}");
    assert_eq!(holders[0]["in_lock_delay_ms"], Value::Null, "{taken}");
    assert!(holders[0]["since_ms"].as_u64().is_some(), "{taken}");

    holder.release();
    let released = object(lines.until(LIMIT, "the lock released", |l| {
        l.contains("\"verdict\":\"free\"")
    }));
    assert_eq!(released["holders"], serde_json::json!([]), "{released}");
    signal(&watcher, Signal::INT);
    finish(watcher, LIMIT).expect(0);
}

#[test]
fn status_watch_prints_a_timed_report_per_change() {
    let node = redlease_testkit::RedisNode::start();
    let urls = [node.url()];
    let mut watcher = start(redlease().args([
        "status",
        "--nodes",
        &urls.join(","),
        "--key",
        "report",
        "--watch",
    ]));
    let lines = Lines::of(&mut watcher);
    let time = lines.next(LIMIT);
    // "-- 14:03:07.123 UTC --"
    let clock = time
        .strip_prefix("-- ")
        .and_then(|t| t.strip_suffix(" UTC --"))
        .unwrap_or_else(|| panic!("not a time line: {time:?}"));
    assert_eq!(clock.len(), 12, "{time:?}");
    assert!(clock
        .chars()
        .all(|c| c.is_ascii_digit() || c == ':' || c == '.'));
    lines.until(LIMIT, "the verdict", |l| l.starts_with("FREE"));
    let _holder = Holder::take(&urls, "report");
    lines.until(LIMIT, "a new report", |l| l.starts_with("-- "));
    lines.until(LIMIT, "the lock held", |l| {
        l.starts_with("HELD on 1 of 1 nodes")
    });
    signal(&watcher, Signal::TERM);
    finish(watcher, LIMIT).expect(0);
}

#[test]
fn status_shows_a_holder_that_died_in_its_lock_delay() {
    let node = redlease_testkit::RedisNode::start();
    let urls = [node.url()];
    // acquire takes the lock and exits: nothing renews or releases it,
    // as if its holder had been killed.
    let acquired = run(
        redlease().args([
            "acquire",
            "--nodes",
            &urls.join(","),
            "--key",
            "report",
            "--ttl",
            "1s",
            "--lock-delay",
            "5s",
        ]),
        LIMIT,
    );
    acquired.expect(0);
    let held = status(&urls, "report");
    held.expect(0);
    assert!(!held.stdout.contains("lock-delay"), "{held:#?}");
    let mut delayed = None;
    eventually(Duration::from_secs(10), "the holder's lock-delay", || {
        let out = status(&urls, "report");
        let found = out.stdout.contains("lock-delay");
        delayed = Some(out);
        found
    });
    let delayed = delayed.unwrap();
    delayed.expect(0);
    let line = delayed
        .stdout
        .lines()
        .find(|l| l.starts_with("held by "))
        .unwrap_or_else(|| panic!("no holder: {delayed:#?}"));
    assert!(line.contains("(redlease acquire) for "), "{line}");
    assert!(
        line.contains(", ended without a release: in its lock-delay for "),
        "{line}"
    );
    assert!(
        delayed
            .stdout
            .contains("HELD on 1 of 1 nodes in the lock-delay of a holder that ended without a release, free in "),
        "{delayed:#?}"
    );
    let json = run(
        redlease().args([
            "status",
            "--nodes",
            &urls.join(","),
            "--key",
            "report",
            "--json",
        ]),
        LIMIT,
    );
    json.expect(0);
    let object: Value = serde_json::from_str(json.stdout.trim()).expect("one JSON object");
    let left = object["holders"][0]["in_lock_delay_ms"].as_u64();
    assert!(left.is_some_and(|ms| ms <= 5_000), "{object}");
}
