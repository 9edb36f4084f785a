//! The guardian: a small process that stops `redlease run`'s command if
//! redlease itself dies first.
//!
//! # What it guarantees
//!
//! Only redlease renews the lease while the command runs. If redlease is
//! killed (SIGKILL, the OOM killer) or crashes, the lock expires within its
//! TTL and another machine may take it while the work goes on here. The
//! parent-death signal set on the command (see `spawn` in run.rs) reaches
//! the command alone, not what it started (a script's `sleep`, `make`'s
//! compilers), and nothing follows it with SIGKILL. The guardian stops the
//! command's whole process group: SIGTERM as soon as redlease is gone,
//! SIGKILL after `--grace`, and in any case by the time redlease itself
//! would have given the lease up (one drift allowance, 1% of the TTL + 2 ms,
//! before its validity ends), so the work is dead before the lock can be
//! someone else's.
//!
//! # How
//!
//! Before the command starts, redlease runs its own executable again
//! (`/proc/self/exe __guardian`: the very same build, whatever happened to
//! the file since) in a process group of its own, so that what is sent to
//! redlease's group (Ctrl-C, a supervisor stopping the job) does not reach
//! it. Its stdin is one end of a Unix socket pair; the other end is held by
//! redlease alone (close-on-exec: neither the guardian nor the command
//! inherits it). However redlease dies, the kernel closes that end and the
//! guardian reads end-of-file: no heartbeat to tune, no polling. A socket
//! rather than a pipe, so that a write to a guardian that is gone fails with
//! an error instead of raising SIGPIPE (see `announce`).
//!
//! The protocol is lines of ASCII:
//!
//! - `grace <ns>` (redlease, first): SIGTERM-to-SIGKILL delay, `--grace`.
//! - `group <pgid>` or `process <pid>` (the command itself, between fork and
//!   exec): what to stop; a `--foreground` command shares redlease's group
//!   and the terminal's job, so only the process is stopped then.
//! - `kill-by <ns>` (redlease, whenever renewals moved the lease's end): the
//!   CLOCK_MONOTONIC time by which the command must be dead. Both processes
//!   read the same clock, so delivery delays cannot make it later.
//! - `done` (redlease, after the command ended): stand down.
//!
//! End-of-file after `done` or before anything to stop: exit. End-of-file
//! otherwise: redlease died while the command ran; SIGTERM, SIGKILL at the
//! earlier of end-of-file + grace and kill-by, then wait a bounded time for
//! the group to be gone, and exit. It logs one line per signal, on stderr;
//! it never learns the token.
//!
//! # Races
//!
//! - redlease dies before the command is forked: end-of-file with nothing
//!   to stop; the guardian exits.
//! - redlease dies during the fork: the child announces itself before it
//!   execs, so there is no moment at which the command runs and the guardian
//!   does not know it. A child whose parent died before it set its
//!   parent-death signal does not exec at all.
//! - The guardian is gone (killed by hand): the child's announcement fails
//!   and the command is not started; once it runs, redlease warns once.
//! - Reuse of the group id: Linux hands out no id that a live process still
//!   uses as its group, so a group that still exists is the command's unless
//!   all of it ended and the pids wrapped around. Before every signal the
//!   guardian checks that the group still exists and that the process now
//!   holding its number, if any, is the one announced (same start time), so
//!   a number handed to a newer process is left alone.
//! - Outliving the job: the guardian exits on `done`, at end-of-file with
//!   nothing to stop, or once the group is gone; after SIGKILL it waits at
//!   most [`AFTER_KILL`]. redlease waits for it on a normal end.
//!
//! # Limits
//!
//! - As with any process-group based tool (timeout(1), a shell's job
//!   control), a process that leaves the group (setsid, setpgid; daemons do
//!   so on purpose) escapes. Only a cgroup would hold it, and that needs
//!   privileges redlease does not ask for.
//! - A kill of both redlease and the guardian (of a whole container or
//!   systemd unit) leaves nothing to guard: it kills the command too.
//! - A redlease that is stopped (SIGSTOP) or starved rather than dead keeps
//!   its end open, and the lease can run out meanwhile, as for any holder
//!   paused past its validity: fencing tokens are the remedy for that.
//! - It costs one sleeping process with no threads and no runtime.

use std::io::{self, BufRead};
use std::os::fd::{AsFd, OwnedFd};
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::net::{AddressFamily, SendFlags, SocketFlags, SocketType};
use rustix::process::{self, Pid, Signal};
use rustix::time::ClockId;

use crate::duration;

/// The hidden subcommand that runs the guardian; main.rs dispatches it
/// before parsing the command line.
pub const SUBCOMMAND: &str = "__guardian";

/// How often the guardian looks whether the command is gone.
const POLL: Duration = Duration::from_millis(20);

