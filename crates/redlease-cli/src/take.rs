//! Taking a lock from the command line, for `run`, `acquire` and `elect`:
//! the flags that say what to take (one name or several, alone, shared or
//! a permit; for `elect`, an election's lead) and how long to wait, the
//! Locker they make, and the wait itself with its notes and its exit when
//! the lock could not be had.

use std::future::Future;
use std::time::{Duration, Instant};

use clap::Args;
use redlease::{Acquire, Error, Leadership, Lease, Locker, RetryPolicy, Semaphore, TryAcquire};

use crate::duration;
use crate::errors::chain;
use crate::exit::{self, Exit};
use crate::nodes::NodesArg;
use crate::signals::Signals;

/// What to take and how to wait for it: `run`'s and `acquire`'s flags.
#[derive(Args, Debug)]
pub struct TakeArgs {
    #[command(flatten)]
    pub nodes: NodesArg,

    /// The lock's name: every process that must not hold it at the same
    /// time uses the same name. Given again (--key a --key b), every one of
    /// the locks at once or none (as a writer, or all as a reader with
    /// --shared; not with --permits).
    #[arg(long, value_name = "NAME", required = true)]
    key: Vec<String>,

    /// A name to hold shared, as a reader, together with the --key locks,
    /// all at once or none: readers of it run beside, writers wait (e.g.
    /// --key account:3 --key account:7 --read-key rates). A name given as
    /// --key too is held alone.
    #[arg(long, value_name = "NAME", conflicts_with = "permits")]
    read_key: Vec<String>,

    /// Take the lock shared, as a reader: --shared holders of one name
    /// hold it at the same time, but never while a writer (a plain run or
    /// acquire) holds the lock, and they wait in line behind whoever came
    /// before them and waits [default: alone, as a writer].
    #[arg(long)]
    shared: bool,

    /// Take one of N permits of a semaphore named --key instead of the
    /// lock: at most N holders of the name at once, fleet-wide; N is 1 to
    /// 100000. Every holder of the name gives the same N.
    #[arg(long, value_name = "N", value_parser = parse_permits, conflicts_with = "shared")]
    permits: Option<u32>,

    /// With --permits: take K of the N permits at once, all or none (a
    /// job that needs more room than others). Permits go in the order
    /// runs asked for them, whatever their weights: a run that asks for
    /// many is never overtaken by later runs that ask for few.
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = parse_weight, requires = "permits")]
    weight: u32,

    /// With --permits: accept a semaphore on which no node may fail (each
    /// permit needs every node, as 2 permits over 3 nodes do), which is
    /// otherwise refused: one node down then stops every holder of the
    /// name.
    #[arg(long, requires = "permits")]
    allow_no_failures: bool,

    /// How long the lock outlives redlease if it dies without releasing
    /// (e.g. its machine crashes). It is renewed every third of this while
    /// the command runs, so the command itself may run for any time.
    #[arg(long, value_name = "D", default_value = "10s", value_parser = duration::parse_positive)]
    pub ttl: Duration,

    /// Lock-delay: if the lock ends without a release (redlease killed, its
    /// machine gone, or the lock lost), nobody gets it until D after it
    /// expired, so that writes the command still had in flight land before
    /// the next holder starts. A run that ends normally releases at once.
    /// The restart quarantine covers the TTL and D [default: 0s, off].
    #[arg(long, value_name = "D", default_value = "0s", value_parser = duration::parse)]
    lock_delay: Duration,

    /// Who the lock says holds it, to `status` and to whoever finds it
    /// taken (at most 128 bytes; no control character, nor | * ~ #)
    /// [default: HOST:PID (COMMAND)].
    #[arg(long, value_name = "LABEL")]
    owner: Option<String>,

    /// Wait at most this long for the lock (e.g. 500ms, 10s, 2m), and for
    /// unreachable nodes to come back: within it, an outage is ridden out
    /// (said once) and exits 69 only when the wait is over [default: wait
    /// as long as it takes for a held lock, like flock; nodes unreachable
    /// at the first attempt exit 69 at once].
    #[arg(long, value_name = "D", value_parser = duration::parse)]
    wait: Option<Duration>,

    /// Do not wait: if the lock is held, exit at once with the conflict code.
    #[arg(long, conflicts_with = "wait")]
    no_wait: bool,

    /// Exit code when the lock could not be had (in time).
    #[arg(long, value_name = "N", default_value_t = exit::CONFLICT)]
    conflict_exit_code: u8,

    /// Require N replicas to acknowledge every write of the lease (WAIT), for
    /// locks on replicated primaries (Sentinel, a cluster with replicas)
    /// that must survive a failover: a lock not acknowledged in time is not
    /// taken (tried again within the wait, as a busy lock is), and a
    /// failover ends the lease (see docs/deployments.md).
    #[arg(long, value_name = "N")]
    durable: Option<u32>,

    /// How long each write waits for the --durable replicas; must be
    /// shorter than the node timeout (5% of the TTL unless set otherwise).
    #[arg(long, value_name = "D", default_value = "100ms", value_parser = duration::parse_positive, requires = "durable")]
    durable_timeout: Duration,

    /// Prefix of the lock's Redis key (the key is PREFIX{NAME}); must match
    /// other programs that take the same lock with the library.
    #[arg(long, value_name = "PREFIX", default_value = "redlease:")]
    key_prefix: String,

    /// Say nothing when the lock is held elsewhere (just exit with the
    /// conflict code), as suits a cron job that often finds it busy.
    #[arg(short, long)]
    pub quiet: bool,
}

