//! How `doctor` tries, as the connecting user and without touching a
//! lock, each command redlease sends to a server. Which commands those are
//! is the library's declaration ([`redlease::acl`]), which also makes the
//! ACL rules of docs/deployments.md; `crates/redlease/tests/it/acl.rs` and
//! `acl_deployments.rs` prove the rules are enough.

use redis::Value;
use redlease::acl::{AclRule, Command, Deployment};
use redlease::Durability;

use crate::probe::{Failure, Probe};

/// What to try on one server: the commands, and the key and channel to
/// try them on.
#[derive(Clone, Debug)]
pub struct Plan {
    pub needs: Vec<&'static Command>,
    /// A key no lock uses, under the lock keys' prefix (no braces: a
    /// lock's key has them).
    pub key: String,
    /// A channel no waiter listens to, under the same prefix.
    pub channel: String,
}

impl Plan {
    /// The plan for a server of `deployment`, with `durability` (`run
    /// --durable N`: `WAIT`), for keys under `prefix`: the commands the
    /// library declares for it, less the shard subscriptions, which the
    /// cluster client makes on connections of its own and doctor does not
    /// try.
    pub fn new(prefix: &str, deployment: Deployment, durability: Durability) -> Plan {
        let rule = AclRule::new(deployment).durability(durability);
        Plan {
            needs: rule
                .commands()
                .filter(|c| !matches!(c.name, "ssubscribe" | "sunsubscribe"))
                .collect(),
            key: format!("{prefix}doctor-probe"),
            channel: format!("{prefix}doctor-probe:released"),
        }
    }
}

/// What trying the commands as the connecting user found.
#[derive(Clone, Debug, Default)]
pub struct Tried {
    /// Each command tried, with its refusal if the ACL refused it.
    pub commands: Vec<(&'static Command, Option<Failure>)>,
    /// A refusal about the probe key (the user's key pattern does not
    /// cover redlease's keys), or the probe channel.
    pub key: Option<Failure>,
    pub channel: Option<Failure>,
    /// Commands that could not be tried (no reply, or doctor does not know
    /// how).
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
    needs: &[&'static Command],
    key: &str,
    channel: &str,
) -> Tried {
    let mut tried = Tried::default();
    let mut subscribed = None;
    for &need in needs {
        let args: Vec<&str> = match need.name {
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
            // A read lock's and a semaphore's commands: on the probe key, a string by now
            // (WRONGTYPE, past the ACL), or else a set they empty.
            "pexpireat" => vec!["PEXPIREAT", key, "4102444800000"],
            "zadd" => vec!["ZADD", key, "0", "doctor-probe"],
            "zrange" => vec!["ZRANGE", key, "0", "-1"],
            "zscore" => vec!["ZSCORE", key, "doctor-probe"],
            "zcount" => vec!["ZCOUNT", key, "-inf", "+inf"],
            "zrem" => vec!["ZREM", key, "doctor-probe"],
            "zremrangebyscore" => vec!["ZREMRANGEBYSCORE", key, "-inf", "+inf"],
            "zcard" => vec!["ZCARD", key],
            "zpopmin" => vec!["ZPOPMIN", key],
            // Last of the key's commands, by the declaration's order.
            "del" => vec!["DEL", key],
            "exists" => vec!["EXISTS", key],
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
                        } else if why_lower.contains(&format!("'{}'", need.name)) {
                            tried.commands.push((need, Some(Failure::Denied(why))));
                        } else {
                            tried.commands.push((need, None));
                        }
                    }
                    Some(Err(e)) => tried.unknown.push((need.name, e.to_string())),
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
                tried.unknown.push((need.name, why));
            }
            // Any other answer got past the ACL.
            _ => tried.commands.push((need, None)),
        }
    }
    tried
}

impl Tried {
    /// The commands the ACL refused.
    pub fn refused(&self) -> impl Iterator<Item = &'static Command> + '_ {
        self.commands
            .iter()
            .filter(|(_, refused)| refused.is_some())
            .map(|(need, _)| *need)
    }
}
