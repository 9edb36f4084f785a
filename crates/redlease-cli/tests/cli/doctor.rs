//! `redlease doctor`: flags what breaks locks, passes what does not.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use redlease_testkit::{NodeConfig, RedisNode, RedisNodes};

use crate::support::{redlease, run, server_kind_and_version, Finished};

const LIMIT: Duration = Duration::from_secs(30);

pub fn doctor(urls: &[String]) -> Finished {
    run(
        redlease().args(["doctor", "--nodes", &urls.join(","), "--timeout", "500ms"]),
        LIMIT,
    )
}

/// The table row for `check` on `node` ("0", "all", ...).
pub fn row<'a>(out: &'a Finished, node: &str, check: &str) -> &'a str {
    // Columns are apart by two spaces or more; words in a cell by one.
    let cell = format!("  {check}  ");
    out.stdout
        .lines()
        .find(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            cells.len() > 2 && cells[1] == node && line.contains(&cell)
        })
        .unwrap_or_else(|| panic!("no {check} row for node {node}: {out:#?}"))
}

/// A port where another program listens: like an HTTP server, it answers
/// whatever it is sent with a 400 and hangs up. Serves for at most a
/// minute, and stops when dropped.
pub struct NotRedis {
    port: u16,
    stop: Arc<AtomicBool>,
    server: Option<JoinHandle<()>>,
}

impl NotRedis {
    pub fn start() -> NotRedis {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let port = listener.local_addr().expect("its address").port();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let server = thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stopped.load(Ordering::Relaxed) && Instant::now() < deadline {
                let Ok((mut client, _)) = listener.accept() else {
                    thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let _ = client.set_nonblocking(false);
                let _ = client.set_read_timeout(Some(Duration::from_millis(500)));
                let _ = client.read(&mut [0; 1024]);
                let _ = client.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
            }
        });
        NotRedis {
            port,
            stop,
            server: Some(server),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for NotRedis {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
    }
}

/// Asserts that doctor's output is its table: a title, the header, rows
/// whose DETAIL starts under the header's, fixes under them, a summary.
pub fn assert_table_intact(out: &Finished) {
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].starts_with("redlease doctor: "), "{out:#?}");
    let detail = lines[1].find("DETAIL").expect("a header");
    let summary = lines.last().expect("a summary");
    assert!(
        summary.ends_with(" OK") && summary.contains(" FAIL, "),
        "{out:#?}"
    );
    for line in &lines[2..lines.len() - 1] {
        let (before, after) = line.split_at(detail.min(line.len()));
        let row = ["OK ", "WARN ", "FAIL "]
            .iter()
            .any(|l| before.starts_with(l));
        let fix = before.trim().is_empty() && after.starts_with("fix: ");
        assert!(
            (row || fix) && before.ends_with("  ") && !after.starts_with(' '),
            "a line out of the table: {line:?} in {out:#?}"
        );
    }
}

#[test]
fn doctor_says_a_port_speaks_no_redis_and_keeps_its_table() {
    let other = NotRedis::start();
    let node = RedisNode::start();
    let out = doctor(&[other.url(), node.url(), other.url()]);
    out.expect(1);
    for i in ["0", "2"] {
        let reachable = row(&out, i, "reachable");
        assert!(
            reachable.starts_with("FAIL")
                && reachable
                    .contains("no: does not speak the Redis protocol (is this a Redis port?)"),
            "{reachable}"
        );
    }
    assert!(
        out.stdout.contains("fix: check the port in the URL"),
        "{out:#?}"
    );
    assert!(!out.stdout.contains("Parse error"), "{out:#?}");
    assert!(row(&out, "1", "reachable").starts_with("OK"));
    assert_table_intact(&out);
}

#[test]
fn doctor_flags_an_evicting_node_and_a_server_listed_twice() {
    let plain = RedisNode::start();
    let lru = RedisNode::start_with(NodeConfig::new().arg("maxmemory-policy", "allkeys-lru"));
    // The same server under another name: the library cannot tell, the
    // server's run_id can.
    let alias = format!("redis://localhost:{}", plain.port());
    let out = doctor(&[plain.url(), lru.url(), alias]);
    out.expect(1);

    let eviction = row(&out, "1", "maxmemory-policy");
    assert!(
        eviction.starts_with("FAIL") && eviction.contains("allkeys-lru"),
        "{eviction}"
    );
    assert!(out
        .stdout
        .contains("fix: CONFIG SET maxmemory-policy noeviction"));
    assert!(row(&out, "0", "maxmemory-policy").starts_with("OK"));

    let twice = row(&out, "all", "distinct servers");
    assert!(
        twice.starts_with("FAIL") && twice.contains("node 0 = node 2"),
        "{twice}"
    );
    assert!(out.stdout.contains("FAIL, "), "a summary line: {out:#?}");
}

