//! `redlease run`: mutual exclusion across processes, exit codes, the
//! command's environment, lost leases, signals, and releasing at the end.

use std::process::Child;
use std::time::Duration;

use redlease_testkit::{RedisNode, RedisNodes};
use rustix::process::Signal;

use crate::support::{
    eventually, finish, gone, has_key, lock_key, recorded_pid, redlease, run, signal, start, Holder,
};

const LIMIT: Duration = Duration::from_secs(30);

/// `redlease run` against `urls` for lock `key`, flags and command to add.
fn run_cmd(urls: &[String], key: &str) -> std::process::Command {
    let mut cmd = redlease();
    cmd.args(["run", "--nodes", &urls.join(","), "--key", key]);
    cmd
}

#[test]
fn twenty_concurrent_runs_never_lose_an_increment() {
    let nodes = RedisNodes::start(3);
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let tokens = dir.path().join("tokens");
    std::fs::write(&counter, "0\n").unwrap();
    // A read-modify-write with nothing but the lock around it; the pause
    // makes any overlap lose an increment. Each holder logs its token.
    let script = r#"n=$(cat "$COUNTER"); sleep 0.05; echo $((n + 1)) > "$COUNTER"; echo "$REDLEASE_FENCING_TOKEN" >> "$TOKENS""#;
    let children: Vec<Child> = (0..20)
        .map(|_| {
            start(
                run_cmd(&nodes.urls(), "counter")
                    .args(["--wait", "60s", "--", "sh", "-c", script])
                    .env("COUNTER", &counter)
                    .env("TOKENS", &tokens),
            )
        })
        .collect();
    for child in children {
        finish(child, Duration::from_secs(60)).expect(0);
    }
    assert_eq!(std::fs::read_to_string(&counter).unwrap().trim(), "20");
    let tokens: Vec<u64> = std::fs::read_to_string(&tokens)
        .unwrap()
        .lines()
        .map(|t| t.parse().expect("a numeric fencing token"))
        .collect();
    assert_eq!(tokens.len(), 20);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "each holder's fencing token exceeds the previous one: {tokens:?}"
    );
    // Released: a release is confirmed by a quorum; a request to the third
    // node may be cut off when its process exits (that key expires by TTL).
    let holding = nodes
        .iter()
        .filter(|node| has_key(node, &lock_key("counter")))
        .count();
    assert!(holding < 2, "still held on {holding} of 3 nodes");
}

#[test]
fn the_commands_exit_status_is_passed_through() {
    let node = RedisNode::start();
    let urls = [node.url()];
    let dir = tempfile::tempdir().unwrap();

    run(
        run_cmd(&urls, "job").args(["--", "sh", "-c", "exit 7"]),
        LIMIT,
    )
    .expect(7);
    run(run_cmd(&urls, "job").args(["--", "true"]), LIMIT).expect(0);
    // Died of SIGTERM: 128 + 15, as a shell reports it.
    run(
        run_cmd(&urls, "job").args(["--", "sh", "-c", "kill -TERM $$"]),
        LIMIT,
    )
    .expect(143);

    let missing = run(
        run_cmd(&urls, "job").args(["--", "no-such-command-here"]),
        LIMIT,
    );
    missing.expect(127);
    assert!(missing.one_line_error().contains("command not found"));

    let not_executable = dir.path().join("data.txt");
    std::fs::write(&not_executable, "not a program").unwrap();
    let denied = run(run_cmd(&urls, "job").arg("--").arg(&not_executable), LIMIT);
    denied.expect(126);
    denied.one_line_error();

    assert!(
        !has_key(&node, &lock_key("job")),
        "released after every run"
    );
}

#[test]
fn the_command_gets_its_key_and_a_growing_fencing_token() {
    let node = RedisNode::start();
    let urls = [node.url()];
    let show = r#"echo "$REDLEASE_KEY $REDLEASE_FENCING_TOKEN""#;
    let first = run(
        run_cmd(&urls, "env-check").args(["--", "sh", "-c", show]),
        LIMIT,
    );
    first.expect(0);
    let second = run(
        run_cmd(&urls, "env-check").args(["--", "sh", "-c", show]),
        LIMIT,
    );
    second.expect(0);
    let parse = |out: &str| -> (String, u64) {
        let (key, token) = out.trim().split_once(' ').expect("key and token");
        (key.to_string(), token.parse().expect("numeric token"))
    };
    let (key1, token1) = parse(&first.stdout);
    let (key2, token2) = parse(&second.stdout);
    assert_eq!((key1.as_str(), key2.as_str()), ("env-check", "env-check"));
    assert!(token2 > token1, "{token2} > {token1}");
}

