//! `redlease run` processes waiting for one lock are served in arrival
//! order, each woken by the release that hands it the lock, and a waiting
//! process that is killed is passed over at once.

use std::time::{Duration, Instant};

use redlease_testkit::RedisNode;
use rustix::process::Signal;

use crate::support::{eventually, finish, lock_key, redlease, signal, start, Holder};

const LIMIT: Duration = Duration::from_secs(30);

/// How many waiters queue for lock `name` on `node`.
fn queue_len(node: &RedisNode, name: &str) -> u64 {
    let mut con = node
        .client()
        .get_connection()
        .expect("connect to test node");
    redis::cmd("ZCARD")
        .arg(format!("{}:queue", lock_key(name)))
        .query(&mut con)
        .expect("ZCARD")
}

#[test]
fn waiting_runs_are_served_in_arrival_order_and_a_killed_one_is_passed_over() {
    const RUNS: usize = 8;
    const KILLED: usize = 3;
    let node = RedisNode::start();
    let urls = [node.url()];
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("served");
    let mut holder = Holder::take(&urls, "turn");
    let mut runs = Vec::new();
    for arrival in 0..RUNS {
        runs.push(start(
            redlease()
                .args(["run", "--nodes", &urls.join(","), "--key", "turn"])
                .args(["--wait", "25s", "--", "sh", "-c"])
                .arg(r#"echo "$ARRIVAL" >> "$LOG""#)
                .env("ARRIVAL", arrival.to_string())
                .env("LOG", &log),
        ));
        // Each queues before the next starts.
        eventually(LIMIT, "the run queued", || {
            queue_len(&node, "turn") == arrival as u64 + 1
        });
    }
    let killed = runs.remove(KILLED);
    signal(&killed, Signal::KILL);
    let _ = finish(killed, LIMIT);

    let released = Instant::now();
    holder.release();
    for run in runs {
        finish(run, LIMIT).expect(0);
    }
    let took = released.elapsed();
    let served: Vec<usize> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let expected: Vec<usize> = (0..RUNS).filter(|&a| a != KILLED).collect();
    assert_eq!(served, expected, "served in arrival order");
    // Each woken by its handoff, the killed one skipped on the spot: a
    // waiter's own timer looks only after seconds.
    println!("{} runs served in {took:?}", served.len());
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert_eq!(queue_len(&node, "turn"), 0);
}
