//! `redlease run`: a command under a distributed lock, like flock(1) across
//! machines. Acquire, keep the lease alive while the command runs, pass
//! signals on, release at the end. The command is stopped if redlease is
//! asked to stop (SIGKILL after `--grace` if it does not exit), and if the
//! lease runs out or is lost: SIGTERM while a well-behaved command still
//! has time to exit, SIGKILL before the lease's validity ends whatever
//! `--grace` says (see [`Deadlines`]), so that nothing of it runs once
//! another client can take the lock. If redlease itself dies, its guardian
//! process stops the command by the same time (see guardian.rs).
//! `redlease elect` runs its command here too, under an election's lead
//! instead of a lock ([`run_under`]).

use std::ffi::OsString;
use std::io;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use clap::Args;
use redlease::{Error, Leadership, Lease, LostReason};
use rustix::process::{self, Signal};
use tokio::process::{Child, Command};

use crate::duration;
use crate::errors::chain;
use crate::exit::{self, Exit};
use crate::guardian::Guardian;
use crate::signals::{self, Signals, Target};
use crate::take::{check_servers, TakeArgs, Taker};

/// How often leftovers of a stopped command are looked for.
const GROUP_POLL: Duration = Duration::from_millis(50);

/// A pause of this process or of a node that a lease should survive: a busy
/// machine's scheduler, forking the command, a node forking for a snapshot
/// or rewriting its append-only file can each stall this long.
const ORDINARY_PAUSE: Duration = Duration::from_millis(100);

#[derive(Args, Debug)]
#[command(after_help = "\
The command gets REDLEASE_KEY (the lock name) and REDLEASE_FENCING_TOKEN (a \
number larger than that of every earlier holder: pass it to the resource \
you write to, so it can reject a stale writer), and REDLEASE_FENCING_TOKENS, \
one NAME=TOKEN line per name.

With --key given more than once (--key a --key b), the command runs under \
every one of the locks, taken at once or not at all (no two runs that share \
a name can deadlock, whatever order they give them in); a lost one stops it \
as a lost lock does. REDLEASE_KEY and REDLEASE_FENCING_TOKEN are then the \
first name's in sorted order, and REDLEASE_FENCING_TOKENS has a line for each \
(`for pair in $REDLEASE_FENCING_TOKENS` splits them, names without spaces). \
Several keys are taken alone, as a writer, or all shared with --shared; \
--read-key NAME adds a name held shared beside them, in the same all-or-none \
step (readers of it run beside, writers of it wait). --permits takes one \
--key.

With --shared, the command runs under a read (shared) hold of the lock: any \
number of --shared runs of one name run at the same time, and none while a \
plain run of that name holds it, which holds it alone (as a writer). A plain \
run waiting for the readers to finish goes first: --shared runs started \
meanwhile wait behind it. A reader's REDLEASE_FENCING_TOKEN is not a token of \
its own: it is the newest writer's token the reader can see (at least the \
token of every writer before it), the same for every reader until the next \
writer; it tells which write the command reads after, not one reader from \
another.

With --permits N, the command runs under one of N permits of a semaphore \
named --key: at most N runs of the name at once, fleet-wide (xargs -P across \
machines). Every run of the name must give the same N while any permit is \
held (another N exits 2). Over several independent nodes a permit must be \
held on n*N/(N+1)+1 of the n nodes, so that N+1 runs can never all find room: \
with 5 nodes and 2 or 3 permits, one node may fail. A semaphore on which no \
node may fail (3 nodes and 2 permits: every node holds each permit) is \
refused unless --allow-no-failures accepts it. A name is a lock or a \
semaphore at a time: a plain or --shared run waits while permits of its name \
are held, and a --permits run waits while the name is locked. A permit's REDLEASE_FENCING_TOKEN is \
drawn as a plain run's is, larger than that of every earlier holder of the \
name; permits taken at the same moment may get the same one.

