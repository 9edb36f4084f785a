//! `redlease acquire`, `extend` and `release --handle`: a lock held across
//! a script's steps by its handle, and `run` under several keys at once.

use std::process::Command;
use std::time::Duration;

use redlease_testkit::{RedisNode, RedisNodes};

use crate::shared::status;
use crate::support::{eventually, finish, redlease, run, start, Finished};

const LIMIT: Duration = Duration::from_secs(30);

/// Waits (at most 20 s) for the file `$1` names; exits 3 if it never
/// comes. `sh -c` scripts start with it as a function.
const AWAIT: &str = r#"await() { i=0; while [ ! -e "$1" ]; do i=$((i+1)); [ $i -gt 1000 ] && exit 3; sleep 0.02; done; }; "#;

/// `redlease SUBCOMMAND --nodes URLS`, flags to add.
fn cmd(urls: &[String], subcommand: &str) -> Command {
    let mut cmd = redlease();
    cmd.args([subcommand, "--nodes", &urls.join(",")])
        .env_remove("REDLEASE_HANDLE");
    cmd
}

/// `redlease acquire` of `keys`, with `extra` flags.
fn acquire(urls: &[String], keys: &[&str], extra: &[&str]) -> Finished {
    let mut acquire = cmd(urls, "acquire");
    for key in keys {
        acquire.args(["--key", key]);
    }
    run(acquire.args(extra), LIMIT)
}

