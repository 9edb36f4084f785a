//! The `redlease` command as the least-privilege ACL user, with exactly the
//! rule the library makes (`redlease::acl`, which docs/deployments.md
//! shows): `run`, `status` and `release --force` work; `doctor` does the
//! checks that user may do and says which it cannot.

use std::time::Duration;

use redlease::acl::{AclRule, Deployment};
use redlease_testkit::{NodeConfig, RedisNode, RedisNodes};

use crate::doctor::{assert_table_intact, doctor, row};
use crate::support::{eventually, has_key, lock_key, redlease, run, Holder};

const LIMIT: Duration = Duration::from_secs(30);
pub const USER: &str = "redlease";
pub const PASSWORD: &str = "pw";

/// The library's rule for `deployment` (the library's tests check that it
/// is enough, and no wider than needed), as the words after `ACL SETUSER
/// redlease on >PASSWORD`.
fn rule(deployment: Deployment) -> Vec<String> {
    AclRule::new(deployment).rights()
}

/// Adds the library's cluster user to `node`, a cluster node.
pub fn add_cluster_user(node: &RedisNode) {
    set_user(node, USER, rule(Deployment::Cluster));
}

/// Adds the library's standalone user to `node`. Redis 6.0 takes no
/// channel rules, and checks HELLO against the user's rights: the
/// documented form for it.
fn add_user(node: &RedisNode) {
    add_user_with(node, &[]);
}

/// [`add_user`], with `extra` rules after the library's.
pub fn add_user_with(node: &RedisNode, extra: &[&str]) {
    let mut rule = rule(Deployment::Standalone);
    rule.extend(extra.iter().map(|w| w.to_string()));
    set_user(node, USER, rule);
}

/// Adds user `name` with [`PASSWORD`] and `rule`, in Redis 6.0's form
/// there (no channel rules; `+hello`).
fn set_user(node: &RedisNode, name: &str, rule: Vec<String>) {
    let mut con = node.client().get_connection().expect("admin connection");
    let set = |words: &[String]| {
        let mut cmd = redis::cmd("ACL");
        cmd.arg(&["SETUSER", name, "reset", "on", &format!(">{PASSWORD}")])
            .arg(words);
        cmd
    };
    if let Err(e) = set(&rule).query::<()>(&mut con) {
        let redis_6_0: Vec<String> = rule
            .into_iter()
            .filter(|w| !w.starts_with('&') && *w != "resetchannels")
            .chain(["+hello".to_string()])
            .collect();
        set(&redis_6_0)
            .query::<()>(&mut con)
            .unwrap_or_else(|_| panic!("ACL SETUSER: {e}"));
    }
}

/// Nodes with the library's standalone user, and their URLs as that user.
fn nodes_with_user(n: usize) -> (RedisNodes, Vec<String>) {
    let nodes = RedisNodes::start(n);
    nodes.iter().for_each(add_user);
    let urls = nodes
        .iter()
        .map(|node| format!("redis://{USER}:{PASSWORD}@{}", node.addr()))
        .collect();
    (nodes, urls)
}

#[test]
fn run_status_and_force_release_work_as_the_least_privilege_user() {
    let (nodes, urls) = nodes_with_user(3);
    let nodes_arg = urls.join(",");
    run(
        redlease().args(["run", "--nodes", &nodes_arg, "--key", "job", "--", "true"]),
        LIMIT,
    )
    .expect(0);

    let holder = Holder::take(&urls, "job");
    eventually(Duration::from_secs(10), "the key on every node", || {
        nodes.iter().all(|node| has_key(node, &lock_key("job")))
    });
    let status = run(
        redlease().args(["status", "--nodes", &nodes_arg, "--key", "job"]),
        LIMIT,
    );
    status.expect(0);
    assert!(
        status.stdout.contains("HELD on 3 of 3 nodes"),
        "{status:#?}"
    );
    assert!(status.stdout.contains(&holder.fencing_token().to_string()));

    run(
        redlease().args(["release", "--force", "--nodes", &nodes_arg, "--key", "job"]),
        LIMIT,
    )
    .expect(0);
    assert!(nodes.iter().all(|node| !has_key(node, &lock_key("job"))));
}

