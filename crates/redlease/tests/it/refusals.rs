//! What a refused acquire, a wait that gave up and a release that fell
//! short say: who holds the lock (a writer, readers, a waiting writer, a
//! semaphore's permits, a lease of the same Locker), why the wait ended
//! (the restart quarantine named), and how many nodes a release knows
//! free. Real servers; the release cases cut nodes off with the proxy.

use std::time::{Duration, Instant};

use redlease::{Error, HeldBy, LockMode, Locker};
use redlease_testkit::proxy::{Mode, Proxy};
use redlease_testkit::RedisNodes;

use crate::support::*;

/// Every node of `e` (a `Taken`) refused with `by`.
fn refused_by(e: &Error, by: HeldBy) -> bool {
    match e {
        Error::Taken { held_on, .. } => !held_on.is_empty() && held_on.iter().all(|h| h.by == by),
        _ => false,
    }
}

#[tokio::test]
async fn a_full_semaphore_says_its_permits_are_held() {
    let nodes = RedisNodes::start(1);
    let (a, b) = (locker(&nodes), locker(&nodes));
    let mut permits = Vec::new();
    for _ in 0..3 {
        permits.push(a.semaphore("encoders", 3).try_acquire().await.unwrap());
    }
    let e = b.semaphore("encoders", 3).try_acquire().await.unwrap_err();
    assert!(refused_by(&e, HeldBy::Semaphore { permits: 3 }), "{e:?}");
    assert!(matches!(
        e,
        Error::Taken {
            mode: LockMode::Permit,
            ..
        }
    ));
    let text = e.to_string();
    assert!(
        text.starts_with("all 3 permits of semaphore \"encoders\" are held on 1 of 1 nodes"),
        "{text}"
    );
    // A lock, or a read lock, of the semaphore's name: it is no lock.
    for e in [
        b.try_lock("encoders").await.unwrap_err(),
        b.try_read_lock("encoders").await.unwrap_err(),
    ] {
        assert!(refused_by(&e, HeldBy::Semaphore { permits: 3 }), "{e:?}");
        assert!(
            e.to_string()
                .contains("\"encoders\" is a semaphore of 3 permits, not a lock"),
            "{e}"
        );
    }
    for permit in permits {
        permit.release().await.unwrap();
    }
    // And a permit of a locked name: it is no semaphore.
    let lock = a.try_lock("encoders").await.unwrap();
    let e = b.semaphore("encoders", 3).try_acquire().await.unwrap_err();
    assert!(refused_by(&e, HeldBy::Owner), "{e:?}");
    assert!(
        e.to_string()
            .contains("\"encoders\" is held as a lock, not by a semaphore"),
        "{e}"
    );
    lock.release().await.unwrap();
}

