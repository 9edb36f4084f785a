//! Every public duration and count, however large: a wait too long for
//! the clock to represent waits without limit, a setting out of range is
//! `InvalidInput` naming it, and nothing panics (on a runtime thread or
//! the caller's).

use std::future::{Future, IntoFuture};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use redlease::{Durability, Error, Lease, Locker, LockerBuilder, RetryPolicy, MAX_TTL};
use redlease_testkit::RedisNode;

use crate::support::*;

/// The waits the issue found panicking, and the clock's edge.
const BEYOND_THE_CLOCK: [Duration; 2] = [Duration::MAX, Duration::from_secs(u64::MAX / 2)];

/// How long any one call here may take before the test fails: far more
/// than a wait of a few milliseconds and a few round trips need.
const LIMIT: Duration = Duration::from_secs(20);

fn builder(node: &RedisNode) -> LockerBuilder {
    Locker::builder([node.url()])
        .advanced(|a| a.restart_quarantine(Duration::ZERO)) // a brand-new server
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(NODE_TIMEOUT)
}

/// `request` run beside the release of `held` (100 ms later): the request
/// must not be granted before the release, and must be after it.
async fn waits_then_gets(
    what: &str,
    held: Lease,
    request: impl Future<Output = Result<Lease, Error>>,
) {
    let request = async {
        let got = request.await;
        (got, Instant::now())
    };
    let release = async {
        tokio::time::sleep(100 * MS).await;
        let at = Instant::now();
        held.release().await.unwrap();
        at
    };
    let both = async { tokio::join!(request, release) };
    let ((got, granted_at), released_at) = tokio::time::timeout(LIMIT, both)
        .await
        .unwrap_or_else(|_| panic!("{what}: not granted after the release"));
    let lease = got.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(granted_at >= released_at, "{what}: granted while held");
    lease.release().await.unwrap();
}

/// `lock`, `read_lock`, `write_lock`, a semaphore's `acquire` and
/// `lock_all`, with `.wait(d)` or `.retry(RetryPolicy::within(d))` for a
/// `d` beyond the clock: each waits for the holder without limit and gets
/// the lock when it is released.
#[tokio::test]
async fn a_wait_beyond_the_clock_waits_without_limit() {
    let node = RedisNode::start();
    let (holder, waiter) = (
        builder(&node).build().unwrap(),
        builder(&node).build().unwrap(),
    );
    for wait in BEYOND_THE_CLOCK {
        for by_policy in [false, true] {
            let what = |kind: &str| format!("{kind} wait {wait:?} (policy: {by_policy})");
            fn with<'a>(
                request: redlease::Acquire<'a>,
                wait: Duration,
                by_policy: bool,
            ) -> redlease::Acquire<'a> {
                match by_policy {
                    false => request.wait(wait),
                    true => request.retry(RetryPolicy::within(wait)),
                }
            }
            let set = |request| with(request, wait, by_policy);
            let held = holder.lock("x").await.unwrap();
            waits_then_gets(&what("lock"), held, set(waiter.lock("x")).into_future()).await;
            let held = holder.lock("x").await.unwrap();
            let read = set(waiter.read_lock("x"));
            waits_then_gets(&what("read_lock"), held, read.into_future()).await;
            let held = holder.read_lock("x").await.unwrap();
            let write = set(waiter.write_lock("x"));
            waits_then_gets(&what("write_lock"), held, write.into_future()).await;
            let held = holder.semaphore("s", 1).acquire().await.unwrap();
            let permit = set(waiter.semaphore("s", 1).acquire());
            waits_then_gets(&what("semaphore"), held, permit.into_future()).await;
            let held = holder.lock("y").await.unwrap();
            let all = set(waiter.lock_all(["x", "y"]));
            waits_then_gets(&what("lock_all"), held, all.into_future()).await;
        }
    }
    assert_eq!(lock_keys(&node).await, 0, "every lock given back");
}

/// Lock keys left on `node` (queues and counters aside).
async fn lock_keys(node: &RedisNode) -> usize {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("redlease:{*}")
        .query_async(&mut conn(node).await)
        .await
        .unwrap();
    keys.len()
}

