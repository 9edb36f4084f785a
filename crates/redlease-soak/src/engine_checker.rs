//! The engine checker: judges a run in which every mode waits on shared
//! names (`engine-mixed`): exclusive locks, readers, a semaphore's permits
//! (with their weights) and sets of names. Beside what is held at once, it
//! judges the order in which waiters are served. Pure (no I/O, no clocks),
//! like the other checkers, so it is tested on synthetic histories,
//! including ones it must flag.
//!
//! Its input is the history (the leases and their intervals, as the
//! read-write checker reads them: `[returned, min(release began,
//! valid_until)]`) and the workload's journal of acquire calls
//! ([`Asked`]): who asked, for which names in which mode and weight, when
//! it arrived (just before the call, that is, before its first attempt),
//! when it ended, whether it waits, and what it got. Times are offsets
//! from the run's epoch on the monotonic clock. Checks:
//!
//! 1. `over_capacity`, per name: a lease starts while the name's holders
//!    leave it no room: a writer beside anyone, a reader beside a writer,
//!    permits whose weights add up to more than the semaphore's `N`.
//!    Intervals that only touch do not meet; one violation per lease that
//!    started over capacity.
//! 2. `overtaken`: a waiter W1 (a call that waits) is overtaken by a later
//!    arrival W2 (any call that was granted, waiting or not) on a name they
//!    both asked for, whatever the modes: W2 arrived more than W1's
//!    *arrival slack* after W1 (`arrival_rounds x W1's node timeout +
//!    margin`: W1's logged arrival precedes its place on the servers by
//!    its first attempt and the round that queues it, each bounded by the
//!    node timeout, and by scheduling the watchdog does not see), and W2
//!    was granted while W1 still waited:
//!    - W1 granted, the two unable to hold together (a writer and anyone
//!      on a shared name; permits whose weights exceed `N` together): W2
//!      returned before W1 did. In arrival order W1 is granted first and
//!      W2 only after W1's release began, which follows W1's return, so no
//!      slack is needed: the clock reads only make it wider.
//!    - otherwise (W1 and W2 able to hold together, two readers or small
//!      permits, whose grants by one release land in either order; or
//!      W1 gave up): W1 still waited *grant slack* (`grant_rounds x W1's
//!      node timeout + margin`) after W2 returned. A waiter that gave up
//!      counts as waiting until its deadline (arrival plus its wait),
//!      not until it returned: it may leave its place from then on.
//!
//!    A set W1 is judged on its first name only (the first in the
//!    canonical order, which the workload's name order follows), against
//!    the W2 that cannot share that name with it (a reader passing a set
//!    that reads the name takes nothing the set waits for): it waits
//!    in line for a prefix of its names, up to the first it lacks, and
//!    joins the next name's line (at its arrival) only once it has the
//!    ones before; a later arrival may take a name beyond that meanwhile.
//!    This is the engine's rule, not a fault: a set queued on every name
//!    at once would keep a later name from one who holds an earlier one
//!    and takes them in the canonical order, and the two would wait on
//!    each other.
//!
//!    With real packet loss (`--loss`), `loss_slack` is added to both
//!    slacks, and the first case gets it too: a lost segment delays a
//!    round by the kernel's retransmission timeout.
//!
//!    Excused, never flagged: pairs where W1's requests may not have
//!    been served in turn, that is, where *disturbances* touching W1
//!    during `[W1's arrival, W2's return]` could have kept W1 from a
//!    quorum of first places:
//!    - faults on so many nodes that W1's places on the others were too
//!      few for its quorum: at least `nodes - quorum + 1` distinct nodes
//!      (3 of 5 for a lock, 2 of 5 for a permit of 3), counting over the
//!      whole window a node fault (killed, paused; from its start until
//!      `recover` after it healed, plus the restart quarantine after a
//!      restart) and a fault on one of W1's own links to a node (delays,
//!      blackholes, resets, held replies, partitions; until `recover`
//!      after the last delayed byte). With fewer, W1 is first in line on
//!      a quorum of nodes it reaches, and nobody later can gather a
//!      quorum of grants before it;
//!    - a lease of a shared name that ended without a quorum release (its
//!      release failed, or it was dropped and released in the
//!      background), from its validity end until `recover` after: a lock
//!      freed by expiry is taken by whoever looks first, as the library
//!      documents (before its validity ends, the lease still holds a
//!      quorum, and the nodes its release reached hand on in turn);
//!    - a waiter ahead of W1 on a shared name (arrived by W1's arrival
//!      plus its slack, still waiting after W1 arrived and before W2's
//!      return) that faults kept from its turn the same way (a quorum's
//!      worth of its nodes, or it gave up on node errors): a turn handed
//!      to a waiter that does not take it within its window is lost, and
//!      a newcomer that finds the lock free then takes it, as the library
//!      documents;
//!    - faults that, counted together, took a tolerance's worth of
//!      nodes: those on W1's own, and those on the nodes of waiters ahead
//!      of W1 that may keep it out of a shared name (not both readers),
//!      while both waited. Such a waiter keeps its place (or its
//!      reservation) on a node while it cannot take it: it waits out its
//!      faulted node for a node timeout, then its cleanup, and its
//!      reservations elsewhere may lapse meanwhile, so a newcomer that
//!      W1 could sit beside finds them free. (Found by replaying a run:
//!      a reader cut off from 2 nodes, behind a writer whose slow node
//!      held the third.)
//!    - a process stall (the watchdog's) overlapping `[W1's arrival, W2's
//!      return + grant slack]`;
//!    - a W1 that gave up with node errors in its last attempt (it could
//!      not reach a quorum).
//!
//!    The report counts the out-of-order pairs excused, by cause, beside
//!    those flagged, so a run in which faults excuse most says so.
//! 3. `starved`: a waiter kept out for longer than `starvation_bound`
//!    after the earlier holders of its names let go, while later arrivals
//!    that it could not hold beside got in. As the read-write checker's
//!    writer starvation, for every mode: the leases that explain its wait
//!    are those of its names whose call arrived by its arrival plus its
//!    arrival slack (there before it); `free` is the latest end of those
//!    granted before it ended, at least its arrival, at most its end. It
//!    is starved when `end - free`, less process stalls and disturbances
//!    touching it, exceeds the bound and some later arrival's lease of
//!    one of its names that conflicts with its own want (not reader
//!    beside reader; any permit of a semaphore) was granted before it
//!    ended and held after `free`. Disturbances are left out of `end -
//!    free` as check 2 counts them: stalls and expiries always, faults
//!    when they reached a quorum's worth of nodes during the wait.
//! 4. `stale_read`, `fencing`, `expired_lease_returned`: the read-write
//!    checker's checks on the lock names' leases (a set's names among
//!    them, each with its own mode and token) and the semaphore checker's
//!    on the permits.
//!
//! Why a correct engine, serving every name's waiters in arrival order,
//! is never flagged by 2: measurement only moves arrivals earlier and
//! returns later than what the servers saw, the arrival slack covers the
//! time between the logged arrival and W1's place being on the servers,
//! and the grant slack the spread of the grants one release makes. Faults
//! are excused where they touch W1, and where a lock was freed by expiry.
//! The price: pairs near faults are not judged; the figures say how many.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::examples::{fmt_ms, keep_example};
use crate::history::{Call, ErrorKind, History, LeaseId, Mode, Outcome};
use crate::rw_checker::{self, RwConfig, RwLease, Span};
use crate::sem_checker::{self, SemConfig};

