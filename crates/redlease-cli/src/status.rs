//! `redlease status`: per node, whether a lock is held, by a writer or by
//! how many readers (a semaphore: how many of its permits are held, and
//! how many are free), for how long, whether a writer waits, and the lock's
//! fencing counter, as the library's `Admin::inspect` reports them (never
//! the key's value: that is the holder's token); an election's leader.
//! As a table or JSON, once or (`--watch`) at each change.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use redlease::{
    Error, KeyState, Leader, LockMode, LockStatus, Locker, NodeLockState, NodeQuarantine,
    Quarantine, Verdict,
};
use rustix::process::Signal;
use serde_json::{json, Value};

use crate::duration;
use crate::errors::{self, chain};
use crate::exit::{self, Exit};
use crate::nodes::NodesArg;
use crate::signals::{self, Signals};
use crate::table::Table;

/// `writeln!` to a String, which cannot fail.
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

#[derive(Args, Debug)]
#[command(after_help = "\
A lock is held when a quorum of nodes has its key. A key on fewer nodes is \
the trace of an attempt that failed, or of a lease ending; it expires by \
its TTL. A node whose server (re)started less than the restart quarantine \
ago (--restart-quarantine; default: that of run's default --ttl 10s) casts \
no vote for a lock yet and shows as quarantined; while too few nodes may \
vote, the lock is free but cannot be taken.

A lock is held by a writer (a plain `redlease run`, the library's lock or \
write_lock) or by readers (`redlease run --shared`, read_lock), never by \
both. A semaphore's name (`redlease run --permits N`) shows how many of \
its N permits are held and how many are free, on each node and over all, \
and is judged by its permit quorum: a permit needs room on n*N/(N+1)+1 of \
the n nodes, not a majority, and is not takeable while fewer nodes have \
room and vote. The servers tell N while a permit is held; --permits N \
judges the name as a semaphore when none is. \"a writer waits\" means one \
stands in the name's queue, and readers who come after it wait behind it. \
A holder that ended without a release (killed, its machine gone) while its \
lease has a lock-delay (--lock-delay) is said to be in its lock-delay: the \
name is taken by nobody until that is over. The name of an election \
(`redlease elect`) shows its leader too (\"led by VALUE, term T\").

--watch prints the report now and again each time the name changes: taken, \
released, a waiter comes or goes, a holder ends without a release (read \
when it is due to end), nodes stop or start answering; not renewals. Each \
report follows a line with the time, UTC (-- 14:03:07.123 UTC --). It runs \
until SIGINT (Ctrl-C) or SIGTERM, and exits 0 then. An election's new \
leader, or its new value, is told too.

--json prints each report as one JSON object on one line: {\"key\": NAME, \
\"verdict\": \"held\"|\"free\"|\"quarantined\"|\"unknown\", \"held_on\": nodes with \
the key, \"nodes\", \"answered\", \"mode\": null|\"exclusive\"|\"shared\"|\"permits\", \
\"holders\": [{\"owner\", \"since_ms\" (ms since the epoch), \"weight\", \
\"in_lock_delay_ms\": null|ms left}], \"readers\", \"permits\": null|N, \"queued\", \
\"waiting\", \"fencing_counter\": null|N, \"leader\": null|{\"value\", \"term\", \
\"revision\", \"owner\", \"since_ms\"}}.

Examples:
  redlease status --nodes redis://a:6379,redis://b:6379,redis://c:6379 --key nightly-report
  redlease status --key nightly-report --watch
  redlease status --key nightly-report --json | jq .verdict

Exit codes: 0 the state is known (held, free, or not takeable), and --watch \
stopped by SIGINT or SIGTERM; 2 usage; 69 too few nodes answered to tell \
(for a semaphore: to tell whether a permit can be taken; not with --watch, \
which says so and goes on).")]
pub struct StatusArgs {
    /// The lock's name.
    #[arg(long, value_name = "NAME")]
    key: String,

    /// Judge the name as a semaphore of N permits (`run --permits N`),
    /// by its permit quorum, also while none of its permits is held (the
    /// servers tell N while one is).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    permits: Option<u32>,

    /// Print the report now, then again each time the lock changes (taken,
    /// released, a waiter comes or goes, a holder ends without a release,
    /// a new leader), each after a line with the time (UTC), until SIGINT
    /// or SIGTERM.
    #[arg(long)]
    watch: bool,

    /// Print each report as one JSON object on a line of its own instead
    /// of the table (see below).
    #[arg(long)]
    json: bool,

    #[command(flatten)]
    admin: AdminArg,
}

/// Where `status`, `leader` and `release --force` find a lock: the nodes, the key
/// prefix, and how long each node may take.
#[derive(Args, Debug)]
pub struct AdminArg {
    #[command(flatten)]
    pub nodes: NodesArg,

    /// Prefix of the lock's Redis key (the key is PREFIX{NAME}).
    #[arg(long, value_name = "PREFIX", default_value = "redlease:")]
    key_prefix: String,

    /// How long each node may take to connect and answer.
    #[arg(long, value_name = "D", default_value = "2s", value_parser = duration::parse_positive)]
    timeout: Duration,
}

impl AdminArg {
    /// A Locker for looking at or clearing a lock: it names the keys
    /// exactly as `run` and the library do, checks the node list, and
    /// bounds each node by the timeout (to connect, and to answer).
    /// Building it does no I/O.
    pub fn locker(&self) -> Result<(Vec<String>, Locker), Exit> {
        let (urls, builder) = self.nodes.builder()?;
        let locker = builder
            .key_prefix(self.key_prefix.as_str())
            .connect_timeout(self.timeout)
            .node_timeout(self.timeout)
            // Only bounds the node timeout: nothing is locked.
            .ttl(self.timeout.saturating_mul(4).max(Duration::from_secs(10)))
            .build()
            .map_err(|e| Exit::with(exit::USAGE, chain(&e)))?;
        Ok((urls, locker))
    }
}

pub async fn status(args: StatusArgs) -> Exit {
    let (_, locker) = match args.admin.locker() {
        Ok(made) => made,
        Err(exit) => return exit,
    };
    if args.watch {
        let exit = watch(&args, &locker).await;
        locker.close().await;
        return exit;
    }
    let key = args.key.as_str();
    let status = match locker.admin().inspect(key).await {
        Ok(status) => status,
        Err(e) => return inspect_failed(&e),
    };
    // The leader, if the name is an election's: read with the rest.
    let leader = status.leader();
    let (text, exit) = report(key, args.permits, &locker, &status, leader.as_ref());
    let text = match args.json {
        true => json_report(key, args.permits, &status, leader.as_ref()),
        false => text,
    };
    if print(&text).is_err() {
        return Exit::code(exit::signal_code(Signal::PIPE.as_raw()));
    }
    exit
}

/// `--watch`: the report now, then again each time the name changes (a
/// [`Watch`](redlease::Watch)), each after a line with the time (UTC) (or
/// one JSON object each), until SIGINT or SIGTERM (exit 0).
async fn watch(args: &StatusArgs, locker: &Locker) -> Exit {
    let key = args.key.as_str();
    let mut signals = match Signals::install_or_exit() {
        Ok(s) => s,
        Err(exit) => return exit,
    };
    // The watch tells an election's leader too (its record is read with
    // the rest).
    let mut watch = locker.watch(key);
    // The last report, as JSON: a change that shows nothing new in it
    // makes no report.
    let mut last: Option<String> = None;
    loop {
        let status = tokio::select! {
            changed = watch.changed() => changed,
            sig = signals.recv() => match signals::ends_watch(sig) {
                Some(code) => return Exit::code(code),
                None => continue,
            },
        };
        let status = match status {
            Ok(status) => status,
            Err(e) => return inspect_failed(&e),
        };
        let leader = status.leader();
        let json = json_report(key, args.permits, &status, leader.as_ref());
        if last.as_ref() == Some(&json) {
            continue;
        }
        let text = match args.json {
            true => json.clone(),
            false => {
                let (report, _) = report(key, args.permits, locker, &status, leader.as_ref());
                let now = utc_time_of_day(SystemTime::now());
                format!("-- {now} UTC --\n{report}")
            }
        };
        last = Some(json);
        if print(&text).is_err() {
            // Nobody reads any more (`| head -1`), as SIGPIPE would end it.
            return Exit::code(exit::signal_code(Signal::PIPE.as_raw()));
        }
    }
}

/// `now` as a UTC clock shows it: "14:03:07.123".
fn utc_time_of_day(now: SystemTime) -> String {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let of_day = since.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60,
        since.subsec_millis()
    )
}

/// The exit for an inspection (or a watch) that failed as a whole.
fn inspect_failed(e: &Error) -> Exit {
    match e {
        Error::InvalidInput { .. } => Exit::with(exit::USAGE, chain(e)),
        _ => Exit::with(exit::INTERNAL, chain(e)),
    }
}

/// `text` on stdout, flushed: a watcher's reader sees each report at once.
pub fn print(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// The report of `status` on `key` (`given_permits`: --permits), as a
/// table and a verdict, ending in a newline, and the exit it makes: 0 when
/// the state is known, 69 when too few nodes answered to tell.
fn report(
    key: &str,
    given_permits: Option<u32>,
    locker: &Locker,
    status: &LockStatus,
    leader: Option<&Leader>,
) -> (String, Exit) {
    let mut out = String::new();
    let nodes = status.nodes.len();
    let plural = if nodes == 1 { "" } else { "s" };
    // A semaphore as the servers hold it, else as --permits says.
    let permits = status.permits().or(given_permits);
    // A permit's quorum is not the lock's: n * N / (N + 1) + 1 nodes.
    let need = permits.map(|permits| locker.semaphore(key, permits).quorum());
    match permits.zip(need) {
        Some((permits, need)) => say!(
            out,
            "semaphore {:?} (key {}) on {nodes} node{plural}, {permits} permit{}, each held on \
             {need} of them",
            key,
            status.key,
            if permits == 1 { "" } else { "s" },
        ),
        None => say!(
            out,
            "lock {:?} (key {}) on {nodes} node{plural}, quorum {}",
            key,
            status.key,
            locker.admin().quorum()
        ),
    }
    if let (Some(given), Some(held)) = (given_permits, status.permits()) {
        if given != held {
            say!(
                out,
                "note: its permits are held with --permits {held}, not {given}: a run or \
                 acquire with --permits {given} exits 2 while they are"
            );
        }
    }
    let quorum = locker.admin().quorum();
    // Why a node failed goes on a line of its own under LOCK: it can be
    // long, and would push the other columns off the screen.
    let mut table = Table::new(&["NODE", "LOCK", "FENCING COUNTER", "WAITING"]).notes_under(1);
    for (node, answer) in &status.nodes {
        let name = format!("{} {}", node.index(), node.addr());
        match answer {
            Ok(s) => table.row(
                vec![
                    name,
                    show_node(s),
                    s.fencing_counter
                        .map_or_else(|| "-".to_string(), |n| n.to_string()),
                    s.waiting.to_string(),
                ],
                s.quarantine.map(show_quarantine),
            ),
            // A refused permission is an answer: the node is up, the
            // user's ACL rule lacks a right.
            Err(e) if e.kind().is_permission_refused() => table.row(
                vec![name, "no permission".into(), String::new(), String::new()],
                Some(why(e)),
            ),
            Err(e) => table.row(
                vec![name, "unreachable".into(), String::new(), String::new()],
                Some(why(e)),
            ),
        }
    }
    out.push_str(&table.render());

    let counter = match status.fencing_counter() {
        Some(n) => format!("fencing counter {n} (no token handed out so far is higher)"),
        None => "no fencing counter (no acquisition with fencing on lately)".to_string(),
    };
    let waiting = status.waiting();
    let verdict = status.verdict();
    let holder = holder(status.mode(), status.readers(), permits);
    let judged = permits.zip(need).map(|(permits, need)| {
        let verdict = permit_verdict(status, permits, need);
        (
            verdict,
            show_permit_verdict(verdict, need, status, holder.as_ref()),
        )
    });
    let writer_waits = match (status.writer_waits(), status.reserved()) {
        (true, _) => "; a writer waits (new readers wait behind it)",
        (false, true) => "; reserved for a waiter whose turn came (a set of locks, run with several --key, keeps it while it waits for its other names)",
        (false, false) => "",
    };
    // Who: the owner each holder's lease names (never its token), before
    // the verdict, which stays the last line.
    let now = std::time::SystemTime::now();
    if let Some(leader) = leader {
        say!(out, "led by {}, term {}", leader.value, leader.term);
    }
    let holders = status.holders();
    if let Some(who) = redlease::Holder::describe_all(&holders, now) {
        say!(out, "held by {who}");
    }
    // Held, but by nobody alive: every holder ended without a release.
    let delayed = !holders.is_empty() && holders.iter().all(|h| h.in_lock_delay().is_some());
    say!(
        out,
        "{}{writer_waits}; {waiting} process{} waiting; {counter}",
        match &judged {
            Some((_, line)) => line.clone(),
            None if delayed => show_delayed(verdict, nodes).unwrap_or_else(|| show_verdict(
                verdict,
                nodes,
                holder.as_ref()
            )),
            None => show_verdict(verdict, nodes, holder.as_ref()),
        },
        if waiting == 1 { "" } else { "es" }
    );
    let exit = match (verdict, judged) {
        (_, Some((PermitVerdict::Unknown { answered, .. }, _))) => Exit::with(
            exit::UNAVAILABLE,
            format!(
                "only {answered} of {nodes} nodes answered; a permit needs {} of them with room",
                need.unwrap_or(quorum)
            ),
        ),
        (_, Some(_)) => Exit::code(exit::OK),
        (Verdict::Unknown { answered, .. }, None) => {
            let refused = status
                .nodes
                .iter()
                .filter(|(_, a)| a.as_ref().is_err_and(|e| e.kind().is_permission_refused()))
                .count();
            let why = match refused {
                0 => String::new(),
                n => format!(
                    " ({n} refused this user a permission; its ACL rule lacks the right named \
                     above)"
                ),
            };
            Exit::with(
                exit::UNAVAILABLE,
                format!("only {answered} of {nodes} nodes answered; a quorum is {quorum}{why}"),
            )
        }
        _ => Exit::code(exit::OK),
    };
    (out, exit)
}

/// The report of `status` on `key` as one JSON object on one line (see
/// `status --help`).
fn json_report(
    key: &str,
    given_permits: Option<u32>,
    status: &LockStatus,
    leader: Option<&Leader>,
) -> String {
    let answered: Vec<&NodeLockState> = status
        .nodes
        .iter()
        .filter_map(|(_, answer)| answer.as_ref().ok())
        .collect();
    let held_on = answered
        .iter()
        .filter(|s| matches!(s.key, KeyState::Held { .. }))
        .count();
    let verdict = match status.verdict() {
        Verdict::Held { .. } => "held",
        Verdict::Free { .. } => "free",
        Verdict::Quarantined { .. } => "quarantined",
        _ => "unknown",
    };
    let mode = status.mode().map(|mode| match mode {
        LockMode::Exclusive => "exclusive",
        LockMode::Shared => "shared",
        _ => "permits",
    });
    let holders: Vec<Value> = status
        .holders()
        .iter()
        .map(|h| {
            json!({
                "owner": h.owner,
                "since_ms": epoch_ms(h.since),
                "weight": h.weight,
                "in_lock_delay_ms": h.in_lock_delay().map(millis),
            })
        })
        .collect();
    let report = json!({
        "key": key,
        "verdict": verdict,
        "held_on": held_on,
        "nodes": status.nodes.len(),
        "answered": answered.len(),
        "mode": mode,
        "holders": holders,
        "readers": status.readers(),
        "permits": status.permits().or(given_permits),
        "queued": status.queued(),
        "waiting": status.waiting(),
        "fencing_counter": status.fencing_counter(),
        "leader": leader_json(leader),
    });
    format!("{report}\n")
}

/// A leader as `status --json` and `leader --json` show it: null, or its
/// value, term, revision, owner and since when it leads (ms since the
/// epoch, by its machine's clock).
pub fn leader_json(leader: Option<&Leader>) -> Value {
    let Some(leader) = leader else {
        return Value::Null;
    };
    let holder = leader.holder.as_ref();
    json!({
        "value": leader.value,
        "term": leader.term,
        "revision": leader.revision,
        "owner": holder.map(|h| h.owner.as_str()).filter(|owner| !owner.is_empty()),
        "since_ms": epoch_ms(holder.and_then(|h| h.since)),
    })
}

/// Milliseconds since the Unix epoch, for JSON (null when not known).
fn epoch_ms(at: Option<SystemTime>) -> Option<u64> {
    at.and_then(|at| at.duration_since(UNIX_EPOCH).ok())
        .map(millis)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What went wrong with a node, without its name (the row has it): what
/// it means when that can be told, else the error and its cause.
fn why(e: &redlease::NodeError) -> String {
    if let Some(diagnosis) = errors::diagnose(e) {
        return diagnosis.to_string();
    }
    let kind = e.kind().to_string();
    match std::error::Error::source(e).map(chain) {
        // A kind that tells its cause already (a TLS failure names the
        // TLS library's reason) is not followed by it again.
        Some(cause) if !kind.contains(&cause) => format!("{kind}: {cause}"),
        _ => kind,
    }
}

/// One node's LOCK cell: free or held, by whom (or how many permits) and
/// for how long, whether a writer waits, and whether the node is
/// quarantined.
fn show_node(s: &NodeLockState) -> String {
    let mut cell = show_key(s.key, holder(s.mode, s.readers, s.permits).as_ref());
    if s.writer_waits {
        cell += ", a writer waits";
    }
    if s.reserved {
        cell += ", reserved for a waiter";
    }
    if s.quarantine.is_some() {
        cell += ", quarantined";
    }
    cell
}

/// Who holds a name.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Holder {
    /// "a writer", "2 readers".
    By(String),
    /// `held` of a semaphore's `of` permits.
    Permits { held: u64, of: u32 },
}

impl Holder {
    /// "held by a writer", "2 of 3 permits held (1 free)".
    fn held(&self) -> String {
        match self {
            Holder::By(who) => format!("held by {who}"),
            Holder::Permits { held, of } => {
                let free = match u64::from(*of).saturating_sub(*held) {
                    0 => "none free".to_string(),
                    n => format!("{n} free"),
                };
                let plural = if *of == 1 { "" } else { "s" };
                format!("{held} of {of} permit{plural} held ({free})")
            }
        }
    }
}

/// Who holds a name in `mode`: a writer, `readers` readers, or for a
/// semaphore of `permits` permits that many of its permits (`None`: not
/// held, or the nodes do not say).
fn holder(mode: Option<LockMode>, readers: u64, permits: Option<u32>) -> Option<Holder> {
    let by = |who: String| Some(Holder::By(who));
    match (mode?, permits) {
        (LockMode::Exclusive, _) => by("a writer".to_string()),
        (LockMode::Shared, _) if readers == 1 => by("1 reader".to_string()),
        (LockMode::Shared, _) => by(format!("{readers} readers")),
        (LockMode::Permit, Some(of)) => Some(Holder::Permits { held: readers, of }),
        (_, _) if readers == 1 => by("1 permit holder".to_string()),
        (_, _) => by(format!("{readers} permit holders")),
    }
}

fn show_key(key: KeyState, holder: Option<&Holder>) -> String {
    let held = holder.map_or_else(|| "held".to_string(), Holder::held);
    match key {
        KeyState::Free => "free".to_string(),
        KeyState::Held {
            expires_in: Some(left),
        } => format!("{held}, {} left", duration::show(left)),
        KeyState::Held { expires_in: None } => {
            format!("{held}, no expiry (not set by redlease?)")
        }
    }
}

/// Why a node casts no vote for a lock yet, and for how long.
fn show_quarantine(q: NodeQuarantine) -> String {
    let why = match q.cause {
        Quarantine::Restarted { up } if up < Duration::from_secs(1) => "just started".to_string(),
        Quarantine::Restarted { up } => format!("started {} ago", duration::show(up)),
        Quarantine::ClockJumped { ahead } => {
            format!("its clock jumped {} ahead", duration::show(ahead))
        }
        _ => "quarantined".to_string(),
    };
    format!(
        "quarantined: {why}, votes for a lock again in {}",
        duration::show(q.left)
    )
}

/// The summary's verdict; `holder` says who holds a held lock.
fn show_verdict(verdict: Verdict, nodes: usize, holder: Option<&Holder>) -> String {
    match verdict {
        Verdict::Held { on, for_at_most } => {
            let until = match for_at_most {
                Some(d) => format!("for {} more unless renewed or released", duration::show(d)),
                None => "with no expiry".to_string(),
            };
            let by = match holder {
                Some(Holder::By(who)) => format!(" by {who}"),
                Some(permits) => format!(": {}", permits.held()),
                None => String::new(),
            };
            format!("HELD on {on} of {nodes} nodes{by}, {until}")
        }
        Verdict::Free { leftover_on: 0 } => "FREE".to_string(),
        Verdict::Free { leftover_on } => format!(
            "FREE (a leftover key on {leftover_on} node{} expires by itself)",
            if leftover_on == 1 { "" } else { "s" }
        ),
        Verdict::Quarantined {
            takeable_in,
            quarantined,
            leftover_on,
        } => format!(
            "FREE, but not takeable for {}: {}{}",
            duration::show(takeable_in),
            match (quarantined, nodes) {
                (1, 1) => "the node is quarantined".to_string(),
                (q, n) if q == n => format!("all {n} nodes are quarantined"),
                (q, n) => format!("{q} of {n} nodes are quarantined"),
            },
            match leftover_on {
                0 => String::new(),
                n => format!(
                    " (a leftover key on {n} node{} expires by itself)",
                    if n == 1 { "" } else { "s" }
                ),
            }
        ),
        Verdict::Unknown { answered, held_on } => format!(
            "UNKNOWN: {answered} of {nodes} nodes answered (held on {held_on}, free on {})",
            answered - held_on
        ),
        _ => format!("{verdict:?}"),
    }
}

/// The summary's verdict for a lock held only by holders in their
/// lock-delay (they ended without a release): nobody renews or releases
/// it, and it is free when the delay is over. `None` unless held.
fn show_delayed(verdict: Verdict, nodes: usize) -> Option<String> {
    let Verdict::Held { on, for_at_most } = verdict else {
        return None;
    };
    let free = match for_at_most {
        Some(d) => format!("free in {}", duration::show(d)),
        None => "with no expiry".to_string(),
    };
    Some(format!(
        "HELD on {on} of {nodes} nodes in the lock-delay of a holder that ended without a \
         release, {free}"
    ))
}

/// Whether a permit of a semaphore of `permits` can be taken, judged by
/// its permit quorum `need` (n * N / (N + 1) + 1 of the n nodes, which the
/// library's [`Verdict`] does not know: it judges by the majority).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PermitVerdict {
    /// `need` nodes or more have room for a permit and vote.
    Takeable,
    /// Too few answered nodes have room for one to make `need`, whatever
    /// the others say: not until permits (or a lock of the name) expire
    /// or are released.
    Full {
        /// Nodes with room.
        room: usize,
    },
    /// Enough nodes have room, but too few of them vote yet: the others
    /// are quarantined.
    Quarantined {
        /// Until enough of them vote, if the nodes stay as they are.
        takeable_in: Duration,
        /// Nodes with room that are quarantined.
        quarantined: usize,
    },
    /// The nodes that did not answer decide.
    Unknown {
        answered: usize,
        /// Answered nodes with room.
        room: usize,
    },
}

/// Whether a node has room for one more of `permits` permits: no key, or
/// the semaphore's with the same N and fewer live holders (a lock of the
/// name, or a semaphore of another N, has none).
fn has_room(s: &NodeLockState, permits: u32) -> bool {
    match s.key {
        KeyState::Free => true,
        KeyState::Held { .. } => {
            s.mode == Some(LockMode::Permit)
                && s.permits == Some(permits)
                && s.readers < u64::from(permits)
        }
    }
}

/// [`PermitVerdict`] of `status` for a semaphore of `permits` whose
/// permits need `need` nodes.
fn permit_verdict(status: &redlease::LockStatus, permits: u32, need: usize) -> PermitVerdict {
    let answered: Vec<(bool, Option<Duration>)> = status
        .nodes
        .iter()
        .filter_map(|(_, s)| s.as_ref().ok())
        .map(|s| (has_room(s, permits), s.quarantine.map(|q| q.left)))
        .collect();
    judge_permits(status.nodes.len(), &answered, need)
}

/// [`PermitVerdict`] over `nodes` nodes, of which `answered` said whether
/// they have room for a permit and how long they are quarantined for yet,
/// for permits that need `need` nodes.
fn judge_permits(
    nodes: usize,
    answered: &[(bool, Option<Duration>)],
    need: usize,
) -> PermitVerdict {
    let room = answered.iter().filter(|(room, _)| *room).count();
    // What is left of the quarantines of the nodes with room, shortest first.
    let mut quarantined: Vec<Duration> = answered
        .iter()
        .filter(|(room, _)| *room)
        .filter_map(|(_, left)| *left)
        .collect();
    quarantined.sort();
    let voting = room - quarantined.len();
    let without = answered.len() - room;
    if voting >= need {
        PermitVerdict::Takeable
    } else if room >= need {
        PermitVerdict::Quarantined {
            takeable_in: quarantined[need - voting - 1],
            quarantined: quarantined.len(),
        }
    } else if without > nodes - need {
        PermitVerdict::Full { room }
    } else {
        PermitVerdict::Unknown {
            answered: answered.len(),
            room,
        }
    }
}

/// The summary's verdict for a semaphore whose permits need `need` nodes:
/// as [`show_verdict`] says it where a permit can be taken, and why not
/// where none can.
fn show_permit_verdict(
    verdict: PermitVerdict,
    need: usize,
    status: &redlease::LockStatus,
    holder: Option<&Holder>,
) -> String {
    let nodes = status.nodes.len();
    let held = status.verdict();
    let full = matches!(holder, Some(Holder::Permits { held, of }) if *held >= u64::from(*of));
    match verdict {
        PermitVerdict::Takeable => match held {
            Verdict::Held { .. } | Verdict::Free { .. } => show_verdict(held, nodes, holder),
            // Room on nodes the majority's count leaves out (some of a
            // permit's holders there).
            _ => "FREE".to_string(),
        },
        // "HELD ...: 3 of 3 permits held (none free)" says it all.
        PermitVerdict::Full { .. } if full && matches!(held, Verdict::Held { .. }) => {
            show_verdict(held, nodes, holder)
        }
        PermitVerdict::Full { room } => {
            let base = match held {
                Verdict::Held { .. } => show_verdict(held, nodes, holder),
                _ => "NOT TAKEABLE".to_string(),
            };
            format!(
                "{base}: no permit can be taken, as {room} of {nodes} nodes have room for one \
                 and a permit needs {need} (until permits there expire or are released)"
            )
        }
        PermitVerdict::Quarantined {
            takeable_in,
            quarantined,
        } => {
            let base = match held {
                Verdict::Held { .. } => show_verdict(held, nodes, holder),
                _ => "FREE".to_string(),
            };
            format!(
                "{base}, but no permit takeable for {}: {quarantined} of {nodes} nodes are \
                 quarantined, and a permit needs {need} with room that vote",
                duration::show(takeable_in)
            )
        }
        PermitVerdict::Unknown { answered, room } => format!(
            "UNKNOWN: {answered} of {nodes} nodes answered, {room} with room for a permit, \
             and a permit needs {need}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_read_as_sentences() {
        let held = Verdict::Held {
            on: 3,
            for_at_most: Some(Duration::from_secs(7)),
        };
        assert_eq!(
            show_verdict(held, 3, None),
            "HELD on 3 of 3 nodes, for 7.0s more unless renewed or released"
        );
        assert_eq!(
            show_verdict(Verdict::Free { leftover_on: 1 }, 3, None),
            "FREE (a leftover key on 1 node expires by itself)"
        );
        let unknown = Verdict::Unknown {
            answered: 1,
            held_on: 1,
        };
        assert_eq!(
            show_verdict(unknown, 3, None),
            "UNKNOWN: 1 of 3 nodes answered (held on 1, free on 0)"
        );
        let quarantined = Verdict::Quarantined {
            takeable_in: Duration::from_secs(28),
            quarantined: 2,
            leftover_on: 1,
        };
        assert_eq!(
            show_verdict(quarantined, 3, None),
            "FREE, but not takeable for 28.0s: 2 of 3 nodes are quarantined (a leftover key \
             on 1 node expires by itself)"
        );
        let alone = Verdict::Quarantined {
            takeable_in: Duration::from_secs(9),
            quarantined: 1,
            leftover_on: 0,
        };
        assert_eq!(
            show_verdict(alone, 1, None),
            "FREE, but not takeable for 9.0s: the node is quarantined"
        );
        assert_eq!(
            show_key(KeyState::Held { expires_in: None }, None),
            "held, no expiry (not set by redlease?)"
        );
    }

    #[test]
    fn a_held_lock_says_by_a_writer_or_by_how_many_readers() {
        let by = |who: &str| Some(Holder::By(who.to_string()));
        assert_eq!(holder(None, 0, None), None);
        assert_eq!(holder(Some(LockMode::Exclusive), 0, None), by("a writer"));
        assert_eq!(holder(Some(LockMode::Shared), 1, None), by("1 reader"));
        assert_eq!(holder(Some(LockMode::Shared), 3, None), by("3 readers"));
        let left = KeyState::Held {
            expires_in: Some(Duration::from_secs(4)),
        };
        assert_eq!(
            show_key(left, by("a writer").as_ref()),
            "held by a writer, 4.0s left"
        );
        assert_eq!(show_key(KeyState::Free, by("2 readers").as_ref()), "free");
        let held = Verdict::Held {
            on: 2,
            for_at_most: Some(Duration::from_secs(7)),
        };
        assert_eq!(
            show_verdict(held, 3, by("2 readers").as_ref()),
            "HELD on 2 of 3 nodes by 2 readers, for 7.0s more unless renewed or released"
        );
    }

    #[test]
    fn a_permit_needs_room_on_its_quorum_of_voting_nodes() {
        let room = (true, None);
        let full = (false, None);
        let q = |secs| (true, Some(Duration::from_secs(secs)));
        // 5 nodes, 3 permits: a permit needs 4.
        assert_eq!(judge_permits(5, &[room; 5], 4), PermitVerdict::Takeable);
        assert_eq!(
            judge_permits(5, &[room, room, room, room, full], 4),
            PermitVerdict::Takeable
        );
        // A majority with room is not enough.
        assert_eq!(
            judge_permits(5, &[room, room, room, full, full], 4),
            PermitVerdict::Full { room: 3 }
        );
        // Two quarantined of five: 3 vote, the first of the two in 8 s.
        assert_eq!(
            judge_permits(5, &[room, room, room, q(20), q(8)], 4),
            PermitVerdict::Quarantined {
                takeable_in: Duration::from_secs(8),
                quarantined: 2
            }
        );
        // Three answered, all with room: the two silent ones decide.
        assert_eq!(
            judge_permits(5, &[room, room, room], 4),
            PermitVerdict::Unknown {
                answered: 3,
                room: 3
            }
        );
        // Two answered without room rule a permit out whatever the rest say.
        assert_eq!(
            judge_permits(5, &[full, full], 4),
            PermitVerdict::Full { room: 0 }
        );
        // One node: its own room.
        assert_eq!(
            judge_permits(1, &[full], 1),
            PermitVerdict::Full { room: 0 }
        );
        assert_eq!(
            judge_permits(1, &[], 1),
            PermitVerdict::Unknown {
                answered: 0,
                room: 0
            }
        );
    }

    #[test]
    fn a_semaphore_says_how_many_permits_are_held_and_free() {
        let permits = |held, of| holder(Some(LockMode::Permit), held, Some(of)).unwrap();
        assert_eq!(permits(2, 2).held(), "2 of 2 permits held (none free)");
        assert_eq!(permits(1, 3).held(), "1 of 3 permits held (2 free)");
        assert_eq!(permits(1, 1).held(), "1 of 1 permit held (none free)");
        // Without the number of permits, the holders alone.
        let unknown = holder(Some(LockMode::Permit), 2, None).unwrap();
        assert_eq!(unknown.held(), "held by 2 permit holders");
        let left = KeyState::Held {
            expires_in: Some(Duration::from_secs(4)),
        };
        assert_eq!(
            show_key(left, Some(&permits(1, 2))),
            "1 of 2 permits held (1 free), 4.0s left"
        );
        let held = Verdict::Held {
            on: 3,
            for_at_most: Some(Duration::from_secs(7)),
        };
        assert_eq!(
            show_verdict(held, 3, Some(&permits(2, 2))),
            "HELD on 3 of 3 nodes: 2 of 2 permits held (none free), for 7.0s more unless \
             renewed or released"
        );
    }
}
