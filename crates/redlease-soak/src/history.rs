//! The history of a run: every operation with its worker, invoke and
//! complete times on the monotonic clock, result or error, `valid_until` and
//! fencing token. Times are offsets from the run's epoch, so a history is
//! plain data the checker can judge without clocks.
//!
//! A multi-lock (`lock_all`) is recorded per name: its acquire, extends,
//! release and the calls under it appear once for each name it holds,
//! each name with a lease number and a fencing token of its own, all
//! marked with the [`Multi`] attempt they belong to. So every per-lock
//! check sees a multi-lock's names as it sees single locks; the first
//! name's operation stands for the library call ([`Op::is_call`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One acquisition, numbered across the run; every operation done under a
/// lease carries its number.
pub type LeaseId = u64;

/// What an operation was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Call {
    /// `locker.lock(name)`: waits per the retry policy.
    Lock,
    /// `locker.try_lock(name)`: one attempt.
    TryLock,
    /// `lease.extend(ttl)`.
    Extend,
    /// `lease.release()`.
    Release,
    /// The lease was dropped without `release` (the library releases it in
    /// the background): for the checker, it ends here like a release.
    Abandon,
    /// GET of the lock's counter on the data Redis (inside the lease).
    Read,
    /// SET of the lock's counter to the value read plus one.
    Write,
    /// Write to the lock's fenced store, carrying the fencing token.
    FencedWrite,
    /// `locker.admin().check_servers()`: connects to every node and looks for one
    /// server given twice.
    CheckServers,
    /// `election.campaign(value)`: waits in turn for the lead, then
    /// publishes the value.
    Campaign,
    /// `leadership.proclaim(value)`.
    Proclaim,
    /// `leadership.resign()`.
    Resign,
    /// `observe.next()`: recorded only when it fails (it waits for the
    /// next change, for as long as there is none).
    Observe,
    /// `election.leader()`: who leads, asked once.
    Leader,
    /// `locker.admin().force_release(name)`: an operator's.
    ForceRelease,
}

impl Call {
    /// Whether this is a redlease call (as opposed to one on the data Redis).
    pub fn is_library(self) -> bool {
        matches!(
            self,
            Call::Lock
                | Call::TryLock
                | Call::Extend
                | Call::Release
                | Call::CheckServers
                | Call::Campaign
                | Call::Proclaim
                | Call::Resign
                | Call::Observe
                | Call::Leader
                | Call::ForceRelease
        )
    }

    /// Whether it hands out a lease when it succeeds (an election's lead
    /// is one).
    pub fn is_acquire(self) -> bool {
        matches!(self, Call::Lock | Call::TryLock | Call::Campaign)
    }

    pub fn label(self) -> &'static str {
        match self {
            Call::Lock => "lock",
            Call::TryLock => "try_lock",
            Call::Extend => "extend",
            Call::Release => "release",
            Call::Abandon => "abandon",
            Call::Read => "read",
            Call::Write => "write",
            Call::FencedWrite => "fenced_write",
            Call::CheckServers => "check_servers",
            Call::Campaign => "campaign",
            Call::Proclaim => "proclaim",
            Call::Resign => "resign",
            Call::Observe => "observe",
            Call::Leader => "leader",
            Call::ForceRelease => "force_release",
        }
    }
}

/// The mode of a lease, and of the calls made under it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// Shared: any number of readers together (`read_lock`).
    Read,
    /// Exclusive: one holder, no reader (`lock`, `write_lock`).
    #[default]
    Write,
    /// One of a semaphore's permits (`semaphore(name, n).acquire()`): up
    /// to `n` holders together, judged by the semaphore checker.
    Permit,
}

impl Mode {
    /// The soak's mode of a lease's (a mode the library adds later counts
    /// as exclusive, the strictest check).
    pub fn of(mode: redlease::LockMode) -> Mode {
        match mode {
            redlease::LockMode::Shared => Mode::Read,
            redlease::LockMode::Permit => Mode::Permit,
            _ => Mode::Write,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Mode::Read => "read",
            Mode::Write => "write",
            Mode::Permit => "permit",
        }
    }
}