/// Excused because faults on nodes (and none on the waiter's links) left
/// it too few places for a quorum.
pub const NODE_FAULT: &str = "node faults";
/// Excused because faults, some on the waiter's own links, left it too
/// few places for a quorum.
pub const LINK_FAULT: &str = "node and link faults";
/// Excused because a lease of the name ended without a quorum release.
pub const EXPIRY: &str = "lease ended unreleased";
/// Excused because a waiter ahead was kept from its turn by faults.
pub const AHEAD_FAULTED: &str = "a waiter ahead faulted";
/// Excused because faults on its own nodes and on those of waiters ahead
/// of it left it too few nodes where it stood first.
pub const FAULTS_WITH_AHEAD: &str = "faults on its and earlier waiters' nodes";
/// Excused because the whole process stalled.
pub const STALL: &str = "process stall";
/// Excused because the waiter gave up with node errors.
pub const NODE_ERRORS: &str = "gave up on node errors";

/// One name of a request: which, in what mode, with what weight (a
/// permit's number of permits; 1 for every other mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Want {
    pub lock: usize,
    pub mode: Mode,
    pub weight: u32,
}

/// One acquire call, as the engine workload journals it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asked {
    pub worker: usize,
    /// A call that waits (`lock`, `read_lock`, `acquire`, `lock_all`),
    /// not a `try_` one.
    pub waits: bool,
    /// A set of names (`lock_all`, with `and_read`).
    pub set: bool,
    /// Every name asked for, sorted by lock.
    pub wants: Vec<Want>,
    /// Just before the call (before its first attempt).
    pub arrived: Duration,
    /// Just after it returned.
    pub ended: Duration,
    /// How long it may wait (a call that waits).
    pub wait: Duration,
    /// Its client's node timeout.
    pub node_timeout: Duration,
    /// Granted: each name's lease, by lock (empty: not granted).
    pub leases: Vec<(usize, LeaseId)>,
    /// Not granted: the kind of error.
    pub error: Option<ErrorKind>,
    /// Not granted: node failures its (last) attempt met.
    pub node_errors: u32,
}

