//! The scenarios: which faults, which nodes persist, which clients reach
//! which nodes, and the run that puts rig, workload and fault plan together.
//!
//! Brand-new servers are in the library's restart quarantine (their uptime
//! is below the TTL plus drift) and vote for no lock: every run waits that
//! out before its clients start, so the first second measures the
//! workload, not the servers' birth (unless the quarantine is off).
//!
//! Three scenarios aim at the library's guards against servers that lost
//! locks or would count twice:
//! - `empty-restart`: six of the eight clients each reach only a bare
//!   majority of the nodes (their links to the others reset for the whole
//!   run; client `w` reaches nodes `w, w+1, ...`), so the leases they take
//!   are held on exactly a majority; critical sections last up to TTL/2, on
//!   3 locks. A node without persistence is SIGKILLed and restarted at
//!   once, empty, again and again: without the restart quarantine, a
//!   client that reaches it and the nodes the holder does not takes the
//!   lock while the holder's lease is valid (`--no-quarantine` shows it).
//! - `clock-jump`: the same clients; node 0 runs under a fake wall clock
//!   that steps forward by more than the TTL, again and again: its keys
//!   expire early, and without the clock-jump guard a client takes the
//!   lock there while the holder's lease is valid (`--no-clock-guard
//!   --no-quarantine` shows it).
//! - `duplicate-node`: no faults; the node list names server 0 twice
//!   (`redis://127.0.0.1:P`, `redis://localhost:P`) and `--nodes - 1`
//!   servers in all. Half the clients call `check_servers` first; every
//!   acquire and every check must be refused with `SameServer` (check 6 of
//!   the checker) and no key may be left.
//!
//! `sem-mixed` puts a semaphore's permits (3 per name, on 2 names, for 8
//! clients: a permit on 4 of 5 nodes) under the mixed faults and empty
//! restarts of nodes without persistence besides: an empty node has lost
//! the permits it held, and only the restart quarantine keeps it from
//! handing them out again while their holders' leases are valid. As in
//! `empty-restart`, six clients reach only a permit's quorum of the nodes
//! (client `w`: nodes `w, w+1, ...`, 4 of 5; no link fault touches their
//! cut link), so their permits sit on exactly 4 nodes, each missing
//! another one: then a node emptied while 3 permits are held can have
//! room for a fourth on 4 nodes, which a client that reaches every node
//! would get without the quarantine (`--no-quarantine` shows it).
//!
//! `multi-mixed` puts multi-locks under the mixed faults: on 4 names,
//! half the acquisitions take 2 or 3 of them at once (`lock_all`, waiting
//! up to 8 x TTL, or `try_lock_all`), the other half one (`lock`,
//! `try_lock`), so that every name is contended by both kinds; every
//! client has fencing on, and each holder writes every name it holds
//! with that name's token. The multi-lock checker judges the leases per
//! name, and the `lock_all` waits of the clients that reach every node
//! directly for starvation by later single-name lockers (bound
//! [`MULTI_STARVATION_TTLS`] x TTL).
//!
//! `engine-mixed` puts every mode on shared names under the mixed faults:
//! on 4 lock names, exclusive locks, readers and sets of 2 or 3 of them
//! (each name written or read), and on a semaphore name of its own, 2
//! permits (two more clients, reaching every node directly, take permits
//! only); each also tried once, some kept alive; every call that waits
//! waits up to 6 x TTL (see [`workload::engine`]). `--modes` narrows the
//! kinds drawn (`--modes write` is exclusive locks alone). The engine
//! checker judges capacity, the order in which waiters are served and
//! starvation, every fault applied being a disturbance that excuses the
//! waiters it touches (see [`engine_checker`](crate::engine_checker)).
//!
//! `elections` puts elections under the mixed faults: 5 campaigners
//! (clients 0-3 behind fault proxies, 4 direct) campaign for 2 election
//! names in turn, lead for TTL/2 to 2 x TTL while watching `lost()`,
//! proclaim new values in some leads, and resign or drop the lead; 2
//! observers (client 5 behind proxies, 6 direct) `observe()` both names
//! for the whole run (see [`workload::elections`]). The elections checker
//! judges the leads (no two of a name at once, terms rising in the order
//! they started) and what the observers were told (terms in order, and
//! only what a campaigner held; see
//! [`election_checker`](crate::election_checker)). No patient client: a
//! lead is kept alive.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redlease_testkit::netns::Faults;

use crate::checker::FinalState;
use crate::engine_checker::{self, Disturbance, EngineRun};
use crate::faults::{self, Action, FaultKind, Link, Topology};
use crate::history::Recorder;
use crate::inject;
use crate::multi_checker::MultiLocks;
use crate::panics;
use crate::report::Run;
use crate::rig::{self, Rig};
use crate::rw_checker::ReadWrite;
use crate::sem_checker::Semaphores;
use crate::store::Store;
use crate::watchdog::{Watchdog, STALL};
use crate::workload::elections;
use crate::workload::engine::{Journal, Modes};
use crate::workload::{self, Client, Settings};

