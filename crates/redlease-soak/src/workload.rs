//! The workload: clients (each its own Locker, like separate processes)
//! that take locks, run a critical section on the data Redis, and release,
//! recording every call.
//!
//! The critical section: GET the lock's counter, sleep `U(0, TTL/10)`,
//! sometimes extend, then SET counter + 1 and a fenced write with the
//! lease's token, each only if more than the write margin is left before
//! `valid_until` (the margin covers the write's own trip to Redis). A few
//! leases are dropped without release (released in the background by the
//! library).
//!
//! The read-write workload ([`Settings::read_write`]) is the same loop
//! with read locks most of the time: a reader GETs the counter (its lease's
//! token is the write generation it saw), sleeps, sometimes extends, and
//! writes nothing; a writer (`write_lock`, waiting longer than readers)
//! runs the critical section above. Some leases of either mode are kept
//! alive instead of extended, and held for up to 1.5 x TTL across their
//! renewals.
//!
//! The semaphore workload ([`Settings::semaphore`]) takes permits
//! instead, of semaphores of [`Settings::permits`] permits (fewer than the
//! clients that want them): `acquire` or `try_acquire`, some kept alive;
//! a holder reads the counter, sleeps, sometimes extends, and writes
//! nothing (several hold at once).
//!
//! The multi-lock workload ([`Settings::multi`], in [`multi`]) takes 2 or
//! 3 names at once with `lock_all` half the time, one name with `lock`
//! otherwise, and runs the critical section above on every name it holds.
//!
//! Bounds a call must return within (check 5 adds a slack), from the
//! library's docs, with `nt` the client's node timeout:
//! - `try_lock`: `3 x nt` (acquire round, fencing write-back, cleanup);
//! - `lock`: `wait + 4 x nt` (the last attempt may start at the deadline,
//!   after one subscription wait of `nt`); in the read-write workload,
//!   `wait + 5 x nt` for writers: one that waited leaves the name's
//!   queue on every node before it returns the lease (and
//!   `read_lock` is given the same bound); a permit's `try_acquire` and
//!   `acquire`, and `try_lock_all` and `lock_all`, as `try_lock` and
//!   `lock`;
//! - `extend`, `release`: `2 x nt` (waiting out the acquire's stragglers,
//!   then one round);
//! - `check_servers`: the connect timeout plus `nt` (each node at once).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redlease::{Durability, Lease, Locker, RetryPolicy};

use crate::history::{Call, ErrorKind, LeaseId, Mode, Multi, NotCounted, Op, Outcome, Recorder};
use crate::panics;
use crate::store::Store;

pub mod elections;
pub mod engine;
pub mod multi;

/// Upper bound on critical sections per worker, whatever the run time.
const MAX_CYCLES: usize = 1_000_000;

/// The knobs of a run's clients.
#[derive(Clone, Debug)]
pub struct Settings {
    pub ttl: Duration,
    pub node_timeout: Duration,
    /// Node timeout of the patient clients (a large share of the TTL, so
    /// slow replies are accepted and validity runs short).
    pub patient_node_timeout: Duration,
    pub connect_timeout: Duration,
    /// How long `lock()` waits for a busy lock.
    pub wait: Duration,
    pub retry_delay: (Duration, Duration),
    pub locks: usize,
    pub workers: usize,
    /// Workers whose links go through fault proxies; the rest connect directly.
    pub proxied: Vec<usize>,
    /// Workers with the patient node timeout.
    pub patient: Vec<usize>,
    /// A write is skipped unless more than this is left of the lease.
    pub write_margin: Duration,
    /// Longest sleep inside the critical section.
    pub max_sleep: Duration,
    /// Shortest sleep inside the critical section (of a lease not kept
    /// alive).
    pub min_sleep: Duration,
    /// Share of acquisitions made with `try_lock`.
    pub try_share: f64,
    /// Share of critical sections that extend once.
    pub extend_share: f64,
    /// Share of leases dropped without `release`.
    pub abandon_share: f64,
    /// How many replicas must acknowledge each write of a lease (off for
    /// independent nodes, which have no replicas).
    pub durability: Durability,
    /// `Advanced::restart_quarantine`; `None`: the library's default
    /// (the TTL plus its drift allowance).
    pub restart_quarantine: Option<Duration>,
    /// `Advanced::clock_jump_guard` (on by default).
    pub clock_jump_guard: bool,
    /// Workers whose Lockers draw no fencing tokens (the library's
    /// default, plain-command acquire); the others have fencing on. Their
    /// leases make no fenced writes and the checker's token order skips
    /// them; everything else is checked alike.
    pub unfenced: Vec<usize>,
    /// Share of acquisitions that take a read lock (0: the exclusive
    /// workload; see [`Settings::read_write`]).
    pub read_share: f64,
    /// Share of acquisitions kept alive (`keep_alive()`): held up to
    /// `keep_alive_hold`, across renewals, never extended by hand. Not by
    /// the patient clients: the library refuses to keep a lease alive
    /// whose renewal may take (a node timeout) longer than the TTL leaves.
    pub keep_alive_share: f64,
    /// Longest critical section of a kept-alive lease.
    pub keep_alive_hold: Duration,
    /// How long a write lock waits (`None`: `wait`, as every lock).
    pub writer_wait: Option<Duration>,
    /// The Lockers' key prefix (`None`: the library's default).
    pub key_prefix: Option<String>,
    /// The semaphore workload: every acquisition is a permit of a
    /// semaphore of this many permits, one semaphore per lock name
    /// (`None`: locks).
    pub permits: Option<u32>,
    /// Permits counted at a plain majority of the nodes
    /// (`Semaphore::unsafe_majority`, unsafe beyond one permit): the
    /// negative control's clients only.
    pub unsafe_majority: bool,
    /// Share of acquisitions that take several names at once with
    /// `lock_all` (0: none; see [`Settings::multi`]).
    pub multi_share: f64,
    /// How long a `lock_all` waits (`None`: `wait`, as every lock).
    pub multi_wait: Option<Duration>,
    /// The engine workload: every mode on shared names (`None`: another
    /// workload; see [`Settings::engine`]).
    pub engine: Option<engine::Mix>,
    /// The elections workload: campaigners and observers (`None`:
    /// another workload; see [`Settings::elections`]).
    pub elections: Option<elections::Mix>,
}

