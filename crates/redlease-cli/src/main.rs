//! `redlease`: run a command under a distributed lock on Redis (or while
//! leading an election), inspect a lock or an election, check the nodes,
//! or watch a demo. This file is the command line: parsing, one-line
//! usage errors, and dispatch.

mod acquire;
mod cluster;
mod demo;
mod doctor;
mod duration;
mod elect;
mod errors;
mod exit;
mod extend;
mod facts;
mod guardian;
mod handle;
mod leader;
mod logging;
mod metrics_http;
mod nodes;
mod probe;
mod release;
mod replicas;
mod rights;
mod run;
mod sentinel;
mod signals;
mod status;
mod table;
mod take;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{ArgAction, CommandFactory, Parser, Subcommand};

use crate::exit::Exit;

#[derive(Parser, Debug)]
#[command(
    name = "redlease",
    version,
    about = "Distributed locks on Redis from the shell: run a command on one machine of \
             the fleet at a time, elect a leader, inspect locks, check nodes",
    after_help = exit::help_table()
)]
struct Cli {
    #[command(subcommand)]
    command: Command,

    /// Log what redlease and its lock library do, on stderr: -v info, -vv
    /// debug, -vvv trace [default: warnings only; with --quiet,
    /// errors only]. RUST_LOG, when set, overrides this (e.g.
    /// RUST_LOG=redlease=debug, or redis=debug for the Redis client).
    #[arg(short, long, action = ArgAction::Count, global = true)]
    verbose: u8,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a command while holding a lock (flock(1) across machines)
    Run(run::RunArgs),
    /// Run a command while this process leads an election (one leader at a time)
    Elect(elect::ElectArgs),
    /// Take a lock for a script's steps and print its handle
    Acquire(acquire::AcquireArgs),
    /// Extend the lock of a handle `acquire` printed
    Extend(extend::ExtendArgs),
    /// Release the lock of a handle `acquire` printed, or delete a stuck lock whoever holds it (--force)
    Release(release::ReleaseArgs),
    /// Show whether a lock is held on each node, and its fencing counter
    Status(status::StatusArgs),
    /// Show who leads an election, once or at each change
    Leader(leader::LeaderArgs),
    /// Check every node for settings that can break a lock
    Doctor(doctor::DoctorArgs),
    /// Start 5 local Redis nodes and watch workers share a lock through node failures
    Demo(demo::DemoArgs),
}

fn main() -> ExitCode {
    // One line instead of a backtrace dump; the code is then INTERNAL.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("redlease: internal error (a bug): {info}");
    }));
    // `run`'s guardian (hidden): before clap, logging and the runtime, none
    // of which it needs.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == guardian::SUBCOMMAND)
    {
        return guardian::main();
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => match e.kind() {
            // Help and version go to stdout with code 0, as usual.
            ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
            _ => {
                // Lossy: an argument that is not UTF-8 must not panic here.
                let args: Vec<String> = std::env::args_os()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect();
                return Exit::with(exit::USAGE, one_line(&e, &args)).report();
            }
        },
    };
    let quiet = match &cli.command {
        Command::Run(args) => args.quiet(),
        Command::Elect(args) => args.quiet(),
        Command::Acquire(args) => args.quiet(),
        Command::Extend(args) => args.quiet(),
        Command::Release(args) => args.quiet(),
        _ => false,
    };
    logging::init(cli.verbose, quiet);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return Exit::with(
                exit::INTERNAL,
                format!("cannot start the runtime: {}", errors::chain(&e)),
            )
            .report()
        }
    };
    // Spawned, so that a panic comes back as a JoinError (exit 70) instead of
    // unwinding out of main. The runtime's worker threads live until main
    // returns, which `run`'s parent-death signal relies on.
    let outcome = runtime.block_on(async {
        tokio::spawn(async move {
            match cli.command {
                Command::Run(args) => run::run(args).await,
                Command::Elect(args) => elect::elect(args).await,
                Command::Acquire(args) => acquire::acquire(args).await,
                Command::Extend(args) => extend::extend(args).await,
                Command::Status(args) => status::status(args).await,
                Command::Leader(args) => leader::leader(args).await,
                Command::Release(args) => release::release(args).await,
                Command::Doctor(args) => doctor::doctor(args).await,
                Command::Demo(args) => demo::demo(args).await,
            }
        })
        .await
    });
    match outcome {
        Ok(exit) => exit.report(),
        Err(_) => ExitCode::from(exit::INTERNAL),
    }
}