impl TakeArgs {
    /// What to take: `--permits N` one of N permits, `--shared` the lock
    /// as a reader, else the lock alone; several `--key`, every lock of
    /// them in that hold, and the `--read-key` names shared with them (a
    /// usage error with `--permits`).
    pub fn want(&self) -> Result<Want, Exit> {
        let hold = match (self.permits, self.shared) {
            (Some(permits), _) if self.weight > permits => {
                return Err(Exit::with(
                    exit::USAGE,
                    format!(
                        "--weight {} of --permits {permits}: a run takes at most all the \
                         permits (give --weight {permits} or less)",
                        self.weight
                    ),
                ))
            }
            (Some(permits), _) => Hold::Permit {
                permits,
                weight: self.weight,
                allow_no_failures: self.allow_no_failures,
            },
            (None, true) => Hold::Shared,
            (None, false) => Hold::Alone,
        };
        // In the library's canonical order, each once, as `lock_all` takes
        // them and the lease lists them.
        let mut names: Vec<String> = self.key.iter().chain(&self.read_key).cloned().collect();
        names.sort_unstable();
        names.dedup();
        if names.len() > 1 && matches!(hold, Hold::Permit { .. }) {
            return Err(Exit::with(
                exit::USAGE,
                "--permits takes one --key: a semaphore's permit is taken alone (give one \
                 --key, or drop --permits)",
            ));
        }
        let read: Vec<String> = match hold {
            Hold::Shared => names.clone(),
            _ => names
                .iter()
                .filter(|n| !self.key.contains(n))
                .cloned()
                .collect(),
        };
        Ok(Want { hold, names, read })
    }

    /// What `elect` takes: the lead of the one election --key names, held
    /// alone. --shared, --permits (and so --weight, --allow-no-failures),
    /// --read-key and a second --key are usage errors: a lead is one
    /// name's, and one holder's.
    pub fn want_lead(&self) -> Result<Want, Exit> {
        let refused = if self.shared {
            Some("--shared")
        } else if self.permits.is_some() {
            Some("--permits")
        } else if !self.read_key.is_empty() {
            Some("--read-key")
        } else if self.key.len() > 1 {
            Some("second --key")
        } else {
            None
        };
        if let Some(flag) = refused {
            return Err(Exit::with(
                exit::USAGE,
                format!(
                    "elect takes no {flag}: the lead of an election is one --key's, held \
                     by one process at a time (use `redlease run` for shared or several \
                     locks)"
                ),
            ));
        }
        Ok(Want {
            hold: Hold::Alone,
            names: self.key.clone(),
            read: Vec::new(),
        })
    }

    /// The Locker for taking `want`, with fencing on (the holder gets
    /// each name's fencing token), the TTL, key prefix, durability and
    /// owner the flags give (by default this process, `doing`); every name
    /// is checked. No I/O.
    pub fn locker(&self, want: &Want, doing: &str) -> Result<Locker, Exit> {
        let (_, mut builder) = self.nodes.builder()?;
        builder = match &self.owner {
            Some(label) => builder.owner(label.as_str()),
            None => builder.owner_lossy(&format!("{} ({doing})", redlease::default_owner())),
        };
        let durability = match self.durable {
            Some(replicas) => redlease::Durability::required(replicas, self.durable_timeout),
            None => redlease::Durability::off(),
        };
        let locker = builder
            .fencing(true)
            .ttl(self.ttl)
            .lock_delay(self.lock_delay)
            .key_prefix(self.key_prefix.as_str())
            .durability(durability)
            .build()
            .map_err(|e| Exit::with(exit::USAGE, chain(&e)))?;
        // A bad name is refused before any connection is made.
        for name in &want.names {
            if let Err(e) = locker.admin().check_name(name) {
                return Err(Exit::with(exit::USAGE, chain(&e)));
            }
        }
        Ok(locker)
    }

