//! `redlease run` under injected network faults: each node reached through
//! the testkit's TCP fault proxy, which the test cuts and heals.
//!
//! - A command whose quorum is cut away is dead (SIGKILL if need be) before
//!   the lease's validity ends, so before another client's command starts,
//!   whatever `--grace` says: processes that log timestamps show it.
//! - Within `--wait`, nodes that cannot be reached are waited for (said
//!   once), and exit 69 comes only when the wait is over.

use std::time::{Duration, Instant};

use redlease_testkit::proxy::{Mode, Proxy};
use redlease_testkit::RedisNodes;

use crate::support::{eventually, finish, redlease, start, Finished};

const LIMIT: Duration = Duration::from_secs(30);

/// A proxy in front of each node, on a runtime of their own.
struct Links {
    // Before the runtime: the proxies' tasks end before it goes.
    proxies: Vec<Proxy>,
    _runtime: tokio::runtime::Runtime,
}

impl Links {
    fn start(nodes: &RedisNodes) -> Links {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let proxies = {
            let _in = runtime.enter();
            nodes
                .iter()
                .map(|node| Proxy::start(&node.addr()))
                .collect()
        };
        Links {
            proxies,
            _runtime: runtime,
        }
    }

    /// The nodes, as a client behind the proxies reaches them.
    fn nodes(&self) -> String {
        let urls: Vec<String> = self.proxies.iter().map(Proxy::url).collect();
        urls.join(",")
    }

    /// The address node `i` has behind the proxy, as messages name it.
    fn addr(&self, i: usize) -> String {
        self.proxies[i].addr()
    }

    fn set(&self, which: &[usize], mode: Mode) {
        for &i in which {
            self.proxies[i].set(mode);
        }
    }
}

/// The `(word, nanoseconds)` lines a command logged with `date +%s%N`.
fn stamps(log: &std::path::Path) -> Vec<(String, u128)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let (word, at) = line.split_once(' ')?;
            Some((word.to_string(), at.trim().parse().ok()?))
        })
        .collect()
}

/// The first time `word` was logged in `log`.
fn stamp(log: &std::path::Path, word: &str) -> Option<u128> {
    stamps(log)
        .into_iter()
        .find_map(|(w, at)| (w == word).then_some(at))
}

/// What one round of a holder cut off from its quorum left behind.
struct Round {
    /// The holder behind the proxies.
    cut: Finished,
    /// What its command logged.
    log: Vec<(String, u128)>,
    /// When the contender's command started.
    next: u128,
}

/// The command of the holder that is cut off: it logs `start`, then a
/// heartbeat that ignores SIGTERM (only SIGKILL stops it: what a command
/// leaves behind in its group), and handles SIGTERM with `on_term`.
fn holder_script(on_term: &str) -> String {
    format!(
        r#"(trap '' TERM; while :; do echo "beat $(date +%s%N)" >> "$LOG"; sleep 0.02; done) >/dev/null 2>&1 &
trap '{on_term}' TERM
echo "start $(date +%s%N)" >> "$LOG"
sleep 60 >/dev/null 2>&1 &
wait"#
    )
}