#[test]
fn doctor_passes_durable_independent_nodes() {
    let nodes = RedisNodes::start_with(
        3,
        NodeConfig::new()
            .arg("appendonly", "yes")
            .arg("appendfsync", "always"),
    );
    let out = doctor(&nodes.urls());
    out.expect(0);
    assert!(out.stdout.contains("0 FAIL, 0 WARN"), "{out:#?}");
    assert!(row(&out, "2", "persistence").starts_with("OK"));
    assert!(row(&out, "all", "clock skew").starts_with("OK"));
}

#[test]
fn doctor_reports_down_and_paused_nodes() {
    let mut nodes = RedisNodes::start(4);
    nodes.node_mut(1).kill();
    nodes.node_mut(2).pause();
    let out = doctor(&nodes.urls());
    nodes.node_mut(2).resume();
    out.expect(1);
    assert!(row(&out, "1", "reachable").starts_with("FAIL"));
    let paused = row(&out, "2", "reachable");
    assert!(
        paused.starts_with("FAIL") && paused.contains("no reply"),
        "{paused}"
    );
    let count = row(&out, "all", "node count");
    assert!(
        count.starts_with("FAIL") && count.contains("2 of 4 reachable"),
        "{count}"
    );
    // Without persistence, a WARN names the delayed-restart rule (the
    // tests run with the restart quarantine off), and one that the
    // quarantine is off.
    let persistence = row(&out, "0", "persistence");
    assert!(persistence.starts_with("WARN"), "{persistence}");
    assert!(out.stdout.contains("longer than your largest TTL"));
    let quarantine = row(&out, "0", "restart quarantine");
    assert!(
        quarantine.starts_with("WARN") && quarantine.contains("off"),
        "{quarantine}"
    );
}

#[test]
fn doctor_names_the_servers_kind_and_version() {
    let node = RedisNode::start();
    let out = doctor(&[node.url()]);
    // Whatever the testkit runs (REDLEASE_SERVER: redis-server by default,
    // or valkey-server), as its --version says.
    let (kind, version) = server_kind_and_version();
    let server = row(&out, "0", "server");
    assert!(
        server.contains(&format!("  {kind} {version}")) && server.contains("standalone"),
        "{server}"
    );
    let major: u32 = version.split('.').next().unwrap().parse().unwrap();
    if kind == "redis" && major < 6 {
        assert!(
            server.starts_with("WARN") && server.contains("older than Redis 6.0"),
            "{server}"
        );
    } else {
        assert!(server.starts_with("OK"), "{server}");
    }
    if kind != "redis" {
        // Valkey keeps the Redis version it is compatible with in INFO.
        assert!(server.contains(" compatible)"), "{server}");
    }
}

#[test]
fn doctor_permits_says_what_a_semaphore_needs_in_the_librarys_words() {
    let nodes = RedisNodes::start(5);
    let urls = nodes.urls();
    let with_permits = |urls: &[String], permits: &str| {
        run(
            redlease().args([
                "doctor",
                "--nodes",
                &urls.join(","),
                "--timeout",
                "500ms",
                "--permits",
                permits,
            ]),
            LIMIT,
        )
    };
    let out = with_permits(&urls, "3");
    let semaphore = row(&out, "all", "semaphore");
    assert!(
        semaphore.starts_with("OK")
            && semaphore.contains(
                "3 permits over 5 nodes: each permit is held on 4 of them, so 1 may fail"
            ),
        "{semaphore}"
    );
    // 2 permits over 3 nodes: no node may fail. Doctor FAILs it with the
    // library's refusal, which run exits 2 with.
    let three = &urls[..3];
    let out = with_permits(three, "2");
    out.expect(1);
    let semaphore = row(&out, "all", "semaphore");
    let refusal = {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let refused = runtime.block_on(async {
            let locker = redlease::Locker::new(three).unwrap();
            let refused = locker.semaphore("jobs", 2).try_acquire().await;
            refused.map(drop)
        });
        match refused {
            Err(redlease::Error::InvalidInput { reason, .. }) => reason,
            other => panic!("not refused: {other:?}"),
        }
    };
    let said = refusal.replace(".allow_no_failures()", "--allow-no-failures");
    assert!(semaphore.starts_with("FAIL"), "{semaphore}");
    assert!(semaphore.contains(&said), "{semaphore} lacks {said}");
    let ran = run(
        redlease()
            .args(["run", "--nodes", &three.join(","), "--key", "jobs"])
            .args(["--permits", "2", "--", "true"]),
        LIMIT,
    );
    ran.expect(2);
    assert!(ran.one_line_error().contains(&said), "{ran:#?}");
    // The advice is an odd number of nodes, as the node count row's.
    assert!(said.contains("Use 5 nodes"), "{said}");
}
