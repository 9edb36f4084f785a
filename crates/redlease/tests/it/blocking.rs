//! The blocking facade (`redlease::blocking`), from plain threads: no
//! `#[tokio::test]`, no runtime set up by the test.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redlease::blocking::{self, DROP_WAIT};
use redlease::{Error, LostReason, RetryPolicy, Verdict};
use redlease_testkit::RedisNodes;

use crate::support::{MS, NODE_TIMEOUT};

/// A blocking Locker's settings for tests: brand-new servers (no restart
/// quarantine), quick retries, and node timeouts a loaded 2-core machine
/// meets.
fn builder(nodes: &RedisNodes, node_timeout: Duration) -> blocking::LockerBuilder {
    blocking::Locker::builder(nodes.urls())
        .advanced(|a| a.restart_quarantine(Duration::ZERO))
        .ttl(Duration::from_secs(5))
        .node_timeout(node_timeout)
        .connect_timeout(NODE_TIMEOUT)
        .retry(RetryPolicy::within(Duration::from_secs(20)).delay(MS, 5 * MS))
}

fn new_locker(nodes: &RedisNodes) -> blocking::Locker {
    builder(nodes, NODE_TIMEOUT)
        .build()
        .expect("valid test settings")
}

/// A Locker whose node timeout fits sub-second TTLs.
fn quick_locker(nodes: &RedisNodes) -> blocking::Locker {
    builder(nodes, 50 * MS)
        .build()
        .expect("valid test settings")
}

fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime")
}

/// Polls `free` every 10 ms for at most `within`.
fn eventually(within: Duration, mut free: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if free() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(10 * MS);
    }
}

/// A Locker is shared by threads; a lease moves to another thread.
#[test]
fn lockers_and_leases_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<blocking::Locker>();
    send_sync::<blocking::Lease>();
    send_sync::<blocking::Acquire<'static>>();
    send_sync::<Error>();
}

/// A non-atomic read-modify-write of a file under one lock, by 8 threads
/// (half of them sharing one Locker, half with a Locker each): no update
/// is lost.
#[test]
fn eight_threads_add_to_a_counter_file_exactly() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 25;
    let nodes = RedisNodes::start(3);
    let shared = new_locker(&nodes);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let path = std::env::temp_dir().join(format!(
        "redlease-blocking-counter-{}-{nanos}",
        std::process::id()
    ));
    std::fs::write(&path, "0").unwrap();
    let started = Instant::now();
    thread::scope(|s| {
        for t in 0..THREADS {
            let locker = if t % 2 == 0 {
                shared.clone()
            } else {
                new_locker(&nodes)
            };
            let path = &path;
            s.spawn(move || {
                for _ in 0..ROUNDS {
                    let lease = locker.lock("counter").expect("the lock within the wait");
                    let n: usize = std::fs::read_to_string(path)
                        .unwrap()
                        .trim()
                        .parse()
                        .unwrap();
                    // Widen the window in which an unprotected writer
                    // would lose an update.
                    thread::sleep(Duration::from_micros(300));
                    std::fs::write(path, (n + 1).to_string()).unwrap();
                    lease.release().expect("ours until released");
                }
            });
        }
    });
    let total: usize = std::fs::read_to_string(&path)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(total, THREADS * ROUNDS);
    assert!(started.elapsed() < Duration::from_secs(60));
    assert!(matches!(
        shared.inspect("counter").unwrap().verdict(),
        Verdict::Free { .. }
    ));
}

/// The Locker's threads renew a kept-alive lease while the thread that
/// holds it sleeps through several TTLs; a lease that is not kept alive
/// runs out meanwhile (the control).
#[test]
fn a_kept_alive_lease_outlives_several_ttls_while_its_thread_sleeps() {
    const TTL: Duration = Duration::from_millis(600);
    let nodes = RedisNodes::start(1);
    let locker = quick_locker(&nodes);
    let other = quick_locker(&nodes);
    let kept = locker.request("kept").ttl(TTL).keep_alive().lock().unwrap();
    let plain = locker.request("plain").ttl(TTL).lock().unwrap();
    thread::sleep(4 * TTL);
    assert!(!kept.is_lost(), "lost: {:?}", kept.lost_reason());
    assert!(kept.remaining() > TTL / 3, "{:?}", kept.remaining());
    assert!(matches!(other.try_lock("kept"), Err(Error::Taken { .. })));
    assert!(plain.is_lost());
    other.try_lock("plain").expect("expired").release().unwrap();
    kept.release().expect("still ours after 4 TTLs");
    assert!(matches!(plain.release(), Err(Error::NotHeld { .. })));
}