impl Settings {
    /// TTL 500 ms, node timeout 40 ms (8%), 8 clients (6 behind proxies)
    /// on 6 locks; patient clients (0 and 1, node timeout 90% of the TTL,
    /// the most the library accepts with the drift allowance) when `patient`.
    pub fn standard(patient: bool) -> Settings {
        let ttl = Duration::from_millis(500);
        Settings {
            ttl,
            node_timeout: Duration::from_millis(40),
            patient_node_timeout: ttl.mul_f64(0.9),
            connect_timeout: Duration::from_millis(200),
            wait: ttl,
            retry_delay: (Duration::from_millis(2), Duration::from_millis(20)),
            locks: 6,
            workers: 8,
            proxied: (0..6).collect(),
            patient: if patient { vec![0, 1] } else { Vec::new() },
            write_margin: ttl / 10,
            max_sleep: ttl / 10,
            min_sleep: Duration::ZERO,
            try_share: 0.15,
            extend_share: 0.1,
            abandon_share: 0.02,
            durability: Durability::off(),
            restart_quarantine: None,
            clock_jump_guard: true,
            unfenced: Vec::new(),
            read_share: 0.0,
            keep_alive_share: 0.0,
            keep_alive_hold: ttl * 3 / 2,
            writer_wait: None,
            key_prefix: None,
            permits: None,
            unsafe_majority: false,
            multi_share: 0.0,
            multi_wait: None,
            engine: None,
            elections: None,
        }
    }

    /// The read-write workload on [`standard`](Self::standard)'s clients:
    /// 3 locks, 85% of the acquisitions read locks; writers wait up to 6 x
    /// TTL (3 s), so a writer kept out beyond the read-write checker's
    /// starvation bound (4 x TTL) would be seen; 20% of the leases kept
    /// alive. Every client has fencing on: a writer's token orders the
    /// fenced store, a reader's is the generation it saw.
    pub fn read_write(patient: bool) -> Settings {
        let standard = Settings::standard(patient);
        Settings {
            locks: 3,
            read_share: 0.85,
            keep_alive_share: 0.2,
            writer_wait: Some(standard.ttl * 6),
            ..standard
        }
    }

    /// The semaphore workload on [`standard`](Self::standard)'s clients:
    /// 2 names, each a semaphore of 3 permits, for 8 clients (so permits
    /// run out, and waiters queue); 30% of the acquisitions `try_acquire`,
    /// 20% kept alive (held up to 1.5 x TTL); critical sections up to
    /// TTL/5. Every client has fencing on: tokens go up per name.
    pub fn semaphore(patient: bool) -> Settings {
        let standard = Settings::standard(patient);
        Settings {
            locks: 2,
            permits: Some(3),
            try_share: 0.3,
            keep_alive_share: 0.2,
            max_sleep: standard.ttl / 5,
            ..standard
        }
    }

