//! `redlease release --force`: a stuck lock deleted everywhere, the
//! fencing counter kept, and nothing done without `--force`.

use std::time::Duration;

use redlease_testkit::RedisNodes;

use crate::support::{eventually, has_key, lock_key, redlease, run, Holder};

const LIMIT: Duration = Duration::from_secs(30);

fn release(urls: &[String], key: &str, force: bool) -> crate::support::Finished {
    let mut cmd = redlease();
    cmd.args(["release", "--nodes", &urls.join(","), "--key", key])
        .args(["--timeout", "500ms"]);
    if force {
        cmd.arg("--force");
    }
    run(&mut cmd, LIMIT)
}

#[test]
fn force_release_deletes_a_held_lock_on_every_node() {
    let mut nodes = RedisNodes::start(3);
    let urls = nodes.urls();
    let holder = Holder::take(&urls, "stuck");
    let key = lock_key("stuck");
    eventually(Duration::from_secs(10), "the key on every node", || {
        nodes.iter().all(|node| has_key(node, &key))
    });

    // Without --force: a usage error, and the lock is untouched.
    let refused = release(&urls, "stuck", false);
    refused.expect(2);
    assert!(refused.one_line_error().contains("--force"), "{refused:#?}");
    assert!(nodes.iter().all(|node| has_key(node, &key)));

    let done = release(&urls, "stuck", true);
    done.expect(0);
    assert!(done.stdout.contains("deleted on 3 of 3 nodes"), "{done:#?}");
    assert!(nodes.iter().all(|node| !has_key(node, &key)));
    // The counter stays, so the next token is higher than the old holder's.
    let fence_key = format!("{key}:fence");
    assert!(nodes.iter().all(|node| has_key(node, &fence_key)));

    // Nothing left: still fine, and said so; no warning that a lock was
    // force-released.
    let nothing = release(&urls, "stuck", true);
    nothing.expect(0);
    assert!(
        nothing
            .stdout
            .contains("was not held on any of the 3 nodes: nothing was deleted"),
        "{nothing:#?}"
    );
    assert!(!nothing.stderr.contains("force-released"), "{nothing:#?}");
    // A node down: named, exit 69.
    nodes.node_mut(2).kill();
    let partial = release(&urls, "stuck", true);
    partial.expect(69);
    // The library logs the force release (a warning); the error is the
    // last line.
    let error = partial.stderr.lines().last().unwrap_or_default();
    assert!(
        error.contains("node 2") && error.contains("run it again"),
        "{partial:#?}"
    );
    drop(holder);
}

/// `run`'s release at the end warns only when a quorum may still hold
/// the lock: a node where our token is already gone is free, so one
/// release, one token gone and one silent node of three is a free lock
/// (no warning), while one release, one gone and three silent of five
/// may not be (warned, with the nodes known free counted).
#[test]
fn run_warns_of_a_failed_release_only_when_a_quorum_may_still_hold_it() {
    use redlease_testkit::proxy::{Mode, Proxy};
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for (n, silent, warned) in [(3, 1, false), (5, 3, true)] {
        let nodes = RedisNodes::start(n);
        let proxies: Vec<Proxy> = {
            let _in = runtime.enter();
            nodes
                .iter()
                .map(|node| Proxy::start(&node.addr()))
                .collect()
        };
        let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
        let dir = tempfile::tempdir().unwrap();
        let (ready, go) = (dir.path().join("ready"), dir.path().join("go"));
        let child = crate::support::start(
            redlease()
                .args(["run", "--nodes", &urls.join(","), "--key", "job"])
                .args(["--ttl", "20s", "--restart-quarantine", "0s", "--", "sh", "-c"])
                .arg(r#"touch "$READY"; i=0; while [ ! -e "$GO" ] && [ $i -lt 1000 ]; do i=$((i+1)); sleep 0.02; done"#)
                .env("READY", &ready)
                .env("GO", &go),
        );
        eventually(LIMIT, "the command to start", || ready.exists());
        // Our token goes on node 0 (as if it had expired there), and the
        // last nodes stop answering, before the command ends.
        let key = lock_key("job");
        let mut conn = nodes.node(0).client().get_connection().unwrap();
        let deleted: i64 = redis::cmd("DEL").arg(&key).query(&mut conn).unwrap();
        assert_eq!(deleted, 1);
        for proxy in &proxies[n - silent..] {
            proxy.set(Mode::Blackhole);
        }
        std::fs::write(&go, "").unwrap();
        let done = crate::support::finish(child, LIMIT);
        done.expect(0);
        match warned {
            false => assert!(done.stderr.trim().is_empty(), "{done:#?}"),
            true => {
                let line = done.one_line_error();
                assert!(line.contains("warning: the command finished but the release failed"));
                assert!(line.contains("2 of 5 nodes are known free of it"), "{line}");
            }
        }
        drop(proxies);
    }
}
