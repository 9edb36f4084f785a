//! The fault schedule: a pure function of the seed, the scenario's mix and
//! the topology, so a failing run is replayed with its printed seed.
//!
//! Rules the plan keeps (checked by the tests below):
//! - node faults (kill, pause) hit at most `max(1, (N-1)/2)` nodes at a time
//!   (a minority; with one node, that node), one fault per node at a time;
//! - a node without fsync'd persistence is restarted only after more than
//!   the TTL (every key it held has expired by then); only `appendfsync
//!   always` nodes are restarted at once, except by `KillEmptyRestart`,
//!   the fault the library's restart quarantine is for, which restarts a
//!   node without persistence at once, empty;
//! - clock jumps hit only nodes that run under a fake clock, and move it
//!   forward by more than the TTL;
//! - link faults hit proxied workers only, one fault per link at a time,
//!   and never a link cut for the whole run (`Topology::cut`); a client
//!   may lose a majority of its links (its calls then fail with typed
//!   errors).

use std::collections::BTreeMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Kinds of fault, as counted in the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGKILL, restart (empty) after more than the TTL.
    KillDelayedRestart,
    /// SIGKILL of an `appendfsync always` node, restarted at once.
    KillFsyncRestart,
    /// SIGSTOP for up to 2 x TTL, then SIGCONT.
    Pause,
    /// Link latency: one way up to TTL/2, on 10% of the links above the TTL.
    Latency,
    /// Links that forward nothing and close nothing, then heal.
    Blackhole,
    /// Links whose connections are reset and refused.
    Reset,
    /// Replies held beyond the TTL, then delivered.
    BufferedReplies,
    /// Groups of clients that each see a different subset of the nodes.
    Partition,
    /// SIGKILL of a node without persistence, restarted at once: it comes
    /// back empty while leases it granted are still valid.
    KillEmptyRestart,
    /// The wall clock of a node under a fake clock steps forward by more
    /// than the TTL: its keys expire early.
    ClockJump,
}

impl FaultKind {
    pub fn label(self) -> &'static str {
        match self {
            FaultKind::KillDelayedRestart => "kill_delayed_restart",
            FaultKind::KillFsyncRestart => "kill_fsync_restart",
            FaultKind::Pause => "pause",
            FaultKind::Latency => "latency",
            FaultKind::Blackhole => "blackhole",
            FaultKind::Reset => "reset",
            FaultKind::BufferedReplies => "buffered_replies",
            FaultKind::Partition => "partition",
            FaultKind::KillEmptyRestart => "kill_empty_restart",
            FaultKind::ClockJump => "clock_jump",
        }
    }

    fn is_node_fault(self) -> bool {
        matches!(
            self,
            FaultKind::KillDelayedRestart
                | FaultKind::KillFsyncRestart
                | FaultKind::Pause
                | FaultKind::KillEmptyRestart
                | FaultKind::ClockJump
        )
    }
}

/// A client-to-node link (a proxy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Link {
    pub worker: usize,
    pub node: usize,
}

/// What a link does during a fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkMode {
    /// Per chunk and direction.
    Delay {
        fixed: Duration,
        jitter: Duration,
    },
    Blackhole,
    Reset,
    /// Replies held for the whole fault, then delivered.
    Hold,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// SIGKILL; restart after `down` (zero: at once).
    Kill { node: usize, down: Duration },
    /// SIGSTOP for the fault's `hold`.
    Pause { node: usize },
    /// Moves the node's wall clock forward by `by`.
    ClockJump { node: usize, by: Duration },
    /// Set these links for the fault's `hold`, then back to pass.
    Links(Vec<(Link, LinkMode)>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Start, from the run's epoch.
    pub at: Duration,
    pub kind: FaultKind,
    pub action: Action,
    /// How long it lasts (for a kill: until the restart begins).
    pub hold: Duration,
}

/// Time a restart may take on top of `hold` before a node counts as free.
const RESTART_ALLOWANCE: Duration = Duration::from_secs(1);
/// Gap kept after a link fault before the link is faulted again.
const LINK_SETTLE: Duration = Duration::from_millis(50);
/// Bound on the plan's length, whatever the run time.
const MAX_FAULTS: usize = 10_000;

impl Fault {
    /// Until when the fault's target counts as busy.
    pub fn busy_until(&self) -> Duration {
        match self.action {
            Action::Kill { .. } => self.at + self.hold + RESTART_ALLOWANCE,
            Action::Pause { .. } | Action::ClockJump { .. } => self.at + self.hold + LINK_SETTLE,
            Action::Links(_) => self.at + self.hold + LINK_SETTLE,
        }
    }