#[test]
fn a_held_lock_gives_the_conflict_code_and_the_command_does_not_run() {
    let nodes = RedisNodes::start(3);
    let urls = nodes.urls();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let touch = ["--", "touch", marker.to_str().unwrap()];
    let mut holder = Holder::take(&urls, "busy");

    let busy = run(run_cmd(&urls, "busy").arg("--no-wait").args(touch), LIMIT);
    busy.expect(1);
    let by = format!("held by {} for ", redlease::default_owner());
    assert!(busy.one_line_error().contains(&by), "{busy:#?}");

    let quiet = run(
        run_cmd(&urls, "busy")
            .args(["--no-wait", "--quiet", "--conflict-exit-code", "9"])
            .args(touch),
        LIMIT,
    );
    quiet.expect(9);
    assert_eq!(quiet.stderr, "", "--quiet says nothing on conflict");

    let waited = run(
        run_cmd(&urls, "busy").args(["--wait", "300ms"]).args(touch),
        LIMIT,
    );
    waited.expect(1);
    assert!(waited.one_line_error().contains("after waiting"));
    assert!(
        !marker.exists(),
        "the command never ran while the lock was held"
    );

    holder.release();
    run(run_cmd(&urls, "busy").arg("--no-wait").args(touch), LIMIT).expect(0);
    assert!(marker.exists());
}