    /// Takes `want`: one attempt, then (unless --no-wait) waits for it,
    /// kept alive from the start if `keep_alive`. A signal meanwhile ends
    /// the wait (exit 128+N); a lock that could not be had is the exit
    /// [`not_acquired`] tells. `first_try` gets how long the first attempt
    /// took.
    pub async fn take(
        &self,
        locker: &Locker,
        want: &Want,
        keep_alive: bool,
        signals: &mut Signals,
        first_try: &mut Duration,
        by: Taker,
    ) -> Result<Lease, Exit> {
        self.check_replicas(locker, want, by).await?;
        let started = Instant::now();
        tokio::select! {
            got = self.acquire(locker, want, keep_alive, first_try) => {
                got.map_err(|e| self.not_acquired(&e, want, started.elapsed(), by))
            }
            sig = signals.recv() => {
                // The acquisition was dropped; an attempt in flight undoes
                // itself in the background: wait for that before exiting.
                locker.close().await;
                Err(Exit::code(exit::signal_code(sig.as_raw())))
            }
        }
    }

    /// One attempt at `want`, then (unless --no-wait) a wait for it.
    async fn acquire(
        &self,
        locker: &Locker,
        want: &Want,
        keep_alive: bool,
        first_try: &mut Duration,
    ) -> Result<Lease, Error> {
        let attempt = want.try_acquire(locker);
        let first = async move {
            match keep_alive {
                true => attempt.keep_alive().await,
                false => attempt.await,
            }
        };
        let wait = |wait: Option<Duration>| {
            let request = match keep_alive {
                true => want.acquire(locker).keep_alive(),
                false => want.acquire(locker),
            };
            async move {
                match wait {
                    Some(wait) => request.wait(wait).await,
                    // Like flock: without --wait, as long as it takes.
                    None => request.retry(RetryPolicy::forever()).await,
                }
            }
        };
        self.first_then_wait(first, wait, first_try).await
    }

    /// Campaigns for the lead of the election `want` names (one name,
    /// alone: [`want_lead`](Self::want_lead)) with `value`, as
    /// [`take`](Self::take) takes a lock: one attempt, then (unless
    /// --no-wait) a wait in line, which a signal ends (exit 128+N); a lead
    /// that could not be had is the exit [`not_acquired`] tells.
    pub async fn campaign(
        &self,
        locker: &Locker,
        want: &Want,
        value: &str,
        signals: &mut Signals,
        first_try: &mut Duration,
    ) -> Result<Leadership, Exit> {
        self.check_replicas(locker, want, Taker::Elect).await?;
        let started = Instant::now();
        let election = locker.election(want.name());
        // One attempt: a campaign that waits no time in line. Its error is
        // the attempt's, as a lock's first attempt gives it.
        let first = async {
            match election.campaign(value).wait(Duration::ZERO).await {
                Err(Error::WaitTimeout { last, .. }) => Err(*last),
                other => other,
            }
        };
        let wait = |wait: Option<Duration>| {
            let campaign = election.campaign(value);
            async move {
                match wait {
                    Some(wait) => campaign.wait(wait).await,
                    None => campaign.await,
                }
            }
        };
        tokio::select! {
            got = self.first_then_wait(first, wait, first_try) => {
                got.map_err(|e| self.not_acquired(&e, want, started.elapsed(), Taker::Elect))
            }
            sig = signals.recv() => {
                // The campaign was dropped (it leaves the line, and gives
                // back a lead won but not yet published): wait for that.
                locker.close().await;
                Err(Exit::code(exit::signal_code(sig.as_raw())))
            }
        }
    }