While the command runs, the lease is renewed every third of --ttl. When \
renewals do not get through (nodes down or unreachable) and only a third of \
the TTL (or --grace, if shorter) is left of the lease, the command gets \
SIGTERM; if it has not exited one drift allowance (1% of the TTL + 2 ms) \
before the lease's validity ends, SIGKILL, whatever --grace says: nothing of \
the command runs once another client can take the lock. A lease lost with \
validity left (the lock was taken over) stops the command at once: SIGTERM, \
then SIGKILL after --grace or one drift allowance before the validity ends, \
whichever is first. A lost lease exits 75; if a renewal gets through after \
the SIGTERM, the lease was not lost and redlease exits with the command's \
status. The command runs in its own \
process group, so these signals reach every process it started (a shell \
script's children too). SIGTERM, \
SIGINT and SIGQUIT sent to redlease are passed on the same way, SIGKILL \
following after --grace (or by the time above, if the lease runs out \
meanwhile) if the command has not exited; SIGHUP is passed on \
without (daemons take it as a reload); SIGUSR1 and SIGUSR2 go to the command \
alone. If redlease itself is killed (SIGKILL, out of memory), a small \
guardian process (redlease __guardian) stops the command's group: SIGTERM at \
once, SIGKILL after --grace or one drift allowance before the lease's \
validity ends, whichever is first. A process that leaves the group (setsid) escapes both. When the \
command ends, redlease releases the lock and exits with its status (128+N if \
it died of signal N).

Examples:
  redlease run --key nightly-report -- ./report.sh --full
  redlease run --key account:7 --key account:3 -- ./transfer.sh 7 3
  redlease run --shared --key catalog -- ./export-catalog.sh   # readers at once
  redlease run --key catalog -- ./rebuild-catalog.sh           # alone
  redlease run --permits 4 --key encoders -- ./encode.sh       # 4 at once
  redlease run --nodes redis://a:6379,redis://b:6379,redis://c:6379 \\
      --key backup --no-wait --conflict-exit-code 0 -- pg_dump -f db.sql mydb

Exit codes: the command's status; 1 (or --conflict-exit-code) if the lock is \
held elsewhere (all N permits held); 2 usage (also: --permits other than the \
name's holders give, or a semaphore no node may fail on); 69 no quorum of \
nodes answered (with --wait, once the wait is over); 75 lease lost; 77 \
the command exited 0 but the release was refused (ACL: NOPERM); 126/127 command not executable / not found; 128+N it died of signal N (or redlease \
got signal N before starting it). See `redlease --help`.")]
pub struct RunArgs {
    #[command(flatten)]
    take: TakeArgs,

    /// How long the command may take to exit after it was told to stop
    /// (SIGTERM, SIGINT or SIGQUIT passed on; redlease killed; a lease lost
    /// or running out) before its process group gets SIGKILL. A lease that
    /// runs out bounds it: SIGKILL lands one drift allowance (1% of the
    /// TTL, plus 2 ms) before its validity ends, whatever this says, and
    /// SIGTERM this long (at most a third of --ttl) before that.
    #[arg(long, value_name = "D", default_value = "5s", value_parser = duration::parse)]
    grace: Duration,

    /// Serve the lock's metrics (acquire latency and outcome, renewals,
    /// node errors, a lost lease) in Prometheus text format at
    /// http://ADDR/metrics while the command runs, e.g. 127.0.0.1:9464.
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,

    /// Keep the command in redlease's process group, so it can read from the
    /// terminal; signals then reach the command alone, not its children.
    #[arg(long)]
    foreground: bool,

    /// The command to run, and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

impl RunArgs {
    /// `--quiet`: also keeps the library's warnings out of stderr.
    pub fn quiet(&self) -> bool {
        self.take.quiet
    }
}

pub async fn run(args: RunArgs) -> Exit {
    run_under(args, None).await
}

/// What the command runs under: a lease of the locks, or the lead of an
/// election (`elect`), whose lease is what [`supervise`] watches.
enum Under {
    Lease(Lease),
    Lead(Leadership),
}

impl Under {
    fn lease(&self) -> &Lease {
        match self {
            Under::Lease(lease) => lease,
            Under::Lead(leadership) => leadership.lease(),
        }
    }