impl Asked {
    /// `write`, `read`, `permit` or `set`.
    pub fn kind(&self) -> &'static str {
        match self.wants.first() {
            _ if self.set => "set",
            Some(want) => want.mode.label(),
            None => "write",
        }
    }

    pub fn granted(&self) -> bool {
        !self.leases.is_empty()
    }

    fn want(&self, lock: usize) -> Option<&Want> {
        self.wants.iter().find(|w| w.lock == lock)
    }

    fn shares_with(&self, other: &Asked) -> bool {
        self.wants.iter().any(|w| other.want(w.lock).is_some())
    }

    /// The names it surely waits in line for from its arrival: all of a
    /// single name's; a set's first, in the canonical order (see check 2).
    fn in_line_for(&self) -> &[Want] {
        match self.set {
            true => self.wants.get(..1).unwrap_or_default(),
            false => &self.wants,
        }
    }

    /// Whether `other` asked for a name this waiter surely waits in line
    /// for; for a set, in a mode the set cannot hold beside (a reader of
    /// a name the set reads shares it, and takes nothing the set waits
    /// for: the set waits for another of its names).
    fn in_line_with(&self, other: &Asked) -> bool {
        self.in_line_for().iter().any(|w| {
            other
                .want(w.lock)
                .is_some_and(|o| !(self.set && w.mode == Mode::Read && o.mode == Mode::Read))
        })
    }

    /// Until when it certainly still waited: its return when granted;
    /// else its deadline, or its return if that came first.
    fn live_until(&self) -> Duration {
        if self.granted() {
            self.ended
        } else {
            self.ended.min(self.arrived + self.wait)
        }
    }

    /// Gave up with node errors: it could not reach a quorum.
    fn failed_on_nodes(&self) -> bool {
        !self.granted() && self.node_errors > 0
    }

    /// "read_lock of lock 1 (worker 3)", "lock_all [0 write, 2 read]
    /// (worker 1)", "try_acquire x2 of lock 3 (worker 0)".
    fn describe(&self) -> String {
        let once = if self.waits { "" } else { "try_" };
        let what = match (self.set, self.wants.first()) {
            (true, _) | (_, None) => {
                let names: Vec<String> = self
                    .wants
                    .iter()
                    .map(|w| format!("{} {}", w.lock, w.mode.label()))
                    .collect();
                format!("{once}lock_all [{}]", names.join(", "))
            }
            (false, Some(w)) => match w.mode {
                Mode::Read => format!("{once}read_lock of lock {}", w.lock),
                Mode::Write => format!("{once}lock of lock {}", w.lock),
                Mode::Permit => format!("{once}acquire x{} of lock {}", w.weight, w.lock),
            },
        };
        format!("{what} (worker {})", self.worker)
    }
}

/// A time during which waiters may legitimately be served out of order:
/// a fault, or a lock freed by expiry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disturbance {
    pub from: Duration,
    pub to: Duration,
    /// The workers it touches (`None`: every worker).
    pub workers: Option<Vec<usize>>,
    /// The names it touches (`None`: every name).
    pub locks: Option<Vec<usize>>,
    /// The node it takes away (a fault); `None`: no node in particular
    /// (an expiry, which excuses on its own).
    pub node: Option<usize>,
    /// [`NODE_FAULT`], [`LINK_FAULT`] or [`EXPIRY`].
    pub cause: &'static str,
}

impl Disturbance {
    fn touches(&self, asked: &Asked) -> bool {
        self.workers
            .as_ref()
            .is_none_or(|w| w.contains(&asked.worker))
            && self
                .locks
                .as_ref()
                .is_none_or(|l| asked.wants.iter().any(|w| l.contains(&w.lock)))
    }

    fn overlaps(&self, from: Duration, to: Duration) -> bool {
        self.from <= to && self.to >= from
    }
}

/// What an engine run tells its checker beside the history.
#[derive(Clone, Debug, Default)]
pub struct EngineRun {
    /// Every acquire call of the workload.
    pub asked: Vec<Asked>,
    /// The lock nodes.
    pub nodes: usize,
    /// The semaphores' names and their `N`; every other name is a lock.
    pub capacity: BTreeMap<usize, u32>,
    /// The run's faults, as disturbances (expiries are found in the
    /// history).
    pub disturbances: Vec<Disturbance>,
    /// How long after a disturbance waiters may still be out of order.
    pub recover: Duration,
    /// [`EngineConfig::starvation_bound`].
    pub starvation_bound: Duration,
    /// [`EngineConfig::loss_slack`].
    pub loss_slack: Duration,
    /// The kinds drawn, for the report.
    pub modes: String,
    /// A negative control: the check that must flag it (its name in
    /// [`EngineVerdict::counts`]); another violation alone does not pass it.
    pub flagged_by: Option<&'static str>,
}