/// Which nodes run with `appendonly yes, appendfsync always`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fsync {
    None,
    All,
    /// As many as node faults may hit at once (nodes 0, 1 of 5), so an
    /// immediate restart always has a durable node to hit.
    Minority,
}

/// Which nodes the clients reach, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clients {
    /// Clients 0-5 reach every node through fault proxies, 6 and 7 directly.
    Standard,
    /// Clients 0-5 each reach only a bare majority of the nodes (`w, w+1,
    /// ...` mod N; their other links reset for the whole run), 6 and 7
    /// every node directly; critical sections up to TTL/2 on 3 locks.
    BareMajorities,
    /// Every client reaches every node directly, and the node list names
    /// node 0 twice (`127.0.0.1` and `localhost`): `--nodes` entries,
    /// one server fewer.
    ServerTwice,
    /// Clients 0-5 each reach only a semaphore permit's quorum of the
    /// nodes (`w, w+1, ...` mod N; their other links reset for the whole
    /// run, never faulted), 6 and 7 every node directly.
    BareQuorums,
}

pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    pub mix: &'static [(FaultKind, u32)],
    pub fsync: Fsync,
    /// Clients 0 and 1 get a node timeout of 90% of the TTL.
    pub patient: bool,
    pub clients: Clients,
    /// Node 0 runs under a fake wall clock (libfaketime).
    pub fake_clock: bool,
    /// What the clients take.
    pub workload: Workload,
}

/// What a scenario's clients take, and which checker judges the leases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Locks ([`Settings::standard`]), half the clients with fencing on.
    Exclusive,
    /// Read and write locks ([`Settings::read_write`]), judged by the
    /// read-write checker too.
    ReadWrite,
    /// A semaphore's permits ([`Settings::semaphore`]), judged by the
    /// semaphore checker too.
    Semaphore,
    /// Several names at once and one at a time ([`Settings::multi`]),
    /// judged by the multi-lock checker too.
    Multi,
    /// Every mode on shared names ([`Settings::engine`]), judged by the
    /// engine checker too.
    Engine,
    /// Campaigners and observers of elections ([`Settings::elections`]),
    /// judged by the elections checker too.
    Elections,
}

/// The library's guards against servers that restarted or whose clock
/// jumped: on by default; `--no-quarantine`, `--restart-quarantine-ms N`,
/// `--no-clock-guard`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Guards {
    /// `restart_quarantine`: `None` for the library's default (the TTL
    /// plus drift), `Some(Duration::ZERO)` for off.
    pub quarantine: Option<Duration>,
    /// `clock_jump_guard`.
    pub clock: bool,
}

/// Real packet loss on the lock nodes' links (`--loss`): the run is in a
/// network namespace of its own, whose nftables drop `percent` % of the
/// TCP packets to and from the nodes' ports while the clients run (the
/// data Redis is spared: it stands for the protected resource).
pub struct Loss {
    pub percent: f64,
    pub faults: Faults,
}

use FaultKind::*;

/// Every fault of the single-fault scenarios, interleaved.
const MIXED: &[(FaultKind, u32)] = &[
    (KillDelayedRestart, 2),
    (KillFsyncRestart, 2),
    (Pause, 2),
    (Latency, 2),
    (Blackhole, 1),
    (Reset, 1),
    (BufferedReplies, 2),
    (Partition, 2),
];

/// [`MIXED`], and nodes without persistence killed and restarted at
/// once, empty (about one fault in six).
const MIXED_AND_EMPTY_RESTARTS: &[(FaultKind, u32)] = &[
    (KillDelayedRestart, 2),
    (KillFsyncRestart, 2),
    (Pause, 2),
    (Latency, 2),
    (Blackhole, 1),
    (Reset, 1),
    (BufferedReplies, 2),
    (Partition, 2),
    (KillEmptyRestart, 3),
];

pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "baseline",
        about: "no faults (run with --nodes 1 and --nodes 5)",
        mix: &[],
        fsync: Fsync::None,
        patient: false,
        clients: Clients::Standard,
        fake_clock: false,
        workload: Workload::Exclusive,
    },
    Scenario {
        name: "crash-delayed-restart",
        about: "SIGKILL a minority; restart empty after more than the TTL",
        mix: &[(KillDelayedRestart, 1)],
        fsync: Fsync::None,
        patient: false,
        clients: Clients::Standard,
        fake_clock: false,
        workload: Workload::Exclusive,
    },
    Scenario {
        name: "crash-fsync-restart",
        about: "all nodes appendfsync always; SIGKILL a minority and restart at once",
        mix: &[(KillFsyncRestart, 1)],
        fsync: Fsync::All,
        patient: false,
        clients: Clients::Standard,
        fake_clock: false,
        workload: Workload::Exclusive,
    },
    Scenario {
        name: "pause",
        about: "SIGSTOP a minority for TTL/4 .. 2 x TTL, then SIGCONT",
        mix: &[(Pause, 1)],
        fsync: Fsync::None,
        patient: false,
        clients: Clients::Standard,
        fake_clock: false,
        workload: Workload::Exclusive,
    },
    Scenario {
        name: "latency",
        about: "link delays one way up to TTL/2, 10% above the TTL; two patient clients",
        mix: &[(Latency, 1)],
        fsync: Fsync::None,
        patient: true,
        clients: Clients::Standard,
        fake_clock: false,
        workload: Workload::Exclusive,
    },
    Scenario {
        name: "buffered-replies",
        about: "replies held beyond the TTL, then delivered on the same connection",
        mix: &[(BufferedReplies, 1)],
        fsync: Fsync::None,
        patient: false,
        clients: Clients::Standard,
        fake_clock: false,
        workload: Workload::Exclusive,
    },
    Scenario {
        name: "partition",
        about: "asymmetric partitions: two groups of clients see different node subsets",
        mix: &[(Partition, 1)],
        fsync: Fsync::None,
        patient: false,
        clients: Clients::Standard,
        fake_clock: false,
        workload: Workload::Exclusive,
    },
    Scenario {
        name: "mixed",
        about: "every fault above, interleaved",
        mix: MIXED,
        fsync: Fsync::Minority,
        patient: true,
        clients: Clients::Standard,
        fake_clock: false,
        workload: Workload::Exclusive,
    },
    Scenario {
        name: "rw-mixed",
        about: "the mixed faults under read and write locks (85% reads, 3 locks, fencing on)",
        mix: MIXED,
        fsync: Fsync::Minority,
        patient: true,
        clients: Clients::Standard,
        fake_clock: false,
        workload: Workload::ReadWrite,
    },
    Scenario {
        name: "sem-mixed",
        about: "the mixed faults and empty restarts under a semaphore's permits (3 per name, \
                2 names, 8 clients)",
        mix: MIXED_AND_EMPTY_RESTARTS,
        fsync: Fsync::Minority,
        patient: true,
        clients: Clients::BareQuorums,
        fake_clock: false,
        workload: Workload::Semaphore,
    },
    Scenario {
        name: "multi-mixed",
        about: "the mixed faults under multi-locks (2-3 of 4 names by lock_all, beside \
                single-name locks of the same names; fencing on)",
        mix: MIXED,
        fsync: Fsync::Minority,
        patient: true,
        clients: Clients::Standard,
        fake_clock: false,
        workload: Workload::Multi,
    },
    Scenario {
        name: "engine-mixed",
        about: "the mixed faults under every mode on shared names (writers, readers, sets of 2-3 \
                of 4 names, 2 permits on a name of their own); order judged (--modes narrows)",
        mix: MIXED,
        fsync: Fsync::Minority,
        patient: true,
        clients: Clients::Standard,
        fake_clock: false,
        workload: Workload::Engine,
    },
    Scenario {
        name: "elections",
        about: "the mixed faults under elections: 5 campaigners lead 2 names in turn (proclaim, \
                resign or drop), 2 observers watch both; leads, terms and what was told judged",
        mix: MIXED,
        fsync: Fsync::Minority,
        patient: false,
        clients: Clients::Standard,
        fake_clock: false,
        workload: Workload::Elections,
    },
    Scenario {
        name: "empty-restart",
        about:
            "SIGKILL a node without persistence, restart at once, empty; holders on bare majorities",
        mix: &[(KillEmptyRestart, 1)],
        fsync: Fsync::None,
        patient: false,
        clients: Clients::BareMajorities,
        fake_clock: false,
        workload: Workload::Exclusive,
    },
    Scenario {
        name: "clock-jump",
        about: "node 0's wall clock jumps ahead by more than the TTL; holders on bare majorities",
        mix: &[(ClockJump, 1)],
        fsync: Fsync::None,
        patient: false,
        clients: Clients::BareMajorities,
        fake_clock: true,
        workload: Workload::Exclusive,
    },
    Scenario {
        name: "duplicate-node",
        about: "the node list names one server twice (127.0.0.1 and localhost): no lock, ever",
        mix: &[],
        fsync: Fsync::None,
        patient: false,
        clients: Clients::ServerTwice,
        fake_clock: false,
        workload: Workload::Exclusive,
    },
];

pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// Extra time for workers to finish their last critical section after the
/// deadline, on top of the slowest bound.
const DRAIN_SLACK: Duration = Duration::from_secs(5);
/// Extra wait after the last byte could have reached a node, before lock
/// keys are looked for.
const LEAK_MARGIN: Duration = Duration::from_millis(500);
/// After the loss is healed, how long a segment may still wait for its
/// retransmission (the kernel's timeout doubles from 200 ms with each
/// loss of it: four in a row).
const RETRANSMISSION_DRAIN: Duration = Duration::from_secs(4);
/// The read-write checker's starvation bound, in TTLs: readers that
/// arrived after a waiting writer may keep it out about one reader's TTL
/// (a kept-alive one's hold, 1.5 x TTL, at most) and a wake-up; twice
/// that is flagged.
const STARVATION_TTLS: u32 = 4;
/// The multi-lock checker's starvation bound, in TTLs: how long later
/// single-name lockers may keep a waiting `lock_all` out (it waits 8 x
/// TTL). The library does not protect a multi-lock from them yet (its
/// manual says so), so this is generous: in a dozen runs of 15-30 s,
/// later single lockers kept a judged `lock_all` out 1.3 s at most, and
/// none of them waited more than 2.2 s.
pub const MULTI_STARVATION_TTLS: u32 = 6;
/// The engine checker's starvation bound, in TTLs, as the read-write
/// checker's: every call that waits waits up to 6 x TTL.
const ENGINE_STARVATION_TTLS: u32 = 4;
/// How long after a fault heals (or a lease ends unreleased) waiters may
/// still be served out of order, in TTLs: a waiter whose place a fault
/// took queues again at its next attempt, which its fallback timer (the
/// holder's expiry at most) brings within a TTL.
const ENGINE_RECOVER_TTLS: u32 = 1;
/// How long a restarted node casts no vote (the library's restart
/// quarantine, at most the TTL plus drift, rounded up to the whole
/// seconds the server counts its uptime in, plus one).
const RESTART_QUARANTINE: Duration = Duration::from_secs(2);
/// What real packet loss adds to the engine checker's slacks: the kernel
/// retransmits a lost segment after 200 ms at least, doubling; two in a
/// row.
const LOSS_SLACK: Duration = Duration::from_millis(200 + 400);
/// How long observers told to stop may take to return.
const OBSERVERS_STOP: Duration = Duration::from_secs(5);

