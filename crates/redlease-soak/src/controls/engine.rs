//! The engine checker's negative controls: a release that wakes out of
//! order, and a holder beyond capacity. Both are made on the soak's side
//! (the library has no switch for either): every key of the name but its
//! fencing counter is deleted on every node with plain commands, whatever
//! the library keeps there (the lock, its waiters' queue, marks,
//! reservations, a semaphore's holders).
//!
//! - `control-engine-queue-jump`: A holds lock 0; B asks for it and
//!   waits (up to 5 s); 400 ms later A's release forgets the waiters (the
//!   keys deleted, nobody woken), and C, arriving then, takes the lock at
//!   its first attempt while B still waits; C holds it 500 ms and
//!   releases; B gets it after. The engine checker passes it only if
//!   `overtaken` is flagged (B by C).
//! - `control-engine-extra-holder`: A and B hold the 2 permits of the
//!   semaphore of name 4; C tries once and is refused; the holders'
//!   permits are forgotten (the keys deleted) while their leases are
//!   valid, and C takes a permit: 3 holders of 2. Passes only if
//!   `over_capacity` is flagged.
//!
//! Either stops as inconclusive (exit 2) when its interleaving did not
//! happen (B not kept waiting, C not let in), so the library's own order
//! or exclusion failing cannot pass for the control.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{inconclusive, Bench};
use crate::engine_checker::{EngineRun, Want};
use crate::history::Mode;
use crate::report::Run;
use crate::workload::engine::{delete_all_but_fence, Ask, Journal, Taken, PERMITS};
use crate::workload::{lock_name, Held, Request};

pub(super) const QUEUE_JUMP: &str = "control-engine-queue-jump";
pub(super) const EXTRA_HOLDER: &str = "control-engine-extra-holder";

/// The semaphore's name in the extra-holder control (as in `engine-mixed`,
/// after its 4 lock names).
const SEMAPHORE: usize = 4;

/// What an engine control tells the checker beside the history.
fn engine_run(
    journal: &Journal,
    nodes: usize,
    capacity: BTreeMap<usize, u32>,
    ttl: Duration,
    modes: &str,
    flagged_by: &'static str,
) -> EngineRun {
    EngineRun {
        asked: journal.asked(),
        nodes,
        capacity,
        disturbances: Vec::new(),
        recover: ttl,
        starvation_bound: 4 * ttl,
        loss_slack: Duration::ZERO,
        modes: modes.to_string(),
        flagged_by: Some(flagged_by),
    }
}

fn one(taken: Option<Taken>) -> Option<Held> {
    match taken {
        Some(Taken::One(held)) => Some(held),
        _ => None,
    }
}