/// How the checker judges.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The lock nodes (for the quorums).
    pub nodes: usize,
    /// The semaphores' names and their `N`.
    pub capacity: BTreeMap<usize, u32>,
    /// Node timeouts from a waiter's logged arrival to its place on the
    /// servers (its first attempt, and the round that queues it).
    pub arrival_rounds: u32,
    /// Node timeouts by which the grants of one release may land apart.
    pub grant_rounds: u32,
    /// Scheduling the watchdog does not see (it records stalls of 50 ms
    /// and more).
    pub margin: Duration,
    /// Added to both slacks under real packet loss.
    pub loss_slack: Duration,
    /// Check 3's bound.
    pub starvation_bound: Duration,
    /// As the other checkers'.
    pub expired_tolerance: Duration,
    /// Times the whole process was not running.
    pub stalls: Vec<(Duration, Duration)>,
    /// Faults and expiries (see the module docs).
    pub disturbances: Vec<Disturbance>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            nodes: 5,
            capacity: BTreeMap::new(),
            arrival_rounds: 2,
            grant_rounds: 2,
            margin: Duration::from_millis(50),
            loss_slack: Duration::ZERO,
            starvation_bound: Duration::from_secs(2),
            expired_tolerance: Duration::from_millis(2),
            stalls: Vec::new(),
            disturbances: Vec::new(),
        }
    }
}

impl EngineConfig {
    pub fn arrival_slack(&self, asked: &Asked) -> Duration {
        asked.node_timeout * self.arrival_rounds + self.margin + self.loss_slack
    }

    pub fn grant_slack(&self, asked: &Asked) -> Duration {
        asked.node_timeout * self.grant_rounds + self.margin + self.loss_slack
    }

    /// Whether `a` and `b` can hold their shared names together.
    fn compatible(&self, a: &Asked, b: &Asked) -> bool {
        a.wants.iter().all(|x| {
            let Some(y) = b.want(x.lock) else {
                return true;
            };
            match self.capacity.get(&x.lock) {
                Some(&n) => u64::from(x.weight) + u64::from(y.weight) <= u64::from(n),
                None => x.mode == Mode::Read && y.mode == Mode::Read,
            }
        })
    }

    /// Whether a lease in `mode` keeps out a waiter that wants `want`
    /// (check 3).
    fn keeps_out(&self, want: &Want, mode: Mode) -> bool {
        self.capacity.contains_key(&want.lock) || want.mode != Mode::Read || mode != Mode::Read
    }

    /// How many nodes faults must take from a waiter before its places on
    /// the others are too few for a quorum: the fewest over its names.
    pub fn tolerance(&self, asked: &Asked) -> usize {
        let n = self.nodes;
        asked
            .wants
            .iter()
            .map(|w| {
                let quorum = match self.capacity.get(&w.lock) {
                    Some(&permits) => {
                        let permits = permits as usize;
                        n * permits / (permits + 1) + 1
                    }
                    None => n / 2 + 1,
                };
                (n + 1).saturating_sub(quorum).max(1)
            })
            .min()
            .unwrap_or(1)
    }

    /// The faults that excuse a waiter over `[from, to]`: those touching
    /// it, if they reached at least its tolerance of distinct nodes.
    fn faults(&self, asked: &Asked, from: Duration, to: Duration) -> Vec<&Disturbance> {
        let faults: Vec<&Disturbance> = self.node_faults(asked, from, to).collect();
        let nodes: BTreeSet<usize> = faults.iter().filter_map(|d| d.node).collect();
        if nodes.len() >= self.tolerance(asked) {
            faults
        } else {
            Vec::new()
        }
    }