/// A `redlease run --ttl 3s` whose command runs `on_term` on SIGTERM holds
/// the lock over 3 nodes, each reached through a proxy; a contender that
/// reaches them directly waits for it. Two of the holder's links are then
/// cut (blackholed): the holder keeps one node, the contender a majority.
fn round(key: &str, on_term: &str) -> Round {
    let nodes = RedisNodes::start(3);
    let links = Links::start(&nodes);
    let dir = tempfile::tempdir().unwrap();
    let (log, next) = (dir.path().join("log"), dir.path().join("next"));
    let holder = start(
        redlease()
            .args(["run", "--nodes", &links.nodes(), "--key", key])
            .args(["--ttl", "3s", "--", "sh", "-c", &holder_script(on_term)])
            .env("LOG", &log),
    );
    eventually(LIMIT, "the holder's command to start", || {
        stamp(&log, "start").is_some()
    });
    let direct = nodes.urls().join(",");
    let contender = start(
        redlease()
            .args(["run", "--nodes", &direct, "--key", key])
            .args(["--ttl", "3s", "--wait", "20s", "--", "sh", "-c"])
            .arg(r#"echo "next $(date +%s%N)" >> "$NEXT""#)
            .env("NEXT", &next),
    );
    links.set(&[1, 2], Mode::Blackhole);
    let cut = finish(holder, LIMIT);
    finish(contender, LIMIT).expect(0);
    Round {
        cut,
        log: stamps(&log),
        next: stamp(&next, "next").expect("the contender's command ran"),
    }
}

impl Round {
    /// Asserts that nothing of the holder's command ran once the
    /// contender's had started.
    fn no_overlap(&self) {
        let last = self.log.iter().map(|(_, at)| *at).max().unwrap();
        assert!(
            last < self.next,
            "the cut-off command ran {} ms after the next holder's started: {:?}, next {}; {:#?}",
            (last - self.next) / 1_000_000,
            self.log.iter().rev().take(5).collect::<Vec<_>>(),
            self.next,
            self.cut
        );
        assert!(
            self.log.iter().filter(|(w, _)| w == "beat").count() > 10,
            "the heartbeat ran: {:?}",
            self.log
        );
    }

    fn at(&self, word: &str) -> Option<u128> {
        self.log
            .iter()
            .find_map(|(w, at)| (w == word).then_some(*at))
    }
}

#[test]
fn a_command_slow_to_stop_is_killed_before_the_next_holder_starts() {
    // Two seconds to shut down: more than the third of the TTL it gets,
    // far less than the 5 s --grace.
    let round = round(
        "slow-stop",
        r#"echo "term $(date +%s%N)" >> "$LOG"; sleep 2; echo "late $(date +%s%N)" >> "$LOG"; exit 0"#,
    );
    round.cut.expect(75);
    round.no_overlap();
    let term = round.at("term").expect("the command got SIGTERM");
    assert_eq!(round.at("late"), None, "killed before its shutdown ended");
    // SIGTERM came a third of the TTL before the kill, and so at least
    // that long before the next holder could start.
    assert!(
        round.next - term > 500_000_000,
        "SIGTERM only {} ms before the next holder started",
        (round.next - term) / 1_000_000
    );
    let err = &round.cut.stderr;
    assert!(err.contains("are not getting through"), "{err}");
    assert!(
        err.contains("valid for") && err.contains("; sent SIGKILL, so that nothing"),
        "{err}"
    );
    assert!(err.contains("lost the lock \"slow-stop\""), "{err}");
}

#[test]
fn a_command_quick_to_stop_finishes_its_shutdown_before_the_next_holder() {
    let round = round(
        "quick-stop",
        r#"echo "term $(date +%s%N)" >> "$LOG"; sleep 0.3; echo "late $(date +%s%N)" >> "$LOG"; exit 0"#,
    );
    // It exited in time; the lease was lost after that, and said so.
    round.cut.expect(75);
    round.no_overlap();
    let (term, late) = (round.at("term").unwrap(), round.at("late"));
    let late = late.expect("the command finished its shutdown");
    assert!(late > term);
    let err = &round.cut.stderr;
    assert!(err.contains("are not getting through"), "{err}");
    assert!(
        err.contains("lost the lock \"quick-stop\"") && err.contains("after the command exited"),
        "{err}"
    );
    // The heartbeat it left behind ignores SIGTERM: killed all the same.
    assert!(err.contains("processes it started"), "{err}");
}

#[test]
fn a_wait_rides_out_nodes_cut_off_at_its_start() {
    let nodes = RedisNodes::start(3);
    let links = Links::start(&nodes);
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    links.set(&[0, 1, 2], Mode::Blackhole);
    let mut child = start(
        redlease()
            .args(["run", "--nodes", &links.nodes(), "--key", "outage"])
            .args(["--wait", "20s", "--", "sh", "-c", r#"touch "$RAN"; exit 7"#])
            .env("RAN", &ran),
    );
    // Longer than the first attempt takes to fail.
    std::thread::sleep(Duration::from_millis(2_500));
    let early = child.try_wait().expect("look at redlease");
    links.set(&[0, 1, 2], Mode::Pass);
    let ended = finish(child, LIMIT);
    assert!(
        early.is_none(),
        "gave up while the nodes were cut: {ended:#?}"
    );
    // The command's own exit: it ran, under the lock, after the heal.
    ended.expect(7);
    assert!(ran.exists());
    let said: Vec<&str> = ended
        .stderr
        .lines()
        .filter(|l| l.contains("trying again until --wait 20.0s is over"))
        .collect();
    assert_eq!(said.len(), 1, "said once: {ended:#?}");
    for i in 0..3 {
        assert!(said[0].contains(&links.addr(i)), "{ended:#?}");
    }
}

#[test]
fn a_wait_on_nodes_that_stay_cut_exits_69_when_it_is_over() {
    let nodes = RedisNodes::start(3);
    let links = Links::start(&nodes);
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    // Two of three cut for good: refused (reset) and silent.
    links.set(&[1], Mode::Reset);
    links.set(&[2], Mode::Blackhole);
    let began = Instant::now();
    let ended = finish(
        start(
            redlease()
                .args(["run", "--nodes", &links.nodes(), "--key", "gone"])
                .args(["--wait", "2s", "--", "touch"])
                .arg(&ran),
        ),
        LIMIT,
    );
    let took = began.elapsed();
    ended.expect(69);
    assert!(!ran.exists(), "the command did not run");
    // Not after the first attempt: after the wait.
    assert!(took >= Duration::from_secs(2), "{took:?}: {ended:#?}");
    let lines: Vec<&str> = ended.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "the note, then the exit: {ended:#?}");
    assert!(
        lines[0].contains("trying again until --wait 2.0s is over"),
        "{ended:#?}"
    );
    // The whole wait, first attempt included.
    assert!(
        lines[1].starts_with("redlease: gave up waiting for \"gone\" after 2."),
        "{ended:#?}"
    );
    assert!(lines[1].contains("the command was not run"), "{ended:#?}");
    for line in &lines {
        for i in [1, 2] {
            assert!(line.contains(&links.addr(i)), "node {i}: {ended:#?}");
        }
        assert!(!line.contains(&links.addr(0)), "node 0 answers: {line}");
    }

    // acquire --wait too.
    let began = Instant::now();
    let acquired = crate::support::run(
        redlease()
            .args(["acquire", "--nodes", &links.nodes(), "--key", "gone"])
            .args(["--wait", "1s"]),
        LIMIT,
    );
    let took = began.elapsed();
    acquired.expect(69);
    assert!(took >= Duration::from_secs(1), "{took:?}: {acquired:#?}");
    assert_eq!(acquired.stdout, "", "no handle: {acquired:#?}");
    assert!(
        acquired
            .stderr
            .contains("trying again until --wait 1.0s is over"),
        "{acquired:#?}"
    );
    assert!(
        acquired.stderr.contains("nothing was acquired"),
        "{acquired:#?}"
    );
}

/// The SIGTERM for a lease running out is no report of a lost lease: a
/// renewal that gets through after it keeps the lease, and the run ends
/// as the command does.
#[test]
fn a_renewal_after_the_sigterm_keeps_the_lease() {
    let nodes = RedisNodes::start(3);
    let links = Links::start(&nodes);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = r#"trap 'echo "term $(date +%s%N)" >> "$LOG"; exit 0' TERM
echo "start $(date +%s%N)" >> "$LOG"
sleep 60 >/dev/null 2>&1 &
wait"#;
    // 6 s: SIGTERM 2 s before the kill-by time, room for a renewal.
    let holder = start(
        redlease()
            .args(["run", "--nodes", &links.nodes(), "--key", "healed"])
            .args(["--ttl", "6s", "--", "sh", "-c", script])
            .env("LOG", &log),
    );
    eventually(LIMIT, "the command to start", || {
        stamp(&log, "start").is_some()
    });
    links.set(&[1, 2], Mode::Blackhole);
    eventually(LIMIT, "the command to be told to stop", || {
        stamp(&log, "term").is_some()
    });
    links.set(&[1, 2], Mode::Pass);
    let ended = finish(holder, LIMIT);
    ended.expect(0);
    assert!(
        ended.stderr.contains("are not getting through"),
        "{ended:#?}"
    );
    assert!(
        ended
            .stderr
            .contains("got through again after the command was told to stop"),
        "{ended:#?}"
    );
    assert!(!ended.stderr.contains("lost the lock"), "{ended:#?}");
    assert!(
        !nodes
            .iter()
            .any(|node| crate::support::has_key(node, &crate::support::lock_key("healed"))),
        "released"
    );
}
