//! The network namespace of `netns.rs` on real `redis-server`s: what the
//! thread starts is inside and nothing outside is reachable; loss,
//! partitions and one-way drops are real TCP faults (connections time
//! out, requests arrive or not, segments are retransmitted) and heal.
//!
//! Each test skips, saying why, where no namespace can be made (not root,
//! no `nft`), and fails there when `REDLEASE_REQUIRE_NETNS=1`.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redlease_testkit::netns::Netns;
use redlease_testkit::{NodeConfig, RedisNode};

/// Long enough for a healthy loopback connection, short against the
/// faults' seconds.
const QUICK: Duration = Duration::from_secs(1);
/// Long enough for a retransmission after a heal (the kernel doubles its
/// timeout, from 200 ms, while the fault lasts) or under 30 % loss.
const PATIENT: Duration = Duration::from_secs(15);

/// `net:[INODE]` of a thread's or process's network namespace.
fn ns_of(path: &str) -> String {
    std::fs::read_link(path)
        .unwrap_or_else(|e| panic!("readlink {path}: {e}"))
        .to_string_lossy()
        .into_owned()
}

fn this_thread_ns() -> String {
    ns_of("/proc/thread-self/ns/net")
}

/// A thread that stays in the namespace it was started in (the host's,
/// when started before `Netns::enter`), to run things from there.
struct Outside {
    jobs: mpsc::Sender<Box<dyn FnOnce() + Send>>,
}

impl Outside {
    fn start() -> Outside {
        let (jobs, rx) = mpsc::channel::<Box<dyn FnOnce() + Send>>();
        thread::spawn(move || rx.into_iter().for_each(|job| job()));
        Outside { jobs }
    }

    fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        self.jobs
            .send(Box::new(move || {
                let _ = tx.send(f());
            }))
            .expect("the outside thread runs");
        rx.recv().expect("the outside thread answers")
    }
}

fn connect(port: u16, timeout: Duration) -> io::Result<TcpStream> {
    TcpStream::connect_timeout(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)), timeout)
}

/// A raw connection that sends inline commands and reads one-line replies.
struct Raw {
    reader: BufReader<TcpStream>,
}

impl Raw {
    fn open(port: u16) -> Raw {
        let stream = connect(port, QUICK).unwrap_or_else(|e| panic!("connect to {port}: {e}"));
        Raw {
            reader: BufReader::new(stream),
        }
    }

    fn send(&mut self, command: &str) {
        self.reader
            .get_mut()
            .write_all(format!("{command}\r\n").as_bytes())
            .expect("the request is buffered by the kernel");
    }

    /// The next reply line, or the error of a read that waited `timeout`.
    fn reply(&mut self, timeout: Duration) -> io::Result<String> {
        self.reader.get_ref().set_read_timeout(Some(timeout))?;
        let mut line = String::new();
        match self.reader.read_line(&mut line)? {
            0 => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed")),
            _ => Ok(line.trim_end().to_string()),
        }
    }