    /// The faults on nodes that touch `asked` over `[from, to]`, however
    /// many nodes they took.
    fn node_faults<'s, 'a>(
        &'s self,
        asked: &'a Asked,
        from: Duration,
        to: Duration,
    ) -> impl Iterator<Item = &'s Disturbance> + use<'s, 'a> {
        self.disturbances
            .iter()
            .filter(move |d| d.node.is_some() && d.touches(asked) && d.overlaps(from, to))
    }

    /// The waiters ahead of `w1` (calls that wait, other than `w1` and
    /// `w2`, that arrived by `w1`'s arrival plus its arrival slack) on a
    /// name they share, each with the time both waited up to `g2`, where
    /// there was some.
    fn ahead<'a>(
        &self,
        asked: &'a [Asked],
        w1: &'a Asked,
        w2: &'a Asked,
        g2: Duration,
    ) -> impl Iterator<Item = (&'a Asked, Duration, Duration)> {
        let cut = w1.arrived + self.arrival_slack(w1);
        asked.iter().filter_map(move |w0| {
            let ahead = w0.waits
                && !std::ptr::eq(w0, w1)
                && !std::ptr::eq(w0, w2)
                && w0.arrived <= cut
                && w0.shares_with(w1);
            let (from, to) = (w0.arrived.max(w1.arrived), w0.live_until().min(g2));
            (ahead && from < to).then_some((w0, from, to))
        })
    }

    /// Why a waiter's being overtaken over `[from, to]` is excused.
    fn excuse(&self, w1: &Asked, from: Duration, to: Duration) -> Option<&'static str> {
        let stalled = self
            .stalls
            .iter()
            .any(|&(s, e)| s <= to + self.grant_slack(w1) && e >= from);
        if stalled {
            return Some(STALL);
        }
        let expired = self
            .disturbances
            .iter()
            .any(|d| d.node.is_none() && d.touches(w1) && d.overlaps(from, to));
        if expired {
            return Some(EXPIRY);
        }
        let faults = self.faults(w1, from, to);
        match faults.is_empty() {
            true => None,
            false if faults.iter().any(|d| d.workers.is_some()) => Some(LINK_FAULT),
            false => Some(NODE_FAULT),
        }
    }

    /// Whether a waiter ahead of `w1` (other than `w1` and `w2`) on a
    /// shared name was kept from its turn by faults while `w1` waited, up
    /// to `g2`.
    fn ahead_faulted(&self, asked: &[Asked], w1: &Asked, w2: &Asked, g2: Duration) -> bool {
        self.ahead(asked, w1, w2, g2)
            .any(|(w0, from, to)| w0.failed_on_nodes() || !self.faults(w0, from, to).is_empty())
    }

    /// The distinct nodes where `w1` may not have stood first over
    /// `[w1's arrival, g2]`: those faults took from it, and those where a
    /// waiter ahead of it on a shared name (other than `w2`), which may
    /// keep it out there, was touched by faults while both waited (its
    /// place there stands, or its reservation, while it cannot take it:
    /// its attempt waits out the faulted node, and a set's reservations
    /// elsewhere may lapse meanwhile). Whether they reach `w1`'s tolerance.
    fn faults_with_ahead(&self, asked: &[Asked], w1: &Asked, w2: &Asked, g2: Duration) -> bool {
        let mut nodes: BTreeSet<usize> = self
            .node_faults(w1, w1.arrived, g2)
            .filter_map(|d| d.node)
            .collect();
        for (w0, from, to) in self.ahead(asked, w1, w2, g2) {
            if self.may_keep_out(w0, w1) {
                nodes.extend(self.node_faults(w0, from, to).filter_map(|d| d.node));
            }
        }
        nodes.len() >= self.tolerance(w1)
    }

    /// Whether waiter `w0`, ahead of `w1` in line, may keep it out of a
    /// name they share: a semaphore's (a reservation takes permits
    /// another holder may leave no room beside), or one that not both
    /// read.
    fn may_keep_out(&self, w0: &Asked, w1: &Asked) -> bool {
        w1.wants.iter().any(|x| {
            w0.want(x.lock).is_some_and(|y| {
                self.capacity.contains_key(&x.lock) || x.mode != Mode::Read || y.mode != Mode::Read
            })
        })
    }

    /// How much of `[from, to]` is excused for `asked`: stalls, expiries,
    /// and faults if they reached its tolerance of nodes.
    fn disturbed(&self, asked: &Asked, from: Duration, to: Duration) -> Duration {
        let faults = self.faults(asked, from, to);
        let mut spans: Vec<(Duration, Duration)> = self
            .stalls
            .iter()
            .copied()
            .chain(
                self.disturbances
                    .iter()
                    .filter(|d| d.node.is_none() && d.touches(asked))
                    .chain(faults)
                    .map(|d| (d.from, d.to)),
            )
            .map(|(s, e)| (s.max(from), e.min(to)))
            .filter(|(s, e)| s < e)
            .collect();
        spans.sort();
        let mut covered = Duration::ZERO;
        let mut reach = from;
        for (s, e) in spans {
            let s = s.max(reach);
            if e > s {
                covered += e - s;
                reach = e;
            }
        }
        covered
    }
}

/// How one kind of call fared.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KindFigures {
    pub calls: u64,
    pub granted: u64,
    /// Calls that wait, and how many of them were granted.
    pub waits: (u64, u64),
    /// Waits judged for order (not given up on node errors).
    pub judged: u64,
    /// Pairs of such a waiter and a later arrival granted while it waited
    /// ([`EngineFigures::contended`]), and how many were out of order.
    pub contended: (u64, u64),
    /// Waits overtaken at least once, and the pairs.
    pub overtaken: (u64, u64),
    pub starved: u64,
    /// The longest call that waits.
    pub max_wait: Duration,
    /// The overtake of this kind's waiter after which it still waited
    /// longest, and that case.
    pub worst_overtake: Option<(Duration, String)>,
}

