//! Least privilege: an ACL user with exactly the rule the library makes
//! (`redlease::acl`), which grants only the lock's commands on the lock's
//! keys and channels, does everything the library does; one without
//! rights to the keys gets a typed NOPERM error and writes nothing. The
//! docs show the rules the library makes.
//!
//! The nodes run as a hardened deployment would: the default user is off,
//! so every connection authenticates (and the test looks through an admin
//! user of its own). After the run, each node's ACL LOG shows that nothing
//! the library sent was refused, and INFO commandstats that every command
//! the rule grants was used: the rule is enough, and no wider than needed.

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redlease::acl::{AclRule, Deployment};
use redlease::{
    Capabilities, Durability, Error, KeyState, Locker, LockerBuilder, NodeErrorKind, Op,
    RetryPolicy, ServerErrorCode, Verdict,
};
use redlease_testkit::{RedisNode, RedisNodes};

use crate::support::{handoff, spawn_lock, token, MS};

/// The library's rule for a standalone server and the default key prefix
/// `redlease:`, as the words after `ACL SETUSER <name> on ><password>`.
fn rule() -> String {
    rights(&AclRule::new(Deployment::Standalone))
}

fn rights(rule: &AclRule) -> String {
    rule.rights().join(" ")
}

const ADMIN_PASSWORD: &str = "admin-pw";
const PASSWORD: &str = "locker-pw";

/// Starts `n` nodes with an `admin` user, the users `(name, rule)` (all
/// with [`PASSWORD`]), and the default user off and allowed nothing.
async fn nodes_with_users(n: usize, users: &[(&str, &str)]) -> RedisNodes {
    let nodes = RedisNodes::start(n);
    for node in nodes.iter() {
        let mut con = crate::support::conn(node).await;
        let mut redis_6_0 = setuser(&mut con, "admin", ADMIN_PASSWORD, "~* &* +@all").await;
        for (name, rule) in users {
            redis_6_0 |= setuser(&mut con, name, PASSWORD, rule).await;
        }
        // Redis 6.0 checks HELLO (which opens the RESP3 connection of the
        // release notifications, authenticating on the way) against the
        // default user's rights: docs/deployments.md says to allow it +hello.
        let default = if redis_6_0 {
            "off resetkeys -@all +hello"
        } else {
            "off resetkeys -@all"
        };
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg("default")
            .arg(default.split_whitespace().collect::<Vec<_>>())
            .query_async(&mut con)
            .await
            .expect("turn the default user off");
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut admin(node).await)
            .await
            .expect("CONFIG RESETSTAT");
    }
    nodes
}

/// `ACL SETUSER name on >password rule...`. Redis 6.0 has no channel
/// rules (`&pattern`, `resetchannels`: 6.2 and later) and lets every user
/// use every channel, but checks HELLO against the user's rights (6.2 and
/// later let everyone run it): there the rule is set without channels and
/// with `+hello`, as docs/deployments.md says. Returns whether it was Redis 6.0's form.
async fn setuser(con: &mut MultiplexedConnection, name: &str, password: &str, rule: &str) -> bool {
    let set = |words: Vec<&str>| {
        let mut cmd = redis::cmd("ACL");
        cmd.arg(&["SETUSER", name, "on", &format!(">{password}")])
            .arg(words);
        cmd
    };
    let words: Vec<&str> = rule.split_whitespace().collect();
    let Err(e) = set(words.clone()).query_async::<()>(con).await else {
        return false;
    };
    let redis_6_0: Vec<&str> = words
        .into_iter()
        .filter(|w| !w.starts_with('&') && *w != "resetchannels")
        .chain(["+hello"])
        .collect();
    set(redis_6_0)
        .query_async::<()>(con)
        .await
        .unwrap_or_else(|_| panic!("ACL SETUSER {name} {rule}: {e}"));
    true
}

/// Sets user `name` to the library's rule with `+delifeq` where the server
/// has `DELIFEQ` (as the library tells from INFO, which must agree with
/// the server's own COMMAND INFO); whether it did.
async fn grant_delifeq(nodes: &RedisNodes, name: &str) -> bool {
    let mut native = false;
    for node in nodes.iter() {
        let mut con = admin(node).await;
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut con)
            .await
            .expect("INFO server");
        let has = Capabilities::from_info(&info).is_some_and(|c| c.delifeq());
        assert_eq!(
            has,
            crate::support::has_delifeq(&mut con).await,
            "{}: the library tells DELIFEQ as the server does:\n{info}",
            node.addr()
        );
        if has {
            let with = rights(&AclRule::new(Deployment::Standalone).delifeq(true));
            setuser(&mut con, name, PASSWORD, &with).await;
            native = true;
        }
    }
    native
}

