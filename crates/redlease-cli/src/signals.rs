//! Signals sent to redlease, and passing them on to the command it runs.

use std::future::poll_fn;
use std::io;
use std::task::Poll;

use tokio::signal::unix::{signal, Signal, SignalKind};

/// What redlease catches and passes on: the ways people and supervisors
/// (systemd, Kubernetes, cron's shell, a terminal) ask a job to stop or
/// react. Catching them also keeps redlease alive to release the lock.
pub const FORWARDED: [libc::c_int; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Handlers for [`FORWARDED`]; from creation on, these signals no longer
/// end redlease but are queued for [`Signals::recv`].
pub struct Signals {
    streams: Vec<(libc::c_int, Signal)>,
}

impl Signals {
    pub fn install() -> io::Result<Signals> {
        let streams = FORWARDED
            .iter()
            .map(|&n| signal(SignalKind::from_raw(n)).map(|s| (n, s)))
            .collect::<io::Result<_>>()?;
        Ok(Signals { streams })
    }

    /// The next signal received (its number).
    pub async fn recv(&mut self) -> libc::c_int {
        poll_fn(|cx| {
            for (n, stream) in &mut self.streams {
                if stream.poll_recv(cx).is_ready() {
                    return Poll::Ready(*n);
                }
            }
            Poll::Pending
        })
        .await
    }
}

/// Where signals for the command go.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pid: libc::pid_t,
    /// The command leads its own process group (the default): stop signals
    /// go to the whole group, so a shell script's children stop too.
    own_group: bool,
}

impl Target {
    pub fn new(pid: u32, own_group: bool) -> Option<Target> {
        Some(Target {
            pid: libc::pid_t::try_from(pid).ok()?,
            own_group,
        })
    }

    /// Sends a stop signal (SIGTERM, SIGKILL, ...) to everything the
    /// command started, or to the command alone if it shares our group.
    pub fn stop(&self, sig: libc::c_int) {
        kill(if self.own_group { -self.pid } else { self.pid }, sig);
    }

    /// Passes on a signal redlease received.
    pub fn forward(&self, sig: libc::c_int) {
        match sig {
            // Application signals ("reload", "dump stats") are meant for
            // the program; in its helpers they would kill by default.
            libc::SIGUSR1 | libc::SIGUSR2 => kill(self.pid, sig),
            _ if !self.own_group && terminal_already_sent(sig) => {}
            _ => self.stop(sig),
        }
    }

    /// Whether any process of the command's group is left (always false
    /// when it shares our group: then only the command itself counts).
    pub fn group_alive(&self) -> bool {
        // SAFETY: signal 0 only checks existence and permission.
        self.own_group && unsafe { libc::kill(-self.pid, 0) } == 0
    }
}

fn kill(pid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory-safety preconditions. The pid is our
    // child's, unreaped when we signal it alone; a group id is not handed
    // to anyone else while a member lives. An error means nothing is left.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Whether the terminal itself already delivered `sig` to the command: a
/// Ctrl-C (SIGINT) or Ctrl-\ (SIGQUIT) goes to the whole foreground process
/// group, which a `--foreground` command shares with redlease. Forwarding
/// it as well would hit the command twice, and many programs treat a second
/// Ctrl-C as "abort the cleanup".
fn terminal_already_sent(sig: libc::c_int) -> bool {
    if sig != libc::SIGINT && sig != libc::SIGQUIT {
        return false;
    }
    // SAFETY: plain syscalls on a descriptor we open and close here.
    unsafe {
        let fd = libc::open(
            c"/dev/tty".as_ptr(),
            libc::O_RDONLY | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            // No controlling terminal (cron, systemd, CI): nobody else sent it.
            return false;
        }
        let foreground = libc::tcgetpgrp(fd);
        libc::close(fd);
        foreground > 0 && foreground == libc::getpgrp()
    }
}
