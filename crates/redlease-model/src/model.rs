//! The model: the world's state, the steps that change it (time, a server
//! applying a request, the network losing one, a client timing out, a
//! server restarting empty, a client beginning, renewing or releasing),
//! and the properties every reachable state must keep.
//!
//! Every step is a separate action, so the checker explores every order
//! in which they can happen: requests to different servers and from
//! different clients interleave freely, a request may wait any number of
//! ticks before it is applied, a request or its reply may be lost (the
//! client then times out), and a request whose connection was abandoned
//! may still be applied
//! later, after newer ones.

use std::time::Instant;

use redlease::rules::{self, hold_quorum, Bounds, ModelHold};
use stateright::{Model, Property};

use crate::client::{tally, vote_of, Client, Lease, Lost, Msg, Phase, Vote};
use crate::server::{Env, Reply, Request, Server, Token};
use crate::world::{at, tick_at_or_after, Control, Tick, World};

/// No two clients within the validity of conflicting leases (alone
/// against anyone, a reader against a writer).
pub const EXCLUSION: &str = "mutual exclusion";
/// Never more holders of a semaphore's permits within validity than it
/// has permits.
pub const PERMITS: &str = "at most N permit holders";
/// Each lease alone handed out has a larger fencing token than every lease
/// alone handed out before it, and a reader's is at least theirs.
pub const FENCING: &str = "fencing tokens rise in grant order";
/// A lease is reported lost to refusals only when no quorum holds it.
pub const LOSS: &str = "lost only when no quorum holds it";
/// In the fair world, every client that wants the lock gets it.
pub const SERVED: &str = "every waiter is served";
/// Examples that show the model is not vacuous.
pub const GRANTED: &str = "a lease is granted";
pub const HANDOFF: &str = "a waiter in line is served";
pub const RENEWED: &str = "a renewal is confirmed";

/// The state of the world.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub now: Tick,
    pub servers: Vec<Server>,
    pub clients: Vec<Client>,
    /// Faults used so far.
    pub losses: u8,
    pub restarts: u8,
    /// The largest fencing token handed to a lease alone so far.
    pub top_fence: Option<u64>,
    /// A grant broke the fencing order.
    pub fence_broken: bool,
    /// A lease was reported lost to refusals while a quorum held it.
    pub false_loss: bool,
}

/// One step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Time moves on one millisecond.
    Tick,
    /// Client `c` begins an acquisition, or tries again in line.
    Begin(u8),
    /// Server `node` applies the `msg`-th request on its way from
    /// `client`, and the client hears the reply.
    Deliver { client: u8, node: u8, msg: u8 },
    /// An abandoned request never reaches the server.
    Drop { client: u8, node: u8, msg: u8 },
    /// The client gives up on the node after the node timeout: the
    /// request (or its reply) was lost or is late. Its connection is
    /// abandoned: what was on it may still be applied, in any order.
    TimeOut { client: u8, node: u8 },
    /// The holder sends a renewal.
    Renew(u8),
    /// The holder releases.
    Release(u8),
    /// The server restarts empty.
    Restart(u8),
}

/// An acquisition about to be handed out: its token, when its requests
/// went out, its fencing token, the nodes that granted it and those that
/// may hold it.
struct Grant {
    token: Token,
    start: Tick,
    fence: u64,
    granted: Vec<bool>,
    may_hold: Vec<bool>,
}

/// The model of a world.
pub struct LockModel {
    pub world: World,
}

impl LockModel {
    pub fn new(world: World) -> LockModel {
        LockModel { world }
    }

    fn quorum(&self, hold: ModelHold) -> usize {
        hold_quorum(hold, self.world.nodes)
    }

