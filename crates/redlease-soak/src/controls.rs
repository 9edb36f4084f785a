//! Negative controls: runs in which safety is broken on purpose, by a fixed
//! interleaving (no luck involved), recorded like any run. The checker must
//! flag each one, or the suite proves nothing.
//!
//! - `control-empty-restart`: 3 of 5, restart quarantine off. Client A
//!   reaches only nodes 0-2 (its links to 3 and 4 are reset) and takes the
//!   lock there. Node 2 is killed and restarted at once, empty. Client B
//!   reaches all nodes and gets 2, 3 and 4 while A's lease is valid: two
//!   holders (overlap, lost update). The `empty-restart` scenario repeats
//!   this fault with the quarantine on.
//! - `control-clock-jump`: the same with node 2 under a fake wall clock,
//!   clock-jump guard and restart quarantine off: B first takes and
//!   releases another lock (its Locker has read every server's clock), A
//!   takes the lock on 0-2, node 2's clock jumps twice the TTL ahead (A's
//!   key there expires), B gets 2, 3 and 4 while A's lease is valid. The
//!   `clock-jump` scenario repeats this fault with the guard on.
//! - `control-sleepy-holder`: A takes the lock, reads the counter, sleeps
//!   past `valid_until` and then writes without looking at its lease or
//!   fencing; meanwhile B took the expired lock and wrote: lost update.
//! - `control-broken-release`: A releases with a plain DEL instead of the
//!   library's compare-and-delete (the soak sends the DEL itself; the
//!   library has no switch for it). A's lease expires, B takes the lock,
//!   A's late release deletes B's key, C takes the lock while B holds it:
//!   overlap.
//! - `control-rw-writer-skips-readers`: a writer that skips the readers'
//!   check. Two readers hold a read lock; a writer of the readers' key
//!   prefix is refused (the library's exclusion is intact), but a writer
//!   whose Locker has another key prefix never sees the readers and takes
//!   the lock among them, writes, and releases; a reader after it sees no
//!   write generation. Judged by the read-write checker, it passes only
//!   if `writer_overlap` is flagged (`stale_read` comes with it).
//! - `control-rw-writer-mark-erased`: readers that ignore a waiting
//!   writer. A reader holds; a writer waits for the lock (the reader
//!   refuses it, so it takes a place in the name's queue, which later
//!   readers must wait behind); for 3 s, every 100 ms, the soak deletes
//!   the queue on every node (plain `DEL`: the library has no switch for
//!   it) and a new reader takes a read hold before the previous one lets
//!   go, so the lock is never free. The writer gets in only once the
//!   stream stops. Passes only if `writer_starved` is flagged.
//! - `control-sem-majority`: a semaphore of 2 permits whose permits count
//!   at a plain majority (`Semaphore::unsafe_majority`, the library's
//!   hidden knob) instead of the `n * N / (N + 1) + 1` nodes it needs: 3
//!   nodes with `appendfsync always`; node 2, then 0, then 1 is killed, a
//!   new client takes a permit on the other two (a majority; a client
//!   counting the library's quorum, all 3, is refused first), and the
//!   node is restarted with its data. Three holders at once, each on 2 of
//!   3 nodes, each node holding 2. Judged by the semaphore checker, it
//!   passes only if `over_permits` is flagged. Always 3 nodes.
//! - `control-multi-partial-release` (in `multi`): a multi-lease that
//!   lost one of its names. A takes locks 0 and 1 with `try_lock_all`;
//!   the soak deletes lock 1's key on every node (plain `DEL`: freeing
//!   one name of a set by hand, which the library has no call for); B
//!   takes lock 1 while A's lease is valid, and both write it. Judged by
//!   the multi-lock checker, it passes only if `name_overlap` is flagged.
//!
//! - `control-engine-queue-jump` and `control-engine-extra-holder` (in
//!   `engine`): a release that forgets the waiters, so that a later
//!   arrival is served before one that waits; and a semaphore's holders
//!   forgotten, so that a third takes one of 2 permits. Judged by the
//!   engine checker, they pass only if `overtaken`, and `over_capacity`,
//!   are flagged.
//!
//! - `control-election-ignores-lost` and `control-election-stale-observer`
//!   (in `elections`): leaders that go on leading after `lost()`, while an
//!   operator force-releases the election every second and the next in
//!   line takes over; and an observer that asks one node at a time, told
//!   a deposed leader's older term by a minority that its resignation did
//!   not reach, after the new leader's. Judged by the elections checker,
//!   they pass only if `lead_overlap`, and `observer_order`, are flagged.
//!
//! Every control turns the restart quarantine off: the first two because
//! it is what they show, `control-sem-majority` because its restarted
//! nodes keep every permit (fsync'd) and must vote again at once, the
//! others because nothing restarts there (the brand-new servers would
//! otherwise refuse every lock for the first TTL).

