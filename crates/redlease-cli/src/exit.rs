//! Exit codes, documented once here ([`CODES`]) and shown in `--help` and
//! docs/cli.md.
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

/// What an exit code means for some of the commands.
#[derive(Debug)]
pub struct Claim {
    /// The commands that give the code for this reason (`release --handle`
    /// and `release --force` apart); empty for every command.
    pub commands: &'static [&'static str],
    /// Why, with flags and names in backticks (shown plain in `--help`).
    pub meaning: &'static str,
}

/// One exit code (or `128+N`, or `other`) and what it means, per command.
#[derive(Debug)]
pub struct Code {
    pub code: &'static str,
    pub claims: &'static [Claim],
}

/// The commands, as the table names them.
#[cfg(test)]
const COMMANDS: [&str; 10] = [
    "run",
    "acquire",
    "extend",
    "release --handle",
    "release --force",
    "status",
    "elect",
    "leader",
    "doctor",
    "demo",
];

const fn every(meaning: &'static str) -> Claim {
    Claim {
        commands: &[],
        meaning,
    }
}

const fn by(commands: &'static [&'static str], meaning: &'static str) -> Claim {
    Claim { commands, meaning }
}

/// The exit-code table: the one source of `redlease --help`'s table
/// ([`help_table`]) and of docs/cli.md's ([`markdown_table`], which a test
/// compares with the file). The CLI's tests run each claim they can make
/// happen cheaply.
pub const CODES: &[Code] = &[
    Code {
        code: "0",
        claims: &[every("success (`run`: the command exited 0)")],
    },
    Code {
        code: "1",
        claims: &[
            by(
                &["run", "acquire"],
                "the lock is held elsewhere, or too few `--permits` are free (or the code \
                 `--conflict-exit-code N` gives)",
            ),
            by(
                &["elect"],
                "another process leads, with `--no-wait` or once `--wait` is over (or the code \
                 `--conflict-exit-code N` gives)",
            ),
            by(&["leader"], "nobody leads"),
            by(&["doctor"], "a check FAILed"),
            by(&["demo"], "its checks failed"),
        ],
    },
    Code {
        code: "2",
        claims: &[
            every("usage error: an unknown flag, a bad duration, number or URL, a missing value"),
            by(&["run", "elect"], "no command after `--`"),
            by(
                &["elect"],
                "no `--value`, one over 64 KiB, or `--shared`, `--permits`, `--read-key` or a \
                 second `--key`",
            ),
            by(
                &["run", "acquire"],
                "a URL whose scheme does not match its port (TLS or not), one server named \
                 twice, an empty lock name or one whose key exceeds 4 KiB, several `--key` with \
                 `--permits`",
            ),
            by(
                &["run", "acquire"],
                "`--permits` 0 or over 100000, `--weight` 0 or over `--permits`, a semaphore \
                 on which no node may fail without `--allow-no-failures`, or another N than the \
                 name's holders give",
            ),
            by(
                &["run", "acquire"],
                "`--durable 0`, or `--durable N` when too few nodes have N connected replicas \
                 to make a quorum",
            ),
            by(
                &["status", "release --force"],
                "an empty lock name or one whose key exceeds 4 KiB",
            ),
            by(
                &["extend", "release --handle"],
                "no handle, an empty one, text that is not a handle, or a handle cut short or \
                 altered",
            ),
        ],
    },
    Code {
        code: "69",
        claims: &[
            by(
                &["run", "acquire"],
                "Redis unavailable: no quorum of nodes answered, or too few of them vote yet: \
                 a server up for less than its restart quarantine (`--restart-quarantine`, by \
                 default the `--ttl` plus 1%) casts no vote",
            ),
            by(
                &["extend", "release --handle"],
                "Redis unavailable: no quorum of nodes answered",
            ),
            by(
                &["release --force"],
                "a node did not answer (those that answered were cleared)",
            ),
            by(&["status", "leader"], "too few nodes answered to tell"),
            by(&["elect"], "as `run`: no quorum of nodes answered"),
            by(&["demo"], "`redis-server` is not installed"),
        ],
    },
    Code {
        code: "70",
        claims: &[every("internal error in redlease (a bug)")],
    },
    Code {
        code: "75",
        claims: &[
            by(
                &["run"],
                "the lease was lost while the command ran, and the command was stopped",
            ),
            by(
                &["elect"],
                "the lead was lost while the command ran, and the command was stopped",
            ),
            by(
                &["extend", "release --handle"],
                "the handle is stale: its lock is no longer held (expired, released, taken \
                 over)",
            ),
        ],
    },
    Code {
        code: "77",
        claims: &[by(
            &["run", "elect"],
            "the command exited 0, but its release was refused for a missing ACL permission \
             (`NOPERM`, named in the message), and the lock stays held until its TTL runs out",
        )],
    },
    Code {
        code: "126",
        claims: &[by(&["run", "elect"], "the command could not be executed")],
    },
    Code {
        code: "127",
        claims: &[by(&["run", "elect"], "the command was not found")],
    },
    Code {
        code: "128+N",
        claims: &[
            by(
                &["run", "elect"],
                "the command died of signal N, or redlease got signal N before starting it",
            ),
            by(
                &["acquire"],
                "redlease got signal N while waiting for the lock",
            ),
            by(&["demo"], "interrupted by signal N"),
        ],
    },
    Code {
        code: "other",
        claims: &[by(&["run", "elect"], "the command's own exit status")],
    },
];