    /// The multi-lock workload on [`standard`](Self::standard)'s clients:
    /// 4 names; half the acquisitions take 2 or 3 of them at once
    /// (`lock_all`, or `try_lock_all` as often as `try_lock`), the other
    /// half one name (`lock`, `try_lock`); a `lock_all` waits up to 8 x
    /// TTL (4 s), so one kept out beyond the multi checker's starvation
    /// bound would be seen; 10% of the leases of either kind kept alive.
    /// Every client has fencing on: each name's token orders its fenced
    /// store.
    pub fn multi(patient: bool) -> Settings {
        let standard = Settings::standard(patient);
        Settings {
            locks: 4,
            multi_share: 0.5,
            multi_wait: Some(standard.ttl * 8),
            keep_alive_share: 0.1,
            ..standard
        }
    }

    /// The engine workload on [`standard`](Self::standard)'s clients and
    /// two more that reach every node directly (see [`engine`]): 4 lock
    /// names, taken exclusively, read and in sets, and 1 semaphore name
    /// of [`engine::PERMITS`] permits, each kind as `modes` allows (the
    /// two more take permits only, when there are any); every call that
    /// waits waits up to 6 x TTL
    /// (3 s), so a waiter kept out beyond the engine checker's starvation
    /// bound (4 x TTL) would be seen; critical sections of TTL/5 to TTL/2,
    /// so that a waiter passed over waits longer than the checker's grant
    /// slack for the next turn; 10% of the leases kept alive. Every
    /// client has fencing on.
    pub fn engine(patient: bool, modes: engine::Modes) -> Settings {
        let standard = Settings::standard(patient);
        Settings {
            locks: 4,
            workers: standard.workers + 2,
            wait: standard.ttl * 6,
            min_sleep: standard.ttl / 5,
            max_sleep: standard.ttl / 2,
            keep_alive_share: 0.1,
            engine: Some(engine::Mix {
                modes,
                permit_workers_from: standard.workers,
                semaphores: 1,
                permits: engine::PERMITS,
            }),
            ..standard
        }
    }

    /// The elections workload on [`standard`](Self::standard)'s TTL and
    /// node timeout (no patient client: a lead is kept alive, which the
    /// library refuses with a node timeout that long): 2 election names,
    /// campaigners 0-4 (0-3 behind fault proxies), observers 5 (behind
    /// proxies) and 6 (direct); a campaign waits up to 6 x TTL (3 s, less
    /// near the end of the run); a lead lasts TTL/2 to 2 x TTL, across
    /// renewals, proclaims a new value once or twice in 40% of the leads,
    /// and is dropped instead of resigned in 15% (see [`elections`]).
    pub fn elections() -> Settings {
        let standard = Settings::standard(false);
        let ttl = standard.ttl;
        Settings {
            locks: 2,
            workers: 7,
            proxied: vec![0, 1, 2, 3, 5],
            wait: ttl * 6,
            elections: Some(elections::Mix {
                names: 2,
                campaigners: (0..5).collect(),
                observers: vec![5, 6],
                min_lead: ttl / 2,
                max_lead: ttl * 2,
                proclaim_share: 0.4,
                drop_share: 0.15,
                heeds_lost: true,
            }),
            ..standard
        }
    }

    /// Whether the clients take read locks too (read holds in sets
    /// among them).
    pub fn takes_read_locks(&self) -> bool {
        self.read_share > 0.0
            || self.engine.as_ref().is_some_and(|mix| {
                mix.modes.contains(engine::Kind::Read) || mix.modes.contains(engine::Kind::Set)
            })
    }

    /// The longest any acquire of these clients may wait.
    pub fn longest_wait(&self) -> Duration {
        [self.writer_wait, self.multi_wait]
            .into_iter()
            .flatten()
            .fold(self.wait, Duration::max)
    }

    /// Node timeouts a waiting acquire may spend beyond its wait (see the
    /// module docs).
    pub fn lock_rounds(&self) -> u32 {
        if self.takes_read_locks() {
            5
        } else {
            4
        }
    }

    /// The longest restart quarantine any client of this run uses (the
    /// default is the TTL plus the drift allowance, `TTL/100 + 2 ms`; this
    /// errs long).
    pub fn quarantine(&self) -> Duration {
        self.restart_quarantine
            .unwrap_or(self.ttl + self.ttl / 50 + Duration::from_millis(5))
    }

    /// How long a critical section sleeps: up to `keep_alive_hold` if
    /// kept alive, else from `min_sleep` to `max_sleep`, at `at` (0 to 1)
    /// of the way.
    pub fn hold(&self, kept_alive: bool, at: f64) -> Duration {
        if kept_alive {
            self.keep_alive_hold.mul_f64(at)
        } else {
            self.min_sleep + self.max_sleep.saturating_sub(self.min_sleep).mul_f64(at)
        }
    }

    pub fn node_timeout_of(&self, worker: usize) -> Duration {
        if self.patient.contains(&worker) {
            self.patient_node_timeout
        } else {
            self.node_timeout
        }
    }
}

pub fn lock_name(lock: usize) -> String {
    format!("soak-{lock}")
}