/// Every how many looks it also scans /proc for zombies (see
/// `Target::running`).
const SCAN_EVERY: u32 = 10;

/// How long the guardian waits for the group to vanish after SIGKILL (a
/// process in uninterruptible sleep dies only when it wakes).
const AFTER_KILL: Duration = Duration::from_secs(2);

/// How long redlease waits for its guardian to exit after `done`.
const REAP: Duration = Duration::from_secs(2);

/// redlease's side: the guardian process and the only writing end of its
/// socket. Dropping it without [`dismiss`](Self::dismiss) reads as
/// "redlease is gone" to the guardian.
pub struct Guardian {
    socket: Arc<OwnedFd>,
    process: tokio::process::Child,
    /// The last `kill-by` sent.
    kill_by: Option<Instant>,
    /// A send failed: the guardian is gone (said once).
    gone: bool,
}

impl Guardian {
    /// Starts the guardian; it stops the command if redlease dies, waiting
    /// `grace` between SIGTERM and SIGKILL.
    pub fn start(grace: Duration) -> io::Result<Guardian> {
        let (ours, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )?;
        let mut cmd = tokio::process::Command::new(own_executable()?);
        cmd.arg0("redlease")
            .arg(SUBCOMMAND)
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .process_group(0);
        let guardian = Guardian {
            socket: Arc::new(ours),
            process: cmd.spawn()?,
            kill_by: None,
            gone: false,
        };
        send(
            &guardian.socket,
            format!("grace {}\n", nanos(grace)).as_bytes(),
        )?;
        Ok(guardian)
    }

    /// What the command runs between fork and exec (`pre_exec`): tells the
    /// guardian its pid, as a process group to stop (`own_group`) or a
    /// process. Async-signal-safe: no allocation, one send(2). Fails, and
    /// the command is not run, if the guardian is gone.
    pub fn announce(&self, own_group: bool) -> impl FnMut() -> io::Result<()> + Send + Sync {
        let socket = Arc::clone(&self.socket);
        move || {
            let mut line = Line::default();
            line.push(if own_group { b"group " } else { b"process " });
            line.push_number(
                process::getpid()
                    .as_raw_nonzero()
                    .get()
                    .unsigned_abs()
                    .into(),
            );
            line.push(b"\n");
            send(&socket, line.bytes())
        }
    }

    /// Tells the guardian the time by which the command must be dead if
    /// redlease dies: `at`, when renewals moved it. Never blocks.
    pub fn kill_by(&mut self, at: Instant) {
        if self.kill_by == Some(at) || self.gone {
            return;
        }
        self.kill_by = Some(at);
        let line = format!("kill-by {}\n", monotonic_nanos(at));
        let sent = rustix::net::send(
            &*self.socket,
            line.as_bytes(),
            SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
        );
        match sent {
            Ok(n) if n == line.len() => {}
            // A full buffer: the next update says it again.
            Err(rustix::io::Errno::AGAIN) => self.kill_by = None,
            _ => {
                self.gone = true;
                eprintln!(
                    "redlease: warning: the guardian process exited; if redlease dies now, \
                     the command is not stopped"
                );
            }
        }
    }

    /// Stands the guardian down (the command ended) and closes the socket;
    /// [`Dismissed::reap`] then waits for it to exit.
    pub fn dismiss(self) -> Dismissed {
        if !self.gone {
            let _ = send(&self.socket, b"done\n");
        }
        Dismissed {
            process: self.process,
        }
    }
}

/// A guardian told to stand down.
pub struct Dismissed {
    process: tokio::process::Child,
}

impl Dismissed {
    /// Waits for the guardian to exit (at once, normally), at most [`REAP`];
    /// kills it past that, so that none is left behind.
    pub async fn reap(mut self) {
        if tokio::time::timeout(REAP, self.process.wait())
            .await
            .is_err()
        {
            let _ = self.process.kill().await;
        }
    }
}

/// The running binary, for re-executing it.
fn own_executable() -> io::Result<std::path::PathBuf> {
    // The kernel's link to the running file works even if it was replaced
    // or deleted since (an upgrade under a long job).
    if cfg!(target_os = "linux") {
        Ok("/proc/self/exe".into())
    } else {
        std::env::current_exe()
    }
}

/// Writes all of `bytes` (a line, far below the socket's buffer) without
/// SIGPIPE if the other end is gone.
fn send(socket: &OwnedFd, bytes: &[u8]) -> io::Result<()> {
    let sent = rustix::net::send(socket.as_fd(), bytes, SendFlags::NOSIGNAL)?;
    match sent == bytes.len() {
        true => Ok(()),
        false => Err(io::ErrorKind::WriteZero.into()),
    }
}

