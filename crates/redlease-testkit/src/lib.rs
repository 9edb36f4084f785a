//! Dev-only helpers to run and fault real `redis-server` processes in tests.
//!
//! Each [`RedisNode`] is a `redis-server` child process on a free loopback port
//! (never 6379), with its own temporary directory and no persistence unless
//! asked for. Tests can fault it: [`kill`](RedisNode::kill) (SIGKILL),
//! [`pause`](RedisNode::pause) (SIGSTOP), [`resume`](RedisNode::resume)
//! (SIGCONT) and [`restart`](RedisNode::restart) on the same port.
//! [`RedisNodes`] is a set of independent nodes (not a Redis Cluster), as used
//! by Redlock-style algorithms.
//!
//! Processes are killed when their handle drops, also while a test panics,
//! and get SIGKILL from the kernel if the test process itself dies.
//! Linux only (`prctl(PR_SET_PDEATHSIG)`); needs `redis-server` on PATH, or
//! the server named by the `REDLEASE_SERVER` environment variable (a name on
//! PATH or a path, e.g. `valkey-server`): every node of the process runs it.
//!
//! ```no_run
//! use redlease_testkit::{NodeConfig, RedisNodes};
//!
//! let mut nodes = RedisNodes::start(3);
//! let urls = nodes.urls(); // hand these to the code under test
//! assert_eq!(urls.len(), 3);
//!
//! nodes.node_mut(0).kill(); // a minority fails...
//! nodes.node_mut(1).pause(); // ...or hangs
//! nodes.node_mut(1).resume();
//! nodes.node_mut(0).restart(); // same port, same directory
//!
//! // Durable node: data survives kill + restart.
//! let _aof = RedisNodes::start_with(
//!     1,
//!     NodeConfig::new().arg("appendonly", "yes").arg("appendfsync", "always"),
//! );
//! // Everything is stopped and cleaned up here.
//! ```
//!
//! # A wall clock that jumps
//!
//! Redis expires keys by its wall clock, so a server whose clock steps
//! forward (an NTP step, a restored VM) drops keys early. A node started
//! with [`NodeConfig::fake_clock`] runs under libfaketime (Debian package
//! `faketime`), and [`RedisNode::jump_clock`] moves its wall clock forward,
//! from the very next command on, while other nodes keep the host's clock.
//! [`RedisCluster::start_with_fake_clock`](cluster::RedisCluster::start_with_fake_clock)
//! starts a cluster whose primaries all run so.
//!
//! ```no_run
//! use std::time::Duration;
//! use redlease_testkit::{NodeConfig, RedisNodes};
//!
//! let nodes = RedisNodes::start_with(3, NodeConfig::new().fake_clock());
//! nodes.node(0).jump_clock(Duration::from_secs(60)); // one node jumps
//! assert_eq!(nodes.node(1).clock_offset(), Duration::ZERO);
//! ```
//!
//! - libfaketime (`LD_PRELOAD`) rereads the node's offset file,
//!   `faketime.rc` in its directory, on every wall-clock read
//!   (`FAKETIME_NO_CACHE`); `jump_clock` rewrites the file atomically. The
//!   file outlives [`restart`](RedisNode::restart), so does the offset.
//! - Only the wall clock moves (`CLOCK_REALTIME`, `gettimeofday`, `time`:
//!   key expiry, `TIME`). The monotonic clock, which paces the event
//!   loop's timers and scripts' busy time, does not
//!   (`FAKETIME_DONT_FAKE_MONOTONIC`).
//! - Blocking commands' timeouts are wall-clock deadlines in Redis and
//!   Valkey: a `BLPOP` sent after a jump waits its full timeout, but one
//!   blocked across a jump times out at once. Redis 7.0 also times commands
//!   (SLOWLOG, INFO commandstats) on the wall clock unless its monotonic
//!   clock is the CPU's TSC: a command running across a jump seems to take
//!   the jump's length.
//! - Rereading the file costs: such a node served about a third fewer
//!   requests per second in a quick `redis-benchmark`.
//! - glibc's malloc serves the node even if the server links jemalloc (as
//!   Debian's redis-server does): jemalloc and libfaketime deadlock at
//!   startup otherwise.
//! - The server must be dynamically linked (starting the node panics
//!   otherwise), and the offset can only grow.

pub mod cluster;
mod faketime;
pub mod netns;
mod process;
pub mod proxy;
pub mod sentinel;
pub mod tls;

