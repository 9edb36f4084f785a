//! `redlease doctor`: checks every node for what breaks a lock's safety or
//! availability, and prints OK / WARN / FAIL with the reason and the fix.
//!
//! It connects to each URL itself (not through a Locker), so a server
//! listed twice is reported rather than refused.

use std::collections::BTreeMap;
use std::time::Duration;

use clap::Args;

use crate::duration;
use crate::errors::chain;
use crate::exit::{self, Exit};
use crate::facts::{self, Facts};
use crate::nodes::NodesArg;
use crate::probe::Failure;
use crate::table::Table;

/// Clocks further apart than this suggest missing time sync.
const SKEW_WARN: Duration = Duration::from_secs(1);
/// Clocks this far apart have no time sync at all, and approach the fence
/// expiry (10 min by default) within which fencing counters restarted from
/// a node's clock stay monotonic.
const SKEW_FAIL: Duration = Duration::from_secs(60);

#[derive(Args, Debug)]
#[command(after_help = "\
Checks, per node: reachable and latency; the server's kind (redis, valkey) \
and version, and its mode (Redis 6.0 or later is supported: older ones \
WARN, as waiters are not woken by releases without RESP3); Lua scripting; \
maxmemory-policy (only noeviction is safe); persistence (AOF with \
appendfsync always, or delayed restarts); replication (a replica, or a \
primary with replicas that could fail over). Across nodes: the same server \
listed twice (same run_id: a fake majority), an even node count, and clock \
skew (from TIME).

A least-privilege user (README: ACL) may not run PING, INFO or CONFIG GET: \
the checks that need them WARN (not checked) and name the command; the \
others run. For every check, run doctor as an admin user.

Example:
  redlease doctor --nodes redis://a:6379,redis://b:6379,redis://c:6379 --ttl 30s

Exit codes: 0 no FAIL (WARNs allowed); 1 at least one FAIL; 2 usage.")]
pub struct DoctorArgs {
    #[command(flatten)]
    nodes: NodesArg,

    /// The largest lock TTL you use: latency and restart advice depend on it.
    #[arg(long, value_name = "D", default_value = "10s", value_parser = duration::parse)]
    ttl: Duration,

    /// How long each node may take to connect and answer one request.
    #[arg(long, value_name = "D", default_value = "2s", value_parser = duration::parse)]
    timeout: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Ok,
    Warn,
    Fail,
}

impl Level {
    fn label(self) -> &'static str {
        match self {
            Level::Ok => "OK",
            Level::Warn => "WARN",
            Level::Fail => "FAIL",
        }
    }
}

/// One finding: a check's result, why, and how to fix it.
#[derive(Debug)]
struct Row {
    level: Level,
    check: &'static str,
    detail: String,
    fix: Option<String>,
}

fn ok(check: &'static str, detail: impl Into<String>) -> Row {
    Row {
        level: Level::Ok,
        check,
        detail: detail.into(),
        fix: None,
    }
}