    /// The node a node fault hits.
    #[cfg(test)]
    pub fn node(&self) -> Option<usize> {
        match self.action {
            Action::Kill { node, .. } | Action::Pause { node } | Action::ClockJump { node, .. } => {
                Some(node)
            }
            Action::Links(_) => None,
        }
    }

    /// A one-line description for logs.
    pub fn describe(&self) -> String {
        let ms = |d: Duration| d.as_millis();
        match &self.action {
            Action::Kill { node, down }
                if down.is_zero() && self.kind == FaultKind::KillEmptyRestart =>
            {
                format!("kill node {node}, restart at once, empty (no persistence)")
            }
            Action::Kill { node, down } if down.is_zero() => {
                format!("kill node {node}, restart at once (fsync always)")
            }
            Action::Kill { node, down } => {
                format!("kill node {node}, restart (empty) after {} ms", ms(*down))
            }
            Action::Pause { node } => format!("pause node {node} for {} ms", ms(self.hold)),
            Action::ClockJump { node, by } => {
                format!("jump node {node}'s wall clock {} ms ahead", ms(*by))
            }
            Action::Links(links) => {
                let what: Vec<String> = links
                    .iter()
                    .map(|(l, m)| {
                        let m = match m {
                            LinkMode::Delay { fixed, jitter } => {
                                format!("delay {}+{}ms", ms(*fixed), ms(*jitter))
                            }
                            LinkMode::Blackhole => "blackhole".into(),
                            LinkMode::Reset => "reset".into(),
                            LinkMode::Hold => "hold replies".into(),
                        };
                        format!("w{}->n{} {m}", l.worker, l.node)
                    })
                    .collect();
                format!(
                    "{} for {} ms: {}",
                    self.kind.label(),
                    ms(self.hold),
                    what.join(", ")
                )
            }
        }
    }
}

/// What the faults can hit.
#[derive(Clone, Debug)]
pub struct Topology {
    pub nodes: usize,
    /// Per node: runs with `appendonly yes, appendfsync always`.
    pub fsync: Vec<bool>,
    /// Per node: runs under a fake clock that clock jumps can move.
    pub fake_clock: Vec<bool>,
    /// Workers whose links go through proxies.
    pub proxied: Vec<usize>,
    /// Links reset for the whole run (clients that reach only some of the
    /// nodes): no link fault touches them, lest its end restore them.
    pub cut: Vec<Link>,
    /// The largest TTL any client uses.
    pub ttl: Duration,
}

impl Topology {
    /// How many nodes node faults may hit at once: a minority, or the one
    /// node of a single-node deployment.
    pub fn max_node_faults(&self) -> usize {
        (self.nodes.saturating_sub(1) / 2).max(1)
    }
}

/// Planner state: who is busy until when.
struct Busy {
    nodes: Vec<Duration>,
    links: BTreeMap<Link, Duration>,
}

impl Busy {
    fn link_free(&self, link: Link, at: Duration) -> bool {
        self.links.get(&link).is_none_or(|&until| until <= at)
    }
}

impl Topology {
    fn is_cut(&self, link: Link) -> bool {
        self.cut.contains(&link)
    }
}