    /// `first`, one attempt; then, unless --no-wait or its failure is not
    /// worth waiting for, `wait` for the rest of --wait (`Some`) or as
    /// long as it takes (`None`). `first_try` gets how long the attempt
    /// took.
    async fn first_then_wait<T, W>(
        &self,
        first: impl Future<Output = Result<T, Error>>,
        wait: impl FnOnce(Option<Duration>) -> W,
        first_try: &mut Duration,
    ) -> Result<T, Error>
    where
        W: Future<Output = Result<T, Error>>,
    {
        // A wait too long for the clock to represent is no bound at all.
        let deadline = self.wait.and_then(|wait| Instant::now().checked_add(wait));
        let tried = Instant::now();
        let first = first.await;
        *first_try = tried.elapsed();
        match first {
            Ok(held) => return Ok(held),
            Err(e) if self.no_wait() => return Err(e),
            Err(e) if worth_waiting(&e) => {
                // Said once, before the wait: it can be as long as the TTL.
                let quarantine = self
                    .nodes
                    .restart_quarantine(self.ttl.saturating_add(self.lock_delay));
                let note = quarantine_note(&e, quarantine).or_else(|| replicas_note(&e));
                if let Some(note) = note.filter(|_| !self.quiet) {
                    eprintln!("redlease: {note}");
                }
            }
            // Within a --wait, an outage is ridden out: said once, and
            // exit 69 only when the wait is over.
            Err(e) => match self.wait.zip(outage_note(&e)) {
                Some((wait, note)) => {
                    if !self.quiet {
                        eprintln!(
                            "redlease: {note}; trying again until --wait {} is over",
                            duration::show(wait)
                        );
                    }
                }
                None => return Err(e),
            },
        }
        wait(deadline.map(|deadline| deadline.saturating_duration_since(Instant::now()))).await
    }

    /// `--wait 0` is `--no-wait`, as with flock.
    fn no_wait(&self) -> bool {
        self.no_wait || self.wait == Some(Duration::ZERO)
    }

    /// With `--durable N`, before any lock I/O: refused (exit 2) when too
    /// few nodes have N connected replicas for the quorum `want` needs,
    /// which no wait would change.
    async fn check_replicas(&self, locker: &Locker, want: &Want, by: Taker) -> Result<(), Exit> {
        let Some(wanted) = self.durable.filter(|&n| n > 0) else {
            return Ok(());
        };
        let quorum = match want.hold {
            Hold::Permit { permits, .. } => locker.semaphore(want.name(), permits).quorum(),
            _ => locker.admin().quorum(),
        };
        match crate::replicas::refusal(locker, &self.nodes, wanted, quorum).await? {
            Some(why) => Err(Exit::with(exit::USAGE, format!("{why}; {}", by.not_done()))),
            None => Ok(()),
        }
    }

    /// The exit for a lock we could not take; `waited` is how long we
    /// tried.
    fn not_acquired(&self, e: &Error, want: &Want, waited: Duration, by: Taker) -> Exit {
        let not_done = by.not_done();
        let quarantine = self
            .nodes
            .restart_quarantine(self.ttl.saturating_add(self.lock_delay));
        let cause = match e {
            Error::WaitTimeout { last, .. } => last.as_ref(),
            other => other,
        };
        match cause {
            Error::Taken { held_on, nodes, .. } => {
                let when = if self.no_wait() {
                    String::new()
                } else {
                    format!(" after waiting {}", duration::show(waited))
                };
                let taken = match by {
                    Taker::Elect => want.led(held_on),
                    _ => want.taken(held_on),
                };
                let message = format!(
                    "{taken} (on {} of {nodes} nodes){when}; {not_done}",
                    held_on.len(),
                );
                match self.quiet {
                    true => Exit::code(self.conflict_exit_code),
                    false => Exit::with(self.conflict_exit_code, message),
                }
            }
            Error::InvalidInput { .. } => Exit::with(exit::USAGE, chain(e)),
            // Holders of one name that disagree on N: a setup mistake that
            // waiting does not fix, and that a --conflict-exit-code 0 must
            // not hide.
            Error::PermitsDiffer {
                resource,
                asked,
                held,
                node,
                ..
            } => Exit::with(
                exit::USAGE,
                format!(
                    "semaphore {resource:?} is held with --permits {held} on {node}, and \
                     this {} gives --permits {asked}: every holder of a name must give the \
                     same number while any of its permits is held; {not_done}",
                    by.noun()
                ),
            ),
            // Nodes that answer but cast no vote yet: what keeps the lock
            // is their quarantine, named with when it ends and what sets
            // it (the wait before it was told by `quarantine_note`).
            Error::NoQuorum { .. } => match quarantined(cause, quarantine) {
                Some(q) => Exit::with(
                    exit::UNAVAILABLE,
                    format!(
                        "{} not taken{}: {} keeps too few nodes voting for {} more: {}{}; \
                         {not_done}",
                        named(want),
                        match self.no_wait() {
                            true => String::new(),
                            false => format!(" after waiting {}", duration::show(waited)),
                        },
                        q.label(),
                        duration::show(q.wait),
                        q.why,
                        q.advice(),
                    ),
                ),
                None => Exit::with(
                    exit::UNAVAILABLE,
                    format!(
                        "{}; {not_done} (`redlease doctor` checks the nodes)",
                        gave_up(e, want, waited)
                    ),
                ),
            },
            Error::ValidityExhausted { .. } => Exit::with(
                exit::UNAVAILABLE,
                format!(
                    "{}; {not_done} (`redlease doctor` checks the nodes)",
                    chain(e)
                ),
            ),
            _ => Exit::with(exit::INTERNAL, format!("{}; {not_done}", chain(e))),
        }
    }
}

