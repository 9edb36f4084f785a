//! One server's copy of the name, and the scripts' rules restated over it:
//! what `acquire.lua`, `extend.lua`, `release.lua` and `raise_fence.lua`
//! (with `engine.lua` in front) decide, for one name. `tests/scripts.rs`
//! runs the same cases against a real server and compares.
//!
//! A name is free, held alone (by one holder, or reserved for one queued
//! waiter), or held by members (readers, or a semaphore's permit holders,
//! and reservations for queued waiters among them). Each hold expires at
//! its own tick. The queue orders waiters by their arrival ticket; a
//! release serves it first come, first served, reserving for each waiter
//! in turn that fits and waking it, and stopping at the first that does
//! not fit.

use redlease::rules::ModelHold;

use crate::world::Tick;

/// Who holds: a client's acquisition (its token is the pair).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token {
    pub client: u8,
    pub attempt: u8,
}

/// One hold of the name on this server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Member {
    pub token: Token,
    /// A reservation for a queued waiter (`client` only counts), not a
    /// hold.
    pub reserved: bool,
    /// Gone from this tick on.
    pub expiry: Tick,
}

/// What the name holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Free,
    Alone,
    Readers,
    /// A semaphore of this many permits.
    Permits(u32),
}

/// One server: its name's holds, queue and fencing counter.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Server {
    /// The tick it restarted; `None`: up since before the world began.
    pub started: Option<Tick>,
    /// How much earlier than asked it expires a key (its clock is fast).
    pub fast: Tick,
    /// The fencing counter; `None` while missing.
    pub fence: Option<u64>,
    /// The clock's reading (µs) at the last counter drawn: a script run
    /// takes a microsecond at least, so the next reading is later. The
    /// clock, not the memory: a restart keeps it.
    pub drawn: u64,
    pub kind: Kind,
    pub members: Vec<Member>,
    /// Waiters in line: (ticket, client), in ticket order.
    pub queue: Vec<(Tick, u8)>,
}

/// A request a client sends a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Request {
    /// Take the name in `hold`; `ticket`: in line, with this arrival.
    Acquire {
        token: Token,
        hold: ModelHold,
        ticket: Option<Tick>,
    },
    Extend {
        token: Token,
    },
    Release {
        token: Token,
        hold: ModelHold,
    },
    /// `counter = max(counter, value)`.
    RaiseFence {
        value: u64,
    },
}

/// What the server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    /// Taken, with the fencing counter's value and the server's start.
    Granted { fence: u64, started: Option<Tick> },
    /// Not taken; look again after `pttl` ticks.
    Refused { pttl: Tick },
    /// Done (extended, released or raised).
    Done,
    /// Not ours (extend or release of a token that is gone).
    NotOurs,
}

/// What a request runs with besides the server: the clock, the TTL and
/// window, who listens for wake-ups, and the rules turned off.
pub struct Env {
    pub now: Tick,
    pub ttl: Tick,
    pub window: Tick,
    /// Clients whose Locker listens on the name's channel, one bit each.
    pub listening: u32,
    /// The negative control: release whatever holds the name alone.
    pub unchecked_release: bool,
    /// The negative control: a counter always restarts from the clock cut
    /// to 100 ms (the rule before the model found it wanting).
    pub always_cut: bool,
}

/// The servers' clock at the world's start, in microseconds (a multiple
/// of 100 ms).
pub const CLOCK_US: u64 = 1_800_000_000_000_000;

fn kind_of(hold: ModelHold) -> Kind {
    match hold {
        ModelHold::Exclusive => Kind::Alone,
        ModelHold::Shared => Kind::Readers,
        ModelHold::Permit { permits, .. } => Kind::Permits(permits),
    }
}

impl Server {
    /// A server up since `started`, empty, whose clock runs `fast`.
    pub fn new(started: Option<Tick>, fast: Tick) -> Server {
        Server {
            started,
            fast,
            fence: None,
            drawn: 0,
            kind: Kind::Free,
            members: Vec::new(),
            queue: Vec::new(),
        }
    }

    /// The clock's reading for a script run at `now`, in µs.
    fn clock(&self, now: Tick) -> u64 {
        (CLOCK_US + u64::from(now) * 1000).max(self.drawn + 1)
    }

    /// Where a missing counter restarts (`restart_value` in acquire.lua):
    /// the clock, cut to 100 ms once the server has been up a second (or
    /// always, under the control that restores the rule before).
    fn restart_value(&self, env: &Env) -> u64 {
        let clock = self.clock(env.now);
        let up_a_second = self.started.is_none_or(|s| u32::from(env.now - s) >= 1000);
        match up_a_second || env.always_cut {
            true => clock - clock % 100_000,
            false => clock,
        }
    }

    /// Restarts empty at `now`.
    pub fn restart(&mut self, now: Tick) {
        *self = Server {
            drawn: self.drawn,
            ..Server::new(Some(now), self.fast)
        };
    }

    /// Forgets what expired by `now` (every script prunes first).
    pub fn prune(&mut self, now: Tick) {
        self.members.retain(|m| m.expiry > now);
        if self.members.is_empty() {
            self.kind = Kind::Free;
        }
    }

    /// Whether `token` holds the name here (not a reservation).
    pub fn holds(&self, token: Token) -> bool {
        self.members.iter().any(|m| !m.reserved && m.token == token)
    }

    fn used(&self) -> u32 {
        self.members.len() as u32
    }

    /// E.fits: whether `hold` fits what the name holds now.
    fn fits(&self, hold: ModelHold) -> bool {
        match (self.kind, hold) {
            (Kind::Free, _) => true,
            (Kind::Readers, ModelHold::Shared) => true,
            (Kind::Permits(n), ModelHold::Permit { permits, .. }) => {
                n == permits && self.used() < n
            }
            _ => false,
        }
    }

