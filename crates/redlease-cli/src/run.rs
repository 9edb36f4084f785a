//! `redlease run`: a command under a distributed lock, like flock(1) across
//! machines. Acquire, keep the lease alive while the command runs, stop the
//! command if the lease is lost or redlease is asked to stop (SIGKILL after
//! `--grace` if it does not), pass signals on, release at the end. If
//! redlease itself dies, its guardian process stops the command (see
//! guardian.rs).

use std::ffi::OsString;
use std::io;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use clap::Args;
use redlease::{Error, Lease, LostReason};
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

While the command runs, the lease is renewed every third of --ttl. If it is \
lost anyway (nodes down or unreachable for longer than the TTL, or the lock \
was taken over), the command gets SIGTERM, then SIGKILL after --grace, and \
redlease exits with 75. The command runs in its own process group, so these \
reach every process it started (a shell script's children too). SIGTERM, \
SIGINT and SIGQUIT sent to redlease are passed on the same way, SIGKILL \
following after --grace if the command has not exited; SIGHUP is passed on \
without (daemons take it as a reload); SIGUSR1 and SIGUSR2 go to the command \
alone. If redlease itself is killed (SIGKILL, out of memory), a small \
guardian process (redlease __guardian) stops the command's group: SIGTERM at \
once, SIGKILL after --grace or before the lease could expire, whichever is \
first. A process that leaves the group (setsid) escapes both. When the \
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
nodes answered; 75 lease lost; 77 \
the command exited 0 but the release was refused (ACL: NOPERM); 126/127 command not executable / not found. See `redlease --help`.")]
pub struct RunArgs {
    #[command(flatten)]
    take: TakeArgs,

    /// How long the command may take to exit after it was told to stop
    /// (SIGTERM on a lost lease; SIGTERM, SIGINT or SIGQUIT passed on; redlease
    /// killed) before its process group gets SIGKILL.
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
    let take = &args.take;
    let want = match take.want() {
        Ok(want) => want,
        Err(exit) => return exit,
    };
    // Before any lock I/O: from here on a signal cannot kill redlease
    // between taking the lock and handing it back.
    let mut signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            return Exit::with(
                exit::INTERNAL,
                format!("cannot handle signals: {}", chain(&e)),
            )
        }
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
    let locker = match take.locker(&want) {
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
    let taken = take
        .take(
            &locker,
            &want,
            true,
            &mut signals,
            &mut first_try,
            Taker::Run,
        )
        .await;
    let lease = match taken {
        Ok(lease) => lease,
        Err(exit) => return exit,
    };
    tracing::info!(
        key = %want.listed(),
        hold = ?want.hold,
        fencing_token = ?lease.fencing_token(),
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
            let _ = lease.release().await;
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
    let mut child = match spawn(&args, &lease, &guardian) {
        Ok(child) => child,
        Err(e) => {
            let guardian = guardian.dismiss();
            // Nothing ran under the lock: its release result is moot.
            let _ = lease.release().await;
            locker.close().await;
            guardian.reap().await;
            return cannot_spawn(&args.command[0], &e);
        }
    };
    let held = want.held();
    let ended = supervise(
        &mut child,
        &lease,
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
    let released = lease.release().await;
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
/// lost this long before its validity ends.
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
/// environment, and its stdio shared with ours; it announces itself to the
/// `guardian` before it execs.
fn spawn(args: &RunArgs, lease: &Lease, guardian: &Guardian) -> io::Result<Child> {
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

/// Waits for the command, passing signals on, stopping it if the lease is
/// lost, and keeping the guardian's kill-by time up with the renewals.
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
    let lost = lease.lost();
    tokio::pin!(lost);
    let mut lost_why = None;
    // SIGKILL time: --grace after the first request to stop, and the
    // signal that made it (for the message).
    let mut kill_at: Option<tokio::time::Instant> = None;
    let mut told = Signal::TERM;
    // Renewals move the lease's end every third of the TTL; the guardian
    // hears of it a little later, which only makes its kill-by earlier.
    let mut renewed = tokio::time::interval(
        (args.take.ttl / 6).clamp(Duration::from_millis(10), Duration::from_secs(1)),
    );
    renewed.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let margin = drift(args.take.ttl);
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            why = &mut lost, if lost_why.is_none() => {
                lost_why = Some(why);
                target.stop(Signal::TERM);
                let kill_in = match kill_at {
                    Some(at) => at.saturating_duration_since(tokio::time::Instant::now()),
                    None => args.grace,
                };
                eprintln!(
                    "redlease: lost {} while the command ran ({why}); sent it SIGTERM \
                     (SIGKILL in {})",
                    held,
                    duration::show(kill_in)
                );
                if kill_at.is_none() {
                    told = Signal::TERM;
                    kill_at = Some(tokio::time::Instant::now() + args.grace);
                }
            }
            () = sleep_until(kill_at), if kill_at.is_some() => {
                kill_at = None;
                target.stop(Signal::KILL);
                eprintln!(
                    "redlease: the command did not exit within {} of {}; sent SIGKILL",
                    duration::show(args.grace),
                    signals::name(told)
                );
            }
            sig = signals.recv() => {
                target.forward(sig);
                // A command that ignores the request must not keep the lock
                // for ever: the same grace as for a lost lease.
                if signals::asks_to_stop(sig) && kill_at.is_none() {
                    told = sig;
                    kill_at = Some(tokio::time::Instant::now() + args.grace);
                }
            }
            _ = renewed.tick() => {
                if let Some(at) = lease.valid_until().checked_sub(margin) {
                    guardian.kill_by(at);
                }
            }
        }
    };
    if let Some(kill_at) = kill_at {
        // The command exited, but what it started may linger: no process
        // of it may outlive the grace now that the lock is gone.
        while target.group_alive() {
            if tokio::time::Instant::now() >= kill_at {
                target.stop(Signal::KILL);
                break;
            }
            tokio::time::sleep(GROUP_POLL).await;
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
    fn only_stop_requests_escalate() {
        for sig in [Signal::TERM, Signal::INT, Signal::QUIT] {
            assert!(signals::asks_to_stop(sig), "{}", signals::name(sig));
        }
        for sig in [Signal::HUP, Signal::USR1, Signal::USR2] {
            assert!(!signals::asks_to_stop(sig), "{}", signals::name(sig));
        }
    }
}