    /// Gives it back: releases the locks, or resigns the lead.
    async fn release(self) -> Result<(), Error> {
        match self {
            Under::Lease(lease) => lease.release().await,
            Under::Lead(leadership) => leadership.resign().await,
        }
    }
}

/// `run` (`lead` is `None`), or `elect` with `lead` the value to lead
/// with: the same supervision of the command, under the locks the flags
/// name or under the lead of the election --key names.
pub async fn run_under(args: RunArgs, lead: Option<String>) -> Exit {
    let take = &args.take;
    let want = match &lead {
        None => take.want(),
        Some(_) => take.want_lead(),
    };
    let want = match want {
        Ok(want) => want,
        Err(exit) => return exit,
    };
    // Before any lock I/O: from here on a signal cannot kill redlease
    // between taking the lock and handing it back.
    let mut signals = match Signals::install_or_exit() {
        Ok(s) => s,
        Err(exit) => return exit,
    };
    if let Some(addr) = args.metrics_addr {
        // Serves from this runtime until redlease exits.
        if let Err(e) = crate::metrics_http::serve(addr).await {
            return Exit::with(
                exit::USAGE,
                format!("cannot serve metrics at {addr}: {}", chain(&*e)),
            );
        }
    }
    // Fencing on: the command gets the lease's tokens (REDLEASE_FENCING_TOKEN).
    let doing: Vec<String> = args
        .command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let locker = match take.locker(&want, &doing.join(" ")) {
        Ok(locker) => locker,
        Err(exit) => return exit,
    };
    let mut ttl_warned = false;
    if let Some(warning) = ttl_warning(take.ttl).filter(|_| !take.quiet) {
        eprintln!("redlease: {warning}");
        ttl_warned = true;
    }
    if let Err(exit) = check_servers(&locker).await {
        return exit;
    }

    let started = Instant::now();
    let mut first_try = Duration::ZERO;
    let taken = match &lead {
        None => take
            .take(
                &locker,
                &want,
                true,
                &mut signals,
                &mut first_try,
                Taker::Run,
            )
            .await
            .map(Under::Lease),
        Some(value) => take
            .campaign(&locker, &want, value, &mut signals, &mut first_try)
            .await
            .map(Under::Lead),
    };
    let under = match taken {
        Ok(under) => under,
        Err(exit) => return exit,
    };
    tracing::info!(
        key = %want.listed(),
        hold = ?want.hold,
        fencing_token = ?under.lease().fencing_token(),
        lead = lead.is_some(),
        waited = %duration::show(started.elapsed()),
        "took the lock; starting the command"
    );
    if let Some(warning) = round_trip_warning(take.ttl, first_try) {
        if !take.quiet && !ttl_warned {
            eprintln!("redlease: {warning}");
        }
    }
    let mut guardian = match Guardian::start(args.grace) {
        Ok(guardian) => guardian,
        Err(e) => {
            let _ = under.release().await;
            locker.close().await;
            return Exit::with(
                exit::INTERNAL,
                format!(
                    "cannot start the guardian process (it stops the command if redlease \
                     dies): {}; the command was not run",
                    chain(&e)
                ),
            );
        }
    };
    let mut child = match spawn(&args, &under, &guardian) {
        Ok(child) => child,
        Err(e) => {
            let guardian = guardian.dismiss();
            // Nothing ran under the lock: its release result is moot.
            let _ = under.release().await;
            locker.close().await;
            guardian.reap().await;
            return cannot_spawn(&args.command[0], &e);
        }
    };
    let held = match &under {
        Under::Lease(_) => want.held(),
        Under::Lead(_) => format!("the lead of {}", want.listed()),
    };
    let ended = supervise(
        &mut child,
        under.lease(),
        &mut signals,
        &mut guardian,
        &args,
        &held,
    )
    .await;
    // The command ended: nothing is left to guard. What it left running
    // behind it is not stopped on a normal end, nor if redlease dies while
    // releasing (the keys then expire by their TTL).
    let guardian = guardian.dismiss();
    tracing::info!(key = %want.listed(), status = ?ended.status, "the command ended; releasing");
    let released = under.release().await;
    // The release returns once a quorum confirmed; its requests to slower
    // nodes would die with this process and leave a key there until its
    // TTL: let them finish first.
    locker.close().await;
    guardian.reap().await;
    finish(ended, released, &held)
}

/// How long a lease outlives its last renewal: renewed every third of the
/// TTL, it is lost when none has come through by two thirds (less the
/// drift allowance).
fn renewal_window(ttl: Duration) -> Duration {
    ttl * 2 / 3
}

/// The library's drift allowance, 1% of the TTL + 2 ms: a lease counts as
/// lost this long before its validity ends, and that is when nothing of
/// the command may run any more: the kill-by time of `run` itself and of
/// its guardian ([`Deadlines::kill_by`]).
fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// Why `ttl` is too short to keep, if it is, whatever the nodes: the lease
/// would not survive an [`ORDINARY_PAUSE`].
fn ttl_warning(ttl: Duration) -> Option<String> {
    let window = renewal_window(ttl);
    (window < ORDINARY_PAUSE).then(|| {
        format!(
            "warning: --ttl {} is too short to keep: the lease is renewed every {} and lost \
             when no renewal got through for {}, less than an ordinary pause of a busy \
             machine or a Redis node ({}); use --ttl {} or more",
            duration::show(ttl),
            duration::show(ttl / 3),
            duration::show(window),
            duration::show(ORDINARY_PAUSE),
            duration::show(ORDINARY_PAUSE * 3 / 2)
        )
    })
}

/// Why `ttl` is too short for these nodes, if it is: the first attempt to
/// take the lock (`first_try`, on connections `check_servers` opened: one
/// round of requests to every node, two with the fencing write-back) took
/// more than a quarter of the time a renewal has, so a renewal that meets
/// a slow moment has too little room for another try.
fn round_trip_warning(ttl: Duration, first_try: Duration) -> Option<String> {
    let window = renewal_window(ttl);
    (first_try * 4 > window).then(|| {
        format!(
            "warning: --ttl {} may be too short to keep: taking the lock took {} for one \
             round of requests, and a renewal must get through within {} (room for fewer \
             than 4 tries); use --ttl {} or more",
            duration::show(ttl),
            duration::show(first_try),
            duration::show(window),
            duration::show(first_try * 6)
        )
    })
}

/// Starts the command with the lock's name and fencing tokens in its
/// environment (and a lead's term and value), and its stdio shared with
/// ours; it announces itself to the `guardian` before it execs.
fn spawn(args: &RunArgs, under: &Under, guardian: &Guardian) -> io::Result<Child> {
    let lease = under.lease();
    let token = |name: &str| {
        lease
            .fencing_token_of(name)
            .expect("run's Locker draws fencing tokens")
    };
    // One NAME=TOKEN line per name, in the lease's (sorted) order.
    let tokens: Vec<String> = lease
        .resources()
        .map(|name| format!("{name}={}", token(name)))
        .collect();
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .env("REDLEASE_KEY", lease.resource())
        .env(
            "REDLEASE_FENCING_TOKEN",
            token(lease.resource()).to_string(),
        )
        .env("REDLEASE_FENCING_TOKENS", tokens.join("\n"));
    if let Under::Lead(leadership) = under {
        // The term is the lead's fencing token (REDLEASE_FENCING_TOKEN).
        cmd.env("REDLEASE_TERM", leadership.term().to_string())
            .env("REDLEASE_LEADER_VALUE", leadership.value());
    }
    if !args.foreground {
        cmd.process_group(0);
    }
    #[cfg(target_os = "linux")]
    {
        // If redlease itself is killed (SIGKILL, OOM), nobody renews the
        // lease any more: the command must not go on unprotected. The
        // kernel sends it SIGTERM when the forking thread exits; that is a
        // runtime worker thread, which lives until redlease exits. A second
        // line behind the guardian, which stops the whole group.
        let parent = process::getpid();
        // SAFETY: the closure only makes async-signal-safe syscalls (rustix
        // wraps them without allocating). pre_exec itself has no safe form.
        unsafe {
            cmd.pre_exec(move || {
                process::set_parent_process_death_signal(Some(Signal::TERM))?;
                // We may have died between fork and prctl.
                if process::getppid() != Some(parent) {
                    return Err(io::Error::other(
                        "redlease exited before the command started",
                    ));
                }
                Ok(())
            });
        }
    }
    // After the hook above (hooks run in order) and after the new group
    // exists (std sets it before any hook): the guardian learns the group
    // before anything of the command runs.
    // SAFETY: the hook makes one send(2) on a socket it holds, with its line
    // built on the stack: async-signal-safe, no allocation.
    unsafe {
        cmd.pre_exec(guardian.announce(!args.foreground));
    }
    cmd.spawn()
}

fn cannot_spawn(program: &OsString, e: &io::Error) -> Exit {
    let program = program.to_string_lossy();
    match e.kind() {
        io::ErrorKind::NotFound => {
            Exit::with(exit::NOT_FOUND, format!("{program}: command not found"))
        }
        _ => Exit::with(
            exit::CANNOT_EXECUTE,
            format!("{program}: cannot execute: {}", chain(e)),
        ),
    }
}

/// How the command ended.
struct Ended {
    status: io::Result<ExitStatus>,
    /// The lease was lost while it ran (and it was told to stop).
    lost: Option<LostReason>,
}

/// When the command must be stopped, read from the lease's validity as
/// renewals move it on: SIGKILL at the kill-by time, one drift allowance
/// before the validity ends (the time the guardian is given, and the
/// latest the library reports an unrenewed lease lost), and SIGTERM
/// [`lead`](Self::lead) before that if no renewal has moved it on by then.
#[derive(Clone, Copy, Debug)]
struct Deadlines {
    /// One drift allowance ([`drift`]).
    margin: Duration,
    /// How long before the kill-by time a command whose renewals are not
    /// getting through is told to stop: `--grace`, at most a third of the
    /// TTL ([`stop_lead`]).
    lead: Duration,
}

impl Deadlines {
    fn new(ttl: Duration, grace: Duration) -> Deadlines {
        Deadlines {
            margin: drift(ttl),
            lead: grace.min(stop_lead(ttl)),
        }
    }