/// A lease and what the history knows it by.
pub struct Held {
    pub lease: Lease,
    pub id: LeaseId,
    pub lock: usize,
    /// Taken with `keep_alive()`.
    pub kept_alive: bool,
}

impl Held {
    /// The lease's fencing token, if its Locker draws them (see
    /// [`Settings::unfenced`]).
    pub fn token(&self) -> Option<u64> {
        self.lease.fencing_token()
    }

    /// The token of a lease whose Locker has fencing on, as every
    /// control's clients do.
    pub fn fenced_token(&self) -> u64 {
        self.token()
            .expect("the controls' Lockers draw fencing tokens")
    }

    pub fn mode(&self) -> Mode {
        Mode::of(self.lease.mode())
    }

    /// The lease's one name, as the calls under it are recorded.
    pub fn part(&self) -> Part<'_> {
        Part {
            lease: &self.lease,
            id: self.id,
            lock: self.lock,
            token: self.token(),
            multi: None,
        }
    }
}

/// One name of a lease, as the calls made under it are recorded: a
/// lock's only name, or one of a multi-lock's (see [`multi`]).
pub struct Part<'a> {
    pub lease: &'a Lease,
    /// The name's lease number in the history.
    pub id: LeaseId,
    pub lock: usize,
    /// The name's fencing token.
    pub token: Option<u64>,
    /// The multi-lock it is one name of.
    pub multi: Option<&'a Multi>,
}

/// What to acquire, and how.
#[derive(Clone, Copy, Debug, Default)]
pub struct Request {
    pub mode: Mode,
    /// One attempt (`try_lock`, `try_read_lock`) instead of waiting.
    pub once: bool,
    /// The lease's TTL (`None`: the client's).
    pub ttl: Option<Duration>,
    /// How long a waiting acquire waits (`None`: the client's wait).
    pub wait: Option<Duration>,
    /// `keep_alive()`: renewed in the background until given up.
    pub keep_alive: bool,
}

impl Request {
    /// A waiting acquire as this request asks: its TTL, wait and
    /// keep-alive, where given.
    pub fn shape<'a>(&self, mut req: redlease::Acquire<'a>) -> redlease::Acquire<'a> {
        if let Some(ttl) = self.ttl {
            req = req.ttl(ttl);
        }
        if let Some(wait) = self.wait {
            req = req.wait(wait);
        }
        if self.keep_alive {
            req = req.keep_alive();
        }
        req
    }

    /// One attempt as this request asks: its TTL and keep-alive, where
    /// given.
    pub fn shape_try<'a>(&self, mut req: redlease::TryAcquire<'a>) -> redlease::TryAcquire<'a> {
        if let Some(ttl) = self.ttl {
            req = req.ttl(ttl);
        }
        if self.keep_alive {
            req = req.keep_alive();
        }
        req
    }
}

/// One client "process": its own Locker (own connections) and its own
/// connection to the data Redis. Every call is timed and recorded.
pub struct Client {
    pub worker: usize,
    pub locker: Locker,
    store: Store,
    rec: Recorder,
    ttl: Duration,
    node_timeout: Duration,
    connect_timeout: Duration,
    wait: Duration,
    write_margin: Duration,
    /// Node timeouts a waiting acquire may spend beyond its wait.
    lock_rounds: u32,
    /// The clients take read locks too: writers call `write_lock`.
    read_write: bool,
    /// A permit is one of this many ([`Settings::permits`]).
    permits: u32,
    /// [`Settings::unsafe_majority`].
    unsafe_majority: bool,
}

/// How a recorded call went, before it becomes an [`Outcome`].
enum Ran<T> {
    Ok(T),
    Err(redlease::Error),
    Panicked(String),
}

async fn guarded<T>(call: impl Future<Output = Result<T, redlease::Error>>) -> Ran<T> {
    match AssertUnwindSafe(call).catch_unwind().await {
        Ok(Ok(v)) => Ran::Ok(v),
        Ok(Err(e)) => Ran::Err(e),
        Err(payload) => Ran::Panicked(panics::message(payload.as_ref())),
    }
}

