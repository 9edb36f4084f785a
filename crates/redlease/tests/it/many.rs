//! Several locks at once (`lock_all`) on real servers: all or none, no
//! deadlock between overlapping sets, woken by any release, lost as a
//! whole, partial acquisitions undone, names across cluster shards.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlease::Error;
use redlease_testkit::cluster::RedisCluster;
use redlease_testkit::RedisNodes;

use crate::support::*;

#[tokio::test]
async fn all_or_none_with_a_token_per_name() {
    let nodes = RedisNodes::start(1);
    let locker = fenced_locker(&nodes);
    let held = locker.lock("b").await.unwrap();
    let none = locker.try_lock_all(["a", "b", "c"]).await;
    assert!(matches!(none, Err(Error::Taken { .. })), "{none:?}");
    // Nothing of it was taken: a and c are free.
    for name in ["a", "c"] {
        assert_eq!(get(nodes.node(0), &locker.admin().key(name)).await, None);
    }
    let held_token = token(&held);
    held.release().await.unwrap();
    let all = locker.try_lock_all(["c", "a", "b", "a"]).await.unwrap();
    assert_eq!(all.resources().collect::<Vec<_>>(), ["a", "b", "c"]);
    let tokens: Vec<u64> = ["a", "b", "c"]
        .iter()
        .map(|n| all.fencing_token_of(n).unwrap())
        .collect();
    assert!(tokens[1] > held_token, "b's token went up: {tokens:?}");
    assert_eq!(all.fencing_token_of("d"), None);
    assert!(locker.try_lock("c").await.is_err());
    all.release().await.unwrap();
    assert_eq!(dbsize(nodes.node(0)).await, 3, "only the fencing counters");
    let empty = locker.lock_all(Vec::<String>::new()).await;
    assert!(
        matches!(empty, Err(Error::InvalidInput { .. })),
        "{empty:?}"
    );
}