/// The handle a successful `acquire` printed: its whole stdout, one line.
fn handle_of(acquired: &Finished) -> String {
    acquired.expect(0);
    assert!(acquired.stderr.is_empty(), "{acquired:#?}");
    let lines: Vec<&str> = acquired.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{acquired:#?}");
    assert!(lines[0].starts_with("rlh2."), "{acquired:#?}");
    lines[0].to_string()
}

/// `redlease extend` or `release` (`subcommand`) of `handle`, with
/// `extra` flags.
fn with_handle(urls: &[String], subcommand: &str, handle: &str, extra: &[&str]) -> Finished {
    run(
        cmd(urls, subcommand).args(["--handle", handle]).args(extra),
        LIMIT,
    )
}

#[test]
fn an_acquired_lock_is_held_until_released_by_its_handle() {
    let nodes = RedisNodes::start(3);
    let urls = nodes.urls();
    let handle = handle_of(&acquire(&urls, &["deploy"], &["--ttl", "1m"]));
    let held = status(&urls, "deploy");
    assert!(
        held.stdout.contains("HELD on 3 of 3 nodes by a writer, "),
        "{held:#?}"
    );

    // Held elsewhere: the conflict code, as for `run`.
    let busy = acquire(&urls, &["deploy"], &["--no-wait"]);
    busy.expect(1);
    assert!(busy.stdout.is_empty(), "{busy:#?}");
    // Named by the owner the acquiring process gave its lease.
    let line = busy.one_line_error();
    assert!(
        line.contains("lock \"deploy\" is held by ")
            && line.contains(" (redlease acquire) for ")
            && line.contains(" (on 3 of 3 nodes); nothing was acquired"),
        "{busy:#?}"
    );

    let extended = with_handle(&urls, "extend", &handle, &["--ttl", "2m"]);
    extended.expect(0);
    assert!(
        extended
            .one_line_error()
            .starts_with("redlease: extended \"deploy\": held for 2m00s from now"),
        "{extended:#?}"
    );
    assert!(!extended.stderr.contains(&handle), "{extended:#?}");
    // By the TTL it was taken with, quietly.
    let quiet = with_handle(&urls, "extend", &handle, &["--quiet"]);
    quiet.expect(0);
    assert!(
        quiet.stderr.is_empty() && quiet.stdout.is_empty(),
        "{quiet:#?}"
    );

    let released = with_handle(&urls, "release", &handle, &[]);
    released.expect(0);
    assert_eq!(released.stderr, "redlease: released \"deploy\"\n");
    assert!(status(&urls, "deploy").stdout.contains("FREE"));

    // A stale handle: its own code, never a success.
    for subcommand in ["release", "extend"] {
        let stale = with_handle(&urls, subcommand, &handle, &[]);
        stale.expect(75);
        let line = stale.one_line_error();
        assert!(line.contains("the lease is no longer held"), "{stale:#?}");
        assert!(line.contains("the handle is stale"), "{stale:#?}");
        assert!(!line.contains(&handle), "{stale:#?}");
    }
    // Free again: another acquire gets it.
    handle_of(&acquire(&urls, &["deploy"], &["--no-wait"]));
}

#[test]
fn text_that_is_no_handle_is_a_usage_error() {
    let node = RedisNode::start();
    let urls = [node.url()];
    for subcommand in ["extend", "release"] {
        let garbage = with_handle(&urls, subcommand, "not-a-handle", &[]);
        garbage.expect(2);
        assert!(
            garbage
                .one_line_error()
                .contains("invalid handle: not a lease handle"),
            "{garbage:#?}"
        );
        let empty = with_handle(&urls, subcommand, "", &[]);
        empty.expect(2);
        assert!(
            empty.one_line_error().contains("--handle is empty"),
            "{empty:#?}"
        );
        let none = run(&mut cmd(&urls, subcommand), LIMIT);
        none.expect(2);
        assert!(
            none.one_line_error().contains("no lease handle"),
            "{none:#?}"
        );
        let from_env = run(
            cmd(&urls, subcommand).env("REDLEASE_HANDLE", "rlh1.x"),
            LIMIT,
        );
        from_env.expect(2);
        assert!(
            from_env.one_line_error().contains("not a lease handle"),
            "{from_env:#?}"
        );
    }
    // A handle and --force, or --key without --force: usage.
    let both = run(
        cmd(&urls, "release").args(["--handle", "h", "--force", "--key", "k"]),
        LIMIT,
    );
    both.expect(2);
    let key_alone = run(cmd(&urls, "release").args(["--key", "k"]), LIMIT);
    key_alone.expect(2);
    assert!(
        key_alone.one_line_error().contains("give its handle"),
        "{key_alone:#?}"
    );
}

/// A handle cut short (`"${H%???}"`) or edited is a usage error for
/// `extend` and `release`, never a success, and the lock is left as it
/// was: the handle's check catches it before anything is sent.
#[test]
fn a_handle_cut_short_or_edited_is_a_usage_error() {
    let node = RedisNode::start();
    let urls = [node.url()];
    let handle = handle_of(&acquire(&urls, &["cut"], &["--ttl", "1m"]));
    let mut edited = handle.clone().into_bytes();
    // One hex digit of the token, the 20th of 48, made another.
    let at = handle.find('.').unwrap() + 1;
    let at = at + handle[at..].find('.').unwrap() + 1;
    let at = at + handle[at..].find('.').unwrap() + 20;
    edited[at] = if edited[at] == b'0' { b'1' } else { b'0' };
    let edited = String::from_utf8(edited).unwrap();
    for bad in [
        &handle[..handle.len() - 1],
        &handle[..handle.len() - 3],
        &handle[..handle.len() - 10],
        edited.as_str(),
    ] {
        for subcommand in ["extend", "release"] {
            let refused = with_handle(&urls, subcommand, bad, &[]);
            refused.expect(2);
            let line = refused.one_line_error();
            assert!(line.contains("cut short or altered"), "{refused:#?}");
            assert!(!line.contains(bad), "{refused:#?}");
        }
    }
    let held = status(&urls, "cut");
    assert!(held.stdout.contains("HELD on 1 of 1 node"), "{held:#?}");
    with_handle(&urls, "release", &handle, &["--quiet"]).expect(0);
}

#[test]
fn the_handle_can_come_from_redlease_handle() {
    let node = RedisNode::start();
    let urls = [node.url()];
    let handle = handle_of(&acquire(&urls, &["nightly"], &["--ttl", "1m"]));
    let with_env = |subcommand: &str, extra: &[&str]| {
        run(
            cmd(&urls, subcommand)
                .args(extra)
                .env("REDLEASE_HANDLE", format!("{handle}\n")),
            LIMIT,
        )
    };
    with_env("extend", &[]).expect(0);
    with_env("release", &["--quiet"]).expect(0);
    assert!(status(&urls, "nightly").stdout.contains("FREE"));
    with_env("release", &[]).expect(75);

    // With a handle in the environment, --force still deletes a lock.
    let other = handle_of(&acquire(&urls, &["stuck"], &[]));
    let forced = with_env("release", &["--force", "--key", "stuck"]);
    forced.expect(0);
    assert!(forced.stdout.contains("force-released"), "{forced:#?}");
    with_handle(&urls, "release", &other, &[]).expect(75);
}

#[test]
fn a_handle_carries_its_key_prefix_and_ttl() {
    let node = RedisNode::start();
    let urls = [node.url()];
    let handle = handle_of(&acquire(
        &urls,
        &["report"],
        &["--key-prefix", "jobs:", "--ttl", "5m"],
    ));
    assert!(node
        .client()
        .get_connection()
        .and_then(|mut con| redis::cmd("EXISTS")
            .arg("jobs:{report}")
            .query::<i64>(&mut con))
        .is_ok_and(|n| n == 1));
    // With the restart quarantine on (the library's default, that of the
    // Locker's TTL), which must cover the handle's 5 minutes; neither
    // command asks for votes, so the brand-new server does not stop them.
    let extended = run(
        cmd(&urls, "extend")
            .args(["--handle", &handle])
            .env_remove("REDLEASE_RESTART_QUARANTINE"),
        LIMIT,
    );
    extended.expect(0);
    assert_eq!(
        extended.stderr, "redlease: extended \"report\": held for 5m00s from now\n",
        "{extended:#?}"
    );
    run(
        cmd(&urls, "release")
            .args(["--handle", &handle])
            .env_remove("REDLEASE_RESTART_QUARANTINE"),
        LIMIT,
    )
    .expect(0);
}

#[test]
fn a_lapsed_ttl_makes_the_handle_stale() {
    let node = RedisNode::start();
    let urls = [node.url()];
    let handle = handle_of(&acquire(&urls, &["brief"], &["--ttl", "500ms"]));
    // The key expires on the server; only a lower bound on time here.
    eventually(LIMIT, "the key to expire", || {
        status(&urls, "brief").stdout.contains("FREE")
    });
    with_handle(&urls, "extend", &handle, &[]).expect(75);
}

#[test]
fn shared_holds_and_permits_are_acquired_too() {
    let node = RedisNode::start();
    let urls = [node.url()];
    let a = handle_of(&acquire(&urls, &["catalog"], &["--shared"]));
    let b = handle_of(&acquire(&urls, &["catalog"], &["--shared"]));
    let writer = acquire(&urls, &["catalog"], &["--no-wait"]);
    writer.expect(1);
    let shown = status(&urls, "catalog");
    assert!(shown.stdout.contains("by 2 readers"), "{shown:#?}");
    for handle in [&a, &b] {
        with_handle(&urls, "extend", handle, &["--quiet"]).expect(0);
        with_handle(&urls, "release", handle, &[]).expect(0);
    }

    let permits: Vec<String> = (0..2)
        .map(|_| handle_of(&acquire(&urls, &["pool"], &["--permits", "2"])))
        .collect();
    let third = acquire(&urls, &["pool"], &["--permits", "2", "--no-wait"]);
    third.expect(1);
    assert!(
        third
            .one_line_error()
            .contains("all 2 permits of \"pool\" are held"),
        "{third:#?}"
    );
    for handle in &permits {
        with_handle(&urls, "release", handle, &[]).expect(0);
    }
    // Several keys with --shared: all read, beside other readers; a
    // writer of one of them is refused. A permit is taken alone.
    let readers = handle_of(&acquire(&urls, &["a", "b"], &["--shared"]));
    let more = handle_of(&acquire(&urls, &["b", "a"], &["--shared", "--no-wait"]));
    acquire(&urls, &["b"], &["--no-wait"]).expect(1);
    for handle in [&readers, &more] {
        with_handle(&urls, "release", handle, &[]).expect(0);
    }
    let refused = acquire(&urls, &["a", "b"], &["--permits", "2"]);
    refused.expect(2);
    assert!(
        refused.one_line_error().contains("takes one --key"),
        "{refused:#?}"
    );
}

#[test]
fn several_keys_are_acquired_all_or_none() {
    let nodes = RedisNodes::start(3);
    let urls = nodes.urls();
    let b = handle_of(&acquire(&urls, &["b"], &[]));
    let both = acquire(&urls, &["b", "a"], &["--no-wait"]);
    both.expect(1);
    assert!(
        both.one_line_error()
            .contains("one or more of the locks \"a\", \"b\" are held, by ")
            && both.one_line_error().contains(" (redlease acquire) for "),
        "{both:#?}"
    );
    // None was taken: "a" is free.
    assert!(status(&urls, "a").stdout.contains("FREE"));
    with_handle(&urls, "release", &b, &[]).expect(0);

    let both = handle_of(&acquire(&urls, &["b", "a"], &[]));
    for key in ["a", "b"] {
        acquire(&urls, &[key], &["--no-wait"]).expect(1);
    }
    let released = with_handle(&urls, "release", &both, &[]);
    released.expect(0);
    assert_eq!(released.stderr, "redlease: released \"a\", \"b\"\n");
    for key in ["a", "b"] {
        assert!(status(&urls, key).stdout.contains("FREE"));
    }
}

#[test]
fn run_with_several_keys_holds_them_all_while_the_command_runs() {
    let nodes = RedisNodes::start(3);
    let urls = nodes.urls();
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let script = format!(
        r#"{AWAIT}echo "$REDLEASE_KEY $REDLEASE_FENCING_TOKEN" > "$OUT"; printf '%s' "$REDLEASE_FENCING_TOKENS" > "$TOKENS"; touch "$STARTED"; await "$STOP""#
    );
    let child = start(
        cmd(&urls, "run")
            .args([
                "--key", "to:7", "--key", "from:3", "--", "sh", "-c", &script,
            ])
            .env("OUT", path("out"))
            .env("TOKENS", path("tokens"))
            .env("STARTED", path("started"))
            .env("STOP", path("stop")),
    );
    eventually(LIMIT, "the command to start", || path("started").exists());
    for key in ["to:7", "from:3"] {
        let busy = acquire(&urls, &[key], &["--no-wait"]);
        busy.expect(1);
    }
    assert!(status(&urls, "to:7")
        .stdout
        .contains("HELD on 3 of 3 nodes"));
    std::fs::write(path("stop"), "").unwrap();
    finish(child, LIMIT).expect(0);

    // The first name in sorted order, and a NAME=TOKEN line for each.
    let out = std::fs::read_to_string(path("out")).unwrap();
    let (key, token) = out.trim().split_once(' ').unwrap();
    assert_eq!(key, "from:3");
    let tokens = std::fs::read_to_string(path("tokens")).unwrap();
    let lines: Vec<&str> = tokens.lines().collect();
    assert_eq!(lines.len(), 2, "{tokens:?}");
    assert_eq!(lines[0], format!("from:3={token}"));
    assert!(lines[1].starts_with("to:7="), "{tokens:?}");
    lines[1]["to:7=".len()..]
        .parse::<u64>()
        .expect("a numeric fencing token");
    // Released: both free.
    for key in ["to:7", "from:3"] {
        handle_of(&acquire(&urls, &[key], &["--no-wait", "--ttl", "1s"]));
    }

    // Several keys with --permits are refused.
    let refused = run(
        cmd(&urls, "run")
            .args(["--key", "a", "--key", "b", "--permits", "2"])
            .args(["--", "true"]),
        LIMIT,
    );
    refused.expect(2);
    assert!(
        refused.one_line_error().contains("takes one --key"),
        "{refused:#?}"
    );

    // A name read beside the written ones: it runs while another reader
    // holds that name, and not while a writer does.
    let reader = handle_of(&acquire(&urls, &["rates"], &["--shared"]));
    let read_run = |no_wait: bool| {
        let mut c = cmd(&urls, "run");
        c.args(["--key", "a", "--read-key", "rates"]);
        if no_wait {
            c.arg("--no-wait");
        }
        run(
            c.args(["--", "sh", "-c", "echo \"$REDLEASE_FENCING_TOKENS\""]),
            LIMIT,
        )
    };
    let beside = read_run(true);
    beside.expect(0);
    assert!(beside.stdout.contains("rates="), "{beside:#?}");
    with_handle(&urls, "release", &reader, &[]).expect(0);
    let writer = handle_of(&acquire(&urls, &["rates"], &[]));
    read_run(true).expect(1);
    with_handle(&urls, "release", &writer, &[]).expect(0);
}

#[test]
fn a_script_holds_a_lock_across_its_steps() {
    let nodes = RedisNodes::start(3);
    let urls = nodes.urls();
    let script = r#"
set -e
REDLEASE_HANDLE=$(redlease acquire --key deploy --ttl 1m)
export REDLEASE_HANDLE
redlease status --key deploy --timeout 500ms | grep -q '^HELD on 3 of 3 nodes by a writer'
if redlease acquire --key deploy --no-wait --quiet; then exit 10; else [ $? -eq 1 ]; fi
redlease extend --ttl 2m --quiet
redlease release
redlease status --key deploy --timeout 500ms | grep -q '^FREE'
if redlease release 2>/dev/null; then exit 11; else [ $? -eq 75 ]; fi
echo done
"#;
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_redlease"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let ended = run(
        Command::new("sh")
            .args(["-c", script])
            .env("PATH", path)
            .env("REDLEASE_NODES", urls.join(","))
            .env("REDLEASE_RESTART_QUARANTINE", "0s")
            .env_remove("REDLEASE_HANDLE")
            .env_remove("RUST_LOG"),
        LIMIT,
    );
    ended.expect(0);
    assert_eq!(ended.stdout, "done\n", "{ended:#?}");
    assert_eq!(
        ended.stderr, "redlease: released \"deploy\"\n",
        "{ended:#?}"
    );
}

#[test]
fn a_durable_lock_is_extended_durably() {
    let primary = RedisNode::start();
    let mut replica = RedisNode::start_with(
        redlease_testkit::NodeConfig::new()
            .arg("replicaof", &format!("127.0.0.1 {}", primary.port())),
    );
    eventually(Duration::from_secs(10), "the replica to sync", || {
        let mut con = replica.client().get_connection().expect("connect");
        redis::cmd("INFO")
            .arg("replication")
            .query::<String>(&mut con)
            .expect("INFO")
            .contains("master_link_status:up")
    });
    let urls = [primary.url()];
    let durable = ["--durable", "1"];
    let handle = handle_of(&acquire(&urls, &["ledger"], &durable));
    with_handle(&urls, "extend", &handle, &durable).expect(0);
    // No replica acknowledges: the extension does not count.
    replica.pause();
    let unacknowledged = with_handle(&urls, "extend", &handle, &durable);
    replica.resume();
    unacknowledged.expect(69);
    assert!(
        unacknowledged.one_line_error().contains("replica"),
        "{unacknowledged:#?}"
    );
    with_handle(&urls, "release", &handle, &[]).expect(0);
}
