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
//! Because a waiter holds reservations only on a prefix of its names plus
//! one claim, two waiters with overlapping sets cannot wait on each other
//! in a circle, nor can a waiter and a single-name locker that nests its
//! locks in the same (sorted) order. A caller that holds one name of a
//! waiting multi-lock's set and then asks for an earlier one does wait
//! until the multi-lock gives up, as two nested lockers in opposite
//! orders would.

use std::sync::Arc;
use std::time::Duration;

use crate::coord::engine::Engine;
use crate::core::keys::LockKeys;
use crate::core::token::Token;
use crate::core::validity::Timing;

/// A waiting multi-lock's reservation mark, drawn once it has waited its
/// TTL (so an uncontended `lock_all`, or one that soon gets in, costs
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
                mark: Token::generate(&engine.settings().tag),
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
