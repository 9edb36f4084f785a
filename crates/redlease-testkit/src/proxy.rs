//! A TCP fault proxy for one client-to-node link, in-process on Tokio.
//!
//! Give a client the proxy's [`url`](Proxy::url) instead of the node's, then
//! fault that one link with [`set`](Proxy::set) while other clients (with
//! their own proxies, or direct URLs) see the node as it is. Partitions are
//! several proxies faulted at once: client A's links to nodes 3 and 4 cut,
//! client B's link to node 0 cut, and so on.
//!
//! | [`Mode`] | existing connections | new connections |
//! |---|---|---|
//! | `Pass` | bytes forwarded as they come | accepted |
//! | `Delay { fixed, jitter }` | each chunk, in each direction, delivered `fixed + U(0, jitter)` after it was read; a chunk never overtakes an earlier one | accepted |
//! | `Blackhole` | nothing forwarded in either direction, nothing closed; bytes are held in order | accepted (the client connects, nothing answers) |
//! | `Reset` | closed at once with a TCP reset; held bytes are dropped | accepted and reset at once |
//! | `Hold { until }` | client-to-server bytes pass, server-to-client bytes held until `until` | accepted |
//!
//! Held bytes are delivered, in order, when the mode stops holding them:
//! leaving `Blackhole` (for any mode but `Reset`) is a healed partition whose
//! TCP retransmissions get through, and `Hold` replays buffered replies on
//! the same connection after the client may have given up on them
//! (Kleppmann's "delayed packet" case). Chunks already scheduled by `Delay`
//! keep their delivery time when the mode changes.
//!
//! If the node is down, a new connection is accepted and then closed (the
//! client sees the connection drop, much as it sees a refused one). The
//! proxy's tasks run on the Tokio runtime [`Proxy::start`] was called in and
//! end when the [`Proxy`] is dropped.
//!
//! ```no_run
//! use std::time::{Duration, Instant};
//! use redlease_testkit::proxy::{Mode, Proxy};
//! use redlease_testkit::RedisNode;
//!
//! # #[tokio::main] async fn main() {
//! let node = RedisNode::start();
//! let link = Proxy::start(&node.addr());
//! let client = redis::Client::open(link.url()).unwrap(); // through the proxy
//!
//! link.set(Mode::Delay { fixed: Duration::from_millis(20), jitter: Duration::from_millis(5) });
//! link.set(Mode::Hold { until: Instant::now() + Duration::from_secs(1) });
//! link.set(Mode::Blackhole);
//! link.set(Mode::Reset);
//! link.set(Mode::Pass);
//! # let _ = client; }
//! ```

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How long the proxy waits for the node to accept a connection before it
/// gives up and closes the client's side (a node that is down refuses at once).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Bytes read per chunk: a chunk is the unit that `Delay` schedules.
const CHUNK: usize = 16 * 1024;

/// What a [`Proxy`] does to the bytes of its link (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forward everything as it comes.
    Pass,
    /// Deliver each chunk `fixed + U(0, jitter)` after it was read, in order.
    Delay {
        /// Added to every chunk.
        fixed: Duration,
        /// Upper bound of a uniformly random extra per chunk.
        jitter: Duration,
    },
    /// Forward nothing and close nothing; bytes are held in order and
    /// delivered when the mode changes to anything but `Reset`.
    Blackhole,
    /// Reset every connection and every new one.
    Reset,
    /// Let requests through but hold the replies until `until` (or until
    /// the mode changes), then deliver them all on the same connection.
    Hold {
        /// When the held replies are released.
        until: std::time::Instant,
    },
}

/// Which way bytes flow through a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    ToServer,
    ToClient,
}

/// What every task of one proxy watches.
#[derive(Clone, Debug)]
struct State {
    mode: Mode,
    /// Bumped by every `set(Mode::Reset)`: connections opened before it close.
    resets: u64,
}

