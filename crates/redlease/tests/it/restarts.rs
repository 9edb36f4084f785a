//! Servers that may have forgotten locks do not vote: a server that
//! restarted empty is quarantined, one server given twice counts once (and
//! the Locker refuses to lock), and TTLs the quarantine does not cover are
//! refused before any I/O.

use std::time::{Duration, Instant};

use redlease::{Error, Locker, LockerBuilder, NodeErrorKind, Quarantine};
use redlease_testkit::RedisNodes;

use crate::support::{indices, once, token, MS, NODE_TIMEOUT};

/// A Locker with `ttl` (its quarantine is the default, `ttl` plus drift,
/// unless `quarantine` is given) and one attempt per lock.
fn build_locker(urls: Vec<String>, ttl: Duration, quarantine: Option<Duration>) -> Locker {
    locker_builder(urls, ttl, quarantine)
        .build()
        .expect("valid test settings")
}

fn locker_builder(urls: Vec<String>, ttl: Duration, quarantine: Option<Duration>) -> LockerBuilder {
    let mut builder = Locker::builder(urls)
        .ttl(ttl)
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(NODE_TIMEOUT)
        .retry(once());
    if let Some(quarantine) = quarantine {
        builder = builder.advanced(|a| a.restart_quarantine(quarantine));
    }
    builder
}

/// The quarantined nodes of a failed acquire, with what is left of it.
fn quarantined(e: &Error) -> Vec<(usize, Quarantine, Duration)> {
    e.node_errors()
        .iter()
        .filter_map(|f| match f.kind() {
            NodeErrorKind::Quarantined { cause, left } => Some((f.node().index(), *cause, *left)),
            _ => None,
        })
        .collect()
}

/// Waits until `locker` takes a lock (which it releases), at most `limit`
/// after `since`, while every refusal is a quarantine; how long that took
/// since `since`.
async fn until_it_votes(locker: &Locker, since: Instant, limit: Duration) -> Duration {
    loop {
        match locker.try_lock("warm-up").await {
            Ok(lease) => {
                let took = since.elapsed();
                lease.release().await.unwrap();
                return took;
            }
            Err(e) if since.elapsed() < limit => {
                assert!(!quarantined(&e).is_empty(), "{e}");
                tokio::time::sleep(50 * MS).await;
            }
            Err(e) => panic!("no lock {:?} after the start: {e}", since.elapsed()),
        }
    }
}