/// A connection as the test's admin user.
async fn admin(node: &RedisNode) -> MultiplexedConnection {
    redis::Client::open(format!("redis://admin:{ADMIN_PASSWORD}@{}", node.addr()))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("admin connection")
}

/// The nodes' URLs as user `name`.
fn urls_as(nodes: &RedisNodes, name: &str) -> Vec<String> {
    nodes
        .iter()
        .map(|node| format!("redis://{name}:{PASSWORD}@{}", node.addr()))
        .collect()
}

/// A Locker as user `name`, whose waits are woken by releases or else by
/// its `retry_delay` timer. Fencing off (the default): its locks are the
/// plain `SET NX` commands.
fn locker_as(nodes: &RedisNodes, name: &str, ttl: Duration, retry_delay: Duration) -> Locker {
    builder_as(nodes, name, ttl, retry_delay)
        .build()
        .expect("valid settings")
}

/// Like [`locker_as`], with fencing on: its locks are the acquire script,
/// which draws a token.
fn fenced_locker_as(
    nodes: &RedisNodes,
    name: &str,
    ttl: Duration,
    retry_delay: Duration,
) -> Locker {
    builder_as(nodes, name, ttl, retry_delay)
        .fencing(true)
        .build()
        .expect("valid settings")
}

fn builder_as(
    nodes: &RedisNodes,
    name: &str,
    ttl: Duration,
    retry_delay: Duration,
) -> LockerBuilder {
    Locker::builder(urls_as(nodes, name))
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .ttl(ttl)
        .node_timeout(500 * MS)
        .connect_timeout(500 * MS)
        .retry(RetryPolicy::within(Duration::from_secs(20)).delay(retry_delay, retry_delay))
}

/// Waits (at most 5 s) until `count` processes wait for `resource`.
async fn until_waiting(locker: &Locker, resource: &str, count: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let status = locker.admin().inspect(resource).await.expect("inspect");
        let answered = status.nodes.iter().all(|(_, a)| a.is_ok());
        let waiting = status
            .nodes
            .iter()
            .filter_map(|(_, a)| a.as_ref().ok())
            .all(|s| s.waiting == count);
        if answered && waiting {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{count} waiting for {resource} on every node: {status:?}"
        );
        tokio::time::sleep(10 * MS).await;
    }
}

/// Each node's ACL LOG entries: (user, refused command, key or channel).
async fn acl_log(node: &RedisNode) -> Vec<(String, String, String)> {
    crate::support::acl_log_entries(&mut admin(node).await).await
}

/// How often each command ran on `node` since the stats were reset.
async fn command_calls(node: &RedisNode) -> std::collections::HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut admin(node).await)
        .await
        .expect("INFO commandstats");
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .collect()
}

/// Every rule the library makes, each once, with what it is for: each
/// deployment, with durability off, `WAIT` or `WAITAOF`, with and without
/// `DELIFEQ`.
fn every_rule() -> Vec<(String, AclRule)> {
    let durable = Durability::required(1, Duration::from_millis(100));
    let mut rules: Vec<(String, AclRule)> = Vec::new();
    for deployment in [
        Deployment::Standalone,
        Deployment::Cluster,
        Deployment::Sentinel,
    ] {
        for (durability, wait) in [
            (Durability::off(), ""),
            (durable, ", durability"),
            (durable.fsync(), ", durability with fsync"),
        ] {
            for delifeq in [false, true] {
                let rule = AclRule::new(deployment)
                    .durability(durability)
                    .delifeq(delifeq);
                let label = format!(
                    "{deployment:?}{wait}{}",
                    if delifeq { ", DELIFEQ" } else { "" }
                );
                if !rules.iter().any(|(_, r)| r.to_string() == rule.to_string()) {
                    rules.push((label, rule));
                }
            }
        }
    }
    rules
}

/// The `ACL SETUSER` lines of `doc`'s fenced blocks.
fn shown_rules(doc: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut shown = Vec::new();
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if fenced && line.trim_start().starts_with("ACL SETUSER") {
            shown.push(line.trim());
        }
    }
    shown
}