/// The server program the nodes run: `$REDLEASE_SERVER`, or `redis-server`.
///
/// ```
/// let program = redlease_testkit::server_program();
/// assert!(!program.is_empty());
/// ```
pub fn server_program() -> String {
    process::server_program()
}

use std::process::Child;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use rustix::process::Signal;
use tempfile::TempDir;

/// Attempts at finding a port nobody else grabs before redis binds it.
const START_ATTEMPTS: usize = 5;
/// How long one `redis-server` may take to answer PING.
const READY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `restart` keeps retrying the old port.
const RESTART_TIMEOUT: Duration = Duration::from_secs(5);

/// Extra `redis-server` settings for a node.
///
/// By default a node has no persistence (`--save "" --appendonly no`); each
/// [`arg`](NodeConfig::arg) is passed as `--name value` after the defaults,
/// so it overrides them.
///
/// ```
/// use redlease_testkit::NodeConfig;
///
/// let durable = NodeConfig::new()
///     .arg("appendonly", "yes")
///     .arg("appendfsync", "always");
/// ```
#[derive(Clone, Debug, Default)]
pub struct NodeConfig {
    args: Vec<(String, String)>,
    tls: Option<(tls::TestPki, ClientAuth)>,
    /// Sentinel mode: the config file's text (sentinels rewrite it).
    sentinel: Option<String>,
    /// Runs under libfaketime, see [`NodeConfig::fake_clock`].
    fake_clock: bool,
    /// Cluster mode with a bus port of its own, see [`NodeConfig::cluster`].
    cluster: bool,
}

/// Whether a TLS node asks clients for a certificate (`tls-auth-clients`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// Clients must present a certificate signed by the test CA.
    Required,
    /// Clients need no certificate (the server is still verified).
    None,
}

impl NodeConfig {
    /// A config with only the defaults: no RDB snapshots, no AOF.
    ///
    /// ```
    /// let config = redlease_testkit::NodeConfig::new();
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `--name value` to the command line, e.g. `("requirepass", "secret")`.
    ///
    /// ```
    /// let config = redlease_testkit::NodeConfig::new().arg("requirepass", "secret");
    /// ```
    pub fn arg(mut self, name: &str, value: &str) -> Self {
        self.args.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Runs the server in cluster mode (`cluster-enabled yes`) with its bus
    /// on a free port picked with the client port, not port + 10000, which
    /// may be taken or out of range. A start that fails retries both.
    pub(crate) fn cluster(mut self) -> Self {
        self.cluster = true;
        self.arg("cluster-enabled", "yes")
    }

    /// Runs the server as a Sentinel (`--sentinel`) with these config
    /// lines (e.g. `sentinel monitor ...`).
    pub(crate) fn sentinel(mut self, config: String) -> Self {
        self.sentinel = Some(config);
        self
    }

    /// Serves TLS only (no plain port), with `pki`'s server certificate;
    /// the node's URL becomes `rediss://127.0.0.1:PORT`.
    ///
    /// ```no_run
    /// use redlease_testkit::{tls::TestPki, ClientAuth, NodeConfig};
    /// let config = NodeConfig::new().tls(&TestPki::generate(), ClientAuth::None);
    /// ```
    pub fn tls(mut self, pki: &tls::TestPki, auth: ClientAuth) -> Self {
        self.tls = Some((pki.clone(), auth));
        self
    }

    /// Runs the server under libfaketime so that the test can move its wall
    /// clock forward with [`RedisNode::jump_clock`], as an NTP step or a
    /// restored VM would, without a restart. Only the wall clock moves (key
    /// expiry, `TIME`, blocking commands' deadlines), not the monotonic
    /// clock (the event loop's timers); see the
    /// [crate docs](crate#a-wall-clock-that-jumps).
    ///
    /// Starting such a node panics if libfaketime is not installed (Debian
    /// package `faketime`) or the server does not load it (a statically
    /// linked binary).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlease_testkit::{NodeConfig, RedisNode};
    ///
    /// let node = RedisNode::start_with(NodeConfig::new().fake_clock());
    /// node.jump_clock(Duration::from_secs(60));
    /// assert_eq!(node.clock_offset(), Duration::from_secs(60));
    /// ```
    pub fn fake_clock(mut self) -> Self {
        self.fake_clock = true;
        self
    }
}

/// One `redis-server` child process on `127.0.0.1`; stopped and cleaned on drop.
///
/// ```no_run
/// use redlease_testkit::RedisNode;
///
/// let mut node = RedisNode::start();
/// println!("redis at {}", node.url());
/// node.kill();
/// assert!(!node.is_running());
/// node.restart();
/// assert!(node.is_running());
/// ```
#[derive(Debug)]
pub struct RedisNode {
    port: u16,
    /// The cluster bus port, for a [`NodeConfig::cluster`] node.
    bus_port: Option<u16>,
    config: NodeConfig,
    child: Option<Child>,
    /// What the offset file says (always zero without a fake clock); the
    /// lock also keeps two jumps from writing the file out of order.
    clock_offset: Mutex<Duration>,
    // Declared last so the directory is removed after the process is gone.
    dir: TempDir,
}

impl RedisNode {
    /// Starts a node with [`NodeConfig::new`] and waits until it answers PING.
    ///
    /// Panics if `redis-server` is missing or does not come up.
    ///
    /// ```no_run
    /// let node = redlease_testkit::RedisNode::start();
    /// ```
    pub fn start() -> RedisNode {
        Self::start_with(NodeConfig::new())
    }

