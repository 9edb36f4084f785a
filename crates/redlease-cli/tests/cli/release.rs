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