    fn ask(&mut self, command: &str, timeout: Duration) -> io::Result<String> {
        self.send(command);
        self.reply(timeout)
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// A node that also listens on a Unix socket, which no nftables rule
/// touches: the test sees through it what reached the server.
fn node_with_socket(dir: &Path) -> (RedisNode, PathBuf) {
    let socket = dir.join("redis.sock");
    let node = RedisNode::start_with(
        NodeConfig::new()
            .arg("unixsocket", &socket.to_string_lossy())
            .arg("unixsocketperm", "700"),
    );
    (node, socket)
}

/// `GET key` over the node's Unix socket (a bulk reply's value, or `nil`).
fn get_by_socket(socket: &Path, key: &str) -> String {
    let stream = UnixStream::connect(socket).expect("the Unix socket accepts");
    stream.set_read_timeout(Some(PATIENT)).unwrap();
    let mut reader = BufReader::new(stream);
    reader
        .get_mut()
        .write_all(format!("GET {key}\r\n").as_bytes())
        .unwrap();
    let mut header = String::new();
    reader.read_line(&mut header).unwrap();
    if header.starts_with("$-1") {
        return "nil".to_string();
    }
    let mut value = String::new();
    reader.read_line(&mut value).unwrap();
    value.trim_end().to_string()
}

#[test]
fn what_the_thread_starts_is_inside_and_nothing_outside_is_reachable() {
    let outside = Outside::start();
    // A listener of the host's loopback, open for the whole test.
    let host_listener = outside.run(|| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap());
    let host_port = host_listener.local_addr().unwrap().port();
    let home = this_thread_ns();
    let Some(ns) =
        Netns::enter_or_skip("what_the_thread_starts_is_inside_and_nothing_outside_is_reachable")
    else {
        return;
    };
    let inside = this_thread_ns();
    assert_ne!(inside, home, "enter moved the thread");
    assert!(ns.is_current());
    assert_eq!(outside.run(this_thread_ns), home, "other threads stay out");

    // A server, a child process and a thread started from here are inside.
    let node = RedisNode::start();
    let pid = node.pid().expect("running");
    assert_eq!(ns_of(&format!("/proc/{pid}/ns/net")), inside);
    let child = Command::new("readlink")
        .arg("/proc/self/ns/net")
        .output()
        .expect("readlink runs");
    assert_eq!(String::from_utf8_lossy(&child.stdout).trim(), inside);
    assert_eq!(thread::spawn(this_thread_ns).join().unwrap(), inside);
    assert_eq!(Raw::open(node.port()).ask("PING", QUICK).unwrap(), "+PONG");

    // Nothing of the host's loopback answers inside: not its listener,
    // not 127.0.0.1:6379 (this namespace's own loopback is asked, the
    // host's Redis there is never reached).
    let refused = |port: u16| connect(port, QUICK).map(drop).unwrap_err().kind();
    if host_port != node.port() {
        assert_eq!(refused(host_port), io::ErrorKind::ConnectionRefused);
    }
    if node.port() != 6379 {
        assert_eq!(refused(6379), io::ErrorKind::ConnectionRefused);
    }
    // And the server inside is out of the host's reach; the host's
    // listener is still there for the host.
    let port = node.port();
    let from_host = outside.run(move || connect(port, QUICK).map(drop).map_err(|e| e.kind()));
    assert_eq!(from_host, Err(io::ErrorKind::ConnectionRefused));
    assert!(outside.run(move || connect(host_port, QUICK).is_ok()));
    // The fault table is the namespace's: the host has none.
    ns.loss(1.0).unwrap();
    let host_table = outside.run(|| {
        Command::new("nft")
            .args(["list", "table", "inet", "redlease_faults"])
            .output()
            .expect("nft runs")
            .status
            .success()
    });
    assert!(!host_table, "the host's ruleset got the namespace's table");

    // Dropping the guard brings the thread home; the server stays inside.
    let faults = ns.faults();
    drop(ns);
    assert_eq!(this_thread_ns(), home);
    assert!(!faults.is_current());
    assert_eq!(ns_of(&format!("/proc/{pid}/ns/net")), inside);
    drop(host_listener);
}

#[test]
fn loss_partition_and_one_way_drops_are_real_and_heal() {
    let Some(ns) = Netns::enter_or_skip("loss_partition_and_one_way_drops_are_real_and_heal")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (node, socket) = node_with_socket(dir.path());
    let port = node.port();
    let mut conn = Raw::open(port);
    assert_eq!(conn.ask("PING", QUICK).unwrap(), "+PONG");

    // 100 % loss on the node's port: no new connection, no reply.
    ns.loss_on(100.0, &[port]).unwrap();
    let e = connect(port, QUICK).map(drop).unwrap_err();
    assert!(is_timeout(&e), "a connection attempt timed out, not {e:?}");
    let e = conn.ask("PING", QUICK).unwrap_err();
    assert!(is_timeout(&e), "the reply was lost, not {e:?}");
    assert!(ns.dropped().unwrap() > 0, "the rules counted their drops");
    // Healed: the PING's retransmission gets through on the same
    // connection, and new connections work.
    ns.heal().unwrap();
    assert_eq!(ns.dropped().unwrap(), 0);
    assert_eq!(conn.reply(PATIENT).unwrap(), "+PONG");
    assert_eq!(Raw::open(port).ask("PING", QUICK).unwrap(), "+PONG");

    // Only the node's replies dropped: the request arrives.
    ns.drop_from(&[port]).unwrap();
    let e = conn.ask("SET oneway from", QUICK).unwrap_err();
    assert!(is_timeout(&e), "the reply was dropped, not {e:?}");
    assert_eq!(get_by_socket(&socket, "oneway"), "from");
    ns.heal().unwrap();
    assert_eq!(conn.reply(PATIENT).unwrap(), "+OK");

    // Only the requests to the node dropped: nothing arrives until healed.
    ns.drop_to(&[port]).unwrap();
    let e = conn.ask("SET oneway to", QUICK).unwrap_err();
    assert!(is_timeout(&e), "the request was dropped, not {e:?}");
    assert_eq!(get_by_socket(&socket, "oneway"), "from");
    ns.heal().unwrap();
    assert_eq!(conn.reply(PATIENT).unwrap(), "+OK");
    assert_eq!(get_by_socket(&socket, "oneway"), "to");

    // A partition of the port: cut both ways while the server runs.
    ns.partition(&[port]).unwrap();
    let e = connect(port, QUICK).map(drop).unwrap_err();
    assert!(is_timeout(&e), "a connection attempt timed out, not {e:?}");
    assert_eq!(get_by_socket(&socket, "oneway"), "to");
    ns.heal().unwrap();
    assert_eq!(conn.ask("PING", QUICK).unwrap(), "+PONG");
}

#[test]
fn random_loss_delays_round_trips_without_stopping_them() {
    let Some(ns) = Netns::enter_or_skip("random_loss_delays_round_trips_without_stopping_them")
    else {
        return;
    };
    let node = RedisNode::start();
    let mut conn = Raw::open(node.port());
    const PINGS: usize = 15;
    let mut healthy = Duration::ZERO;
    for _ in 0..PINGS {
        let start = Instant::now();
        assert_eq!(conn.ask("PING", QUICK).unwrap(), "+PONG");
        healthy = healthy.max(start.elapsed());
    }

    // 30 % of every loopback packet: each PING still gets its PONG, but
    // some only after a retransmission (200 ms at least). With 2 packets
    // per round trip, 15 round trips all pass untouched with probability
    // 0.7^30, about 2e-5.
    ns.loss(30.0).unwrap();
    let mut slowest = Duration::ZERO;
    let start = Instant::now();
    for i in 0..PINGS {
        let sent = Instant::now();
        let reply = conn
            .ask("PING", PATIENT)
            .unwrap_or_else(|e| panic!("PING {i} under 30 % loss: {e}"));
        assert_eq!(reply, "+PONG");
        slowest = slowest.max(sent.elapsed());
    }
    let lossy = start.elapsed();
    let dropped = ns.dropped().unwrap();
    eprintln!(
        "{PINGS} PINGs: slowest {healthy:?} healthy; under 30 % loss slowest {slowest:?}, \
         {lossy:?} in all, {dropped} packets dropped"
    );
    assert!(dropped > 0, "the loss rule dropped nothing");
    assert!(
        slowest >= Duration::from_millis(150),
        "no round trip waited for a retransmission (slowest {slowest:?})"
    );
    ns.heal().unwrap();
    assert_eq!(conn.ask("PING", PATIENT).unwrap(), "+PONG");
}