    /// Starts a node with `config` and waits until it answers PING.
    ///
    /// ```no_run
    /// use redlease_testkit::{NodeConfig, RedisNode};
    ///
    /// let node = RedisNode::start_with(NodeConfig::new().arg("requirepass", "secret"));
    /// ```
    pub fn start_with(config: NodeConfig) -> RedisNode {
        let mut node = Self::launch(config);
        node.await_started();
        node
    }

    /// Spawns on a fresh port without waiting, so several nodes can boot at once.
    fn launch(config: NodeConfig) -> RedisNode {
        let dir = tempfile::Builder::new()
            .prefix("redlease-testkit-")
            .tempdir()
            .expect("create temp dir for redis-server");
        if config.fake_clock {
            // Panics here, in the caller's thread, if libfaketime is missing.
            faketime::library();
            faketime::write_offset(dir.path(), Duration::ZERO)
                .expect("write the fake clock's offset file");
        }
        let mut node = RedisNode {
            port: 0,
            bus_port: None,
            config,
            child: None,
            clock_offset: Mutex::new(Duration::ZERO),
            dir,
        };
        node.spawn_on_fresh_ports();
        node
    }

    /// Spawns on new ports: a client port, and a bus port if clustered.
    fn spawn_on_fresh_ports(&mut self) {
        if self.config.cluster {
            self.bus_port = Some(process::free_port());
        }
        self.spawn_on(process::free_port());
    }

    fn spawn_on(&mut self, port: u16) {
        self.port = port;
        let child = process::spawn_redis(port, self.bus_port, self.dir.path(), &self.config)
            .unwrap_or_else(|e| panic!("failed to spawn redis-server on port {port}: {e}"));
        self.child = Some(child);
    }

    /// Waits for the launched process; on failure retries on new ports.
    fn await_started(&mut self) {
        for attempt in 1..=START_ATTEMPTS {
            if self.wait_ready() {
                return;
            }
            if attempt < START_ATTEMPTS {
                // Most likely another process took a port between probe
                // and bind (a client's ephemeral port can be any of them).
                self.kill();
                self.spawn_on_fresh_ports();
            }
        }
        let tail = process::log_tail(self.dir.path());
        self.kill();
        panic!(
            "{} did not start after {START_ATTEMPTS} attempts; log tail:\n{tail}",
            server_program()
        );
    }

    fn wait_ready(&mut self) -> bool {
        let child = self.child.as_mut().expect("a spawned child");
        let tls = self.config.tls.is_some();
        let sentinel = self.config.sentinel.is_some();
        let up = process::wait_ready(
            child,
            self.port,
            tls,
            sentinel,
            self.dir.path(),
            READY_TIMEOUT,
        ) == process::Ready::Up;
        if up && self.config.fake_clock && !faketime::loaded_in(child.id()) {
            panic!(
                "{} runs without libfaketime: it ignores LD_PRELOAD (statically \
                 linked?), so NodeConfig::fake_clock cannot move its clock",
                server_program()
            );
        }
        up
    }