impl Client {
    /// Builds the client's Locker over `urls` (must run inside the runtime).
    #[allow(clippy::too_many_arguments)]
    pub async fn connect(
        worker: usize,
        urls: Vec<String>,
        data_url: &str,
        ttl: Duration,
        node_timeout: Duration,
        wait: Duration,
        settings: &Settings,
        rec: Recorder,
    ) -> Result<Client, String> {
        let mut builder = Locker::builder(urls);
        if let Some(prefix) = &settings.key_prefix {
            builder = builder.key_prefix(prefix.clone());
        }
        if let Some(quarantine) = settings.restart_quarantine {
            builder = builder.advanced(|a| a.restart_quarantine(quarantine));
        }
        // Fencing on, unless this worker runs the default plain acquire:
        // a lease's token goes into the history (the checker's token
        // order) and into the fenced writes.
        let locker = builder
            .fencing(!settings.unfenced.contains(&worker))
            .advanced(|a| a.clock_jump_guard(settings.clock_jump_guard))
            .ttl(ttl)
            .node_timeout(node_timeout)
            .connect_timeout(settings.connect_timeout)
            .retry(RetryPolicy::within(wait).delay(settings.retry_delay.0, settings.retry_delay.1))
            .durability(settings.durability)
            .build()
            .map_err(|e| format!("worker {worker}: {e}"))?;
        let store = Store::connect(data_url)
            .await
            .map_err(|e| format!("worker {worker}: data redis: {e}"))?;
        Ok(Client {
            worker,
            locker,
            store,
            rec,
            ttl,
            node_timeout,
            connect_timeout: settings.connect_timeout,
            wait,
            write_margin: settings.write_margin,
            lock_rounds: settings.lock_rounds(),
            read_write: settings.takes_read_locks(),
            permits: settings.permits.unwrap_or(1),
            unsafe_majority: settings.unsafe_majority,
        })
    }

    /// The configured bound of a library call (see the module docs).
    pub fn bound(&self, call: Call) -> Option<Duration> {
        let nt = self.node_timeout;
        match call {
            Call::Lock => Some(self.lock_bound(self.wait)),
            Call::TryLock => Some(3 * nt),
            Call::Extend | Call::Release => Some(2 * nt),
            Call::CheckServers => Some(self.connect_timeout + nt),
            // One round each (a resignation is a release; the others' node
            // timeout is the Locker's default TTL's, this client's).
            Call::Proclaim | Call::Resign | Call::Leader | Call::ForceRelease => Some(2 * nt),
            // As `lock` waiting up to the client's wait, then the value
            // published (one round) or, that failing, the lead given
            // back (a release).
            Call::Campaign => Some(self.lock_bound(self.wait) + 3 * nt),
            _ => None,
        }
    }

    /// The bound of a `lock` or `read_lock` that waits up to `wait`.
    fn lock_bound(&self, wait: Duration) -> Duration {
        wait + self.node_timeout * self.lock_rounds
    }

    fn op(&self, lock: usize, lease: Option<LeaseId>, call: Call, invoke: Instant) -> Op {
        Op {
            worker: self.worker,
            lock,
            lease,
            call,
            mode: Mode::Write,
            invoke: self.rec.at(invoke),
            complete: self.rec.now(),
            bound: self.bound(call),
            outcome: Outcome::Ok,
            valid_until: None,
            token: None,
            not_counted: NotCounted::default(),
            multi: None,
        }
    }

    fn failed<T>(ran: Ran<T>) -> Outcome {
        match ran {
            Ran::Err(e) => Outcome::Failed(ErrorKind::of(&e), with_causes(&e)),
            Ran::Panicked(msg) => Outcome::Failed(ErrorKind::Panic, msg),
            Ran::Ok(_) => Outcome::Ok,
        }
    }

    /// `lock()` (or `try_lock()` when `once`) on lock `lock`.
    pub async fn acquire(&mut self, lock: usize, once: bool) -> Option<Held> {
        self.take(
            lock,
            Request {
                once,
                ..Request::default()
            },
        )
        .await
    }

    /// Like [`acquire`](Self::acquire) with a per-call TTL.
    pub async fn acquire_with(
        &mut self,
        lock: usize,
        once: bool,
        ttl: Option<Duration>,
    ) -> Option<Held> {
        self.take(
            lock,
            Request {
                once,
                ttl,
                ..Request::default()
            },
        )
        .await
    }