/// A thread parked in `wait_lost` wakes when a renewal finds the lock
/// gone, well before its timeout; `with_lock` reports work that lost its
/// lease as `Error::Lost`.
#[test]
fn the_lost_signal_reaches_a_blocked_thread() {
    const TTL: Duration = Duration::from_millis(600);
    let nodes = RedisNodes::start(1);
    let locker = quick_locker(&nodes);
    let operator = new_locker(&nodes);

    let (ready, holding) = mpsc::channel();
    let holder = {
        let locker = locker.clone();
        thread::spawn(move || {
            let lease = locker
                .request("watched")
                .ttl(TTL)
                .keep_alive()
                .lock()
                .unwrap();
            assert_eq!(lease.wait_lost(50 * MS).unwrap(), None, "not lost yet");
            ready.send(()).unwrap();
            let started = Instant::now();
            let why = lease.wait_lost(Duration::from_secs(20)).unwrap();
            (why, started.elapsed(), lease.is_lost())
        })
    };
    holding.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(operator.force_release("watched").unwrap(), 1);
    let (why, waited, lost) = holder.join().unwrap();
    assert_eq!(why, Some(LostReason::Refused));
    assert!(lost);
    assert!(waited < Duration::from_secs(5), "woke after {waited:?}");

    let (ready, working) = mpsc::channel();
    let worker = {
        let locker = locker.clone();
        thread::spawn(move || {
            locker.request("guarded").ttl(TTL).with(|lease| {
                ready.send(()).unwrap();
                lease.wait_lost(Duration::from_secs(20)).unwrap()
            })
        })
    };
    working.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(operator.force_release("guarded").unwrap(), 1);
    let outcome = worker.join().unwrap();
    assert!(
        matches!(
            outcome,
            Err(Error::Lost {
                why: LostReason::Refused,
                ..
            })
        ),
        "{outcome:?}"
    );
    // Work that kept its lease returns its value, and the lock is free.
    assert_eq!(locker.with_lock("guarded", |_| 42).unwrap(), 42);
    assert!(operator.try_lock("guarded").is_ok());
}

/// A dropped lease is released before the drop returns (within
/// `DROP_WAIT`); inside a runtime, or in a thread that panics, a drop
/// neither blocks nor panics, and the lock is released all the same.
#[test]
fn dropping_a_lease_releases_it() {
    let nodes = RedisNodes::start(3);
    let locker = new_locker(&nodes);
    let other = new_locker(&nodes);
    let long = Duration::from_secs(30);

    let lease = locker.request("dropped").ttl(long).lock().unwrap();
    let started = Instant::now();
    drop(lease);
    // Within its bound (a round trip, in fact).
    assert!(
        started.elapsed() < DROP_WAIT + 250 * MS,
        "{:?}",
        started.elapsed()
    );
    // Free at once: not after the 30 s TTL.
    other
        .try_lock("dropped")
        .expect("released by the drop")
        .release()
        .unwrap();

    let lease = locker
        .request("dropped-in-runtime")
        .ttl(long)
        .lock()
        .unwrap();
    current_thread_runtime().block_on(async move { drop(lease) });
    assert!(eventually(Duration::from_secs(5), || other
        .try_lock("dropped-in-runtime")
        .map(drop)
        .is_ok()));

    let panicking = {
        let locker = locker.clone();
        thread::spawn(move || {
            locker.with_lock("panicked", |_| -> () {
                panic!("the work failed (on purpose)")
            })
        })
    };
    assert!(panicking.join().is_err());
    other
        .try_lock("panicked")
        .expect("released while unwinding")
        .release()
        .unwrap();
}