/// `control-engine-queue-jump` (see the module docs).
pub(super) async fn queue_jump(nodes: usize, seed: u64) -> Result<Run, String> {
    const NAME: &str = QUEUE_JUMP;
    let ttl = Duration::from_secs(3);
    let mut bench = Bench::start(nodes, None).await?;
    let journal = Journal::default();
    let mut a = bench.client(0, bench.direct(), ttl).await?;
    let mut b = bench.client(1, bench.direct(), ttl).await?;
    let mut c = bench.client(2, bench.direct(), ttl).await?;
    let write = Ask::One(Want {
        lock: 0,
        mode: Mode::Write,
        weight: 1,
    });
    let waits = Request {
        wait: Some(Duration::from_secs(5)),
        ..Request::default()
    };
    let once = Request {
        once: true,
        ..Request::default()
    };
    let held_a = one(a.ask(&write, once, PERMITS, &journal).await)
        .ok_or_else(|| inconclusive(NAME, "A did not get lock 0"))?;
    bench.note("A took lock 0");
    let waiting = {
        let (write, journal) = (write.clone(), journal.clone());
        tokio::spawn(async move {
            let held = one(b.ask(&write, waits, PERMITS, &journal).await);
            (b, held)
        })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    if waiting.is_finished() {
        return Err(inconclusive(NAME, "B was not kept waiting behind A"));
    }
    bench.note("B asked for lock 0 and waits (up to 5 s)");
    let deleted = a.release_forgetting_waiters(held_a, &bench.addrs).await?;
    bench.note(format!(
        "A's release forgot the waiters: every key of lock 0 but its fencing counter deleted \
         on every node ({deleted} keys), nobody woken"
    ));
    let held_c = one(c.ask(&write, waits, PERMITS, &journal).await)
        .ok_or_else(|| inconclusive(NAME, "C, arriving after B, did not get lock 0"))?;
    if waiting.is_finished() {
        return Err(inconclusive(NAME, "B got lock 0 before C"));
    }
    bench.note(format!(
        "C, arriving 400 ms after B, took lock 0 at its first attempt (token {}) while B still \
         waits",
        held_c.fenced_token()
    ));
    if let Some(seen) = c.read(&held_c).await {
        c.write(&held_c, seen + 1, false).await;
        c.fenced_write(&held_c, false).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = c.release(held_c).await;
    let (mut b, held_b) = waiting
        .await
        .map_err(|e| format!("{NAME}: B's task: {e}"))?;
    let held_b =
        held_b.ok_or_else(|| inconclusive(NAME, "B did not get lock 0 once C released it"))?;
    bench.note(format!(
        "C released it after 500 ms; B got it afterwards (token {})",
        held_b.fenced_token()
    ));
    if let Some(seen) = b.read(&held_b).await {
        b.write(&held_b, seen + 1, false).await;
        b.fenced_write(&held_b, false).await;
    }
    let _ = b.release(held_b).await;
    let nodes = bench.addrs.len();
    let mut run = bench.finish(NAME, seed, ttl, &[("queue_jump", 1)]).await?;
    run.engine = Some(engine_run(
        &journal,
        nodes,
        BTreeMap::new(),
        ttl,
        "write",
        "overtaken",
    ));
    Ok(run)
}

/// `control-engine-extra-holder` (see the module docs).
pub(super) async fn extra_holder(nodes: usize, seed: u64) -> Result<Run, String> {
    const NAME: &str = EXTRA_HOLDER;
    let ttl = Duration::from_secs(3);
    let mut bench = Bench::start(nodes, None).await?;
    let journal = Journal::default();
    let mut clients = Vec::new();
    for worker in 0..3 {
        clients.push(bench.client(worker, bench.direct(), ttl).await?);
    }
    let permit = Ask::One(Want {
        lock: SEMAPHORE,
        mode: Mode::Permit,
        weight: 1,
    });
    let once = Request {
        once: true,
        ..Request::default()
    };
    let mut held = Vec::new();
    for client in clients.iter_mut().take(2) {
        let h = one(client.ask(&permit, once, PERMITS, &journal).await)
            .ok_or_else(|| inconclusive(NAME, "a holder did not get its permit"))?;
        held.push(h);
    }
    bench.note(format!(
        "A and B took the {PERMITS} permits of name {SEMAPHORE}"
    ));
    if let Some(extra) = one(clients[2].ask(&permit, once, PERMITS, &journal).await) {
        let _ = clients[2].release(extra).await;
        return Err(inconclusive(
            NAME,
            "C got a third permit of 2: the library's own exclusion failed, not the control's",
        ));
    }
    bench.note("C tried once and was refused");
    let key = clients[0].locker.admin().key(&lock_name(SEMAPHORE));
    let deleted = delete_all_but_fence(&bench.addrs, &key).await?;
    bench.note(format!(
        "the holders' permits forgotten: every key of name {SEMAPHORE} but its fencing counter \
         deleted on every node ({deleted} keys), while both leases have {} ms left",
        held[0].lease.remaining().as_millis()
    ));
    let extra = one(clients[2].ask(&permit, once, PERMITS, &journal).await)
        .ok_or_else(|| inconclusive(NAME, "C did not get a permit once the keys were gone"))?;
    held.push(extra);
    bench.note(format!(
        "C took a permit: {} holders of {PERMITS}, all valid",
        held.len()
    ));
    for (client, h) in clients.iter_mut().zip(&held) {
        let _ = client.read(h).await;
    }
    for (client, h) in clients.iter_mut().zip(held) {
        let _ = client.release(h).await;
    }
    let nodes = bench.addrs.len();
    let mut run = bench
        .finish(NAME, seed, ttl, &[("extra_holder", 1)])
        .await?;
    run.engine = Some(engine_run(
        &journal,
        nodes,
        BTreeMap::from([(SEMAPHORE, PERMITS)]),
        ttl,
        "permit",
        "over_capacity",
    ));
    Ok(run)
}