/// The run's figures: not violations, but what the report shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineFigures {
    /// By kind: `write`, `read`, `permit`, `set`.
    pub kinds: BTreeMap<&'static str, KindFigures>,
    /// Pairs of a waiter and a later arrival, on a shared name, granted
    /// while it still waited (before the grant rules).
    pub contended: u64,
    /// Of those, the pairs out of order (by the grant rules): flagged
    /// (`overtaken`) or excused.
    pub out_of_order: u64,
    /// Excused, by cause (pairs; waits for [`NODE_ERRORS`]).
    pub excused: BTreeMap<&'static str, u64>,
    /// The longest an overtaken waiter still waited after the later
    /// arrival was granted, and that case.
    pub worst_overtake: Option<(Duration, String)>,
    /// The longest a waiter was kept out after its earlier holders let
    /// go while later arrivals got in (less stalls and disturbances),
    /// flagged or not.
    pub max_kept_out: Duration,
    /// Per name: the most held at once (holders of a lock, the weight of
    /// a semaphore's permits).
    pub peak: BTreeMap<usize, u64>,
}

/// Violations by category, with the first few examples of each, and the
/// run's figures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineVerdict {
    pub over_capacity: u64,
    pub overtaken: u64,
    pub starved: u64,
    pub stale_read: u64,
    pub fencing: u64,
    pub expired_lease_returned: u64,
    pub examples: BTreeMap<&'static str, Vec<String>>,
    pub figures: EngineFigures,
}

impl EngineVerdict {
    pub fn total(&self) -> u64 {
        self.counts().iter().map(|(_, n)| n).sum()
    }

