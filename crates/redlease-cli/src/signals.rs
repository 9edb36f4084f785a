//! Signals sent to redlease, and passing them on to the command it runs.

use std::future::poll_fn;
use std::io;
use std::task::Poll;

use rustix::fs::{Mode, OFlags};
use rustix::process::{self, Pid, Signal};
use tokio::signal::unix::{self, SignalKind};

/// What redlease catches and passes on: the ways people and supervisors
/// (systemd, Kubernetes, cron's shell, a terminal) ask a job to stop or
/// react. Catching them also keeps redlease alive to release the lock.
pub const FORWARDED: [Signal; 6] = [
    Signal::TERM,
    Signal::INT,
    Signal::HUP,
    Signal::QUIT,
    Signal::USR1,
    Signal::USR2,
];

/// Whether `sig`, passed on to the command, asks it to end: then it gets
/// SIGKILL if it has not exited after `--grace`, so a command that ignores
/// it cannot keep the lock for ever. Not SIGHUP: daemons take it as
/// "reload", and a job started under nohup ignores it on purpose; a command
/// that goes on after it is still under the lock redlease keeps renewing.
pub fn asks_to_stop(sig: Signal) -> bool {
    matches!(sig, Signal::TERM | Signal::INT | Signal::QUIT)
}

/// How a signal ends a watch (`status --watch`, `leader --watch`): the
/// exit code, 0 for SIGINT and SIGTERM (the way to stop one), 128+N for
/// SIGHUP and SIGQUIT; `None` for those that do not end it (SIGUSR1,
/// SIGUSR2).
pub fn ends_watch(sig: Signal) -> Option<u8> {
    match sig {
        Signal::INT | Signal::TERM => Some(crate::exit::OK),
        Signal::HUP | Signal::QUIT => Some(crate::exit::signal_code(sig.as_raw())),
        _ => None,
    }
}

/// The usual name of a forwarded signal, for messages.
pub fn name(sig: Signal) -> &'static str {
    match sig {
        Signal::TERM => "SIGTERM",
        Signal::INT => "SIGINT",
        Signal::HUP => "SIGHUP",
        Signal::QUIT => "SIGQUIT",
        Signal::USR1 => "SIGUSR1",
        Signal::USR2 => "SIGUSR2",
        Signal::KILL => "SIGKILL",
        _ => "a signal",
    }
}

/// Handlers for [`FORWARDED`]; from creation on, these signals no longer
/// end redlease but are queued for [`Signals::recv`].
pub struct Signals {
    streams: Vec<(Signal, unix::Signal)>,
}

impl Signals {
    /// [`install`](Self::install), or the exit that says it could not be.
    pub fn install_or_exit() -> Result<Signals, crate::exit::Exit> {
        Signals::install().map_err(|e| {
            crate::exit::Exit::with(
                crate::exit::INTERNAL,
                format!("cannot handle signals: {}", crate::errors::chain(&e)),
            )
        })
    }

    pub fn install() -> io::Result<Signals> {
        let streams = FORWARDED
            .iter()
            .map(|&sig| unix::signal(SignalKind::from_raw(sig.as_raw())).map(|s| (sig, s)))
            .collect::<io::Result<_>>()?;
        Ok(Signals { streams })
    }

    /// The next signal received.
    pub async fn recv(&mut self) -> Signal {
        poll_fn(|cx| {
            for (sig, stream) in &mut self.streams {
                if stream.poll_recv(cx).is_ready() {
                    return Poll::Ready(*sig);
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
    pid: Pid,
    /// The command leads its own process group (the default): stop signals
    /// go to the whole group, so a shell script's children stop too.
    own_group: bool,
}

impl Target {
    pub fn new(pid: u32, own_group: bool) -> Option<Target> {
        Some(Target {
            pid: Pid::from_raw(i32::try_from(pid).ok()?)?,
            own_group,
        })
    }

    /// Sends a stop signal (SIGTERM, SIGKILL, ...) to everything the
    /// command started, or to the command alone if it shares our group.
    ///
    /// The pid is our child's, unreaped when we signal it alone; a group id
    /// is not handed to anyone else while a member lives. An error means
    /// nothing is left to signal, so errors are ignored.
    pub fn stop(&self, sig: Signal) {
        let _ = match self.own_group {
            true => process::kill_process_group(self.pid, sig),
            false => process::kill_process(self.pid, sig),
        };
    }

    /// Passes on a signal redlease received.
    pub fn forward(&self, sig: Signal) {
        match sig {
            // Application signals ("reload", "dump stats") are meant for
            // the program; in its helpers they would kill by default.
            Signal::USR1 | Signal::USR2 => {
                let _ = process::kill_process(self.pid, sig);
            }
            _ if !self.own_group && terminal_already_sent(sig) => {}
            _ => self.stop(sig),
        }
    }

    /// Whether any process of the command's group is left (always false
    /// when it shares our group: then only the command itself counts).
    pub fn group_alive(&self) -> bool {
        self.own_group && process::test_kill_process_group(self.pid).is_ok()
    }
}

/// Whether the terminal itself already delivered `sig` to the command: a
/// Ctrl-C (SIGINT) or Ctrl-\ (SIGQUIT) goes to the whole foreground process
/// group, which a `--foreground` command shares with redlease. Forwarding
/// it as well would hit the command twice, and many programs treat a second
/// Ctrl-C as "abort the cleanup".
fn terminal_already_sent(sig: Signal) -> bool {
    if sig != Signal::INT && sig != Signal::QUIT {
        return false;
    }
    let flags = OFlags::RDONLY | OFlags::NOCTTY | OFlags::CLOEXEC;
    // No controlling terminal (cron, systemd, CI): nobody else sent it.
    let Ok(tty) = rustix::fs::open("/dev/tty", flags, Mode::empty()) else {
        return false;
    };
    rustix::termios::tcgetpgrp(&tty).is_ok_and(|foreground| foreground == process::getpgrp())
}