    fn env(&self, state: &State) -> Env {
        // A waiter's Locker listens from its first refusal until it holds
        // the lock: through its attempts in line and their cleanups.
        let listening = state
            .clients
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                matches!(
                    c.phase,
                    Phase::Waiting { .. }
                        | Phase::Acquiring {
                            ticket: Some(_),
                            ..
                        }
                        | Phase::Releasing { then: Some(_), .. }
                )
            })
            .fold(0, |m, (i, _)| m | 1 << i);
        Env {
            now: state.now,
            ttl: self.world.ttl(),
            window: self.world.window,
            listening,
            unchecked_release: self.world.control == Some(Control::UncheckedRelease),
            always_cut: self.world.control == Some(Control::AlwaysCutCounter),
        }
    }

    /// Whether something is due that must happen before time moves on: a
    /// request is answered within its tick (unless the client gave up on
    /// it, see [`Action::TimeOut`]); timers fire on time (a renewal, a
    /// waiter's retry); and in the fair world every client that wants the
    /// lock asks at once, and a holder whose lease was lost releases it.
    fn due(&self, state: &State) -> bool {
        state.clients.iter().any(|c| {
            let overdue = c.links.iter().flatten().any(|m| !m.stray);
            overdue
                || c.retry_due(state.now)
                || match &c.phase {
                    Phase::Holding(lease) => {
                        self.renewal_due(lease, state.now)
                            || (self.world.fair && lease.lost.is_some())
                    }
                    Phase::Idle => self.world.fair && c.attempts < self.world.attempts,
                    _ => false,
                }
        })
    }

    /// Whether a kept-alive lease's next renewal is due at `now`: renewed
    /// leases only, neither lost nor waiting for a renewal's answers.
    fn renewal_due(&self, lease: &Lease, now: Tick) -> bool {
        if !self.world.renew || lease.lost.is_some() || lease.renewing.is_some() {
            return false;
        }
        let due = self
            .world
            .timing
            .next_renewal(lease.valid_until, self.world.fraction);
        tick_at_or_after(due) <= u64::from(now)
    }

    /// The renewer's evaluation of a kept-alive lease at `now` (see
    /// `coord/renew`, `Entry::evaluate`).
    fn evaluate(&self, state: &mut State, c: usize) {
        let now = at(state.now);
        let Phase::Holding(lease) = &mut state.clients[c].phase else {
            return;
        };
        if lease.lost.is_some() {
            return;
        }
        if now >= rules::lost_from(lease.valid_until, lease.early) {
            lease.lost = Some(Lost::Expired);
            return;
        }
        let Some(until) = lease.bounds.trusted_until(lease.valid_until) else {
            // Refusals rule out a quorum: check that none holds it.
            lease.lost = Some(Lost::Refused);
            let token = lease.token;
            let quorum = self.quorum(state.clients[c].hold);
            let holding = state.servers.iter().filter(|s| s.holds(token)).count();
            if holding >= quorum {
                state.false_loss = true;
            }
            return;
        };
        let renewed = lease.renewing.is_some() && lease.bounds.confirmed_by_quorum(lease.round);
        if renewed || until < lease.valid_until {
            lease.valid_until = until;
        }
        if renewed {
            lease.renewing = None;
        }
        if now >= rules::lost_from(lease.valid_until, lease.early) {
            lease.lost = Some(Lost::Expired);
        }
        if renewed {
            state.clients[c].renewed = true;
        }
    }

    /// Client `c` heard `reply` from node `i` to `msg` (`None`: it gave
    /// up on it).
    fn answer(&self, state: &mut State, c: usize, i: usize, msg: Msg, reply: Option<Reply>) {
        let timing = self.world.timing;
        let (now, quarantine) = (state.now, self.world.quarantine);
        let quarantined = |started: Option<Tick>| {
            started.is_some_and(|s| rules::quarantined(quarantine, at(s), at(now)))
        };
        enum Next {
            Acquire,
            Fence,
            Release,
            Renewal,
            Evaluate,
            Nothing,
        }
        let next = match (&mut state.clients[c].phase, msg.request) {
            (Phase::Acquiring { votes, pttl, .. }, Request::Acquire { .. }) => {
                votes[i] = match reply {
                    // The vote guard: a restarted server casts no yes.
                    Some(Reply::Granted { started, .. }) if quarantined(started) => Vote::Failed,
                    Some(Reply::Refused { pttl: p }) => {
                        *pttl = (*pttl).max(p);
                        Vote::No
                    }
                    Some(reply) => vote_of(reply),
                    None => Vote::Failed,
                };
                Next::Acquire
            }
            (Phase::Fencing { acks, .. }, Request::RaiseFence { .. }) => {
                acks[i] = reply.map_or(Vote::Failed, vote_of);
                Next::Fence
            }
            (Phase::Releasing { votes, .. }, Request::Release { .. }) => {
                votes[i] = reply.map_or(Vote::Failed, vote_of);
                Next::Release
            }
            (Phase::Holding(lease), Request::Extend { .. }) => match &mut lease.renewing {
                Some((sent, votes)) if votes[i] == Vote::Pending && *sent == msg.sent => {
                    match reply {
                        Some(Reply::Done) => {
                            votes[i] = Vote::Yes(0);
                            lease
                                .bounds
                                .confirmed(i, at(msg.sent), &timing, lease.round);
                        }
                        Some(_) => {
                            votes[i] = Vote::No;
                            lease.bounds.refused(i);
                        }
                        None => {
                            votes[i] = Vote::Failed;
                            lease.bounds.unknown(i, at(msg.sent), &timing, false);
                        }
                    }
                    Next::Renewal
                }
                _ => Next::Nothing,
            },
            (Phase::Holding(lease), Request::Acquire { token, .. }) if token == lease.token => {
                // A yes after the quorum decided counts for a kept-alive
                // lease, from the acquire's start.
                match reply {
                    Some(Reply::Granted { started, .. }) if !quarantined(started) => {
                        lease.bounds.granted_late(i, lease.acquired_until);
                        Next::Evaluate
                    }
                    Some(Reply::Refused { .. }) => {
                        lease.may_hold[i] = false;
                        Next::Nothing
                    }
                    _ => Next::Nothing,
                }
            }
            _ => Next::Nothing,
        };
        match next {
            Next::Acquire => self.acquire_progress(state, c),
            Next::Fence => self.fence_progress(state, c),
            Next::Release => self.release_progress(state, c),
            Next::Evaluate => self.evaluate(state, c),
            Next::Renewal => {
                self.evaluate(state, c);
                if let Phase::Holding(lease) = &mut state.clients[c].phase {
                    let answered = lease
                        .renewing
                        .as_ref()
                        .is_some_and(|(_, v)| v.iter().all(|v| *v != Vote::Pending));
                    if answered {
                        lease.renewing = None;
                    }
                }
            }
            Next::Nothing => {}
        }
    }

    /// An acquisition's votes changed: decide it when its quorum says so.
    fn acquire_progress(&self, state: &mut State, c: usize) {
        let now = state.now;
        let world = &self.world;
        let nodes = world.nodes;
        let quorum = self.quorum(state.clients[c].hold);
        let Phase::Acquiring {
            token,
            start,
            ticket,
            votes,
            pttl,
        } = &state.clients[c].phase
        else {
            return;
        };
        let (token, start, ticket, pttl, votes) = (*token, *start, *ticket, *pttl, votes.clone());
        match tally(&votes, quorum) {
            Some(true) => {
                let may_hold: Vec<bool> = votes.iter().map(|v| *v != Vote::No).collect();
                if !world.timing.usable(at(now) - at(start)) {
                    self.fail(state, c, token, &may_hold, ticket, pttl);
                    return;
                }
                let granted: Vec<u64> = votes
                    .iter()
                    .filter_map(|v| match v {
                        Vote::Yes(f) => Some(*f),
                        _ => None,
                    })
                    .collect();
                let granted_by: Vec<bool> =
                    votes.iter().map(|v| matches!(v, Vote::Yes(_))).collect();
                let (fence, write_back) =
                    rules::fence(&granted, hold_quorum(ModelHold::Exclusive, nodes));
                if write_back {
                    let client = &mut state.clients[c];
                    let acks = client.send(now, &vec![true; nodes], |_| Request::RaiseFence {
                        value: fence,
                    });
                    client.phase = Phase::Fencing {
                        token,
                        start,
                        fence,
                        granted: granted_by,
                        may_hold: votes.iter().map(|v| *v != Vote::No).collect(),
                        acks,
                    };
                } else {
                    let grant = Grant {
                        token,
                        start,
                        fence,
                        granted: granted_by,
                        may_hold,
                    };
                    self.grant(state, c, grant);
                }
            }
            // Refused: wait for the stragglers, so that the cleanup
            // reaches every node that may have applied it, after it.
            Some(false) if !votes.contains(&Vote::Pending) => {
                let may_hold: Vec<bool> = votes.iter().map(|v| *v != Vote::No).collect();
                self.fail(state, c, token, &may_hold, ticket, pttl);
            }
            Some(false) | None => {}
        }
    }

    fn fence_progress(&self, state: &mut State, c: usize) {
        let now = state.now;
        let nodes = self.world.nodes;
        let Phase::Fencing {
            token,
            start,
            fence,
            granted,
            may_hold,
            acks,
        } = &state.clients[c].phase
        else {
            return;
        };
        let (token, start, fence) = (*token, *start, *fence);
        let (granted, may_hold) = (granted.clone(), may_hold.clone());
        match tally(acks, hold_quorum(ModelHold::Exclusive, nodes)) {
            None => {}
            Some(true) if self.world.timing.usable(at(now) - at(start)) => {
                let grant = Grant {
                    token,
                    start,
                    fence,
                    granted,
                    may_hold,
                };
                self.grant(state, c, grant)
            }
            Some(_) => self.fail(state, c, token, &may_hold, None, 1),
        }
    }

    /// Hands the lease out.
    fn grant(&self, state: &mut State, c: usize, grant: Grant) {
        let Grant {
            token,
            start,
            fence,
            granted,
            may_hold,
        } = grant;
        let world = &self.world;
        let hold = state.clients[c].hold;
        let valid_until: Instant = world.timing.valid_until(at(start));
        let nodes = granted
            .iter()
            .enumerate()
            .filter(|(_, g)| **g)
            .map(|(i, _)| i);
        let bounds = Bounds::new(world.nodes, self.quorum(hold), nodes, valid_until);
        match hold {
            ModelHold::Exclusive => {
                if state.top_fence.is_some_and(|top| fence <= top) {
                    state.fence_broken = true;
                }
                state.top_fence = Some(state.top_fence.map_or(fence, |t| t.max(fence)));
            }
            ModelHold::Shared => {
                if state.top_fence.is_some_and(|top| fence < top) {
                    state.fence_broken = true;
                }
            }
            ModelHold::Permit { .. } => {}
        }
        let client = &mut state.clients[c];
        client.held = true;
        client.phase = Phase::Holding(Box::new(Lease {
            token,
            fence,
            valid_until,
            early: world.timing.drift(),
            lost: None,
            bounds,
            acquired_until: valid_until,
            may_hold,
            round: 0,
            renewing: None,
        }));
    }

    /// The acquisition failed: undo it on every node that may hold its
    /// token (all but those that refused it), then wait in line (refused)
    /// or try again.
    fn fail(
        &self,
        state: &mut State,
        c: usize,
        token: Token,
        may_hold: &[bool],
        ticket: Option<Tick>,
        pttl: Tick,
    ) {
        let now = state.now;
        let client = &mut state.clients[c];
        let hold = client.hold;
        let ticket = ticket.unwrap_or(now * 8 + c as Tick);
        let votes = client.send(now, may_hold, |_| Request::Release { token, hold });
        client.phase = Phase::Releasing {
            votes,
            then: Some((ticket, now + pttl.max(1))),
        };
        self.release_progress(state, c);
    }

    fn release_progress(&self, state: &mut State, c: usize) {
        let after = state.now + 1;
        let client = &mut state.clients[c];
        let Phase::Releasing { votes, then } = &client.phase else {
            return;
        };
        if votes.contains(&Vote::Pending) {
            return;
        }
        client.phase = match *then {
            Some((ticket, retry_at)) => {
                client.waited = true;
                Phase::Waiting {
                    ticket,
                    retry_at: retry_at.max(after),
                    after,
                }
            }
            None if client.attempts < self.world.attempts => Phase::Idle,
            None => Phase::Done,
        };
    }

    /// Starts an attempt of client `c` with a fresh token.
    fn begin(&self, state: &mut State, c: usize, ticket: Option<Tick>) {
        let now = state.now;
        let nodes = self.world.nodes;
        let client = &mut state.clients[c];
        client.tokens += 1;
        let token = Token {
            client: c as u8,
            attempt: client.tokens,
        };
        let hold = client.hold;
        client.woken = false;
        let votes = client.send(now, &vec![true; nodes], |_| Request::Acquire {
            token,
            hold,
            ticket,
        });
        client.phase = Phase::Acquiring {
            token,
            start: now,
            ticket,
            votes,
            pttl: 0,
        };
    }

    /// The index of the message on `link` the server may apply next: any
    /// stray one, or the first that is not (a connection keeps its order).
    fn deliverable(link: &[Msg]) -> impl Iterator<Item = usize> + '_ {
        let first = link.iter().position(|m| !m.stray);
        link.iter()
            .enumerate()
            .filter(move |(k, m)| m.stray || Some(*k) == first)
            .map(|(k, _)| k)
    }
}