/// The rules the docs show are the library's, byte for byte: the
/// standalone rule, and the cluster and Sentinel rules with durability,
/// and any other they show is one the library makes.
#[test]
fn the_docs_show_the_rules_the_library_makes() {
    let made: Vec<(String, String)> = every_rule()
        .into_iter()
        .map(|(label, rule)| (label, rule.to_string()))
        .collect();
    let paste: String = made
        .iter()
        .map(|(label, rule)| format!("# {label}:\n{rule}\n"))
        .collect();
    let docs = [
        (
            "docs/deployments.md",
            include_str!("../../../../docs/deployments.md"),
        ),
        ("README.md", include_str!("../../../../README.md")),
    ];
    let mut all_shown = Vec::new();
    for (name, text) in docs {
        for line in shown_rules(text) {
            assert!(
                made.iter().any(|(_, rule)| rule == line),
                "{name} shows a rule the library does not make:\n{line}\n\
                 regenerate it: paste the one it should be from these \
                 (redlease::acl::AclRule):\n{paste}"
            );
            all_shown.push(line);
        }
    }
    let durable = Durability::required(1, Duration::from_millis(100));
    let expected = [
        AclRule::new(Deployment::Standalone),
        AclRule::new(Deployment::Standalone).delifeq(true),
        AclRule::new(Deployment::Cluster).durability(durable),
        AclRule::new(Deployment::Sentinel).durability(durable),
    ]
    .map(|rule| rule.to_string());
    for rule in &expected {
        assert!(
            all_shown.contains(&rule.as_str()),
            "docs/deployments.md does not show the library's rule; paste it:\n{rule}\n\
             (shown: {all_shown:#?})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_least_privilege_user_does_everything_the_library_does() {
    let nodes = nodes_with_users(3, &[("locker", &rule())]).await;
    // On a server with DELIFEQ, the rule also grants it.
    let native = grant_delifeq(&nodes, "locker").await;
    let ttl = Duration::from_secs(10);
    // A 5 s retry timer: a waiter that gets the lock sooner was woken by
    // the release notification, which needs SUBSCRIBE and PUBLISH.
    let patient = Duration::from_secs(5);
    // Fencing on where tokens are compared (the acquire script); the
    // renewed lease below is taken with fencing off (plain commands).
    let holder = fenced_locker_as(&nodes, "locker", ttl, patient);
    let other = fenced_locker_as(&nodes, "locker", ttl, patient);

    // try_lock, extend, and a waiter in another process woken by the release.
    let mut lease = holder.try_lock("job").await.expect("try_lock as locker");
    let first = token(&lease);
    lease.extend(ttl).await.expect("extend as locker");
    let waiting = tokio::spawn(async move {
        let lease = other.lock("job").await;
        (Instant::now(), lease, other)
    });
    until_waiting(&holder, "job", 1).await;
    let status = holder
        .admin()
        .inspect("job")
        .await
        .expect("inspect as locker");
    assert!(
        matches!(status.verdict(), Verdict::Held { on: 3, .. }),
        "{status:?}"
    );
    crate::support::assert_fence_stored(&status, first);
    // Let the waiter's retry after subscribing fail and its timer start.
    tokio::time::sleep(200 * MS).await;
    let released = Instant::now();
    lease.release().await.expect("release as locker");
    let (taken, second, other) = waiting.await.unwrap();
    let second = second.expect("the waiter gets the lock");
    let handoff = taken - released;
    assert!(
        handoff < Duration::from_secs(2),
        "woken by the release notification, not its 5 s timer: {handoff:?}"
    );
    let second_token = token(&second);
    assert!(second_token > first);
    second.release().await.unwrap();

    // keep_alive renews a 1 s lease over more than 3 TTLs (fencing off).
    let short = locker_as(&nodes, "locker", Duration::from_secs(1), patient);
    let renewed = short.lock("renewed").keep_alive().await.unwrap();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(!renewed.is_lost(), "{:?}", renewed.lost_reason());
    // A plain acquire refused: its follow-up asks for the holder's TTL and
    // waiters.
    let refused = locker_as(&nodes, "locker", ttl, patient)
        .try_lock("renewed")
        .await;
    assert!(matches!(refused, Err(Error::Taken { .. })), "{refused:?}");
    let status = short.admin().inspect("renewed").await.unwrap();
    for (node, answer) in &status.nodes {
        match answer.as_ref().map(|s| s.key) {
            Ok(KeyState::Held {
                expires_in: Some(left),
            }) => assert!(left > Duration::ZERO),
            other => panic!("{node}: the renewed key is held: {other:?}"),
        }
    }
    renewed.release().await.unwrap();

    // force_release deletes a stuck lock and wakes its waiter at once.
    let stuck = holder.try_lock("stuck").await.unwrap();
    let waiter = fenced_locker_as(&nodes, "locker", ttl, patient);
    let waiting = tokio::spawn(async move {
        let lease = waiter.lock("stuck").await;
        (Instant::now(), lease, waiter)
    });
    until_waiting(&holder, "stuck", 1).await;
    tokio::time::sleep(200 * MS).await;
    let forced = Instant::now();
    assert_eq!(
        holder
            .admin()
            .force_release("stuck")
            .await
            .expect("force_release"),
        3
    );
    let (taken, third, _waiter) = waiting.await.unwrap();
    let third = third.expect("the waiter gets the force-released lock");
    assert!(
        taken - forced < Duration::from_secs(2),
        "{:?}",
        taken - forced
    );
    assert!(token(&third) > token(&stuck));
    assert!(token(&stuck) > second_token);
    assert!(matches!(stuck.release().await, Err(Error::NotHeld { .. })));
    third.release().await.unwrap();
    until_waiting(&holder, "job", 0).await;
    until_waiting(&holder, "stuck", 0).await;
    drop(other);

    // The read side: readers kept alive (renewed in batches) and
    // extended, a writer that waits behind them (its mark) and gives up,
    // inspect (the live readers), and the last reader's release.
    let readers = locker_as(&nodes, "locker", Duration::from_secs(1), patient);
    let mut reader = readers.read_lock("shared").keep_alive().await.unwrap();
    let writer = locker_as(&nodes, "locker", ttl, patient);
    let other_reader = writer.read_lock("shared").await.unwrap();
    let gave_up = writer
        .write_lock("shared")
        .wait(Duration::from_millis(400))
        .await;
    assert!(
        matches!(gave_up, Err(Error::WaitTimeout { .. })),
        "{gave_up:?}"
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!reader.is_lost(), "{:?}", reader.lost_reason());
    reader.extend(Duration::from_secs(2)).await.unwrap();
    let status = readers.admin().inspect("shared").await.unwrap();
    assert_eq!(status.mode(), Some(redlease::LockMode::Shared));
    other_reader.release().await.unwrap();
    reader.release().await.unwrap();
    writer.admin().wait_for_background().await;

    // A semaphore's permits: taken (counted), a full one refused, one
    // kept alive and released.
    let pool = readers.semaphore("pool", 2).allow_no_failures();
    let first = pool.acquire().keep_alive().await.unwrap();
    let second = pool.try_acquire().await.unwrap();
    assert!(matches!(pool.try_acquire().await, Err(Error::Taken { .. })));
    second.release().await.unwrap();
    first.release().await.unwrap();

    // Several names, one read: a set that waits (reserving and claiming)
    // and gives up (giving them back), and a set taken, kept alive and
    // released.
    let set = readers
        .lock_all(["set-a", "set-b"])
        .and_read(["set-r"])
        .keep_alive()
        .await
        .unwrap();
    // It reserves once it has waited its TTL (0.6 s), from its next
    // attempt on (0.9 s).
    let gave_up = writer
        .lock_all(["set-0", "set-b"])
        .ttl(Duration::from_millis(600))
        .wait(Duration::from_millis(1400))
        .await;
    assert!(
        matches!(gave_up, Err(Error::WaitTimeout { .. })),
        "{gave_up:?}"
    );
    set.release().await.unwrap();
    writer.admin().wait_for_background().await;

    // An election, watched and observed, as the same user.
    crate::elections::election_cycle(&writer).await;

    // Nothing was refused (redis-rs names itself with CLIENT SETINFO on
    // each connection and ignores a refusal: not needed; Redis 6.0 logs it
    // as `client`), and every command the rule grants was used.
    let granted: Vec<&str> = AclRule::new(Deployment::Standalone)
        .delifeq(native)
        .commands()
        .map(|c| c.name)
        .collect();
    for node in nodes.iter() {
        let refused: Vec<_> = acl_log(node)
            .await
            .into_iter()
            .filter(|(_, _, object)| object != "client|setinfo" && object != "client")
            .collect();
        assert!(refused.is_empty(), "{}: refused {refused:?}", node.addr());
        let calls = command_calls(node).await;
        for command in &granted {
            // A subcommand may be counted under its parent (Redis 6.0).
            let parent = command.split('|').next().unwrap_or(command);
            let used = calls.get(*command).or_else(|| calls.get(parent));
            assert!(
                used.copied().unwrap_or(0) > 0,
                "{}: {command} was granted but not used: {calls:?}",
                node.addr()
            );
        }
    }
}

/// A user without `+delifeq` on a server that has it (the rule made
/// without it): the first release on a connection is refused
/// (one ACL LOG entry) and done by the script, and the connection's later
/// releases go to the script straight away. Skipped where the server has
/// no `DELIFEQ` (CI runs it on Valkey).
#[tokio::test]
async fn without_delifeq_rights_releases_use_the_script_after_one_refusal() {
    let nodes = nodes_with_users(1, &[("locker", &rule())]).await;
    let node = nodes.node(0);
    if !crate::support::has_delifeq(&mut admin(node).await).await {
        eprintln!(
            "skipped: {} has no DELIFEQ",
            redlease_testkit::server_program()
        );
        return;
    }
    let locker = locker_as(&nodes, "locker", Duration::from_secs(10), 50 * MS);
    for _ in 0..3 {
        let lease = locker.try_lock("job").await.expect("try_lock");
        lease.release().await.expect("released by the script");
    }
    let key = locker.admin().key("job");
    let left: Option<String> = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut admin(node).await)
        .await
        .unwrap();
    assert_eq!(left, None, "released");
    let refused: Vec<_> = acl_log(node)
        .await
        .into_iter()
        .filter(|(_, _, object)| object == "delifeq")
        .collect();
    assert_eq!(refused.len(), 1, "refused once per connection: {refused:?}");
    let calls = command_calls(node).await;
    let scripts =
        calls.get("eval").copied().unwrap_or(0) + calls.get("evalsha").copied().unwrap_or(0);
    assert_eq!(scripts, 3, "every release by the script: {calls:?}");
}

#[tokio::test]
async fn a_user_without_rights_to_the_keys_gets_noperm_and_writes_nothing() {
    let elsewhere = rule().replace("~redlease:*", "~other:*");
    let nodes = nodes_with_users(3, &[("outsider", &elsewhere)]).await;
    let locker = locker_as(&nodes, "outsider", Duration::from_secs(10), 50 * MS);

    let err = locker
        .try_lock("job")
        .await
        .expect_err("no rights to the keys");
    assert!(
        matches!(
            err,
            Error::NoQuorum {
                op: Op::Acquire,
                ..
            }
        ),
        "{err:?}"
    );
    let failed = err.node_errors();
    assert_eq!(
        crate::support::indices(failed.iter().map(|e| e.node())),
        [0, 1, 2]
    );
    for failure in failed {
        let node = nodes.node(failure.node().index());
        assert!(
            matches!(
                failure.kind(),
                NodeErrorKind::Redis {
                    code: ServerErrorCode::NoPerm,
                    ..
                }
            ),
            "{failure}"
        );
        assert_eq!(failure.node().addr(), node.addr());
        assert!(failure.to_string().contains(&node.addr()), "{failure}");
    }
    assert!(
        err.to_string().contains("NOPERM"),
        "the message says why: {err}"
    );

    // Waiting does not help: out of time, the last attempt's NOPERM shows.
    match locker.lock("job").wait(300 * MS).await {
        Err(Error::WaitTimeout { last, .. }) => {
            assert!(last.node_errors().iter().all(|e| matches!(
                e.kind(),
                NodeErrorKind::Redis {
                    code: ServerErrorCode::NoPerm,
                    ..
                }
            )));
        }
        other => panic!("expected WaitTimeout: {other:?}"),
    }

    for node in nodes.iter() {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut admin(node).await)
            .await
            .unwrap();
        assert!(
            keys.is_empty(),
            "{}: nothing written: {keys:?}",
            node.addr()
        );
    }
}