/// Calls from a thread with a Tokio runtime are a typed error, at once,
/// with nothing sent; building and dropping there are fine.
#[test]
fn calls_inside_a_runtime_are_a_typed_error() {
    let nodes = RedisNodes::start(1);
    let locker = new_locker(&nodes);
    let mut lease = locker.lock("held").unwrap();
    let rt = current_thread_runtime();
    rt.block_on(async {
        let started = Instant::now();
        let err = locker.lock("x").unwrap_err();
        assert!(matches!(err, Error::InsideRuntime), "{err:?}");
        assert!(err.to_string().contains("inside a Tokio runtime"), "{err}");
        assert!(!err.is_retryable());
        assert!(matches!(locker.try_lock("x"), Err(Error::InsideRuntime)));
        assert!(matches!(
            locker.with_lock("x", |_| ()),
            Err(Error::InsideRuntime)
        ));
        assert!(matches!(locker.inspect("x"), Err(Error::InsideRuntime)));
        assert!(matches!(
            lease.wait_lost(Duration::from_secs(5)),
            Err(Error::InsideRuntime)
        ));
        assert!(matches!(
            lease.extend(Duration::from_secs(5)),
            Err(Error::InsideRuntime)
        ));
        assert!(started.elapsed() < Duration::from_secs(1));
        // A spawn_blocking closure runs with the runtime entered too.
        let theirs = locker.clone();
        let refused = tokio::task::spawn_blocking(move || theirs.try_lock("x").map(drop))
            .await
            .unwrap();
        assert!(matches!(refused, Err(Error::InsideRuntime)));
    });
    // Nothing was sent: "x" was never taken, and "held" is still ours.
    let status = locker.inspect("x").unwrap();
    assert!(matches!(status.verdict(), Verdict::Free { leftover_on: 0 }));
    lease.release().expect("untouched by the refused calls");

    let built = rt.block_on(async { builder(&nodes, NODE_TIMEOUT).build() });
    let built = built.expect("building needs no runtime, and minds none");
    built.try_lock("y").unwrap().release().unwrap();
    rt.block_on(async move { drop(built) });
}