/// Two callers lock {a, b} and {b, a} in a loop: neither ever holds while
/// the other does, and both finish (no deadlock, no livelock).
/// Names whose keys sort the other way round ("p{ab}" before "p{a}")
/// are taken in the names' order, and a handle of them reads back.
#[tokio::test]
async fn names_that_prefix_each_other_are_taken_in_order() {
    let nodes = RedisNodes::start(1);
    let locker = fenced_locker(&nodes);
    let all = locker.try_lock_all(["ab", "a"]).await.unwrap();
    assert_eq!(all.resources().collect::<Vec<_>>(), ["a", "ab"]);
    assert!(locker.try_lock_all(["a", "ab"]).await.is_err());
    let handle = all.export();
    let other = fenced_locker(&nodes);
    let adopted = other.adopt(&handle).await.unwrap();
    assert_eq!(adopted.resources().collect::<Vec<_>>(), ["a", "ab"]);
    adopted.release().await.unwrap();
    let again = locker.lock_all(["a", "ab"]).await.unwrap();
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_sets_never_deadlock_or_overlap() {
    let nodes = RedisNodes::start(3);
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for names in [["a", "b"], ["b", "a"]] {
        let locker = locker(&nodes);
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                let lease = locker
                    .lock_all(names)
                    .wait(Duration::from_secs(10))
                    .await
                    .unwrap();
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "overlap");
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                lease.release().await.unwrap();
            }
        }));
    }
    let deadline = Duration::from_secs(60);
    for task in tasks {
        tokio::time::timeout(deadline, task).await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn a_waiter_is_woken_by_the_release_of_any_name() {
    let nodes = RedisNodes::start(1);
    let (holder, waiter) = (locker(&nodes), locker(&nodes));
    // Its retry timer would be the holder's expiry, 5 s away.
    let held = holder.lock("y").await.unwrap();
    let waiting = tokio::spawn(async move {
        let lease = waiter.lock_all(["x", "y", "z"]).await;
        (Instant::now(), lease, waiter)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished());
    let released = Instant::now();
    held.release().await.unwrap();
    let (taken, lease, _waiter) = waiting.await.unwrap();
    assert!(
        taken - released < Duration::from_secs(2),
        "woken by the release: {:?}",
        taken - released
    );
    lease.unwrap().release().await.unwrap();
}

#[tokio::test]
async fn a_lost_name_loses_the_whole_lease() {
    let nodes = RedisNodes::start(1);
    let locker = locker_with_timeout(&nodes, Duration::from_millis(200));
    let ttl = Duration::from_millis(600);
    let lease = locker
        .lock_all(["p", "q"])
        .ttl(ttl)
        .keep_alive()
        .await
        .unwrap();
    tokio::time::sleep(3 * ttl).await;
    assert!(!lease.is_lost(), "renewed: {:?}", lease.lost_reason());
    // One name taken away behind its back.
    command(nodes.node(0), &["DEL", &locker.admin().key("q")]).await;
    let lost = tokio::time::timeout(2 * ttl, lease.lost()).await;
    assert!(lost.is_ok(), "the lease is lost with one of its names");
    assert!(matches!(lease.release().await, Err(Error::NotHeld { .. })));
    // The name still held was given back too.
    assert_eq!(get(nodes.node(0), &locker.admin().key("p")).await, None);
}

/// Name b is held on nodes 1 and 2: node 0 grants the whole set, the
/// quorum does not, and node 0 is cleaned.
#[tokio::test]
async fn a_partial_acquisition_is_undone_on_every_node() {
    let nodes = RedisNodes::start(3);
    let locker = locker(&nodes);
    let b = locker.admin().key("b");
    for i in [1, 2] {
        set_px(nodes.node(i), &b, "someone-else", 10_000).await;
    }
    let refused = locker.try_lock_all(["a", "b"]).await;
    assert!(matches!(refused, Err(Error::Taken { .. })), "{refused:?}");
    locker.admin().wait_for_background().await;
    assert_eq!(dbsize(nodes.node(0)).await, 0, "node 0's grant was undone");
    for i in [1, 2] {
        assert_eq!(
            get(nodes.node(i), &b).await.as_deref(),
            Some("someone-else")
        );
        assert_eq!(get(nodes.node(i), &locker.admin().key("a")).await, None);
    }
}

/// On a cluster, names on different shards: taken together, renewed and
/// released slot by slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_across_cluster_shards() {
    let cluster = RedisCluster::start(3);
    let url = crate::cluster::cluster_url(&cluster);
    let build = || {
        redlease::Locker::builder([url.as_str()])
            .advanced(|a| a.restart_quarantine(Duration::ZERO))
            .ttl(Duration::from_secs(1))
            .node_timeout(NODE_TIMEOUT)
            .connect_timeout(NODE_TIMEOUT)
            .fencing(true)
            .build()
            .unwrap()
    };
    let (locker, other) = (build(), build());
    // Names that spread over the slots (and so, most likely, the shards).
    let names: Vec<String> = (0..6).map(|i| format!("shard-name-{i}")).collect();
    let lease = locker.lock_all(&names).keep_alive().await.unwrap();
    for name in &names {
        assert!(other.try_lock(name.as_str()).await.is_err(), "{name}");
        assert!(lease.fencing_token_of(name).is_some());
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!lease.is_lost(), "{:?}", lease.lost_reason());
    let partial = other
        .try_lock_all([&names[0], &"elsewhere".to_string()])
        .await;
    assert!(partial.is_err());
    lease.release().await.unwrap();
    let again = other.try_lock_all(&names).await.unwrap();
    again.release().await.unwrap();
    other.admin().wait_for_background().await;
    assert!(other.try_lock("elsewhere").await.is_ok(), "no leftover");
    // Some names read, on other shards: shared with readers, renewed.
    let mixed = locker
        .lock(names[0].as_str())
        .and_read(&names[1..4])
        .keep_alive()
        .await
        .unwrap();
    let reader = other.try_read_lock(names[2].as_str()).await.unwrap();
    assert!(other.try_lock(names[3].as_str()).await.is_err());
    assert!(other.try_read_lock(names[0].as_str()).await.is_err());
    reader.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!mixed.is_lost(), "{:?}", mixed.lost_reason());
    mixed.release().await.unwrap();
    let again = other.try_lock_all(&names).await.unwrap();
    again.release().await.unwrap();
}