    /// Acquires lock `lock` as `request` says: `lock` (`write_lock` where
    /// the clients take read locks too), `read_lock` or a permit of the
    /// name's semaphore (`acquire`), or their `try_` forms when `once`.
    pub async fn take(&mut self, lock: usize, request: Request) -> Option<Held> {
        let name = lock_name(lock);
        let call = if request.once {
            Call::TryLock
        } else {
            Call::Lock
        };
        let locker = &self.locker;
        let read_write = self.read_write;
        let (permits, unsafe_majority) = (self.permits, self.unsafe_majority);
        let semaphore = move |name| {
            let semaphore = locker.semaphore(name, permits);
            if unsafe_majority {
                semaphore.unsafe_majority()
            } else {
                semaphore
            }
        };
        let invoke = Instant::now();
        let ran = guarded(async move {
            let Request { mode, once, .. } = request;
            if once {
                let req = match mode {
                    Mode::Read => locker.try_read_lock(name),
                    Mode::Write => locker.try_lock(name),
                    Mode::Permit => semaphore(name).try_acquire(),
                };
                request.shape_try(req).await
            } else {
                let req = match mode {
                    Mode::Read => locker.read_lock(name),
                    Mode::Write if read_write => locker.write_lock(name),
                    Mode::Write => locker.lock(name),
                    Mode::Permit => semaphore(name).acquire(),
                };
                request.shape(req).await
            }
        })
        .await;
        let mut op = self.op(lock, None, call, invoke);
        op.mode = request.mode;
        if call == Call::Lock {
            op.bound = Some(self.lock_bound(request.wait.unwrap_or(self.wait)));
        }
        match ran {
            Ran::Ok(lease) => {
                let id = self.rec.next_lease();
                op.lease = Some(id);
                op.valid_until = Some(self.rec.at(lease.valid_until()));
                op.token = lease.fencing_token();
                self.rec.push(op);
                Some(Held {
                    lease,
                    id,
                    lock,
                    kept_alive: request.keep_alive,
                })
            }
            other => {
                if let Ran::Err(e) = &other {
                    op.not_counted = NotCounted::of(e);
                }
                op.outcome = Self::failed(other);
                self.rec.push(op);
                None
            }
        }
    }

    /// `locker.admin().check_servers()`: `Ok` with the unreachable nodes' count,
    /// or the error (recorded with the pair it names).
    pub async fn check_servers(&mut self) -> Result<usize, ErrorKind> {
        let invoke = Instant::now();
        let ran = guarded(self.locker.admin().check_servers()).await;
        let mut op = self.op(0, None, Call::CheckServers, invoke);
        let result = match &ran {
            Ran::Ok(unreachable) => Ok(unreachable.len()),
            Ran::Err(e) => {
                op.not_counted = NotCounted::of(e);
                Err(ErrorKind::of(e))
            }
            Ran::Panicked(_) => Err(ErrorKind::Panic),
        };
        op.outcome = Self::failed(ran);
        self.rec.push(op);
        result
    }

    fn lease_op(&self, part: &Part<'_>, call: Call, invoke: Instant) -> Op {
        let mut op = self.op(part.lock, Some(part.id), call, invoke);
        op.mode = Mode::of(part.lease.mode());
        op.valid_until = Some(self.rec.at(part.lease.valid_until()));
        op.token = part.token;
        op.multi = part.multi.cloned();
        op
    }

    /// Whether more than the write margin is left of the lease.
    fn may_write(&self, part: &Part<'_>) -> bool {
        Instant::now() + self.write_margin < part.lease.valid_until()
    }

    /// GETs the lock's counter.
    pub async fn read(&mut self, held: &Held) -> Option<u64> {
        self.read_part(&held.part()).await
    }

    /// GETs the counter of the part's lock.
    pub async fn read_part(&mut self, part: &Part<'_>) -> Option<u64> {
        let invoke = Instant::now();
        let result = self.store.read(part.lock).await;
        let mut op = self.lease_op(part, Call::Read, invoke);
        let value = match result {
            Ok(v) => {
                op.outcome = Outcome::Value(v);
                Some(v)
            }
            Err(e) => {
                op.outcome = Outcome::Failed(ErrorKind::Data, e);
                None
            }
        };
        self.rec.push(op);
        value
    }

    /// SETs the counter to `value`: only with more than the write margin
    /// left, unless `unchecked` (the sleepy-holder control). True if acknowledged.
    pub async fn write(&mut self, held: &Held, value: u64, unchecked: bool) -> bool {
        self.write_part(&held.part(), value, unchecked).await
    }

    /// [`write`](Self::write) of the part's lock's counter.
    pub async fn write_part(&mut self, part: &Part<'_>, value: u64, unchecked: bool) -> bool {
        let invoke = Instant::now();
        if !unchecked && !self.may_write(part) {
            let mut op = self.lease_op(part, Call::Write, invoke);
            op.outcome = Outcome::Skipped;
            self.rec.push(op);
            return false;
        }
        let result = self.store.write(part.lock, value).await;
        let mut op = self.lease_op(part, Call::Write, invoke);
        op.outcome = match result {
            Ok(()) => Outcome::Value(value),
            Err(e) => Outcome::Failed(ErrorKind::Data, e),
        };
        let acked = matches!(op.outcome, Outcome::Value(_));
        self.rec.push(op);
        acked
    }

    /// Writes to the fenced store with the lease's token, under the same
    /// margin rule. `Some(accepted)` when it was sent and answered.
    pub async fn fenced_write(&mut self, held: &Held, unchecked: bool) -> Option<bool> {
        self.fenced_write_part(&held.part(), unchecked).await
    }