#[test]
fn doctor_as_the_least_privilege_user_says_which_checks_it_cannot_do() {
    let (_nodes, urls) = nodes_with_user(3);
    let out = doctor(&urls);
    // What it cannot check is a WARN, not a FAIL.
    out.expect(0);
    for node in ["0", "1", "2"] {
        let reachable = row(&out, node, "reachable");
        assert!(
            reachable.starts_with("OK") && reachable.contains("may not run PING"),
            "{reachable}"
        );
        let server = row(&out, node, "server");
        assert!(server.starts_with("OK"), "HELLO names it: {server}");
        assert!(row(&out, node, "lua scripts").starts_with("OK"));
        let line = row(&out, node, "maxmemory-policy");
        assert!(
            line.starts_with("WARN")
                && line.contains("not checked: this user may not run CONFIG GET"),
            "{line}"
        );
        // The rule has INFO (the restart quarantine reads the uptime), so
        // these are checked.
        for check in ["persistence", "replication"] {
            let line = row(&out, node, check);
            assert!(!line.contains("not checked"), "{line}");
        }
    }
    let distinct = row(&out, "all", "distinct servers");
    assert!(distinct.starts_with("OK"), "{distinct}");
    assert!(row(&out, "all", "clock skew").starts_with("OK"));
}

/// On a server with `DELIFEQ` (Valkey 9 and later), doctor says whether
/// the user of the rule made without it may run it (without it, releases
/// fall back to the script), and with the rule made with `+delifeq` that
/// it works; on other servers it shows no such row. CI runs the CLI tests on Redis: the Valkey half by hand
/// (`REDLEASE_SERVER=$(.ci/valkey-server)`).
#[test]
fn doctor_says_whether_the_user_may_release_with_delifeq() {
    let (nodes, urls) = nodes_with_user(1);
    let node = nodes.node(0);
    let mut con = node.client().get_connection().expect("admin connection");
    let info: Vec<redis::Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("DELIFEQ")
        .query(&mut con)
        .expect("COMMAND INFO");
    let has_delifeq = !matches!(info.as_slice(), [] | [redis::Value::Nil]);
    let out = doctor(&urls);
    out.expect(0);
    if !has_delifeq {
        assert!(!out.stdout.contains("native release"), "{out:#?}");
        return;
    }
    let line = row(&out, "0", "native release");
    assert!(
        line.starts_with("WARN") && line.contains("may not run DELIFEQ"),
        "{line}"
    );
    assert!(out.stdout.contains("add +delifeq"), "{out:#?}");
    let with = AclRule::new(Deployment::Standalone).delifeq(true);
    set_user(node, USER, with.rights());
    let out = doctor(&urls);
    let line = row(&out, "0", "native release");
    assert!(
        line.starts_with("OK") && line.contains("DELIFEQ works"),
        "{line}"
    );
}

