//! Low-level process plumbing: spawning `redis-server`, signals, readiness.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::{self, Pid, Signal, WaitId, WaitIdOptions};

use crate::{faketime, netns, NodeConfig};

/// How often bounded waits re-check their condition.
pub(crate) const POLL: Duration = Duration::from_millis(10);

/// Name of the log file inside a node's directory.
pub(crate) const LOG_FILE: &str = "redis.log";

/// Where the child's stderr goes: config errors are printed there, not logged.
const STDERR_FILE: &str = "stderr.log";

/// The port a shared, developer-owned Redis may be listening on.
const RESERVED_PORT: u16 = 6379;

/// Returns a loopback port that was free a moment ago (never 6379).
pub(crate) fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local_addr").port();
        if port != RESERVED_PORT {
            return port;
        }
    }
}

/// The server program: `$REDLEASE_SERVER` (a name on PATH or a path, e.g.
/// `valkey-server`), or `redis-server`.
pub(crate) fn server_program() -> String {
    std::env::var("REDLEASE_SERVER")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "redis-server".to_string())
}

/// Starts the server program on `port` with its files in `dir`; does not
/// wait for it.
///
/// Panics with an install hint if the program is not found.
pub(crate) fn spawn_redis(
    port: u16,
    bus_port: Option<u16>,
    dir: &Path,
    config: &NodeConfig,
) -> io::Result<Child> {
    assert_ne!(port, RESERVED_PORT, "refusing to use port {RESERVED_PORT}");
    // A stale log would make `wait_ready` believe a previous run is this one.
    match std::fs::remove_file(dir.join(LOG_FILE)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    // A TLS node listens on `port` with TLS only (its plain port is 0). The
    // tls-* settings are left out otherwise: a server built without TLS
    // (some Valkey builds) refuses them.
    let plain = if config.tls.is_some() { 0 } else { port };
    // A Sentinel reads (and rewrites) a config file given first.
    let mut args: Vec<String> = Vec::new();
    if let Some(text) = &config.sentinel {
        let file = dir.join("sentinel.conf");
        std::fs::write(&file, text)?;
        args.push(file.to_string_lossy().into_owned());
        args.push("--sentinel".to_string());
    }
    args.extend(
        [
            "--port",
            &plain.to_string(),
            "--bind",
            "127.0.0.1",
            "--dir",
            &dir.to_string_lossy(),
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--logfile",
            &dir.join(LOG_FILE).to_string_lossy(),
        ]
        .iter()
        .map(|s| s.to_string()),
    );

    if let Some((pki, auth)) = &config.tls {
        let file = |name: &str, pem: &str| -> io::Result<String> {
            let path = dir.join(name);
            std::fs::write(&path, pem)?;
            Ok(path.to_string_lossy().into_owned())
        };
        let auth = match auth {
            crate::ClientAuth::Required => "yes",
            crate::ClientAuth::None => "no",
        };
        for (name, value) in [
            ("--tls-port", port.to_string()),
            ("--tls-cert-file", file("server.crt", &pki.server_cert_pem)?),
            ("--tls-key-file", file("server.key", &pki.server_key_pem)?),
            ("--tls-ca-cert-file", file("ca.crt", pki.ca_pem())?),
            ("--tls-auth-clients", auth.to_string()),
        ] {
            args.push(name.to_string());
            args.push(value);
        }
    }
    if let Some(bus) = bus_port {
        args.push("--cluster-port".to_string());
        args.push(bus.to_string());
    }
    // Last occurrence wins in redis, so user args override the defaults above.
    for (name, value) in &config.args {
        args.push(format!("--{name}"));
        args.push(value.clone());
    }
    let stderr = std::fs::File::create(dir.join(STDERR_FILE))?;
    let program = server_program();
    let shown = program.clone();
    // Looked up here: a missing library panics in the caller's thread, not
    // on the spawner thread.
    let fake_clock = config
        .fake_clock
        .then(|| (faketime::library(), dir.to_path_buf()));
    // The caller's network namespace: the server joins it (a thread in a
    // `Netns` gets its servers there), whichever namespace the spawner is in.
    let caller_ns = netns::thread_netns().ok();
    let result = on_spawner_thread(move || {
        let mut cmd = Command::new(program);
        if let Some(ns) = &caller_ns {
            let ours = netns::thread_netns().ok();
            if netns::inode_of(ns.as_fd()) != ours.as_ref().and_then(|o| netns::inode_of(o.as_fd()))
            {
                netns::enter_before_exec(&mut cmd, ns.as_raw_fd());
            }
        }
        cmd.args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        if let Some((library, dir)) = &fake_clock {
            faketime::configure(&mut cmd, dir, library);
        }
        // SAFETY: prctl is a plain syscall, safe between fork and exec.
        // pre_exec itself has no safe form.
        unsafe {
            cmd.pre_exec(|| {
                process::set_parent_process_death_signal(Some(Signal::KILL))?;
                Ok(())
            });
        }
        let child = cmd.spawn();
        // Open until the child has joined it.
        drop(caller_ns);
        child
    });
    match result {
        Err(e) if e.kind() == io::ErrorKind::NotFound => panic!(
            "{shown} not found: install redis-server (`apt-get install -y redis-server` on \
             Debian/Ubuntu), or point REDLEASE_SERVER at a redis-server or valkey-server binary"
        ),
        other => other,
    }
}

/// Runs `f` on one long-lived thread and returns its result.
///
/// PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not
/// the process. Tests spawn from short-lived threads (each `#[test]`, tokio's
/// blocking pool, ...), so all forks go through a thread that never exits.
fn on_spawner_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    type Job = Box<dyn FnOnce() + Send>;
    static JOBS: OnceLock<mpsc::Sender<Job>> = OnceLock::new();
    let jobs = JOBS.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        thread::Builder::new()
            .name("redlease-testkit-spawner".into())
            .spawn(move || {
                // Spawned from whichever thread asked first, perhaps one in
                // a `Netns`: this thread outlives it, so it moves to the
                // process's namespace rather than keep that one alive.
                netns::leave_for_process_namespace();
                rx.into_iter().for_each(|job| job())
            })
            .expect("start spawner thread");
        tx
    });
    let (tx, rx) = mpsc::channel();
    jobs.send(Box::new(move || {
        let _ = tx.send(f());
    }))
    .expect("spawner thread is gone");
    rx.recv().expect("spawner thread is gone")
}