/// A blocking request, made when called.
type Request<'a> = dyn Fn() -> Result<redlease::blocking::Lease, Error> + 'a;

/// The same through the blocking API, on the caller's thread: a wait
/// beyond the clock gets the lock once its holder lets go.
#[test]
fn the_blocking_api_waits_without_limit_too() {
    let node = RedisNode::start();
    let build = || {
        redlease::blocking::Locker::builder([node.url()])
            .advanced(|a| a.restart_quarantine(Duration::ZERO)) // a brand-new server
            .build()
            .unwrap()
    };
    let (holder, waiter) = (build(), build());
    for wait in BEYOND_THE_CLOCK {
        let requests: [(&str, &Request); 4] = [
            ("lock", &|| waiter.request("x").wait(wait).lock()),
            ("read", &|| waiter.request_read("x").wait(wait).lock()),
            ("all", &|| waiter.request_all(["x", "y"]).wait(wait).lock()),
            ("policy", &|| {
                waiter.request("x").retry(RetryPolicy::within(wait)).lock()
            }),
        ];
        for (what, request) in requests {
            let held = holder.lock("x").unwrap();
            std::thread::scope(|s| {
                let releaser = s.spawn(move || {
                    std::thread::sleep(200 * MS);
                    held.release().unwrap();
                });
                let lease = request().unwrap_or_else(|e| panic!("{what} {wait:?}: {e}"));
                releaser.join().unwrap();
                lease.release().unwrap();
            });
        }
        let held = holder.semaphore("s", 1).acquire().unwrap();
        std::thread::scope(|s| {
            s.spawn(move || {
                std::thread::sleep(200 * MS);
                held.release().unwrap();
            });
            let permit = waiter.semaphore("s", 1).request().wait(wait).lock();
            permit.unwrap().release().unwrap();
        });
        // A lease that runs out: waiting for its loss without limit ends.
        let short = holder
            .request("z")
            .ttl(300 * MS)
            .lock()
            .expect("a free lock");
        let lost = short.wait_lost(wait).unwrap();
        assert!(lost.is_some(), "{lost:?}");
    }
}

/// Any duration, the edges of the clock and of `MAX_TTL` among them.
fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        Just(Duration::from_secs(u64::MAX / 2)),
        Just(MAX_TTL),
        Just(MAX_TTL + Duration::from_nanos(1)),
        (1u64..60_000).prop_map(Duration::from_millis),
        (0u64..1_000_000).prop_map(Duration::from_micros),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

/// A short wait: what a case spends at most on a held lock.
fn tiny() -> impl Strategy<Value = Duration> {
    (0u64..20).prop_map(Duration::from_millis)
}

fn any_policy() -> impl Strategy<Value = RetryPolicy> {
    let n = || (1u32..).prop_map(|n| NonZeroU32::new(n).unwrap());
    (
        prop_oneof![
            any_duration().prop_map(RetryPolicy::within),
            n().prop_map(RetryPolicy::attempts),
            (n(), any_duration()).prop_map(|(n, d)| RetryPolicy::attempts_within(n, d)),
            Just(RetryPolicy::forever()),
        ],
        any_duration(),
        any_duration(),
    )
        .prop_map(|(policy, a, b)| policy.delay(a, b))
}

/// A Locker's settings, every duration arbitrary.
#[derive(Clone, Debug)]
struct Settings {
    ttl: Duration,
    node_timeout: Option<Duration>,
    connect_timeout: Duration,
    retry: RetryPolicy,
    drift_factor: f64,
    drift_floor: Duration,
    renew_fraction: f64,
    quarantine: Option<Duration>,
    fence_expiry: Option<Duration>,
    durability: Option<(bool, u32, Duration)>,
    lock_delay: Option<Duration>,
}

/// Mostly `usual`, sometimes anything `any` makes: most cases get past
/// `build` to the requests, and every setting is still driven to its
/// edges.
fn mostly<T: Clone + std::fmt::Debug + 'static>(
    usual: T,
    any: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<T> {
    prop_oneof![15 => Just(usual), 1 => any].boxed()
}