    /// The TCP port, stable across [`restart`](RedisNode::restart).
    ///
    /// ```no_run
    /// let port = redlease_testkit::RedisNode::start().port();
    /// ```
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `"127.0.0.1:PORT"`.
    ///
    /// ```no_run
    /// let stream = std::net::TcpStream::connect(redlease_testkit::RedisNode::start().addr());
    /// ```
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `"redis://127.0.0.1:PORT"` (without credentials, even with
    /// `requirepass`), or `"rediss://..."` for a TLS node.
    ///
    /// ```no_run
    /// let url = redlease_testkit::RedisNode::start().url();
    /// ```
    pub fn url(&self) -> String {
        let scheme = if self.config.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://{}", self.addr())
    }

    /// The server's pid; `None` after [`kill`](RedisNode::kill) or if it exited.
    ///
    /// ```no_run
    /// let node = redlease_testkit::RedisNode::start();
    /// let pid = node.pid().expect("running");
    /// ```
    pub fn pid(&self) -> Option<u32> {
        self.child
            .as_ref()
            .map(Child::id)
            .filter(|&pid| process::alive(pid))
    }

    /// True while the process exists; a paused (SIGSTOP) node counts as running.
    ///
    /// ```no_run
    /// let mut node = redlease_testkit::RedisNode::start();
    /// node.kill();
    /// assert!(!node.is_running());
    /// ```
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// SIGKILLs the server and reaps it. Idempotent; the directory is kept.
    ///
    /// ```no_run
    /// let mut node = redlease_testkit::RedisNode::start();
    /// node.kill();
    /// node.kill(); // no-op
    /// ```
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            process::signal(child.id(), Signal::KILL);
            let _ = child.wait();
        }
    }

    /// SIGSTOPs the server: connections are accepted but never answered.
    /// No-op while killed.
    ///
    /// ```no_run
    /// let mut node = redlease_testkit::RedisNode::start();
    /// node.pause();
    /// node.resume();
    /// ```
    pub fn pause(&mut self) {
        if let Some(child) = &self.child {
            process::signal(child.id(), Signal::STOP);
        }
    }

    /// SIGCONTs a paused server. No-op while killed.
    ///
    /// ```no_run
    /// let mut node = redlease_testkit::RedisNode::start();
    /// node.pause();
    /// node.resume();
    /// ```
    pub fn resume(&mut self) {
        if let Some(child) = &self.child {
            process::signal(child.id(), Signal::CONT);
        }
    }

    /// Kills the server if running, then starts a new one on the same port
    /// with the same config and directory (so an AOF file is reloaded) and
    /// waits until it answers PING.
    ///
    /// Panics if the port stays unavailable for 5 s or the server does not come up.
    ///
    /// ```no_run
    /// let mut node = redlease_testkit::RedisNode::start();
    /// let port = node.port();
    /// node.restart();
    /// assert_eq!(node.port(), port);
    /// ```
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + RESTART_TIMEOUT;
        loop {
            self.spawn_on(self.port);
            if self.wait_ready() {
                return;
            }
            let tail = process::log_tail(self.dir.path());
            self.kill();
            if Instant::now() >= deadline {
                panic!(
                    "{} could not restart on port {} within {:?}; log tail:\n{tail}",
                    server_program(),
                    self.port,
                    RESTART_TIMEOUT
                );
            }
            std::thread::sleep(process::POLL);
        }
    }

    /// Moves this node's wall clock forward by `by`, on top of earlier jumps,
    /// from the very next command on: keys whose expiry time it passes are
    /// gone, `TIME` answers ahead of the host's clock. The monotonic clock
    /// does not move. The offset survives [`restart`](RedisNode::restart);
    /// a jump while the node is killed or paused applies once it runs again.
    ///
    /// Panics if the node was not started with [`NodeConfig::fake_clock`].
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlease_testkit::{NodeConfig, RedisNode};
    ///
    /// let node = RedisNode::start_with(NodeConfig::new().fake_clock());
    /// let mut con = node.client().get_connection().unwrap();
    /// let _: () = redis::cmd("SET").arg("k").arg("v").arg("PX").arg(30_000)
    ///     .query(&mut con).unwrap();
    /// node.jump_clock(Duration::from_secs(60)); // an NTP step
    /// let ttl: i64 = redis::cmd("PTTL").arg("k").query(&mut con).unwrap();
    /// assert_eq!(ttl, -2); // expired early
    /// ```
    pub fn jump_clock(&self, by: Duration) {
        assert!(
            self.config.fake_clock,
            "RedisNode::jump_clock needs a node started with NodeConfig::fake_clock() \
             (the node on port {} runs on the host's clock)",
            self.port
        );
        let mut offset = self
            .clock_offset
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let moved = offset
            .checked_add(by)
            .expect("the clock offset overflows a Duration");
        faketime::write_offset(self.dir.path(), moved)
            .unwrap_or_else(|e| panic!("could not write the fake clock's offset file: {e}"));
        *offset = moved;
    }

    /// How far this node's wall clock runs ahead of the host's: the sum of
    /// its [`jump_clock`](RedisNode::jump_clock)s, zero for a node without
    /// [`NodeConfig::fake_clock`].
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlease_testkit::{NodeConfig, RedisNode};
    ///
    /// let node = RedisNode::start_with(NodeConfig::new().fake_clock());
    /// node.jump_clock(Duration::from_secs(30));
    /// node.jump_clock(Duration::from_millis(1500));
    /// assert_eq!(node.clock_offset(), Duration::from_millis(31_500));
    /// assert_eq!(RedisNode::start().clock_offset(), Duration::ZERO);
    /// ```
    pub fn clock_offset(&self) -> Duration {
        *self
            .clock_offset
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A `redis::Client` for [`url`](RedisNode::url) (no connection is made yet).
    ///
    /// ```no_run
    /// let node = redlease_testkit::RedisNode::start();
    /// let mut con = node.client().get_connection().unwrap();
    /// let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    /// ```
    pub fn client(&self) -> redis::Client {
        match &self.config.tls {
            // Trusts the test CA and presents the client certificate.
            Some((pki, _)) => {
                tls::install_crypto_provider();
                redis::Client::build_with_tls(self.url(), pki.redis_certificates())
                    .expect("valid TLS settings")
            }
            None => redis::Client::open(self.url()).expect("valid redis URL"),
        }
    }
}