use std::time::{Duration, Instant};

use redlease_testkit::proxy::{Mode, Proxy};
use redlease_testkit::NodeConfig;

use crate::checker::FinalState;
use crate::history::{self, Recorder};
use crate::panics;
use crate::report::Run;
use crate::rig::{self, with_node, Nodes};
use crate::rw_checker::ReadWrite;
use crate::sem_checker::Semaphores;
use crate::store::Store;
use crate::watchdog::Watchdog;
use crate::workload::{lock_name, Client, Request, Settings};

mod elections;
mod engine;
mod multi;

pub const CONTROLS: &[(&str, &str)] = &[
    (
        "control-empty-restart",
        "3 of 5, restart quarantine off: a node restarted empty at once lets a second client \
         in (always 5 nodes)",
    ),
    (
        "control-clock-jump",
        "3 of 5, clock-jump guard and quarantine off: a node's clock jumps past a holder's \
         key; a second client gets in (always 5 nodes)",
    ),
    (
        "control-sleepy-holder",
        "a holder sleeps past its lease and writes without fencing",
    ),
    (
        "control-broken-release",
        "a late release is a plain DEL that deletes the next holder's key",
    ),
    (
        "control-rw-writer-skips-readers",
        "a writer under another key prefix never sees the readers and locks among them \
         (must be flagged writer_overlap)",
    ),
    (
        "control-rw-writer-mark-erased",
        "a waiting writer's place in the queue is deleted before each new reader: a reader \
         stream keeps it out for 3 s (must be flagged writer_starved)",
    ),
    (
        "control-sem-majority",
        "2 permits counted at a plain majority of 3 fsync'd nodes, each taken while another \
         node is down: 3 holders (must be flagged over_permits; always 3 nodes)",
    ),
    (
        multi::NAME,
        "a multi-lease's holder frees one of its names with a plain DEL and goes on; a \
         single-name locker takes it meanwhile (must be flagged name_overlap)",
    ),
    (
        engine::QUEUE_JUMP,
        "a release deletes the lock's keys (its queue too) and wakes nobody: a later arrival \
         takes the lock while an earlier one waits (must be flagged overtaken)",
    ),
    (
        engine::EXTRA_HOLDER,
        "a semaphore's 2 holders are forgotten (its keys deleted) while valid; a third takes \
         a permit (must be flagged over_capacity)",
    ),
    (
        elections::IGNORES_LOST,
        "leaders ignore lost() while an operator force-releases the election every second: \
         the next in line leads beside them (must be flagged lead_overlap)",
    ),
    (
        elections::STALE_OBSERVER,
        "an observer asks one node at a time: a minority a resignation missed tells the old \
         leader's term after the new one's (must be flagged observer_order; 3 nodes or more)",
    ),
];

/// Nodes and a data Redis for a control, and its clients' shared recorder.
struct Bench {
    nodes: Nodes,
    addrs: Vec<String>,
    data: redlease_testkit::RedisNode,
    rec: Recorder,
    watchdog: Watchdog,
    settings: Settings,
    notes: Vec<String>,
}

impl Bench {
    /// `nodes` nodes without persistence; node `fake_clock` (if any) under
    /// a fake wall clock. Every client runs with the restart quarantine
    /// off (see the module docs).
    async fn start(nodes: usize, fake_clock: Option<usize>) -> Result<Bench, String> {
        let configs = (0..nodes)
            .map(|n| rig::node_config(false, fake_clock == Some(n)))
            .collect();
        Bench::start_with(configs).await
    }