/// How a failure was classified.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    Taken,
    NoQuorum,
    ValidityExhausted,
    NotHeld,
    WaitTimeout,
    Lost,
    InvalidInput,
    /// Two nodes of the list are one server (`Error::SameServer`).
    SameServer,
    /// A `redlease::Error` variant this suite does not know (the enum is
    /// non-exhaustive).
    Unknown,
    /// The call panicked.
    Panic,
    /// The data Redis failed (not a lock failure; the write's fate is unknown).
    Data,
}

impl ErrorKind {
    pub fn of(e: &redlease::Error) -> ErrorKind {
        use redlease::Error as E;
        match e {
            E::Taken { .. } => ErrorKind::Taken,
            E::NoQuorum { .. } => ErrorKind::NoQuorum,
            E::ValidityExhausted { .. } => ErrorKind::ValidityExhausted,
            E::NotHeld { .. } => ErrorKind::NotHeld,
            E::WaitTimeout { .. } => ErrorKind::WaitTimeout,
            E::Lost { .. } => ErrorKind::Lost,
            E::InvalidInput { .. } => ErrorKind::InvalidInput,
            E::SameServer { .. } => ErrorKind::SameServer,
            _ => ErrorKind::Unknown,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            ErrorKind::Taken => "Taken",
            ErrorKind::NoQuorum => "NoQuorum",
            ErrorKind::ValidityExhausted => "ValidityExhausted",
            ErrorKind::NotHeld => "NotHeld",
            ErrorKind::WaitTimeout => "WaitTimeout",
            ErrorKind::Lost => "Lost",
            ErrorKind::InvalidInput => "InvalidInput",
            ErrorKind::SameServer => "SameServer",
            ErrorKind::Unknown => "Unknown",
            ErrorKind::Panic => "panic",
            ErrorKind::Data => "data-redis",
        }
    }
}

/// Votes a failed acquire did not count, read from its typed error (for
/// a `lock` that gave up waiting, its last attempt's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NotCounted {
    /// Nodes in their restart quarantine (`Quarantine::Restarted`).
    pub restarted: u32,
    /// Nodes quarantined after a clock jump (`Quarantine::ClockJumped`).
    pub clock_jumped: u32,
    /// The quarantined votes decided it: the nodes that said yes and the
    /// quarantined ones would have made a quorum (`NoQuorum` only).
    pub decisive: bool,
    /// `SameServer`: the node that did not count and the one that counts
    /// for the server, by index in the node list.
    pub same_server: Option<(usize, usize)>,
}

impl NotCounted {
    pub fn of(e: &redlease::Error) -> NotCounted {
        use redlease::{Error as E, NodeErrorKind as K, Quarantine as Q};
        let mut out = NotCounted::default();
        for failure in e.node_errors() {
            match failure.kind() {
                K::Quarantined {
                    cause: Q::Restarted { .. },
                    ..
                } => out.restarted += 1,
                K::Quarantined {
                    cause: Q::ClockJumped { .. },
                    ..
                } => out.clock_jumped += 1,
                _ => {}
            }
        }
        let mut last = e;
        while let E::WaitTimeout { last: inner, .. } = last {
            last = &**inner;
        }
        match last {
            E::NoQuorum {
                succeeded, quorum, ..
            } => {
                out.decisive =
                    out.quarantined() > 0 && *succeeded + out.quarantined() as usize >= *quorum;
            }
            E::SameServer { node, same_as, .. } => {
                out.same_server = Some((node.index(), same_as.index()));
            }
            _ => {}
        }
        out
    }

    /// Quarantined votes of either cause.
    pub fn quarantined(&self) -> u32 {
        self.restarted + self.clock_jumped
    }
}

/// The `lock_all` (or `try_lock_all`) attempt an operation belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Multi {
    /// The attempt, numbered across the run.
    pub attempt: u64,
    /// The names asked for, by lock index, sorted and each once (the
    /// library's canonical order for names of one digit).
    pub locks: Vec<usize>,
}

/// The result of an operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Acquired, extended or released.
    Ok,
    /// Read: the value seen. Write: the value written, acknowledged.
    Value(u64),
    /// Fenced write turned away: a token at least as high was accepted before.
    Rejected,
    /// Write not attempted: too little of the lease was left.
    Skipped,
    /// Failed, with the kind and the error's text.
    Failed(ErrorKind, String),
}

