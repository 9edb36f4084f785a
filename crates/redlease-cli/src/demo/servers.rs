//! The demo's local servers: `redis-server` processes (or what
//! `REDLEASE_SERVER` names) on free loopback ports, without persistence,
//! killed when dropped.
//!
//! Not the testkit: it is for tests (a test CA, a fault proxy, a cluster
//! builder...), and linking it made a first `cargo run -- demo` compile
//! dozens of crates the demo never uses.

use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rustix::process;
use tokio::time::{timeout, Instant};

/// How long one server may take to answer; a loaded machine needs seconds.
const READY_TIMEOUT: Duration = Duration::from_secs(5);
/// New ports tried when another process takes ours before the server binds it.
const START_ATTEMPTS: usize = 5;
/// The port a developer's own Redis most likely listens on: never ours.
const RESERVED_PORT: u16 = 6379;

/// The server program: `$REDLEASE_SERVER` (a name on PATH or a path, e.g.
/// `valkey-server`), or `redis-server`, as the tests use.
pub fn program() -> String {
    std::env::var("REDLEASE_SERVER")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "redis-server".to_string())
}

/// Running servers, in order; every one still running is killed on drop.
pub struct Servers {
    servers: Vec<Server>,
}

impl Servers {
    /// Starts `n` servers of `program` and waits until each one answers.
    /// They boot at the same time; on an error, those already started are
    /// stopped.
    pub async fn start(program: &str, n: usize) -> io::Result<Servers> {
        let mut servers = Vec::with_capacity(n);
        for _ in 0..n {
            servers.push(Server::launch(program)?);
        }
        for server in &mut servers {
            server.await_ready(program).await?;
        }
        Ok(Servers { servers })
    }

    /// `redis://127.0.0.1:PORT` for every server, in order.
    pub fn urls(&self) -> Vec<String> {
        self.servers
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}", s.port))
            .collect()
    }

    pub fn ports(&self) -> Vec<u16> {
        self.servers.iter().map(|s| s.port).collect()
    }

    /// SIGKILLs server `i`, as a crash would.
    pub fn kill(&mut self, i: usize) {
        self.servers[i].kill();
    }

    /// How many are still running.
    pub fn running(&mut self) -> usize {
        self.servers
            .iter_mut()
            .map(Server::is_running)
            .filter(|&up| up)
            .count()
    }
}

/// One server process and its own empty directory.
struct Server {
    port: u16,
    child: Option<Child>,
    /// `--dir`: a fresh one, so that no dump.rdb lying in the working
    /// directory is loaded; it also holds the log.
    dir: PathBuf,
}

impl Server {
    /// Spawns the server on a free port without waiting for it.
    fn launch(program: &str) -> io::Result<Server> {
        let mut server = Server {
            port: 0,
            child: None,
            dir: fresh_dir()?,
        };
        server.spawn(program)?;
        Ok(server)
    }

    fn spawn(&mut self, program: &str) -> io::Result<()> {
        self.port = free_port()?;
        let log = self.dir.join("server.log");
        let mut cmd = Command::new(program);
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--dir"])
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // Startup errors are printed before the log file is opened.
            .stderr(std::fs::File::create(self.dir.join("stderr.log"))?)
            // Out of the terminal's process group: Ctrl-C reaches redlease
            // alone, which stops the workers before the servers.
            .process_group(0);
        // A redlease killed outright (SIGKILL, OOM) leaves no server behind:
        // the kernel kills them when the thread that forked them exits, a
        // runtime worker thread, which lives as long as redlease (the demo
        // never blocks one in place).
        let parent = process::getpid();
        // SAFETY: only syscalls that allocate nothing (rustix wraps them
        // without allocating), safe between fork and exec; pre_exec itself
        // has no safe form.
        unsafe {
            cmd.pre_exec(move || {
                process::set_parent_process_death_signal(Some(process::Signal::KILL))?;
                // redlease may have died between fork and prctl.
                if process::getppid() != Some(parent) {
                    return Err(rustix::io::Errno::SRCH.into());
                }
                Ok(())
            });
        }
        self.child = Some(cmd.spawn()?);
        Ok(())
    }

    /// Waits until our process answers on its port; retries on a new port
    /// if it exited (most likely another process took the port first).
    async fn await_ready(&mut self, program: &str) -> io::Result<()> {
        for attempt in 1..=START_ATTEMPTS {
            let deadline = Instant::now() + READY_TIMEOUT;
            while Instant::now() < deadline && self.is_running() {
                if self.answers().await {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            self.kill();
            if attempt < START_ATTEMPTS {
                self.spawn(program)?;
            }
        }
        Err(io::Error::other(format!(
            "{program} did not come up on 127.0.0.1 after {START_ATTEMPTS} attempts; \
             its log ends with:\n{}",
            self.log_tail()
        )))
    }

    /// Whether the server on our port is our child: a PING alone could be
    /// answered by whoever bound the port first.
    async fn answers(&self) -> bool {
        let Some(pid) = self.child.as_ref().map(Child::id) else {
            return false;
        };
        let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{}", self.port)) else {
            return false;
        };
        let info = async {
            let mut con = client.get_multiplexed_async_connection().await?;
            redis::cmd("INFO")
                .arg("server")
                .query_async::<String>(&mut con)
                .await
        };
        match timeout(Duration::from_millis(500), info).await {
            Ok(Ok(info)) => info
                .lines()
                .any(|line| line.trim() == format!("process_id:{pid}")),
            _ => false,
        }
    }

    fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            // Reaped at once: SIGKILL cannot be caught.
            let _ = child.wait();
        }
    }

    fn log_tail(&self) -> String {
        ["server.log", "stderr.log"]
            .iter()
            .filter_map(|name| std::fs::read_to_string(self.dir.join(name)).ok())
            .flat_map(|text| {
                let lines: Vec<String> = text.lines().map(str::to_owned).collect();
                lines[lines.len().saturating_sub(10)..].to_vec()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback port that was free a moment ago, never 6379.
fn free_port() -> io::Result<u16> {
    loop {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        if port != RESERVED_PORT {
            return Ok(port);
        }
    }
}

/// A new empty directory under the system's temporary directory.
fn fresh_dir() -> io::Result<PathBuf> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    loop {
        let dir = std::env::temp_dir().join(format!(
            "redlease-demo-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        match std::fs::create_dir(&dir) {
            // Left by an earlier process with our pid: pick the next name.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            other => return other.map(|()| dir),
        }
    }
}