/// Lock requests run so far on all nodes: scripts (EVALSHA and EVAL) and
/// the plain acquire's SET (a Locker with fencing off tries a lock with it).
async fn lock_calls(nodes: &RedisNodes) -> u64 {
    let mut sum = 0;
    for node in nodes.iter() {
        let calls = command_calls(node).await;
        sum += ["evalsha", "eval", "set"]
            .iter()
            .map(|command| calls.get(*command).unwrap_or(&0))
            .sum::<u64>();
    }
    sum
}

/// The rule without the lock's channels: SUBSCRIBE is refused.
fn rule_without_channels() -> String {
    rule().replace(" &redlease:*", "")
}

/// A waiter that may not subscribe cannot hear a release, so it keeps the
/// short retry delay instead of sleeping until the holder's key expires
/// (10 s here): it gets a released lock within a few delays.
#[tokio::test]
async fn a_waiter_that_may_not_subscribe_polls_and_gets_the_lock() {
    let deaf_rule = rule_without_channels();
    let nodes = nodes_with_users(3, &[("holder", &rule()), ("deaf", &deaf_rule)]).await;
    let ttl = Duration::from_secs(10);
    let holder = locker_as(&nodes, "holder", ttl, 50 * MS);
    let lease = holder.try_lock("job").await.expect("free lock");
    let waiter = spawn_lock(locker_as(&nodes, "deaf", ttl, 50 * MS), "job");
    // Long enough for its SUBSCRIBE to be refused on every node.
    tokio::time::sleep(500 * MS).await;
    let gap = handoff(lease, waiter).await;
    assert!(
        gap < Duration::from_secs(2),
        "took {gap:?}: a waiter that cannot hear releases must poll"
    );
}

