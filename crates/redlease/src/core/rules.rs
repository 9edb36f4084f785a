//! The library's pure rules, opened to the model checker
//! (`crates/redlease-model`) with the `model` feature, so that the model
//! decides with the code's own arithmetic and the two cannot drift apart:
//! quorum sizes, validity with its drift allowance, when a lease is
//! reported lost, the per-node expiry bounds a kept-alive lease is judged
//! by, the fencing token's choice, when a renewal is due and the restart
//! quarantine. Nothing here does I/O or reads a clock: instants come in
//! as arguments.
//!
//! Not a public API: hidden from the docs, and changed with the code it
//! wraps. A user of the library never turns this feature on.
//!
//! ```
//! use redlease::rules::{hold_quorum, ModelHold};
//! assert_eq!(hold_quorum(ModelHold::Exclusive, 3), 2);
//! assert_eq!(hold_quorum(ModelHold::Permit { permits: 2, majority: false }, 3), 3);
//! assert_eq!(hold_quorum(ModelHold::Permit { permits: 2, majority: true }, 3), 2);
//! ```

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use crate::core::expiry::ExpiryBounds;
use crate::core::lease_state::LeaseState;
use crate::core::mode::Hold;
use crate::core::quorum::{Decision, Tally};
use crate::core::renew_schedule::{next_due, Cadence};
use crate::core::validity::{DriftModel, Timing as CoreTiming};
use crate::core::vote_guard::{ServerFacts, VoteGuard};

/// A hold of one name, as the model names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModelHold {
    /// A holder alone (a lock, or a writer).
    Exclusive,
    /// A reader.
    Shared,
    /// One of a semaphore's permits.
    Permit {
        /// The semaphore's number of permits.
        permits: u32,
        /// Counted at a plain majority (the unsafe rule of the soak's
        /// negative control) instead of the permit quorum.
        majority: bool,
    },
}

/// How many of `nodes` nodes must hold `hold` for it to be held
/// (`Hold::quorum`). A permit count of 0 is taken as 1.
pub fn hold_quorum(hold: ModelHold, nodes: usize) -> usize {
    let hold = match hold {
        ModelHold::Exclusive => Hold::Exclusive,
        ModelHold::Shared => Hold::Shared,
        ModelHold::Permit { permits, majority } => Hold::Permit {
            permits: NonZeroU32::new(permits).unwrap_or(NonZeroU32::MIN),
            weight: NonZeroU32::MIN,
            majority,
        },
    };
    hold.quorum(nodes)
}

/// The timing of a lease: its TTL, drift allowance and node timeout, as
/// a Locker checks and derives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing(CoreTiming);

impl Timing {
    /// The timing of `ttl` with the drift allowance `ttl * drift_factor +
    /// drift_floor` and the node timeout (5% of the TTL, at least 1 ms,
    /// when `None`); the Locker's error message when it refuses them.
    pub fn new(
        ttl: Duration,
        drift_factor: f64,
        drift_floor: Duration,
        node_timeout: Option<Duration>,
    ) -> Result<Timing, String> {
        let drift = DriftModel {
            factor: drift_factor,
            floor: drift_floor,
        };
        drift.check().map_err(|e| e.to_string())?;
        CoreTiming::new("ttl", ttl, drift, node_timeout)
            .map(Timing)
            .map_err(|e| e.to_string())
    }

    /// The TTL the servers are told.
    pub fn ttl(&self) -> Duration {
        self.0.ttl
    }

    /// The drift allowance.
    pub fn drift(&self) -> Duration {
        self.0.drift
    }

    /// How long a node may take to answer.
    pub fn node_timeout(&self) -> Duration {
        self.0.node_timeout
    }

    /// `start + ttl - drift`: when a lease whose requests went out at
    /// `start` stops being trustworthy.
    pub fn valid_until(&self, start: Instant) -> Instant {
        self.0.valid_until(start)
    }

    /// Whether a lease whose quorum answered `elapsed` after its first
    /// request may be handed out.
    pub fn usable(&self, elapsed: Duration) -> bool {
        self.0.usable(elapsed)
    }