    /// The time by which nothing of the command may run, for a lease
    /// valid until `valid_until`.
    fn kill_by(&self, valid_until: Instant) -> Instant {
        valid_until.checked_sub(self.margin).unwrap_or(valid_until)
    }

    /// When the command is told to stop unless a renewal has moved
    /// `valid_until` on by then.
    fn term_at(&self, valid_until: Instant) -> Instant {
        let kill_by = self.kill_by(valid_until);
        kill_by.checked_sub(self.lead).unwrap_or(kill_by)
    }
}

/// The most a command whose renewals are not getting through is given to
/// exit before the kill-by time: a third of the TTL. Renewed every third,
/// a lease is then stopped once renewals have failed for about another
/// third, and killed at the end of the last one; a renewal that gets
/// through before that leaves the command alone.
fn stop_lead(ttl: Duration) -> Duration {
    ttl / 3
}

/// Stops the command in time: what it was told so far, and what is due
/// next.
struct Stopper<'a> {
    target: Target,
    lease: &'a Lease,
    deadlines: Deadlines,
    grace: Duration,
    /// What the run holds, for messages ([`Want::held`](crate::take::Want::held)).
    held: &'a str,
    /// The first request to stop (SIGTERM for a lease running out or lost,
    /// or the stop signal passed on), and when it went out.
    told: Option<(Signal, tokio::time::Instant)>,
    /// It was told because renewals were not getting through, before the
    /// lease's fate was known.
    running_out: bool,
    /// SIGKILL went out.
    killed: bool,
}

