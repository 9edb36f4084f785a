//! Least privilege: every command redlease sends to a server, declared
//! once, by deployment and setting, and the `ACL SETUSER` rule made from
//! that declaration.
//!
//! [`COMMANDS`] is the one list. [`AclRule`] grants exactly the commands a
//! deployment needs, on the lock keys and release channels only; `redlease
//! doctor` tries the same commands as the connecting user, and the tests
//! prove that a user with exactly the rule can do everything the library
//! and the `redlease` command do, and check that the rules
//! `docs/deployments.md` shows are the ones made here.
//!
//! ```
//! use redlease::acl::{AclRule, Deployment};
//!
//! let rule = AclRule::new(Deployment::Standalone);
//! assert!(rule.to_string().starts_with(
//!     "ACL SETUSER redlease on >PASSWORD resetkeys resetchannels ~redlease:* &redlease:* -@all +info "
//! ));
//! ```
//!
//! Not covered: what a client library sends on its own and may be
//! refused without harm (`CLIENT SETINFO`), `HELLO` and `AUTH` (every user
//! may run them from Redis 6.2 on; Redis 6.0 checks `HELLO` against the
//! ACL and has no channel rules, see docs/deployments.md), and `SELECT`
//! for a URL that names a database other than 0.

use std::fmt;

use crate::core::durability::Durability;

/// How a node's servers are deployed; each needs its own commands.
///
/// ```
/// use redlease::acl::{AclRule, Deployment};
/// let rule = AclRule::new(Deployment::Sentinel);
/// assert!(rule.to_string().contains(" +role"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Deployment {
    /// One server (`redis://`).
    Standalone,
    /// Every node of a Redis Cluster (`redis+cluster://`; `ACL SETUSER`
    /// is not propagated: set it on each).
    Cluster,
    /// The primary the sentinels name, and every replica that may become
    /// it (`redis+sentinel://`).
    Sentinel,
}

/// When redlease sends a command.
///
/// ```
/// use redlease::acl::{When, COMMANDS};
/// let wait = COMMANDS.iter().find(|c| c.name == "wait").unwrap();
/// assert_eq!(wait.when, When::Wait);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// To every server.
    Always,
    /// To a standalone server or the sentinels' primary (a cluster uses
    /// the sharded pub/sub commands instead).
    NotCluster,
    /// To a cluster's servers.
    Cluster,
    /// To the primary the sentinels name.
    Sentinel,
    /// With [`Durability`] on, without `fsync` (`WAIT`).
    Wait,
    /// With [`Durability`] on, with [`fsync`](Durability::fsync) (`WAITAOF`).
    WaitAof,
    /// Where the server has `DELIFEQ` (Valkey 9.0 and later), outside a
    /// cluster, with durability off (a durable lock's value carries its
    /// lineage, which only the script compares).
    Delifeq,
}

/// One command redlease sends.
///
/// ```
/// let publish = redlease::acl::COMMANDS.iter().find(|c| c.name == "publish").unwrap();
/// assert!(publish.optional, "waiters poll without it");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Command {
    /// As `ACL SETUSER` grants it, without the `+`: `pttl`,
    /// `pubsub|numsub`.
    pub name: &'static str,
    /// When it is sent.
    pub when: When,
    /// What fails without it.
    pub without: &'static str,
    /// Locks still work without it (waiters poll instead of hearing
    /// releases; releases use the script instead of `DELIFEQ`).
    pub optional: bool,
}

const fn need(name: &'static str, when: When, without: &'static str) -> Command {
    Command {
        name,
        when,
        without,
        optional: false,
    }
}

const fn optional(name: &'static str, when: When, without: &'static str) -> Command {
    Command {
        name,
        when,
        without,
        optional: true,
    }
}