    fn reserved_for(&self, client: u8) -> bool {
        self.members
            .iter()
            .any(|m| m.reserved && m.token.client == client)
    }

    fn add(&mut self, token: Token, hold: ModelHold, reserved: bool, expiry: Tick) {
        if self.kind == Kind::Free {
            self.kind = kind_of(hold);
        }
        self.members.push(Member {
            token,
            reserved,
            expiry,
        });
        self.members.sort();
    }

    fn unreserve(&mut self, client: u8) {
        self.members
            .retain(|m| !(m.reserved && m.token.client == client));
        if self.members.is_empty() {
            self.kind = Kind::Free;
        }
    }

    /// E.serve: hands what is free to the queue, first come, first served;
    /// `me` is reserved without a wake-up. Returns whether `me` was
    /// reserved; the clients woken are added to `woken` (one bit each).
    fn serve(
        &mut self,
        env: &Env,
        me: Option<(u8, ModelHold)>,
        holds: &[ModelHold],
        woken: &mut u32,
    ) -> bool {
        let mut mine = false;
        while let Some(&(ticket, client)) = self.queue.first() {
            let full = match self.kind {
                Kind::Alone => true,
                Kind::Permits(n) => self.used() >= n,
                _ => false,
            };
            if full {
                break;
            }
            self.queue.remove(0);
            let hold = holds[usize::from(client)];
            let listens = env.listening & (1 << client) != 0;
            let expiry = env.now + env.window;
            let token = Token { client, attempt: 0 };
            if self.fits(hold) {
                if me.is_some_and(|(c, _)| c == client) {
                    self.add(token, hold, true, expiry);
                    mine = true;
                } else if listens {
                    self.add(token, hold, true, expiry);
                    *woken |= 1 << client;
                }
                // A waiter nobody listens for is passed over.
            } else if me.is_some_and(|(c, _)| c == client) || listens {
                self.queue.insert(0, (ticket, client));
                break;
            }
        }
        mine
    }

    /// Runs `request` from `client` at `env.now`; `holds` are every
    /// client's holds (a queued place carries its waiter's hold).
    pub fn apply(
        &mut self,
        env: &Env,
        client: u8,
        request: Request,
        holds: &[ModelHold],
        woken: &mut u32,
    ) -> Reply {
        self.prune(env.now);
        match request {
            Request::Acquire {
                token,
                hold,
                ticket,
            } => self.acquire(env, token, hold, ticket, holds, woken),
            Request::Extend { token } => {
                let expiry = env.now + env.ttl - self.fast;
                match self
                    .members
                    .iter_mut()
                    .find(|m| !m.reserved && m.token == token)
                {
                    Some(m) => {
                        m.expiry = expiry;
                        Reply::Done
                    }
                    None => Reply::NotOurs,
                }
            }
            Request::Release { token, .. } => {
                let before = self.members.len();
                if env.unchecked_release && self.kind == Kind::Alone {
                    self.members.retain(|m| m.reserved);
                } else {
                    self.members.retain(|m| m.reserved || m.token != token);
                }
                if self.members.is_empty() {
                    self.kind = Kind::Free;
                }
                let released = self.members.len() < before;
                if released && !self.queue.is_empty() {
                    self.serve(env, None, holds, woken);
                }
                let _ = client;
                match released {
                    true => Reply::Done,
                    false => Reply::NotOurs,
                }
            }
            Request::RaiseFence { value } => {
                self.fence = Some(self.fence.map_or(value, |f| f.max(value)));
                Reply::Done
            }
        }
    }

    fn acquire(
        &mut self,
        env: &Env,
        token: Token,
        hold: ModelHold,
        ticket: Option<Tick>,
        holds: &[ModelHold],
        woken: &mut u32,
    ) -> Reply {
        if let (Kind::Permits(n), ModelHold::Permit { permits, .. }) = (self.kind, hold) {
            if n != permits {
                return Reply::Refused { pttl: 0 };
            }
        }
        let client = token.client;
        let (ready, reserved) = match ticket {
            Some(ticket) => {
                if self.reserved_for(client) {
                    (true, true)
                } else if self.queue.is_empty() && self.fits(hold) {
                    (true, false)
                } else {
                    if !self.queue.iter().any(|&(_, c)| c == client) {
                        self.queue.push((ticket, client));
                        self.queue.sort();
                    }
                    let mine = self.serve(env, Some((client, hold)), holds, woken);
                    (mine, mine)
                }
            }
            None if !self.queue.is_empty() => {
                self.serve(env, None, holds, woken);
                (self.queue.is_empty() && self.fits(hold), false)
            }
            None => (self.fits(hold), false),
        };
        if !ready {
            // How long until the holds that stand in the way end (a
            // reservation's window, a holder's TTL).
            let soonest = self.members.iter().map(|m| m.expiry).min();
            let pttl = soonest.map_or(env.window, |e| e.saturating_sub(env.now));
            return Reply::Refused { pttl };
        }
        if reserved {
            self.unreserve(client);
        }
        let expiry = env.now + env.ttl - self.fast;
        self.add(token, hold, false, expiry);
        let fence = match (hold, self.fence) {
            // A reader draws nothing: the counter as it is.
            (ModelHold::Shared, Some(f)) => f,
            (_, Some(f)) => f + 1,
            (_, None) => self.restart_value(env),
        };
        self.fence = Some(fence);
        self.drawn = self.clock(env.now);
        Reply::Granted {
            fence,
            started: self.started,
        }
    }
}