/// Readers share, a writer excludes, all-or-none and permits, per-call
/// options, extend, and a blocking Locker over an async one.
#[test]
fn the_families_work_through_the_facade() {
    let nodes = RedisNodes::start(1);
    let locker = new_locker(&nodes);

    let a = locker.read_lock("catalog").unwrap();
    let b = locker.request_read("catalog").keep_alive().lock().unwrap();
    assert_eq!(a.as_async().mode(), redlease::LockMode::Shared);
    assert!(matches!(
        locker.try_lock("catalog"),
        Err(Error::Taken { .. })
    ));
    a.release().unwrap();
    b.release().unwrap();
    let writer = locker.write_lock("catalog").unwrap();
    assert!(matches!(
        locker.request_read("catalog").try_lock(),
        Err(Error::Taken { .. })
    ));
    writer.release().unwrap();

    let shard = locker.lock("shard:2").unwrap();
    assert!(matches!(
        locker.request_all(["shard:1", "shard:2"]).try_lock(),
        Err(Error::Taken { .. })
    ));
    shard.release().unwrap();
    let both = locker.lock_all(["shard:2", "shard:1"]).unwrap();
    assert_eq!(
        both.as_async().resources().collect::<Vec<_>>(),
        ["shard:1", "shard:2"]
    );
    both.release().unwrap();
    // A set with a read name, handed to another Locker by its handle.
    let set = locker
        .request_all(["shard:2", "shard:1"])
        .and_read(["catalog"])
        .lock()
        .unwrap();
    assert_eq!(
        set.as_async().mode_of("catalog"),
        Some(redlease::LockMode::Shared)
    );
    let reader = locker.request_read("catalog").try_lock().unwrap();
    reader.release().unwrap();
    let other = new_locker(&nodes);
    let adopted = other.adopt(&set.export()).unwrap();
    assert!(matches!(
        locker.try_lock("shard:1"),
        Err(Error::Taken { .. })
    ));
    let handle = adopted.export();
    other.release_handle(&handle).unwrap();
    assert!(matches!(other.adopt(&handle), Err(Error::NotHeld { .. })));
    locker.try_lock("shard:1").unwrap().release().unwrap();

    let slots = locker.semaphore("slots", 2);
    assert_eq!((slots.permits(), slots.quorum()), (2, 1));
    let one = slots.acquire().unwrap();
    let two = slots.request().ttl(Duration::from_secs(2)).lock().unwrap();
    assert!(matches!(slots.try_acquire(), Err(Error::Taken { .. })));
    // Both permits held: a permit request waits 0.3 s and gives up.
    let waited = slots.request().wait(300 * MS).with(|_| 1);
    assert!(
        matches!(waited, Err(Error::WaitTimeout { .. })),
        "{waited:?}"
    );
    one.release().unwrap();
    assert_eq!(slots.request().with(|_| 1).unwrap(), 1);
    two.release().unwrap();

    let started = Instant::now();
    let held = locker.lock("busy").unwrap();
    let waited = locker.request("busy").wait(300 * MS).lock();
    assert!(
        matches!(waited, Err(Error::WaitTimeout { .. })),
        "{waited:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    let mut held = held.keep_alive().unwrap();
    let before = held.valid_until();
    held.extend(Duration::from_secs(30)).unwrap();
    assert!(held.valid_until() > before + Duration::from_secs(20));
    held.release().unwrap();

    // Over an async Locker: both see the same locks.
    let rt = current_thread_runtime();
    let async_locker = rt
        .block_on(async {
            redlease::Locker::builder(nodes.urls())
                .advanced(|a| a.restart_quarantine(Duration::ZERO))
                .build()
        })
        .unwrap();
    let facade = blocking::Locker::from_async(async_locker.clone());
    let lease = facade.lock("shared-name").unwrap();
    rt.block_on(async {
        assert!(matches!(
            async_locker.try_lock("shared-name").await,
            Err(Error::Taken { .. })
        ));
    });
    lease.release().unwrap();

    locker.close().unwrap();
    assert!(matches!(locker.lock("after"), Err(Error::Closed)));
}

/// A child process that inherited a blocking Locker and a kept-alive
/// lease across fork() gets `Error::Forked` at once from every call,
/// sees the lease as lost, and drops both without hanging; the parent
/// keeps its lease.
#[test]
fn a_forked_child_gets_an_error_instead_of_a_hang() {
    let nodes = RedisNodes::start(1);
    let locker = quick_locker(&nodes);
    let lease = locker
        .request("parent")
        .ttl(Duration::from_millis(600))
        .keep_alive()
        .lock()
        .unwrap();
    // A second Locker whose last handle the child drops.
    let spare = new_locker(&nodes);
    spare.try_lock("spare").unwrap().release().unwrap();

    // SAFETY: the child calls only the facade's checks (getpid, no lock
    // taken), drops what it inherited (which touches nothing), and
    // leaves with _exit, running no destructor of the parent's.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = in_the_child(&locker, lease, spare);
        unsafe { libc::_exit(code) };
    }
    let status = wait_for(pid, Duration::from_secs(20));
    assert_eq!(status, Some(0), "the child's failed checks, as bits");

    // The parent's lease lived on, renewed meanwhile.
    thread::sleep(Duration::from_millis(700));
    assert!(!lease.is_lost(), "{:?}", lease.lost_reason());
    lease.release().unwrap();
    drop(spare);
}

/// The child's checks: 0 if every one passed, else a bit per failure.
fn in_the_child(locker: &blocking::Locker, lease: blocking::Lease, spare: blocking::Locker) -> i32 {
    let forked = |r: Result<(), Error>| matches!(r, Err(Error::Forked { .. }));
    let mut failed = 0;
    let started = Instant::now();
    if !forked(locker.try_lock("child").map(drop)) {
        failed |= 1;
    }
    if !forked(locker.lock("parent").map(drop)) {
        failed |= 2;
    }
    if !forked(lease.wait_lost(Duration::from_secs(5)).map(drop)) {
        failed |= 4;
    }
    if !lease.is_lost() || lease.lost_reason() != Some(LostReason::Closed) {
        failed |= 8;
    }
    if !forked(locker.inspect("parent").map(drop)) {
        failed |= 16;
    }
    drop(lease);
    drop(spare);
    if started.elapsed() > Duration::from_secs(1) {
        failed |= 32;
    }
    failed
}

/// The child's exit status, or `None` (after killing it) if it did not
/// exit within `within`.
fn wait_for(pid: libc::pid_t, within: Duration) -> Option<i32> {
    let deadline = Instant::now() + within;
    loop {
        let mut status = 0;
        // SAFETY: waits for our own child, by its pid.
        let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if done == pid {
            return libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        }
        if Instant::now() >= deadline {
            // SAFETY: our own child, hung: kill and reap it.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        thread::sleep(10 * MS);
    }
}
