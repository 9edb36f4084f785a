//! Whether a server may vote "yes" on an acquire: it must not have
//! restarted, or had its clock jump forward, so recently that a lock it
//! held for somebody else may have vanished from it, and it must not be a
//! server another node of the Locker already speaks for. Pure logic: the
//! transport reports what it read from the server (`INFO server`, `TIME`,
//! a new key's `PEXPIRETIME`) and when; this decides.
//!
//! # Why
//!
//! A majority is only a majority if every "yes" comes from a server that
//! still remembers every lock it granted and is still within their TTLs:
//!
//! - A server without fsync'd persistence that restarts comes back empty.
//!   Until every lease it had granted has run out, it would grant the same
//!   lock again, and a second client could assemble a quorum with it.
//!   Hence the **restart quarantine**: a server whose uptime is below the
//!   quarantine casts no "yes" (its writes are still made, undone and
//!   extended as usual; they only do not count).
//! - A server whose wall clock steps forward (an NTP step, a restored VM)
//!   expires keys early by the size of the step: the same danger. A jump
//!   is seen as the server's clock advancing faster than our monotonic
//!   clock over the same interval, beyond the drift allowance; such a
//!   server is quarantined as if it had just restarted.
//! - Two configured nodes that are one server (`localhost:6379` and
//!   `127.0.0.1:6379`) would count its vote twice. The server's `run_id`
//!   tells them apart; the second node to reach it does not count.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::core::node_error::{NodeErrorKind, Quarantine};
use crate::core::validity::DriftModel;

/// What a server said about itself when a connection reached it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ServerFacts {
    /// `run_id`: random per process start.
    pub(crate) run_id: String,
    /// The latest instant the process can have started, on our clock:
    /// `uptime_in_seconds - 1` before the reply (the server subtracts whole
    /// seconds, so it may say 1 a few milliseconds after starting). Errs
    /// late, towards a longer quarantine, by up to 2 s.
    pub(crate) started: Instant,
    /// The server's clock when it answered.
    pub(crate) clock: Option<ClockSample>,
}

/// One reading of a server's clock, between our sending the request and
/// reading its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClockSample {
    pub(crate) sent: Instant,
    pub(crate) received: Instant,
    /// Microseconds since the Unix epoch, cut down to the reading's
    /// resolution: the server's clock read at least this, and less than
    /// this plus `resolution_us`.
    pub(crate) server_us: u64,
    pub(crate) resolution_us: u64,
}

impl ClockSample {
    /// A sample from `TIME`'s two numbers (seconds, microseconds).
    pub(crate) fn new(sent: Instant, received: Instant, secs: u64, micros: u64) -> ClockSample {
        ClockSample {
            sent,
            received,
            server_us: secs.saturating_mul(1_000_000).saturating_add(micros),
            resolution_us: 1,
        }
    }

    /// A sample from the absolute expiry (`PEXPIRETIME`, Unix
    /// milliseconds) of a key just set with a TTL of `ttl_ms`: the server
    /// computed it from its clock when it ran the `SET`, so that clock is
    /// the expiry minus the TTL, to the millisecond. It is the very clock
    /// that will expire the key.
    pub(crate) fn from_expiry(
        sent: Instant,
        received: Instant,
        expiry_ms: u64,
        ttl_ms: u64,
    ) -> ClockSample {
        ClockSample {
            sent,
            received,
            server_us: expiry_ms.saturating_sub(ttl_ms).saturating_mul(1000),
            resolution_us: 1000,
        }
    }

    /// How far the server's clock ran ahead of ours from `earlier` to
    /// `self`, beyond `drift` over that interval; `None` if it did not.
    ///
    /// The server read its clock somewhere between our send and our
    /// receive, so at most `self.received - earlier.sent` passed between
    /// the two readings: comparing with that bound never mistakes a slow
    /// round trip for a jump. Likewise the server's clock advanced by at
    /// least `self`'s reading less the end of `earlier`'s resolution: a
    /// millisecond reading never makes a jump of a fraction of one.
    fn jump_since(&self, earlier: &ClockSample, drift: DriftModel) -> Option<Duration> {
        let floor = earlier.server_us.saturating_add(earlier.resolution_us);
        let server = Duration::from_micros(self.server_us.checked_sub(floor)?);
        let most = self.received.checked_duration_since(earlier.sent)?;
        let allowed = most + drift.drift(most);
        server.checked_sub(allowed).filter(|d| !d.is_zero())
    }
}

