//! A waiting multi-lock's reservations (see acquire_all.lua): what keeps
//! `lock_all` from being starved by single-name lockers of the same names.
//!
//! A multi-lock waits until every name is free at once. Single-name
//! lockers that come and go can always leave one of them taken, so a
//! waiter that only retries may never get in. Once it has waited its TTL
//! ([`Reservation::wanted`]), by when every name it found held has had
//! time to change hands, the waiter draws a reservation mark, and
//! each later attempt that is refused reserves, on each node, the free
//! names before the first held one (in the canonical order) and claims
//! that one: a reserved name refuses
//! everyone else, and a claimed name's release hands it to the waiter as
//! a reservation. The reserved prefix only grows until the waiter holds
//! every name. Reservations last the waiter's TTL and every attempt renews
//! them, so a waiter that vanished blocks a name for one TTL at most.
//!
//! Waiters that reserve are served in the order they arrived: the mark
//! carries the waiter's arrival ticket (its clock when it began waiting,
//! the same number on every node), and on every node a reservation or a
//! claim of a later waiter gives way to an earlier one's. Without the
//! order each node would go to whichever waiter's attempt reached it
//! first, and a request delayed on one node (a lost packet is resent
//! after 200 ms or more) would split a name between waiters, node by
//! node, with none of them on a quorum, while single lockers took the
//! names the split left unprotected.
//!
//! The earliest waiter waits only for holders, who let go, never for
//! another waiter; and since a waiter holds reservations only on a
//! prefix of its names plus one claim, neither can a waiter and a
//! single-name locker that nests its locks in the same (sorted) order
//! wait on each other in a circle. A caller that holds one name of a
//! waiting multi-lock's set and then asks for an earlier one does wait
//! until the multi-lock gives up, as two nested lockers in opposite
//! orders would.

use std::sync::Arc;
use std::time::Duration;

use crate::coord::engine::Engine;
use crate::core::keys::LockKeys;
use crate::core::token::{LockerTag, Token};
use crate::core::validity::Timing;

/// A waiting multi-lock's reservation mark (with its arrival ticket, see
/// [`mark`]), drawn once it has waited its TTL (so an uncontended `lock_all`, or one that soon gets in, costs
/// nothing more, and single lockers that queued before it are not
/// overtaken by a set that has hardly waited). Dropped, whether the
/// waiter took its names or gave up, it gives back what is left on every
/// node, in the background: the reservations and claim of a node that
/// did not grant the names, or all of them for a waiter that gave up
/// (announced, so single lockers behind them go on at once).
#[derive(Default)]
pub(crate) struct Reservation(Option<Reserved>);

struct Reserved {
    engine: Arc<Engine>,
    keys: Vec<Arc<str>>,
    timeout: Duration,
    mark: Token,
}

impl Reservation {
    /// The mark, once there is one.
    pub(crate) fn mark(&self) -> Option<&Token> {
        self.0.as_ref().map(|r| &r.mark)
    }

    /// The multi-lock of `keys` was refused, having waited `waited` so
    /// far: from its TTL on, reserve from the next attempt on.
    pub(crate) fn wanted(
        &mut self,
        engine: &Arc<Engine>,
        keys: &[LockKeys],
        timing: Timing,
        waited: Duration,
    ) {
        if self.0.is_none() && waited >= timing.ttl {
            self.0 = Some(Reserved {
                engine: engine.clone(),
                keys: keys.iter().map(|k| k.lock.clone()).collect(),
                timeout: timing.node_timeout,
                mark: mark(&engine.settings().tag, arrival(waited)),
            });
        }
    }

    /// How long the waiter may sleep, having waited `waited`: until it is
    /// due to reserve, and once it reserves, half their lifetime (each
    /// attempt renews them).
    pub(crate) fn wake_within(&self, timing: Timing, waited: Duration) -> Duration {
        match self.0 {
            Some(_) => timing.ttl / 2,
            None => timing.ttl.saturating_sub(waited),
        }
    }
}

/// The waiter's arrival ticket: microseconds since the Unix epoch by this
/// machine's clock, `waited` ago (0 for a clock before the epoch). The
/// same number on every node, so that every node orders the waiters
/// alike (as a queued waiter's ticket, see [`Place`](crate::coord::place::Place)).
fn arrival(waited: Duration) -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(0, |since| {
        u64::try_from(since.saturating_sub(waited).as_micros()).unwrap_or(u64::MAX)
    })
}

/// A reservation mark as acquire_all.lua orders them: the Locker's tag
/// (16 hex digits), the arrival `ticket` (16), then 64 random bits (16).
/// Lower tickets go first; the random part tells apart waiters that
/// arrived in the same microsecond, and marks of different waiters.
fn mark(tag: &LockerTag, ticket: u64) -> Token {
    let text = format!(
        "{}{ticket:016x}{:016x}",
        tag.as_str(),
        rand::random::<u64>()
    );
    // A tag is 16 lowercase hex digits: this always parses.
    Token::parse(&text).unwrap_or_else(|| Token::generate(tag))
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let Some(r) = self.0.take() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return; // They expire with the waiter's TTL.
        }
        let background = r.engine.background().clone();
        background.spawn(async move {
            let gives = r
                .engine
                .nodes()
                .iter()
                .map(|node| node.unreserve(&r.keys, &r.mark, r.timeout));
            for result in futures_util::future::join_all(gives).await {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "giving back reservations failed; they expire");
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_carry_the_tag_and_order_by_arrival() {
        let tag = LockerTag::generate();
        let (early, late) = (mark(&tag, 1_000), mark(&tag, 1_001));
        for m in [&early, &late] {
            assert_eq!(m.as_str().len(), 48);
            assert!(m.as_str().starts_with(tag.as_str()));
        }
        // acquire_all.lua compares digits 17 to 32 as text.
        assert!(early.as_str()[16..32] < late.as_str()[16..32]);
        assert_eq!(&early.as_str()[16..32], "00000000000003e8");
        assert!(mark(&tag, u64::MAX).as_str()[16..32] > late.as_str()[16..32]);
        // Two waiters of one microsecond still differ.
        assert_ne!(mark(&tag, 7).as_str(), mark(&tag, 7).as_str());
    }

    #[test]
    fn arrival_is_the_clock_when_the_wait_began() {
        let began = arrival(Duration::from_secs(2));
        let now = arrival(Duration::ZERO);
        assert!(
            now >= began + 2_000_000 && now < began + 3_000_000,
            "{now} {began}"
        );
        // Nothing before the epoch, whatever the wait.
        assert_eq!(arrival(Duration::MAX), 0);
    }
}
