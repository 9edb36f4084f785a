//! The exit-code table `redlease --help` prints (the CLI's `exit::CODES`,
//! which docs/cli.md's table is checked against) tested against the CLI:
//! every (code, command) claim it makes is one real invocation here or in
//! a named test, or listed with why it is not exercised; and each
//! command's own `--help` names the codes the table gives it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use redlease_testkit::RedisNode;
use rustix::process::Signal;

use crate::support::{eventually, finish, redlease, run, signal, start, Finished, Holder};

const LIMIT: Duration = Duration::from_secs(30);

/// The commands as the table names them.
const COMMANDS: [&str; 10] = [
    "run",
    "acquire",
    "extend",
    "release --handle",
    "release --force",
    "status",
    "elect",
    "leader",
    "doctor",
    "demo",
];

/// How a claim is exercised: by the test of this name (`file::test`, in
/// tests/cli), or not, and why.
enum By {
    Test(&'static str),
    NotExercised(&'static str),
}

use By::{NotExercised, Test};

const A_BUG: By =
    NotExercised("an internal error is a bug in redlease: no invocation makes one on purpose");

/// Every (code, command) claim of the table, and what exercises it.
const CASES: &[(&str, &str, By)] = &[
    (
        "0",
        "run",
        Test("exit_codes::each_command_exits_0_on_success"),
    ),
    (
        "0",
        "acquire",
        Test("exit_codes::each_command_exits_0_on_success"),
    ),
    (
        "0",
        "extend",
        Test("exit_codes::each_command_exits_0_on_success"),
    ),
    (
        "0",
        "release --handle",
        Test("exit_codes::each_command_exits_0_on_success"),
    ),
    (
        "0",
        "release --force",
        Test("exit_codes::each_command_exits_0_on_success"),
    ),
    (
        "0",
        "status",
        Test("exit_codes::each_command_exits_0_on_success"),
    ),
    (
        "0",
        "elect",
        Test("exit_codes::each_command_exits_0_on_success"),
    ),
    (
        "0",
        "leader",
        Test("exit_codes::each_command_exits_0_on_success"),
    ),
    (
        "0",
        "doctor",
        Test("exit_codes::each_command_exits_0_on_success"),
    ),
    (
        "0",
        "demo",
        Test("demo::demo_runs_to_completion_and_cleans_up_its_servers"),
    ),
    (
        "1",
        "run",
        Test("exit_codes::a_held_lock_and_a_failed_check_exit_1"),
    ),
    (
        "1",
        "acquire",
        Test("exit_codes::a_held_lock_and_a_failed_check_exit_1"),
    ),
    (
        "1",
        "elect",
        Test("exit_codes::a_held_lock_and_a_failed_check_exit_1"),
    ),
    (
        "1",
        "leader",
        Test("exit_codes::a_held_lock_and_a_failed_check_exit_1"),
    ),
    (
        "1",
        "doctor",
        Test("exit_codes::a_held_lock_and_a_failed_check_exit_1"),
    ),
    (
        "1",
        "demo",
        NotExercised(
            "the demo's checks fail only when the lock it shows breaks (lost updates, \
             overlapping holders), which no invocation can cause",
        ),
    ),
    (
        "2",
        "run",
        Test("exit_codes::usage_errors_exit_2_from_every_command"),
    ),
    (
        "2",
        "acquire",
        Test("exit_codes::usage_errors_exit_2_from_every_command"),
    ),
    (
        "2",
        "extend",
        Test("exit_codes::usage_errors_exit_2_from_every_command"),
    ),
    (
        "2",
        "release --handle",
        Test("exit_codes::usage_errors_exit_2_from_every_command"),
    ),
    (
        "2",
        "release --force",
        Test("exit_codes::usage_errors_exit_2_from_every_command"),
    ),
    (
        "2",
        "status",
        Test("exit_codes::usage_errors_exit_2_from_every_command"),
    ),
    (
        "2",
        "doctor",
        Test("exit_codes::usage_errors_exit_2_from_every_command"),
    ),
    (
        "2",
        "demo",
        Test("exit_codes::usage_errors_exit_2_from_every_command"),
    ),
    ("69", "run", Test("exit_codes::unreachable_nodes_exit_69")),
    (
        "69",
        "acquire",
        Test("exit_codes::a_lock_kept_by_the_restart_quarantine_exits_69_naming_it"),
    ),
    (
        "69",
        "extend",
        Test("exit_codes::unreachable_nodes_exit_69"),
    ),
    (
        "69",
        "release --handle",
        Test("exit_codes::unreachable_nodes_exit_69"),
    ),
    (
        "69",
        "release --force",
        Test("exit_codes::unreachable_nodes_exit_69"),
    ),
    (
        "69",
        "status",
        Test("exit_codes::unreachable_nodes_exit_69"),
    ),
    (
        "69",
        "demo",
        Test("demo::demo_without_redis_server_says_how_to_install_it"),
    ),
    ("70", "run", A_BUG),
    ("70", "acquire", A_BUG),
    ("70", "extend", A_BUG),
    ("70", "release --handle", A_BUG),
    ("70", "release --force", A_BUG),
    ("70", "status", A_BUG),
    (
        "2",
        "elect",
        Test("exit_codes::usage_errors_exit_2_from_every_command"),
    ),
    (
        "2",
        "leader",
        Test("exit_codes::usage_errors_exit_2_from_every_command"),
    ),
    ("69", "elect", Test("exit_codes::unreachable_nodes_exit_69")),
    (
        "69",
        "leader",
        Test("exit_codes::unreachable_nodes_exit_69"),
    ),
    ("70", "elect", A_BUG),
    ("70", "leader", A_BUG),
    ("70", "doctor", A_BUG),
    ("70", "demo", A_BUG),
    (
        "75",
        "run",
        Test("exit_codes::stale_handles_and_a_lost_lease_exit_75"),
    ),
    (
        "75",
        "extend",
        Test("exit_codes::stale_handles_and_a_lost_lease_exit_75"),
    ),
    (
        "75",
        "release --handle",
        Test("exit_codes::stale_handles_and_a_lost_lease_exit_75"),
    ),
    (
        "75",
        "elect",
        Test("exit_codes::stale_handles_and_a_lost_lease_exit_75"),
    ),
    (
        "77",
        "run",
        Test("acl::run_and_status_name_the_refused_command"),
    ),
    (
        "77",
        "elect",
        NotExercised(
            "elect gives its lead back through run's code (run_under), whose refused \
             release acl::run_and_status_name_the_refused_command exercises; a lead's \
             resign is the same release script",
        ),
    ),
    (
        "126",
        "run",
        Test("exit_codes::the_commands_own_end_gives_the_code"),
    ),
    (
        "126",
        "elect",
        Test("exit_codes::the_commands_own_end_gives_the_code"),
    ),
    (
        "127",
        "run",
        Test("exit_codes::the_commands_own_end_gives_the_code"),
    ),
    (
        "127",
        "elect",
        Test("exit_codes::the_commands_own_end_gives_the_code"),
    ),
    (
        "128+N",
        "run",
        Test("exit_codes::the_commands_own_end_gives_the_code"),
    ),
    (
        "128+N",
        "elect",
        Test("exit_codes::the_commands_own_end_gives_the_code"),
    ),
    (
        "128+N",
        "acquire",
        Test("exit_codes::a_signal_ends_a_wait_with_128_plus_n"),
    ),
    (
        "128+N",
        "demo",
        Test("exit_codes::a_signal_ends_a_wait_with_128_plus_n"),
    ),
    (
        "other",
        "run",
        Test("exit_codes::the_commands_own_end_gives_the_code"),
    ),
    (
        "other",
        "elect",
        Test("exit_codes::the_commands_own_end_gives_the_code"),
    ),
];

/// The claims of the table in `redlease --help`: under each code, a line
/// `COMMANDS: MEANING` starts a claim (`every command`, or commands apart
/// by commas), and lines indented further continue it.
fn claims_in_help() -> BTreeMap<String, BTreeSet<String>> {
    let help = run(redlease().arg("--help"), LIMIT);
    help.expect(0);
    let table = help
        .stdout
        .split_once("\nExit codes")
        .map(|(_, table)| table)
        .unwrap_or_else(|| panic!("no exit-code table in --help: {help:#?}"));
    let mut claims: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut code = String::new();
    for line in table.lines().skip(1) {
        if line.len() < 10 || !line.starts_with("  ") {
            break;
        }
        let (left, text) = line.split_at(9);
        if !left.trim().is_empty() {
            code = left.trim().to_string();
        }
        if text.starts_with(' ') {
            continue; // a claim's continuation
        }
        let (who, _) = text
            .split_once(": ")
            .unwrap_or_else(|| panic!("a claim without its commands: {line:?}"));
        let commands: Vec<String> = match who {
            "every command" => COMMANDS.iter().map(|c| c.to_string()).collect(),
            some => some.split(", ").map(str::to_string).collect(),
        };
        for command in commands {
            assert!(COMMANDS.contains(&command.as_str()), "{line:?}");
            claims.entry(code.clone()).or_default().insert(command);
        }
    }
    claims
}

#[test]
fn every_claim_of_the_help_table_is_exercised_or_said_why_not() {
    let claims = claims_in_help();
    for code in [
        "0", "1", "2", "69", "70", "75", "77", "126", "127", "128+N", "other",
    ] {
        assert!(claims.contains_key(code), "no row for {code}: {claims:?}");
    }
    let claimed: BTreeSet<(String, String)> = claims
        .iter()
        .flat_map(|(code, commands)| commands.iter().map(|c| (code.clone(), c.clone())))
        .collect();
    let cased: BTreeSet<(String, String)> = CASES
        .iter()
        .map(|(code, command, _)| (code.to_string(), command.to_string()))
        .collect();
    assert_eq!(cased.len(), CASES.len(), "a claim is listed twice");
    let missing: Vec<_> = claimed.difference(&cased).collect();
    let extra: Vec<_> = cased.difference(&claimed).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "claims without a case: {missing:?}; cases the table does not claim: {extra:?}"
    );
    // Each named test exists; a claim left out says why.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli");
    for (code, command, by) in CASES {
        if let NotExercised(why) = by {
            assert!(why.len() > 20, "{code} {command}: say why: {why:?}");
        }
        if let Test(name) = by {
            let (file, test) = name.split_once("::").expect("file::test");
            let source = std::fs::read_to_string(dir.join(format!("{file}.rs")))
                .unwrap_or_else(|e| panic!("{code} {command}: {file}.rs: {e}"));
            assert!(
                source.contains(&format!("#[test]\nfn {test}(")),
                "{code} {command}: no test {name}"
            );
        }
    }
}

/// The codes a command's own `--help` gives in its "Exit codes:" text:
/// each `;`-separated part that starts with one (`126/127` is two).
fn codes_in_command_help(command: &str) -> BTreeSet<String> {
    let help = run(redlease().args([command, "--help"]), LIMIT);
    help.expect(0);
    let text = help.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    let (_, codes) = text
        .split_once("Exit codes: ")
        .unwrap_or_else(|| panic!("{command} --help has no exit codes: {help:#?}"));
    let codes = codes.split(" See ").next().unwrap_or(codes);
    codes
        .split("; ")
        .filter_map(|part| part.split_whitespace().next())
        .flat_map(|word| word.split('/'))
        .filter(|word| word.starts_with(|c: char| c.is_ascii_digit()))
        .map(|word| word.trim_end_matches([',', '.']).to_string())
        .collect()
}

#[test]
fn each_commands_help_gives_the_codes_the_table_gives_it() {
    let claims = claims_in_help();
    // Codes the table claims for a command by name (every command's
    // success, usage and internal error need no mention).
    let help = run(redlease().arg("--help"), LIMIT).stdout;
    let named = |command: &str| -> BTreeSet<String> {
        let mut named = BTreeSet::new();
        let mut code = "";
        for line in help.split_once("\nExit codes").unwrap().1.lines().skip(1) {
            if line.len() < 10 {
                break;
            }
            let (left, text) = line.split_at(9);
            if !left.trim().is_empty() {
                code = left.trim();
            }
            let who = text.split_once(": ").map_or("", |(who, _)| who);
            if !text.starts_with(' ') && who.split(", ").any(|c| c == command) {
                named.insert(code.to_string());
            }
        }
        named
    };
    for (sub, commands) in [
        ("run", &["run"][..]),
        ("acquire", &["acquire"]),
        ("extend", &["extend"]),
        ("release", &["release --handle", "release --force"]),
        ("status", &["status"]),
        ("elect", &["elect"]),
        ("leader", &["leader"]),
        ("doctor", &["doctor"]),
        ("demo", &["demo"]),
    ] {
        let given = codes_in_command_help(sub);
        let all: BTreeSet<String> = claims
            .iter()
            .filter(|(_, who)| commands.iter().any(|c| who.contains(*c)))
            .map(|(code, _)| code.clone())
            .collect();
        let required: BTreeSet<String> = commands
            .iter()
            .flat_map(|c| named(c))
            .filter(|code| code != "other")
            .collect();
        let unclaimed: Vec<_> = given.difference(&all).collect();
        let unsaid: Vec<_> = required.difference(&given).collect();
        assert!(
            unclaimed.is_empty() && unsaid.is_empty(),
            "{sub} --help gives {unclaimed:?}, which the table does not, and not {unsaid:?}, \
             which it does"
        );
    }
}

/// `redlease SUBCOMMAND --nodes URLS ARGS...`.
fn cmd(sub: &str, urls: &[String], args: &[&str]) -> Command {
    let mut cmd = redlease();
    cmd.arg(sub).args(["--nodes", &urls.join(",")]).args(args);
    cmd
}

/// The handle `acquire` printed.
fn handle_of(out: &Finished) -> String {
    out.expect(0);
    out.stdout.trim().to_string()
}

#[test]
fn each_command_exits_0_on_success() {
    let node = RedisNode::start();
    let urls = [node.url()];
    run(
        &mut cmd("run", &urls, &["--key", "ok", "--", "true"]),
        LIMIT,
    )
    .expect(0);
    let handle = handle_of(&run(&mut cmd("acquire", &urls, &["--key", "ok"]), LIMIT));
    run(&mut cmd("extend", &urls, &["--handle", &handle]), LIMIT).expect(0);
    run(&mut cmd("release", &urls, &["--handle", &handle]), LIMIT).expect(0);
    run(
        &mut cmd("release", &urls, &["--force", "--key", "ok"]),
        LIMIT,
    )
    .expect(0);
    run(&mut cmd("status", &urls, &["--key", "ok"]), LIMIT).expect(0);
    let elect = ["--key", "lead", "--value", "v", "--", "true"];
    run(&mut cmd("elect", &urls, &elect), LIMIT).expect(0);
    let lead = [
        "--key", "lead", "--value", "v", "--", "sh", "-c", "sleep 30",
    ];
    let leading = start(&mut cmd("elect", &urls, &lead));
    eventually(LIMIT, "a leader", || {
        run(&mut cmd("leader", &urls, &["--key", "lead"]), LIMIT).code() == 0
    });
    signal(&leading, Signal::TERM);
    finish(leading, LIMIT).expect(143);
    run(&mut cmd("doctor", &urls, &[]), LIMIT).expect(0);
}

#[test]
fn a_held_lock_and_a_failed_check_exit_1() {
    let node = RedisNode::start();
    let urls = [node.url()];
    let _holder = Holder::take(&urls, "busy");
    let busy = ["--key", "busy", "--no-wait"];
    let out = run(
        &mut cmd("run", &urls, &[&busy[..], &["--", "true"]].concat()),
        LIMIT,
    );
    out.expect(1);
    assert!(out.one_line_error().contains("is held"), "{out:#?}");
    let out = run(&mut cmd("acquire", &urls, &busy), LIMIT);
    out.expect(1);
    assert!(out.stdout.is_empty(), "{out:#?}");
    // An election whose lead is held (its lock, here), and one nobody leads.
    let out = run(
        &mut cmd(
            "elect",
            &urls,
            &[&busy[..], &["--value", "v", "--", "true"]].concat(),
        ),
        LIMIT,
    );
    out.expect(1);
    let out = run(&mut cmd("leader", &urls, &["--key", "nobody"]), LIMIT);
    out.expect(1);
    assert_eq!(out.stdout.trim(), "no leader", "{out:#?}");
    // An unreachable node FAILs doctor's reachable check.
    let closed = closed_port_url();
    let out = run(
        &mut cmd("doctor", &[closed], &["--timeout", "300ms"]),
        LIMIT,
    );
    out.expect(1);
    assert!(out.stdout.contains("FAIL"), "{out:#?}");
}

#[test]
fn usage_errors_exit_2_from_every_command() {
    let nodes = ["redis://127.0.0.1:1".to_string()];
    for (sub, args) in [
        ("run", &["--key", "k", "--bogus", "--", "true"][..]),
        ("run", &["--key", "k"]), // no command after --
        ("run", &["--key", "k", "--permits", "0", "--", "true"]),
        ("acquire", &["--key", ""]),
        ("acquire", &["--key", "k", "--permits", "100001"]),
        ("acquire", &["--key", "a", "--key", "b", "--permits", "2"]),
        ("extend", &["--handle", "not-a-handle"]),
        ("release", &["--handle", ""]),
        ("release", &["--force", "--key", ""]),
        ("status", &["--key", ""]),
        ("elect", &["--key", "k", "--value", "v"]), // no command after --
        (
            "elect",
            &["--key", "k", "--shared", "--value", "v", "--", "true"],
        ),
        ("leader", &["--key", ""]),
        ("doctor", &["--ttl", "10"]),
        ("demo", &["--bogus"]),
    ] {
        let out = run(&mut cmd(sub, &nodes, args), LIMIT);
        out.expect(2);
        assert!(out.one_line_error().len() > "redlease: ".len(), "{out:#?}");
    }
    let out = run(
        &mut cmd("acquire", &nodes, &["--key", "k", "--permits", "100001"]),
        LIMIT,
    );
    assert!(
        out.one_line_error()
            .contains("100001 permits: at most 100000"),
        "{out:#?}"
    );
}

/// A port nothing listens on (bound, then let go).
fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = listener.local_addr().expect("its address").port();
    drop(listener);
    format!("redis://127.0.0.1:{port}")
}

