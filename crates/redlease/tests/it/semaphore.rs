//! Semaphores on real servers: N holders at once and the next one
//! waits, a crashed holder's permit back after its TTL and not before,
//! the quorum a permit needs over several nodes, a size mismatch refused.

use std::time::{Duration, Instant};

use redlease::{Error, LockMode};
use redlease_testkit::RedisNodes;

use crate::support::*;

#[tokio::test]
async fn n_holders_at_once_and_the_next_waits_for_a_release() {
    let nodes = RedisNodes::start(1);
    let (a, b) = (locker(&nodes), locker(&nodes));
    let sem = a.semaphore("jobs", 3);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(sem.try_acquire().await.unwrap());
    }
    assert_eq!(held[0].mode(), LockMode::Permit);
    let full = b.semaphore("jobs", 3).try_acquire().await;
    assert!(matches!(full, Err(Error::Taken { .. })), "{full:?}");
    let status = a.admin().inspect("jobs").await.unwrap();
    assert_eq!(status.mode(), Some(LockMode::Permit));
    assert_eq!((status.permits(), status.readers()), (Some(3), 3));
    // The fourth waits, and a release lets it in at once (its retry
    // timer would be the first permit's expiry, 5 s away).
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            let permit = b.semaphore("jobs", 3).acquire().await;
            (Instant::now(), permit)
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished());
    let released = Instant::now();
    held.pop().unwrap().release().await.unwrap();
    let (taken, fourth) = waiter.await.unwrap();
    let fourth = fourth.unwrap();
    assert!(
        taken - released < Duration::from_secs(2),
        "woken by the release: {:?}",
        taken - released
    );
    // A lock of the same name waits too: the name is a semaphore now.
    let lock = b.try_lock("jobs").await;
    assert!(matches!(lock, Err(Error::Taken { .. })), "{lock:?}");
    fourth.release().await.unwrap();
    for permit in held {
        permit.release().await.unwrap();
    }
    assert_eq!(dbsize(nodes.node(0)).await, 0, "nothing left behind");
}

#[tokio::test]
async fn a_crashed_holder_s_permit_comes_back_after_its_ttl_and_not_before() {
    let nodes = RedisNodes::start(1);
    let locker = locker(&nodes);
    let sem = locker.semaphore("slot", 1);
    let ttl = Duration::from_millis(800);
    let crashed = sem.try_acquire().ttl(ttl).await.unwrap();
    let taken = Instant::now();
    std::mem::forget(crashed); // never released, never renewed
                               // Bounded: the permit comes back within twice its TTL.
    let back = loop {
        match sem.try_acquire().await {
            Ok(permit) => break (Instant::now(), permit),
            Err(Error::Taken { .. }) if taken.elapsed() < 2 * ttl => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("{e}"),
        }
    };
    let after = back.0 - taken;
    assert!(after >= ttl - Duration::from_millis(50), "{after:?}");
    back.1.release().await.unwrap();
}

#[tokio::test]
async fn the_size_of_a_held_semaphore_is_fixed() {
    let nodes = RedisNodes::start(1);
    let locker = locker(&nodes);
    let permit = locker.semaphore("pool", 2).try_acquire().await.unwrap();
    let other = locker.semaphore("pool", 3).acquire().await;
    match other {
        Err(e @ Error::PermitsDiffer { .. }) => {
            let Error::PermitsDiffer { asked, held, .. } = e else {
                unreachable!()
            };
            assert_eq!((asked, held), (3, 2));
            assert!(!e.to_string().contains("  "), "{e}");
        }
        other => panic!("{other:?}"),
    }
    permit.release().await.unwrap();
    // Free again: any size.
    let permit = locker.semaphore("pool", 3).try_acquire().await.unwrap();
    permit.release().await.unwrap();
}