/// Which command takes the lock, for its messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taker {
    Run,
    Acquire,
    Elect,
}

impl Taker {
    /// What the command is called in a message: "this run gives ...".
    fn noun(self) -> &'static str {
        match self {
            Taker::Run => "run",
            Taker::Acquire => "acquire",
            Taker::Elect => "elect",
        }
    }

    /// What did not happen when the lock could not be had.
    fn not_done(self) -> &'static str {
        match self {
            Taker::Run | Taker::Elect => "the command was not run",
            Taker::Acquire => "nothing was acquired",
        }
    }
}

/// How a name is held: the three kinds of run (and of acquire).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// The lock, alone (as a writer): a plain run.
    Alone,
    /// The lock, shared with other readers: `--shared`.
    Shared,
    /// `weight` of `permits` permits of a semaphore: `--permits N
    /// --weight K`.
    Permit {
        permits: u32,
        weight: u32,
        /// `--allow-no-failures`.
        allow_no_failures: bool,
    },
}

/// What to take: a hold of one name, or every lock of several names at
/// once, some or all of them shared ([`TakeArgs::want`] refuses several
/// names with a permit).
#[derive(Clone, Debug)]
pub struct Want {
    pub hold: Hold,
    /// Sorted, each once, as the library takes and lists them; at least
    /// one.
    pub names: Vec<String>,
    /// Those of `names` held shared, in the same order.
    pub read: Vec<String>,
}

impl Want {
    /// The first name (of several, the first in sorted order).
    fn name(&self) -> &str {
        &self.names[0]
    }

    /// Several names, taken together with the library's `lock_all`.
    fn all(&self) -> bool {
        self.names.len() > 1
    }

    /// The names held alone.
    fn written(&self) -> Vec<&str> {
        let written = self.names.iter().filter(|n| !self.read.contains(n));
        written.map(String::as_str).collect()
    }