/// The schedule of a run of length `run`: faults start `TTL..3 x TTL` apart;
/// a fault whose target is busy is replaced by another kind, or dropped.
pub fn plan(seed: u64, mix: &[(FaultKind, u32)], topo: &Topology, run: Duration) -> Vec<Fault> {
    let total: u32 = mix.iter().map(|(_, w)| w).sum();
    if total == 0 || topo.nodes == 0 {
        return Vec::new();
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut busy = Busy {
        nodes: vec![Duration::ZERO; topo.nodes],
        links: BTreeMap::new(),
    };
    let ttl = topo.ttl;
    let mut faults = Vec::new();
    let mut at = ttl + ttl.mul_f64(rng.random::<f64>());
    while at < run && faults.len() < MAX_FAULTS {
        for _try in 0..4 {
            let mut pick = rng.random_range(0..total);
            let kind = mix
                .iter()
                .find(|(_, w)| {
                    if pick < *w {
                        true
                    } else {
                        pick -= w;
                        false
                    }
                })
                .map(|(k, _)| *k)
                .expect("a weight was picked");
            if let Some(fault) = make(kind, at, topo, &busy, &mut rng) {
                let until = fault.busy_until();
                match &fault.action {
                    Action::Kill { node, .. }
                    | Action::Pause { node }
                    | Action::ClockJump { node, .. } => busy.nodes[*node] = until,
                    Action::Links(links) => {
                        for (link, _) in links {
                            busy.links.insert(*link, until);
                        }
                    }
                }
                faults.push(fault);
                break;
            }
        }
        at += ttl + ttl.mul_f64(2.0 * rng.random::<f64>());
    }
    faults
}

/// `lo + U(0, 1) x (hi - lo)`.
fn between(rng: &mut StdRng, lo: Duration, hi: Duration) -> Duration {
    lo + (hi.saturating_sub(lo)).mul_f64(rng.random::<f64>())
}

/// A random non-empty subset of `0..n`.
fn some_of(rng: &mut StdRng, n: usize) -> Vec<usize> {
    let mut picked: Vec<usize> = (0..n).filter(|_| rng.random_bool(0.5)).collect();
    if picked.is_empty() {
        picked.push(rng.random_range(0..n));
    }
    picked
}

fn make(
    kind: FaultKind,
    at: Duration,
    topo: &Topology,
    busy: &Busy,
    rng: &mut StdRng,
) -> Option<Fault> {
    let ttl = topo.ttl;
    if kind.is_node_fault() {
        let faulted = busy.nodes.iter().filter(|&&until| until > at).count();
        if faulted >= topo.max_node_faults() {
            return None;
        }
        let free: Vec<usize> = (0..topo.nodes)
            .filter(|&n| busy.nodes[n] <= at)
            .filter(|&n| match kind {
                FaultKind::KillFsyncRestart => topo.fsync[n],
                FaultKind::KillEmptyRestart => !topo.fsync[n],
                FaultKind::ClockJump => topo.fake_clock[n],
                _ => true,
            })
            .collect();
        if free.is_empty() {
            return None;
        }
        let node = free[rng.random_range(0..free.len())];
        let (action, hold) = match kind {
            FaultKind::KillDelayedRestart => {
                // Longer than the TTL: every key the node held has expired
                // before it comes back empty.
                let down = ttl + Duration::from_millis(250) + between(rng, Duration::ZERO, ttl / 2);
                (Action::Kill { node, down }, down)
            }
            FaultKind::KillFsyncRestart | FaultKind::KillEmptyRestart => (
                Action::Kill {
                    node,
                    down: Duration::ZERO,
                },
                Duration::ZERO,
            ),
            FaultKind::ClockJump => {
                let by = between(rng, ttl + ttl / 10, 3 * ttl);
                (Action::ClockJump { node, by }, Duration::ZERO)
            }
            _ => (Action::Pause { node }, between(rng, ttl / 4, 2 * ttl)),
        };
        return Some(Fault {
            at,
            kind,
            action,
            hold,
        });
    }
    if topo.proxied.is_empty() {
        return None;
    }
    let (links, hold) = match kind {
        FaultKind::Partition => partition(at, topo, busy, rng)?,
        _ => {
            let worker = topo.proxied[rng.random_range(0..topo.proxied.len())];
            // Half the latency faults slow every link of the client, so its
            // quorum itself is slow (not just a minority of its nodes).
            let nodes = if kind == FaultKind::Latency && rng.random_bool(0.5) {
                (0..topo.nodes).collect()
            } else {
                some_of(rng, topo.nodes)
            };
            let mut links = Vec::new();
            for node in nodes {
                let link = Link { worker, node };
                if topo.is_cut(link) {
                    continue;
                }
                if !busy.link_free(link, at) {
                    return None;
                }
                let mode = match kind {
                    FaultKind::Latency => latency(rng, ttl),
                    FaultKind::Blackhole => LinkMode::Blackhole,
                    FaultKind::Reset => LinkMode::Reset,
                    _ => LinkMode::Hold,
                };
                links.push((link, mode));
            }
            if links.is_empty() {
                return None;
            }
            let hold = match kind {
                FaultKind::Latency => between(rng, ttl, 4 * ttl),
                FaultKind::Blackhole => between(rng, ttl / 2, 3 * ttl),
                FaultKind::Reset => between(rng, ttl / 4, 2 * ttl),
                // Replies come back after the TTL has passed.
                _ => between(rng, ttl + ttl / 10, 2 * ttl),
            };
            (links, hold)
        }
    };
    Some(Fault {
        at,
        kind,
        action: Action::Links(links),
        hold,
    })
}

/// A link's one-way delay (the proxy delays each direction): 90% of the
/// time at most TTL/2, 10% of the time above the TTL.
fn latency(rng: &mut StdRng, ttl: Duration) -> LinkMode {
    if rng.random_bool(0.1) {
        LinkMode::Delay {
            fixed: between(rng, ttl + ttl / 20, ttl * 3 / 2),
            jitter: ttl / 20,
        }
    } else {
        let jitter = between(rng, Duration::ZERO, ttl / 10);
        LinkMode::Delay {
            fixed: between(rng, Duration::ZERO, ttl / 2 - jitter),
            jitter,
        }
    }
}

/// Splits the proxied workers into two groups that each see their own
/// subset of the nodes (different subsets: asymmetric); the links to the
/// nodes a group does not see are blackholed or reset.
fn partition(
    at: Duration,
    topo: &Topology,
    busy: &Busy,
    rng: &mut StdRng,
) -> Option<(Vec<(Link, LinkMode)>, Duration)> {
    let sees = [some_of(rng, topo.nodes), some_of(rng, topo.nodes)];
    if sees[0] == sees[1] {
        return None;
    }
    let mode = if rng.random_bool(0.5) {
        LinkMode::Blackhole
    } else {
        LinkMode::Reset
    };
    let mut links = Vec::new();
    for &worker in &topo.proxied {
        let group = usize::from(rng.random_bool(0.5));
        for node in (0..topo.nodes).filter(|n| !sees[group].contains(n)) {
            let link = Link { worker, node };
            if topo.is_cut(link) {
                continue;
            }
            if !busy.link_free(link, at) {
                return None;
            }
            links.push((link, mode));
        }
    }
    if links.is_empty() {
        return None;
    }
    Some((links, between(rng, topo.ttl, 4 * topo.ttl)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [(FaultKind, u32); 8] = [
        (FaultKind::KillDelayedRestart, 1),
        (FaultKind::KillFsyncRestart, 1),
        (FaultKind::Pause, 1),
        (FaultKind::Latency, 1),
        (FaultKind::Blackhole, 1),
        (FaultKind::Reset, 1),
        (FaultKind::BufferedReplies, 1),
        (FaultKind::Partition, 1),
    ];

    fn topo(nodes: usize) -> Topology {
        Topology {
            nodes,
            fsync: (0..nodes).map(|n| n < 2).collect(),
            fake_clock: (0..nodes).map(|n| n == 3).collect(),
            proxied: vec![0, 1, 2, 3, 4, 5],
            cut: Vec::new(),
            ttl: Duration::from_millis(500),
        }
    }

    const RUN: Duration = Duration::from_secs(300);

    #[test]
    fn the_same_seed_gives_the_same_plan() {
        let a = plan(42, &ALL, &topo(5), RUN);
        assert_eq!(a, plan(42, &ALL, &topo(5), RUN));
        assert_ne!(a, plan(43, &ALL, &topo(5), RUN));
        assert!(a.len() > 100, "{}", a.len());
    }

    #[test]
    fn every_kind_shows_up_in_a_mixed_plan() {
        let p = plan(7, &ALL, &topo(5), RUN);
        for (kind, _) in ALL {
            assert!(p.iter().any(|f| f.kind == kind), "{kind:?} missing");
        }
    }

    #[test]
    fn node_faults_only_ever_hit_a_minority_one_fault_per_node() {
        for seed in 0..20 {
            for nodes in [1, 3, 5] {
                let t = topo(nodes);
                let p = plan(seed, &ALL, &t, RUN);
                let node_faults: Vec<&Fault> = p.iter().filter(|f| f.node().is_some()).collect();
                for f in &node_faults {
                    let at_once = node_faults
                        .iter()
                        .filter(|g| g.at <= f.at && g.busy_until() > f.at)
                        .count();
                    assert!(at_once <= t.max_node_faults(), "seed {seed}: {at_once}");
                    let same_node = node_faults
                        .iter()
                        .filter(|g| g.node() == f.node() && g.at <= f.at && g.busy_until() > f.at)
                        .count();
                    assert_eq!(same_node, 1, "seed {seed}: node faulted twice at once");
                }
            }
        }
    }

    #[test]
    fn empty_nodes_come_back_only_after_the_ttl_fsync_nodes_at_once() {
        for seed in 0..20 {
            let t = topo(5);
            for f in plan(seed, &ALL, &t, RUN) {
                if let Action::Kill { node, down } = f.action {
                    if down.is_zero() {
                        assert!(t.fsync[node], "immediate restart of an empty node");
                        assert_eq!(f.kind, FaultKind::KillFsyncRestart);
                    } else {
                        assert!(down > t.ttl, "{down:?}");
                    }
                }
                assert!(!matches!(f.action, Action::ClockJump { .. }));
            }
        }
    }

    #[test]
    fn links_are_proxied_and_never_faulted_twice_at_once() {
        for seed in 0..20 {
            let t = topo(5);
            let p = plan(seed, &ALL, &t, RUN);
            let mut spans: BTreeMap<Link, Vec<(Duration, Duration)>> = BTreeMap::new();
            for f in &p {
                if let Action::Links(links) = &f.action {
                    assert!(!links.is_empty());
                    for (link, _) in links {
                        assert!(t.proxied.contains(&link.worker));
                        assert!(link.node < t.nodes);
                        spans.entry(*link).or_default().push((f.at, f.busy_until()));
                    }
                }
            }
            for list in spans.values() {
                for w in list.windows(2) {
                    assert!(w[1].0 >= w[0].1, "seed {seed}: overlapping link faults");
                }
            }
        }
    }

    #[test]
    fn links_cut_for_the_run_are_never_faulted() {
        let mut t = topo(5);
        // Each proxied client misses one node, as sem-mixed's do.
        t.cut = (0..6)
            .map(|w| Link {
                worker: w,
                node: (w + 4) % 5,
            })
            .collect();
        let mut faulted = 0;
        for seed in 0..20 {
            for f in plan(seed, &ALL, &t, RUN) {
                if let Action::Links(links) = &f.action {
                    assert!(!links.is_empty(), "seed {seed}: {f:?}");
                    for (link, _) in links {
                        assert!(!t.cut.contains(link), "seed {seed}: {link:?} faulted");
                        faulted += 1;
                    }
                }
            }
        }
        assert!(faulted > 1000, "{faulted}");
        // Partitions still happen.
        let p = plan(3, &[(FaultKind::Partition, 1)], &t, RUN);
        assert!(p.len() > 50, "{}", p.len());
    }

    #[test]
    fn latency_mostly_within_half_the_ttl_sometimes_beyond_it() {
        let mut rng = StdRng::seed_from_u64(1);
        let ttl = Duration::from_millis(500);
        let (mut within, mut beyond) = (0, 0);
        for _ in 0..2000 {
            let LinkMode::Delay { fixed, jitter } = latency(&mut rng, ttl) else {
                unreachable!()
            };
            if fixed + jitter <= ttl / 2 {
                within += 1;
            } else {
                assert!(fixed > ttl, "{fixed:?} {jitter:?}");
                beyond += 1;
            }
        }
        let share = beyond as f64 / 2000.0;
        assert!((0.07..0.13).contains(&share), "{share}");
        assert!(within > 0);
    }

    #[test]
    fn partitions_are_asymmetric() {
        let t = topo(5);
        let p = plan(3, &[(FaultKind::Partition, 1)], &t, RUN);
        assert!(p.len() > 50, "{}", p.len());
        let mut split = 0;
        for f in &p {
            let Action::Links(links) = &f.action else {
                unreachable!()
            };
            assert!(!links.is_empty());
            // The nodes each client cannot reach; clients differ.
            let cut: std::collections::BTreeSet<Vec<usize>> = t
                .proxied
                .iter()
                .map(|&w| {
                    links
                        .iter()
                        .filter(|(l, _)| l.worker == w)
                        .map(|(l, _)| l.node)
                        .collect()
                })
                .collect();
            split += usize::from(cut.len() >= 2);
        }
        assert!(split * 10 >= p.len() * 9, "{split} of {}", p.len());
    }

    #[test]
    fn no_mix_no_faults() {
        assert!(plan(1, &[], &topo(5), RUN).is_empty());
    }

    #[test]
    fn empty_restarts_hit_nodes_without_persistence_at_once() {
        let t = topo(5);
        let p = plan(5, &[(FaultKind::KillEmptyRestart, 1)], &t, RUN);
        assert!(p.len() > 50, "{}", p.len());
        for f in &p {
            let Action::Kill { node, down } = f.action else {
                panic!("{f:?}")
            };
            assert!(!t.fsync[node] && down.is_zero(), "{f:?}");
        }
        // Every node without persistence gets its turn.
        for n in 2..5 {
            assert!(p.iter().any(|f| f.node() == Some(n)), "node {n}");
        }
    }

    #[test]
    fn clock_jumps_hit_fake_clock_nodes_by_more_than_the_ttl() {
        let t = topo(5);
        let p = plan(6, &[(FaultKind::ClockJump, 1)], &t, RUN);
        assert!(p.len() > 50, "{}", p.len());
        for f in &p {
            let Action::ClockJump { node, by } = f.action else {
                panic!("{f:?}")
            };
            assert!(t.fake_clock[node], "{f:?}");
            assert!(by > t.ttl && by <= 3 * t.ttl, "{by:?}");
        }
        // No node runs under a fake clock: nothing to jump.
        let mut plain = topo(5);
        plain.fake_clock = vec![false; 5];
        assert!(plan(6, &[(FaultKind::ClockJump, 1)], &plain, RUN).is_empty());
    }
}