#[tokio::test]
async fn readers_and_a_waiting_writer_are_named() {
    let nodes = RedisNodes::start(3);
    let (a, b, c) = (locker(&nodes), locker(&nodes), locker(&nodes));
    let reader = a.try_read_lock("catalog").await.unwrap();
    let e = b.try_lock("catalog").await.unwrap_err();
    assert!(refused_by(&e, HeldBy::Readers), "{e:?}");
    assert!(e
        .to_string()
        .contains("lock \"catalog\" is held by readers"));
    // A writer waits (in the queue once readers refused it): a new
    // reader is told a writer waits, not that a writer holds the lock.
    let writer = tokio::spawn(async move {
        let lease = b.lock("catalog").wait(Duration::from_secs(20)).await;
        lease.map(drop)
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let e = loop {
        match c.try_read_lock("catalog").await {
            Err(e) if refused_by(&e, HeldBy::Queued) => break e,
            Ok(lease) => lease.release().await.unwrap(),
            Err(e) => panic!("{e}"),
        }
        assert!(
            Instant::now() < deadline,
            "the writer never took its place in the queue"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        e.to_string()
            .contains("others who came first wait in line for lock \"catalog\""),
        "{e}"
    );
    reader.release().await.unwrap();
    writer.await.unwrap().unwrap();
}

/// Locks are not reentrant: a second lock of a name a lease of the same
/// Locker holds waits for itself, and its error says so; another
/// Locker's does not.
#[tokio::test]
async fn a_lock_held_by_the_same_locker_says_so() {
    let nodes = RedisNodes::start(1);
    let (a, b) = (locker(&nodes), locker(&nodes));
    let held = a.lock("report").await.unwrap();
    let tried = a.try_lock("report").await.unwrap_err();
    assert!(
        matches!(
            tried,
            Error::Taken {
                by_this_locker: true,
                ..
            }
        ),
        "{tried:?}"
    );
    assert!(tried.to_string().contains("not reentrant"), "{tried}");
    let waited = a
        .lock("report")
        .wait(Duration::from_millis(300))
        .await
        .unwrap_err();
    match &waited {
        Error::WaitTimeout { last, .. } => {
            assert!(matches!(
                **last,
                Error::Taken {
                    by_this_locker: true,
                    ..
                }
            ))
        }
        other => panic!("{other:?}"),
    }
    assert!(waited.to_string().contains("not reentrant"), "{waited}");
    let other = b.try_lock("report").await.unwrap_err();
    assert!(
        matches!(
            other,
            Error::Taken {
                by_this_locker: false,
                ..
            }
        ),
        "{other:?}"
    );
    assert!(!other.to_string().contains("reentrant"), "{other}");
    held.release().await.unwrap();
    // Released: a lease that is gone is not "held here".
    let again = a.try_lock("report").await.unwrap();
    again.release().await.unwrap();
}

/// A wait that ends while the servers are in their restart quarantine
/// names the quarantine, how long it has left, and that it follows the
/// TTL.
#[tokio::test]
async fn a_wait_in_the_restart_quarantine_names_it() {
    let nodes = RedisNodes::start(1);
    let locker = Locker::builder(nodes.urls())
        .ttl(Duration::from_secs(60))
        .build()
        .unwrap();
    let e = locker
        .lock("report")
        .wait(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::WaitTimeout { .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("restart quarantine"), "{text}");
    assert!(text.contains("which is the TTL unless"), "{text}");
}

/// The nodes of a lock behind proxies, and a Locker over the proxies.
struct Cut {
    nodes: RedisNodes,
    proxies: Vec<Proxy>,
    locker: Locker,
}

fn behind_proxies(n: usize) -> Cut {
    let nodes = RedisNodes::start(n);
    let proxies: Vec<Proxy> = nodes.iter().map(|nd| Proxy::start(&nd.addr())).collect();
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let locker = Locker::builder(urls)
        .advanced(|a| a.restart_quarantine(Duration::ZERO))
        .ttl(Duration::from_secs(10))
        .node_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    Cut {
        nodes,
        proxies,
        locker,
    }
}

/// A release that reached no quorum says how many nodes are known free
/// of the lease (released now, or our token already gone), and whether
/// the silent ones could still make a quorum.
#[tokio::test]
async fn a_release_short_of_a_quorum_counts_the_nodes_known_free() {
    for (n, gone, cut, may_hold) in [(3, 1, 1, false), (5, 1, 3, true)] {
        let c = behind_proxies(n);
        let lease = c.locker.lock("job").await.unwrap();
        let key = c.locker.admin().key("job");
        for i in 0..gone {
            command(c.nodes.node(i), &["DEL", &key]).await;
        }
        for proxy in &c.proxies[n - cut..] {
            proxy.set(Mode::Blackhole);
        }
        let e = lease.release().await.unwrap_err();
        assert!(
            matches!(
                e,
                Error::NoQuorum {
                    op: redlease::Op::Release,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(e.may_still_be_held(), may_hold, "{e}");
        let free = n - cut;
        let text = e.to_string();
        assert!(
            text.contains(&format!("{free} of {n} nodes are known free of it")),
            "{text}"
        );
        match may_hold {
            false => assert!(text.contains("so no quorum holds it any more"), "{text}"),
            true => assert!(
                text.contains("the others may hold it until it expires"),
                "{text}"
            ),
        }
        for proxy in &c.proxies {
            proxy.set(Mode::Pass);
        }
    }
}