#[tokio::test]
async fn settings_that_cannot_work_are_refused_before_any_io() {
    let nodes = RedisNodes::start(3);
    let locker = locker(&nodes);
    let none = locker.semaphore("x", 0).try_acquire().await;
    assert!(matches!(none, Err(Error::InvalidInput { .. })), "{none:?}");
    let sem = locker.semaphore("x", 2);
    assert_eq!((sem.quorum(), sem.tolerates()), (3, 0));
    match sem.acquire().await {
        Err(Error::InvalidInput { field, reason, .. }) => {
            assert_eq!(field, "permits");
            assert!(reason.contains("allow_no_failures"), "{reason}");
            // An odd number, as doctor advises for every lock.
            assert!(reason.contains("Use 5 nodes"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(dbsize(nodes.node(0)).await, 0, "nothing was written");
    let accepted = sem.allow_no_failures().try_acquire().await.unwrap();
    accepted.release().await.unwrap();
    let one = locker.semaphore("y", 1);
    assert_eq!((one.quorum(), one.tolerates()), (2, 1));
}

/// 5 nodes and 2 permits: a permit needs 4. One node down still takes
/// permits; two down take none.
#[tokio::test]
async fn over_five_nodes_a_permit_needs_four() {
    let mut nodes = RedisNodes::start(5);
    let locker = fenced_locker(&nodes);
    let sem = locker.semaphore("deploys", 2);
    assert_eq!(sem.quorum(), 4);
    let first = sem.try_acquire().await.unwrap();
    nodes.node_mut(4).kill();
    let second = sem.try_acquire().keep_alive().await.unwrap();
    assert!(token(&second) > token(&first), "tokens only go up");
    let third = sem.try_acquire().await;
    assert!(third.is_err(), "two permits: {third:?}");
    first.release().await.unwrap();
    nodes.node_mut(3).kill();
    let fourth = sem.try_acquire().await;
    assert!(
        matches!(fourth, Err(Error::NoQuorum { .. })),
        "3 of 5 is not 4: {fourth:?}"
    );
    // Given back on the 3 nodes up: not on the 4 a permit counts on.
    let release = second.release().await;
    assert!(
        matches!(release, Err(Error::NoQuorum { quorum: 4, .. })),
        "{release:?}"
    );
}

#[tokio::test]
async fn kept_alive_permits_are_renewed_beside_locks_and_readers() {
    let nodes = RedisNodes::start(1);
    let locker = locker_with_timeout(&nodes, Duration::from_millis(200));
    let ttl = Duration::from_millis(600);
    let permit = locker
        .semaphore("pool", 2)
        .acquire()
        .ttl(ttl)
        .keep_alive()
        .await
        .unwrap();
    let small = locker
        .semaphore("other-pool", 5)
        .acquire()
        .ttl(ttl)
        .keep_alive()
        .await
        .unwrap();
    let reader = locker.read_lock("doc").ttl(ttl).keep_alive().await.unwrap();
    let writer = locker.lock("job").ttl(ttl).keep_alive().await.unwrap();
    tokio::time::sleep(4 * ttl).await;
    for lease in [&permit, &small, &reader, &writer] {
        assert!(!lease.is_lost(), "{:?}", lease.lost_reason());
    }
    let status = locker.admin().inspect("pool").await.unwrap();
    assert_eq!((status.permits(), status.readers()), (Some(2), 1));
    let mut permit = permit;
    permit.extend(Duration::from_secs(2)).await.unwrap();
    for lease in [permit, small, reader, writer] {
        lease.release().await.unwrap();
    }
    assert_eq!(dbsize(nodes.node(0)).await, 0);
}

#[tokio::test]
async fn force_release_frees_every_permit() {
    let nodes = RedisNodes::start(1);
    let locker = locker(&nodes);
    let sem = locker.semaphore("pool", 2);
    let a = sem.try_acquire().await.unwrap();
    let b = sem.try_acquire().await.unwrap();
    locker.admin().force_release("pool").await.unwrap();
    let c = sem.try_acquire().await.unwrap();
    let d = sem.try_acquire().await.unwrap();
    assert!(matches!(a.release().await, Err(Error::NotHeld { .. })));
    drop(b);
    c.release().await.unwrap();
    d.release().await.unwrap();
}

/// Why a permit needs more than a majority: 3 nodes, 2 permits, each
/// taken while one node is down (durable nodes, restarted with their
/// data). Counted at a majority (the unsafe knob of the soak's control),
/// three holders hold at once, each on 2 of 3 nodes; at the permit
/// quorum (3 of 3) none is taken while a node is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_is_not_enough_beyond_one_permit() {
    use redlease_testkit::NodeConfig;
    for majority in [true, false] {
        let durable = NodeConfig::new()
            .arg("appendonly", "yes")
            .arg("appendfsync", "always");
        let mut nodes = RedisNodes::start_with(3, durable);
        let locker = locker_with_timeout(&nodes, Duration::from_millis(200));
        let sem = match majority {
            true => locker.semaphore("pool", 2).unsafe_majority(),
            false => locker.semaphore("pool", 2).allow_no_failures(),
        };
        let mut holders = Vec::new();
        for down in [2, 0, 1] {
            tokio::task::block_in_place(|| nodes.node_mut(down).kill());
            let permit = sem.try_acquire().ttl(Duration::from_secs(10)).await;
            tokio::task::block_in_place(|| nodes.node_mut(down).restart());
            match permit {
                Ok(permit) => holders.push(permit),
                Err(e) => {
                    assert!(!majority, "{e}");
                    assert!(matches!(e, Error::NoQuorum { quorum: 3, .. }), "{e}");
                }
            }
            // Until the Locker reconnects to the restarted node (bounded).
            let deadline = Instant::now() + Duration::from_secs(5);
            while locker.admin().inspect("pool").await.unwrap().nodes[down]
                .1
                .is_err()
            {
                assert!(Instant::now() < deadline, "node {down} never came back");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let valid = holders.iter().filter(|p| !p.remaining().is_zero()).count();
        match majority {
            true => assert_eq!(valid, 3, "three holders of two permits"),
            false => assert_eq!(valid, 0),
        }
        for permit in holders {
            let _ = permit.release().await;
        }
    }
}