/// Calls `probe` every 50 ms until it gives a value, and returns it;
/// panics saying `what` did not happen if `limit` passes first.
pub(crate) fn poll_until<T>(
    limit: Duration,
    what: &str,
    mut probe: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "{what} within {limit:?}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// Outcome of waiting for a freshly spawned server.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ready {
    Up,
    Exited,
    TimedOut,
}

/// Waits until `child` serves `port`, exits, or `timeout` passes.
///
/// A PING answer alone is not enough: another process may own the port
/// (a parallel test won the race). Redis logs "Ready to accept connections"
/// only once it holds its listening socket, so we require that too.
///
/// A TLS node cannot be PINGed in plain text: an accepted TCP connection on
/// its port stands in.
pub(crate) fn wait_ready(
    child: &mut Child,
    port: u16,
    tls: bool,
    sentinel: bool,
    dir: &Path,
    timeout: Duration,
) -> Ready {
    // A Sentinel logs no "Ready" line; it has its ID once it listens.
    let marker = if sentinel {
        "Sentinel ID is"
    } else {
        "Ready to accept connections"
    };
    let deadline = Instant::now() + timeout;
    loop {
        if !matches!(child.try_wait(), Ok(None)) {
            return Ready::Exited;
        }
        let log = std::fs::read_to_string(dir.join(LOG_FILE)).unwrap_or_default();
        let answers = if tls {
            accepts(port, Duration::from_millis(200))
        } else {
            ping(port, Duration::from_millis(200))
        };
        if log.contains(marker) && answers {
            return Ready::Up;
        }
        if Instant::now() >= deadline {
            return Ready::TimedOut;
        }
        thread::sleep(POLL);
    }
}

/// Whether something accepts TCP connections on `port`.
fn accepts(port: u16, timeout: Duration) -> bool {
    TcpStream::connect_timeout(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)), timeout).is_ok()
}

/// Sends an inline `PING` over raw TCP; `-NOAUTH` also counts as "up".
pub(crate) fn ping(port: u16, timeout: Duration) -> bool {
    let attempt = || -> io::Result<bool> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.write_all(b"PING\r\n")?;
        let mut buf = [0u8; 64];
        let n = stream.read(&mut buf)?;
        let reply = &buf[..n];
        Ok(reply.starts_with(b"+PONG") || reply.starts_with(b"-NOAUTH"))
    };
    attempt().unwrap_or(false)
}

/// Sends `sig` to `pid`; errors (e.g. already exited) are ignored on purpose.
/// The pid is ours and not yet reaped, so it cannot have been recycled for
/// another process.
pub(crate) fn signal(pid: u32, sig: Signal) {
    if let Some(pid) = as_pid(pid) {
        let _ = process::kill_process(pid, sig);
    }
}

/// True while `pid` (our unreaped child) has not exited; stopped counts as alive.
pub(crate) fn alive(pid: u32) -> bool {
    let Some(pid) = as_pid(pid) else {
        return false;
    };
    // WNOWAIT leaves the child unreaped so `Child::wait` still works
    // afterwards; `None` means no state change yet.
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    matches!(process::waitid(WaitId::Pid(pid), options), Ok(None))
}

fn as_pid(pid: u32) -> Option<Pid> {
    Pid::from_raw(i32::try_from(pid).ok()?)
}

/// Last lines of the node's log and stderr, for panic messages.
pub(crate) fn log_tail(dir: &Path) -> String {
    let tail = |name: &str| match std::fs::read_to_string(dir.join(name)) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(20)..].join("\n")
        }
        Err(e) => format!("(unreadable: {e})"),
    };
    format!(
        "--- {LOG_FILE} ---\n{}\n--- {STDERR_FILE} ---\n{}",
        tail(LOG_FILE),
        tail(STDERR_FILE)
    )
}