/// Width of the code column in [`help_table`], and of its lines.
const CODE_WIDTH: usize = 7;
const HELP_WIDTH: usize = 80;

/// The table as `redlease --help` ends: one line (or more, the rest
/// indented two more) per claim, `COMMANDS: MEANING`, under its code.
pub fn help_table() -> String {
    let mut out = String::from("Exit codes (the commands that give each, and why):");
    for code in CODES {
        for (i, claim) in code.claims.iter().enumerate() {
            let first = if i == 0 { code.code } else { "" };
            let text = format!("{}: {}", commands(claim, |c| c.to_string()), claim.meaning)
                .replace('`', "");
            let indent = 2 + CODE_WIDTH;
            for (j, line) in wrap(&text, HELP_WIDTH - indent - 2).iter().enumerate() {
                out.push('\n');
                match j {
                    0 => out.push_str(&format!("  {first:<CODE_WIDTH$}{line}")),
                    _ => out.push_str(&format!("{:indent$}  {line}", "")),
                }
            }
        }
    }
    out
}

/// The table as docs/cli.md has it, in Markdown.
#[cfg(test)]
fn markdown_table() -> String {
    let mut out = String::from("| code | meaning |\n|---|---|\n");
    for code in CODES {
        let claims: Vec<String> = code
            .claims
            .iter()
            .map(|claim| {
                let who = commands(claim, |c| format!("`{c}`"));
                format!("{who}: {}", claim.meaning)
            })
            .collect();
        out.push_str(&format!("| {} | {} |\n", code.code, claims.join("; ")));
    }
    out
}

/// The commands of a claim, each as `show` writes it.
fn commands(claim: &Claim, show: impl Fn(&str) -> String) -> String {
    match claim.commands {
        [] => "every command".to_string(),
        some => some.iter().map(|c| show(c)).collect::<Vec<_>>().join(", "),
    }
}

/// `text` in lines of at most `width` characters, broken between words.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines
}

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
        let table = help_table();
        for code in codes {
            let shown = format!("\n  {code:<CODE_WIDTH$}");
            assert!(table.contains(&shown), "{code} missing from the table");
            assert!(
                CODES.iter().any(|c| c.code == code.to_string()),
                "{code} has no row"
            );
        }
    }

    #[test]
    fn every_claim_names_known_commands() {
        for code in CODES {
            assert!(!code.claims.is_empty(), "{}", code.code);
            for claim in code.claims {
                for command in claim.commands {
                    assert!(COMMANDS.contains(command), "{}: {command}", code.code);
                }
            }
        }
    }

    #[test]
    fn the_help_table_fits_80_columns_and_shows_no_backticks() {
        let table = help_table();
        for line in table.lines() {
            assert!(line.chars().count() <= HELP_WIDTH, "{line:?}");
        }
        assert!(!table.contains('`'), "{table}");
        assert!(
            table.contains("\n  69     run, acquire: Redis unavailable: no quorum"),
            "{table}"
        );
        assert!(table.contains("\n         release --force: a node did not answer"));
    }

    /// docs/cli.md has the table that [`markdown_table`] makes, exactly.
    #[test]
    fn docs_cli_md_has_this_table() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/cli.md");
        let docs = std::fs::read_to_string(path).expect("docs/cli.md");
        let table = markdown_table();
        assert!(
            docs.contains(&format!("\n\n{table}")),
            "docs/cli.md's exit-code table differs from exit::CODES; replace it with:\n\n{table}"
        );
        assert_eq!(docs.matches("| code | meaning |").count(), 1);
    }
}