    /// One node per config, as [`start`](Self::start).
    async fn start_with(configs: Vec<NodeConfig>) -> Result<Bench, String> {
        let nodes = rig::start_nodes(configs).await?;
        let data = rig::start_data().await?;
        let addrs = nodes
            .iter()
            .map(|n| n.lock().unwrap_or_else(|p| p.into_inner()).addr())
            .collect();
        let epoch = Instant::now();
        Ok(Bench {
            nodes,
            addrs,
            data,
            rec: Recorder::new(epoch),
            watchdog: Watchdog::start(epoch),
            settings: Settings {
                restart_quarantine: Some(Duration::ZERO),
                ..Settings::standard(false)
            },
            notes: Vec::new(),
        })
    }

    fn direct(&self) -> Vec<String> {
        self.addrs.iter().map(|a| format!("redis://{a}")).collect()
    }

    async fn client(
        &self,
        worker: usize,
        urls: Vec<String>,
        ttl: Duration,
    ) -> Result<Client, String> {
        self.client_with(worker, urls, ttl, &self.settings).await
    }

    /// A client with other settings than the bench's.
    async fn client_with(
        &self,
        worker: usize,
        urls: Vec<String>,
        ttl: Duration,
        settings: &Settings,
    ) -> Result<Client, String> {
        Client::connect(
            worker,
            urls,
            &self.data.url(),
            ttl,
            Duration::from_millis(100),
            Duration::from_secs(2),
            settings,
            self.rec.clone(),
        )
        .await
    }

    fn note(&mut self, text: impl Into<String>) {
        let t = self.rec.now();
        self.notes.push(format!(
            "[{:>7.1} ms] {}",
            t.as_secs_f64() * 1e3,
            text.into()
        ));
    }

    /// Nodes (by index) holding `lock`'s key now.
    async fn holders(&self) -> Result<Vec<usize>, String> {
        let mut held: Vec<usize> = rig::leftover_keys(&self.addrs)
            .await?
            .into_iter()
            .map(|k| k.node)
            .collect();
        held.dedup();
        Ok(held)
    }

