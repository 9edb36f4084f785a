//! The commands redlease sends to a server, by deployment and option: the
//! one list `doctor` checks an ACL user's rights against, and how it tries
//! each one as that user without touching a lock.
//!
//! The ACL rules of docs/deployments.md grant these; `crates/redlease/tests/it/acl.rs` and
//! `acl_deployments.rs` prove the rules are enough.

use redis::Value;

use crate::probe::{Failure, Probe};

/// When redlease sends a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// To every server.
    Always,
    /// To a standalone server or the sentinels' primary (a cluster uses
    /// the sharded pub/sub commands instead).
    NotCluster,
    /// To a cluster's primaries.
    Cluster,
    /// To the primary the sentinels name.
    Sentinel,
    /// With `run --durable N` (the library's `Durability::required`).
    Durable,
}

/// One command redlease sends.
#[derive(Debug)]
pub struct Need {
    /// As `ACL SETUSER` grants it, without the `+`: `pttl`,
    /// `pubsub|numsub`.
    pub command: &'static str,
    pub when: When,
    /// What fails without it.
    pub without: &'static str,
    /// Locks still work without it (waiters are not woken by releases and
    /// poll instead): a WARN, not a FAIL.
    pub optional: bool,
}

const fn need(command: &'static str, when: When, without: &'static str) -> Need {
    Need {
        command,
        when,
        without,
        optional: false,
    }
}

const fn optional(command: &'static str, when: When, without: &'static str) -> Need {
    Need {
        command,
        when,
        without,
        optional: true,
    }
}

/// Every command redlease (the library, and `run`, `status` and `release`)
/// sends, except `DELIFEQ`, which doctor's "native release" row checks on
/// the servers that have it.
pub const NEEDS: &[Need] = &[
    need("info", When::Always, "every new connection reads INFO server (run_id, uptime): no connection works"),
    need("time", When::Always, "every new connection reads TIME, and the fenced acquire script too: no connection works"),
    need("eval", When::Always, "the first release on each connection and any script the server lost go whole: releases fail"),
    need("evalsha", When::Always, "the fenced acquire, extend, renewal and the follow-up of a refused acquire are scripts: no lock with a fencing token (every `run`)"),
    need("set", When::Always, "no lock can be taken (SET NX PX)"),
    need("get", When::Always, "releases, extends and renewals read the lock's holder: they fail"),
    need("incr", When::Always, "no fencing token can be drawn: every `run` fails to lock"),
    need("pexpire", When::Always, "no extend or renewal: `run` loses its lock after one TTL"),
    need("pexpiretime", When::Always, "a plain acquire (fencing off) reads the new key's expiry for the clock guard: it fails"),
    need("pttl", When::Always, "`redlease status` and a refused acquire's follow-up read the holder's time left: they fail"),
    need("del", When::Always, "no release: every lock stays held until its TTL runs out"),
    need("pubsub|numsub", When::NotCluster, "`redlease status` counts the waiters with it: it fails"),
    optional("publish", When::NotCluster, "releases cannot wake other processes' waiters: they poll"),
    optional("subscribe", When::NotCluster, "waiters cannot hear releases: they poll"),
    optional("unsubscribe", When::NotCluster, "waiters' subscriptions are not ended"),
    need("pubsub|shardnumsub", When::Cluster, "`redlease status` counts the waiters with it: it fails"),
    optional("spublish", When::Cluster, "releases cannot wake other processes' waiters: they poll"),
    need("cluster|slots", When::Cluster, "the cluster client reads the slot map with it: nothing works"),
    need("ping", When::Cluster, "the cluster client checks its connections with it"),
    need("role", When::Sentinel, "the Sentinel client confirms the primary with it: nothing works"),
    need("wait", When::Durable, "no write can wait for its replicas: every durable lock fails"),
];

/// The commands redlease sends to a server deployed as `deploy` says
/// (`cluster`, `sentinel`), with `durable` on or off.
pub fn needed(cluster: bool, sentinel: bool, durable: bool) -> Vec<&'static Need> {
    NEEDS
        .iter()
        .filter(|n| match n.when {
            When::Always => true,
            When::NotCluster => !cluster,
            When::Cluster => cluster,
            When::Sentinel => sentinel,
            When::Durable => durable,
        })
        .collect()
}

/// What to try on one server: the commands, and the key and channel to
/// try them on.
#[derive(Clone, Debug)]
pub struct Plan {
    pub needs: Vec<&'static Need>,
    /// A key no lock uses, under the lock keys' prefix (no braces: a
    /// lock's key has them).
    pub key: String,
    /// A channel no waiter listens to, under the same prefix.
    pub channel: String,
}

impl Plan {
    /// The plan for a server deployed as `cluster` or `sentinel` say,
    /// with `durable` on or off, for keys under `prefix`.
    pub fn new(prefix: &str, cluster: bool, sentinel: bool, durable: bool) -> Plan {
        Plan {
            needs: needed(cluster, sentinel, durable),
            key: format!("{prefix}doctor-probe"),
            channel: format!("{prefix}doctor-probe:released"),
        }
    }
}