/// A clap error as one line: the message and any tip, without the usage
/// block, plus which `--help` to read.
fn one_line(e: &clap::Error, args: &[String]) -> String {
    let text = e.render().to_string();
    let mut message = String::new();
    let mut usage = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("Usage:") {
            usage = Some(rest.trim().to_string());
            break;
        }
        // "to pass '-1' as a value, use '-- -1'": here `--` starts run's
        // command, which the value would become.
        if trimmed.is_empty()
            || trimmed.starts_with("For more information")
            || trimmed.starts_with("tip: to pass")
        {
            continue;
        }
        let trimmed = trimmed.strip_prefix("error: ").unwrap_or(trimmed);
        if message.is_empty() {
            message.push_str(trimmed);
        } else if message.ends_with(':') || line.starts_with("  ") && !trimmed.starts_with("tip:") {
            // A list item under "...not provided:".
            message.push(if message.ends_with(':') { ' ' } else { ',' });
            if !message.ends_with(' ') {
                message.push(' ');
            }
            message.push_str(trimmed);
        } else {
            message.push_str("; ");
            message.push_str(trimmed);
        }
    }
    if message.contains("<COMMAND>") && e.kind() == ErrorKind::MissingRequiredArgument {
        let example = match usage.as_deref().and_then(|u| u.split_whitespace().nth(1)) {
            Some("elect") => "redlease elect --key NAME --value VALUE -- ./job.sh",
            _ => "redlease run --key NAME -- ./job.sh",
        };
        message.push_str(&format!(" (put the command after `--`, e.g. {example})"));
    }
    if let Some(instead) = misread(e, args) {
        message = instead;
    }
    // The usage line names the subcommand ("redlease run [OPTIONS] ...");
    // errors without one (bad values) are found in the arguments.
    let subcommand = match usage {
        Some(usage) => usage
            .split_whitespace()
            .nth(1)
            .filter(|w| !w.starts_with(['[', '<', '-']))
            .map(str::to_string),
        None => args
            .iter()
            .skip(1)
            .take_while(|a| *a != "--")
            .find(|a| Cli::command().find_subcommand(a.as_str()).is_some())
            .cloned(),
    };
    let message = without_handles(message, args);
    match subcommand {
        Some(sub) => format!("{message}; see `redlease {sub} --help`"),
        None => format!("{message}; see `redlease --help`"),
    }
}

/// `message` without the lease handles the arguments hold, which clap
/// may quote (`redlease extend rlh1...`, the `--handle` forgotten): a
/// handle is a secret. Short words are left alone: no handle is short,
/// and they could be part of any message.
fn without_handles(message: String, args: &[String]) -> String {
    let mut secrets: Vec<&str> = Vec::new();
    for (i, arg) in args.iter().enumerate() {
        if let Some(value) = arg.strip_prefix("--handle=") {
            secrets.push(value);
        } else if arg == "--handle" {
            secrets.extend(args.get(i + 1).map(String::as_str));
        } else if arg.starts_with("rlh") {
            secrets.push(arg);
        }
    }
    secrets
        .into_iter()
        .map(str::trim)
        .filter(|secret| secret.len() >= 16)
        .fold(message, |message, secret| {
            message.replace(secret, "<handle>")
        })
}

/// What an unexpected argument clap reports most likely was, when that
/// can be told: a negative value after a flag (which clap takes for a
/// flag), or `run`'s command without the `--` before it. `None` for the
/// others, which clap's own message fits.
fn misread(e: &clap::Error, args: &[String]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(bad)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let cli = Cli::command();
    let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let sub_at = (1..end).find(|&i| cli.find_subcommand(&args[i]).is_some())?;
    let sub = cli.find_subcommand(&args[sub_at])?;
    // The flag `word` names, if it takes a value (given as the next word).
    let flag = |word: &str| {
        let arg = match word.strip_prefix("--") {
            Some(long) => sub.get_arguments().find(|a| a.get_long() == Some(long)),
            None => {
                let short = word.strip_prefix('-')?.chars().next()?;
                (word.len() == 2)
                    .then(|| sub.get_arguments().find(|a| a.get_short() == Some(short)))?
            }
        }?;
        arg.get_action().takes_values().then_some(arg)
    };
    // Where clap stopped: the first `bad` that is not a flag's value.
    let at = (sub_at + 1..end).find(|&i| args[i] == *bad && flag(&args[i - 1]).is_none());
    let negative = bad.len() > 1 && bad[1..].starts_with(|c: char| c.is_ascii_digit() || c == '.');
    if bad.starts_with('-') && negative {
        // `--ttl -1`: clap read the value as a flag, as the one before it
        // is still waiting for its value (and of `-5s`, only `-5`).
        let i = (sub_at + 1..end).find(|&i| args[i].starts_with(bad.as_str()))?;
        let arg = flag(&args[i - 1])?;
        let (name, bad) = (&args[i - 1], &args[i]);
        let is_duration =
            arg.get_value_parser().type_id() == std::any::TypeId::of::<std::time::Duration>();
        return Some(if is_duration {
            format!("{name} {bad}: durations cannot be negative; use e.g. 500ms, 10s, 2m")
        } else {
            format!("{name} {bad}: negative values are not accepted")
        });
    }
    let takes_command = matches!(sub.get_name(), "run" | "elect");
    if takes_command && !bad.starts_with('-') && end == args.len() {
        let at = at?;
        let before: Vec<String> = args[..at]
            .iter()
            .enumerate()
            .map(|(i, a)| {
                if i == 0 {
                    "redlease".to_string()
                } else {
                    shown(a)
                }
            })
            .collect();
        let command: Vec<String> = args[at..].iter().map(|a| shell_word(a)).collect();
        return Some(format!(
            "unexpected argument {bad:?}: put the command after `--`: {} -- {}",
            before.join(" "),
            command.join(" ")
        ));
    }
    None
}