fn any_settings() -> impl Strategy<Value = Settings> {
    let fraction = || prop_oneof![Just(f64::NAN), Just(f64::INFINITY), -1.0f64..2.0];
    (
        (
            mostly(Duration::from_secs(5), any_duration()),
            mostly(None, proptest::option::of(any_duration())),
            mostly(NODE_TIMEOUT, any_duration()),
            mostly(RetryPolicy::default(), any_policy()),
        ),
        (
            mostly(0.01, fraction()),
            mostly(2 * MS, any_duration()),
            mostly(1.0 / 3.0, fraction()),
        ),
        (
            mostly(None, proptest::option::of(any_duration())),
            mostly(None, proptest::option::of(any_duration())),
            mostly(
                None,
                proptest::option::of((any::<bool>(), any::<u32>(), any_duration())),
            ),
            mostly(None, proptest::option::of(any_duration())),
        ),
    )
        .prop_map(
            |(
                (ttl, node_timeout, connect_timeout, retry),
                (drift_factor, drift_floor, renew_fraction),
                (quarantine, fence_expiry, durability, lock_delay),
            )| Settings {
                ttl,
                node_timeout,
                connect_timeout,
                retry,
                drift_factor,
                drift_floor,
                renew_fraction,
                quarantine,
                fence_expiry,
                durability,
                lock_delay,
            },
        )
}

impl Settings {
    /// The builder over `url` with these settings (fencing on when a
    /// fence expiry is set, so that it is checked, not refused for that).
    fn builder(&self, url: &str) -> LockerBuilder {
        let mut b = Locker::builder([url])
            .ttl(self.ttl)
            .connect_timeout(self.connect_timeout)
            .retry(self.retry.clone())
            .fencing(self.fence_expiry.is_some());
        if let Some(t) = self.node_timeout {
            b = b.node_timeout(t);
        }
        if let Some(d) = self.lock_delay {
            b = b.lock_delay(d);
        }
        if let Some((required, replicas, timeout)) = self.durability {
            b = b.durability(match required {
                true => Durability::required(replicas, timeout),
                false => Durability::best_effort(replicas, timeout),
            });
        }
        let s = self.clone();
        b.advanced(move |mut a| {
            a = a
                .drift_factor(s.drift_factor)
                .drift_floor(s.drift_floor)
                .renew_fraction(s.renew_fraction)
                .restart_quarantine(s.quarantine.unwrap_or(Duration::ZERO));
            if let Some(e) = s.fence_expiry {
                a = a.fence_expiry(e);
            }
            a
        })
    }
}

/// The fields a Locker's settings can be refused for.
const SETTINGS: [&str; 11] = [
    "ttl",
    "node_timeout",
    "connect_timeout",
    "durability",
    "advanced.drift_factor",
    "advanced.drift_floor",
    "advanced.renew_fraction",
    "advanced.restart_quarantine",
    "advanced.fence_expiry",
    "lock_delay",
    "urls",
];

/// The outcome of a call that may fail for any reason but bad input of
/// another field than `fields`; `None` for a timeout of the whole call.
async fn bounded<T>(
    fields: &[&str],
    call: impl IntoFuture<Output = Result<T, Error>>,
) -> Result<Option<T>, TestCaseError> {
    let Ok(result) = tokio::time::timeout(LIMIT, call.into_future()).await else {
        return Err(TestCaseError::fail("no answer within the limit"));
    };
    match result {
        Ok(value) => Ok(Some(value)),
        Err(Error::InvalidInput { field, .. }) if !fields.contains(&field) => Err(
            TestCaseError::fail(format!("refused for {field}, not one of {fields:?}")),
        ),
        Err(_) => Ok(None),
    }
}