/// Reads `run_id` and `uptime_in_seconds` from an `INFO server` reply
/// that arrived at `received`.
pub(crate) fn parse_info_server(
    info: &str,
    received: Instant,
    clock: Option<ClockSample>,
) -> Result<ServerFacts, String> {
    let field = |name: &str| {
        info.lines().find_map(|line| {
            line.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(':'))
                .map(str::trim)
        })
    };
    let run_id = field("run_id")
        .filter(|id| !id.is_empty())
        .ok_or("INFO server has no run_id")?;
    let uptime: u64 = field("uptime_in_seconds")
        .and_then(|s| s.parse().ok())
        .ok_or("INFO server has no uptime_in_seconds")?;
    // The server counts whole wall-clock seconds now minus whole seconds at
    // its start, so 1 can show a few milliseconds after it started: it has
    // been up for more than `uptime - 1` seconds, and no more can be told.
    let surely_up = Duration::from_secs(uptime.saturating_sub(1));
    let started = received.checked_sub(surely_up).unwrap_or(received);
    Ok(ServerFacts {
        run_id: run_id.to_string(),
        started,
        clock,
    })
}

/// Which node of a Locker first reached each server, by `run_id`, and the
/// first pair of nodes found to be one server.
#[derive(Debug, Default)]
pub(crate) struct ServerRegistry {
    claims: Mutex<HashMap<String, usize>>,
    pair: Mutex<Option<(usize, usize)>>,
}

impl ServerRegistry {
    /// Records that node `index` reached the server `run_id`; `Err(other)`
    /// if node `other` reached it first.
    pub(crate) fn claim(&self, run_id: &str, index: usize) -> Result<(), usize> {
        let mut claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        match claims.get(run_id) {
            Some(&other) if other != index => {
                self.found((index, other));
                Err(other)
            }
            Some(_) => Ok(()),
            None => {
                claims.insert(run_id.to_string(), index);
                Ok(())
            }
        }
    }

    /// Records that nodes `a` and `b` are one server.
    pub(crate) fn found(&self, (a, b): (usize, usize)) {
        let mut pair = self.pair.lock().unwrap_or_else(|p| p.into_inner());
        pair.get_or_insert((a.max(b), a.min(b)));
    }

    /// A pair of nodes known to be one server: (the later, the earlier).
    pub(crate) fn pair(&self) -> Option<(usize, usize)> {
        *self.pair.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether node `index` has reached a server and claimed it.
    pub(crate) fn has_claimed(&self, index: usize) -> bool {
        let claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        claims.values().any(|&i| i == index)
    }
}

/// The vote rules for one node; see the module docs. A node that is a
/// cluster has a server per shard: each is judged on its own, its clock
/// compared with its own earlier readings only.
#[derive(Debug)]
pub(crate) struct VoteGuard {
    /// How long a server casts no "yes" after it started; zero: off.
    quarantine: Duration,
    /// How long after a clock jump; `None`: the clock is not watched.
    clock_suspension: Option<Duration>,
    drift: DriftModel,
    state: Mutex<Servers>,
}

/// The state of the server judged last, and of the others met (a
/// cluster's other shards, or the server before a failover).
#[derive(Debug, Default)]
struct Servers {
    current: GuardState,
    others: HashMap<String, GuardState>,
}

/// How many servers besides the current one a guard remembers: more than
/// a cluster's primaries. Beyond it, the one whose clock was read longest
/// ago is forgotten (its next reading starts a new comparison).
const REMEMBERED: usize = 256;

impl Servers {
    /// The state of the server `run_id`, made the current one.
    fn of(&mut self, run_id: &str) -> &mut GuardState {
        if self.current.run_id.as_deref() != Some(run_id) {
            let state = self.others.remove(run_id).unwrap_or_default();
            let before = std::mem::replace(&mut self.current, state);
            if let Some(id) = before.run_id.clone() {
                if self.others.len() >= REMEMBERED {
                    let oldest = self
                        .others
                        .iter()
                        .min_by_key(|(_, s)| s.last.map(|l| l.received))
                        .map(|(id, _)| id.clone());
                    if let Some(oldest) = oldest {
                        self.others.remove(&oldest);
                    }
                }
                self.others.insert(id, before);
            }
        }
        &mut self.current
    }
}

#[derive(Debug, Default)]
struct GuardState {
    /// The server the samples below come from.
    run_id: Option<String>,
    last: Option<ClockSample>,
    /// Until when, and by how much, after a clock jump.
    jumped: Option<(Instant, Duration)>,
}

impl VoteGuard {
    pub(crate) fn new(
        quarantine: Duration,
        clock_suspension: Option<Duration>,
        drift: DriftModel,
    ) -> VoteGuard {
        VoteGuard {
            quarantine,
            clock_suspension,
            drift,
            state: Mutex::default(),
        }
    }