#[test]
fn status_and_doctor_name_a_missing_or_wrong_password() {
    let node = RedisNode::start_with(NodeConfig::new().arg("requirepass", PASSWORD));
    let addr = node.addr();
    let wrong = "hunter2";
    let cases = [
        (
            format!("redis://{addr}"),
            "needs a password: put it in the URL, redis://user:password@host",
            "fix: give the user and password in the URL",
        ),
        (
            format!("redis://:{wrong}@{addr}"),
            "wrong user name or password",
            "fix: check the user name and password in the URL",
        ),
        // Through HELLO (RESP3), the refusal is WRONGPASS itself.
        (
            format!("redis://{USER}:{wrong}@{addr}?protocol=resp3"),
            "wrong user name or password",
            "fix: check the user name and password in the URL",
        ),
    ];
    for (url, says, fix) in cases {
        let status = run(
            redlease().args(["status", "--nodes", &url, "--key", "job", "--timeout", "2s"]),
            LIMIT,
        );
        status.expect(69);
        let line = status
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with(says))
            .unwrap_or_else(|| panic!("{url}: {status:#?}"));
        assert!(!line.contains("Pipeline"), "{line}");

        let out = doctor(std::slice::from_ref(&url));
        out.expect(1);
        let reachable = row(&out, "0", "reachable");
        assert!(
            reachable.starts_with("FAIL") && reachable.contains(says),
            "{url}: {reachable}"
        );
        assert!(out.stdout.contains(fix), "{url}: {out:#?}");
        // No ACL grant fixes a password, and with no server reached
        // nothing passes.
        assert!(!out.stdout.contains("allow "), "{url}: {out:#?}");
        assert!(
            !out.stdout.lines().any(|l| l.starts_with("OK ")),
            "{url}: {out:#?}"
        );
        assert!(out.stdout.ends_with("0 OK\n"), "{url}: {out:#?}");
        assert_table_intact(&out);

        // `run` says it too, though its lock attempt meets the node's
        // back-off after check_servers was refused.
        let ran = run(
            redlease().args(["run", "--nodes", &url, "--key", "job", "--", "true"]),
            LIMIT,
        );
        ran.expect(69);
        assert!(ran.stderr.contains(says), "{url}: {ran:#?}");
        for printed in [
            &status.stdout,
            &status.stderr,
            &out.stdout,
            &out.stderr,
            &ran.stderr,
        ] {
            assert!(!printed.contains(wrong) && !printed.contains(PASSWORD));
        }
    }
}

/// The library's rule less `item`, as user `name` on `node`; its URL.
fn user_without(node: &RedisNode, name: &str, item: &str) -> String {
    let rule = rule(Deployment::Standalone)
        .into_iter()
        .filter(|w| *w != item)
        .collect();
    set_user(node, name, rule);
    format!("redis://{name}:{PASSWORD}@{}", node.addr())
}

/// The library's rule with each item removed in turn: doctor FAILs naming
/// the `+command` (or the key pattern) without which locks fail, WARNs
/// naming the ones without which waiters poll (PUBLISH, SUBSCRIBE,
/// UNSUBSCRIBE, the channel pattern), and passes the user when the item
/// only narrowed it (`resetkeys`, `-@all`, ...). With `--durable` it needs
/// `+wait` too.
#[test]
fn doctor_names_each_permission_the_rule_lacks() {
    let node = RedisNode::start();
    let optional: Vec<String> = AclRule::new(Deployment::Standalone)
        .commands()
        .filter(|c| c.optional)
        .map(|c| format!("+{}", c.name))
        .collect();
    assert_eq!(optional, ["+publish", "+subscribe", "+unsubscribe"]);
    let rule = rule(Deployment::Standalone);
    assert!(rule.len() < 40, "a bounded loop: {rule:?}");
    // Redis 6.0 has no channel rules (the documented form for it has none).
    let channels = rule.iter().any(|w| w.starts_with('&'));
    for (i, item) in rule.iter().enumerate() {
        let url = user_without(&node, &format!("less{i}"), item);
        let out = doctor(std::slice::from_ref(&url));
        let line = row(&out, "0", "permissions");
        let fix = out
            .stdout
            .lines()
            .skip_while(|l| !l.contains("  permissions  "))
            .nth(1)
            .unwrap_or_default();
        let prefix_rule = item.starts_with('~') || item.starts_with('&');
        if item.starts_with('+') && !optional.contains(item) {
            assert!(
                line.starts_with("FAIL") && line.contains(item),
                "{item}: {line}"
            );
            assert!(fix.contains(&format!("add {item} ")), "{item}: {out:#?}");
            out.expect(1);
        } else if item.starts_with('+') {
            assert!(
                line.starts_with("WARN") && line.contains(item),
                "{item}: {line}"
            );
            assert!(fix.contains(&format!("add {item} ")), "{item}: {out:#?}");
            out.expect(0);
        } else if item.starts_with('~') {
            assert!(
                line.starts_with("FAIL") && line.contains("key"),
                "{item}: {line}"
            );
            assert!(fix.contains(&format!("add {item} ")), "{item}: {out:#?}");
            out.expect(1);
        } else if prefix_rule && channels {
            assert!(
                line.starts_with("WARN") && line.contains("channel"),
                "{item}: {line}"
            );
            assert!(fix.contains(&format!("add {item} ")), "{item}: {out:#?}");
            out.expect(0);
        } else {
            // resetkeys, resetchannels, -@all: a new user has none of the
            // rights they take away.
            assert!(line.starts_with("OK"), "{item}: {line}");
        }
        assert!(!line.contains("unreachable"), "{item}: {line}");
    }
    // The whole rule passes; with --durable, WAIT is missing from it.
    let url = user_without(&node, "whole", "");
    let out = doctor(std::slice::from_ref(&url));
    assert!(row(&out, "0", "permissions").starts_with("OK"), "{out:#?}");
    let durable = run(
        redlease().args(["doctor", "--nodes", &url, "--timeout", "500ms", "--durable"]),
        LIMIT,
    );
    durable.expect(1);
    let line = row(&durable, "0", "permissions");
    assert!(line.starts_with("FAIL") && line.contains("+wait"), "{line}");
    // Nothing was left behind on the probe key.
    eventually(Duration::from_secs(15), "the probe key gone", || {
        !has_key(&node, "redlease:doctor-probe")
    });
}