/// Every command redlease (the library, and the `redlease` command's
/// `run`, `status` and `release`) sends, in the order a rule grants them.
/// The Lua scripts' commands are here too: ACLs apply inside scripts.
///
/// ```
/// let names: Vec<&str> = redlease::acl::COMMANDS.iter().map(|c| c.name).collect();
/// assert!(names.contains(&"evalsha") && names.contains(&"delifeq"));
/// ```
pub const COMMANDS: &[Command] = &[
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
    need("pexpireat", When::Always, "read locks cannot set the lock's expiry to their latest reader's: they fail"),
    need("zadd", When::Always, "no read lock can be taken or extended"),
    need("zrange", When::Always, "read locks cannot find their latest reader: they fail"),
    need("zscore", When::Always, "no read lock can be extended"),
    need("zcount", When::Always, "`inspect` cannot count a lock's readers: it fails"),
    need("zrem", When::Always, "no read lock can be released: each stays held until its TTL runs out"),
    need("zremrangebyscore", When::Always, "read locks cannot prune expired readers: they fail"),
    need("zcard", When::Always, "no semaphore permit can be taken: the holders cannot be counted"),
    need("zpopmin", When::Always, "no name's queue of waiters can be served: acquires and releases of names others wait for fail"),
    need("del", When::Always, "no release: every lock stays held until its TTL runs out"),
    need("exists", When::Always, "no lock can tell whether others wait in line for it: acquires and releases fail"),
    need("pubsub|numsub", When::NotCluster, "`redlease status` counts the waiters with it: it fails"),
    optional("publish", When::NotCluster, "releases cannot wake other processes' waiters (they poll), and watchers and observers are not told what this user changes"),
    optional("subscribe", When::NotCluster, "waiters, watchers and election observers cannot hear changes: they look every second"),
    optional("unsubscribe", When::NotCluster, "waiters' subscriptions are not ended"),
    need("pubsub|shardnumsub", When::Cluster, "`redlease status` counts the waiters with it: it fails"),
    optional("spublish", When::Cluster, "releases cannot wake other processes' waiters (they poll), and watchers and observers are not told what this user changes"),
    optional("ssubscribe", When::Cluster, "waiters, watchers and election observers cannot hear changes: they look every second"),
    optional("sunsubscribe", When::Cluster, "waiters' subscriptions are not ended"),
    need("cluster|slots", When::Cluster, "the cluster client reads the slot map with it: nothing works"),
    need("ping", When::Cluster, "the cluster client checks its connections with it"),
    need("role", When::Sentinel, "the Sentinel client confirms the primary with it: nothing works"),
    need("wait", When::Wait, "no write can wait for its replicas: every durable lock fails"),
    need("waitaof", When::WaitAof, "no write can wait for the AOF fsync: every durable lock fails"),
    optional("delifeq", When::Delifeq, "each connection's first release is refused, then releases use the script"),
];

/// The `ACL SETUSER` rule of a user that may do everything redlease does
/// on one deployment, and nothing else: the commands of [`COMMANDS`] it
/// needs, on the keys and channels under the key prefix. Its
/// [`Display`](fmt::Display) is the whole command, as `redis-cli` takes
/// it: `ACL SETUSER redlease on >PASSWORD resetkeys resetchannels
/// ~redlease:* &redlease:* -@all +info ...`.
///
/// ```
/// use std::time::Duration;
/// use redlease::acl::{AclRule, Deployment};
/// use redlease::Durability;
///
/// let rule = AclRule::new(Deployment::Sentinel)
///     .durability(Durability::required(1, Duration::from_millis(100)))
///     .key_prefix("app:locks:")
///     .user("locker", "s3cret");
/// let text = rule.to_string();
/// assert!(text.starts_with("ACL SETUSER locker on >s3cret resetkeys resetchannels ~app:locks:* &app:locks:* -@all"));
/// assert!(text.ends_with("+role +wait"));
/// assert_eq!(rule.args()[..2], ["SETUSER", "locker"]);
/// ```
///
/// Granting it to a server, and locking as that user:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let nodes = redlease_testkit::RedisNodes::start(1);
/// # let node = nodes.node(0);
/// use redlease::acl::{AclRule, Deployment};
///
/// let rule = AclRule::new(Deployment::Standalone).user("locker", "pw");
/// let mut admin = node.client().get_multiplexed_async_connection().await?;
/// let () = redis::cmd("ACL").arg(rule.args()).query_async(&mut admin).await?;
/// let locker = redlease::Locker::builder([format!("redis://locker:pw@{}", node.addr())])
/// #   .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
///     .build()?;
/// locker.try_lock("job").await?.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclRule {
    deployment: Deployment,
    durability: Durability,
    delifeq: bool,
    prefix: String,
    user: String,
    password: String,
}

impl AclRule {
    /// The rule for `deployment`, with durability off, no `DELIFEQ`, the
    /// default key prefix `redlease:`, user `redlease` and password
    /// `PASSWORD` (a placeholder, as the docs show it).
    ///
    /// ```
    /// let rule = redlease::acl::AclRule::new(redlease::acl::Deployment::Cluster);
    /// assert!(rule.commands().any(|c| c.name == "cluster|slots"));
    /// ```
    pub fn new(deployment: Deployment) -> AclRule {
        AclRule {
            deployment,
            durability: Durability::off(),
            delifeq: false,
            prefix: "redlease:".to_string(),
            user: "redlease".to_string(),
            password: "PASSWORD".to_string(),
        }
    }

