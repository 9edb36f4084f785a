//! Exercises the testkit against real `redis-server` processes.

use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use redlease_testkit::{NodeConfig, RedisNode, RedisNodes};

/// Sends `request` over a fresh raw TCP connection and returns the first reply chunk.
fn raw(addr: &str, request: &[u8], read_timeout: Duration) -> io::Result<String> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(read_timeout))?;
    stream.write_all(request)?;
    let mut buf = [0u8; 512];
    let n = stream.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

fn ping(node: &RedisNode) -> io::Result<String> {
    raw(&node.addr(), b"PING\r\n", Duration::from_secs(2))
}

fn proc_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn start_answers_ping_and_has_a_live_pid() {
    let node = RedisNode::start();
    assert_ne!(node.port(), 6379);
    assert_eq!(node.addr(), format!("127.0.0.1:{}", node.port()));
    assert_eq!(node.url(), format!("redis://127.0.0.1:{}", node.port()));
    assert!(ping(&node).unwrap().starts_with("+PONG"));
    let pid = node.pid().expect("pid while running");
    assert!(proc_exists(pid));
    assert!(node.is_running());
}

#[test]
fn kill_refuses_connections_and_restart_serves_same_port() {
    let mut node = RedisNode::start();
    let port = node.port();
    node.kill();
    node.kill(); // idempotent
    assert!(node.pid().is_none());
    assert!(!node.is_running());
    let err = TcpStream::connect(node.addr()).expect_err("nothing listens after kill");
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);

    node.restart();
    assert_eq!(node.port(), port);
    assert!(node.is_running());
    assert!(ping(&node).unwrap().starts_with("+PONG"));

    // Restart of a running node replaces the process.
    let old_pid = node.pid().unwrap();
    node.restart();
    assert_ne!(node.pid().unwrap(), old_pid);
    assert!(ping(&node).unwrap().starts_with("+PONG"));
}

#[test]
fn pause_stops_replies_until_resume() {
    let mut node = RedisNode::start();
    node.pause();
    let err = raw(&node.addr(), b"PING\r\n", Duration::from_millis(200))
        .expect_err("a stopped server must not reply");
    assert!(
        matches!(
            err.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ),
        "{err:?}"
    );
    assert!(node.is_running(), "a paused node still exists");
    node.resume();
    assert!(ping(&node).unwrap().starts_with("+PONG"));
}

#[test]
fn drop_removes_process_and_dir_even_when_paused() {
    let mut node = RedisNode::start();
    let pid = node.pid().unwrap();
    node.pause();
    drop(node);
    let deadline = Instant::now() + Duration::from_secs(2);
    while proc_exists(pid) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !proc_exists(pid),
        "redis-server {pid} outlived its RedisNode"
    );
}

#[test]
fn drop_on_panic_stops_the_process() {
    let pid = std::panic::catch_unwind(|| {
        let node = RedisNode::start();
        std::panic::panic_any(node.pid().unwrap());
    })
    .unwrap_err()
    .downcast::<u32>()
    .map(|pid| *pid)
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while proc_exists(pid) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    assert!(!proc_exists(pid));
}

#[test]
fn nodes_get_distinct_ports_never_6379() {
    let nodes = RedisNodes::start(5);
    assert_eq!(nodes.len(), 5);
    assert!(!nodes.is_empty());
    let ports: HashSet<u16> = nodes.iter().map(RedisNode::port).collect();
    assert_eq!(ports.len(), 5);
    assert!(!ports.contains(&6379));
    assert_eq!(nodes.urls().len(), 5);
    for node in nodes.iter() {
        assert!(ping(node).unwrap().starts_with("+PONG"));
    }
    assert!(RedisNodes::start(0).is_empty());
}

#[test]
fn node_mut_faults_one_node_only() {
    let mut nodes = RedisNodes::start(3);
    nodes.node_mut(1).kill();
    assert!(!nodes.node(1).is_running());
    assert!(nodes.node(0).is_running() && nodes.node(2).is_running());
}

#[test]
fn requirepass_rejects_unauthenticated_ping() {
    let node = RedisNode::start_with(NodeConfig::new().arg("requirepass", "secret"));
    assert!(ping(&node).unwrap().starts_with("-NOAUTH"));
    let reply = raw(
        &node.addr(),
        b"AUTH secret\r\nPING\r\n",
        Duration::from_secs(2),
    )
    .unwrap();
    assert!(reply.starts_with("+OK"), "{reply}");
}

#[test]
fn appendonly_data_survives_kill_and_restart() {
    let config = NodeConfig::new()
        .arg("appendonly", "yes")
        .arg("appendfsync", "always");
    let mut node = RedisNode::start_with(config);
    let mut con = node.client().get_connection().unwrap();
    let _: () = redis::cmd("SET")
        .arg("lease")
        .arg("token-1")
        .query(&mut con)
        .unwrap();
    drop(con);

    node.kill();
    node.restart();

    let mut con = node.client().get_connection().unwrap();
    let value: Option<String> = redis::cmd("GET").arg("lease").query(&mut con).unwrap();
    assert_eq!(value.as_deref(), Some("token-1"));
}

#[test]
fn default_config_has_no_persistence() {
    let mut node = RedisNode::start();
    let mut con = node.client().get_connection().unwrap();
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    drop(con);
    node.restart();
    let mut con = node.client().get_connection().unwrap();
    let value: Option<String> = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(value, None);
}

#[test]
fn node_started_on_a_short_lived_thread_survives_it() {
    // PR_SET_PDEATHSIG is per thread: the testkit must not tie the server to this one.
    let node = thread::spawn(RedisNode::start).join().unwrap();
    thread::sleep(Duration::from_millis(100));
    assert!(node.is_running());
    assert!(ping(&node).unwrap().starts_with("+PONG"));
}

#[test]
fn restart_panics_clearly_when_port_is_taken() {
    let mut node = RedisNode::start();
    node.kill();
    // Someone else now owns the port; restart must not mistake it for our server.
    let _squatter = std::net::TcpListener::bind(node.addr()).unwrap();
    let started = Instant::now();
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| node.restart()))
        .expect_err("restart must fail while the port is taken");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("could not restart"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!node.is_running());
}

#[test]
fn a_tls_node_serves_tls_only_and_restarts_with_its_certificates() {
    use redlease_testkit::{tls::TestPki, ClientAuth, NodeConfig};
    let pki = TestPki::generate();
    let mut node = RedisNode::start_with(NodeConfig::new().tls(&pki, ClientAuth::Required));
    assert!(
        node.url().starts_with("rediss://127.0.0.1:"),
        "{}",
        node.url()
    );
    let ping = |node: &RedisNode| -> String {
        let mut con = node.client().get_connection().expect("TLS connection");
        redis::cmd("PING").query(&mut con).expect("PING over TLS")
    };
    assert_eq!(ping(&node), "PONG");
    // Plain text on the same port gets no PONG.
    let plain = redis::Client::open(format!("redis://{}", node.addr())).unwrap();
    let refused = plain
        .get_connection_with_timeout(std::time::Duration::from_secs(2))
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
    assert!(refused.is_err(), "plain text answered: {refused:?}");
    node.restart();
    assert_eq!(ping(&node), "PONG");
}