/// A TCP proxy on a free `127.0.0.1` port in front of one target address.
///
/// ```no_run
/// # #[tokio::main] async fn main() {
/// let node = redlease_testkit::RedisNode::start();
/// let link = redlease_testkit::proxy::Proxy::start(&node.addr());
/// println!("{} -> {}", link.url(), node.addr());
/// # }
/// ```
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    target: SocketAddr,
    state: watch::Sender<State>,
    live: Arc<AtomicUsize>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy to `target` (`"host:port"`, e.g. [`RedisNode::addr`](crate::RedisNode::addr))
    /// in [`Mode::Pass`]. Must be called within a Tokio runtime (its tasks
    /// run there); panics otherwise, or if `target` does not resolve.
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() {
    /// let proxy = redlease_testkit::proxy::Proxy::start("127.0.0.1:7000");
    /// # let _ = proxy; }
    /// ```
    pub fn start(target: &str) -> Proxy {
        let runtime = tokio::runtime::Handle::try_current()
            .expect("Proxy::start must be called within a Tokio runtime");
        let target = target
            .to_socket_addrs()
            .ok()
            .and_then(|mut addrs| addrs.next())
            .unwrap_or_else(|| panic!("proxy target {target:?} does not resolve"));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let port = listener.local_addr().expect("bound address").port();
        let listener = {
            let _entered = runtime.enter();
            TcpListener::from_std(listener).expect("register the listener with Tokio")
        };
        let (state, watcher) = watch::channel(State {
            mode: Mode::Pass,
            resets: 0,
        });
        let live = Arc::new(AtomicUsize::new(0));
        let accept = runtime.spawn(accept_loop(listener, target, watcher, live.clone()));
        Proxy {
            port,
            target,
            state,
            live,
            accept,
        }
    }

    /// Changes what the link does, at once, for existing and new connections.
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() {
    /// # let proxy = redlease_testkit::proxy::Proxy::start("127.0.0.1:7000");
    /// use redlease_testkit::proxy::Mode;
    /// proxy.set(Mode::Blackhole);
    /// proxy.set(Mode::Pass); // the held bytes go through now
    /// # }
    /// ```
    pub fn set(&self, mode: Mode) {
        self.state.send_modify(|s| {
            s.mode = mode;
            if mode == Mode::Reset {
                s.resets += 1;
            }
        });
    }

    /// The current mode.
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() {
    /// # let proxy = redlease_testkit::proxy::Proxy::start("127.0.0.1:7000");
    /// assert_eq!(proxy.mode(), redlease_testkit::proxy::Mode::Pass);
    /// # }
    /// ```
    pub fn mode(&self) -> Mode {
        self.state.borrow().mode
    }

    /// The proxy's own port on `127.0.0.1`.
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() {
    /// # let proxy = redlease_testkit::proxy::Proxy::start("127.0.0.1:7000");
    /// assert_ne!(proxy.port(), 7000);
    /// # }
    /// ```
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `"127.0.0.1:PORT"` of the proxy.
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() {
    /// # let proxy = redlease_testkit::proxy::Proxy::start("127.0.0.1:7000");
    /// let addr = proxy.addr();
    /// # }
    /// ```
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `"redis://127.0.0.1:PORT"`: hand this to a client instead of the node's URL.
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() {
    /// # let proxy = redlease_testkit::proxy::Proxy::start("127.0.0.1:7000");
    /// let client = redis::Client::open(proxy.url()).unwrap();
    /// # }
    /// ```
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr())
    }

    /// The address the proxy forwards to.
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() {
    /// # let proxy = redlease_testkit::proxy::Proxy::start("127.0.0.1:7000");
    /// assert_eq!(proxy.target().port(), 7000);
    /// # }
    /// ```
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// Connections open through the proxy right now.
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() {
    /// # let proxy = redlease_testkit::proxy::Proxy::start("127.0.0.1:7000");
    /// assert_eq!(proxy.connections(), 0);
    /// # }
    /// ```
    pub fn connections(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Dropping `state` closes the watch channel, which ends every
        // connection task; the accept loop only ends when aborted.
        self.accept.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    state: watch::Receiver<State>,
    live: Arc<AtomicUsize>,
) {
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(_) => {
                // Out of file descriptors or similar: back off, do not spin.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if state.has_changed().is_err() {
            return; // the Proxy is gone
        }
        let snapshot = state.borrow().clone();
        if snapshot.mode == Mode::Reset {
            reset(client);
            continue;
        }
        let live = live.clone();
        live.fetch_add(1, Ordering::Relaxed);
        let state = state.clone();
        tokio::spawn(async move {
            connection(client, target, state, snapshot.resets).await;
            live.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// Closes with a TCP reset rather than an orderly FIN.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// One proxied connection, until either side closes, the link is reset, or
/// the proxy is dropped.
async fn connection(
    mut client: TcpStream,
    target: SocketAddr,
    state: watch::Receiver<State>,
    epoch: u64,
) {
    let mut upstream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await
    {
        Ok(Ok(upstream)) => upstream,
        _ => return reset(client),
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let cut = {
        let (client_read, client_write) = client.split();
        let (upstream_read, upstream_write) = upstream.split();
        let to_server = pump(
            client_read,
            upstream_write,
            Direction::ToServer,
            state.clone(),
        );
        let to_client = pump(
            upstream_read,
            client_write,
            Direction::ToClient,
            state.clone(),
        );
        // Redis clients never half-close: once either direction is done
        // (after delivering what it held), the connection is over.
        tokio::select! {
            () = cancelled(state, epoch) => true,
            _ = to_server => false,
            _ = to_client => false,
        }
    };
    if cut {
        reset(client);
        reset(upstream);
    }
}

/// Resolves when the link is reset after the connection opened, or the
/// proxy is dropped.
async fn cancelled(mut state: watch::Receiver<State>, epoch: u64) {
    loop {
        if state.borrow_and_update().resets != epoch {
            return;
        }
        if state.changed().await.is_err() {
            return;
        }
    }
}

/// Moves bytes one way: a reader that stamps each chunk with its delivery
/// time, and a writer that delivers chunks in order once their time has come
/// and the mode lets them through. Ends after delivering the source's EOF,
/// or on a write error.
async fn pump(
    mut from: ReadHalf<'_>,
    mut to: WriteHalf<'_>,
    direction: Direction,
    state: watch::Receiver<State>,
) {
    // Unbounded: a blackholed link holds everything its client sends, and
    // the traffic of a test is bounded.
    let (queue, mut pending) = mpsc::unbounded_channel::<Option<(Instant, Vec<u8>)>>();
    let reader_state = state.clone();
    let reader = async move {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    let _ = queue.send(None);
                    break;
                }
                Ok(n) => {
                    let mode = reader_state.borrow().mode;
                    let at = Instant::now() + delay_of(mode);
                    if queue.send(Some((at, buf[..n].to_vec()))).is_err() {
                        break;
                    }
                }
            }
        }
        // Stay pending: the writer decides when this direction is done.
        std::future::pending::<()>().await;
    };
    let writer = async move {
        let mut state = state;
        while let Some(Some((at, bytes))) = pending.recv().await {
            loop {
                open_gate(&mut state, direction).await;
                if Instant::now() >= at {
                    break;
                }
                tokio::time::sleep_until(at).await;
                // The mode may have turned to holding while we slept.
            }
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::select! {
        () = reader => {}
        () = writer => {}
    }
}

/// The extra time a chunk read now waits under `mode`.
fn delay_of(mode: Mode) -> Duration {
    match mode {
        Mode::Delay { fixed, jitter } if jitter.is_zero() => fixed,
        Mode::Delay { fixed, jitter } => fixed + jitter.mul_f64(rand::random::<f64>()),
        _ => Duration::ZERO,
    }
}

/// Waits while the mode holds bytes going `direction`. Returns at once when
/// the proxy is dropped (the connection is about to end anyway).
async fn open_gate(state: &mut watch::Receiver<State>, direction: Direction) {
    loop {
        let mode = state.borrow_and_update().mode;
        match mode {
            Mode::Blackhole => {
                if state.changed().await.is_err() {
                    return;
                }
            }
            Mode::Hold { until } if direction == Direction::ToClient => {
                let until = Instant::from_std(until);
                if Instant::now() >= until {
                    return;
                }
                tokio::select! {
                    () = tokio::time::sleep_until(until) => {}
                    changed = state.changed() => if changed.is_err() { return },
                }
            }
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    //! Against a local echo server (exact byte-level checks) and one real
    //! `redis-server` (the client library's view).

    use super::*;
    use std::time::Duration;

    const MS: Duration = Duration::from_millis(1);

    /// An echo server on a free port; it ends with the test's runtime.
    async fn echo_server() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn connect(proxy: &Proxy) -> TcpStream {
        TcpStream::connect(proxy.addr()).await.unwrap()
    }

    /// Reads exactly `n` bytes within `within`, or `None` if they do not come.
    async fn read_n(s: &mut TcpStream, n: usize, within: Duration) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; n];
        match tokio::time::timeout(within, s.read_exact(&mut buf)).await {
            Ok(Ok(_)) => Some(buf),
            _ => None,
        }
    }

    #[tokio::test]
    async fn pass_forwards_both_ways() {
        let proxy = Proxy::start(&echo_server().await);
        let mut s = connect(&proxy).await;
        s.write_all(b"hello").await.unwrap();
        assert_eq!(read_n(&mut s, 5, 2000 * MS).await.unwrap(), b"hello");
        assert_eq!(proxy.connections(), 1);
    }

    #[tokio::test]
    async fn delay_applies_each_way_and_keeps_order() {
        let proxy = Proxy::start(&echo_server().await);
        let mut s = connect(&proxy).await;
        proxy.set(Mode::Delay {
            fixed: 40 * MS,
            jitter: 20 * MS,
        });
        let started = Instant::now();
        for i in 0..20u8 {
            s.write_all(&[i]).await.unwrap();
        }
        let got = read_n(&mut s, 20, 3000 * MS).await.unwrap();
        assert_eq!(got, (0..20u8).collect::<Vec<_>>(), "order kept");
        // 40 ms each way at least.
        assert!(started.elapsed() >= 80 * MS, "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn blackhole_holds_bytes_and_delivers_them_when_healed() {
        let proxy = Proxy::start(&echo_server().await);
        let mut s = connect(&proxy).await;
        s.write_all(b"a").await.unwrap();
        assert_eq!(read_n(&mut s, 1, 2000 * MS).await.unwrap(), b"a");
        proxy.set(Mode::Blackhole);
        s.write_all(b"bc").await.unwrap();
        assert_eq!(read_n(&mut s, 1, 150 * MS).await, None, "nothing passes");
        assert_eq!(proxy.connections(), 1, "and nothing is closed");
        proxy.set(Mode::Pass);
        assert_eq!(read_n(&mut s, 2, 2000 * MS).await.unwrap(), b"bc");
    }

    #[tokio::test]
    async fn reset_closes_connections_and_refuses_new_ones_until_set_back() {
        let proxy = Proxy::start(&echo_server().await);
        let mut s = connect(&proxy).await;
        s.write_all(b"x").await.unwrap();
        assert_eq!(read_n(&mut s, 1, 2000 * MS).await.unwrap(), b"x");
        proxy.set(Mode::Reset);
        let mut buf = [0u8; 1];
        let closed = tokio::time::timeout(2000 * MS, s.read(&mut buf)).await;
        assert!(
            matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
            "existing connection closed: {closed:?}"
        );
        let mut fresh = connect(&proxy).await; // the listener still accepts...
        let _ = fresh.write_all(b"y").await;
        let answer = tokio::time::timeout(2000 * MS, fresh.read(&mut buf)).await;
        assert!(
            matches!(answer, Ok(Ok(0)) | Ok(Err(_))),
            "...but closes at once: {answer:?}"
        );
        proxy.set(Mode::Pass);
        let mut again = connect(&proxy).await;
        again.write_all(b"z").await.unwrap();
        assert_eq!(read_n(&mut again, 1, 2000 * MS).await.unwrap(), b"z");
    }

    #[tokio::test]
    async fn hold_lets_requests_through_and_delivers_replies_later() {
        let node = tokio::task::spawn_blocking(crate::RedisNode::start)
            .await
            .unwrap();
        let proxy = Proxy::start(&node.addr());
        let mut s = connect(&proxy).await;
        let until = std::time::Instant::now() + 300 * MS;
        proxy.set(Mode::Hold { until });
        s.write_all(b"SET held 1\r\n").await.unwrap();
        assert_eq!(read_n(&mut s, 5, 150 * MS).await, None, "reply held");
        // The request itself was applied: a direct client sees the key.
        let mut direct = node
            .client()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let value: Option<String> = redis::cmd("GET")
            .arg("held")
            .query_async(&mut direct)
            .await
            .unwrap();
        assert_eq!(value.as_deref(), Some("1"));
        // After `until`, the buffered reply arrives on the same connection.
        assert_eq!(read_n(&mut s, 5, 2000 * MS).await.unwrap(), b"+OK\r\n");
        assert!(std::time::Instant::now() >= until);
    }

    #[tokio::test]
    async fn a_down_target_closes_the_client_side() {
        let node = tokio::task::spawn_blocking(crate::RedisNode::start)
            .await
            .unwrap();
        let proxy = Proxy::start(&node.addr());
        drop(node); // killed: the port refuses
        let mut s = connect(&proxy).await;
        let mut buf = [0u8; 1];
        let _ = s.write_all(b"PING\r\n").await;
        let answer = tokio::time::timeout(2000 * MS, s.read(&mut buf)).await;
        assert!(matches!(answer, Ok(Ok(0)) | Ok(Err(_))), "{answer:?}");
    }

    #[tokio::test]
    async fn dropping_the_proxy_ends_its_connections() {
        let proxy = Proxy::start(&echo_server().await);
        let mut s = connect(&proxy).await;
        s.write_all(b"x").await.unwrap();
        assert_eq!(read_n(&mut s, 1, 2000 * MS).await.unwrap(), b"x");
        drop(proxy);
        let mut buf = [0u8; 1];
        let answer = tokio::time::timeout(2000 * MS, s.read(&mut buf)).await;
        assert!(matches!(answer, Ok(Ok(0)) | Ok(Err(_))), "{answer:?}");
    }
}