/// A refused command is named wherever it shows: `run` (a command inside
/// the acquire script), `status` (which calls the node's answer a missing
/// permission, not "unreachable"), and a release refused after the
/// command ran: exit 77, not the command's 0.
#[test]
fn run_and_status_name_the_refused_command() {
    let node = RedisNode::start();
    let quick = ["--restart-quarantine", "0s"];

    let url = user_without(&node, "noincr", "+incr");
    let ran = run(
        redlease()
            .args(["run", "--nodes", &url, "--key", "job", "--no-wait"])
            .args(quick)
            .args(["--", "true"]),
        LIMIT,
    );
    ran.expect(69);
    let error = ran.one_line_error();
    assert!(
        error.contains("'incr'") && error.contains("add +incr"),
        "{ran:#?}"
    );
    assert!(error.contains("acquire script"), "{ran:#?}");

    let url = user_without(&node, "nopttl", "+pttl");
    let status = run(
        redlease().args(["status", "--nodes", &url, "--key", "job"]),
        LIMIT,
    );
    status.expect(69);
    assert!(status.stdout.contains("no permission"), "{status:#?}");
    assert!(!status.stdout.contains("unreachable"), "{status:#?}");
    assert!(status.stdout.contains("add +pttl"), "{status:#?}");
    assert!(
        status.stderr.contains("refused this user a permission"),
        "{status:#?}"
    );

    // Without +eval: an admin's run leaves the acquire script cached, so
    // the lock is taken (EVALSHA) and the command runs; its release goes
    // as a whole script first (EVAL) and is refused.
    let admin = node.url();
    run(
        redlease()
            .args(["run", "--nodes", &admin, "--key", "warm"])
            .args(quick)
            .args(["--", "true"]),
        LIMIT,
    )
    .expect(0);
    let url = user_without(&node, "noeval", "+eval");
    let ran = run(
        redlease()
            .args(["run", "--nodes", &url, "--key", "job", "--ttl", "30s"])
            .args(quick)
            .args(["--", "true"]),
        LIMIT,
    );
    ran.expect(77);
    let error = ran.one_line_error();
    assert!(
        error.contains("release was refused") && error.contains("+eval"),
        "{ran:#?}"
    );
    assert!(
        has_key(&node, &lock_key("job")),
        "held until its TTL runs out"
    );
}