    /// [`fenced_write`](Self::fenced_write) to the part's lock's store,
    /// with the part's token.
    pub async fn fenced_write_part(&mut self, part: &Part<'_>, unchecked: bool) -> Option<bool> {
        // A lease without a token has nothing to write with.
        let token = part.token?;
        let invoke = Instant::now();
        if !unchecked && !self.may_write(part) {
            let mut op = self.lease_op(part, Call::FencedWrite, invoke);
            op.outcome = Outcome::Skipped;
            self.rec.push(op);
            return None;
        }
        let value = format!("worker {} lease {}", self.worker, part.id);
        let result = self.store.fenced_write(part.lock, token, &value).await;
        let mut op = self.lease_op(part, Call::FencedWrite, invoke);
        let accepted = match result {
            Ok(true) => Some(true),
            Ok(false) => {
                op.outcome = Outcome::Rejected;
                Some(false)
            }
            Err(e) => {
                op.outcome = Outcome::Failed(ErrorKind::Data, e);
                None
            }
        };
        self.rec.push(op);
        accepted
    }

    /// Extends the lease by the client's TTL.
    pub async fn extend(&mut self, held: &mut Held) -> bool {
        let ttl = self.ttl;
        let invoke = Instant::now();
        let ran = guarded(held.lease.extend(ttl)).await;
        let mut op = self.lease_op(&held.part(), Call::Extend, invoke);
        let ok = matches!(ran, Ran::Ok(()));
        op.outcome = Self::failed(ran);
        self.rec.push(op);
        ok
    }

    /// Releases the lease; the error kind if it failed.
    pub async fn release(&mut self, held: Held) -> Result<(), ErrorKind> {
        let mode = held.mode();
        let Held {
            lease, id, lock, ..
        } = held;
        let (valid_until, token) = (lease.valid_until(), lease.fencing_token());
        let invoke = Instant::now();
        let ran = guarded(lease.release()).await;
        let mut op = self.op(lock, Some(id), Call::Release, invoke);
        op.mode = mode;
        op.valid_until = Some(self.rec.at(valid_until));
        op.token = token;
        op.outcome = Self::failed(ran);
        let result = match &op.outcome {
            Outcome::Failed(kind, _) => Err(*kind),
            _ => Ok(()),
        };
        self.rec.push(op);
        result
    }
}

impl Client {
    /// The negative control's broken release, done on the soak's side (the
    /// library has no switch for it): a plain `DEL` of the lock's key on
    /// every node in `urls`, which removes whoever holds it now. Recorded
    /// as a release; the lease is dropped afterwards, and the library's own
    /// release in the background finds another token and does nothing.
    pub async fn release_with_plain_del(
        &mut self,
        held: Held,
        urls: &[String],
    ) -> Result<(), ErrorKind> {
        let key = self.locker.admin().key(held.lease.resource());
        let mut op = self.lease_op(&held.part(), Call::Release, Instant::now());
        let mut result = Ok(());
        for url in urls {
            let deleted = async {
                let client = redis::Client::open(url.as_str())?;
                let mut conn = client.get_multiplexed_async_connection().await?;
                redis::cmd("DEL")
                    .arg(&key)
                    .query_async::<i64>(&mut conn)
                    .await
            };
            if let Err(e) = tokio::time::timeout(Duration::from_secs(2), deleted)
                .await
                .unwrap_or_else(|_| {
                    Err(redis::RedisError::from((
                        redis::ErrorKind::Io,
                        "DEL timed out",
                    )))
                })
            {
                op.outcome = Outcome::Failed(ErrorKind::Data, e.to_string());
                result = Err(ErrorKind::Data);
            }
        }
        op.complete = self.rec.now();
        self.rec.push(op);
        drop(held);
        result
    }

    /// Drops the lease without `release`: the library releases it in the
    /// background. Recorded first, as the moment the lease was given up.
    pub fn abandon(&mut self, held: Held) {
        let mut op = self.lease_op(&held.part(), Call::Abandon, Instant::now());
        op.complete = op.invoke;
        self.rec.push(op);
        drop(held);
    }
}

/// An error and its causes, one after the other (a wait timeout keeps the
/// last attempt's error as its source, not in its own text).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The seed of one worker's choices, derived from the run's seed.
pub fn worker_seed(seed: u64, worker: usize) -> u64 {
    seed ^ (worker as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Runs critical sections until `deadline` (the one in progress finishes).
pub async fn work(mut client: Client, settings: Arc<Settings>, seed: u64, deadline: Instant) {
    let mut rng = StdRng::seed_from_u64(worker_seed(seed, client.worker));
    let keep_alive_share = if settings.patient.contains(&client.worker) {
        0.0
    } else {
        settings.keep_alive_share
    };
    for _ in 0..MAX_CYCLES {
        if Instant::now() >= deadline {
            break;
        }
        let lock = rng.random_range(0..settings.locks);
        let request = draw(&settings, keep_alive_share, &mut rng);
        let Some(held) = client.take(lock, request).await else {
            // Do not hammer a lock a try_lock found busy.
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..=5))).await;
            continue;
        };
        critical_section(&mut client, held, &settings, &mut rng).await;
    }
}

