//! `redlease leader`: who leads an election (`redlease elect`, or the
//! library's `Election`), as a quorum of the nodes tells it: once, or
//! (`--watch`) at each change, as a line or as JSON.

use std::time::SystemTime;

use clap::Args;
use redlease::{Error, Leader, LockStatus, Locker, Verdict};
use rustix::process::Signal;
use serde_json::json;

use crate::errors::chain;
use crate::exit::{self, Exit};
use crate::signals::{self, Signals};
use crate::status::{self, AdminArg};

#[derive(Args, Debug)]
#[command(after_help = "\
Prints the leader as VALUE (term T, held by OWNER for N s): the value it \
leads with (`redlease elect --value`), its term (higher for every new \
leader), and who holds the lead (`elect --owner`, by default HOST:PID \
(COMMAND)); or `no leader` when nobody leads: nobody campaigned, the \
leader resigned, or its lease ended (a leader that died without resigning \
leads nobody once its TTL is over, and the next one leads after its \
lock-delay, if it has one).

--watch prints the leader now, then a line each time it changes (a new \
leader, a new value, nobody leading), until SIGINT (Ctrl-C) or SIGTERM. \
Changes that follow each other faster than the nodes can be read may be \
told as one; a term is never told after a higher one.

--json prints one JSON object per line instead: {\"key\": NAME, \"leader\": \
null | {\"value\", \"term\", \"revision\" (how many values it proclaimed), \
\"owner\", \"since_ms\" (when it took the lead, ms since the epoch)}}. With \
--watch, a line `unknown: ...` (JSON: \"unknown\": true) says too few nodes \
answered to tell, until they do again.

Examples:
  redlease leader --key scheduler
  redlease leader --key scheduler --watch --json

Exit codes: 0 someone leads (with --watch: stopped by SIGINT or SIGTERM); 1 \
nobody leads; 2 usage; 69 too few nodes answered to tell.")]
pub struct LeaderArgs {
    /// The election's name (`elect`'s --key).
    #[arg(long, value_name = "NAME")]
    key: String,

    /// Print the leader now, then a line each time it changes, until
    /// SIGINT or SIGTERM.
    #[arg(long)]
    watch: bool,

    /// Print one JSON object per line instead (see below).
    #[arg(long)]
    json: bool,

    #[command(flatten)]
    admin: AdminArg,
}

pub async fn leader(args: LeaderArgs) -> Exit {
    let (_, locker) = match args.admin.locker() {
        Ok(made) => made,
        Err(exit) => return exit,
    };
    let exit = match args.watch {
        true => watch(&args, &locker).await,
        false => once(&args, &locker).await,
    };
    locker.close().await;
    exit
}

/// The leader now: exit 0, or 1 when nobody leads, or 69 when too few
/// nodes answered to tell.
async fn once(args: &LeaderArgs, locker: &Locker) -> Exit {
    let key = args.key.as_str();
    // The name's state, its leader record included: one read per node.
    let status = match locker.admin().inspect(key).await {
        Ok(status) => status,
        Err(e) => return failed(&e),
    };
    let leader = status.leader();
    if leader.is_none() {
        // Nobody leads, or too few nodes answered to tell.
        if let Some(why) = cannot_tell(key, &status, locker) {
            return Exit::with(exit::UNAVAILABLE, why);
        }
    }
    if status::print(&line(key, leader.as_ref(), args.json)).is_err() {
        return Exit::code(exit::signal_code(Signal::PIPE.as_raw()));
    }
    match leader {
        Some(_) => Exit::code(exit::OK),
        None => Exit::code(exit::CONFLICT),
    }
}

/// `--watch`: the leader now, then each change, until SIGINT or SIGTERM.
async fn watch(args: &LeaderArgs, locker: &Locker) -> Exit {
    let mut signals = match Signals::install_or_exit() {
        Ok(s) => s,
        Err(exit) => return exit,
    };
    let election = locker.election(args.key.as_str());
    let mut observe = election.observe();
    loop {
        let led = tokio::select! {
            led = observe.next() => led,
            sig = signals.recv() => match signals::ends_watch(sig) {
                Some(code) => return Exit::code(code),
                None => continue,
            },
        };
        let leader = match led {
            Ok(leader) => leader,
            Err(e) => return failed(&e),
        };
        // Nobody leads, or the nodes cannot tell: said apart.
        let unknown = observe
            .status()
            .filter(|_| leader.is_none())
            .and_then(|status| cannot_tell(&args.key, status, locker));
        let said = match (unknown, args.json) {
            (Some(why), false) => format!("unknown: {why}\n"),
            (Some(_), true) => format!(
                "{}\n",
                json!({"key": args.key, "leader": null, "unknown": true})
            ),
            (None, _) => line(&args.key, leader.as_ref(), args.json),
        };
        if status::print(&said).is_err() {
            // Nobody reads any more (`| head -1`), as SIGPIPE would end it.
            return Exit::code(exit::signal_code(Signal::PIPE.as_raw()));
        }
    }
}

/// Why who leads `key` cannot be told from `status`, if it cannot: too
/// few nodes answered.
fn cannot_tell(key: &str, status: &LockStatus, locker: &Locker) -> Option<String> {
    match status.verdict() {
        Verdict::Unknown { answered, .. } => Some(format!(
            "only {answered} of {} nodes answered; a quorum is {}: cannot tell who leads {key:?}",
            status.nodes.len(),
            locker.admin().quorum()
        )),
        _ => None,
    }
}

/// The leader of `key` as one line, ending in a newline: described, or
/// as JSON.
fn line(key: &str, leader: Option<&Leader>, json: bool) -> String {
    match (json, leader) {
        (true, _) => format!(
            "{}\n",
            json!({"key": key, "leader": status::leader_json(leader)})
        ),
        (false, Some(leader)) => format!("{}\n", leader.describe(SystemTime::now())),
        (false, None) => "no leader\n".to_string(),
    }
}

/// The exit for a look at the election that failed as a whole: a bad
/// name, or a closed Locker.
fn failed(e: &Error) -> Exit {
    match e {
        Error::InvalidInput { .. } => Exit::with(exit::USAGE, chain(e)),
        _ => Exit::with(exit::INTERNAL, chain(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nobody_leading_is_a_line_or_a_null() {
        assert_eq!(line("k", None, false), "no leader\n");
        assert_eq!(line("k", None, true), "{\"key\":\"k\",\"leader\":null}\n");
    }
}
