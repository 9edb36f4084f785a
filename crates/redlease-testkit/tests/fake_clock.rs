//! Nodes under libfaketime: a jump of one node's wall clock expires its
//! keys early and moves its `TIME`, leaves other nodes and the monotonic
//! clock alone, adds up, and survives restart, kill and pause.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redlease_testkit::{NodeConfig, RedisNode, RedisNodes};

/// How far a server's `TIME` may stray from the host's clock plus the
/// offset, beyond the time the `TIME` round trip took. Both read the same
/// CLOCK_REALTIME, so this only absorbs rounding.
const SLACK: Duration = Duration::from_millis(100);

fn connection(node: &RedisNode) -> redis::Connection {
    let con = node
        .client()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect to {}: {e}", node.addr()));
    // Bounds every reply, BLPOP's included, if a server hangs.
    con.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    con
}

fn unix_now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

/// Asserts the server's `TIME` is the host's clock plus `offset`: the
/// server read its clock between the two reads of ours around the query.
fn assert_ahead(node: &RedisNode, offset: Duration) {
    let mut con = connection(node);
    let before = unix_now();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut con).unwrap();
    let after = unix_now();
    let server = Duration::from_secs(secs) + Duration::from_micros(micros);
    let (low, high) = (before + offset - SLACK, after + offset + SLACK);
    assert!(
        low <= server && server <= high,
        "{}: TIME {server:?} is not the host's clock plus {offset:?} \
         (expected {low:?}..={high:?})",
        node.addr()
    );
}

fn set_px(con: &mut redis::Connection, key: &str, millis: u64) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("token")
        .arg("PX")
        .arg(millis)
        .query(con)
        .unwrap();
}

fn pttl(con: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).unwrap()
}

#[test]
fn a_jump_expires_keys_early_on_that_node_only() {
    let nodes = RedisNodes::start_with(2, NodeConfig::new().fake_clock());
    let plain = RedisNode::start();
    let (jumped, steady) = (nodes.node(0), nodes.node(1));
    for node in [jumped, steady, &plain] {
        assert_eq!(node.clock_offset(), Duration::ZERO);
        assert_ahead(node, Duration::ZERO);
    }
    let mut cons: Vec<redis::Connection> = [jumped, steady, &plain]
        .into_iter()
        .map(connection)
        .collect();
    for con in &mut cons {
        set_px(con, "lease", 30_000);
    }

    jumped.jump_clock(Duration::from_secs(60));

    assert_eq!(jumped.clock_offset(), Duration::from_secs(60));
    assert_ahead(jumped, Duration::from_secs(60));
    assert_eq!(pttl(&mut cons[0], "lease"), -2, "expired by the jump");
    // The other fake-clock node (its own offset file) and the plain node
    // keep the host's clock.
    for (node, con) in [steady, &plain].into_iter().zip(&mut cons[1..]) {
        assert_eq!(node.clock_offset(), Duration::ZERO);
        assert_ahead(node, Duration::ZERO);
        let left = pttl(con, "lease");
        assert!(
            (20_000..=30_000).contains(&left),
            "{}: PTTL {left}",
            node.addr()
        );
    }
}

#[test]
fn after_a_jump_the_monotonic_clock_keeps_its_pace() {
    let node = RedisNode::start_with(NodeConfig::new().fake_clock());
    let mut con = connection(&node);
    node.jump_clock(Duration::from_secs(60));
    // A few event-loop timer ticks (serverCron) after the jump.
    std::thread::sleep(Duration::from_millis(300));

    for _ in 0..20 {
        let sent = Instant::now();
        let pong: String = redis::cmd("PING").query(&mut con).unwrap();
        assert_eq!(pong, "PONG");
        assert!(
            sent.elapsed() < Duration::from_millis(500),
            "PING took {:?}",
            sent.elapsed()
        );
    }
    // Sent after the jump, a blocking command's deadline is on the moved
    // clock too: it waits its timeout, neither 0 s nor the 60 s jumped.
    let sent = Instant::now();
    let popped: Option<(String, String)> = redis::cmd("BLPOP")
        .arg("nothing")
        .arg(1)
        .query(&mut con)
        .unwrap();
    let waited = sent.elapsed();
    assert_eq!(popped, None);
    assert!(
        Duration::from_millis(900) <= waited && waited < Duration::from_secs(3),
        "BLPOP with a 1 s timeout returned after {waited:?}"
    );
    // Expiry after the jump runs at the normal pace.
    set_px(&mut con, "fresh", 30_000);
    let left = pttl(&mut con, "fresh");
    assert!((25_000..=30_000).contains(&left), "PTTL {left}");
}