/// A lease handed to another Locker (another process, say) by its handle:
/// adopted, extended, kept alive and released there, its fencing tokens
/// kept; a stale handle refused, never silently accepted.
#[tokio::test]
async fn a_handle_carries_a_lease_to_another_locker() {
    let nodes = RedisNodes::start(3);
    let (scheduler, worker) = (fenced_locker(&nodes), fenced_locker(&nodes));
    let lease = scheduler.lock("job").await.unwrap();
    let fence = token(&lease);
    let handle = lease.export();
    assert!(!handle.contains("job"), "names are encoded: {handle}");
    let mut adopted = worker.adopt(&handle).await.unwrap();
    assert_eq!(adopted.resource(), "job");
    assert_eq!(adopted.fencing_token(), Some(fence));
    adopted.extend(Duration::from_secs(8)).await.unwrap();
    assert!(scheduler.try_lock("job").await.is_err());
    adopted.release().await.unwrap();
    // The lease is gone: its handle is refused, by adopt and by release.
    let stale = worker.adopt(&handle).await;
    assert!(matches!(stale, Err(Error::NotHeld { .. })), "{stale:?}");
    let stale = worker.release_handle(&handle).await;
    assert!(matches!(stale, Err(Error::NotHeld { .. })), "{stale:?}");
    // Not a handle at all, or one of another key prefix: before any I/O.
    let junk = worker.adopt("rlh1.x.nonsense").await;
    assert!(matches!(junk, Err(Error::InvalidInput { .. })), "{junk:?}");
    let other_prefix = redlease::Locker::builder(nodes.urls())
        .key_prefix("elsewhere:")
        .build()
        .unwrap();
    let handle = scheduler.lock("job").await.unwrap().export();
    let refused = other_prefix.adopt(&handle).await;
    assert!(
        matches!(refused, Err(Error::InvalidInput { .. })),
        "{refused:?}"
    );
    worker.release_handle(&handle).await.unwrap();
    assert!(scheduler.try_lock("job").await.is_ok());
}

#[tokio::test]
async fn handles_of_every_kind_of_lease() {
    let nodes = RedisNodes::start(1);
    let (a, b) = (fenced_locker(&nodes), fenced_locker(&nodes));
    // Several names at once.
    let all = a.lock_all(["x", "y"]).await.unwrap();
    let tokens = (all.fencing_token_of("x"), all.fencing_token_of("y"));
    let adopted = b.adopt(&all.export()).await.unwrap();
    assert_eq!(adopted.resources().collect::<Vec<_>>(), ["x", "y"]);
    assert_eq!(
        (adopted.fencing_token_of("x"), adopted.fencing_token_of("y")),
        tokens
    );
    let adopted = adopted.keep_alive().unwrap();
    assert!(a.try_lock("y").await.is_err());
    adopted.release().await.unwrap();
    // A read hold and a permit keep their mode.
    let reader = a.read_lock("doc").await.unwrap().export();
    let reader = b.adopt(&reader).await.unwrap();
    assert_eq!(reader.mode(), redlease::LockMode::Shared);
    reader.release().await.unwrap();
    let permit = a.semaphore("pool", 2).acquire().await.unwrap().export();
    let permit = b.adopt(&permit).await.unwrap();
    assert_eq!(permit.mode(), redlease::LockMode::Permit);
    permit.release().await.unwrap();
    assert_eq!(
        dbsize(nodes.node(0)).await,
        4,
        "only the fencing counters: x, y, doc (read), pool"
    );
}

/// Two tasks of another Locker keep one of {a, b} taken at every moment:
/// each holds its name 80 ms and takes it again at once, b's holds half a
/// hold after a's. A multi-lock that only retried would never find both
/// free; its reservations hand it the names one after the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_of_single_lockers_does_not_starve_a_multi_lock() {
    stream_of_single_lockers(RedisNodes::start(1)).await;
}

/// The same over a quorum of 3 nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_of_single_lockers_does_not_starve_a_multi_lock_on_3_nodes() {
    stream_of_single_lockers(RedisNodes::start(3)).await;
}

