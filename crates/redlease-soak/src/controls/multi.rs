//! The multi-lock's negative control, `control-multi-partial-release`: a
//! multi-lease that no longer holds all of its names while its holder
//! goes on as if it did, so that another client holds one of them too.
//!
//! Client A takes locks 0 and 1 with `try_lock_all` and reads both
//! counters; B tries lock 1 once and is refused (the library's exclusion
//! is intact). Then A "gives lock 1 back early" outside the library: the
//! soak sends a plain `DEL` of lock 1's key to every node (what an
//! application does that frees one name of its set by hand, or with the
//! operator's `force_release`; the library has no call that releases
//! part of a multi-lease). A's lease, valid for seconds more, holds lock
//! 0 alone. B takes lock 1 with `try_lock`, reads, writes counter + 1 and
//! its fenced write; A, still inside its lease, writes both counters and
//! both fenced stores. Two holders of lock 1 at once: judged by the
//! multi-lock checker, the control passes only if `name_overlap` is
//! flagged (the lost update on lock 1 and A's rejected fenced write come
//! with it). A's release then finds lock 1 not its own: the note says
//! what it answered and whether lock 0 was given back all the same.

use std::time::Duration;

use super::{erase, inconclusive, Bench};
use crate::multi_checker::MultiLocks;
use crate::report::Run;
use crate::rig;
use crate::workload::{lock_name, Request};

pub(super) const NAME: &str = "control-multi-partial-release";

pub(super) async fn partial_release(nodes: usize, seed: u64) -> Result<Run, String> {
    let ttl = Duration::from_secs(3);
    let mut bench = Bench::start(nodes, None).await?;
    let mut a = bench.client(0, bench.direct(), ttl).await?;
    let mut b = bench.client(1, bench.direct(), ttl).await?;
    let once = Request {
        once: true,
        ..Request::default()
    };

    let held_a = a
        .take_all(&[0, 1], once)
        .await
        .ok_or_else(|| inconclusive(NAME, "A did not get locks 0 and 1"))?;
    let tokens: Vec<String> = held_a
        .names
        .iter()
        .map(|(lock, _, token)| format!("lock {lock}: {token:?}"))
        .collect();
    bench.note(format!(
        "A took locks 0 and 1 with try_lock_all (tokens {})",
        tokens.join(", ")
    ));
    let mut seen = Vec::new();
    for part in held_a.parts() {
        let value = a
            .read_part(&part)
            .await
            .ok_or_else(|| inconclusive(NAME, "A's read failed"))?;
        seen.push(value);
    }
    if let Some(held) = b.acquire(1, true).await {
        let _ = b.release(held).await;
        return Err(inconclusive(
            NAME,
            "B got lock 1 while A's multi-lease held it: the library's own exclusion failed, \
             not the control's",
        ));
    }
    bench.note("B tried lock 1 once and was refused");

    let key = a.locker.admin().key(&lock_name(1));
    let found = erase(&bench.addrs, &key).await?;
    bench.note(format!(
        "A gave lock 1 back early outside the library: a plain DEL of its key on every node \
         ({found} held it); A's multi-lease has {} ms left",
        held_a.lease.remaining().as_millis()
    ));
    let held_b = b
        .acquire(1, true)
        .await
        .ok_or_else(|| inconclusive(NAME, "B did not get lock 1 after its key was deleted"))?;
    bench.note(format!(
        "B took lock 1 while A's multi-lease has {} ms left, token {}",
        held_a.lease.remaining().as_millis(),
        held_b.fenced_token()
    ));
    let seen_b = b
        .read(&held_b)
        .await
        .ok_or_else(|| inconclusive(NAME, "B's read failed"))?;
    b.write(&held_b, seen_b + 1, false).await;
    b.fenced_write(&held_b, false).await;
    let mut fenced = Vec::new();
    for (part, seen) in held_a.parts().zip(seen) {
        a.write_part(&part, seen + 1, false).await;
        fenced.push((part.lock, a.fenced_write_part(&part, false).await));
    }
    bench.note(format!(
        "B wrote lock 1's counter = {}, then A, inside its lease, wrote both counters; A's \
         fenced writes (lock, accepted): {fenced:?}",
        seen_b + 1
    ));
    let key_0 = a.locker.admin().key(&lock_name(0));
    let released = a.release_all(held_a).await;
    let left: Vec<usize> = rig::leftover_keys(&bench.addrs)
        .await?
        .into_iter()
        .filter(|k| k.key == key_0)
        .map(|k| k.node)
        .collect();
    bench.note(format!(
        "A released its multi-lease: {released:?}; lock 0's key is left on nodes {left:?}"
    ));
    let _ = b.release(held_b).await;
    let mut run = bench
        .finish(NAME, seed, ttl, &[("partial_release", 1)])
        .await?;
    run.multi = Some(MultiLocks {
        waits_judged: Vec::new(),
        starvation_bound: 4 * ttl,
        fenced: true,
        flagged_by: Some("name_overlap"),
    });
    Ok(run)
}