#[test]
fn unreachable_nodes_exit_69() {
    let closed = [closed_port_url()];
    for (sub, args) in [
        ("run", &["--key", "k", "--", "true"][..]),
        ("acquire", &["--key", "k"]),
        ("status", &["--key", "k", "--timeout", "300ms"]),
        ("release", &["--force", "--key", "k", "--timeout", "300ms"]),
        ("elect", &["--key", "k", "--value", "v", "--", "true"]),
        ("leader", &["--key", "k", "--timeout", "300ms"]),
    ] {
        let out = run(&mut cmd(sub, &closed, args), LIMIT);
        out.expect(69);
        assert!(!out.one_line_error().is_empty(), "{out:#?}");
    }
    // A handle whose node went away.
    let mut node = RedisNode::start();
    let urls = [node.url()];
    let handle = handle_of(&run(&mut cmd("acquire", &urls, &["--key", "gone"]), LIMIT));
    node.kill();
    for sub in ["extend", "release"] {
        let out = run(&mut cmd(sub, &urls, &["--handle", &handle]), LIMIT);
        out.expect(69);
        assert!(!out.one_line_error().is_empty(), "{out:#?}");
    }
}

#[test]
fn a_lock_kept_by_the_restart_quarantine_exits_69_naming_it() {
    // A healthy brand-new server: with --ttl 1d it casts no vote for a
    // day, its restart quarantine.
    let node = RedisNode::start();
    let urls = [node.url()];
    let mut acquire = cmd(
        "acquire",
        &urls,
        &["--key", "daily", "--ttl", "1d", "--no-wait"],
    );
    acquire.env_remove("REDLEASE_RESTART_QUARANTINE");
    let out = run(&mut acquire, LIMIT);
    out.expect(69);
    let line = out.one_line_error();
    assert!(
        line.starts_with(
            "redlease: lock \"daily\" not taken: the restart quarantine keeps too few nodes \
             voting for 24h"
        ),
        "{line}"
    );
    assert!(
        line.contains(&format!("node 0 (127.0.0.1:{}) just started", node.port()))
            || line.contains(&format!("node 0 (127.0.0.1:{}) started ", node.port())),
        "{line}"
    );
    assert!(line.contains("until it has been up for 24h14m"), "{line}");
    assert!(
        line.contains("the --ttl plus 1% unless --restart-quarantine sets it"),
        "{line}"
    );
    assert!(line.ends_with("nothing was acquired"), "{line}");
    assert!(out.stdout.is_empty(), "{out:#?}");
    // A run that waits a little: said before the wait, and at its end.
    let mut ran = cmd(
        "run",
        &urls,
        &[
            "--key", "daily", "--ttl", "1d", "--wait", "300ms", "--", "true",
        ],
    );
    ran.env_remove("REDLEASE_RESTART_QUARANTINE");
    let out = run(&mut ran, LIMIT);
    out.expect(69);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{out:#?}");
    assert!(
        lines[0].starts_with("redlease: waiting 24h")
            && lines[0].contains("the restart quarantine"),
        "{out:#?}"
    );
    assert!(
        lines[1].starts_with("redlease: lock \"daily\" not taken after waiting ")
            && lines[1].contains("the restart quarantine keeps too few nodes voting")
            && lines[1].ends_with("the command was not run"),
        "{out:#?}"
    );
}

#[test]
fn stale_handles_and_a_lost_lease_exit_75() {
    let mut node = RedisNode::start();
    let urls = [node.url()];
    let handle = handle_of(&run(&mut cmd("acquire", &urls, &["--key", "stale"]), LIMIT));
    run(&mut cmd("release", &urls, &["--handle", &handle]), LIMIT).expect(0);
    for sub in ["extend", "release"] {
        let out = run(&mut cmd(sub, &urls, &["--handle", &handle]), LIMIT);
        out.expect(75);
        assert!(!out.one_line_error().is_empty(), "{out:#?}");
    }
    // A run whose only node stops answering loses its lease.
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let child = start(
        cmd(
            "run",
            &urls,
            &["--key", "lost", "--ttl", "1s", "--", "sh", "-c"],
        )
        .arg(r#"touch "$STARTED"; sleep 30"#)
        .env("STARTED", &started),
    );
    eventually(LIMIT, "the command to start", || started.exists());
    node.pause();
    let ended = finish(child, LIMIT);
    node.resume();
    ended.expect(75);
    // So does a leader's.
    std::fs::remove_file(&started).unwrap();
    let child = start(
        cmd(
            "elect",
            &urls,
            &[
                "--key",
                "lost-lead",
                "--value",
                "v",
                "--ttl",
                "1s",
                "--",
                "sh",
                "-c",
            ],
        )
        .arg(r#"touch "$STARTED"; sleep 30"#)
        .env("STARTED", &started),
    );
    eventually(LIMIT, "the command to start", || started.exists());
    node.pause();
    let ended = finish(child, LIMIT);
    node.resume();
    ended.expect(75);
}

#[test]
fn the_commands_own_end_gives_the_code() {
    let node = RedisNode::start();
    let urls = [node.url()];
    let dir = tempfile::tempdir().unwrap();
    let not_executable = dir.path().join("script.sh");
    std::fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    let ends: [(&[&str], i32); 5] = [
        (&["sh", "-c", "exit 3"], 3),
        (&["sh", "-c", "exit 0"], 0),
        (&[not_executable.to_str().unwrap()], 126),
        (&["/nonexistent/command"], 127),
        (&["sh", "-c", "kill -TERM $$"], 143),
    ];
    for (command, code) in ends {
        let out = run(
            &mut cmd(
                "run",
                &urls,
                &[&["--key", "end", "--"][..], command].concat(),
            ),
            LIMIT,
        );
        out.expect(code);
        let out = run(
            &mut cmd(
                "elect",
                &urls,
                &[&["--key", "end", "--value", "v", "--"][..], command].concat(),
            ),
            LIMIT,
        );
        out.expect(code);
    }
}

#[test]
fn a_signal_ends_a_wait_with_128_plus_n() {
    let node = RedisNode::start();
    let urls = [node.url()];
    let _holder = Holder::take(&urls, "waited");
    // acquire waits for the held lock until SIGTERM: 128 + 15.
    let waiter = start(&mut cmd("acquire", &urls, &["--key", "waited"]));
    // It has subscribed to the lock's release when status counts it.
    eventually(LIMIT, "the acquire to wait", || {
        run(&mut cmd("status", &urls, &["--key", "waited"]), LIMIT)
            .stdout
            .contains("; 1 process waiting;")
    });
    signal(&waiter, Signal::TERM);
    let out = finish(waiter, LIMIT);
    out.expect(143);
    assert!(out.stdout.is_empty(), "{out:#?}");

    // demo, interrupted once its servers run: 128 + 2.
    let dir = tempfile::tempdir().unwrap();
    let shown = dir.path().join("stdout");
    let demo = redlease()
        .args(["demo", "--duration", "30s", "--workers", "2"])
        .stdout(std::fs::File::create(&shown).unwrap())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the demo");
    eventually(LIMIT, "the demo's servers to run", || {
        std::fs::read_to_string(&shown).is_ok_and(|text| text.contains("ports "))
    });
    signal(&demo, Signal::INT);
    finish(demo, LIMIT).expect(130);
}