/// What trying the commands as the connecting user found.
#[derive(Clone, Debug, Default)]
pub struct Tried {
    /// Each command tried, with its refusal if the ACL refused it.
    pub commands: Vec<(&'static Need, Option<Failure>)>,
    /// A refusal about the probe key (the user's key pattern does not
    /// cover redlease's keys), or the probe channel.
    pub key: Option<Failure>,
    pub channel: Option<Failure>,
    /// Commands that could not be tried (no reply, or not tried: the shard
    /// subscriptions).
    pub unknown: Vec<(&'static str, String)>,
}

/// Tries each of `needs` as the connecting user, on `key` (a key no lock
/// uses, under the lock keys' prefix) and `channel` (likewise): reads, a
/// `SET NX` of a value INCR refuses (not a number) that expires in 10 s
/// and is deleted at the end, `PUBLISH` to a channel nobody listens to.
/// A refusal says `NOPERM`; any other answer, an error included (`MOVED`
/// from a cluster's other shards, `NOSCRIPT`, an unknown command on an
/// older server), means the ACL let the command through.
pub async fn try_all(
    probe: &mut Probe,
    needs: &[&'static Need],
    key: &str,
    channel: &str,
) -> Tried {
    let mut tried = Tried::default();
    let mut subscribed = None;
    for &need in needs {
        let args: Vec<&str> = match need.command {
            "info" => vec!["INFO", "server"],
            "time" => vec!["TIME"],
            "eval" => vec!["EVAL", "return 1", "0"],
            // SHA1 of "return 1": cached by the EVAL above, or NOSCRIPT.
            "evalsha" => vec!["EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"],
            "get" => vec!["GET", key],
            "set" => vec!["SET", key, "doctor-probe", "NX", "PX", "10000"],
            "incr" => vec!["INCR", key],
            "pexpire" => vec!["PEXPIRE", key, "10000"],
            "pexpiretime" => vec!["PEXPIRETIME", key],
            "pttl" => vec!["PTTL", key],
            // Last of the key's commands, by NEEDS' order.
            "del" => vec!["DEL", key],
            "pubsub|numsub" => vec!["PUBSUB", "NUMSUB", channel],
            "pubsub|shardnumsub" => vec!["PUBSUB", "SHARDNUMSUB", channel],
            "publish" => vec!["PUBLISH", channel, "doctor-probe"],
            "spublish" => vec!["SPUBLISH", channel, "doctor-probe"],
            "cluster|slots" => vec!["CLUSTER", "SLOTS"],
            "ping" => vec!["PING"],
            "role" => vec!["ROLE"],
            "wait" => vec!["WAIT", "0", "0"],
            // On their own connection, once for both.
            "subscribe" | "unsubscribe" => {
                if subscribed.is_none() {
                    subscribed = Some(probe.try_subscribe(channel).await);
                }
                match subscribed.clone() {
                    Some(Err(Failure::Denied(why))) => {
                        let why_lower = why.to_ascii_lowercase();
                        if why_lower.contains("channel") {
                            tried.channel.get_or_insert(Failure::Denied(why));
                            tried.commands.push((need, None));
                        } else if why_lower.contains(&format!("'{}'", need.command)) {
                            tried.commands.push((need, Some(Failure::Denied(why))));
                        } else {
                            tried.commands.push((need, None));
                        }
                    }
                    Some(Err(e)) => tried.unknown.push((need.command, e.to_string())),
                    _ => tried.commands.push((need, None)),
                }
                continue;
            }
            other => {
                tried
                    .unknown
                    .push((other, "doctor does not know how to try it".into()));
                continue;
            }
        };
        let mut cmd = redis::cmd(args[0]);
        cmd.arg(&args[1..]);
        match probe.query::<Value>(&cmd).await {
            Err(Failure::Denied(why)) => {
                let lower = why.to_ascii_lowercase();
                if lower.contains("access a key") || lower.contains("one of the keys") {
                    tried.key.get_or_insert(Failure::Denied(why));
                    tried.commands.push((need, None));
                } else if lower.contains("channel") {
                    tried.channel.get_or_insert(Failure::Denied(why));
                    tried.commands.push((need, None));
                } else {
                    tried.commands.push((need, Some(Failure::Denied(why))));
                }
            }
            Err(Failure::Failed(why)) if why.starts_with("no reply") => {
                tried.unknown.push((need.command, why));
            }
            // Any other answer got past the ACL.
            _ => tried.commands.push((need, None)),
        }
    }
    tried
}

impl Tried {
    /// The commands the ACL refused.
    pub fn refused(&self) -> impl Iterator<Item = &'static Need> + '_ {
        self.commands
            .iter()
            .filter(|(_, refused)| refused.is_some())
            .map(|(need, _)| *need)
    }
}