    /// When a kept-alive lease that a quorum holds until `valid_until` is
    /// renewed next, renewed every `fraction` of the TTL.
    pub fn next_renewal(&self, valid_until: Instant, fraction: f64) -> Instant {
        next_due(valid_until, &Cadence::new(&self.0, fraction))
    }
}

/// Where `yes` yeses of `nodes`, with `pending` answers still to come,
/// stand against `quorum` (`Tally::decision`): reached (`Some(true)`),
/// out of reach (`Some(false)`), or not known yet (`None`).
pub fn decision(nodes: usize, quorum: usize, yes: usize, pending: usize) -> Option<bool> {
    let tally = Tally {
        nodes,
        quorum,
        yes,
        no: nodes.saturating_sub(yes + pending),
        failed: 0,
    };
    match tally.decision() {
        Decision::Reached => Some(true),
        Decision::Impossible => Some(false),
        Decision::Pending => None,
    }
}

/// When a lease valid until `valid_until` is reported lost if nothing
/// renews it: one allowance (`early`, the drift) before.
pub fn lost_from(valid_until: Instant, early: Duration) -> Instant {
    LeaseState::new(valid_until, early).lost_from()
}

/// Whether a server that started at `started` (on our clock) casts no
/// "yes" at `now`, under a restart quarantine of `quarantine` (zero:
/// off), as the vote guard judges it.
pub fn quarantined(quarantine: Duration, started: Instant, now: Instant) -> bool {
    let guard = VoteGuard::new(quarantine, None, DriftModel::DEFAULT);
    let facts = ServerFacts {
        run_id: String::new(),
        started,
        clock: None,
    };
    guard.quarantine(&facts, now).is_some()
}

/// The fencing token of an acquisition from the counters the granting
/// nodes reported, and whether it must be written back to a quorum
/// before the lease is handed out.
pub fn fence(granted: &[u64], quorum: usize) -> (u64, bool) {
    crate::core::fencing::choose(granted, quorum)
}

/// What a kept-alive lease's holder knows of each node's copy of its key
/// (`ExpiryBounds`): the renewer judges the lease by it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Bounds(ExpiryBounds);

impl Bounds {
    /// Bounds over `nodes`, `quorum` of which must hold the lease,
    /// `granted` holding it until `until`.
    pub fn new(
        nodes: usize,
        quorum: usize,
        granted: impl IntoIterator<Item = usize>,
        until: Instant,
    ) -> Bounds {
        Bounds(ExpiryBounds::new(nodes, quorum, granted, until))
    }

    /// Node `i` confirmed renewal round `round`, sent at `sent`.
    pub fn confirmed(&mut self, i: usize, sent: Instant, t: &Timing, round: u64) {
        self.0.confirmed(i, sent, t.0.ttl, t.0.drift, round);
    }

    /// Node `i` said yes to the acquire after it was decided.
    pub fn granted_late(&mut self, i: usize, until: Instant) {
        self.0.granted_late(i, until);
    }

    /// Node `i` said our token is gone.
    pub fn refused(&mut self, i: usize) {
        self.0.refused(i);
    }

    /// Node `i`'s request, sent at `sent`, has an unknown fate.
    pub fn unknown(&mut self, i: usize, sent: Instant, t: &Timing, failed: bool) {
        self.0.unknown(i, sent, t.0.ttl, t.0.drift, failed);
    }

    /// A renewal is about to go to every node at `now`.
    pub fn sending_to_all(&mut self, now: Instant, t: &Timing) {
        self.0.sending_to_all(now, t.0.ttl, t.0.drift);
    }

    /// Until when the lease may be trusted, given the end published so
    /// far; `None`: refusals rule out a quorum.
    pub fn trusted_until(&self, current: Instant) -> Option<Instant> {
        self.0.trusted_until(current)
    }

    /// Whether a quorum confirmed renewal round `round`.
    pub fn confirmed_by_quorum(&self, round: u64) -> bool {
        self.0.confirmed_by_quorum(round)
    }
}