/// A line built without allocating, for use between fork and exec.
#[derive(Default)]
struct Line {
    buf: [u8; 32],
    len: usize,
}

impl Line {
    fn push(&mut self, bytes: &[u8]) {
        let end = (self.len + bytes.len()).min(self.buf.len());
        self.buf[self.len..end].copy_from_slice(&bytes[..end - self.len]);
        self.len = end;
    }

    fn push_number(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.push(&digits[i..]);
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Now on CLOCK_MONOTONIC, which both processes read (and `Instant` is
/// built on), in nanoseconds.
fn now_nanos() -> u64 {
    let t = rustix::time::clock_gettime(ClockId::Monotonic);
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let sub = u64::try_from(t.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(sub)
}

/// `at` on CLOCK_MONOTONIC, in nanoseconds.
fn monotonic_nanos(at: Instant) -> u64 {
    let (clock, now) = (now_nanos(), Instant::now());
    match at.checked_duration_since(now) {
        Some(ahead) => clock.saturating_add(nanos(ahead)),
        None => clock.saturating_sub(nanos(now.duration_since(at))),
    }
}

/// What the guardian was told.
#[derive(Debug, Default, PartialEq)]
struct Orders {
    grace: Duration,
    target: Option<Target>,
    /// CLOCK_MONOTONIC nanoseconds.
    kill_by: Option<u64>,
    done: bool,
}

impl Orders {
    /// Applies one line; anything else is ignored (a line cut short by
    /// redlease's death never reaches here).
    fn apply(&mut self, line: &str) {
        let (word, value) = line.split_once(' ').unwrap_or((line, ""));
        let number = value.parse::<u64>().ok();
        let pid = number
            .and_then(|n| i32::try_from(n).ok())
            .and_then(Pid::from_raw);
        match (word, number, pid) {
            ("grace", Some(ns), _) => self.grace = Duration::from_nanos(ns),
            ("kill-by", Some(ns), _) => self.kill_by = Some(ns),
            ("group", _, Some(pid)) => self.target = Some(Target::new(pid, true)),
            ("process", _, Some(pid)) => self.target = Some(Target::new(pid, false)),
            ("done", ..) => self.done = true,
            _ => {}
        }
    }
}

/// The command to stop.
#[derive(Debug, PartialEq)]
struct Target {
    pid: Pid,
    group: bool,
    /// The announced process's start time (clock ticks since boot), read
    /// when it was announced; `None` if it was already gone then.
    started: Option<u64>,
}

impl Target {
    fn new(pid: Pid, group: bool) -> Target {
        Target {
            pid,
            group,
            started: start_time(pid),
        }
    }

    /// Whether anything of the command is left to signal, and it is still
    /// the command's (see "Races" above).
    fn alive(&self) -> bool {
        let ours = match (start_time(self.pid), self.started) {
            // The number is the announced process's.
            (Some(now), Some(then)) => now == then,
            // A newer process holds the number: ours is long gone.
            (Some(_), None) => false,
            // The leader is gone; its group keeps the number taken while
            // any member lives.
            (None, _) => self.group,
        };
        let exists = match self.group {
            true => process::test_kill_process_group(self.pid).is_ok(),
            false => process::test_kill_process(self.pid).is_ok(),
        };
        ours && exists
    }

    /// Whether a process of the target is more than a zombie. Once redlease
    /// is gone, the command's processes are reaped by init; where init does
    /// not reap (some containers), zombies would keep the group "alive" for
    /// the guardian's whole wait. Without /proc, every process counts. A
    /// scan of /proc: every [`SCAN_EVERY`] looks only.
    fn running(&self) -> bool {
        let me = self.pid.as_raw_nonzero().get();
        let live = |state: char| state != 'Z' && state != 'X';
        if !self.group {
            return stat_fields(me).is_none_or(|(state, _)| live(state));
        }
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return true;
        };
        entries
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter_map(stat_fields)
            .any(|(state, pgrp)| pgrp == me && live(state))
    }

    fn signal(&self, sig: Signal) {
        if self.alive() {
            let _ = match self.group {
                true => process::kill_process_group(self.pid, sig),
                false => process::kill_process(self.pid, sig),
            };
        }
    }

    fn describe(&self) -> String {
        match self.group {
            true => format!("its command's process group {}", self.pid.as_raw_nonzero()),
            false => format!("its command, pid {}", self.pid.as_raw_nonzero()),
        }
    }
}

/// The fields of /proc/PID/stat after the name (field 2), which is in
/// parentheses and may hold anything: `[0]` is field 3.
fn stat_after_name(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// Field 22 of /proc/PID/stat: when the process started.
fn start_time(pid: Pid) -> Option<u64> {
    stat_after_name(pid.as_raw_nonzero().get())?
        .get(19)?
        .parse()
        .ok()
}

/// A process's state (field 3: `R`, `S`, `Z`, ...) and group (field 5).
fn stat_fields(pid: i32) -> Option<(char, i32)> {
    let fields = stat_after_name(pid)?;
    let state = fields.first()?.chars().next()?;
    Some((state, fields.get(2)?.parse().ok()?))
}

/// The guardian process: `redlease __guardian`, its orders on stdin.
pub fn main() -> ExitCode {
    // Read now: once redlease is gone, the parent is someone else.
    let parent = process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
    let mut orders = Orders::default();
    let mut stdin = io::stdin().lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        match stdin.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        // A line without its newline was cut short: redlease died writing.
        let Some(text) = line.strip_suffix(b"\n") else {
            break;
        };
        orders.apply(&String::from_utf8_lossy(text));
    }
    if !orders.done {
        if let Some(target) = &orders.target {
            stop(target, &orders, parent);
        }
    }
    ExitCode::SUCCESS
}

/// redlease died while the command ran: SIGTERM, then SIGKILL at the
/// earlier of the grace and the lease's kill-by time.
fn stop(target: &Target, orders: &Orders, parent: i32) {
    if !target.alive() || !target.running() {
        return;
    }
    let now = now_nanos();
    let kill_at = now
        .saturating_add(nanos(orders.grace))
        .min(orders.kill_by.unwrap_or(u64::MAX));
    target.signal(Signal::TERM);
    let left = Duration::from_nanos(kill_at.saturating_sub(now));
    eprintln!(
        "redlease: redlease (pid {parent}) ended while its command ran, and renews the lock no \
         more; sent SIGTERM to {} (SIGKILL in {})",
        target.describe(),
        duration::show(left)
    );
    if wait_gone(target, kill_at, None) {
        return;
    }
    target.signal(Signal::KILL);
    eprintln!("redlease: sent SIGKILL to {}", target.describe());
    // Again at every look: a fork racing the first one escapes nothing.
    let until = now_nanos().saturating_add(nanos(AFTER_KILL));
    wait_gone(target, until, Some(Signal::KILL));
}

/// Waits until nothing of `target` runs, at most until `until`
/// (CLOCK_MONOTONIC ns), sending `again` at each look; whether it is gone.
fn wait_gone(target: &Target, until: u64, again: Option<Signal>) -> bool {
    let mut looks = 0u32;
    loop {
        if !target.alive() || (looks.is_multiple_of(SCAN_EVERY) && !target.running()) {
            return true;
        }
        let now = now_nanos();
        if now >= until {
            return false;
        }
        if let Some(sig) = again {
            target.signal(sig);
        }
        std::thread::sleep(POLL.min(Duration::from_nanos(until - now)));
        looks = looks.wrapping_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_built_without_allocating() {
        let mut line = Line::default();
        line.push(b"group ");
        line.push_number(4_194_304);
        line.push(b"\n");
        assert_eq!(line.bytes(), b"group 4194304\n");
        let mut zero = Line::default();
        zero.push_number(0);
        assert_eq!(zero.bytes(), b"0");
        let mut long = Line::default();
        long.push(&[b'x'; 100]);
        assert_eq!(long.bytes().len(), 32, "cut at the buffer, never past it");
    }

    #[test]
    fn orders_are_read_line_by_line() {
        let me = process::getpid();
        let mut orders = Orders::default();
        for line in ["grace 500000000", "kill-by 77", "nonsense", "group x"] {
            orders.apply(line);
        }
        assert_eq!(orders.grace, Duration::from_millis(500));
        assert_eq!(orders.kill_by, Some(77));
        assert_eq!(orders.target, None);
        orders.apply(&format!("process {}", me.as_raw_nonzero()));
        let target = orders.target.as_ref().expect("a target");
        assert!(!target.group && target.started.is_some());
        assert!(!orders.done);
        orders.apply("done");
        assert!(orders.done);
    }

    #[test]
    fn a_target_is_alive_only_while_it_is_the_announced_process() {
        let me = Target::new(process::getpid(), false);
        assert!(me.alive());
        // The same number, but a process that started at another time.
        let reused = Target {
            started: me.started.map(|t| t + 1),
            ..Target::new(process::getpid(), false)
        };
        assert!(!reused.alive());
        let unseen = Target {
            started: None,
            ..Target::new(process::getpid(), false)
        };
        assert!(!unseen.alive(), "a process that was gone when announced");
    }

    #[test]
    fn monotonic_time_matches_instant() {
        let later = Instant::now() + Duration::from_secs(5);
        let gap = monotonic_nanos(later).saturating_sub(now_nanos());
        assert!(
            (4_000_000_000..=5_000_000_000).contains(&gap),
            "{gap} ns until an instant 5 s ahead"
        );
    }
}