/// An option word as it may be shown: a URL's password hidden.
fn shown(word: &str) -> String {
    if word.contains("://") && word.contains('@') {
        redlease::redact_url(word)
    } else {
        shell_word(word)
    }
}

/// `word` as a shell would need it typed: in single quotes unless it is
/// plain.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:=,@%+".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_for(args: &[&str]) -> (ErrorKind, String) {
        let e = Cli::try_parse_from(args).unwrap_err();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        (e.kind(), one_line(&e, &args))
    }

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn usage_errors_are_one_line_and_point_to_help() {
        let (kind, line) = error_for(&["redlease", "run", "--key", "k", "--bogus", "--", "true"]);
        assert_eq!(kind, ErrorKind::UnknownArgument);
        assert!(!line.contains('\n'), "{line}");
        assert!(line.contains("--bogus"), "{line}");
        assert!(line.ends_with("see `redlease run --help`"), "{line}");

        let (_, line) = error_for(&["redlease", "run", "--key", "k"]);
        assert!(line.contains("after `--`"), "{line}");
        assert!(!line.contains('\n'), "{line}");

        let (_, line) = error_for(&["redlease", "run", "--key", "k", "--ttl", "10", "--", "true"]);
        assert!(line.contains("no unit"), "{line}");
        assert!(line.ends_with("see `redlease run --help`"), "{line}");
        assert!(!line.contains("For more information"), "{line}");

        let (_, line) = error_for(&[
            "redlease",
            "run",
            "--key",
            "k",
            "--wait",
            "1s",
            "--no-wait",
            "--",
            "true",
        ]);
        assert!(line.contains("cannot be used with"), "{line}");
    }

    #[test]
    fn elect_takes_its_command_after_dash_dash_as_run_does() {
        let (_, line) = error_for(&["redlease", "elect", "--key", "k", "--value", "v"]);
        assert!(
            line.contains("e.g. redlease elect --key NAME --value VALUE -- ./job.sh"),
            "{line}"
        );
        assert!(line.ends_with("see `redlease elect --help`"), "{line}");
        let (_, line) = error_for(&["redlease", "elect", "--key", "k", "--value", "v", "./job"]);
        assert!(
            line.contains("put the command after `--`: redlease elect --key k --value v -- ./job"),
            "{line}"
        );
        let cli = Cli::try_parse_from([
            "redlease", "elect", "--key", "k", "--value", "v", "--", "ls", "-l",
        ])
        .unwrap();
        let shown = format!("{:?}", cli.command);
        assert!(shown.contains("value: \"v\""), "{shown}");
        assert!(shown.contains("\"ls\", \"-l\""), "{shown}");
    }

    #[test]
    fn negative_values_and_a_missing_dash_dash_are_named() {
        let (_, line) = error_for(&["redlease", "run", "--key", "k", "--ttl", "-1", "--", "true"]);
        assert!(
            line.starts_with("--ttl -1: durations cannot be negative"),
            "{line}"
        );
        assert!(!line.contains("'-- -1'"), "{line}");
        let (_, line) = error_for(&["redlease", "status", "--key", "k", "--timeout", "-5s"]);
        assert!(
            line.starts_with("--timeout -5s: durations cannot"),
            "{line}"
        );
        let (_, line) = error_for(&[
            "redlease",
            "run",
            "--key",
            "k",
            "--durable",
            "-1",
            "--",
            "x",
        ]);
        assert!(line.starts_with("--durable -1: negative values"), "{line}");

        let (_, line) = error_for(&["redlease", "run", "--key", "echo", "echo", "it's"]);
        assert!(
            line.contains("put the command after `--`: redlease run --key echo -- echo 'it'\\''s'"),
            "{line}"
        );
        let (_, line) = error_for(&[
            "redlease",
            "run",
            "--nodes",
            "redis://u:hunter2@h:1",
            "--key",
            "k",
            "true",
        ]);
        assert!(
            line.contains("--nodes redis://***@h:1 --key k -- true"),
            "{line}"
        );
        assert!(!line.contains("hunter2"), "{line}");
        // With a `--` already there, the word is just unexpected.
        let (_, line) = error_for(&["redlease", "run", "--key", "k", "extra", "--", "true"]);
        assert!(!line.contains("put the command"), "{line}");
    }

    #[test]
    fn permits_are_a_positive_number_not_shared_with_shared() {
        let run = |extra: &[&str]| {
            let mut args = vec!["redlease", "run", "--key", "k"];
            args.extend_from_slice(extra);
            args.extend(["--", "true"]);
            error_for(&args).1
        };
        let line = run(&["--permits", "0"]);
        assert!(
            line.contains("a semaphore needs at least 1 permit"),
            "{line}"
        );
        let line = run(&["--permits", "two"]);
        assert!(
            line.contains("\"two\" is not a number of permits"),
            "{line}"
        );
        let line = run(&["--permits", "2", "--shared"]);
        assert!(
            line.contains("'--permits <N>' cannot be used with '--shared'"),
            "{line}"
        );
        let line = run(&["--allow-no-failures"]);
        assert!(line.contains("not provided: --permits"), "{line}");
        let cli = Cli::try_parse_from([
            "redlease",
            "run",
            "--key",
            "k",
            "--permits",
            "2",
            "--allow-no-failures",
            "--",
            "true",
        ]);
        assert!(cli.is_ok(), "{cli:?}");
    }

    #[test]
    fn a_misplaced_handle_is_not_shown() {
        let handle = "rlh1.x.60000.0123456789abcdef0123456789abcdef0123456789abcdef.72.61.1";
        let (_, line) = error_for(&["redlease", "extend", handle]);
        assert!(line.contains("unexpected argument '<handle>'"), "{line}");
        assert!(!line.contains("0123456789abcdef"), "{line}");
        let (_, line) = error_for(&["redlease", "run", "--key", "k", "echo", handle]);
        assert!(!line.contains("0123456789abcdef"), "{line}");
        let (_, line) = error_for(&["redlease", "release", "--handle", handle, "--force"]);
        assert!(line.contains("cannot be used with"), "{line}");
        assert!(!line.contains("0123456789abcdef"), "{line}");
    }

    #[test]
    fn release_takes_a_handle_or_force_with_a_key() {
        let (_, line) = error_for(&["redlease", "release", "--force"]);
        assert!(line.contains("--key"), "{line}");
        let (_, line) = error_for(&["redlease", "release", "--handle", "h", "--key", "k"]);
        assert!(line.contains("cannot be used with"), "{line}");
        for args in [
            &["redlease", "release", "--force", "--key", "k"][..],
            &["redlease", "release", "--handle", "h"],
            &["redlease", "release"],
            &["redlease", "extend", "--ttl", "1m"],
        ] {
            let cli = Cli::try_parse_from(args);
            assert!(cli.is_ok(), "{args:?}: {cli:?}");
        }
    }

    #[test]
    fn several_keys_are_parsed_and_acquire_has_its_own_ttl() {
        let cli = Cli::try_parse_from(["redlease", "acquire", "--key", "b", "--key", "a"]).unwrap();
        let shown = format!("{cli:?}");
        assert!(shown.contains("key: [\"b\", \"a\"]"), "{shown}");
        assert!(shown.contains("ttl: 60s"), "{shown}");
        let cli = Cli::try_parse_from(["redlease", "run", "--key", "a", "--", "true"]).unwrap();
        assert!(format!("{cli:?}").contains("ttl: 10s"), "{cli:?}");
    }

    #[test]
    fn the_command_and_its_flags_are_passed_through() {
        let cli = Cli::try_parse_from(["redlease", "run", "--key", "k", "--", "ls", "-l", "--all"])
            .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run");
        };
        let shown = format!("{args:?}");
        assert!(shown.contains("\"ls\", \"-l\", \"--all\""), "{shown}");
    }
}
