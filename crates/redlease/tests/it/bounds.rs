//! Compile-time checks that the public types can cross threads and that
//! the futures can be spawned on a multi-threaded runtime. A regression
//! here fails the build of this test, not a run.

use std::future::{Future, IntoFuture};

use redlease::{
    Acquire, Admin, Advanced, Error, Held, KeyState, Lease, LeaseHandle, LockStatus, Locker,
    LockerBuilder, LostReason, NodeError, NodeErrorKind, NodeId, NodeLockState, Op, RenewalStats,
    RetryPolicy, TryAcquire, Verdict,
};

fn send_sync<T: Send + Sync>() {}

fn send<T: Send>(_: &T) {}

#[test]
fn public_types_are_send_and_sync() {
    send_sync::<Locker>();
    send_sync::<LockerBuilder>();
    send_sync::<Advanced>();
    send_sync::<Acquire<'static>>();
    send_sync::<TryAcquire<'static>>();
    send_sync::<Admin<'static>>();
    send_sync::<Lease>();
    send_sync::<LeaseHandle>();
    send_sync::<RetryPolicy>();
    send_sync::<Error>();
    send_sync::<NodeError>();
    send_sync::<NodeErrorKind>();
    send_sync::<NodeId>();
    send_sync::<Held>();
    send_sync::<Op>();
    send_sync::<LostReason>();
    send_sync::<RenewalStats>();
    send_sync::<LockStatus>();
    send_sync::<NodeLockState>();
    send_sync::<KeyState>();
    send_sync::<Verdict>();
}

/// Never called: it only has to compile.
#[allow(dead_code)]
fn lease_futures_are_send(mut lease: Lease) {
    send(&lease.extend(std::time::Duration::from_secs(1)));
    send(&lease.lost());
    send(&lease.handle().lost());
    send(&lease.release());
}

#[tokio::test]
async fn locker_futures_are_send() {
    // Building does not connect: nothing listens on port 1.
    let locker = Locker::builder(["redis://127.0.0.1:1"])
        .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
        .build()
        .unwrap();
    let try_lock = locker.try_lock("job").into_future();
    send(&try_lock);
    let lock = locker.lock("job").keep_alive().into_future();
    send(&lock);
    let with = locker.lock("job").with(|_lease| async { 1 });
    send(&with);
    let try_with = locker.try_lock("job").with(|_lease| async { 1 });
    send(&try_with);
    send(&locker.admin().inspect("job"));
    send(&locker.admin().force_release("job"));
    send(&locker.close());
    send(&locker.admin().wait_for_background());
    send(&locker.admin().check_servers());
    // Dropped unpolled: nothing was sent.
    fn is_future<F: Future>(_: &F) {}
    is_future(&with);
    is_future(&try_with);
}