fn warn(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Row {
    Row {
        level: Level::Warn,
        check,
        detail: detail.into(),
        fix: Some(fix.into()),
    }
}

fn fail(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Row {
    Row {
        level: Level::Fail,
        check,
        detail: detail.into(),
        fix: Some(fix.into()),
    }
}

pub async fn doctor(args: DoctorArgs) -> Exit {
    let urls = match args.nodes.urls() {
        Ok(urls) => urls,
        Err(exit) => return exit,
    };
    let tls = match args.nodes.redis_tls() {
        Ok(tls) => tls,
        Err(exit) => return exit,
    };
    let probes: Vec<_> = urls
        .iter()
        .map(|url| {
            let (url, tls) = (url.clone(), tls.clone());
            tokio::spawn(async move { facts::gather(&url, args.timeout, tls.as_ref()).await })
        })
        .collect();
    let mut found = Vec::new();
    for probe in probes {
        found.push(
            probe
                .await
                .unwrap_or_else(|e| Err(format!("internal error: {}", chain(&e)))),
        );
    }

    let quorum = urls.len() / 2 + 1;
    println!(
        "redlease doctor: {} node{}, quorum {quorum}, largest TTL {}",
        urls.len(),
        plural(urls.len()),
        duration::show(args.ttl)
    );
    let mut table = Table::new(&["STATUS", "NODE", "CHECK", "DETAIL"]);
    let mut counts = BTreeMap::new();
    let mut add = |node: String, row: Row| {
        *counts.entry(row.level).or_insert(0) += 1;
        let fix = row.fix.map(|f| format!("fix: {f}"));
        table.row(
            vec![
                row.level.label().to_string(),
                node,
                row.check.to_string(),
                row.detail,
            ],
            fix,
        );
    };
    for (i, (url, facts)) in urls.iter().zip(&found).enumerate() {
        // URLs were checked to parse; the library names the node as its
        // errors do.
        let node = redlease::NodeId::from_url(i, url)
            .map_or_else(|_| i.to_string(), |id| format!("{i} {}", id.addr()));
        for row in node_checks(facts.as_ref(), args.ttl, args.timeout) {
            add(node.clone(), row);
        }
    }
    for row in fleet_checks(&found) {
        add("all".to_string(), row);
    }
    print!("{}", table.render());
    let count = |level| counts.get(&level).copied().unwrap_or(0);
    println!(
        "{} FAIL, {} WARN, {} OK",
        count(Level::Fail),
        count(Level::Warn),
        count(Level::Ok)
    );
    match count(Level::Fail) {
        0 => Exit::code(exit::OK),
        _ => Exit::code(exit::CONFLICT),
    }
}

/// The checks of one node.
fn node_checks(facts: Result<&Facts, &String>, ttl: Duration, timeout: Duration) -> Vec<Row> {
    let facts = match facts {
        Ok(facts) => facts,
        Err(why) => {
            return vec![fail(
                "reachable",
                format!("no: {why}"),
                format!(
                    "start the server, or check the URL, port, firewall and password \
                     (redis://:password@host:port); doctor waits {} per request (--timeout)",
                    duration::show(timeout)
                ),
            )]
        }
    };
    vec![
        latency(facts.latency, facts.ping_denied, ttl),
        server(facts),
        scripting(facts),
        eviction(facts),
        persistence(facts, ttl),
        replication(facts),
    ]
}

fn latency(rtt: Duration, ping_denied: bool, ttl: Duration) -> Row {
    // The library's default per-request timeout is 5% of the TTL.
    let budget = ttl / 20;
    let detail = if ping_denied {
        format!(
            "PING {} (median of 5; this user may not run PING, so its refusal was timed)",
            duration::show_ms(rtt)
        )
    } else {
        format!("PING {} (median of 5)", duration::show_ms(rtt))
    };
    let why = format!(
        "each request may take {} with a {} TTL",
        duration::show(budget),
        duration::show(ttl)
    );
    if rtt >= budget {
        fail(
            "reachable",
            format!("{detail}: slower than the {why}"),
            "use nearer nodes, or a longer TTL",
        )
    } else if rtt >= budget / 4 {
        warn(
            "reachable",
            format!("{detail}: little margin, as {why}"),
            "use nearer nodes, or a longer TTL",
        )
    } else {
        ok("reachable", detail)
    }
}

/// `"7.0.15"` → `(7, 0, 15)`; a missing part counts as 0.
fn version_triple(version: &str) -> Option<(u32, u32, u32)> {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let mut next = || parts.next().flatten().unwrap_or(0);
    Some((major, next(), next()))
}

/// A check that needs a command this user may not run: doctor says so and
/// goes on with the others.
fn not_checked(check: &'static str, command: &str, what: &str) -> Row {
    warn(
        check,
        format!("not checked: this user may not run {command} (ACL: NOPERM)"),
        format!("run doctor as a user allowed {command} (an admin user), or check {what} yourself"),
    )
}

/// Why a read failed, for a detail cell.
fn failed(read: Result<(), &Failure>) -> String {
    match read {
        Ok(()) => "answered".to_string(),
        Err(Failure::Denied(_)) => "refused for this user (NOPERM)".to_string(),
        Err(e) => e.to_string(),
    }
}

fn server(facts: &Facts) -> Row {
    const CHECK: &str = "server";
    let Some(server) = facts.server() else {
        return warn(
            CHECK,
            format!(
                "could not tell which server this is: HELLO {}; INFO {}",
                failed(facts.hello.as_ref().map(drop)),
                failed(facts.info.as_ref().map(drop))
            ),
            "allow INFO for this user (ACL +info), or run doctor as an admin user",
        );
    };
    let mode = facts.mode().unwrap_or_else(|| "standalone".into());
    let compatible = match &server.redis_compatible {
        Some(v) if server.kind != "redis" => format!(" (Redis {v} compatible)"),
        _ => String::new(),
    };
    let detail = format!("{} {}{compatible}, {mode}", server.kind, server.version);
    // Judged by what the server can do where it was probed (HELLO, which
    // came with RESP3; EVAL has a check of its own), else by the Redis
    // version it is compatible with.
    let version = server.redis_compatible.as_deref().and_then(version_triple);
    let before_6 = match facts.resp3() {
        Some(resp3) => !resp3,
        None => version.is_some_and(|v| v < (6, 0, 0)),
    };
    const UPGRADE: &str = "upgrade to Redis 6.0 or later (the oldest redlease supports), or Valkey";
    match mode.as_str() {
        "cluster" => fail(
            CHECK,
            format!("{detail}: a cluster node owns only some keys' slots"),
            "give redlease independent standalone servers (not a Redis Cluster)",
        ),
        "sentinel" => fail(
            CHECK,
            format!("{detail}: a Sentinel stores no data"),
            "list the data nodes, not the sentinels",
        ),
        _ if version.is_some_and(|v| v < (2, 6, 12)) => fail(
            CHECK,
            format!("{detail}: no `SET ... NX PX` (Redis 2.6.12), which the lock is taken with"),
            UPGRADE,
        ),
        _ if before_6 => warn(
            CHECK,
            format!(
                "{detail}: older than Redis 6.0, the oldest supported: without RESP3 waiters are \
                 not woken by releases, so each wait loses one node timeout, then polls on the \
                 retry delay (or the holder's expiry). Locks stay correct."
            ),
            UPGRADE,
        ),
        _ => ok(CHECK, detail),
    }
}

fn scripting(facts: &Facts) -> Row {
    match &facts.scripting {
        Ok(()) => ok(
            "lua scripts",
            "EVAL works (every lock operation is a script)",
        ),
        Err(Failure::Denied(_)) => fail(
            "lua scripts",
            "this user may not run EVAL (ACL: NOPERM), and every lock operation is a script",
            "grant the rule in README's \"ACL: the least privilege\" (+eval +evalsha \
             +script|load and the commands the scripts call)",
        ),
        Err(e) => fail(
            "lua scripts",
            format!("EVAL failed: {e}"),
            "allow scripting for this user (README: \"ACL: the least privilege\")",
        ),
    }
}

fn eviction(facts: &Facts) -> Row {
    const CHECK: &str = "maxmemory-policy";
    if let Err(Failure::Denied(_)) = &facts.config {
        return not_checked(CHECK, "CONFIG GET", "that maxmemory-policy is noeviction");
    }
    let Some(policy) = facts.setting("maxmemory-policy") else {
        let why = facts
            .config
            .as_ref()
            .err()
            .map_or_else(|| "not reported".into(), ToString::to_string);
        return warn(
            CHECK,
            format!("could not read it: {why}"),
            "make sure it is noeviction (managed services show it in their parameter settings)",
        );
    };
    if policy == "noeviction" {
        return ok(CHECK, "noeviction: lock keys are never evicted");
    }
    let limit = match facts.setting("maxmemory") {
        Some("0") => " (no maxmemory is set yet, but the policy applies once one is)",
        _ => "",
    };
    fail(
        CHECK,
        format!(
            "{policy}: under memory pressure Redis may evict a lock key, and a second \
             client then gets the lock{limit}"
        ),
        "CONFIG SET maxmemory-policy noeviction, and set it in redis.conf",
    )
}

fn persistence(facts: &Facts, ttl: Duration) -> Row {
    const CHECK: &str = "persistence";
    let aof = match facts.setting("appendonly") {
        Some(v) => Some(v == "yes"),
        None => facts.info("aof_enabled").map(|v| v == "1"),
    };
    let delayed = format!(
        "after a crash or restart keep the node down for longer than {} (your largest TTL) \
         before it rejoins",
        duration::show(ttl)
    );
    match (aof, facts.setting("appendfsync")) {
        (Some(true), Some("always")) => ok(
            CHECK,
            "AOF with appendfsync always: lock keys survive a crash",
        ),
        (Some(true), fsync) => warn(
            CHECK,
            format!(
                "AOF with appendfsync {}: a crash can lose the last writes, lock keys included",
                fsync.unwrap_or("unknown")
            ),
            format!("CONFIG SET appendfsync always, or {delayed}"),
        ),
        (Some(false), _) => warn(
            CHECK,
            "no AOF: a restarted node comes back without its lock keys",
            format!("{delayed}, or CONFIG SET appendonly yes and appendfsync always"),
        ),
        (None, _)
            if matches!(
                (&facts.config, &facts.info),
                (Err(Failure::Denied(_)), Err(Failure::Denied(_)))
            ) =>
        {
            not_checked(CHECK, "CONFIG GET or INFO", "the persistence settings")
        }
        (None, _) => warn(
            CHECK,
            "could not read the persistence settings",
            format!("use appendonly yes with appendfsync always, or {delayed}"),
        ),
    }
}

fn replication(facts: &Facts) -> Row {
    const CHECK: &str = "replication";
    let replicas = facts
        .info("connected_slaves")
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(0);
    // INFO says master/slave; HELLO (which every user may run) master/replica.
    let role = facts.info("role").or_else(|| {
        let role = facts.hello.as_ref().ok()?.role.as_deref()?;
        Some(if role == "replica" { "slave" } else { role }.to_string())
    });
    match role.as_deref() {
        Some("master") if matches!(facts.info, Err(Failure::Denied(_))) => warn(
            CHECK,
            "not checked: this user may not run INFO (ACL: NOPERM); HELLO says it is a \
             primary, but not how many replicas it has",
            "run doctor as a user allowed INFO (an admin user), or make sure no replica can \
             be promoted in its place",
        ),
        Some("slave") => {
            let primary = match (facts.info("master_host"), facts.info("master_port")) {
                (Some(host), Some(port)) => format!(" of {host}:{port}"),
                _ => String::new(),
            };
            fail(
                CHECK,
                format!("a replica{primary}: it refuses lock writes or holds stale ones"),
                "list independent primaries only",
            )
        }
        Some("master") if replicas > 0 => warn(
            CHECK,
            format!(
                "primary with {replicas} replica{}: replication is asynchronous, so a failover \
                 can promote a replica that lacks a lock key",
                plural(replicas as usize)
            ),
            "use independent primaries without automatic failover; several nodes give \
             availability instead",
        ),
        Some("master") => ok(CHECK, "primary without replicas"),
        None if matches!(facts.info, Err(Failure::Denied(_))) => {
            not_checked(CHECK, "INFO", "that the node is a primary without replicas")
        }
        _ => warn(
            CHECK,
            "could not read the role from INFO",
            "allow INFO for this user (ACL +info)",
        ),
    }
}

/// The checks across nodes.
fn fleet_checks(found: &[Result<Facts, String>]) -> Vec<Row> {
    vec![node_count(found), same_server(found), clock_skew(found)]
}

fn node_count(found: &[Result<Facts, String>]) -> Row {
    const CHECK: &str = "node count";
    let n = found.len();
    let quorum = n / 2 + 1;
    let tolerated = n - quorum;
    let up = found.iter().filter(|f| f.is_ok()).count();
    let mut detail = format!(
        "{n} node{}, quorum {quorum}: tolerates {tolerated} failure{}",
        plural(n),
        plural(tolerated)
    );
    let even = n.is_multiple_of(2);
    if even {
        detail.push_str(&format!(", no more than {} node{}", n - 1, plural(n - 1)));
    }
    if up < n {
        detail.push_str(&format!("; {up} of {n} reachable"));
    }
    if up < quorum {
        fail(
            CHECK,
            format!("{detail}: no lock can be taken now"),
            "bring nodes back until a quorum answers",
        )
    } else if even {
        warn(
            CHECK,
            detail,
            format!("use an odd number of nodes ({} or {})", n - 1, n + 1),
        )
    } else {
        ok(CHECK, detail)
    }
}

fn same_server(found: &[Result<Facts, String>]) -> Row {
    const CHECK: &str = "distinct servers";
    let mut by_id: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    // Reachable nodes that did not tell their run_id (INFO refused).
    let mut unknown = Vec::new();
    for (i, facts) in found.iter().enumerate() {
        let Ok(facts) = facts else { continue };
        match facts.info("run_id") {
            Some(id) => by_id.entry(id).or_default().push(i),
            None => unknown.push(format!("node {i}")),
        }
    }
    let twice: Vec<String> = by_id
        .values()
        .filter(|nodes| nodes.len() > 1)
        .map(|nodes| {
            let names: Vec<String> = nodes.iter().map(|i| format!("node {i}")).collect();
            names.join(" = ")
        })
        .collect();
    if twice.is_empty() && !unknown.is_empty() {
        warn(
            CHECK,
            format!(
                "not checked for {}: INFO (run_id) {}",
                unknown.join(", "),
                if found
                    .iter()
                    .flatten()
                    .any(|f| matches!(f.info, Err(Failure::Denied(_))))
                {
                    "refused for this user (ACL: NOPERM)"
                } else {
                    "not answered"
                }
            ),
            "run doctor as a user allowed INFO (an admin user), or make sure no server is \
             listed twice under two names",
        )
    } else if twice.is_empty() {
        ok(
            CHECK,
            format!(
                "{} distinct server{} by run_id",
                by_id.len(),
                plural(by_id.len())
            ),
        )
    } else {
        fail(
            CHECK,
            format!(
                "the same server (same run_id) is listed more than once: {}; it would count \
                 twice toward the quorum, a fake majority",
                twice.join(", ")
            ),
            "list each server once",
        )
    }
}

fn clock_skew(found: &[Result<Facts, String>]) -> Row {
    const CHECK: &str = "clock skew";
    let clocks: Vec<_> = found
        .iter()
        .filter_map(|f| f.as_ref().ok()?.clock.as_ref().ok())
        .collect();
    let (Some(min), Some(max)) = (
        clocks.iter().map(|c| c.offset_us).min(),
        clocks.iter().map(|c| c.offset_us).max(),
    ) else {
        return warn(
            CHECK,
            "no node told its time (TIME failed)",
            "allow TIME for this user (the lock script needs it too)",
        );
    };
    if clocks.len() < 2 {
        return ok(CHECK, "one node: nothing to compare");
    }
    let spread = Duration::from_micros(max.abs_diff(min));
    let error = clocks
        .iter()
        .map(|c| c.uncertainty)
        .max()
        .unwrap_or_default();
    let detail = format!(
        "clocks differ by at most {} (± {})",
        duration::show_ms(spread),
        duration::show_ms(error)
    );
    if spread >= SKEW_FAIL {
        fail(
            CHECK,
            format!(
                "{detail}: no time sync; fencing counters restarted from a node's clock \
                 assume clocks within the fence expiry (10 min by default)"
            ),
            "run time sync (chrony or ntpd, slewing) on every node",
        )
    } else if spread >= SKEW_WARN {
        warn(
            CHECK,
            format!("{detail}: time sync looks off, and a clock that steps expires keys early"),
            "run time sync (chrony or ntpd, slewing) on every node",
        )
    } else {
        ok(CHECK, detail)
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