    /// One attempt at it.
    fn try_acquire<'a>(&self, locker: &'a Locker) -> TryAcquire<'a> {
        let written = self.written();
        match self.hold {
            Hold::Permit {
                permits,
                weight,
                allow_no_failures,
            } => {
                semaphore(locker, self.name(), permits, allow_no_failures).try_acquire_many(weight)
            }
            _ if !self.all() && written.is_empty() => locker.try_read_lock(self.name()),
            _ if !self.all() => locker.try_lock(self.name()),
            _ if written.is_empty() => locker.try_read_lock(self.name()).and_read(&self.read[1..]),
            _ => locker.try_lock_all(written).and_read(&self.read),
        }
    }

    /// A request that waits for it.
    fn acquire<'a>(&self, locker: &'a Locker) -> Acquire<'a> {
        let written = self.written();
        match self.hold {
            Hold::Permit {
                permits,
                weight,
                allow_no_failures,
            } => semaphore(locker, self.name(), permits, allow_no_failures).acquire_many(weight),
            _ if !self.all() && written.is_empty() => locker.read_lock(self.name()),
            _ if !self.all() => locker.write_lock(self.name()),
            _ if written.is_empty() => locker.read_lock(self.name()).and_read(&self.read[1..]),
            _ => locker.lock_all(written).and_read(&self.read),
        }
    }

    /// The names, for messages: `"a"`, or `"a", "b"`.
    pub fn listed(&self) -> String {
        let quoted: Vec<String> = self.names.iter().map(|n| format!("{n:?}")).collect();
        quoted.join(", ")
    }

    /// What a holder of this holds, for messages: "the lock "K"", "the
    /// locks "A", "B"", "its permit of "K"".
    pub fn held(&self) -> String {
        match self.hold {
            Hold::Permit { weight: 1, .. } => format!("its permit of {}", self.listed()),
            Hold::Permit { weight, .. } => format!("its {weight} permits of {}", self.listed()),
            _ if self.all() => format!("the locks {}", self.listed()),
            _ => format!("the lock {}", self.listed()),
        }
    }

    /// Why the lead of an election could not be had, as the nodes that
    /// refused it said: who leads (the lead's lease names it), others in
    /// line before us, or a name held as no lead is (readers, permits).
    fn led(&self, held_on: &[redlease::Held]) -> String {
        use redlease::HeldBy;
        let key = self.listed();
        let first = held_on.first().map(|h| h.by);
        let by = first.filter(|by| held_on.iter().all(|h| h.by == *by));
        let named = held_on.iter().filter_map(|h| h.holder.as_ref());
        let who = redlease::Holder::describe_all(named, std::time::SystemTime::now());
        match (by, who) {
            (Some(HeldBy::Queued), _) => {
                format!("others who came first wait in line for the lead of {key}")
            }
            (Some(HeldBy::Readers), _) => {
                format!("{key} is a lock held by --shared runs, not an election's lead")
            }
            (Some(HeldBy::Semaphore { permits }), _) => format!(
                "{key} is a semaphore of {permits} permits, not an election, and its permits \
                 are held"
            ),
            (_, Some(who)) => format!("the lead of {key} is held by {who}"),
            (_, None) => format!("the lead of {key} is held by another process"),
        }
    }

    /// Why it could not be had, as the nodes that refused it said (when
    /// they all said the same): a writer holding it or waiting for it,
    /// readers, a semaphore's permits all in use, or a name that is a
    /// semaphore's rather than a lock's, or the other way round.
    fn taken(&self, held_on: &[redlease::Held]) -> String {
        use redlease::HeldBy;
        let key = self.listed();
        let first = held_on.first().map(|h| h.by);
        let by = first.filter(|by| held_on.iter().all(|h| h.by == *by));
        let (permits, weight) = match self.hold {
            Hold::Permit {
                permits, weight, ..
            } => (Some(permits), weight),
            _ => (None, 1),
        };
        // Who, as the holders' leases name themselves (never a token).
        let named = held_on.iter().filter_map(|h| h.holder.as_ref());
        let who = redlease::Holder::describe_all(named, std::time::SystemTime::now());
        match (by, permits) {
            _ if self.all() => match &who {
                Some(who) => format!("one or more of the locks {key} are held, by {who}"),
                None => format!("one or more of the locks {key} are held by another owner"),
            },
            (Some(HeldBy::Semaphore { permits: 1 }), Some(_)) => {
                format!("the 1 permit of {key} is held")
            }
            (Some(HeldBy::Semaphore { permits }), Some(_)) if weight == 1 => {
                format!("all {permits} permits of {key} are held")
            }
            (Some(HeldBy::Semaphore { permits }), Some(_)) => {
                format!("fewer than {weight} of the {permits} permits of {key} are free")
            }
            (Some(HeldBy::Semaphore { permits }), None) => format!(
                "{key} is a semaphore of {permits} permits (--permits {permits}), not a lock, \
                 and its permits are held"
            ),
            (Some(HeldBy::Readers), Some(_)) => {
                format!("{key} is a lock held by --shared runs, not a semaphore")
            }
            (Some(HeldBy::Owner | HeldBy::Unknown), Some(_)) => {
                format!("{key} is a lock held by a plain run, not a semaphore")
            }
            (Some(HeldBy::Readers), None) => format!("lock {key} is held by --shared runs"),
            (Some(HeldBy::Queued), Some(_)) => {
                format!("others who came first wait in line for the permits of {key}")
            }
            (Some(HeldBy::Queued), None) => format!(
                "others who came first wait in line for lock {key} (a --shared run waits \
                 behind a plain run that came before it)"
            ),
            (Some(HeldBy::Owner | HeldBy::Unknown), None) if self.hold == Hold::Shared => {
                format!("lock {key} is held by a writer (a plain run)")
            }
            (Some(HeldBy::Owner | HeldBy::Unknown), None) => match &who {
                Some(who) => format!("lock {key} is held by {who}"),
                None => format!("lock {key} is held by another owner"),
            },
            (_, Some(permits)) => format!("no permit of the {permits} of {key} is free"),
            _ => format!("lock {key} is held by other owners"),
        }
    }
}

/// The semaphore `--permits` holders take a permit of.
fn semaphore<'a>(
    locker: &'a Locker,
    key: &str,
    permits: u32,
    allow_no_failures: bool,
) -> Semaphore<'a> {
    let semaphore = locker.semaphore(key, permits);
    match allow_no_failures {
        true => semaphore.allow_no_failures(),
        false => semaphore,
    }
}

/// `--weight K`: a positive number (0 would hold nothing).
fn parse_weight(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(0) => Err("--weight 0 would hold no permit: give 1 or more".to_string()),
        Ok(weight) => Ok(weight),
        Err(_) => Err(format!(
            "{:?} is not a number of permits; write e.g. --weight 2",
            text.trim()
        )),
    }
}