impl Stopper<'_> {
    /// The kill-by time as the lease's validity stands now.
    fn kill_by(&self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.deadlines.kill_by(self.lease.valid_until()))
    }

    /// When SIGKILL is due, unless it went out: `--grace` after the first
    /// request to stop, and in any case at the kill-by time.
    fn kill_at(&self) -> Option<tokio::time::Instant> {
        if self.killed {
            return None;
        }
        let kill_by = self.kill_by();
        Some(self.grace_ends().map_or(kill_by, |at| at.min(kill_by)))
    }

    /// `--grace` after the first request to stop (`None` if none went out,
    /// or the grace reaches past the clock's range).
    fn grace_ends(&self) -> Option<tokio::time::Instant> {
        self.told.and_then(|(_, at)| at.checked_add(self.grace))
    }

    /// When SIGTERM is due for a lease running out, unless the command was
    /// told to stop already.
    fn term_at(&self) -> Option<tokio::time::Instant> {
        let at =
            || tokio::time::Instant::from_std(self.deadlines.term_at(self.lease.valid_until()));
        self.told.is_none().then(at)
    }

    /// The next time something may be due.
    fn next(&self) -> Option<tokio::time::Instant> {
        [self.kill_at(), self.term_at()].into_iter().flatten().min()
    }

    /// Sends what is due now, if anything: a renewal may have moved the
    /// validity on since [`next`](Self::next) was read.
    fn act(&mut self, exited: bool) {
        let now = tokio::time::Instant::now();
        if self.kill_at().is_some_and(|at| now >= at) {
            self.kill(now, exited);
        } else if !exited && self.term_at().is_some_and(|at| now >= at) {
            self.target.stop(Signal::TERM);
            self.told = Some((Signal::TERM, now));
            self.running_out = true;
            let kill_in = self.kill_at().map_or(Duration::ZERO, |at| at - now);
            eprintln!(
                "redlease: renewals of {} are not getting through and it is valid for {} \
                 more; sent the command SIGTERM (SIGKILL in {} if it has not exited, \
                 before the lease runs out)",
                self.held,
                duration::show(self.lease.remaining()),
                duration::show(kill_in)
            );
        }
    }

    /// SIGKILL to the command's group, saying why: the grace is over, or
    /// the kill-by time came first.
    fn kill(&mut self, now: tokio::time::Instant, exited: bool) {
        self.target.stop(Signal::KILL);
        self.killed = true;
        let who = match exited {
            false => "the command",
            true => "the command exited, but processes it started",
        };
        let sent = match exited {
            false => "sent SIGKILL",
            true => "sent them SIGKILL",
        };
        let by_grace = self
            .grace_ends()
            .is_some_and(|at| at <= now && at <= self.kill_by());
        match self.told {
            Some((sig, _)) if by_grace => eprintln!(
                "redlease: {who} did not exit within {} of {}; {sent}",
                duration::show(self.grace),
                signals::name(sig)
            ),
            _ => eprintln!(
                "redlease: {who} had not exited with {} valid for {} more; {sent}, so \
                 that nothing of the command runs once the lock can be another's",
                self.held,
                duration::show(self.lease.remaining())
            ),
        }
    }

    /// The lease was lost: SIGTERM if nothing was sent yet (SIGKILL
    /// follows when [`kill_at`](Self::kill_at) says).
    fn lost(&mut self, why: LostReason) {
        let now = tokio::time::Instant::now();
        if self.told.is_some() {
            eprintln!("redlease: lost {} while the command ran ({why})", self.held);
            return;
        }
        self.target.stop(Signal::TERM);
        self.told = Some((Signal::TERM, now));
        let kill_in = self
            .kill_at()
            .map_or(Duration::ZERO, |at| at.saturating_duration_since(now));
        eprintln!(
            "redlease: lost {} while the command ran ({why}); sent it SIGTERM (SIGKILL in {})",
            self.held,
            duration::show(kill_in)
        );
    }

    /// A signal redlease received: passed on; a request to stop starts
    /// the grace.
    fn forward(&mut self, sig: Signal) {
        self.target.forward(sig);
        // A command that ignores the request must not keep the lock for
        // ever: the same grace as for a lost lease.
        if signals::asks_to_stop(sig) && self.told.is_none() {
            self.told = Some((sig, tokio::time::Instant::now()));
        }
    }
}