impl Model for LockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        // Every server's clock runs fast by the most the allowance covers:
        // keys expire as early as they may.
        let n = self.world.nodes;
        vec![State {
            now: 0,
            servers: vec![Server::new(None, self.world.fast); n],
            clients: self
                .world
                .holds
                .iter()
                .map(|h| Client::new(*h, n))
                .collect(),
            losses: 0,
            restarts: 0,
            top_fence: None,
            fence_broken: false,
            false_loss: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let world = &self.world;
        if state.now < world.horizon && !self.due(state) {
            actions.push(Action::Tick);
        }
        for (c, client) in state.clients.iter().enumerate() {
            let c8 = c as u8;
            // When time stops, clients start nothing new: what is on its
            // way drains, and the world ends.
            let running = state.now < world.horizon;
            match &client.phase {
                Phase::Idle if running && client.attempts < world.attempts => {
                    actions.push(Action::Begin(c8))
                }
                Phase::Waiting { .. } if running && client.retry_due(state.now) => {
                    actions.push(Action::Begin(c8))
                }
                Phase::Holding(lease) => {
                    if running && self.renewal_due(lease, state.now) {
                        actions.push(Action::Renew(c8));
                    }
                    actions.push(Action::Release(c8));
                }
                _ => {}
            }
            for (i, link) in client.links.iter().enumerate() {
                let i8 = i as u8;
                for k in Self::deliverable(link) {
                    actions.push(Action::Deliver {
                        client: c8,
                        node: i8,
                        msg: k as u8,
                    });
                    if link[k].stray {
                        // An abandoned connection's request may never
                        // reach the server.
                        actions.push(Action::Drop {
                            client: c8,
                            node: i8,
                            msg: k as u8,
                        });
                    }
                }
                // A node slower than the node timeout: the request (or
                // its reply) was lost, or is late and may be applied any
                // time later. The client gives up on it then; the model
                // lets it give up at once (it learns no sooner than it
                // would from the other nodes).
                if state.losses < world.losses && link.iter().any(|m| !m.stray) {
                    actions.push(Action::TimeOut {
                        client: c8,
                        node: i8,
                    });
                }
            }
        }
        // The servers are alike (their clocks run equally fast), so the
        // first one stands for any.
        if state.restarts < world.restarts && state.now < world.horizon {
            actions.push(Action::Restart(0));
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let world = &self.world;
        match action {
            Action::Tick => {
                state.now += 1;
                let now = state.now;
                for s in &mut state.servers {
                    s.prune(now);
                }
                for c in 0..state.clients.len() {
                    self.evaluate(&mut state, c);
                }
            }
            Action::Begin(c) => {
                let c = usize::from(c);
                match state.clients[c].phase {
                    Phase::Idle => {
                        state.clients[c].attempts += 1;
                        self.begin(&mut state, c, None);
                    }
                    Phase::Waiting { ticket, .. } => self.begin(&mut state, c, Some(ticket)),
                    _ => return None,
                }
            }
            Action::Deliver { client, node, msg } => {
                let (c, i, k) = (usize::from(client), usize::from(node), usize::from(msg));
                let m = state.clients[c].links[i].remove(k);
                let env = self.env(&state);
                let mut woken = 0u32;
                let reply =
                    state.servers[i].apply(&env, client, m.request, &self.world.holds, &mut woken);
                for (j, other) in state.clients.iter_mut().enumerate() {
                    if woken & (1 << j) != 0 {
                        other.woken = true;
                    }
                }
                if !m.stray {
                    self.answer(&mut state, c, i, m, Some(reply));
                }
            }
            Action::Drop { client, node, msg } => {
                let (c, i, k) = (usize::from(client), usize::from(node), usize::from(msg));
                state.clients[c].links[i].remove(k);
            }
            Action::TimeOut { client, node } => {
                let (c, i) = (usize::from(client), usize::from(node));
                state.losses += 1;
                let abandoned: Vec<Msg> = state.clients[c].links[i]
                    .iter()
                    .filter(|m| !m.stray)
                    .copied()
                    .collect();
                for m in state.clients[c].links[i].iter_mut() {
                    m.stray = true;
                }
                for m in abandoned {
                    self.answer(&mut state, c, i, m, None);
                }
            }
            Action::Renew(c) => {
                let c = usize::from(c);
                let now = state.now;
                let timing = world.timing;
                let nodes = world.nodes;
                let client = &mut state.clients[c];
                let Phase::Holding(lease) = &mut client.phase else {
                    return None;
                };
                lease.round += 1;
                lease.bounds.sending_to_all(at(now), &timing);
                if let Some(until) = lease.bounds.trusted_until(lease.valid_until) {
                    lease.valid_until = until;
                    lease.early = timing.drift();
                }
                let token = lease.token;
                let votes = client.send(now, &vec![true; nodes], |_| Request::Extend { token });
                let Phase::Holding(lease) = &mut client.phase else {
                    unreachable!("held above")
                };
                lease.renewing = Some((now, votes));
                self.evaluate(&mut state, c);
            }
            Action::Release(c) => {
                let c = usize::from(c);
                let now = state.now;
                let client = &mut state.clients[c];
                let Phase::Holding(lease) = &client.phase else {
                    return None;
                };
                let (token, hold, may_hold) = (lease.token, client.hold, lease.may_hold.clone());
                let votes = client.send(now, &may_hold, |_| Request::Release { token, hold });
                client.phase = Phase::Releasing { votes, then: None };
                self.release_progress(&mut state, c);
            }
            Action::Restart(i) => {
                state.restarts += 1;
                let now = state.now;
                state.servers[usize::from(i)].restart(now);
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(EXCLUSION, |_, s: &State| {
                let valid = |hold: ModelHold| {
                    s.clients
                        .iter()
                        .filter(|c| c.hold == hold && c.valid_at(s.now))
                        .count()
                };
                let (alone, shared) = (valid(ModelHold::Exclusive), valid(ModelHold::Shared));
                alone == 0 || (alone == 1 && shared == 0)
            }),
            Property::always(PERMITS, |m: &LockModel, s: &State| {
                let Some(permits) = m.world.permits() else {
                    return true;
                };
                let holders = s
                    .clients
                    .iter()
                    .filter(|c| matches!(c.hold, ModelHold::Permit { .. }) && c.valid_at(s.now))
                    .count();
                holders as u32 <= permits
            }),
            Property::always(FENCING, |_, s: &State| !s.fence_broken),
            Property::always(LOSS, |_, s: &State| !s.false_loss),
            Property::sometimes(GRANTED, |_, s: &State| {
                s.clients.iter().any(|c| c.lease().is_some())
            }),
        ];
        if !self.world.renew && self.world.holds.len() <= 2 {
            // (Holders that renew, or a third client, take it past the
            // depths CI explores.)
            properties.push(Property::sometimes(HANDOFF, |_, s: &State| {
                s.clients.iter().any(|c| c.waited && c.lease().is_some())
            }));
        }
        if self.world.renew {
            properties.push(Property::sometimes(RENEWED, |_, s: &State| {
                s.clients.iter().any(|c| c.renewed)
            }));
        }
        if self.world.fair {
            properties.push(Property::eventually(SERVED, |_, s: &State| {
                s.clients.iter().all(|c| c.held)
            }));
        }
        properties
    }
}