    /// Takes in what the latest connection learned (`facts`) and a clock
    /// reading from a reply (`sample`), and says why the server may not
    /// vote "yes" at `now`, if it may not.
    pub(crate) fn objection(
        &self,
        facts: &ServerFacts,
        sample: Option<ClockSample>,
        now: Instant,
    ) -> Option<NodeErrorKind> {
        let mut servers = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let state = servers.of(&facts.run_id);
        if state.run_id.is_none() {
            // A server process not met before: its clock is compared with
            // itself only.
            *state = GuardState {
                run_id: Some(facts.run_id.clone()),
                last: facts.clock,
                jumped: None,
            };
        }
        if let (Some(suspension), Some(sample)) = (self.clock_suspension, sample) {
            if let Some(jump) = state
                .last
                .and_then(|last| sample.jump_since(&last, self.drift))
            {
                state.jumped = Some((sample.received + suspension, jump));
            }
            if state
                .last
                .is_none_or(|last| last.received <= sample.received)
            {
                state.last = Some(sample);
            }
        }
        self.judge(state, facts, now)
            .map(|(cause, left)| NodeErrorKind::Quarantined { cause, left })
    }

    /// Why, and for how long yet, the server `facts` describes casts no
    /// "yes" at `now`, as far as this guard knows: its restart quarantine,
    /// or a clock jump an earlier [`objection`](Self::objection) saw.
    /// Read-only: takes in no clock reading (see `Node::inspect`).
    pub(crate) fn quarantine(
        &self,
        facts: &ServerFacts,
        now: Instant,
    ) -> Option<(Quarantine, Duration)> {
        let servers = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let state = match servers.current.run_id.as_deref() == Some(facts.run_id.as_str()) {
            true => Some(&servers.current),
            false => servers.others.get(&facts.run_id),
        };
        match state {
            Some(state) => self.judge(state, facts, now),
            None => self.judge(&GuardState::default(), facts, now),
        }
    }