    /// The durability the Lockers use (`LockerBuilder::durability`):
    /// `WAIT`, or with `fsync` `WAITAOF`, after every write.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redlease::acl::{AclRule, Deployment};
    /// let fsynced = redlease::Durability::required(1, Duration::from_secs(2)).fsync();
    /// let rule = AclRule::new(Deployment::Standalone).durability(fsynced);
    /// assert!(rule.to_string().ends_with(" +waitaof"));
    /// ```
    pub fn durability(mut self, durability: Durability) -> AclRule {
        self.durability = durability;
        self
    }

    /// Whether the servers have `DELIFEQ` (Valkey 9.0 and later: see
    /// [`Capabilities::delifeq`](crate::Capabilities::delifeq)); Redis
    /// refuses a rule that names it. Granted only where a release may use
    /// it: outside a cluster, with durability off.
    ///
    /// ```
    /// use redlease::acl::{AclRule, Deployment};
    /// let rule = AclRule::new(Deployment::Standalone).delifeq(true);
    /// assert!(rule.to_string().ends_with(" +delifeq"));
    /// ```
    pub fn delifeq(mut self, has: bool) -> AclRule {
        self.delifeq = has;
        self
    }

    /// The Lockers' key prefix (`LockerBuilder::key_prefix`); the rule's
    /// key and channel patterns are the prefix, its glob characters (`*`,
    /// `?`, `[`, `]`, `\`) escaped, and `*`.
    ///
    /// ```
    /// use redlease::acl::{AclRule, Deployment};
    /// let rule = AclRule::new(Deployment::Standalone).key_prefix("app:locks:");
    /// assert!(rule.to_string().contains(" ~app:locks:* &app:locks:* "));
    /// ```
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> AclRule {
        self.prefix = prefix.into();
        self
    }

    /// The user's name and password.
    ///
    /// ```
    /// use redlease::acl::{AclRule, Deployment};
    /// let rule = AclRule::new(Deployment::Standalone).user("locker", "pw");
    /// assert!(rule.to_string().starts_with("ACL SETUSER locker on >pw "));
    /// ```
    pub fn user(mut self, name: impl Into<String>, password: impl Into<String>) -> AclRule {
        self.user = name.into();
        self.password = password.into();
        self
    }

    /// The deployment the rule is for.
    ///
    /// ```
    /// use redlease::acl::{AclRule, Deployment};
    /// assert_eq!(AclRule::new(Deployment::Cluster).deployment(), Deployment::Cluster);
    /// ```
    pub fn deployment(&self) -> Deployment {
        self.deployment
    }

    /// The commands the rule grants, in [`COMMANDS`]' order.
    ///
    /// ```
    /// use redlease::acl::{AclRule, Deployment};
    /// let standalone = AclRule::new(Deployment::Standalone);
    /// assert!(standalone.commands().any(|c| c.name == "publish"));
    /// assert!(!standalone.commands().any(|c| c.name == "spublish"));
    /// ```
    pub fn commands(&self) -> impl Iterator<Item = &'static Command> + '_ {
        COMMANDS.iter().filter(|c| self.grants(c.when))
    }

    fn grants(&self, when: When) -> bool {
        let cluster = self.deployment == Deployment::Cluster;
        let durable = self.durability.wait().is_some();
        match when {
            When::Always => true,
            When::NotCluster => !cluster,
            When::Cluster => cluster,
            When::Sentinel => self.deployment == Deployment::Sentinel,
            When::Wait => durable && !self.durability.fsynced(),
            When::WaitAof => durable && self.durability.fsynced(),
            When::Delifeq => self.delifeq && !cluster && !durable,
        }
    }

    /// The rule after the user's password: `resetkeys resetchannels
    /// ~prefix* &prefix* -@all +info ...`.
    ///
    /// ```
    /// use redlease::acl::{AclRule, Deployment};
    /// let rule = AclRule::new(Deployment::Standalone);
    /// assert_eq!(rule.rights()[..5], ["resetkeys", "resetchannels", "~redlease:*", "&redlease:*", "-@all"]);
    /// ```
    pub fn rights(&self) -> Vec<String> {
        let pattern = glob_escape(&self.prefix);
        let mut words = vec![
            "resetkeys".to_string(),
            "resetchannels".to_string(),
            format!("~{pattern}*"),
            format!("&{pattern}*"),
            "-@all".to_string(),
        ];
        words.extend(self.commands().map(|c| format!("+{}", c.name)));
        words
    }