/// A subscription that breaks and cannot come back (the user lost its
/// channel rights meanwhile) is no longer trusted: the waiter, which slept
/// until the holder's expiry while it could hear releases, polls again and
/// gets the lock soon after a release it could not hear.
#[tokio::test]
async fn a_waiter_whose_subscription_broke_polls_until_it_is_back() {
    let nodes = nodes_with_users(3, &[("holder", &rule()), ("waiter", &rule())]).await;
    let ttl = Duration::from_secs(10);
    let holder = locker_as(&nodes, "holder", ttl, 50 * MS);
    let lease = holder.try_lock("job").await.expect("free lock");
    let waiter_side = locker_as(&nodes, "waiter", ttl, 50 * MS);
    let watcher = waiter_side.clone();
    let waiter = spawn_lock(waiter_side, "job");
    until_waiting(&watcher, "job", 1).await;
    // Heard on every node: now it sleeps until the holder's key expires.
    tokio::time::sleep(200 * MS).await;
    let calls_before = lock_calls(&nodes).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let calls_after = lock_calls(&nodes).await;
    assert!(
        calls_after - calls_before <= 3,
        "a waiter that hears releases does not poll: {} lock calls in 1 s",
        calls_after - calls_before
    );
    // Taking the channel rights away closes the user's subscriptions, and
    // its connections cannot subscribe again.
    for node in nodes.iter() {
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg("waiter")
            .arg("resetchannels")
            .query_async(&mut admin(node).await)
            .await
            .expect("ACL SETUSER");
    }
    tokio::time::sleep(300 * MS).await;
    let gap = handoff(lease, waiter).await;
    assert!(
        gap < Duration::from_secs(2),
        "took {gap:?}: a waiter that can no longer hear releases must poll"
    );
}