    fn judge(
        &self,
        state: &GuardState,
        facts: &ServerFacts,
        now: Instant,
    ) -> Option<(Quarantine, Duration)> {
        let up = now.saturating_duration_since(facts.started);
        if let Some(left) = self.quarantine.checked_sub(up).filter(|d| !d.is_zero()) {
            return Some((Quarantine::Restarted { up }, left));
        }
        // A jump is of the server the samples came from.
        if state.run_id.as_deref() != Some(facts.run_id.as_str()) {
            return None;
        }
        match state.jumped {
            Some((until, ahead)) if until > now => {
                Some((Quarantine::ClockJumped { ahead }, until - now))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const SEC: Duration = Duration::from_secs(1);

    fn facts(run_id: &str, started: Instant) -> ServerFacts {
        ServerFacts {
            run_id: run_id.to_string(),
            started,
            clock: None,
        }
    }

    fn sample(t0: Instant, at: Duration, rtt: Duration, server_us: u64) -> ClockSample {
        ClockSample {
            sent: t0 + at,
            received: t0 + at + rtt,
            server_us,
            resolution_us: 1,
        }
    }

    fn guard(quarantine: Duration) -> VoteGuard {
        VoteGuard::new(quarantine, Some(10 * SEC), DriftModel::DEFAULT)
    }

    #[test]
    fn info_server_gives_run_id_and_a_late_start() {
        let now = Instant::now() + 100 * SEC;
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n";
        let facts = parse_info_server(info, now, None).unwrap();
        assert_eq!(facts.run_id, "abc123");
        // 42 whole-second ticks: surely more than 41 s up, not surely 42.
        assert_eq!(facts.started, now - 41 * SEC);
        for fresh in ["0", "1"] {
            let info = format!("run_id:x\r\nuptime_in_seconds:{fresh}\r\n");
            let facts = parse_info_server(&info, now, None).unwrap();
            assert_eq!(facts.started, now, "uptime {fresh}: maybe just started");
        }
        assert!(parse_info_server("# Server\r\nuptime_in_seconds:1\r\n", now, None).is_err());
        assert!(parse_info_server("run_id:x\r\nuptime_in_seconds:soon\r\n", now, None).is_err());
    }

    #[test]
    fn a_young_server_is_quarantined_for_what_is_left() {
        let t0 = Instant::now();
        let g = guard(10 * SEC);
        let f = facts("a", t0);
        match g.objection(&f, None, t0 + 4 * SEC) {
            Some(NodeErrorKind::Quarantined {
                cause: Quarantine::Restarted { up },
                left,
            }) => {
                assert_eq!(up, 4 * SEC);
                assert_eq!(left, 6 * SEC);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(g.objection(&f, None, t0 + 10 * SEC), None);
        // Off: a server that just started votes at once.
        assert_eq!(guard(Duration::ZERO).objection(&f, None, t0), None);
    }

    #[test]
    fn a_clock_that_keeps_pace_is_not_a_jump() {
        let t0 = Instant::now();
        let g = guard(Duration::ZERO);
        let f = facts("a", t0);
        let base = 1_000_000_000_000u64;
        for i in 0..100u64 {
            // The server reads its clock anywhere in the round trip.
            let at = Duration::from_millis(i * 37);
            let read = base + (i * 37 + (i % 3)) * 1000;
            assert_eq!(
                g.objection(&f, Some(sample(t0, at, 3 * MS, read)), t0 + at),
                None
            );
        }
    }

    #[test]
    fn a_forward_step_quarantines_and_says_by_how_much() {
        let t0 = Instant::now();
        let g = guard(Duration::ZERO);
        let f = facts("a", t0);
        let base = 1_000_000_000_000u64;
        assert_eq!(
            g.objection(&f, Some(sample(t0, SEC, MS, base)), t0 + SEC),
            None
        );
        // One second later by our clock, the server says 31 s later.
        let jumped = sample(t0, 2 * SEC, MS, base + 31_000_000);
        match g.objection(&f, Some(jumped), t0 + 2 * SEC) {
            Some(NodeErrorKind::Quarantined {
                cause: Quarantine::ClockJumped { ahead },
                left,
            }) => {
                assert!(ahead > 29 * SEC && ahead < 30 * SEC, "{ahead:?}");
                assert!(left > 9 * SEC && left <= 10 * SEC + MS, "{left:?}");
            }
            other => panic!("{other:?}"),
        }
        // Still quarantined on the next reply, which keeps pace again...
        let later = sample(t0, 3 * SEC, MS, base + 32_000_000);
        assert!(g.objection(&f, Some(later), t0 + 3 * SEC).is_some());
        // ...until the suspension is over.
        let much_later = sample(t0, 13 * SEC, MS, base + 42_000_000);
        assert_eq!(g.objection(&f, Some(much_later), t0 + 13 * SEC), None);
    }

    #[test]
    fn the_quarantine_is_read_without_changing_anything() {
        let t0 = Instant::now();
        let g = guard(10 * SEC);
        let a = facts("a", t0);
        assert_eq!(
            g.quarantine(&a, t0 + 4 * SEC),
            Some((Quarantine::Restarted { up: 4 * SEC }, 6 * SEC))
        );
        assert_eq!(g.quarantine(&a, t0 + 10 * SEC), None);
        // A jump an objection saw is read back, for that server only.
        let base = 1_000_000_000_000u64;
        let later = t0 + 20 * SEC;
        g.objection(&a, Some(sample(later, SEC, MS, base)), later + SEC);
        let jumped = sample(later, 2 * SEC, MS, base + 31_000_000);
        assert!(g.objection(&a, Some(jumped), later + 2 * SEC).is_some());
        match g.quarantine(&a, later + 3 * SEC) {
            Some((Quarantine::ClockJumped { ahead }, left)) => {
                assert!(ahead > 29 * SEC, "{ahead:?}");
                assert!(left > 8 * SEC && left <= 9 * SEC + MS, "{left:?}");
            }
            other => panic!("{other:?}"),
        }
        let b = facts("b", t0);
        assert_eq!(g.quarantine(&b, later + 3 * SEC), None);
        // Reading it did not reset the guard's record of server "a".
        assert!(g.quarantine(&a, later + 3 * SEC).is_some());
    }

    #[test]
    fn a_key_expiry_is_a_millisecond_reading_of_the_clock() {
        let t0 = Instant::now();
        let ttl_ms = 10_000;
        let base_ms = 1_700_000_000_000u64;
        let at = |secs: u32, ms: u64| {
            let when = t0 + secs * SEC;
            ClockSample::from_expiry(when, when, base_ms + ms + ttl_ms, ttl_ms)
        };
        assert_eq!(at(0, 0).server_us, base_ms * 1000);
        // One second by our clock allows one second plus drift. A reading
        // of a millisecond more may still be within it: the first clock
        // may have read up to 0.999 ms past its millisecond.
        let allowed = SEC + DriftModel::DEFAULT.drift(SEC);
        let allowed_ms = allowed.as_millis() as u64;
        let within = at(1, allowed_ms + 1);
        assert_eq!(within.jump_since(&at(0, 0), DriftModel::DEFAULT), None);
        let beyond = at(1, allowed_ms + 2);
        assert_eq!(
            beyond.jump_since(&at(0, 0), DriftModel::DEFAULT),
            Some(MS),
            "a whole millisecond beyond is a jump"
        );
        // Against a TIME reading (microseconds), and through the guard.
        let g = guard(Duration::ZERO);
        let f = facts("a", t0);
        let time = ClockSample::new(t0, t0, base_ms / 1000, (base_ms % 1000) * 1000);
        assert_eq!(g.objection(&f, Some(time), t0), None);
        assert!(matches!(
            g.objection(&f, Some(at(1, 31_000)), t0 + SEC),
            Some(NodeErrorKind::Quarantined {
                cause: Quarantine::ClockJumped { .. },
                ..
            })
        ));
    }

    #[test]
    fn a_backward_step_is_harmless() {
        let t0 = Instant::now();
        let g = guard(Duration::ZERO);
        let f = facts("a", t0);
        let base = 1_000_000_000_000u64;
        g.objection(&f, Some(sample(t0, SEC, MS, base)), t0 + SEC);
        let back = sample(t0, 2 * SEC, MS, base - 60_000_000);
        assert_eq!(g.objection(&f, Some(back), t0 + 2 * SEC), None);
    }

    #[test]
    fn another_server_starts_a_new_clock_baseline() {
        let t0 = Instant::now();
        let g = guard(Duration::ZERO);
        let base = 1_000_000_000_000u64;
        let a = facts("a", t0 - 100 * SEC);
        g.objection(&a, Some(sample(t0, SEC, MS, base)), t0 + SEC);
        // A failover to a server whose clock is a minute ahead: not a jump.
        let mut b = facts("b", t0 - 100 * SEC);
        b.clock = Some(sample(t0, 2 * SEC, MS, base + 61_000_000));
        let reply = sample(t0, 2 * SEC + MS, MS, base + 61_002_000);
        assert_eq!(g.objection(&b, Some(reply), t0 + 2 * SEC), None);
    }

    #[test]
    fn each_shard_is_judged_against_its_own_clock() {
        // A cluster's shards answer in turn, with clocks a minute apart:
        // neither is a jump, and a jump on one quarantines that one only.
        let t0 = Instant::now();
        let g = guard(Duration::ZERO);
        let base = 1_000_000_000_000u64;
        let a = facts("a", t0 - 100 * SEC);
        let b = facts("b", t0 - 100 * SEC);
        for i in 0..10u64 {
            let at = Duration::from_millis(i * 100);
            let read = |offset: u64| base + offset + i * 100_000;
            assert_eq!(
                g.objection(&a, Some(sample(t0, at, MS, read(0))), t0 + at),
                None
            );
            assert_eq!(
                g.objection(&b, Some(sample(t0, at, MS, read(60_000_000))), t0 + at),
                None
            );
        }
        let jumped = sample(t0, 2 * SEC, MS, base + 31_000_000);
        assert!(matches!(
            g.objection(&a, Some(jumped), t0 + 2 * SEC),
            Some(NodeErrorKind::Quarantined {
                cause: Quarantine::ClockJumped { .. },
                ..
            })
        ));
        let steady = sample(t0, 2 * SEC, MS, base + 60_000_000 + 2_000_000);
        assert_eq!(g.objection(&b, Some(steady), t0 + 2 * SEC), None);
        // The jump is remembered while another shard is judged.
        assert!(g.objection(&a, None, t0 + 3 * SEC).is_some());
    }

    #[test]
    fn the_clock_is_not_watched_when_the_guard_is_off() {
        let t0 = Instant::now();
        let g = VoteGuard::new(Duration::ZERO, None, DriftModel::DEFAULT);
        let f = facts("a", t0);
        g.objection(&f, Some(sample(t0, SEC, MS, 0)), t0 + SEC);
        let jumped = sample(t0, 2 * SEC, MS, 60_000_000);
        assert_eq!(g.objection(&f, Some(jumped), t0 + 2 * SEC), None);
    }

    #[test]
    fn one_server_counts_for_the_first_node_that_reached_it() {
        let registry = ServerRegistry::default();
        assert_eq!(registry.claim("r1", 0), Ok(()));
        assert_eq!(registry.claim("r1", 0), Ok(()));
        assert_eq!(registry.claim("r2", 1), Ok(()));
        assert_eq!(registry.pair(), None);
        assert_eq!(registry.claim("r1", 2), Err(0));
        assert_eq!(registry.pair(), Some((2, 0)));
    }
}