/// `--permits N`: a positive number (0 would admit no run at all).
fn parse_permits(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(0) => Err(
            "0 permits would admit no run: a semaphore needs at least 1 permit \
             (--permits 1 runs one at a time)"
                .to_string(),
        ),
        Ok(permits) => Ok(permits),
        Err(_) => Err(format!(
            "{:?} is not a number of permits; write e.g. --permits 4",
            text.trim()
        )),
    }
}

/// One server given twice (localhost and 127.0.0.1, say) would count
/// twice: refused before waiting. Nodes that are down are checked when
/// they answer (the lock then fails the same way). A URL whose scheme does
/// not match its port (TLS or not) cannot work however long one waits:
/// said now, with the scheme to use.
pub async fn check_servers(locker: &Locker) -> Result<(), Exit> {
    match locker.admin().check_servers().await {
        Err(e) => Err(Exit::with(exit::USAGE, chain(&e))),
        Ok(unreached) => {
            let wrong: Vec<String> = unreached
                .iter()
                .filter(|e| matches!(e.kind(), redlease::NodeErrorKind::WrongScheme(_)))
                .map(|e| e.to_string())
                .collect();
            match wrong.is_empty() {
                true => Ok(()),
                false => Err(Exit::with(exit::USAGE, wrong.join("; "))),
            }
        }
    }
}

/// What a wait for quarantined nodes (`e` is the first attempt's error)
/// is about to cost, and why, if the quarantine is what keeps the lock:
/// which servers (re)started or had their clock jump, and what sets the
/// restart quarantine (and turns it off where it is not needed).
fn quarantine_note(e: &Error, quarantine: Duration) -> Option<String> {
    let q = quarantined(e, quarantine)?;
    Some(format!(
        "waiting {} for {}: {}{}",
        duration::show(q.wait),
        q.label(),
        q.why,
        q.advice()
    ))
}

/// Why quarantined nodes keep a lock from being taken ([`quarantined`]).
struct Quarantined {
    /// Until enough of them vote again for a quorum.
    wait: Duration,
    /// Which servers, and why they cast no vote.
    why: String,
    /// Whether any of them (re)started, rather than had its clock jump.
    restarted: bool,
}

impl Quarantined {
    /// What is waited for.
    fn label(&self) -> &'static str {
        match self.restarted {
            true => "the restart quarantine",
            false => "a server whose clock jumped",
        }
    }

    /// What sets the restart quarantine and when it may be turned off, as
    /// a sentence after [`why`](Self::why); nothing for a clock jump.
    fn advice(&self) -> &'static str {
        match self.restarted {
            true => {
                ". The restart quarantine is the --ttl plus 1% unless --restart-quarantine \
                 sets it; if every server keeps its data across restarts (appendonly yes and \
                 appendfsync always, on a disk it restarts from), --restart-quarantine 0s \
                 turns it off"
            }
            false => "",
        }
    }
}

/// Whether the nodes' quarantine is what kept an attempt (`e`, or the
/// last attempt of a wait) from the lock, and if so which servers
/// (re)started or had their clock jump, `quarantine` being the restart
/// quarantine in force.
fn quarantined(e: &Error, quarantine: Duration) -> Option<Quarantined> {
    use redlease::{NodeErrorKind, Quarantine};
    let wait = e.quarantine_wait()?;
    let mut restarted = Vec::new();
    let mut jumped = Vec::new();
    for failure in e.node_errors() {
        match failure.kind() {
            NodeErrorKind::Quarantined {
                cause: Quarantine::Restarted { up },
                ..
            } if *up < Duration::from_secs(1) => {
                restarted.push(format!("{} just started", failure.node()))
            }
            NodeErrorKind::Quarantined {
                cause: Quarantine::Restarted { up },
                ..
            } => restarted.push(format!(
                "{} started {} ago",
                failure.node(),
                duration::show(*up)
            )),
            NodeErrorKind::Quarantined {
                cause: Quarantine::ClockJumped { ahead },
                ..
            } => jumped.push(format!(
                "{}'s clock jumped {} ahead",
                failure.node(),
                duration::show(*ahead)
            )),
            _ => {}
        }
    }
    let mut why = Vec::new();
    if !restarted.is_empty() {
        why.push(format!(
            "{}, and a server casts no vote for a lock until it has been up for {} (after \
             a restart it may have lost locks it granted; a new one cannot show it granted \
             none)",
            restarted.join(", "),
            duration::show(quarantine)
        ));
    }
    if !jumped.is_empty() {
        why.push(format!(
            "{} (expiring its keys early), and casts no vote for a lock for a while",
            jumped.join(", ")
        ));
    }
    Some(Quarantined {
        wait,
        why: why.join("; "),
        restarted: !restarted.is_empty(),
    })
}