/// Keeps the server busy across a jump made 0.3 s after it starts, and
/// returns 1, or 0 if it gave up (a bounded number of turns). Where the
/// sandbox has `os.clock` (Valkey 9, whose `TIME` stands still during a
/// script) it spins for 1 s of CPU time. Redis 7.0 has no `os` but a live
/// `TIME`, on the node's wall clock: it spins until that has jumped past
/// ARGV[1] (the host's clock when the script was sent) + 30 s, then 0.5 s
/// longer.
const BUSY_ACROSS_A_JUMP: &str = r#"
local os = rawget(_G, 'os')
if os and os.clock then
  local start = os.clock()
  while os.clock() - start < 1 do end
  return 1
end
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1e6
end
local sent = tonumber(ARGV[1])
local jumped = nil
for _ = 1, 5000000 do
  local t = now()
  if jumped == nil and t >= sent + 30 then jumped = t end
  if jumped ~= nil and t >= jumped + 0.5 then return 1 end
end
return 0
"#;

#[test]
fn a_jump_during_a_script_does_not_make_it_a_busy_script() {
    // Once a script has run for busy-reply-threshold on the monotonic
    // clock, the server answers other clients -BUSY. If libfaketime moved
    // CLOCK_MONOTONIC too, a 60 s jump in the middle of this short script
    // would do that. (A command's duration could not tell: Redis 7.0 times
    // commands on the wall clock unless its monotonic clock is the CPU's
    // TSC, which libfaketime cannot reach.) The threshold is raised from
    // 5 s so that a slow machine still runs the script well within it.
    let node = RedisNode::start_with(
        NodeConfig::new()
            .fake_clock()
            .arg("busy-reply-threshold", "20000"),
    );
    let mut other = connection(&node); // connected before the server is busy
    let mut scripted = connection(&node);
    let sent = unix_now().as_secs_f64();
    let script = std::thread::spawn(move || -> i64 {
        redis::cmd("EVAL")
            .arg(BUSY_ACROSS_A_JUMP)
            .arg(0)
            .arg(sent)
            .query(&mut scripted)
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(300));
    node.jump_clock(Duration::from_secs(60));
    // Sent while the script still runs: answered once it ends.
    let pong: redis::RedisResult<String> = redis::cmd("PING").query(&mut other);
    assert_eq!(script.join().unwrap(), 1, "the script outlasted the jump");
    assert_eq!(pong.expect("PING during the script"), "PONG");
}

#[test]
fn jumps_add_up_and_survive_restart_kill_and_pause() {
    let mut node = RedisNode::start_with(NodeConfig::new().fake_clock());
    node.jump_clock(Duration::from_millis(1500));
    assert_ahead(&node, Duration::from_millis(1500));
    node.jump_clock(Duration::from_secs(30));
    assert_eq!(node.clock_offset(), Duration::from_millis(31_500));
    assert_ahead(&node, Duration::from_millis(31_500));

    node.restart();
    assert_ahead(&node, Duration::from_millis(31_500));

    node.kill();
    node.jump_clock(Duration::from_secs(10)); // applies once it runs again
    node.restart();
    assert_ahead(&node, Duration::from_millis(41_500));

    node.pause();
    node.jump_clock(Duration::from_secs(5));
    node.resume();
    assert_eq!(node.clock_offset(), Duration::from_millis(46_500));
    assert_ahead(&node, Duration::from_millis(46_500));
}

#[test]
fn jump_clock_panics_on_a_node_without_fake_clock() {
    let node = RedisNode::start();
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        node.jump_clock(Duration::from_secs(1))
    }))
    .expect_err("a node on the host's clock cannot jump");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("NodeConfig::fake_clock()"), "{message}");
    assert_eq!(node.clock_offset(), Duration::ZERO);
    assert_ahead(&node, Duration::ZERO);
}