/// One operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    pub worker: usize,
    /// Index of the lock (resource) it concerns.
    pub lock: usize,
    /// The acquisition it belongs to; set on successful acquires and on
    /// every operation under that lease.
    pub lease: Option<LeaseId>,
    pub call: Call,
    /// The lease's mode (acquires: the mode asked for); `Write` for
    /// calls that concern no lease.
    pub mode: Mode,
    /// Just before the call started.
    pub invoke: Duration,
    /// Just after it returned.
    pub complete: Duration,
    /// The longest the call may take by its configuration (library calls),
    /// before the checker's slack.
    pub bound: Option<Duration>,
    pub outcome: Outcome,
    /// The lease's `valid_until` after the call (acquire, extend), or when
    /// the write's validity check ran (writes).
    pub valid_until: Option<Duration>,
    /// The lease's fencing token.
    pub token: Option<u64>,
    /// Votes a failed acquire (or `check_servers`) did not count.
    pub not_counted: NotCounted,
    /// A multi-lock's: the attempt, and every name of it. A granted one
    /// is recorded once per name it holds (`lock` that name, `lease` the
    /// name's own number), a failed acquire once, on its first name.
    pub multi: Option<Multi>,
}

impl Op {
    /// The call's name, with the mode of an acquire: `read_lock`,
    /// `try_read_lock` for readers, `acquire`, `try_acquire` for permits,
    /// `lock_all`, `try_lock_all` for multi-locks.
    pub fn label(&self) -> &'static str {
        match (self.call, self.mode) {
            (Call::Lock, _) if self.multi.is_some() => "lock_all",
            (Call::TryLock, _) if self.multi.is_some() => "try_lock_all",
            (Call::Lock, Mode::Read) => "read_lock",
            (Call::TryLock, Mode::Read) => "try_read_lock",
            (Call::Lock, Mode::Permit) => "acquire",
            (Call::TryLock, Mode::Permit) => "try_acquire",
            (call, _) => call.label(),
        }
    }

    /// Whether this operation stands for a call of its own: every
    /// single-lock operation, and a multi-lock's on its first name (the
    /// others repeat it for their names). Calls are counted, bounded and
    /// classified by these only.
    pub fn is_call(&self) -> bool {
        self.multi
            .as_ref()
            .is_none_or(|m| m.locks.first() == Some(&self.lock))
    }

    pub fn duration(&self) -> Duration {
        self.complete.saturating_sub(self.invoke)
    }

    pub fn error(&self) -> Option<ErrorKind> {
        match &self.outcome {
            Outcome::Failed(kind, _) => Some(*kind),
            _ => None,
        }
    }
}

/// The recorded run.
pub type History = Vec<Op>;

/// Collects operations from every worker; cheap to clone.
#[derive(Clone)]
pub struct Recorder {
    epoch: Instant,
    ops: Arc<Mutex<Vec<Op>>>,
    leases: Arc<AtomicU64>,
    attempts: Arc<AtomicU64>,
}

impl Recorder {
    pub fn new(epoch: Instant) -> Recorder {
        Recorder {
            epoch,
            ops: Arc::new(Mutex::new(Vec::new())),
            leases: Arc::new(AtomicU64::new(0)),
            attempts: Arc::new(AtomicU64::new(0)),
        }
    }

    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    /// `t` as an offset from the epoch (the epoch precedes every call).
    pub fn at(&self, t: Instant) -> Duration {
        t.saturating_duration_since(self.epoch)
    }

    pub fn now(&self) -> Duration {
        self.at(Instant::now())
    }

    pub fn next_lease(&self) -> LeaseId {
        self.leases.fetch_add(1, Ordering::Relaxed)
    }

    /// The number of the next multi-lock attempt ([`Multi::attempt`]).
    pub fn next_attempt(&self) -> u64 {
        self.attempts.fetch_add(1, Ordering::Relaxed)
    }

    pub fn push(&self, op: Op) {
        self.ops.lock().expect("recorder lock").push(op);
    }

    /// Everything recorded so far, in completion order.
    pub fn history(&self) -> History {
        let mut ops = self.ops.lock().expect("recorder lock").clone();
        ops.sort_by_key(|op| op.complete);
        ops
    }
}