    /// The arguments of `ACL` that set the user: `SETUSER name on
    /// >password` and the [`rights`](Self::rights), for
    /// `redis::cmd("ACL").arg(rule.args())`.
    ///
    /// ```
    /// use redlease::acl::{AclRule, Deployment};
    /// let args = AclRule::new(Deployment::Standalone).user("u", "pw").args();
    /// assert_eq!(args[..5], ["SETUSER", "u", "on", ">pw", "resetkeys"]);
    /// ```
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "SETUSER".to_string(),
            self.user.clone(),
            "on".to_string(),
            format!(">{}", self.password),
        ];
        args.extend(self.rights());
        args
    }
}

impl fmt::Display for AclRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ACL {}", self.args().join(" "))
    }
}

/// `prefix` as an ACL glob pattern matches it literally.
fn glob_escape(prefix: &str) -> String {
    let mut escaped = String::with_capacity(prefix.len());
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn names(rule: &AclRule) -> Vec<&'static str> {
        rule.commands().map(|c| c.name).collect()
    }

    #[test]
    fn each_deployment_gets_its_own_commands() {
        let standalone = names(&AclRule::new(Deployment::Standalone));
        let cluster = names(&AclRule::new(Deployment::Cluster));
        let sentinel = names(&AclRule::new(Deployment::Sentinel));
        let always = [
            "info",
            "time",
            "eval",
            "evalsha",
            "set",
            "get",
            "incr",
            "pexpire",
            "pexpiretime",
            "pttl",
            "pexpireat",
            "zadd",
            "zrange",
            "zscore",
            "zcount",
            "zrem",
            "zremrangebyscore",
            "zcard",
            "zpopmin",
            "del",
            "exists",
        ];
        let plain = ["pubsub|numsub", "publish", "subscribe", "unsubscribe"];
        assert_eq!(standalone, [&always[..], &plain[..]].concat());
        assert_eq!(sentinel, [&always[..], &plain[..], &["role"]].concat());
        let sharded = [
            "pubsub|shardnumsub",
            "spublish",
            "ssubscribe",
            "sunsubscribe",
            "cluster|slots",
            "ping",
        ];
        assert_eq!(cluster, [&always[..], &sharded[..]].concat());
    }

    #[test]
    fn durability_adds_wait_or_waitaof_and_keeps_delifeq_out() {
        let durable = Durability::best_effort(1, Duration::from_millis(50));
        for deployment in [
            Deployment::Standalone,
            Deployment::Cluster,
            Deployment::Sentinel,
        ] {
            let rule = AclRule::new(deployment).delifeq(true);
            let waiting = names(&rule.clone().durability(durable));
            assert!(waiting.contains(&"wait") && !waiting.contains(&"waitaof"));
            assert!(
                !waiting.contains(&"delifeq"),
                "a durable lock uses the script"
            );
            let fsynced = names(&rule.clone().durability(durable.fsync()));
            assert!(fsynced.contains(&"waitaof") && !fsynced.contains(&"wait"));
            let plain = names(&rule);
            assert!(!plain.contains(&"wait") && !plain.contains(&"waitaof"));
            assert_eq!(
                plain.contains(&"delifeq"),
                deployment != Deployment::Cluster,
                "{deployment:?}: a cluster's shards are never sent DELIFEQ"
            );
        }
    }

    #[test]
    fn the_rule_reads_as_the_docs_show_it() {
        let rule = AclRule::new(Deployment::Standalone);
        assert_eq!(
            rule.to_string(),
            "ACL SETUSER redlease on >PASSWORD resetkeys resetchannels ~redlease:* &redlease:* \
             -@all +info +time +eval +evalsha +set +get +incr +pexpire +pexpiretime +pttl \
             +pexpireat +zadd +zrange +zscore +zcount +zrem +zremrangebyscore +zcard +zpopmin +del +exists \
             +pubsub|numsub +publish +subscribe +unsubscribe"
        );
        let odd = AclRule::new(Deployment::Standalone).key_prefix(r"a*b?[c]\:");
        assert!(
            odd.to_string()
                .contains(r" ~a\*b\?\[c\]\\:* &a\*b\?\[c\]\\:* "),
            "{odd}"
        );
    }

    #[test]
    fn every_command_is_reached_by_some_rule_and_named_once() {
        let durable = Durability::best_effort(1, Duration::from_millis(50));
        for command in COMMANDS {
            let granted = [
                Deployment::Standalone,
                Deployment::Cluster,
                Deployment::Sentinel,
            ]
            .into_iter()
            .flat_map(|d| {
                let rule = AclRule::new(d).delifeq(true);
                [
                    rule.clone(),
                    rule.clone().durability(durable),
                    rule.durability(durable.fsync()),
                ]
            })
            .any(|rule| rule.commands().any(|c| c == command));
            assert!(granted, "{} is granted by no rule", command.name);
            let named = COMMANDS.iter().filter(|c| c.name == command.name).count();
            assert_eq!(named, 1, "{} declared twice", command.name);
        }
    }

    /// The commands a script calls by name (`redis.call('GET', ...)`,
    /// `redis.pcall(...)`), and those it is handed as an argument
    /// (`PUBSUB` with its subcommand, the publish command), are all
    /// declared: the ACL checks them inside scripts too.
    #[test]
    fn every_command_the_scripts_call_is_declared() {
        let scripts = [
            include_str!("scripts/owner.lua"),
            include_str!("scripts/engine.lua"),
            include_str!("scripts/acquire.lua"),
            include_str!("scripts/release.lua"),
            include_str!("scripts/extend.lua"),
            include_str!("scripts/downgrade.lua"),
            include_str!("scripts/leave.lua"),
            include_str!("scripts/inspect.lua"),
            include_str!("scripts/refused.lua"),
            include_str!("scripts/raise_fence.lua"),
            include_str!("scripts/force_release.lua"),
            include_str!("scripts/release_alone.lua"),
        ];
        let declared = |name: &str| COMMANDS.iter().any(|c| c.name == name);
        let mut called = Vec::new();
        for script in scripts {
            for call in ["redis.call(", "redis.pcall("] {
                for (at, _) in script.match_indices(call) {
                    let rest = &script[at + call.len()..];
                    let Some(name) = rest.strip_prefix('\'') else {
                        // An argument names it: checked below.
                        continue;
                    };
                    let name = &name[..name.find('\'').expect("a closed string")];
                    called.push(name.to_ascii_lowercase());
                }
            }
        }
        assert!(called.len() > 20, "the scan finds the calls: {called:?}");
        for name in &called {
            match name.as_str() {
                // PUBSUB's subcommand is an argument: NUMSUB, or
                // SHARDNUMSUB on a cluster.
                "pubsub" => assert!(declared("pubsub|numsub") && declared("pubsub|shardnumsub")),
                other => assert!(
                    declared(other),
                    "{other} is called by a script, not declared"
                ),
            }
        }
        // engine.lua (serving a queue), release.lua and force_release.lua
        // publish with the command they are given.
        assert!(scripts[1].contains("redis.pcall(publish,"));
        assert!(scripts[3].contains("redis.pcall(ARGV[3], key .. ':released'"));
        assert!(scripts[10].contains("redis.pcall(ARGV[3]"));
        assert!(declared("publish") && declared("spublish"));
    }

    /// The commands the library's Rust code builds by name
    /// (`cmd("NAME")`) are all declared. Those built otherwise (`SET`,
    /// `DELIFEQ`, `EVALSHA`, the subscriptions) are proven by the ACL
    /// tests (tests/it/acl.rs), whose users have exactly the rule.
    #[test]
    fn every_command_the_library_builds_by_name_is_declared() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = vec![root];
        let mut found = Vec::new();
        let mut visited = 0;
        while let Some(path) = files.pop() {
            visited += 1;
            assert!(visited < 500, "a bounded walk");
            if path.is_dir() {
                for entry in std::fs::read_dir(&path).unwrap() {
                    files.push(entry.unwrap().path());
                }
                continue;
            }
            // A module's tests in a file of their own (`mod tests;` under
            // `#[cfg(test)]`) are tests too.
            if path.extension().is_none_or(|e| e != "rs")
                || path.file_name().is_some_and(|n| n == "tests.rs")
            {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            // The code, not its tests or its docs' examples.
            let code: String = text
                .split("#[cfg(test)]")
                .next()
                .unwrap_or_default()
                .lines()
                .filter(|line| !line.trim_start().starts_with("//"))
                .collect();
            for (at, _) in code.match_indices("cmd(\"") {
                let rest = &code[at + 5..];
                let name = &rest[..rest.find('"').unwrap()];
                found.push((path.display().to_string(), name.to_ascii_lowercase()));
            }
        }
        assert!(found.len() > 8, "the scan finds the commands: {found:?}");
        // The express connection's handshake, as redis-rs sends it on its
        // own connections: every user may run HELLO and AUTH, and SELECT
        // goes only to a database other than 0 (docs/deployments.md).
        let handshake = ["hello", "auth", "select"];
        for (file, name) in found {
            if file.ends_with("express.rs") && handshake.contains(&name.as_str()) {
                continue;
            }
            let declared = COMMANDS
                .iter()
                .any(|c| c.name == name || c.name.split('|').next() == Some(name.as_str()));
            assert!(declared, "{file} sends {name}, which is not declared");
        }
    }
}