async fn stream_of_single_lockers(nodes: RedisNodes) {
    let singles = locker(&nodes);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let taken = Arc::new(AtomicUsize::new(0));
    let hold = Duration::from_millis(80);
    let mut stream = Vec::new();
    for (name, offset) in [("a", Duration::ZERO), ("b", hold / 2)] {
        let (singles, stop, taken) = (singles.clone(), stop.clone(), taken.clone());
        stream.push(tokio::spawn(async move {
            tokio::time::sleep(offset).await;
            // Bounded: 200 holds of 80 ms, or until told to stop.
            for _ in 0..200 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let lease = singles
                    .lock(name)
                    .wait(Duration::from_secs(10))
                    .await
                    .unwrap();
                taken.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(hold).await;
                lease.release().await.unwrap();
            }
        }));
    }
    tokio::time::sleep(4 * hold).await;
    let multi = locker(&nodes);
    let before = taken.load(Ordering::SeqCst);
    // It reserves once it has waited its TTL.
    let lease = multi
        .lock_all(["a", "b"])
        .ttl(Duration::from_secs(1))
        .wait(Duration::from_secs(8))
        .await
        .expect("the multi-lock got in");
    assert!(before >= 3, "the stream ran before ({before} holds)");
    lease.release().await.unwrap();
    // And the stream goes on after it.
    let after = taken.load(Ordering::SeqCst);
    for _ in 0..100 {
        if taken.load(Ordering::SeqCst) >= after + 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::SeqCst);
    assert!(
        taken.load(Ordering::SeqCst) >= after + 2,
        "the stream resumed"
    );
    for task in stream {
        tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .unwrap()
            .unwrap();
    }
    multi.admin().wait_for_background().await;
    for i in 0..nodes.len() {
        assert_eq!(dbsize(nodes.node(i)).await, 0, "no reservation is left");
    }
}