/// Waits for the command, passing signals on, stopping it if the lease is
/// lost or running out, and keeping the guardian's kill-by time up with
/// the renewals. Once the lease is lost, nothing of the command's group
/// runs past the kill-by time.
async fn supervise(
    child: &mut Child,
    lease: &Lease,
    signals: &mut Signals,
    guardian: &mut Guardian,
    args: &RunArgs,
    held: &str,
) -> Ended {
    let Some(target) = child
        .id()
        .and_then(|pid| Target::new(pid, !args.foreground))
    else {
        return Ended {
            status: child.wait().await,
            lost: None,
        };
    };
    let mut stopper = Stopper {
        target,
        lease,
        deadlines: Deadlines::new(args.take.ttl, args.grace),
        grace: args.grace,
        held,
        told: None,
        running_out: false,
        killed: false,
    };
    let lost = lease.lost();
    tokio::pin!(lost);
    let mut lost_why = None;
    // Renewals move the lease's end every third of the TTL; the guardian
    // hears of it a little later, which only makes its kill-by earlier.
    let mut renewed = tokio::time::interval(
        (args.take.ttl / 6).clamp(Duration::from_millis(10), Duration::from_secs(1)),
    );
    renewed.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            why = &mut lost, if lost_why.is_none() => {
                lost_why = Some(why);
                stopper.lost(why);
            }
            () = sleep_until(stopper.next()) => stopper.act(false),
            sig = signals.recv() => stopper.forward(sig),
            _ = renewed.tick() => {
                guardian.kill_by(stopper.deadlines.kill_by(lease.valid_until()));
            }
        }
    };
    // The command exited. Told to stop, what it started may linger in its
    // group: no process of it outlives the grace, nor the kill-by time.
    // Told to stop because renewals were not getting through, the lease's
    // fate is still open: it is lost by the kill-by time at the latest,
    // unless a renewal gets through first.
    loop {
        let lingering = stopper.told.is_some() && !stopper.killed && target.group_alive();
        let open = stopper.running_out && lost_why.is_none();
        if open
            && stopper
                .deadlines
                .term_at(lease.valid_until())
                .checked_duration_since(Instant::now())
                .is_some_and(|ahead| !ahead.is_zero())
        {
            eprintln!(
                "redlease: renewals of {held} got through again after the command was told \
                 to stop"
            );
            stopper.running_out = false;
            continue;
        }
        if !lingering && !open {
            break;
        }
        if lingering {
            stopper.act(true);
        }
        // Looks again soon (the group's end is not signalled), and not
        // after SIGKILL is due.
        let mut look = tokio::time::Instant::now() + GROUP_POLL;
        if let Some(kill_at) = stopper.kill_at().filter(|_| lingering) {
            look = look.min(kill_at);
        }
        tokio::select! {
            why = &mut lost, if lost_why.is_none() => {
                lost_why = Some(why);
                eprintln!("redlease: lost {held} ({why}) after the command exited");
            }
            () = tokio::time::sleep_until(look) => {}
        }
    }
    Ended {
        status,
        lost: lost_why,
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The exit after the command ended and the lock was given back.
/// `held` names what the run held ([`Want::held`]).
fn finish(ended: Ended, released: Result<(), Error>, held: &str) -> Exit {
    let code = match ended.status {
        Ok(status) => exit::of_status(status),
        Err(e) => {
            return Exit::with(
                exit::INTERNAL,
                format!("lost track of the command: {}", chain(&e)),
            )
        }
    };
    if ended.lost.is_some() {
        // Already said when it happened; the release cannot succeed.
        return Exit::code(exit::LOST);
    }
    match released {
        Ok(()) => Exit::code(code),
        Err(e @ Error::NotHeld { .. }) => Exit::with(
            exit::LOST,
            format!(
                "the command finished, but {held} was not ours to the end: {}",
                chain(&e)
            ),
        ),
        // A release the ACL refuses fails every time: a success would hide
        // that each run leaves its lock held for a whole TTL.
        Err(e)
            if code == exit::OK
                && e.node_errors()
                    .iter()
                    .any(|n| n.kind().is_permission_refused()) =>
        {
            Exit::with(
                exit::NO_PERMISSION,
                format!(
                    "the command finished, but the release was refused for a missing permission \
                     (the lock stays held until its TTL runs out; `redlease doctor` lists what \
                     the user lacks): {}",
                    chain(&e)
                ),
            )
        }
        // Too few nodes are left that may hold it to make a quorum (it was
        // released on some, and our token was gone on the others that
        // answered): the lock is free, nothing to warn of.
        Err(e) if !e.may_still_be_held() => Exit::code(code),
        // The work was protected throughout; only the release failed, and
        // the keys expire by their TTL.
        Err(e) => Exit::with(
            code,
            format!(
                "warning: the command finished but the release failed, and the nodes that did \
                 not answer may hold the lock until its TTL runs out: {}",
                chain(&e)
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_ttl_that_cannot_outlast_an_ordinary_pause_is_too_short() {
        // Lost 2/3 of the TTL after the last renewal: 150 ms survives 100 ms.
        assert!(ttl_warning(ms(149)).is_some());
        assert!(ttl_warning(ms(150)).is_none());
        assert!(ttl_warning(ms(10_000)).is_none());
        let text = ttl_warning(ms(30)).unwrap();
        assert!(text.contains("--ttl 30ms"), "{text}");
        assert!(text.contains("every 10ms"), "{text}");
        assert!(text.contains("for 20ms"), "{text}");
    }

    #[test]
    fn a_ttl_with_room_for_fewer_than_four_round_trips_is_too_short() {
        // 1 s: a renewal has 666 ms; 4 tries of 167 ms do not fit.
        assert!(round_trip_warning(ms(1_000), ms(167)).is_some());
        assert!(round_trip_warning(ms(1_000), ms(166)).is_none());
        assert!(round_trip_warning(ms(10_000), ms(5)).is_none());
        let text = round_trip_warning(ms(1_000), ms(400)).unwrap();
        assert!(text.contains("took 400ms"), "{text}");
        assert!(text.contains("--ttl 2.4s or more"), "{text}");
    }

    #[test]
    fn a_running_out_lease_stops_the_command_before_its_validity_ends() {
        let end = Instant::now() + Duration::from_secs(60);
        // 3 s: one drift allowance is 32 ms; SIGTERM goes a third of the
        // TTL before SIGKILL, the grace being longer.
        let d = Deadlines::new(ms(3_000), ms(5_000));
        assert_eq!(end - d.kill_by(end), ms(32));
        assert_eq!(end - d.term_at(end), ms(1_032));
        // A shorter grace is what the command gets.
        let d = Deadlines::new(ms(3_000), ms(200));
        assert_eq!(end - d.term_at(end), ms(232));
        // No grace: SIGTERM and SIGKILL at the kill-by time.
        let d = Deadlines::new(ms(10_000), Duration::ZERO);
        assert_eq!(d.term_at(end), d.kill_by(end));
        assert_eq!(end - d.kill_by(end), ms(102));
        // The SIGTERM comes after a renewal was due (a third of the TTL
        // after the last one, when two thirds are left) and missed.
        for ttl in [ms(150), ms(1_000), ms(3_000), ms(10_000), ms(3_600_000)] {
            let d = Deadlines::new(ttl, Duration::MAX);
            let left_at_term = end - d.term_at(end);
            let left_at_renewal = ttl * 2 / 3 - d.margin;
            assert!(left_at_term < left_at_renewal, "{ttl:?}: {left_at_term:?}");
            assert!(left_at_term > d.margin, "{ttl:?}: {left_at_term:?}");
        }
    }

    #[test]
    fn only_stop_requests_escalate() {
        for sig in [Signal::TERM, Signal::INT, Signal::QUIT] {
            assert!(signals::asks_to_stop(sig), "{}", signals::name(sig));
        }
        for sig in [Signal::HUP, Signal::USR1, Signal::USR2] {
            assert!(!signals::asks_to_stop(sig), "{}", signals::name(sig));
        }
    }
}