    /// `(name, count)` in the order of the JSON report.
    pub fn counts(&self) -> [(&'static str, u64); 6] {
        [
            ("over_capacity", self.over_capacity),
            ("overtaken", self.overtaken),
            ("starved", self.starved),
            ("stale_read", self.stale_read),
            ("fencing", self.fencing),
            ("expired_lease_returned", self.expired_lease_returned),
        ]
    }

    fn example(&mut self, category: &'static str, text: impl FnOnce() -> String) {
        keep_example(&mut self.examples, category, text);
    }
}

/// Judges a recorded engine run, with `stalls` left out.
pub fn judge(history: &History, run: &EngineRun, stalls: &[(Duration, Duration)]) -> EngineVerdict {
    let leases = rw_checker::leases(history);
    let mut disturbances = run.disturbances.clone();
    disturbances.extend(expiries(history, &leases, run.recover));
    let config = EngineConfig {
        nodes: run.nodes,
        capacity: run.capacity.clone(),
        loss_slack: run.loss_slack,
        starvation_bound: run.starvation_bound,
        stalls: stalls.to_vec(),
        disturbances,
        ..EngineConfig::default()
    };
    check(&leases, &run.asked, &config)
}

/// The leases that ended without a quorum release (no release of theirs
/// succeeded, or it began after their validity ended): their names may
/// be freed by expiry, from their validity end until `recover` after.
pub fn expiries(history: &History, leases: &[RwLease], recover: Duration) -> Vec<Disturbance> {
    let released: BTreeSet<LeaseId> = history
        .iter()
        .filter(|op| op.call == Call::Release && op.outcome == Outcome::Ok)
        .filter_map(|op| op.lease)
        .collect();
    leases
        .iter()
        .filter_map(|lease| {
            let valid = lease.extended_until.unwrap_or(lease.valid_until);
            let freed = lease.release_began.unwrap_or(valid);
            if released.contains(&lease.lease) && freed <= valid {
                return None;
            }
            Some(Disturbance {
                from: valid,
                to: valid + recover,
                workers: None,
                locks: Some(vec![lease.lock]),
                node: None,
                cause: EXPIRY,
            })
        })
        .collect()
}

/// Runs every check.
pub fn check(leases: &[RwLease], asked: &[Asked], config: &EngineConfig) -> EngineVerdict {
    let mut verdict = EngineVerdict::default();
    reused_checks(leases, config, &mut verdict);
    let weights: BTreeMap<LeaseId, u32> = asked
        .iter()
        .flat_map(|a| {
            a.leases
                .iter()
                .map(move |&(lock, id)| (id, a.want(lock).map_or(1, |w| w.weight)))
        })
        .collect();
    check_capacity(leases, &weights, config, &mut verdict);
    for a in asked {
        let kind = verdict.figures.kinds.entry(a.kind()).or_default();
        kind.calls += 1;
        kind.granted += u64::from(a.granted());
        if a.waits {
            kind.waits.0 += 1;
            kind.waits.1 += u64::from(a.granted());
            kind.max_wait = kind.max_wait.max(a.ended.saturating_sub(a.arrived));
        }
    }
    check_order(asked, config, &mut verdict);
    check_starvation(leases, asked, config, &mut verdict);
    verdict
}

/// Check 4: the read-write checker on the locks' leases, the semaphore
/// checker on the permits; their other checks are check 1's.
fn reused_checks(leases: &[RwLease], config: &EngineConfig, verdict: &mut EngineVerdict) {
    let (permits, locks): (Vec<RwLease>, Vec<RwLease>) = leases
        .iter()
        .cloned()
        .partition(|l| config.capacity.contains_key(&l.lock));
    let rw = rw_checker::check(
        &locks,
        &[],
        &RwConfig {
            expired_tolerance: config.expired_tolerance,
            stalls: config.stalls.clone(),
            ..RwConfig::default()
        },
    );
    let n = config.capacity.values().copied().max().unwrap_or(1);
    let sem = sem_checker::check(
        &permits,
        &SemConfig {
            expired_tolerance: config.expired_tolerance,
            stalls: config.stalls.clone(),
            ..SemConfig::new(n)
        },
    );
    verdict.stale_read = rw.stale_read;
    verdict.fencing = rw.fencing + sem.fencing;
    verdict.expired_lease_returned = rw.expired_lease_returned + sem.expired_lease_returned;
    for examples in [&rw.examples, &sem.examples] {
        for (&category, list) in examples {
            if ["stale_read", "fencing", "expired_lease_returned"].contains(&category) {
                for text in list {
                    verdict.example(category, || text.clone());
                }
            }
        }
    }
}

/// Check 1.
fn check_capacity(
    leases: &[RwLease],
    weights: &BTreeMap<LeaseId, u32>,
    config: &EngineConfig,
    verdict: &mut EngineVerdict,
) {
    let mut by_lock: BTreeMap<usize, Vec<(Span<'_>, u64)>> = BTreeMap::new();
    for lease in leases {
        let span = Span::of(lease);
        if !span.is_empty() {
            let weight = u64::from(weights.get(&lease.lease).copied().unwrap_or(1));
            by_lock.entry(lease.lock).or_default().push((span, weight));
        }
    }
    for (lock, mut spans) in by_lock {
        spans.sort_by_key(|(s, _)| (s.start, s.lease.lease));
        let cap = config.capacity.get(&lock).copied().map(u64::from);
        // Spans still open at the current start; sorted by start, so every
        // earlier span that ends after this one starts holds with it.
        let mut open: Vec<(Span<'_>, u64)> = Vec::new();
        let mut peak = 0;
        for (span, weight) in spans {
            open.retain(|(o, _)| o.end > span.start);
            let held: u64 = open.iter().map(|(_, w)| w).sum();
            let writer = |s: &Span<'_>| s.lease.mode == Mode::Write;
            let over = match cap {
                Some(n) => held + weight > n || (writer(&span) && !open.is_empty()),
                None => (writer(&span) && !open.is_empty()) || open.iter().any(|(o, _)| writer(o)),
            };
            if over {
                verdict.over_capacity += 1;
                verdict.example("over_capacity", || {
                    let others: Vec<String> = open.iter().map(|(o, _)| o.describe()).collect();
                    let (n, weight) = match cap {
                        Some(n) => (format!(" (N = {n})"), format!(", weight {weight},")),
                        None => (String::new(), String::new()),
                    };
                    format!(
                        "lock {lock}{n}: {}{weight} while {} other(s) held: {}",
                        span.describe(),
                        others.len(),
                        others.join("; ")
                    )
                });
            }
            open.push((span, weight));
            let now = match cap {
                Some(_) => open.iter().map(|(_, w)| w).sum(),
                None => open.len() as u64,
            };
            peak = peak.max(now);
        }
        verdict.figures.peak.insert(lock, peak);
    }
}

/// Check 2.
fn check_order(asked: &[Asked], config: &EngineConfig, verdict: &mut EngineVerdict) {
    let granted: Vec<&Asked> = asked.iter().filter(|a| a.granted()).collect();
    for w1 in asked.iter().filter(|a| a.waits) {
        if w1.failed_on_nodes() {
            *verdict.figures.excused.entry(NODE_ERRORS).or_default() += 1;
            continue;
        }
        let cut = w1.arrived + config.arrival_slack(w1);
        let live = w1.live_until();
        let mut pairs = 0;
        let mut contended = (0, 0);
        for w2 in &granted {
            if std::ptr::eq(*w2, w1)
                || w2.arrived <= cut
                || w2.arrived >= live
                || !w1.in_line_with(w2)
            {
                continue;
            }
            verdict.figures.contended += 1;
            contended.0 += 1;
            let g2 = w2.ended;
            let slack = if w1.granted() && !config.compatible(w1, w2) {
                config.loss_slack
            } else {
                config.grant_slack(w1)
            };
            if g2 + slack >= live {
                continue;
            }
            verdict.figures.out_of_order += 1;
            contended.1 += 1;
            let cause = config
                .excuse(w1, w1.arrived, g2)
                .or_else(|| {
                    config
                        .ahead_faulted(asked, w1, w2, g2)
                        .then_some(AHEAD_FAULTED)
                })
                .or_else(|| {
                    config
                        .faults_with_ahead(asked, w1, w2, g2)
                        .then_some(FAULTS_WITH_AHEAD)
                });
            if let Some(cause) = cause {
                *verdict.figures.excused.entry(cause).or_default() += 1;
                continue;
            }
            pairs += 1;
            verdict.overtaken += 1;
            let describe = || {
                format!(
                    "{} arrived at {}, still waiting at {} ({} at {}); {} arrived at {} and was \
                     granted at {}",
                    w1.describe(),
                    fmt_ms(w1.arrived),
                    fmt_ms(g2),
                    if w1.granted() { "granted" } else { "gave up" },
                    fmt_ms(w1.ended),
                    w2.describe(),
                    fmt_ms(w2.arrived),
                    fmt_ms(g2)
                )
            };
            let still = live - g2;
            let worse = |worst: &Option<(Duration, String)>| {
                worst.as_ref().is_none_or(|(longest, _)| still > *longest)
            };
            if worse(&verdict.figures.worst_overtake) {
                verdict.figures.worst_overtake = Some((still, describe()));
            }
            let kind = verdict.figures.kinds.entry(w1.kind()).or_default();
            if worse(&kind.worst_overtake) {
                kind.worst_overtake = Some((still, describe()));
            }
            verdict.example("overtaken", describe);
        }
        let kind = verdict.figures.kinds.entry(w1.kind()).or_default();
        kind.judged += 1;
        kind.contended.0 += contended.0;
        kind.contended.1 += contended.1;
        if pairs > 0 {
            kind.overtaken.0 += 1;
            kind.overtaken.1 += pairs;
        }
    }
}

/// Check 3.
fn check_starvation(
    leases: &[RwLease],
    asked: &[Asked],
    config: &EngineConfig,
    verdict: &mut EngineVerdict,
) {
    let owner: BTreeMap<LeaseId, &Asked> = asked
        .iter()
        .flat_map(|a| a.leases.iter().map(move |&(_, id)| (id, a)))
        .collect();
    let mut by_lock: BTreeMap<usize, Vec<Span<'_>>> = BTreeMap::new();
    for lease in leases {
        let span = Span::of(lease);
        if !span.is_empty() {
            by_lock.entry(lease.lock).or_default().push(span);
        }
    }
    for w in asked.iter().filter(|a| a.waits && !a.failed_on_nodes()) {
        let cut = w.arrived + config.arrival_slack(w);
        let own: BTreeSet<LeaseId> = w.leases.iter().map(|&(_, id)| id).collect();
        // Leases of its names, other than its own, let in before it ended,
        // with whether their call arrived before it.
        let others: Vec<(&Want, &Span<'_>, bool)> = w
            .wants
            .iter()
            .flat_map(|want| {
                by_lock
                    .get(&want.lock)
                    .into_iter()
                    .flatten()
                    .map(move |s| (want, s))
            })
            .filter(|(_, s)| s.start < w.ended && !own.contains(&s.lease.lease))
            .map(|(want, s)| {
                let earlier = owner.get(&s.lease.lease).is_none_or(|o| o.arrived <= cut);
                (want, s, earlier)
            })
            .collect();
        let free = others
            .iter()
            .filter(|(_, _, earlier)| *earlier)
            .map(|(_, s, _)| s.end)
            .fold(w.arrived, Duration::max)
            .min(w.ended);
        let late: Vec<&Span<'_>> = others
            .iter()
            .filter(|(want, s, earlier)| {
                !earlier && s.end > free && config.keeps_out(want, s.lease.mode)
            })
            .map(|(_, s, _)| *s)
            .collect();
        if late.is_empty() {
            continue;
        }
        let kept_out = w
            .ended
            .saturating_sub(free)
            .saturating_sub(config.disturbed(w, free, w.ended));
        verdict.figures.max_kept_out = verdict.figures.max_kept_out.max(kept_out);
        if kept_out <= config.starvation_bound {
            continue;
        }
        verdict.starved += 1;
        verdict.figures.kinds.entry(w.kind()).or_default().starved += 1;
        verdict.example("starved", || {
            format!(
                "{} waited [{}, {}] ({}), {} of it (less stalls and faults) after the earlier \
                 holders let go at {}, while {} lease(s) of later arrivals were let in (first: {})",
                w.describe(),
                fmt_ms(w.arrived),
                fmt_ms(w.ended),
                if w.granted() { "granted" } else { "gave up" },
                fmt_ms(kept_out),
                fmt_ms(free),
                late.len(),
                late[0].describe()
            )
        });
    }
}

#[cfg(test)]
mod tests;