/// A user whose rule lacks a command gets a `NOPERM` node error that names
/// it: INFO on connecting (a pipeline with TIME, whose error has no detail
/// of its own), INCR inside the fenced acquire script (refused there with
/// `ERR` and, before Redis 7.2, without the command's name).
#[tokio::test]
async fn a_refused_command_is_named_in_the_node_error() {
    let without = |item: &str| rule().replace(&format!(" {item}"), "");
    let (no_info, no_incr) = (without("+info"), without("+incr"));
    let nodes = nodes_with_users(1, &[("noinfo", &no_info), ("noincr", &no_incr)]).await;
    let ttl = Duration::from_secs(10);
    for (user, command, fenced) in [("noinfo", "info", false), ("noincr", "incr", true)] {
        let locker = builder_as(&nodes, user, ttl, 50 * MS)
            .fencing(fenced)
            .build()
            .unwrap();
        let err = locker.try_lock("job").await.expect_err("refused");
        let failed = err.node_errors();
        assert_eq!(failed.len(), 1, "{err:?}");
        let kind = failed[0].kind();
        assert!(kind.is_permission_refused(), "{user}: {kind:?}");
        assert_eq!(
            kind.missing_permission(),
            Some(format!("+{command}")),
            "{user}: {kind:?}"
        );
        let shown = err.to_string();
        assert!(
            shown.contains(&format!("'{command}'")) && shown.contains(&format!("add +{command}")),
            "{user}: {shown}"
        );
    }
}