/// Kills node `i` and starts it again on its port, empty (no persistence).
fn restart_empty(nodes: &mut RedisNodes, i: usize) {
    tokio::task::block_in_place(|| {
        nodes.node_mut(i).kill();
        nodes.node_mut(i).restart();
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_votes_again_only_after_its_quarantine() {
    let mut nodes = RedisNodes::start(1);
    let ttl = Duration::from_secs(2);
    let quarantine = ttl + ttl / 100 + 2 * MS; // the default: TTL plus drift
    let started = Instant::now();
    let locker = build_locker(nodes.urls(), ttl, None);
    // A brand-new server is quarantined too (it cannot show that it never
    // granted a lock), for the quarantine and no longer.
    let first = until_it_votes(&locker, started, 3 * ttl).await;
    assert!(first >= quarantine - Duration::from_secs(1), "{first:?}");

    let restarted = Instant::now();
    restart_empty(&mut nodes, 0);
    let e = loop {
        match locker.try_lock("job").await {
            // The first request may meet the old, broken connection.
            Err(e) if quarantined(&e).is_empty() && restarted.elapsed() < 2 * ttl => {
                tokio::time::sleep(10 * MS).await;
            }
            Err(e) => break e,
            Ok(_) => panic!("a server up for {:?} voted", restarted.elapsed()),
        }
    };
    match quarantined(&e)[..] {
        [(0, Quarantine::Restarted { up }, left)] => {
            // What is left is the quarantine less the uptime seen.
            assert!(up < quarantine, "up {up:?}");
            assert_eq!(up + left, quarantine);
        }
        ref other => panic!("expected node 0 quarantined, got {other:?}: {e}"),
    }
    assert!(e.to_string().contains("restart quarantine"), "{e}");
    assert!(e.is_retryable(), "the quarantine ends: worth retrying");

    // It votes again once it has been up for the quarantine, not before.
    let granted = loop {
        match locker.try_lock("job").await {
            Ok(lease) => break lease,
            Err(e) if restarted.elapsed() < 3 * ttl => {
                assert_eq!(indices(e.node_errors().iter().map(|f| f.node())), [0]);
                tokio::time::sleep(50 * MS).await;
            }
            Err(e) => panic!(
                "still refused {:?} after the restart: {e}",
                restarted.elapsed()
            ),
        }
    };
    let after = restarted.elapsed();
    assert!(after >= quarantine, "voted {after:?} after the restart");
    granted.release().await.unwrap();
}

/// The fault Redlock leaves to operators: a majority of a holder's nodes
/// includes one that restarts empty at once. With the quarantine a second
/// client cannot take the lock; without it (the control), it can.
/// How the first client holds the lock in the empty-restart test.
#[derive(Clone, Copy, Debug)]
enum Holds {
    Write,
    Read,
    Permit,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_restart_does_not_hand_a_held_lock_to_a_second_client() {
    // The holder a writer (as any exclusive lock), then readers, then a
    // semaphore's permit (one permit over 3 nodes: a majority too).
    let holders = [Holds::Write, Holds::Read, Holds::Permit];
    for (guarded, holds) in holders
        .into_iter()
        .flat_map(|holds| [(true, holds), (false, holds)])
    {
        let mut nodes = RedisNodes::start(3);
        let started = Instant::now();
        let ttl = Duration::from_secs(2);
        let quarantine = if guarded { None } else { Some(Duration::ZERO) };
        // Fencing on in the control, whose overlap the tokens still order;
        // the guarded round takes its locks the default (unfenced) way.
        let build = || {
            locker_builder(nodes.urls(), ttl, quarantine)
                .fencing(!guarded)
                .build()
                .expect("valid test settings")
        };
        let (holder, rival) = (build(), build());
        if guarded {
            // Past the brand-new servers' own quarantine.
            until_it_votes(&holder, started, 3 * ttl).await;
        }
        // The holder has the lock on nodes 0 and 1 only (say its SET never
        // reached node 2): a bare majority. A writer then comes.
        let lease = match holds {
            Holds::Write => holder.try_lock("job").await,
            Holds::Read => holder.try_read_lock("job").await,
            Holds::Permit => holder.semaphore("job", 1).try_acquire().await,
        };
        let lease = lease.expect("3 of 3");
        // Granted at a quorum: node 2's request may still be on its way.
        // Landed after the rival's, it would leave node 2's fencing
        // counter unwritten, and the rival's token could equal ours.
        holder.admin().wait_for_background().await;
        let key = holder.admin().key("job");
        let (readers, permits) = (format!("{key}:readers"), format!("{key}:permits"));
        crate::support::command(nodes.node(2), &["DEL", &key, &readers, &permits]).await;
        restart_empty(&mut nodes, 1);

        // Node 1 forgot the lock: only node 0 still has it.
        let mut outcome = None;
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            let attempt = match holds {
                Holds::Permit => rival.semaphore("job", 1).try_acquire().await,
                _ => rival.try_lock("job").await,
            };
            match attempt {
                Ok(second) => {
                    outcome = Some(Ok(second));
                    break;
                }
                Err(e) if !quarantined(&e).is_empty() => {
                    outcome = Some(Err(e));
                    break;
                }
                // The first request may meet the old, broken connection.
                Err(_) => tokio::time::sleep(20 * MS).await,
            }
        }
        assert!(
            lease.remaining() > Duration::ZERO,
            "the holder's lease is still valid"
        );
        match (guarded, outcome) {
            (true, Some(Err(e))) => {
                assert!(matches!(e, Error::NoQuorum { .. }), "{e}");
                // Node 1 at least (a brand-new node may still be in its
                // own first quarantine: uptime is in whole seconds).
                let q = quarantined(&e);
                assert!(q.iter().any(|(node, ..)| *node == 1), "{e}");
            }
            (false, Some(Ok(second))) => {
                // The overlap the quarantine prevents.
                assert!(token(&second) > token(&lease));
            }
            (guarded, other) => panic!("quarantine {guarded}, {holds:?}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn one_server_given_twice_is_refused() {
    // Five names for four servers: nodes 2-4 alone are a quorum of 5.
    let nodes = RedisNodes::start(4);
    let port = nodes.node(0).port();
    let mut urls = vec![
        format!("redis://127.0.0.1:{port}"),
        format!("redis://localhost:{port}"),
    ];
    urls.extend(nodes.urls()[1..].iter().cloned());
    let locker = build_locker(urls.clone(), Duration::from_secs(5), None);
    match locker.admin().check_servers().await {
        Err(Error::SameServer { node, same_as, .. }) => {
            assert_eq!((node.index(), same_as.index()), (1, 0));
        }
        other => panic!("expected SameServer, got {other:?}"),
    }
    // Nodes 2-4 would make a quorum; it still takes no lock.
    match locker.try_lock("job").await {
        Err(e @ Error::SameServer { .. }) => {
            assert!(!e.is_retryable());
            assert!(e.to_string().contains("same Redis server"), "{e}");
        }
        other => panic!("expected SameServer, got {other:?}"),
    }
    // A Locker that meets the pair first through a lock refuses as well,
    // even when the quorum answers before the second name's reply (its
    // connection says which server it reached before anything is sent).
    for round in 0..20 {
        let fresh = locker_of(urls.clone());
        match fresh.try_lock("job").await {
            Err(Error::SameServer { .. }) => {}
            other => panic!("round {round}: a fresh Locker's first lock gave {other:?}"),
        }
        for _ in 0..5 {
            let again = fresh.try_lock("job").await;
            assert!(matches!(again, Err(Error::SameServer { .. })), "{again:?}");
        }
    }
    // A Locker whose connections already reached both names (here through
    // inspect) refuses before sending a lock request (SET or script).
    let known = locker_of(urls.clone());
    known.admin().inspect("job").await.unwrap();
    // Counted after inspect, whose look at the lock's modes is a script.
    let before = crate::support::lock_calls(nodes.node(1)).await;
    let refused = known.try_lock("job").await;
    assert!(
        matches!(refused, Err(Error::SameServer { .. })),
        "{refused:?}"
    );
    let after = crate::support::lock_calls(nodes.node(1)).await;
    assert_eq!(after, before, "no lock request was sent");
    // Nothing is left behind on the server.
    let mut con = crate::support::conn(nodes.node(0)).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("redlease:{job}")
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}

fn locker_of(urls: Vec<String>) -> Locker {
    build_locker(urls, Duration::from_secs(5), None)
}

#[tokio::test]
async fn distinct_servers_pass_the_check_and_a_down_one_is_reported() {
    let mut nodes = RedisNodes::start(3);
    let locker = locker_of(nodes.urls());
    assert_eq!(locker.admin().check_servers().await.unwrap(), []);
    nodes.node_mut(2).kill();
    let again = locker_of(nodes.urls());
    let unreachable = again.admin().check_servers().await.unwrap();
    assert_eq!(indices(unreachable.iter().map(|e| e.node())), [2]);
}

#[tokio::test]
async fn ttls_the_quarantine_does_not_cover_are_refused_before_any_io() {
    // No server listens: the checks come before any connection.
    let urls = vec!["redis://127.0.0.1:1".to_string()];
    let locker = build_locker(urls.clone(), Duration::from_secs(5), None);
    match locker.try_lock("job").ttl(Duration::from_secs(6)).await {
        Err(Error::InvalidInput {
            field: "ttl",
            reason,
            ..
        }) => {
            assert!(reason.contains("restart_quarantine"), "{reason}");
        }
        other => panic!("expected InvalidInput, got {other:?}"),
    }
    // A quarantine long enough lets the longer lock through to the network.
    let longer = build_locker(
        urls.clone(),
        Duration::from_secs(5),
        Some(Duration::from_secs(60)),
    );
    assert!(matches!(
        longer.try_lock("job").ttl(Duration::from_secs(6)).await,
        Err(Error::NoQuorum { .. })
    ));
    // A quarantine shorter than the Locker's own TTL cannot work.
    let short = Locker::builder(urls)
        .ttl(Duration::from_secs(5))
        .advanced(|a| a.restart_quarantine(Duration::from_secs(5)))
        .build();
    match short {
        Err(Error::InvalidInput { field, .. }) => assert_eq!(field, "advanced.restart_quarantine"),
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

/// A server whose wall clock steps forward expires its keys early, like a
/// restart that lost them. A Locker that talked to it before the jump sees
/// its clock run ahead (the new key's expiry, set by that clock) and counts
/// no "yes" from it; with the guard off
/// (the control), a second client takes the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_clock_jumped_casts_no_vote() {
    use redlease_testkit::{NodeConfig, RedisNode};
    for guarded in [true, false] {
        let nodes = [
            RedisNode::start(),
            RedisNode::start_with(NodeConfig::new().fake_clock()),
            RedisNode::start(),
        ];
        let urls: Vec<String> = nodes.iter().map(|n| n.url()).collect();
        let ttl = Duration::from_secs(2);
        // The quarantine off, to test the guard alone. Fencing on in the
        // control, whose overlap the tokens still order; the guarded round
        // takes its locks the default (unfenced) way.
        let build = || {
            Locker::builder(urls.clone())
                .fencing(!guarded)
                .ttl(ttl)
                .node_timeout(NODE_TIMEOUT)
                .advanced(|a| {
                    a.restart_quarantine(Duration::ZERO)
                        .clock_jump_guard(guarded)
                })
                .retry(once())
                .build()
                .unwrap()
        };
        let (holder, rival) = (build(), build());
        // The rival has met every server before the jump.
        rival
            .try_lock("other")
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        // The holder has the lock on nodes 0 and 1 only: a bare majority.
        let lease = holder.try_lock("job").await.expect("3 of 3");
        crate::support::command(&nodes[2], &["DEL", &holder.admin().key("job")]).await;

        nodes[1].jump_clock(Duration::from_secs(30));
        // The fault under test: the jump expired the holder's key on node 1.
        let key = holder.admin().key("job");
        crate::support::wait_until_gone(&nodes[1], &key, Duration::from_secs(2)).await;
        let second = rival.try_lock("job").await;
        assert!(
            lease.remaining() > Duration::ZERO,
            "the lease is still valid"
        );
        match (guarded, second) {
            (true, Err(e)) => {
                let q = quarantined(&e);
                match q[..] {
                    [(1, Quarantine::ClockJumped { ahead }, left)] => {
                        assert!(ahead > Duration::from_secs(29), "{ahead:?}");
                        assert!(left > ttl && left <= ttl + ttl / 50, "{left:?}");
                    }
                    _ => panic!("expected node 1's clock jump, got {e}"),
                }
                assert!(e.to_string().contains("clock jumped"), "{e}");
            }
            (false, Ok(second)) => {
                // The overlap the guard prevents.
                assert!(token(&second) > token(&lease));
            }
            (guarded, other) => panic!("guard {guarded}: {other:?}"),
        }
    }
}

/// `lock()` sleeps until a quarantined server votes again instead of
/// trying again and again meanwhile.
#[tokio::test]
async fn waiting_for_a_quarantined_server_does_not_poll_it() {
    let nodes = RedisNodes::start(1);
    let started = Instant::now();
    let locker = Locker::builder(nodes.urls())
        .ttl(Duration::from_secs(1))
        .build()
        .unwrap();
    let lease = locker.lock("job").wait(Duration::from_secs(10)).await;
    let took = started.elapsed();
    lease
        .expect("the quarantine is over within the wait")
        .release()
        .await
        .unwrap();
    assert!(took >= Duration::from_secs(1), "{took:?}");
    // Each refused attempt is an acquire (a plain SET: fencing is off) and
    // its undo (the key was written); at most 3 refused attempts (the
    // quarantine, and up to a second more as uptime is in whole seconds)
    // and the granted one with its release. Retrying on the policy's
    // 10-100 ms timer instead would make some 20 attempts.
    let calls = crate::support::lock_calls(nodes.node(0)).await;
    assert!(calls <= 9, "{calls} lock calls in {took:?}");
}

/// A fresh Locker that skips `check_servers()` and whose second name for
/// one server connects slowly: its first lock, decided by three distinct
/// servers before the slow name reached the server, must still be refused.
/// (Before, the lock was granted: the pair was not known yet.)
#[tokio::test]
async fn a_slow_second_name_of_one_server_is_heard_before_a_grant() {
    use redlease_testkit::proxy::{Mode, Proxy};
    let nodes = RedisNodes::start(3);
    let slow = Proxy::start(&nodes.node(2).addr());
    slow.set(Mode::Delay {
        fixed: 50 * MS,
        jitter: Duration::ZERO,
    });
    let mut urls = nodes.urls();
    urls.push(slow.url());
    for round in 0..3 {
        let locker = Locker::builder(urls.clone())
            .advanced(|a| a.restart_quarantine(Duration::ZERO))
            .ttl(Duration::from_secs(30))
            .build()
            .unwrap();
        match locker.try_lock("job").await {
            Err(Error::SameServer { .. }) => {}
            other => panic!("round {round}: expected SameServer, got {other:?}"),
        }
    }
}

/// What `inspect` says of quarantined nodes: each node's quarantine, as
/// an acquire would meet it, and no "free" verdict while the quarantined
/// nodes leave no quorum of voters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_quarantined_nodes_and_no_takeable_lock() {
    use redlease::{NodeQuarantine, Verdict};
    let mut nodes = RedisNodes::start(3);
    let started = Instant::now();
    let ttl = Duration::from_secs(4);
    let quarantine = ttl + ttl / 100 + 2 * MS; // the default: TTL plus drift
    let locker = build_locker(nodes.urls(), ttl, None);

    // Brand-new servers: every node quarantined, so no lock can be taken.
    let status = locker.admin().inspect("job").await.unwrap();
    let mut lefts = Vec::new();
    for (node, answer) in &status.nodes {
        let state = answer.as_ref().unwrap();
        match state.quarantine {
            Some(NodeQuarantine {
                cause: Quarantine::Restarted { up },
                left,
                ..
            }) => {
                assert_eq!(up + left, quarantine, "{node}");
                lefts.push(left);
            }
            other => panic!("{node}: expected its restart quarantine, got {other:?}"),
        }
    }
    lefts.sort();
    match status.verdict() {
        Verdict::Quarantined {
            takeable_in,
            quarantined: 3,
            leftover_on: 0,
        } => assert_eq!(takeable_in, lefts[1], "two of three must vote"),
        other => panic!("expected a quarantined verdict, got {other:?}"),
    }
    // An acquire meets the same: the wait it is told of is the inspected
    // one, less the time since.
    let e = locker.try_lock("job").await.unwrap_err();
    let wait = e.quarantine_wait().expect("refused for the quarantine");
    assert!(
        wait <= lefts[1] && wait + Duration::from_secs(1) > lefts[1],
        "{wait:?} {e}"
    );

    until_it_votes(&locker, started, 3 * quarantine).await;
    let status = locker.admin().inspect("job").await.unwrap();
    for (node, answer) in &status.nodes {
        assert_eq!(answer.as_ref().unwrap().quarantine, None, "{node}");
    }
    assert_eq!(status.verdict(), Verdict::Free { leftover_on: 0 });

    // One node restarted: shown quarantined, but two voters are a quorum.
    let restarted = Instant::now();
    restart_empty(&mut nodes, 1);
    let status = loop {
        let status = locker.admin().inspect("job").await.unwrap();
        // The first request may meet the old, broken connection.
        if status.nodes[1].1.is_ok() || restarted.elapsed() > 2 * ttl {
            break status;
        }
        tokio::time::sleep(20 * MS).await;
    };
    let one = status.nodes[1].1.as_ref().expect("node 1 answers again");
    match one.quarantine {
        Some(NodeQuarantine {
            cause: Quarantine::Restarted { up },
            left,
            ..
        }) => {
            assert!(up <= restarted.elapsed(), "up {up:?}");
            assert_eq!(up + left, quarantine);
        }
        other => panic!("expected node 1 in its restart quarantine, got {other:?}"),
    }
    for i in [0, 2] {
        assert_eq!(status.nodes[i].1.as_ref().unwrap().quarantine, None);
    }
    assert_eq!(status.verdict(), Verdict::Free { leftover_on: 0 });
}