/// How the next lock is taken. The exclusive workload draws exactly what
/// it drew before read locks existed, so a seed replays its choices.
fn draw(settings: &Settings, keep_alive_share: f64, rng: &mut StdRng) -> Request {
    let once = rng.random_bool(settings.try_share);
    let chance = |rng: &mut StdRng, share: f64| share > 0.0 && rng.random_bool(share);
    let mode = if settings.permits.is_some() {
        Mode::Permit
    } else if chance(rng, settings.read_share) {
        Mode::Read
    } else {
        Mode::Write
    };
    Request {
        mode,
        once,
        ttl: None,
        wait: settings.writer_wait.filter(|_| mode == Mode::Write),
        keep_alive: chance(rng, keep_alive_share),
    }
}

/// Reads the counter, sleeps (longer if kept alive), extends sometimes
/// (unless kept alive); a writer then writes the counter + 1 and the fenced
/// store; gives the lease up, now and then without release.
async fn critical_section(
    client: &mut Client,
    mut held: Held,
    settings: &Settings,
    rng: &mut StdRng,
) {
    let Some(seen) = client.read(&held).await else {
        let _ = client.release(held).await;
        return;
    };
    tokio::time::sleep(settings.hold(held.kept_alive, rng.random::<f64>())).await;
    if rng.random_bool(settings.extend_share) && !held.kept_alive {
        client.extend(&mut held).await;
    }
    if held.mode() == Mode::Write {
        client.write(&held, seen + 1, false).await;
        client.fenced_write(&held, false).await;
    }
    if rng.random_bool(settings.abandon_share) {
        client.abandon(held);
        return;
    }
    let _ = client.release(held).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exclusive_workload_draws_what_it_drew_before_read_locks() {
        // Same seed, same choices: one draw of `once`, nothing else.
        let settings = Settings::standard(false);
        let (mut a, mut b) = (StdRng::seed_from_u64(7), StdRng::seed_from_u64(7));
        for _ in 0..100 {
            let r = draw(&settings, settings.keep_alive_share, &mut a);
            let once = b.random_bool(settings.try_share);
            assert_eq!(
                (r.mode, r.once, r.wait, r.keep_alive),
                (Mode::Write, once, None, false)
            );
        }
        assert_eq!(a.random::<u64>(), b.random::<u64>());
    }

    #[test]
    fn the_read_write_workload_mostly_reads_and_its_writers_wait_longer() {
        let settings = Settings::read_write(false);
        let mut rng = StdRng::seed_from_u64(7);
        let draws: Vec<Request> = (0..1000)
            .map(|_| draw(&settings, settings.keep_alive_share, &mut rng))
            .collect();
        let reads = draws.iter().filter(|r| r.mode == Mode::Read).count();
        assert!((800..=900).contains(&reads), "{reads} reads");
        let kept = draws.iter().filter(|r| r.keep_alive).count();
        assert!((150..=250).contains(&kept), "{kept} kept alive");
        for r in &draws {
            let writer_wait = (r.mode == Mode::Write).then_some(settings.ttl * 6);
            assert_eq!(r.wait, writer_wait, "{r:?}");
        }
        // The patient clients keep nothing alive.
        assert!((0..100).all(|_| !draw(&settings, 0.0, &mut rng).keep_alive));
        assert_eq!(settings.lock_rounds(), 5);
        assert_eq!(Settings::standard(true).lock_rounds(), 4);
        assert_eq!(settings.longest_wait(), settings.ttl * 6);
    }

    #[test]
    fn the_semaphore_workload_takes_only_permits_some_once_some_kept_alive() {
        let settings = Settings::semaphore(false);
        assert_eq!((settings.permits, settings.locks), (Some(3), 2));
        assert!(!settings.unsafe_majority && settings.unfenced.is_empty());
        let mut rng = StdRng::seed_from_u64(7);
        let draws: Vec<Request> = (0..1000)
            .map(|_| draw(&settings, settings.keep_alive_share, &mut rng))
            .collect();
        assert!(draws
            .iter()
            .all(|r| r.mode == Mode::Permit && r.wait.is_none()));
        let once = draws.iter().filter(|r| r.once).count();
        assert!((250..=350).contains(&once), "{once} try_acquire");
        let kept = draws.iter().filter(|r| r.keep_alive).count();
        assert!((150..=250).contains(&kept), "{kept} kept alive");
        // Permits wait and are bounded as locks are.
        assert_eq!(settings.lock_rounds(), 4);
        assert_eq!(settings.longest_wait(), settings.ttl);
    }
}