    /// Waits out the TTL, inspects the nodes and the data Redis, and packs
    /// the run up for the checker.
    async fn finish(
        self,
        name: &str,
        seed: u64,
        ttl: Duration,
        faults: &[(&'static str, u64)],
    ) -> Result<Run, String> {
        tokio::time::sleep(ttl + Duration::from_millis(500)).await;
        let elapsed = self.rec.epoch().elapsed();
        let stalls = self.watchdog.stop();
        let leftover_keys = rig::leftover_keys(&self.addrs).await?;
        let history = self.rec.history();
        // Every lock the control touched (most touch lock 0 only).
        let locks = history.iter().map(|op| op.lock + 1).max().unwrap_or(1);
        let counters = Store::connect(&self.data.url())
            .await?
            .counters(locks)
            .await?;
        Ok(Run {
            scenario: name.to_string(),
            seed,
            nodes: self.addrs.len(),
            seconds: (elapsed.as_secs_f64() * 10.0).round() / 10.0,
            elapsed,
            ttl,
            history,
            faults: faults.iter().copied().collect(),
            state: FinalState {
                counters,
                leftover_keys,
                process_panics: panics::count(),
                stuck_workers: 0,
                stalls,
            },
            notes: self.notes,
            same_server: None,
            read_write: None,
            semaphore: None,
            multi: None,
            engine: None,
            elections: None,
        })
    }
}

/// The error for a control whose scripted interleaving did not happen:
/// the run proves nothing either way.
fn inconclusive(control: &str, step: &str) -> String {
    format!("{control}: could not script the interleaving: {step}")
}

pub async fn run(name: &str, nodes: usize, seed: u64) -> Result<Run, String> {
    match name {
        "control-empty-restart" => two_holders(NodeFault::EmptyRestart, seed).await,
        "control-clock-jump" => two_holders(NodeFault::ClockJump, seed).await,
        "control-sleepy-holder" => sleepy_holder(nodes, seed).await,
        "control-broken-release" => broken_release(nodes, seed).await,
        "control-rw-writer-skips-readers" => writer_skips_readers(nodes, seed).await,
        "control-rw-writer-mark-erased" => writer_mark_erased(nodes, seed).await,
        "control-sem-majority" => sem_majority(seed).await,
        multi::NAME => multi::partial_release(nodes, seed).await,
        engine::QUEUE_JUMP => engine::queue_jump(nodes, seed).await,
        engine::EXTRA_HOLDER => engine::extra_holder(nodes, seed).await,
        elections::IGNORES_LOST => elections::ignores_lost(nodes, seed).await,
        elections::STALE_OBSERVER => elections::stale_observer(nodes, seed).await,
        other => Err(format!("unknown control {other:?}")),
    }
}

/// What `two_holders` does to node 2 while A holds the lock there.
#[derive(Clone, Copy, PartialEq, Eq)]
enum NodeFault {
    /// SIGKILL and restart at once, empty.
    EmptyRestart,
    /// Its wall clock steps twice the TTL ahead.
    ClockJump,
}

/// `control-empty-restart` and `control-clock-jump` (see the module docs).
async fn two_holders(fault: NodeFault, seed: u64) -> Result<Run, String> {
    let name = match fault {
        NodeFault::EmptyRestart => "control-empty-restart",
        NodeFault::ClockJump => "control-clock-jump",
    };
    let ttl = Duration::from_secs(3);
    let fake_clock = (fault == NodeFault::ClockJump).then_some(2);
    let mut bench = Bench::start(5, fake_clock).await?;
    // What these controls show: without the quarantine (both) and the
    // clock-jump guard (the second), node 2 votes for B.
    bench.settings.restart_quarantine = Some(Duration::ZERO);
    bench.settings.clock_jump_guard = fault != NodeFault::ClockJump;
    // A's links to nodes 3 and 4 are cut for the whole control.
    let cut: Vec<Proxy> = (3..5).map(|n| Proxy::start(&bench.addrs[n])).collect();
    for proxy in &cut {
        proxy.set(Mode::Reset);
    }
    let mut a_urls = bench.direct();
    a_urls[3] = cut[0].url();
    a_urls[4] = cut[1].url();
    let mut a = bench.client(0, a_urls, ttl).await?;
    let mut b = bench.client(1, bench.direct(), ttl).await?;

    if fault == NodeFault::ClockJump {
        // B's Locker reads every server's clock before the jump, as the
        // guard would need; with the guard off it makes no difference.
        let warm = b
            .acquire(1, true)
            .await
            .ok_or_else(|| inconclusive(name, "B did not get lock 1"))?;
        let _ = b.release(warm).await;
        bench.note("B took and released lock 1 on every node");
    }
    let held_a = a
        .acquire(0, true)
        .await
        .ok_or_else(|| inconclusive(name, "A did not get nodes 0-2"))?;
    let holders = bench.holders().await?;
    if holders != [0, 1, 2] {
        return Err(inconclusive(
            name,
            &format!("A's key is on {holders:?}, not 0-2"),
        ));
    }
    bench.note(format!(
        "A took the lock on nodes 0, 1, 2 (links to 3, 4 reset), token {}",
        held_a.fenced_token()
    ));
    let seen_a = a
        .read(&held_a)
        .await
        .ok_or_else(|| inconclusive(name, "A's read failed"))?;

    let label = match fault {
        NodeFault::EmptyRestart => {
            with_node(&bench.nodes, 2, |n| {
                n.kill();
                n.restart();
            })
            .await?;
            bench.note("node 2 killed and restarted at once, empty (no fsync'd persistence)");
            "kill_immediate_restart_empty"
        }
        NodeFault::ClockJump => {
            let by = 2 * ttl;
            with_node(&bench.nodes, 2, move |n| n.jump_clock(by)).await?;
            let holders = bench.holders().await?;
            if holders != [0, 1] {
                return Err(inconclusive(
                    name,
                    &format!("after the jump A's key is on {holders:?}, not 0-1"),
                ));
            }
            bench.note(format!(
                "node 2's wall clock jumped {} s ahead: A's key there expired",
                by.as_secs()
            ));
            "clock_jump"
        }
    };

    let held_b = b
        .acquire(0, true)
        .await
        .ok_or_else(|| inconclusive(name, "B did not get nodes 2-4"))?;
    bench.note(format!(
        "B took the lock on nodes 2, 3, 4 while A's lease has {} ms left, token {}",
        held_a.lease.remaining().as_millis(),
        held_b.fenced_token()
    ));
    let seen_b = b
        .read(&held_b)
        .await
        .ok_or_else(|| inconclusive(name, "B's read failed"))?;
    b.write(&held_b, seen_b + 1, false).await;
    b.fenced_write(&held_b, false).await;
    a.write(&held_a, seen_a + 1, false).await;
    let fenced = a.fenced_write(&held_a, false).await;
    bench.note(format!(
        "both wrote counter = {}; after B's fenced write, A's (token {} vs B's {}) {}",
        seen_a + 1,
        held_a.fenced_token(),
        held_b.fenced_token(),
        match fenced {
            Some(true) => "was accepted",
            Some(false) => "was rejected",
            None => "was not made",
        }
    ));
    let _ = a.release(held_a).await;
    let _ = b.release(held_b).await;
    drop(cut);
    bench.finish(name, seed, ttl, &[(label, 1)]).await
}

async fn sleepy_holder(nodes: usize, seed: u64) -> Result<Run, String> {
    const NAME: &str = "control-sleepy-holder";
    let ttl = Duration::from_millis(500);
    let mut bench = Bench::start(nodes, None).await?;
    let mut a = bench.client(0, bench.direct(), ttl).await?;
    let mut b = bench.client(1, bench.direct(), ttl).await?;

    let held_a = a
        .acquire(0, false)
        .await
        .ok_or_else(|| inconclusive(NAME, "A did not get the lock"))?;
    let seen_a = a
        .read(&held_a)
        .await
        .ok_or_else(|| inconclusive(NAME, "A's read failed"))?;
    bench.note(format!("A took the lock and read counter = {seen_a}"));
    // Past valid_until and the keys' own expiry on every node.
    let wake = held_a.lease.valid_until() + ttl + Duration::from_millis(100);
    tokio::time::sleep_until(wake.into()).await;
    bench.note("A slept past its lease");

    let held_b = b
        .acquire(0, false)
        .await
        .ok_or_else(|| inconclusive(NAME, "B did not get the expired lock"))?;
    let seen_b = b
        .read(&held_b)
        .await
        .ok_or_else(|| inconclusive(NAME, "B's read failed"))?;
    if !b.write(&held_b, seen_b + 1, false).await {
        return Err(inconclusive(NAME, "B's write was not acknowledged"));
    }
    b.fenced_write(&held_b, false).await;
    bench.note(format!("B took the expired lock and wrote {}", seen_b + 1));

    // The stale write: no look at valid_until, no fencing.
    if !a.write(&held_a, seen_a + 1, true).await {
        return Err(inconclusive(NAME, "A's stale write was not acknowledged"));
    }
    let fenced = a.fenced_write(&held_a, true).await;
    bench.note(format!(
        "A woke and wrote {} over B's update; the fenced store {} A's stale token",
        seen_a + 1,
        match fenced {
            Some(false) => "rejected",
            Some(true) => "ACCEPTED",
            None => "never saw",
        }
    ));
    let released = a.release(held_a).await;
    bench.note(format!("A's release: {released:?}"));
    let _ = b.release(held_b).await;
    bench.finish(NAME, seed, ttl, &[("holder_pause", 1)]).await
}

async fn broken_release(nodes: usize, seed: u64) -> Result<Run, String> {
    const NAME: &str = "control-broken-release";
    let short = Duration::from_millis(500);
    let long = Duration::from_secs(3);
    let mut bench = Bench::start(nodes, None).await?;
    let mut a = bench.client(0, bench.direct(), long).await?;
    let mut b = bench.client(1, bench.direct(), long).await?;
    let mut c = bench.client(2, bench.direct(), long).await?;

    let held_a = a
        .acquire_with(0, false, Some(short))
        .await
        .ok_or_else(|| inconclusive(NAME, "A did not get the lock"))?;
    let wake = held_a.lease.valid_until() + short + Duration::from_millis(100);
    tokio::time::sleep_until(wake.into()).await;
    bench.note("A took the lock with a 500 ms TTL and let it expire");

    let held_b: crate::workload::Held = b
        .acquire(0, false)
        .await
        .ok_or_else(|| inconclusive(NAME, "B did not get the expired lock"))?;
    bench.note("B took the lock (3 s TTL)");
    let released = a.release_with_plain_del(held_a, &bench.direct()).await;
    bench.note(format!(
        "A released its expired lease with a plain DEL on every node: {released:?}"
    ));
    let held_c = c.acquire(0, true).await.ok_or_else(|| {
        inconclusive(NAME, "C did not get the lock: B's key survived the release")
    })?;
    bench.note(format!(
        "C took the lock while B's lease has {} ms left",
        held_b.lease.remaining().as_millis()
    ));
    let seen_b = b.read(&held_b).await.unwrap_or(0);
    let seen_c = c.read(&held_c).await.unwrap_or(0);
    b.write(&held_b, seen_b + 1, false).await;
    c.write(&held_c, seen_c + 1, false).await;
    let _ = b.release(held_b).await;
    let _ = c.release(held_c).await;
    bench
        .finish(NAME, seed, long, &[("broken_release", 1)])
        .await
}

/// `control-rw-writer-skips-readers` (see the module docs).
async fn writer_skips_readers(nodes: usize, seed: u64) -> Result<Run, String> {
    const NAME: &str = "control-rw-writer-skips-readers";
    /// The skipping writer's key prefix: not the readers' (the library's
    /// default, `redlease:`), but still found by the leak check.
    const PREFIX: &str = "redlease:skips-readers:";
    let ttl = Duration::from_secs(3);
    let mut bench = Bench::start(nodes, None).await?;
    let mut r1 = bench.client(0, bench.direct(), ttl).await?;
    let mut r2 = bench.client(1, bench.direct(), ttl).await?;
    let mut honest = bench.client(2, bench.direct(), ttl).await?;
    let skipping = Settings {
        key_prefix: Some(PREFIX.to_string()),
        ..bench.settings.clone()
    };
    let mut w = bench.client_with(3, bench.direct(), ttl, &skipping).await?;
    let read = Request {
        mode: history::Mode::Read,
        ..Request::default()
    };

    let held_r1 = r1
        .take(0, read)
        .await
        .ok_or_else(|| inconclusive(NAME, "reader 1 did not get the read lock"))?;
    let held_r2 = r2
        .take(0, read)
        .await
        .ok_or_else(|| inconclusive(NAME, "reader 2 did not share it"))?;
    bench.note(format!(
        "two readers hold the lock, generations {:?} and {:?}",
        held_r1.token(),
        held_r2.token()
    ));
    if let Some(held) = honest.acquire(0, true).await {
        let _ = honest.release(held).await;
        return Err(inconclusive(
            NAME,
            "a writer of the readers' prefix was let in among them: the library's own \
             exclusion failed, not the control's",
        ));
    }
    bench.note("a writer of the readers' prefix tried once and was refused");

    let held_w = w
        .take(0, Request::default())
        .await
        .ok_or_else(|| inconclusive(NAME, "the writer of another prefix did not get the lock"))?;
    bench.note(format!(
        "a writer under prefix {PREFIX:?} took the lock among them, token {}",
        held_w.fenced_token()
    ));
    let seen = w
        .read(&held_w)
        .await
        .ok_or_else(|| inconclusive(NAME, "the writer's read failed"))?;
    w.write(&held_w, seen + 1, false).await;
    w.fenced_write(&held_w, false).await;
    let _ = w.release(held_w).await;
    let _ = r1.release(held_r1).await;
    let _ = r2.release(held_r2).await;
    bench.note(format!(
        "the writer wrote counter = {} and the fenced store, then everyone released",
        seen + 1
    ));
    let held_r3 = r1
        .take(0, read)
        .await
        .ok_or_else(|| inconclusive(NAME, "the reader after the writer did not get in"))?;
    bench.note(format!(
        "a reader after the writer sees generation {:?}",
        held_r3.token()
    ));
    let _ = r1.release(held_r3).await;
    let mut run = bench
        .finish(NAME, seed, ttl, &[("writer_skips_readers", 1)])
        .await?;
    run.read_write = Some(ReadWrite {
        waits_judged: vec![3],
        starvation_bound: 4 * ttl,
        flagged_by: Some("writer_overlap"),
    });
    Ok(run)
}

/// `control-rw-writer-mark-erased` (see the module docs).
async fn writer_mark_erased(nodes: usize, seed: u64) -> Result<Run, String> {
    const NAME: &str = "control-rw-writer-mark-erased";
    /// How long the reader stream keeps the writer out.
    const STREAM: Duration = Duration::from_secs(3);
    /// A new reader every so often, each holding until the next is in.
    const EVERY: Duration = Duration::from_millis(100);
    let ttl = Duration::from_millis(500);
    let mut bench = Bench::start(nodes, None).await?;
    let mut readers = [
        bench.client(0, bench.direct(), ttl).await?,
        bench.client(1, bench.direct(), ttl).await?,
    ];
    let mut writer = bench.client(2, bench.direct(), ttl).await?;
    // The writer's place: the name's queue, which readers wait behind.
    let mark = format!("{}:queue", readers[0].locker.admin().key(&lock_name(0)));
    let read = Request {
        mode: history::Mode::Read,
        once: true,
        ..Request::default()
    };

    let mut held = readers[0]
        .take(0, read)
        .await
        .ok_or_else(|| inconclusive(NAME, "the first reader did not get the read lock"))?;
    bench.note("a reader holds the lock");
    let wait = STREAM + Duration::from_secs(2);
    let waiting = tokio::spawn(async move {
        let write = Request {
            wait: Some(wait),
            ..Request::default()
        };
        let held = writer.take(0, write).await;
        (writer, held)
    });
    tokio::time::sleep(EVERY).await;
    bench.note(format!(
        "a writer waits for it (up to {} s); the reader refuses it, so it takes a place in the queue",
        wait.as_secs()
    ));
    let start = Instant::now();
    let mut readers_let_in = 0;
    let mut erased = 0;
    while start.elapsed() < STREAM {
        tokio::time::sleep(EVERY).await;
        // The next reader, after the queue is deleted: a few tries, in
        // case the writer took its place again in between.
        let reader = &mut readers[(readers_let_in + 1) % 2];
        let mut next = None;
        for _ in 0..5 {
            erased += u64::from(erase(&bench.addrs, &mark).await? > 0);
            next = reader.take(0, read).await;
            if next.is_some() {
                break;
            }
        }
        let next = next.ok_or_else(|| {
            inconclusive(
                NAME,
                "a reader was refused five times after erasing the queue",
            )
        })?;
        let previous = std::mem::replace(&mut held, next);
        let _ = readers[readers_let_in % 2].release(previous).await;
        readers_let_in += 1;
    }
    bench.note(format!(
        "for {} s a new reader took a read hold every {} ms before the previous one let go \
         ({readers_let_in} readers; the queue holding the writer's place, deleted first each \
         time, was found {erased} time(s))",
        STREAM.as_secs(),
        EVERY.as_millis()
    ));
    let _ = readers[readers_let_in % 2].release(held).await;
    let (mut writer, held_w) = waiting
        .await
        .map_err(|e| format!("{NAME}: the writer's task: {e}"))?;
    let held_w = held_w.ok_or_else(|| {
        inconclusive(
            NAME,
            "the writer did not get the lock once the readers stopped",
        )
    })?;
    bench.note("the stream stopped; the writer got the lock");
    let _ = writer.release(held_w).await;
    let mut run = bench
        .finish(NAME, seed, ttl, &[("writer_mark_erased", erased)])
        .await?;
    run.read_write = Some(ReadWrite {
        waits_judged: vec![2],
        starvation_bound: 4 * ttl,
        flagged_by: Some("writer_starved"),
    });
    Ok(run)
}

/// `control-sem-majority` (see the module docs).
async fn sem_majority(seed: u64) -> Result<Run, String> {
    const NAME: &str = "control-sem-majority";
    const PERMITS: u32 = 2;
    // Long enough that the first permit is valid when the third is
    // taken, after two kills and restarts.
    let ttl = Duration::from_secs(5);
    let durable = (0..3).map(|_| rig::node_config(true, false)).collect();
    let mut bench = Bench::start_with(durable).await?;
    bench.settings.permits = Some(PERMITS);
    let majority = Settings {
        unsafe_majority: true,
        ..bench.settings.clone()
    };
    let name = lock_name(0);
    let honest = bench.client(9, bench.direct(), ttl).await?;
    let permit = Request {
        mode: history::Mode::Permit,
        once: true,
        ..Request::default()
    };
    let mut holders = Vec::new();
    for (worker, down) in [2, 0, 1].into_iter().enumerate() {
        with_node(&bench.nodes, down, |n| n.kill()).await?;
        // The library's quorum for 2 permits over 3 nodes is all 3.
        let sem = honest.locker.semaphore(name.clone(), PERMITS);
        match sem.allow_no_failures().try_acquire().ttl(ttl).await {
            Err(redlease::Error::NoQuorum { quorum: 3, .. }) => {}
            Err(e) => {
                return Err(inconclusive(
                    NAME,
                    &format!("the library's quorum was not refused as NoQuorum of 3: {e}"),
                ))
            }
            Ok(lease) => {
                let _ = lease.release().await;
                return Err(inconclusive(
                    NAME,
                    "a permit at the library's quorum was granted with a node down: its own \
                     bound failed, not the control's",
                ));
            }
        }
        let mut client = bench
            .client_with(worker, bench.direct(), ttl, &majority)
            .await?;
        await_reachable(&client, &name, down).await?;
        let held = client.take(0, permit).await.ok_or_else(|| {
            inconclusive(
                NAME,
                &format!("no permit on the majority without node {down}"),
            )
        })?;
        with_node(&bench.nodes, down, |n| n.restart()).await?;
        bench.note(format!(
            "node {down} killed; a client at the library's quorum (3 of 3) was refused; \
             client {worker} took a permit at a majority (token {}); node {down} restarted \
             with its data",
            held.fenced_token()
        ));
        holders.push((client, held));
    }
    if let Some((_, held)) = holders.iter().find(|(_, h)| h.lease.remaining().is_zero()) {
        return Err(inconclusive(
            NAME,
            &format!(
                "permit lease {} expired before the third was taken",
                held.id
            ),
        ));
    }
    let (last, _) = &holders[2];
    await_reachable(last, &name, usize::MAX).await?;
    let status = last
        .locker
        .admin()
        .inspect(&name)
        .await
        .map_err(|e| format!("{NAME}: inspect: {e}"))?;
    let per_node: Vec<String> = status
        .nodes
        .iter()
        .map(|(_, state)| match state {
            Ok(state) => state.readers.to_string(),
            Err(_) => "?".to_string(),
        })
        .collect();
    bench.note(format!(
        "{} holders of {PERMITS} permits, all valid; the nodes hold {} permit(s)",
        holders.len(),
        per_node.join(", ")
    ));
    for (client, held) in &mut holders {
        let _ = client.read(held).await;
    }
    // Each holder's Locker back on the nodes restarted since its permit,
    // so that its release reaches them.
    for (mut client, held) in holders {
        await_reachable(&client, &name, usize::MAX).await?;
        let _ = client.release(held).await;
    }
    let mut run = bench
        .finish(NAME, seed, ttl, &[("node_down_per_permit", 3)])
        .await?;
    run.semaphore = Some(Semaphores {
        permits: PERMITS,
        flagged_by: Some("over_permits"),
    });
    Ok(run)
}

/// Waits (up to 5 s) until `client`'s Locker reaches every node but
/// `down` for `name`: it reconnects to a restarted node on its own time.
async fn await_reachable(client: &Client, name: &str, down: usize) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let status = client
            .locker
            .admin()
            .inspect(name)
            .await
            .map_err(|e| format!("inspect {name}: {e}"))?;
        let unreached: Vec<usize> = (0..status.nodes.len())
            .filter(|&i| i != down && status.nodes[i].1.is_err())
            .collect();
        if unreached.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "client {} did not reach nodes {unreached:?} within 5 s",
                client.worker
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Deletes `key` on every node; how many nodes had it.
async fn erase(addrs: &[String], key: &str) -> Result<u64, String> {
    let mut found = 0;
    for addr in addrs {
        let deleted = async {
            let client = redis::Client::open(format!("redis://{addr}"))?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            redis::cmd("DEL")
                .arg(key)
                .query_async::<u64>(&mut conn)
                .await
        };
        found += tokio::time::timeout(Duration::from_secs(2), deleted)
            .await
            .map_err(|_| format!("DEL {key} on {addr} timed out"))?
            .map_err(|e| format!("DEL {key} on {addr}: {e}"))?;
    }
    Ok(found)
}
