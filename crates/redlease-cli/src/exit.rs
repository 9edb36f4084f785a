//! Exit codes, documented once here and shown in `--help` and docs/cli.md.
//!
//! `run` passes the command's own status through, so any code can also come
//! from the command; the ones redlease adds follow conventions scripts
//! already know: 1 for "busy" like flock(1), 2 for usage like clap and most
//! tools, sysexits(3) for service trouble, 126/127/128+N like shells.

use std::fmt;
use std::process::ExitCode;

/// The command (or check) succeeded.
pub const OK: u8 = 0;
/// `run`, `acquire`: the lock is held elsewhere (default of
/// `--conflict-exit-code`).
/// `doctor`: a check FAILed. `demo`: its own checks failed.
pub const CONFLICT: u8 = 1;
/// Bad command line: unknown flag, bad duration or URL, no command.
pub const USAGE: u8 = 2;
/// Redis is not available: no quorum of nodes answered (EX_UNAVAILABLE),
/// or `demo` found no `redis-server` to start.
pub const UNAVAILABLE: u8 = 69;
/// A bug or an unexpected failure in redlease itself (EX_SOFTWARE).
pub const INTERNAL: u8 = 70;
/// `run`: the lease was lost while the command ran; the command was
/// stopped (EX_TEMPFAIL: trying again later may well work). `extend`,
/// `release`: the handle's lease is gone (expired, released, taken over).
pub const LOST: u8 = 75;
/// `run`: the command exited 0, but the lock's release was refused for a
/// missing ACL permission (EX_NOPERM): the lock stays until its TTL runs
/// out, and every later release would be refused the same way.
pub const NO_PERMISSION: u8 = 77;
/// `run`: the command was found but could not be executed.
pub const CANNOT_EXECUTE: u8 = 126;
/// `run`: the command was not found.
pub const NOT_FOUND: u8 = 127;
/// Added to a signal's number when the command died of it, or redlease
/// was interrupted by it before the command started.
pub const SIGNAL_BASE: u8 = 128;

/// The exit-code table, as printed at the end of `redlease --help`.
pub const TABLE: &str = "\
Exit codes:
  0      success (run: the command exited 0)
  1      run, acquire: the lock is held elsewhere (or --conflict-exit-code N);
         doctor: a check FAILed; demo: its checks failed
  2      usage error: unknown flag, bad duration or URL, no command after --,
         no lease handle or text that is not one (extend, release);
         run --permits: another N than the name's holders give
  69     Redis unavailable: no quorum of nodes answered (run, status);
         redis-server not installed (demo)
  70     internal error in redlease
  75     run: the lease was lost while the command ran; the command was stopped;
         extend, release: the handle is stale (its lock is no longer held)
  77     run: the command exited 0, but the user may not release the lock
         (ACL: NOPERM); it stays held until its TTL runs out
  126    run: the command could not be executed
  127    run: the command was not found
  128+N  run: the command died of signal N, or redlease got signal N before
         starting it; demo: interrupted by signal N
  other  run: the command's own exit status";

/// A way to end the process: a code, and one line for stderr (empty for
/// none). Every command returns one of these instead of exiting itself, so
/// cleanup (releasing the lock, killing servers) always runs first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    pub code: u8,
    pub message: String,
}

impl Exit {
    /// Success, or a code that needs no explanation (the command's own).
    pub fn code(code: u8) -> Exit {
        Exit {
            code,
            message: String::new(),
        }
    }

    /// A code with one line saying why.
    pub fn with(code: u8, message: impl fmt::Display) -> Exit {
        Exit {
            code,
            message: message.to_string(),
        }
    }

    /// Prints the message (if any) and turns into the process exit code.
    pub fn report(self) -> ExitCode {
        if !self.message.is_empty() {
            // One line: newlines from nested errors would split it.
            let line = self.message.replace('\n', " ");
            eprintln!("redlease: {line}");
        }
        ExitCode::from(self.code)
    }
}

/// Shell convention for a process that died of signal `signal`: 128 + N.
pub fn signal_code(signal: i32) -> u8 {
    u8::try_from(i32::from(SIGNAL_BASE) + signal).unwrap_or(u8::MAX)
}

/// The exit code a shell would report for a finished child.
pub fn of_status(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        // Exit statuses are 0..=255 on Unix; `as` keeps the low byte like
        // the kernel does.
        (Some(code), _) => code as u8,
        (None, Some(signal)) => signal_code(signal),
        (None, None) => INTERNAL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::process::Signal;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    #[test]
    fn child_status_maps_like_a_shell() {
        // Raw wait statuses: exit code in the second byte, signal in the first.
        assert_eq!(of_status(ExitStatus::from_raw(0)), 0);
        assert_eq!(of_status(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(of_status(ExitStatus::from_raw(255 << 8)), 255);
        assert_eq!(of_status(ExitStatus::from_raw(Signal::TERM.as_raw())), 143);
        assert_eq!(of_status(ExitStatus::from_raw(Signal::KILL.as_raw())), 137);
    }

    #[test]
    fn redleases_own_codes_are_distinct() {
        let codes = [
            OK,
            CONFLICT,
            USAGE,
            UNAVAILABLE,
            INTERNAL,
            LOST,
            NO_PERMISSION,
            CANNOT_EXECUTE,
            NOT_FOUND,
        ];
        let mut sorted = codes.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), codes.len());
        assert!(codes.iter().all(|&c| c < SIGNAL_BASE));
        for code in codes {
            let shown = format!("  {code} ");
            assert!(TABLE.contains(&shown), "{code} missing from the table");
        }
    }
}