/// What was to be taken, for a message: `lock "K"`, `locks "A", "B"`,
/// `a permit of "K"`.
fn named(want: &Want) -> String {
    match want.hold {
        Hold::Permit { .. } => format!("a permit of {}", want.listed()),
        _ if want.names.len() > 1 => format!("locks {}", want.listed()),
        _ => format!("lock {}", want.listed()),
    }
}

/// Why the wait may be long when too few replicas acknowledged the first
/// attempt's write (as right after a failover, while the replicas sync).
fn replicas_note(e: &Error) -> Option<String> {
    let short: Vec<String> = e
        .node_errors()
        .iter()
        .filter_map(|f| match f.kind() {
            redlease::NodeErrorKind::NotReplicated {
                acknowledged,
                wanted,
            } => Some(format!(
                "{}: {acknowledged} of {wanted} replica(s) acknowledged",
                f.node()
            )),
            _ => None,
        })
        .collect();
    (!short.is_empty()).then(|| {
        format!(
            "waiting for replicas to acknowledge the lock ({}): a lock too few replicas \
             hold does not count (--durable); --wait bounds the wait",
            short.join("; ")
        )
    })
}

/// A lock not had for want of a quorum, as one line: after a wait, the
/// whole of it (the library's own wait begins after the first attempt,
/// `waited` counts from before it) and the last attempt's error.
fn gave_up(e: &Error, want: &Want, waited: Duration) -> String {
    match e {
        Error::WaitTimeout { attempts, last, .. } => format!(
            "gave up waiting for {} after {} and {} attempts: {}",
            want.listed(),
            duration::show(waited),
            attempts.saturating_add(1),
            chain(last.as_ref())
        ),
        _ => chain(e),
    }
}

/// Why the first attempt found no quorum, when nodes that cannot be
/// reached now (or cannot serve yet) are the reason, and enough of them
/// may come back for a quorum: a wait bounded by `--wait` rides that out.
/// `None` when a failure that waiting does not cure (a refused password
/// or permission, a key of another type, TLS) leaves too few nodes.
fn outage_note(e: &Error) -> Option<String> {
    let Error::NoQuorum {
        succeeded,
        quorum,
        nodes,
        failed,
        ..
    } = e
    else {
        return None;
    };
    let (passing, lasting): (Vec<_>, Vec<_>) = failed.iter().partition(|f| may_pass(f.kind()));
    if passing.is_empty() || nodes.saturating_sub(lasting.len()) < *quorum {
        return None;
    }
    let listed: Vec<String> = passing.iter().map(|f| format!("{f:#}")).collect();
    Some(format!(
        "no quorum yet: {succeeded} of {nodes} nodes granted the lock, {quorum} needed; \
         unreachable or not serving: {}",
        listed.join("; ")
    ))
}

/// Whether a node's failure can pass by itself: it cannot be reached, did
/// not answer in time, or is busy starting up or failing over.
fn may_pass(kind: &redlease::NodeErrorKind) -> bool {
    use redlease::{NodeErrorKind as K, ServerErrorCode as C};
    match kind {
        K::Timeout(_) | K::Connection(_) | K::Unresponsive { .. } => true,
        K::Redis { code, .. } => matches!(
            code,
            C::Loading | C::Busy | C::TryAgain | C::ClusterDown | C::MasterDown
        ),
        _ => false,
    }
}

/// Whether waiting can help whatever the wait: someone holds the lock, or
/// the nodes were only slow. When no node holds it and a quorum failed,
/// an unbounded wait would only hide unreachable nodes (possibly forever:
/// a mistyped address), so that is reported at once; a `--wait` rides it
/// out ([`outage_note`]).
fn worth_waiting(e: &Error) -> bool {
    match e {
        Error::Taken { .. } | Error::ValidityExhausted { .. } => true,
        // Held somewhere, nodes that vote again once their restart
        // quarantine is over, or a write too few replicas acknowledged
        // (a primary whose replicas are still syncing, as right after a
        // failover): new locks wait for the replicas.
        Error::NoQuorum {
            refused_by, failed, ..
        } => {
            !refused_by.is_empty()
                || failed.iter().any(|f| {
                    matches!(
                        f.kind(),
                        redlease::NodeErrorKind::Quarantined { .. }
                            | redlease::NodeErrorKind::NotReplicated { .. }
                    )
                })
        }
        _ => false,
    }
}