impl Drop for RedisNode {
    fn drop(&mut self) {
        // SIGKILL also ends a stopped process; SIGCONT first keeps teardown
        // right if a gentler signal is ever used here.
        self.resume();
        self.kill();
    }
}

/// A set of independent nodes (not a Redis Cluster), e.g. for Redlock.
///
/// ```no_run
/// use redlease_testkit::RedisNodes;
///
/// let mut nodes = RedisNodes::start(5);
/// nodes.node_mut(0).kill();
/// let running = nodes.iter().filter(|n| n.is_running()).count();
/// assert_eq!(running, 4);
/// ```
#[derive(Debug)]
pub struct RedisNodes {
    nodes: Vec<RedisNode>,
}

impl RedisNodes {
    /// Starts `n` nodes with [`NodeConfig::new`].
    ///
    /// ```no_run
    /// let nodes = redlease_testkit::RedisNodes::start(3);
    /// ```
    pub fn start(n: usize) -> RedisNodes {
        Self::start_with(n, NodeConfig::new())
    }

    /// Starts `n` nodes with `config`; they boot concurrently.
    ///
    /// ```no_run
    /// use redlease_testkit::{NodeConfig, RedisNodes};
    ///
    /// let nodes = RedisNodes::start_with(3, NodeConfig::new().arg("appendonly", "yes"));
    /// ```
    pub fn start_with(n: usize, config: NodeConfig) -> RedisNodes {
        // Spawn all first, then wait: boots overlap without extra threads.
        let mut nodes: Vec<RedisNode> = (0..n).map(|_| RedisNode::launch(config.clone())).collect();
        nodes.iter_mut().for_each(RedisNode::await_started);
        RedisNodes { nodes }
    }

    /// `redis://127.0.0.1:PORT` for every node, in order.
    ///
    /// ```no_run
    /// let urls = redlease_testkit::RedisNodes::start(3).urls();
    /// ```
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisNode::url).collect()
    }

    /// Number of nodes.
    ///
    /// ```no_run
    /// assert_eq!(redlease_testkit::RedisNodes::start(3).len(), 3);
    /// ```
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True for a set of zero nodes.
    ///
    /// ```no_run
    /// assert!(redlease_testkit::RedisNodes::start(0).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The `i`-th node; panics if out of range.
    ///
    /// ```no_run
    /// let nodes = redlease_testkit::RedisNodes::start(3);
    /// let url = nodes.node(2).url();
    /// ```
    pub fn node(&self, i: usize) -> &RedisNode {
        &self.nodes[i]
    }

    /// The `i`-th node, mutably (to fault it); panics if out of range.
    ///
    /// ```no_run
    /// let mut nodes = redlease_testkit::RedisNodes::start(3);
    /// nodes.node_mut(1).pause();
    /// ```
    pub fn node_mut(&mut self, i: usize) -> &mut RedisNode {
        &mut self.nodes[i]
    }

    /// All nodes, in order.
    ///
    /// ```no_run
    /// let nodes = redlease_testkit::RedisNodes::start(3);
    /// let ports: Vec<u16> = nodes.iter().map(|n| n.port()).collect();
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = &RedisNode> {
        self.nodes.iter()
    }
}
