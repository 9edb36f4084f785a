//! Running the `redlease` binary against real redis-server processes, with
//! every wait bounded in time.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redlease::{Lease, Locker};
use redlease_testkit::RedisNode;
use rustix::process::{kill_process, Pid, Signal};

/// How often bounded waits look again.
const POLL: Duration = Duration::from_millis(10);

/// The binary under test, with no node list inherited from the caller's
/// environment (which could point at a shared Redis on 6379), and no
/// RUST_LOG (which would add log lines to stderr). Without the restart
/// quarantine: the tests' servers are brand new, and would otherwise cast
/// no vote for their first TTL (restarts.rs runs with it).
pub fn redlease() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redlease"));
    cmd.env_remove("REDLEASE_NODES")
        .env("REDLEASE_RESTART_QUARANTINE", "0s")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    cmd
}

/// A finished process and what it printed.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| panic!("redlease died of a signal: {self:?}"))
    }

    /// Asserts the exit code, showing the output if it differs.
    pub fn expect(&self, code: i32) -> &Self {
        assert_eq!(self.code(), code, "unexpected exit code: {self:#?}");
        self
    }

    /// Asserts stderr is exactly one line, and returns it.
    pub fn one_line_error(&self) -> &str {
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "stderr is not one line: {self:#?}");
        assert!(lines[0].starts_with("redlease: "), "{self:#?}");
        lines[0]
    }
}

/// Runs `cmd` to the end, at most `limit`.
pub fn run(cmd: &mut Command, limit: Duration) -> Finished {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start redlease");
    finish(child, limit)
}

/// Starts `cmd` with its output captured, to be [`finish`]ed later.
pub fn start(cmd: &mut Command) -> Child {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start redlease")
}

/// Waits for `child` (and the end of its output) at most `limit`; kills
/// it and fails the test if it runs longer.
pub fn finish(mut child: Child, limit: Duration) -> Finished {
    let deadline = Instant::now() + limit;
    // Read on threads, so a full pipe cannot block the child; the text
    // comes back through a channel so that waiting for it is bounded too
    // (a process the command started may hold the pipe open).
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            let _ = tx.send(text);
        });
        rx
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for redlease") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("redlease still ran after {limit:?}");
        }
        thread::sleep(POLL);
    };
    let collect = |rx: mpsc::Receiver<String>, name: &str| {
        let left = deadline.saturating_duration_since(Instant::now());
        rx.recv_timeout(left.max(Duration::from_secs(1)))
            .unwrap_or_else(|_| panic!("redlease exited ({status}) but its {name} stayed open"))
    };
    Finished {
        status,
        stdout: collect(stdout, "stdout"),
        stderr: collect(stderr, "stderr"),
    }
}

/// Polls `condition` until it holds, failing the test after `limit`.
pub fn eventually(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        thread::sleep(POLL);
    }
}

/// Sends `sig` to a child process (our own, unreaped).
pub fn signal(child: &Child, sig: Signal) {
    kill_process(Pid::from_child(child), sig).expect("signal redlease");
}

/// The kind and version of the server program the testkit runs, from its
/// `--version` (`Redis server v=7.0.15 ...`, `Valkey server v=9.1.2 ...`):
/// `("redis", "7.0.15")`.
pub fn server_kind_and_version() -> (String, String) {
    let program = redlease_testkit::server_program();
    let out = Command::new(&program)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("{program} --version: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let kind = text.split_whitespace().next().unwrap_or_default();
    let version = text
        .split_whitespace()
        .find_map(|word| word.strip_prefix("v="))
        .unwrap_or_else(|| panic!("no v= in {program} --version: {text}"));
    (kind.to_lowercase(), version.to_string())
}

/// The Redis key of lock `name` with the default prefix.
pub fn lock_key(name: &str) -> String {
    format!("redlease:{{{name}}}")
}

/// Whether `node` has `key`.
pub fn has_key(node: &RedisNode, key: &str) -> bool {
    let mut con = node
        .client()
        .get_connection()
        .expect("connect to test node");
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(&mut con)
        .expect("EXISTS")
        == 1
}

/// The raw value of `key` on `node` (for lock keys: the secret token).
pub fn get(node: &RedisNode, key: &str) -> Option<String> {
    let mut con = node
        .client()
        .get_connection()
        .expect("connect to test node");
    redis::cmd("GET").arg(key).query(&mut con).expect("GET")
}

/// A lock held by the test itself, through the library, as another
/// machine running `redlease run` would hold it: with fencing on, so it
/// draws a token (and bumps the lock's fencing counter) as `run` does.
pub struct Holder {
    lease: Option<Lease>,
    // Declared after the lease: the lease is released before the runtime
    // its connections live on is dropped.
    _locker: Locker,
    runtime: tokio::runtime::Runtime,
}

impl Holder {
    pub fn take(urls: &[String], name: &str) -> Holder {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let (locker, lease) = runtime.block_on(async {
            let locker = Locker::builder(urls)
                .fencing(true)
                .ttl(Duration::from_secs(30))
                // Brand-new test servers: see `redlease()`.
                .advanced(|a| a.restart_quarantine(Duration::ZERO))
                .build()
                .expect("locker");
            let lease = locker
                .try_lock(name)
                .await
                .expect("the test takes the lock");
            (locker, lease)
        });
        Holder {
            lease: Some(lease),
            _locker: locker,
            runtime,
        }
    }

    pub fn fencing_token(&self) -> u64 {
        self.lease
            .as_ref()
            .expect("held")
            .fencing_token()
            .expect("the holder's Locker draws fencing tokens")
    }

    pub fn release(&mut self) {
        if let Some(lease) = self.lease.take() {
            self.runtime
                .block_on(lease.release())
                .expect("the test releases its lock");
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            let _ = self.runtime.block_on(lease.release());
        }
    }
}

/// The pid a command wrote to `file`, once the line is complete (at most
/// 30 s).
pub fn recorded_pid(file: &std::path::Path) -> u32 {
    eventually(
        Duration::from_secs(30),
        "the command to record a pid",
        || std::fs::read_to_string(file).is_ok_and(|p| p.ends_with('\n')),
    );
    std::fs::read_to_string(file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Whether `pid` is gone (or a zombie, about to be reaped).
pub fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
    })
}

/// The lines a running process prints on stdout, read on a thread so that
/// each wait for one is bounded (`status --watch`, `leader --watch`).
pub struct Lines {
    rx: mpsc::Receiver<String>,
}

impl Lines {
    /// Takes `child`'s stdout: [`finish`] then sees none of it.
    pub fn of(child: &mut Child) -> Lines {
        let stdout = child.stdout.take().expect("stdout piped");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Lines { rx }
    }

    /// The next line, waiting at most `limit` for it.
    pub fn next(&self, limit: Duration) -> String {
        self.rx
            .recv_timeout(limit)
            .unwrap_or_else(|e| panic!("no line within {limit:?}: {e}"))
    }

    /// Lines until one satisfies `found` (returned), within `limit` in all.
    pub fn until(&self, limit: Duration, what: &str, found: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + limit;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) if found(&line) => return line,
                Ok(line) => seen.push(line),
                Err(_) => panic!("no line with {what} within {limit:?}; saw {seen:#?}"),
            }
        }
    }
}