#[allow(clippy::too_many_arguments)]
pub async fn run(
    scenario: &Scenario,
    nodes: usize,
    seconds: u64,
    seed: u64,
    guards: Guards,
    loss: Option<&Loss>,
    modes: Option<Modes>,
    verbose: bool,
) -> Result<Run, String> {
    if modes.is_some() && scenario.workload != Workload::Engine {
        return Err(format!("--modes does not apply to {}", scenario.name));
    }
    let mut settings = match scenario.workload {
        // Fencing on for every client: tokens and generations per name.
        Workload::Engine => Settings::engine(scenario.patient, modes.unwrap_or(Modes::ALL)),
        // Terms are fencing tokens whatever the Lockers' setting.
        Workload::Elections => Settings::elections(),
        // Fencing on for every client: readers' generations.
        Workload::ReadWrite => Settings::read_write(scenario.patient),
        // Fencing on for every client: permits' tokens go up per name.
        Workload::Semaphore => Settings::semaphore(scenario.patient),
        // Fencing on for every client: each name's token, whichever call
        // took it.
        Workload::Multi => Settings::multi(scenario.patient),
        Workload::Exclusive => {
            let mut settings = Settings::standard(scenario.patient);
            // Half the workers take locks the default way (no fencing
            // token, plain commands), half with fencing on (the acquire
            // script): both paths meet the same faults.
            settings.unfenced = (0..settings.workers).filter(|w| w % 2 == 1).collect();
            settings
        }
    };
    // The servers the run starts (one fewer than the node list's entries
    // when one of them is named twice).
    let mut servers = nodes;
    match scenario.clients {
        Clients::Standard | Clients::BareQuorums => {}
        Clients::BareMajorities => {
            settings.max_sleep = settings.ttl / 2;
            settings.locks = 3;
        }
        Clients::ServerTwice => {
            if nodes < 2 {
                return Err(format!(
                    "{} names one server twice: it needs --nodes 2 or more",
                    scenario.name
                ));
            }
            servers = nodes - 1;
            settings.proxied = Vec::new();
        }
    }
    settings.restart_quarantine = guards.quarantine;
    settings.clock_jump_guard = guards.clock;
    let settings = Arc::new(settings);
    // How many nodes each proxied client reaches, where not all.
    let reach = match scenario.clients {
        Clients::BareMajorities => Some(majority(servers)),
        Clients::BareQuorums => Some(permit_quorum(servers, settings.permits.unwrap_or(1))),
        Clients::Standard | Clients::ServerTwice => None,
    };
    let cut: Vec<Link> = reach
        .into_iter()
        .flat_map(|reach| {
            settings.proxied.iter().flat_map(move |&worker| {
                unreached(worker, servers, reach)
                    .into_iter()
                    .map(move |node| Link { worker, node })
            })
        })
        .collect();
    let topo = Topology {
        nodes: servers,
        fsync: (0..servers)
            .map(|n| match scenario.fsync {
                Fsync::None => false,
                Fsync::All => true,
                Fsync::Minority => n < (servers.saturating_sub(1) / 2).max(1),
            })
            .collect(),
        fake_clock: (0..servers)
            .map(|n| scenario.fake_clock && n == 0)
            .collect(),
        proxied: settings.proxied.clone(),
        cut: cut.clone(),
        ttl: settings.ttl,
    };
    let length = Duration::from_secs(seconds);
    let plan = faults::plan(seed, scenario.mix, &topo, length);
    let max_delay = inject::max_link_delay(&plan);

    let configs = (0..servers)
        .map(|n| rig::node_config(topo.fsync[n], topo.fake_clock[n]))
        .collect();
    let rig = Rig::start(configs, &settings.proxied).await?;
    let mut notes = Vec::new();
    if let Some(loss) = loss {
        // From before the clients connect: their setup meets it too.
        loss.faults
            .loss_on(loss.percent, &rig.ports())
            .map_err(|e| format!("--loss: {e}"))?;
        notes.push(format!(
            "real packet loss: {} % of the TCP packets to and from every lock node dropped \
             (nftables, in the soak's own network namespace) until the clients were done; \
             the data Redis spared",
            loss.percent
        ));
    }
    match guards.quarantine {
        Some(q) if q.is_zero() => {
            notes.push("restart quarantine OFF (--no-quarantine)".to_string());
        }
        Some(q) => notes.push(format!("restart quarantine {} ms", q.as_millis())),
        None => {}
    }
    if !guards.clock {
        notes.push("clock-jump guard OFF (--no-clock-guard)".to_string());
    }
    if scenario.fake_clock {
        notes.push("node 0 runs under a fake wall clock (libfaketime)".to_string());
    }
    let quarantine = settings.quarantine();
    if !quarantine.is_zero() {
        let waited = rig::await_uptime(&rig.addrs, quarantine).await?;
        notes.push(format!(
            "waited {:.1} s for the brand-new servers to leave their restart quarantine \
             ({}{} ms) before the clients started",
            waited.as_secs_f64(),
            if settings.restart_quarantine.is_none() {
                "TTL + drift, at most "
            } else {
                ""
            },
            quarantine.as_millis()
        ));
    }
    let epoch = Instant::now();
    tracing::info!("epoch: the run's times count from here");
    let rec = Recorder::new(epoch);
    for link in &cut {
        rig.cut(link.worker, link.node);
    }
    let mut clients = Vec::new();
    for worker in 0..settings.workers {
        let nt = settings.node_timeout_of(worker);
        let urls = match scenario.clients {
            Clients::ServerTwice => server_twice(&rig.addrs),
            _ => rig.urls_for(worker),
        };
        clients.push(
            Client::connect(
                worker,
                urls,
                &rig.data.url(),
                settings.ttl,
                nt,
                settings.wait,
                &settings,
                rec.clone(),
            )
            .await?,
        );
    }
    let semaphore = match settings.permits {
        Some(permits) => {
            let sem = clients[0].locker.semaphore(workload::lock_name(0), permits);
            if scenario.clients == Clients::BareQuorums && reach != Some(sem.quorum()) {
                return Err(format!(
                    "{}: the soak counts a permit's quorum as {reach:?} of {servers} nodes, \
                     the library as {}",
                    scenario.name,
                    sem.quorum()
                ));
            }
            if servers > 1 && sem.tolerates() == 0 {
                return Err(format!(
                    "{}: {permits} permits over {servers} nodes leave no node that may fail \
                     (a permit needs all of them): use --nodes 1, or 5 or more",
                    scenario.name
                ));
            }
            notes.push(format!(
                "semaphore: {permits} permits on each of {} names for {} clients, a permit on \
                 {} of {servers} nodes; {:.0}% try_acquire, {:.0}% kept alive (held up to {} \
                 ms), critical sections up to {} ms; fencing on",
                settings.locks,
                settings.workers,
                sem.quorum(),
                settings.try_share * 100.0,
                settings.keep_alive_share * 100.0,
                settings.keep_alive_hold.as_millis(),
                settings.max_sleep.as_millis()
            ));
            Some(Semaphores {
                permits,
                flagged_by: None,
            })
        }
        None => None,
    };
    if let Some(reach) = reach {
        notes.push(format!(
            "clients {:?} each reach {} of the nodes ({reach} of {servers}; client w: nodes w, \
             w+1, ... mod {servers}), the others every node",
            settings.proxied,
            match scenario.clients {
                Clients::BareQuorums => "a permit's quorum",
                _ => "a bare majority",
            }
        ));
    }
    if scenario.clients == Clients::ServerTwice {
        notes.push(format!(
            "{} servers, {nodes} nodes in the list: {}",
            servers,
            server_twice(&rig.addrs).join(", ")
        ));
        // Half the clients check first (the start-up check an application
        // should make); the others meet the pair in their first lock.
        for client in clients.iter_mut().step_by(2) {
            let found = client.check_servers().await;
            notes.push(format!(
                "worker {}: check_servers: {}",
                client.worker,
                match found {
                    Ok(n) => format!("no server twice, {n} unreachable"),
                    Err(kind) => format!("refused, {}", kind.label()),
                }
            ));
        }
    }

    let deadline = epoch + length;
    let watchdog = Watchdog::start(epoch);
    let injector = tokio::spawn(inject::run(
        plan,
        rig.nodes.clone(),
        rig.proxies.clone(),
        epoch,
        verbose,
    ));
    let journal = Journal::default();
    let election_journal = elections::Journal::default();
    // Observers watch until told to stop, after the campaigners are done.
    let (stop_observers, observers_stop) = tokio::sync::watch::channel(false);
    let mut observers = Vec::new();
    let workers: Vec<_> = clients
        .into_iter()
        .filter_map(|client| {
            use tracing::Instrument;
            let settings = settings.clone();
            let span = tracing::info_span!("worker", n = client.worker);
            Some(match scenario.workload {
                Workload::Multi => tokio::spawn(
                    workload::multi::work(client, settings, seed, deadline).instrument(span),
                ),
                Workload::Engine => tokio::spawn(
                    workload::engine::work(client, settings, seed, deadline, journal.clone())
                        .instrument(span),
                ),
                Workload::Elections => {
                    let mix = settings.elections.as_ref()?;
                    if mix.observers.contains(&client.worker) {
                        observers.push(tokio::spawn(elections::observe(
                            client,
                            mix.names,
                            election_journal.clone(),
                            observers_stop.clone(),
                        )));
                        return None;
                    }
                    tokio::spawn(elections::campaign(
                        client,
                        settings,
                        seed,
                        deadline,
                        election_journal.clone(),
                    ))
                }
                _ => {
                    tokio::spawn(workload::work(client, settings, seed, deadline).instrument(span))
                }
            })
        })
        .collect();
    // A worker that is not back by then is stuck in a call: unbounded.
    let drain = settings.longest_wait()
        + settings.lock_rounds() * settings.patient_node_timeout
        + DRAIN_SLACK;
    let mut stuck = 0;
    for worker in workers {
        let left = (deadline + drain).saturating_duration_since(Instant::now());
        let abort = worker.abort_handle();
        if tokio::time::timeout(left, worker).await.is_err() {
            abort.abort();
            stuck += 1;
        }
    }
    let elapsed = epoch.elapsed();
    let stalls = watchdog.stop();
    let applied = injector
        .await
        .map_err(|e| format!("fault injector: {e}"))??;

    let mut retransmissions = Duration::ZERO;
    if let Some(loss) = loss {
        let dropped = loss.faults.dropped().unwrap_or(0);
        loss.faults
            .heal()
            .map_err(|e| format!("healing --loss: {e}"))?;
        notes.push(format!(
            "{dropped} packets to or from the lock nodes were dropped"
        ));
        retransmissions = RETRANSMISSION_DRAIN;
    }
    rig.heal().await?;
    // Held and delayed bytes are delivered by now or within the largest
    // delay (or retransmission); a key they create lives one TTL.
    tokio::time::sleep(max_delay + retransmissions + settings.ttl + LEAK_MARGIN).await;
    // The observers have had a TTL and more since the last lead could end
    // and every fault healed: their last word is told by now.
    let _ = stop_observers.send(true);
    for observer in observers {
        let abort = observer.abort_handle();
        if tokio::time::timeout(OBSERVERS_STOP, observer)
            .await
            .is_err()
        {
            abort.abort();
            stuck += 1;
        }
    }
    let leftover_keys = rig.leftover_keys().await?;
    let counters = Store::connect(&rig.data.url())
        .await?
        .counters(settings.locks)
        .await?;

    if let Some((start, end)) = stalls.iter().max_by_key(|(s, e)| *e - *s) {
        notes.push(format!(
            "the machine did not run this process {} time(s) for more than {STALL:?} (longest \
             {:?} at {:.1} s); the bound and expiry checks leave that time out",
            stalls.len(),
            *end - *start,
            start.as_secs_f64()
        ));
    }
    if stuck > 0 {
        notes.push(format!(
            "{stuck} worker(s) did not return within {drain:?} after the deadline"
        ));
    }
    let read_write = (scenario.workload == Workload::ReadWrite).then(|| ReadWrite {
        waits_judged: (0..settings.workers)
            .filter(|w| !settings.proxied.contains(w))
            .collect(),
        starvation_bound: STARVATION_TTLS * settings.ttl,
        flagged_by: None,
    });
    if let Some(rw) = &read_write {
        notes.push(format!(
            "read-write: {:.0}% read locks on {} locks, {:.0}% of leases kept alive (held up \
             to {} ms), writers wait up to {} ms; the writer waits of clients {:?} (every \
             node direct) are judged for starvation, bound {} ms",
            settings.read_share * 100.0,
            settings.locks,
            settings.keep_alive_share * 100.0,
            settings.keep_alive_hold.as_millis(),
            settings.longest_wait().as_millis(),
            rw.waits_judged,
            rw.starvation_bound.as_millis()
        ));
    }
    let multi = (scenario.workload == Workload::Multi).then(|| MultiLocks {
        waits_judged: (0..settings.workers)
            .filter(|w| !settings.proxied.contains(w))
            .collect(),
        starvation_bound: MULTI_STARVATION_TTLS * settings.ttl,
        fenced: settings.unfenced.is_empty(),
        flagged_by: None,
    });
    if let Some(multi) = &multi {
        notes.push(format!(
            "multi-lock: {} names; {:.0}% of the acquisitions take 2 or 3 of them at once \
             (lock_all waits up to {} ms), the rest one; {:.0}% try_, {:.0}% kept alive (held \
             up to {} ms); the lock_all waits of clients {:?} (every node direct) are judged \
             for starvation by later single-name lockers, bound {} ms",
            settings.locks,
            settings.multi_share * 100.0,
            settings.longest_wait().as_millis(),
            settings.try_share * 100.0,
            settings.keep_alive_share * 100.0,
            settings.keep_alive_hold.as_millis(),
            multi.waits_judged,
            multi.starvation_bound.as_millis()
        ));
    }
    let engine = settings.engine.as_ref().map(|mix| {
        let recover = ENGINE_RECOVER_TTLS * settings.ttl;
        let run = EngineRun {
            asked: journal.asked(),
            nodes: servers,
            capacity: mix
                .semaphore_names(settings.locks)
                .map(|name| (name, mix.permits))
                .collect(),
            disturbances: disturbances(&applied.windows, recover),
            recover,
            starvation_bound: ENGINE_STARVATION_TTLS * settings.ttl,
            loss_slack: if loss.is_some() {
                LOSS_SLACK
            } else {
                Duration::ZERO
            },
            modes: mix.modes.label(),
            flagged_by: None,
        };
        notes.push(format!(
            "engine: {} on lock names 0-{} and semaphore name(s) {:?} of {} permits (weights \
             {:?}; clients {}.. take permits only, if any); {:.0}% try_, {:.0}% kept alive; \
             critical sections {}-{} ms; calls that wait wait up to {} ms; order \
             judged with slacks of 2 node timeouts + 50 ms{}, a fault taking its node from a \
             waiter until {} ms after it healed (restarts: 2 s more); starvation bound {} ms",
            run.modes,
            settings.locks - 1,
            mix.semaphore_names(settings.locks),
            mix.permits,
            workload::engine::PERMIT_WEIGHTS,
            mix.permit_workers_from,
            settings.try_share * 100.0,
            settings.keep_alive_share * 100.0,
            settings.min_sleep.as_millis(),
            settings.max_sleep.as_millis(),
            settings.wait.as_millis(),
            if loss.is_some() {
                format!(" + {} ms for the loss", LOSS_SLACK.as_millis())
            } else {
                String::new()
            },
            recover.as_millis(),
            run.starvation_bound.as_millis()
        ));
        run
    });
    let elections = settings.elections.as_ref().map(|mix| {
        notes.push(format!(
            "elections: {} names; campaigners {:?}, observers {:?} (behind fault proxies: {:?}); \
             a campaign waits up to {} ms (less near the end); leads last {}-{} ms, {:.0}% \
             proclaim once or twice, {:.0}% are dropped instead of resigned",
            mix.names,
            mix.campaigners,
            mix.observers,
            settings.proxied,
            settings.wait.as_millis(),
            mix.min_lead.as_millis(),
            mix.max_lead.as_millis(),
            mix.proclaim_share * 100.0,
            mix.drop_share * 100.0,
        ));
        election_journal.run(mix.names, mix.observers.clone(), None)
    });
    let mut faults_by_kind: std::collections::BTreeMap<&'static str, u64> =
        scenario.mix.iter().map(|(k, _)| (k.label(), 0)).collect();
    faults_by_kind.extend(applied.counts);
    Ok(Run {
        scenario: scenario.name.to_string(),
        seed,
        nodes,
        seconds: seconds as f64,
        elapsed,
        ttl: settings.ttl,
        history: rec.history(),
        faults: faults_by_kind,
        state: FinalState {
            counters,
            leftover_keys,
            process_panics: panics::count(),
            stuck_workers: stuck,
            stalls,
        },
        notes,
        same_server: (scenario.clients == Clients::ServerTwice).then_some([0, 1]),
        read_write,
        semaphore,
        multi,
        engine,
        elections,
    })
}