/// Every builder setting, and every duration and count of a request,
/// arbitrary: `build` refuses with the field or builds; then a free lock
/// is taken (with any TTL, wait and policy), extended by any duration and
/// released, or refused with a typed error; a held lock is never granted,
/// however the wait is set; a semaphore of any count takes a permit or
/// refuses the count.
#[test]
fn every_duration_and_count_is_taken_or_refused_without_a_panic() {
    let node = RedisNode::start();
    let url = node.url();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let holder = runtime.block_on(async {
        let holder = builder(&node)
            .ttl(Duration::from_secs(300))
            .build()
            .unwrap();
        let lease = holder.lock("held").await.unwrap();
        (holder, lease)
    });
    let (requested, granted) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    let case = (
        any_settings(),
        (proptest::option::of(any_duration()), any_duration()),
        (any_duration(), any_policy(), tiny()),
        (
            any::<u32>(),
            prop_oneof![1u32..=3, Just(0), Just(100_001), Just(u32::MAX)],
        ),
    );
    let result = runner.run(
        &case,
        |(settings, (ttl, extend), (wait, policy, short), (any_permits, permits))| {
            runtime.block_on(async {
                match settings.builder(&url).build() {
                    Ok(locker) => locker.close().await,
                    Err(Error::InvalidInput { field, .. }) => {
                        prop_assert!(SETTINGS.contains(&field), "{}", field);
                        return Ok(());
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("build: {e:?}"))),
                }
                // Locks taken without durability (no replica would answer a
                // WAIT, and each attempt would take its whole timeout) and
                // without the restart quarantine (this server just started:
                // an acquire with attempts left rightly sleeps until it
                // votes, which may be long past the test's limit).
                let without = Settings {
                    durability: None,
                    quarantine: None,
                    ..settings.clone()
                };
                let locker = without
                    .builder(&url)
                    .build()
                    .expect("built with durability");
                requested.fetch_add(1, Ordering::Relaxed);
                let ttl_fields = ["ttl", "node_timeout"];
                // A free lock, with any TTL and wait: three attempts at most
                // (the settings may make each fail: a quarantine, a timeout
                // of a nanosecond), the default delay between them.
                let three = NonZeroU32::new(3).unwrap();
                let mut request = locker
                    .lock("free")
                    .retry(RetryPolicy::attempts_within(three, wait));
                if let Some(ttl) = ttl {
                    request = request.ttl(ttl);
                }
                if let Some(mut lease) = bounded(&ttl_fields, request).await? {
                    granted.fetch_add(1, Ordering::Relaxed);
                    let _ = bounded(&ttl_fields, lease.extend(extend)).await?;
                    let _ = bounded(&[], lease.release()).await?;
                }
                let mut request = locker.try_lock("free").keep_alive();
                if let Some(ttl) = ttl {
                    request = request.ttl(ttl);
                }
                if let Some(lease) = bounded(&ttl_fields, request).await? {
                    let _ = bounded(&[], lease.release()).await?;
                }
                let all = locker
                    .lock_all(["f1", "f2"])
                    .retry(RetryPolicy::attempts_within(three, wait));
                if let Some(lease) = bounded(&ttl_fields, all).await? {
                    let _ = bounded(&[], lease.release()).await?;
                }
                // A held lock: never granted, whatever the wait or policy.
                let held = [
                    bounded(&ttl_fields, locker.lock("held").wait(short))
                        .await?
                        .is_some(),
                    bounded(&ttl_fields, locker.read_lock("held").wait(short))
                        .await?
                        .is_some(),
                    bounded(&ttl_fields, locker.lock_all(["held", "f3"]).wait(short))
                        .await?
                        .is_some(),
                    bounded(
                        &ttl_fields,
                        locker.lock("held").retry(policy.clone()).wait(short),
                    )
                    .await?
                    .is_some(),
                    bounded(&ttl_fields, locker.try_lock("held"))
                        .await?
                        .is_some(),
                ];
                prop_assert_eq!(held, [false; 5], "a held lock was granted");
                // A semaphore of any count: a permit (one node: any count up
                // to the limit), or the count refused.
                for n in [any_permits, permits] {
                    let semaphore = locker.semaphore(format!("sem-{n}"), n);
                    let _ = (
                        semaphore.quorum(),
                        semaphore.tolerates(),
                        format!("{semaphore:?}"),
                    );
                    let got = tokio::time::timeout(LIMIT, semaphore.try_acquire()).await;
                    let got = got.map_err(|_| TestCaseError::fail("semaphore: no answer"))?;
                    match got {
                        Ok(permit) => {
                            prop_assert!((1..=100_000).contains(&n), "{} permits granted", n);
                            let _ = bounded(&[], permit.release()).await?;
                        }
                        Err(Error::InvalidInput {
                            field: "permits", ..
                        }) => {
                            prop_assert!(n == 0 || n > 100_000, "{} permits refused", n)
                        }
                        Err(Error::InvalidInput { field, .. }) => prop_assert!(
                            ttl_fields.contains(&field),
                            "semaphore refused for {}",
                            field
                        ),
                        Err(_) => {}
                    }
                }
                locker.close().await;
                Ok(())
            })
        },
    );
    runtime.block_on(async {
        let (holder, lease) = holder;
        lease.release().await.unwrap();
        holder.close().await;
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // The settings are drawn so that most cases get to the requests, and
    // many of those take the free lock.
    let (requested, granted) = (requested.into_inner(), granted.into_inner());
    eprintln!("{requested} of {CASES} cases built a Locker, {granted} took the free lock");
    assert!(requested >= CASES as usize / 4, "{requested} of {CASES}");
    assert!(granted >= CASES as usize / 8, "{granted} of {CASES}");
}

/// The cases of [`every_duration_and_count_is_taken_or_refused_without_a_panic`].
const CASES: u32 = 64;

/// The settings the issue named, one by one: each either refused naming
/// its field and its limit, or accepted; none panics.
#[tokio::test]
async fn settings_beyond_any_limit_are_refused_by_name() {
    let node = RedisNode::start();
    let b = || builder(&node);
    let refused = |built: Result<Locker, Error>| match built {
        Err(Error::InvalidInput { field, reason, .. }) => (field, reason),
        other => panic!("expected InvalidInput, got {other:?}"),
    };
    for huge in BEYOND_THE_CLOCK {
        let cases = [
            (b().ttl(huge).build(), "ttl"),
            (b().node_timeout(huge).build(), "node_timeout"),
            (b().connect_timeout(huge).build(), "connect_timeout"),
            (
                b().advanced(|a| a.drift_floor(huge)).build(),
                "advanced.drift_floor",
            ),
            (
                b().advanced(|a| a.restart_quarantine(huge)).build(),
                "advanced.restart_quarantine",
            ),
            (
                b().fencing(true).advanced(|a| a.fence_expiry(huge)).build(),
                "advanced.fence_expiry",
            ),
            (
                b().durability(Durability::required(1, huge)).build(),
                "durability",
            ),
        ];
        for (built, field) in cases {
            let (f, reason) = refused(built);
            assert_eq!(f, field, "{huge:?}: {reason}");
        }
    }
    // The limit is named.
    let (_, reason) = refused(b().connect_timeout(MAX_TTL + MS).build());
    assert!(reason.contains(&format!("{MAX_TTL:?}")), "{reason}");
    assert!(b().connect_timeout(MAX_TTL).build().is_ok());
    let (_, reason) = refused(b().advanced(|a| a.drift_floor(Duration::MAX)).build());
    assert!(reason.contains(&format!("{MAX_TTL:?}")), "{reason}");
    // A policy of any delays is a policy: a Locker builds with it.
    let any = RetryPolicy::within(Duration::MAX).delay(Duration::MAX, Duration::ZERO);
    let locker = b().retry(any).build().unwrap();
    let lease = locker.lock("job").await.unwrap();
    // Extended by any duration: refused by name beyond MAX_TTL.
    let mut lease = lease;
    for huge in BEYOND_THE_CLOCK {
        match lease.extend(huge).await {
            Err(Error::InvalidInput { field: "ttl", .. }) => {}
            other => panic!("extend({huge:?}): {other:?}"),
        }
    }
    lease.extend(Duration::from_secs(60)).await.unwrap();
    lease.release().await.unwrap();
}