/// A caller that nests its locks in sorted order (a, then b) while a
/// multi-lock of {a, b} waits: neither waits on the other for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_single_locks_in_sorted_order_pass_a_waiting_multi_lock() {
    let nodes = RedisNodes::start(3);
    let (nester, multi) = (locker(&nodes), locker(&nodes));
    let a = nester.lock("a").await.unwrap();
    let waiting = tokio::spawn(async move {
        let lease = multi
            .lock_all(["a", "b"])
            .wait(Duration::from_secs(10))
            .await;
        (lease, multi)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The waiter claims a and reserves nothing after it: b is free.
    let b = nester
        .lock("b")
        .wait(Duration::from_secs(2))
        .await
        .expect("b is not reserved behind a held a");
    b.release().await.unwrap();
    a.release().await.unwrap();
    let (lease, _multi) = tokio::time::timeout(Duration::from_secs(12), waiting)
        .await
        .unwrap()
        .unwrap();
    lease.unwrap().release().await.unwrap();
}

/// A multi-lock that gives up leaves no reservation or claim behind: the
/// names are free to single lockers at once, and b's release is not
/// handed to anyone.
#[tokio::test]
async fn a_multi_lock_that_gives_up_gives_its_reservations_back() {
    let nodes = RedisNodes::start(1);
    let (holder, multi) = (locker(&nodes), locker(&nodes));
    let b = holder.lock("b").await.unwrap();
    let waiting = tokio::spawn({
        let multi = multi.clone();
        async move {
            // It reserves once it has waited its TTL (0.6 s), from its
            // next attempt on (0.9 s).
            multi
                .lock_all(["a", "b"])
                .ttl(Duration::from_millis(600))
                .wait(Duration::from_millis(1800))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let status = holder.admin().inspect("a").await.unwrap();
    assert!(status.reserved(), "a is reserved meanwhile: {status:?}");
    let gave_up = waiting.await.unwrap();
    assert!(
        matches!(gave_up, Err(Error::WaitTimeout { .. })),
        "{gave_up:?}"
    );
    multi.admin().wait_for_background().await;
    assert!(!holder.admin().inspect("a").await.unwrap().reserved());
    let (a_key, b_key) = (multi.admin().key("a"), multi.admin().key("b"));
    assert_eq!(get(nodes.node(0), &a_key).await, None, "a is not reserved");
    assert_eq!(get(nodes.node(0), &format!("{b_key}:claim")).await, None);
    b.release().await.unwrap();
    assert_eq!(get(nodes.node(0), &b_key).await, None, "b went to no one");
    let both = holder.try_lock_all(["a", "b"]).await.unwrap();
    both.release().await.unwrap();
}

/// A set with names written and a name read: other readers share the read
/// name, writers wait for it; each name keeps its mode and fencing token
/// (the read one's at least the last write generation), through renewal and a
/// handle; losing the read hold loses the whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_of_written_and_read_names() {
    use redlease::LockMode;
    let nodes = RedisNodes::start(3);
    let (locker, other) = (fenced_locker(&nodes), fenced_locker(&nodes));
    let writer = other.lock("rates").await.unwrap();
    let generation = token(&writer);
    writer.release().await.unwrap();
    let ttl = Duration::from_secs(1);
    let set = locker
        .lock_all(["account:7", "account:3"])
        .and_read(["rates", "account:7"])
        .ttl(ttl)
        .keep_alive()
        .await
        .unwrap();
    assert_eq!(
        set.resources().collect::<Vec<_>>(),
        ["account:3", "account:7", "rates"]
    );
    assert_eq!(set.mode_of("rates"), Some(LockMode::Shared));
    assert_eq!(
        set.mode_of("account:7"),
        Some(LockMode::Exclusive),
        "alone wins"
    );
    // The read name's token is the largest counter of the nodes that
    // granted it: the last write's generation, or more where a node's
    // counter started later from its own clock (a brand-new server's is
    // its clock whole) and the write was decided without it.
    assert!(
        set.fencing_token_of("rates") >= Some(generation),
        "{:?} below the write generation {generation}",
        set.fencing_token_of("rates")
    );
    assert!(set.fencing_token_of("account:3").is_some_and(|t| t > 0));
    let reader = other.try_read_lock("rates").await.expect("readers share");
    assert!(other.try_lock("rates").await.is_err(), "a writer waits");
    assert!(other.try_read_lock("account:3").await.is_err());
    reader.release().await.unwrap();
    tokio::time::sleep(ttl * 5 / 2).await;
    assert!(
        !set.is_lost(),
        "renewed in both modes: {:?}",
        set.lost_reason()
    );
    // Handed over, the modes go with it.
    let handle = set.export();
    let info = redlease::HandleInfo::parse(&handle).unwrap();
    let modes = [LockMode::Exclusive, LockMode::Exclusive, LockMode::Shared];
    assert_eq!(info.modes, modes);
    let adopted = other.adopt(&handle).await.unwrap();
    assert_eq!(adopted.mode_of("rates"), Some(LockMode::Shared));
    assert!(other.try_lock("rates").await.is_err());
    adopted.release().await.unwrap();
    let free = other
        .try_lock_all(["account:3", "account:7", "rates"])
        .await;
    free.expect("all given back").release().await.unwrap();

    // The read hold taken away behind its back: the lease is lost.
    let set = locker
        .lock("a")
        .and_read(["r"])
        .ttl(ttl)
        .keep_alive()
        .await
        .unwrap();
    let readers = format!("{}:readers", locker.admin().key("r"));
    for i in 0..nodes.len() {
        command(nodes.node(i), &["DEL", &readers]).await;
    }
    let lost = tokio::time::timeout(2 * ttl, set.lost()).await;
    assert!(lost.is_ok(), "the lease is lost with its read hold");
}

/// A writer waiting for readers keeps new sets that read the name out,
/// as it keeps out new readers; and a set that wants a name alone while
/// readers hold it waits in line until the last one leaves.
#[tokio::test]
async fn sets_and_writers_wait_for_each_other_in_turn() {
    let nodes = RedisNodes::start(1);
    let (locker, other) = (locker(&nodes), locker(&nodes));
    let reader = other.read_lock("doc").await.unwrap();
    let writer = tokio::spawn({
        let other = other.clone();
        async move { other.write_lock("doc").wait(Duration::from_secs(10)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused = locker.try_lock("x").and_read(["doc"]).await;
    assert!(refused.is_err(), "behind the waiting writer: {refused:?}");
    reader.release().await.unwrap();
    let writer = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    writer.release().await.unwrap();

    // A set wanting doc alone while a stream of readers holds it.
    let first = other.read_lock("doc").await.unwrap();
    let set = tokio::spawn({
        let locker = locker.clone();
        async move {
            // Marked once it has waited its TTL (0.6 s), from its next
            // attempt on (0.9 s).
            locker
                .lock_all(["doc", "y"])
                .ttl(Duration::from_millis(600))
                .wait(Duration::from_secs(10))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let late = other.try_read_lock("doc").await;
    assert!(late.is_err(), "new readers wait behind the set: {late:?}");
    first.release().await.unwrap();
    let set = tokio::time::timeout(Duration::from_secs(5), set)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    set.release().await.unwrap();
    let permit = locker
        .semaphore("pool", 2)
        .acquire()
        .and_read(["doc"])
        .await;
    assert!(
        matches!(permit, Err(Error::InvalidInput { .. })),
        "{permit:?}"
    );
}

/// A set whose attempt took its names on too few nodes gives them back
/// keeping its turn there: the waiter behind it in line does not get
/// them. (Node 0 hands `a` to the set; nodes 1 and 2 are cut off from
/// it, so it takes both names on node 0 alone and undoes that.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_short_of_a_quorum_keeps_its_turn_where_it_took_its_names() {
    use redlease::{Locker, RetryPolicy};
    use redlease_testkit::proxy::{Mode, Proxy};
    let nodes = RedisNodes::start(3);
    let proxies: Vec<Proxy> = nodes.iter().map(|nd| Proxy::start(&nd.addr())).collect();
    let set_locker = Locker::builder(proxies.iter().map(Proxy::url).collect::<Vec<_>>())
        .advanced(|a| a.restart_quarantine(Duration::ZERO))
        .ttl(Duration::from_secs(5))
        .node_timeout(Duration::from_millis(100))
        .retry(RetryPolicy::within(Duration::from_secs(20)))
        .build()
        .unwrap();
    let (holder, later) = (locker(&nodes), locker(&nodes));
    let key = holder.admin().key("a");
    let node0 = nodes.node(0);
    let held = holder.lock("a").await.unwrap();
    let set = tokio::spawn(async move { set_locker.lock_all(["a", "b"]).await });
    let in_line = |n: u64| {
        let key = key.clone();
        async move {
            for _ in 0..200 {
                if queue_len(node0, &key).await == n {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("{n} waiters never queued for {key}");
        }
    };
    in_line(1).await;
    let waiting = tokio::spawn(async move {
        later
            .lock("a")
            .retry(RetryPolicy::within(Duration::from_secs(20)))
            .await
    });
    in_line(2).await;
    proxies[1].set(Mode::Blackhole);
    proxies[2].set(Mode::Blackhole);
    held.release().await.unwrap();
    // The set's place names its window, its TTL (5000 ms); the single
    // waiter's is shorter. Node 0 keeps `a` for the set through its
    // attempts and their undoing: reserved for it, or held by the set's
    // own attempt (its token begins with its Locker's tag, as its place
    // does) until that attempt is undone; never the later waiter's.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Bounded: caught between the set's attempt and its undoing, the
    // value is the set's token; the reservation is back within its node
    // timeout.
    let mut reserved = String::new();
    for _ in 0..100 {
        reserved = get(node0, &key).await.unwrap_or_default();
        if reserved.ends_with(":5000:w~") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let tag = reserved.split(':').next().unwrap_or_default().to_string();
    assert!(
        reserved.ends_with(":5000:w~") && tag.len() == 16,
        "a is not reserved for the set on node 0: {reserved:?}"
    );
    for _ in 0..10 {
        let value = get(node0, &key).await.unwrap_or_default();
        assert!(
            value.ends_with(":5000:w~") || value.starts_with(&tag),
            "a is neither reserved for the set nor held by it on node 0: {value:?}"
        );
        assert!(!waiting.is_finished(), "the later waiter got a");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for proxy in &proxies[1..] {
        proxy.set(Mode::Reset);
    }
    set.abort();
    waiting.abort();
}