/// The disturbances the engine checker excuses waiters by: each applied
/// fault from its start until `recover` after it healed (after a restart,
/// the restart quarantine besides: the node casts no vote until then); a
/// node fault takes its node from every worker, a link fault each of its
/// links' node from that link's worker.
fn disturbances(windows: &[inject::Window], recover: Duration) -> Vec<Disturbance> {
    let mut out = Vec::new();
    for w in windows {
        let fault = |node, workers: Option<Vec<usize>>, to| Disturbance {
            from: w.from,
            to: to + recover,
            cause: if workers.is_some() {
                engine_checker::LINK_FAULT
            } else {
                engine_checker::NODE_FAULT
            },
            workers,
            locks: None,
            node: Some(node),
        };
        match &w.fault.action {
            Action::Links(links) => {
                out.extend(
                    links
                        .iter()
                        .map(|(link, _)| fault(link.node, Some(vec![link.worker]), w.to)),
                );
            }
            Action::Kill { node, .. } => out.push(fault(*node, None, w.to + RESTART_QUARANTINE)),
            Action::Pause { node } | Action::ClockJump { node, .. } => {
                out.push(fault(*node, None, w.to));
            }
        }
    }
    out
}

/// A bare majority of `n` nodes.
fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// A semaphore's quorum of `n` nodes for `permits` permits, as the
/// library counts it (`Semaphore::quorum`, against which the run checks
/// it): `n * permits / (permits + 1) + 1`.
fn permit_quorum(n: usize, permits: u32) -> usize {
    let permits = permits as usize;
    n * permits / (permits + 1) + 1
}