#[test]
fn a_waiting_run_starts_once_the_holder_releases() {
    let node = RedisNode::start();
    let urls = [node.url()];
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let mut holder = Holder::take(&urls, "queue");
    let held_token = holder.fencing_token();

    let waiter = start(
        run_cmd(&urls, "queue")
            .args(["--wait", "20s", "--", "sh", "-c"])
            .arg(r#"echo "$REDLEASE_FENCING_TOKEN" > "$MARKER""#)
            .env("MARKER", &marker),
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(!marker.exists(), "the command waits while the lock is held");
    holder.release();
    finish(waiter, LIMIT).expect(0);
    let token: u64 = std::fs::read_to_string(&marker)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(token > held_token, "{token} > {held_token}");
}

#[test]
fn a_lost_lease_stops_the_command_and_exits_75() {
    let mut node = RedisNode::start();
    let urls = [node.url()];
    let dir = tempfile::tempdir().unwrap();
    let (started, stopped) = (dir.path().join("started"), dir.path().join("stopped"));
    // Handles SIGTERM by noting it; would otherwise sleep 30 s.
    let script = r#"trap 'echo term > "$STOPPED"; exit 0' TERM; touch "$STARTED"; sleep 30 & wait"#;
    let child = start(
        run_cmd(&urls, "fragile")
            .args(["--ttl", "1s", "--", "sh", "-c", script])
            .env("STARTED", &started)
            .env("STOPPED", &stopped),
    );
    eventually(LIMIT, "the command to start", || started.exists());
    node.pause(); // renewals go unanswered: the lease runs out
                  // Well before the command's own 30 s would end it.
    let ended = finish(child, Duration::from_secs(20));
    node.resume();
    ended.expect(75);
    assert!(ended.stderr.contains("lost the lock"), "{ended:#?}");
    assert_eq!(std::fs::read_to_string(&stopped).unwrap().trim(), "term");
}

#[test]
fn a_command_that_ignores_sigterm_gets_sigkill_with_its_children() {
    let mut node = RedisNode::start();
    let urls = [node.url()];
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    // Both the shell and its child ignore SIGTERM. The child lets go of
    // the output pipes, so only its own fate is measured.
    let script = r#"trap '' TERM; sleep 30 >/dev/null 2>&1 & echo $! > "$PIDS"; wait"#;
    let child = start(
        run_cmd(&urls, "stubborn")
            .args(["--ttl", "1s", "--grace", "500ms", "--", "sh", "-c", script])
            .env("PIDS", &pids),
    );
    let grandchild = recorded_pid(&pids);
    node.kill();
    let ended = finish(child, Duration::from_secs(20));
    ended.expect(75);
    assert!(ended.stderr.contains("sent SIGKILL"), "{ended:#?}");
    eventually(
        Duration::from_secs(5),
        "the command's child to be gone",
        || gone(grandchild),
    );
}

#[test]
fn signals_are_passed_on_and_the_lock_released_before_exit() {
    let node = RedisNode::start();
    let urls = [node.url()];
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    // Ready once the background sleep is started, and that sleep lets go
    // of the output pipes: a SIGTERM that lands while the shell is still
    // forking it can be swallowed by the child's inherited trap before the
    // exec, and the sleep would then hold the pipes open for 30 s.
    let script = r#"trap 'exit 42' TERM; sleep 30 >/dev/null 2>&1 & touch "$READY"; wait"#;
    let child = start(
        run_cmd(&urls, "signalled")
            .args(["--", "sh", "-c", script])
            .env("READY", &ready),
    );
    eventually(LIMIT, "the command to start", || ready.exists());
    assert!(has_key(&node, &lock_key("signalled")));
    signal(&child, Signal::TERM);
    finish(child, LIMIT).expect(42);
    assert!(
        !has_key(&node, &lock_key("signalled")),
        "released before redlease exited"
    );

    // A command that does not handle SIGINT dies of it: 128 + 2.
    std::fs::remove_file(&ready).unwrap();
    let child = start(
        run_cmd(&urls, "signalled")
            .args(["--", "sh", "-c", r#"touch "$READY"; exec sleep 30"#])
            .env("READY", &ready),
    );
    eventually(LIMIT, "the command to start", || ready.exists());
    signal(&child, Signal::INT);
    finish(child, LIMIT).expect(130);
    assert!(!has_key(&node, &lock_key("signalled")));
}

#[test]
fn a_stop_signal_is_followed_by_sigkill_after_the_grace() {
    let node = RedisNode::start();
    let urls = [node.url()];
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    // The shell and its child both ignore SIGTERM (an ignored signal stays
    // ignored in the child); the child lets go of the output pipes.
    let script = r#"trap '' TERM; sleep 60 >/dev/null 2>&1 & echo $! > "$PIDS"; wait"#;
    let child = start(
        run_cmd(&urls, "deaf")
            .args(["--grace", "500ms", "--", "sh", "-c", script])
            .env("PIDS", &pids),
    );
    let grandchild = recorded_pid(&pids);
    signal(&child, Signal::TERM);
    // Far less than the minute the command would take.
    let ended = finish(child, Duration::from_secs(10));
    ended.expect(128 + Signal::KILL.as_raw());
    assert!(
        ended
            .stderr
            .contains("did not exit within 500ms of SIGTERM; sent SIGKILL"),
        "{ended:#?}"
    );
    assert!(
        !has_key(&node, &lock_key("deaf")),
        "released before redlease exited"
    );
    eventually(
        Duration::from_secs(5),
        "the command's child to be gone",
        || gone(grandchild),
    );
}

/// Runs `sh -c` a script that ends when `$STOP` exists (at most 20 s),
/// kills node 2 of 3 once it started, lets renewals fail for two seconds,
/// and returns what redlease said.
fn run_through_a_node_death(extra: &[&str]) -> (crate::support::Finished, String) {
    let mut nodes = RedisNodes::start(3);
    let dir = tempfile::tempdir().unwrap();
    let (ready, stop) = (dir.path().join("ready"), dir.path().join("stop"));
    let script = r#"touch "$READY"; i=0; while [ ! -e "$STOP" ] && [ $i -lt 1000 ]; do sleep 0.02; i=$((i+1)); done"#;
    let child = start(
        run_cmd(&nodes.urls(), "bumpy")
            .args(["--ttl", "1s"])
            .args(extra)
            .args(["--", "sh", "-c", script])
            .env("READY", &ready)
            .env("STOP", &stop),
    );
    eventually(LIMIT, "the command to start", || ready.exists());
    let dead = nodes.node(2).addr();
    nodes.node_mut(2).kill();
    // Six renewal rounds (every third of the TTL) to the dead node.
    std::thread::sleep(Duration::from_secs(2));
    std::fs::write(&stop, "").unwrap();
    let ended = finish(child, LIMIT);
    ended.expect(0);
    (ended, dead)
}

#[test]
fn a_node_that_dies_under_a_run_is_reported_once() {
    let (ended, dead) = run_through_a_node_death(&[]);
    let lines: Vec<&str> = ended.stderr.lines().filter(|l| l.contains(&dead)).collect();
    assert_eq!(lines.len(), 1, "{ended:#?}");
    assert!(
        lines[0].starts_with("redlease: warning: renewals to a node are failing: node 2"),
        "{ended:#?}"
    );

    let (quiet, dead) = run_through_a_node_death(&["--quiet"]);
    assert!(!quiet.stderr.contains(&dead), "{quiet:#?}");
    assert_eq!(quiet.stderr, "", "{quiet:#?}");
}

#[test]
fn a_ttl_too_short_to_keep_is_warned_about_before_running() {
    let node = RedisNode::start();
    let urls = [node.url()];
    let warned = |out: &crate::support::Finished| {
        out.stderr
            .lines()
            .filter(|l| l.contains("too short to keep"))
            .count()
    };
    // However the run ends (a lease this short may well be lost), the
    // warning came once, naming the TTL and the rule.
    let short = run(
        run_cmd(&urls, "brief").args(["--ttl", "60ms", "--", "true"]),
        LIMIT,
    );
    assert_eq!(warned(&short), 1, "{short:#?}");
    assert!(
        short.stderr.starts_with(
            "redlease: warning: --ttl 60ms is too short to keep: the lease is renewed every"
        ),
        "{short:#?}"
    );
    assert!(short.stderr.contains("150ms or more"), "{short:#?}");

    let quiet = run(
        run_cmd(&urls, "brief").args(["--ttl", "60ms", "--quiet", "--", "true"]),
        LIMIT,
    );
    assert_eq!(warned(&quiet), 0, "{quiet:#?}");

    let fine = run(
        run_cmd(&urls, "brief").args(["--ttl", "10s", "--", "true"]),
        LIMIT,
    );
    fine.expect(0);
    assert_eq!(fine.stderr, "", "{fine:#?}");
}

#[test]
fn unreachable_nodes_exit_69_without_running_the_command() {
    let mut node = RedisNode::start();
    let urls = [node.url()];
    node.kill();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    // Without --wait (which rides an outage out, see outage.rs): nobody
    // holds the lock and the nodes are gone, which waiting without a limit
    // would hide, for ever if the address is wrong.
    let ended = run(
        run_cmd(&urls, "nowhere").args(["--", "touch"]).arg(&marker),
        LIMIT,
    );
    ended.expect(69);
    assert!(ended.one_line_error().contains("no quorum"));
    assert!(!marker.exists());
}

/// The first attempt says why the connection failed, not that one failed
/// "moments ago" (run's look at the servers before locking starts no
/// back-off).
#[test]
fn the_first_connection_failure_gives_its_real_cause() {
    let mut node = RedisNode::start();
    let urls = [node.url()];
    node.kill();
    let ended = run(
        run_cmd(&urls, "nowhere").args(["--no-wait", "--", "true"]),
        LIMIT,
    );
    ended.expect(69);
    let error = ended.one_line_error();
    assert!(error.contains("Connection refused"), "{ended:#?}");
    assert!(!error.contains("moments ago"), "{ended:#?}");
    assert!(!error.contains("next try in"), "{ended:#?}");
}

#[test]
fn a_wait_that_times_out_says_why_the_last_attempt_failed() {
    let mut nodes = RedisNodes::start(3);
    let urls = nodes.urls();
    // Another owner's key on node 0 and node 2 down: every attempt gets
    // one node, short of the quorum of 2. Someone holds the lock somewhere,
    // so redlease waits, until --wait runs out.
    let mut con = nodes.node(0).client().get_connection().unwrap();
    redis::cmd("SET")
        .arg(lock_key("half"))
        .arg("someone-else")
        .arg("PX")
        .arg(30_000)
        .query::<()>(&mut con)
        .unwrap();
    nodes.node_mut(2).kill();
    let ended = run(
        run_cmd(&urls, "half").args(["--wait", "500ms", "--", "true"]),
        LIMIT,
    );
    ended.expect(69);
    let line = ended.one_line_error();
    // The timeout, then its cause (the last attempt's error), which the
    // timeout keeps only as its source().
    assert!(line.contains("gave up waiting"), "{line}");
    assert!(line.contains("reached no quorum"), "{line}");
    assert!(line.contains("the command was not run"), "{line}");
}

/// `GET /metrics` from `addr`, as text (None while nothing answers).
fn scrape(addr: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    Some(text)
}

#[test]
fn metrics_addr_serves_the_locks_metrics_while_the_command_runs() {
    let nodes = RedisNodes::start(3);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let child = start(
        run_cmd(&nodes.urls(), "metered")
            .args(["--ttl", "600ms", "--metrics-addr", &addr])
            .args(["--", "sleep", "2"]),
    );
    let mut text = String::new();
    eventually(Duration::from_secs(10), "metrics after a renewal", || {
        text = scrape(&addr).unwrap_or_default();
        text.contains("redlease_renewals_total")
    });
    assert!(
        text.starts_with("HTTP/1.") && text.contains(" 200 "),
        "{text}"
    );
    assert!(
        text.contains(r#"redlease_operations_total{op="acquire",outcome="ok"} 1"#),
        "{text}"
    );
    assert!(text.contains("redlease_leases_held 1"), "{text}");
    finish(child, LIMIT).expect(0);

    // A port already taken is a usage error, before any lock is taken.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap().to_string();
    let out = run(
        run_cmd(&nodes.urls(), "metered").args(["--metrics-addr", &busy, "--", "true"]),
        LIMIT,
    );
    out.expect(2);
    assert!(
        out.one_line_error().contains("cannot serve metrics"),
        "{out:#?}"
    );
    assert!(!nodes.iter().any(|node| has_key(node, &lock_key("metered"))));
}

/// `run --durable N` without `--wait` waits for the replicas as for a busy
/// lock: while the primary's replica does not acknowledge (stopped here;
/// after a failover, not synced yet), each write falls short and is
/// undone, and the command runs once the replica acknowledges again.
/// (Before, `run` exited 69 at the first write.)
#[test]
fn a_durable_run_waits_for_a_replica_to_acknowledge() {
    let primary = RedisNode::start();
    let mut replica = RedisNode::start_with(
        redlease_testkit::NodeConfig::new()
            .arg("replicaof", &format!("127.0.0.1 {}", primary.port())),
    );
    eventually(Duration::from_secs(10), "the replica to sync", || {
        let mut con = replica.client().get_connection().expect("connect");
        redis::cmd("INFO")
            .arg("replication")
            .query::<String>(&mut con)
            .expect("INFO")
            .contains("master_link_status:up")
    });
    replica.pause();
    let mut child =
        start(run_cmd(&[primary.url()], "durable").args(["--durable", "1", "--", "true"]));
    std::thread::sleep(Duration::from_millis(1500));
    let early = child.try_wait().expect("look at redlease");
    replica.resume();
    let ran = finish(child, LIMIT);
    assert!(
        early.is_none(),
        "gave up while the replica was away: {ran:#?}"
    );
    ran.expect(0);
    assert!(!has_key(&primary, &lock_key("durable")), "released");
    // Said once, at the default verbosity: the wait is not silent.
    let said = ran
        .stderr
        .lines()
        .filter(|l| l.contains("waiting for replicas to acknowledge"))
        .count();
    assert_eq!(said, 1, "{ran:#?}");
}

#[test]
fn a_killed_run_keeps_the_lock_for_its_lock_delay_and_a_finished_one_does_not() {
    let node = RedisNode::start();
    let urls = [node.url()];
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let flags = ["--ttl", "1s", "--lock-delay", "4s"];
    // A run that finishes releases at once, lock-delay or not.
    run(
        run_cmd(&urls, "delayed").args(flags).args(["--", "true"]),
        LIMIT,
    )
    .expect(0);
    run(
        run_cmd(&urls, "delayed").args(["--no-wait", "--", "true"]),
        LIMIT,
    )
    .expect(0);

    let child = start(
        run_cmd(&urls, "delayed")
            .args(flags)
            .args(["--", "sh", "-c", r#"touch "$STARTED"; sleep 60"#])
            .env("STARTED", &started),
    );
    eventually(LIMIT, "the command to start", || started.exists());
    signal(&child, Signal::KILL);
    let killed = std::time::Instant::now();
    finish(child, LIMIT);
    // Past the TTL since its last renewal, within the lock-delay: still
    // nobody else's.
    std::thread::sleep(Duration::from_millis(1500));
    let refused = run(
        run_cmd(&urls, "delayed").args(["--no-wait", "--", "true"]),
        LIMIT,
    );
    assert!(
        killed.elapsed() < Duration::from_secs(4),
        "too slow to judge: {:?}",
        killed.elapsed()
    );
    refused.expect(1);
    run(
        run_cmd(&urls, "delayed").args(["--wait", "20s", "--", "true"]),
        LIMIT,
    )
    .expect(0);
}
