//! One client: the acquisitions it makes and the lease it holds, decided
//! by the library's rules (`redlease::rules`): quorum sizes, validity and
//! its drift allowance, whether a late grant can still be handed out, the
//! fencing token and its write-back, the restart quarantine, the renewal
//! schedule, and the per-node expiry bounds a kept-alive lease is judged by
//! (`Bounds`, the renewer's own type).

use std::time::{Duration, Instant};

use redlease::rules::{self, Bounds, ModelHold};

use crate::server::{Reply, Request, Token};
use crate::world::{at, Tick};

/// How one node answered the client's current request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Vote {
    Pending,
    /// Yes, with the fencing counter (acquire) or none.
    Yes(u64),
    No,
    Failed,
}

/// A request on its way to a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Msg {
    pub request: Request,
    pub sent: Tick,
    /// The client gave up on it (timed out): it may still be applied, in
    /// any order with newer ones (its connection was abandoned), or never.
    pub stray: bool,
}

/// Why a lease was reported lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lost {
    /// Refusals ruled out a quorum.
    Refused,
    /// Its validity ran out before a quorum confirmed a renewal.
    Expired,
}

/// A lease the client holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    pub token: Token,
    pub fence: u64,
    /// What the holder sees: trusted until then.
    pub valid_until: Instant,
    pub early: Duration,
    pub lost: Option<Lost>,
    pub bounds: Bounds,
    /// The acquire's own bound (late grants count up to it).
    pub acquired_until: Instant,
    /// The nodes that may hold its token (all but those that refused it):
    /// its release goes to these.
    pub may_hold: Vec<bool>,
    /// The renewal round in flight, if any, and its answers.
    pub round: u64,
    pub renewing: Option<(Tick, Vec<Vote>)>,
}

/// Where a client is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Between acquisitions.
    Idle,
    /// Its acquire requests are out, sent at `start`.
    Acquiring {
        token: Token,
        start: Tick,
        ticket: Option<Tick>,
        votes: Vec<Vote>,
        /// The longest wait a refusal asked for.
        pttl: Tick,
    },
    /// Granted, writing its fencing token back to a quorum.
    Fencing {
        token: Token,
        start: Tick,
        fence: u64,
        granted: Vec<bool>,
        may_hold: Vec<bool>,
        acks: Vec<Vote>,
    },
    Holding(Box<Lease>),
    /// Refused: waits for a wake-up or `retry_at`, then tries again in
    /// line with `ticket`; not before `after` (a round trip takes time).
    Waiting {
        ticket: Tick,
        retry_at: Tick,
        after: Tick,
    },
    /// Its release (or the cleanup of a failed attempt) is out.
    Releasing {
        votes: Vec<Vote>,
        /// A failed attempt's cleanup: then wait in line with this ticket
        /// until this tick (or a wake-up). `None`: a lease's release.
        then: Option<(Tick, Tick)>,
    },
    /// Made all its acquisitions.
    Done,
}

/// One client.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    pub hold: ModelHold,
    /// Acquisitions begun (acquire calls).
    pub attempts: u8,
    /// Tokens drawn: one per attempt, a retry in line included.
    pub tokens: u8,
    pub phase: Phase,
    /// Woken by a release that reserved the name for it.
    pub woken: bool,
    /// Whether it has held a lease, held one after waiting in line, and
    /// had a renewal confirmed.
    pub held: bool,
    pub waited: bool,
    pub renewed: bool,
    /// Requests on their way, per node.
    pub links: Vec<Vec<Msg>>,
}

impl Client {
    pub fn new(hold: ModelHold, nodes: usize) -> Client {
        Client {
            hold,
            attempts: 0,
            tokens: 0,
            phase: Phase::Idle,
            woken: false,
            held: false,
            waited: false,
            renewed: false,
            links: vec![Vec::new(); nodes],
        }
    }

    /// The lease, if it holds one.
    pub fn lease(&self) -> Option<&Lease> {
        match &self.phase {
            Phase::Holding(lease) => Some(lease),
            _ => None,
        }
    }

    /// Whether it waits, and may try again at `now`: woken, or its
    /// refusal's wait over, and a round trip after the last attempt.
    pub fn retry_due(&self, now: Tick) -> bool {
        match self.phase {
            Phase::Waiting {
                retry_at, after, ..
            } => after <= now && (self.woken || retry_at <= now),
            _ => false,
        }
    }

    /// Whether it holds a lease it may trust at `now`: one not reported
    /// lost and within its validity. (A lease reported lost is not
    /// trusted; the check below uses validity alone, which is stronger.)
    pub fn valid_at(&self, now: Tick) -> bool {
        self.lease().is_some_and(|l| at(now) < l.valid_until)
    }

    /// Sends `request` at `now` to each node `to` picks, after what is on
    /// its way on the same connection; the votes to wait for (a node not
    /// asked does not answer).
    pub fn send(
        &mut self,
        now: Tick,
        to: &[bool],
        request: impl Fn(usize) -> Request,
    ) -> Vec<Vote> {
        let mut votes = Vec::with_capacity(to.len());
        for (i, link) in self.links.iter_mut().enumerate() {
            if !to[i] {
                votes.push(Vote::No);
                continue;
            }
            votes.push(Vote::Pending);
            link.push(Msg {
                request: request(i),
                sent: now,
                stray: false,
            });
        }
        votes
    }
}

/// Whether `votes` reached `quorum` yeses, cannot reach it any more, or
/// neither yet: the library's tally (`rules::decision`).
pub fn tally(votes: &[Vote], quorum: usize) -> Option<bool> {
    let yes = votes.iter().filter(|v| matches!(v, Vote::Yes(_))).count();
    let pending = votes.iter().filter(|v| **v == Vote::Pending).count();
    rules::decision(votes.len(), quorum, yes, pending)
}

/// The vote a reply to `request` is.
pub fn vote_of(reply: Reply) -> Vote {
    match reply {
        Reply::Granted { fence, .. } => Vote::Yes(fence),
        Reply::Done => Vote::Yes(0),
        Reply::Refused { .. } | Reply::NotOurs => Vote::No,
    }
}