/// The nodes a client that reaches `reach` of `n` does not: client `w`
/// reaches nodes `w, w+1, ...` (mod `n`).
fn unreached(worker: usize, n: usize, reach: usize) -> Vec<usize> {
    (reach.min(n)..n).map(|k| (worker + k) % n).collect()
}

/// The node list with server 0 named twice: `redis://127.0.0.1:P`,
/// `redis://localhost:P`, then the other servers.
fn server_twice(addrs: &[String]) -> Vec<String> {
    let port = addrs[0].rsplit(':').next().unwrap_or_default();
    let mut urls = vec![
        format!("redis://127.0.0.1:{port}"),
        format!("redis://localhost:{port}"),
    ];
    urls.extend(addrs[1..].iter().map(|a| format!("redis://{a}")));
    urls
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_majority_clients_each_miss_a_minority_and_differ() {
        for worker in 0..6 {
            let cut = unreached(worker, 5, majority(5));
            assert_eq!(cut.len(), 2, "{cut:?}");
            assert!(!cut.contains(&(worker % 5)));
        }
        assert_eq!(unreached(0, 5, majority(5)), [3, 4]);
        assert_eq!(unreached(3, 5, majority(5)), [1, 2]);
        assert!(unreached(0, 1, majority(1)).is_empty());
        assert_eq!(unreached(1, 3, majority(3)), [0]);
    }

    #[test]
    fn bare_quorum_clients_each_miss_another_node() {
        // 3 permits over 5 nodes: a permit on 4; the five first clients
        // each miss a different node.
        assert_eq!(permit_quorum(5, 3), 4);
        assert_eq!((permit_quorum(5, 1), permit_quorum(3, 2)), (3, 3));
        let missed: Vec<usize> = (0..5)
            .map(|w| match unreached(w, 5, permit_quorum(5, 3))[..] {
                [node] => node,
                ref other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(missed, [4, 0, 1, 2, 3]);
        assert!(unreached(0, 1, permit_quorum(1, 3)).is_empty());
    }

    #[test]
    fn faults_become_disturbances_of_the_nodes_they_take() {
        use crate::faults::{Fault, LinkMode};
        let ms = Duration::from_millis;
        let window = |action, from: u64, to: u64| inject::Window {
            fault: Fault {
                at: ms(from),
                kind: FaultKind::Pause,
                action,
                hold: ms(to - from),
            },
            from: ms(from),
            to: ms(to),
        };
        let link = |worker, node| (Link { worker, node }, LinkMode::Blackhole);
        let windows = [
            window(Action::Pause { node: 2 }, 100, 300),
            window(
                Action::Kill {
                    node: 1,
                    down: ms(50),
                },
                400,
                460,
            ),
            window(
                Action::Links(vec![link(0, 3), link(4, 3), link(4, 1)]),
                500,
                900,
            ),
        ];
        let found = disturbances(&windows, ms(500));
        let seen: Vec<String> = found
            .iter()
            .map(|d| {
                let ms = |t: Duration| t.as_millis();
                format!(
                    "node {:?} workers {:?} [{}, {}] {}",
                    d.node,
                    d.workers,
                    ms(d.from),
                    ms(d.to),
                    d.cause
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                "node Some(2) workers None [100, 800] node faults",
                // A restart: its quarantine (2 s) besides.
                "node Some(1) workers None [400, 2960] node faults",
                "node Some(3) workers Some([0]) [500, 1400] node and link faults",
                "node Some(3) workers Some([4]) [500, 1400] node and link faults",
                "node Some(1) workers Some([4]) [500, 1400] node and link faults",
            ]
        );
        assert!(found.iter().all(|d| d.locks.is_none()));
    }

    #[test]
    fn one_server_is_named_twice_first() {
        let addrs = ["127.0.0.1:7001".to_string(), "127.0.0.1:7002".to_string()];
        assert_eq!(
            server_twice(&addrs),
            [
                "redis://127.0.0.1:7001",
                "redis://localhost:7001",
                "redis://127.0.0.1:7002"
            ]
        );
    }
}
