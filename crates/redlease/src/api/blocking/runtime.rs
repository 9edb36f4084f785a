//! [`Shared`]: what every handle of a blocking Locker shares: the
//! facade's own Tokio runtime, the async Locker it drives, and the
//! process they were made in.
//!
//! The runtime is a current-thread one, so a call's thread drives it: it
//! writes its requests, waits in the runtime's own poll of the sockets and
//! timers, and reads its replies, with no other thread woken on the way.
//! Between calls the runtime's one thread of its own, the *driver*, takes
//! it over and runs the background work (renewals, notifications, the
//! releases that finish after a quorum answered). The driver waits
//! [`HANDOVER`] after the last call ended before it does: a thread taking
//! lock after lock finds the runtime free, instead of waking the driver to
//! hand it back on every call.

use std::future::Future;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::runtime::{EnterGuard, Handle, Runtime};

use crate::api::lease::Lease as AsyncLease;
use crate::api::locker::Locker as AsyncLocker;
use crate::core::error::Error;

/// The longest a drop waits, on the dropping thread: dropping a blocking
/// [`Lease`](crate::blocking::Lease) waits this long at most for its
/// release, and dropping the last handle of a blocking
/// [`Locker`](crate::blocking::Locker) waits this long at most for the
/// requests still finishing in the background, then as long again at
/// most for its threads to stop. What is not done by then goes on in the
/// background (a release), or is left to the keys' TTL.
pub const DROP_WAIT: Duration = Duration::from_secs(1);

/// How long after the last call ended the driver takes the runtime over.
/// Background work waits at most this long for it (a renewal is due a
/// third of a TTL ahead, so a millisecond costs nothing); a thread that
/// calls again sooner finds the runtime free.
const HANDOVER: Duration = Duration::from_millis(1);

/// The name of the facade's threads (`top -H`, `ps -L`, a debugger).
const THREAD_NAME: &str = "redlease-blocking";

/// The runtime, the async Locker and the process id, shared by a blocking
/// Locker's clones, its leases and its requests. The driver thread stops
/// when the last of them is dropped.
pub(crate) struct Shared {
    /// `None` only while dropped.
    runtime: Option<Arc<Runtime>>,
    /// `None` only while dropped.
    locker: Option<AsyncLocker>,
    /// Who runs the runtime between calls.
    driver: Arc<Driver>,
    /// `None` once stopped (and in a test's Shared without one).
    driver_thread: Option<JoinHandle<()>>,
    /// The process the runtime's threads run in.
    pid: u32,
}

/// A current-thread runtime of the facade's own (see the module docs).
///
/// # Panics
///
/// If the system refuses a file descriptor for it.
pub(crate) fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("redlease::blocking could not start its runtime: {e}"))
}

/// Between the callers and the driver thread: how many calls are running,
/// when the last one ended, and the signal that makes the driver give the
/// runtime back.
struct Driver {
    calls: Mutex<Calls>,
    changed: Condvar,
    /// Ends the driver's turn on the runtime.
    give_back: tokio::sync::Notify,
}

struct Calls {
    running: usize,
    last_ended: Instant,
    stop: bool,
}

impl Driver {
    fn calls(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A call begins: the driver gives the runtime back if it has it.
    fn enter(&self) {
        self.calls().running += 1;
        self.give_back.notify_one();
    }

    /// A call ended.
    fn leave(&self) {
        let mut calls = self.calls();
        calls.running = calls.running.saturating_sub(1);
        calls.last_ended = Instant::now();
        drop(calls);
        self.changed.notify_one();
    }

    /// The driver's loop: once no call ran for [`HANDOVER`], it runs the
    /// runtime until a call begins; until told to stop.
    fn run(&self, runtime: &Runtime) {
        loop {
            {
                let mut calls = self.calls();
                loop {
                    if calls.stop {
                        return;
                    }
                    let idle = calls.last_ended.elapsed();
                    if calls.running == 0 && idle >= HANDOVER {
                        break;
                    }
                    calls = if calls.running == 0 {
                        let (calls, _) = self
                            .changed
                            .wait_timeout(calls, HANDOVER.saturating_sub(idle))
                            .unwrap_or_else(PoisonError::into_inner);
                        calls
                    } else {
                        self.changed
                            .wait(calls)
                            .unwrap_or_else(PoisonError::into_inner)
                    };
                }
            }
            // A call that began since the check above left a permit: this
            // turn ends at once, and the loop waits for it to end.
            runtime.block_on(self.give_back.notified());
        }
    }

    fn stop(&self) {
        self.calls().stop = true;
        self.changed.notify_one();
        self.give_back.notify_one();
    }
}

/// Ends the call on drop, also when the call's future panicked.
struct Call<'a>(&'a Driver);

impl Drop for Call<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

impl Shared {
    /// The shared state of a Locker whose `locker` runs on `runtime`, and
    /// the driver thread that runs it between calls.
    ///
    /// # Panics
    ///
    /// If the system cannot start a thread, as `std::thread::spawn`.
    pub(crate) fn new(runtime: Runtime, locker: AsyncLocker) -> Shared {
        let runtime = Arc::new(runtime);
        let driver = Arc::new(Driver {
            calls: Mutex::new(Calls {
                running: 0,
                last_ended: Instant::now(),
                stop: false,
            }),
            changed: Condvar::new(),
            give_back: tokio::sync::Notify::new(),
        });
        let thread = {
            let (runtime, driver) = (runtime.clone(), driver.clone());
            std::thread::Builder::new()
                .name(THREAD_NAME.to_string())
                .spawn(move || driver.run(&runtime))
                .unwrap_or_else(|e| {
                    panic!("redlease::blocking could not start its runtime thread: {e}")
                })
        };
        Shared {
            runtime: Some(runtime),
            locker: Some(locker),
            driver,
            driver_thread: Some(thread),
            pid: std::process::id(),
        }
    }

    fn runtime(&self) -> &Runtime {
        self.runtime.as_ref().expect("the runtime lives until drop")
    }

    /// Runs `work` on the calling thread, which drives the runtime
    /// meanwhile (or, while another call does, is woken by it).
    fn drive<F: Future>(&self, work: F) -> F::Output {
        self.driver.enter();
        let _call = Call(&self.driver);
        self.runtime().block_on(work)
    }

    /// The async Locker the facade drives.
    pub(crate) fn locker(&self) -> &AsyncLocker {
        self.locker.as_ref().expect("the Locker lives until drop")
    }

    /// Whether this is a child process that inherited the Locker across
    /// `fork()` (one `getpid` per call).
    pub(crate) fn forked(&self) -> bool {
        std::process::id() != self.pid
    }

    /// [`Error::Forked`] in a child process that inherited the Locker.
    pub(crate) fn not_forked(&self) -> Result<(), Error> {
        let pid = std::process::id();
        if pid != self.pid {
            return Err(Error::Forked {
                built_in: self.pid,
                called_in: pid,
            });
        }
        Ok(())
    }

    /// Why this thread may not block on the facade, if it may not: a
    /// forked child, or a thread with a Tokio runtime.
    pub(crate) fn usable(&self) -> Result<(), Error> {
        self.not_forked()?;
        if Handle::try_current().is_ok() {
            return Err(Error::InsideRuntime);
        }
        Ok(())
    }

    /// Runs `work` to completion on the calling thread, with the facade's
    /// threads driving its I/O and timers; anything it spawns runs on
    /// them. Nothing runs if the thread may not block here.
    pub(crate) fn block_on<F: Future>(&self, work: F) -> Result<F::Output, Error> {
        self.usable()?;
        Ok(self.run(work))
    }

    /// [`block_on`](Self::block_on) once [`usable`](Self::usable) said
    /// the thread may block: for callers that check before they build the
    /// request (so that a forked child builds nothing).
    pub(crate) fn run<F: Future>(&self, work: F) -> F::Output {
        self.drive(work)
    }

    /// Makes the facade's runtime the current one (without blocking), so
    /// that what is spawned meanwhile runs on its threads.
    pub(crate) fn enter(&self) -> EnterGuard<'_> {
        self.runtime().enter()
    }

    /// Gives back a lease being dropped: waits up to [`DROP_WAIT`] for the
    /// release where the thread may block, and otherwise leaves it to the
    /// async lease's own background release, on the facade's threads.
    /// Never panics; in a forked child it does nothing (the lease is the
    /// parent's, and the parent still holds and renews it).
    pub(crate) fn drop_lease(&self, lease: AsyncLease) {
        if self.forked() {
            std::mem::forget(lease);
            return;
        }
        match Handle::try_current() {
            Ok(_) => {
                let _ours = self.enter();
                drop(lease);
            }
            // At thread exit (a lease in a thread-local): no runtime can
            // be entered; the keys expire by their TTL.
            Err(e) if e.is_thread_local_destroyed() => drop(lease),
            Err(_) => {
                let resource = lease.resource().to_string();
                let released = self.drive(async move {
                    // On timeout the release future is dropped in here,
                    // and the lease's guard releases it in the background.
                    tokio::time::timeout(DROP_WAIT, lease.release()).await
                });
                match released {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::debug!(resource, error = %e, "release of a dropped lease failed")
                    }
                    Err(_) => tracing::debug!(
                        resource,
                        "release of a dropped lease still running after {DROP_WAIT:?}: it goes \
                         on in the background"
                    ),
                }
            }
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let (Some(runtime), Some(locker)) = (self.runtime.take(), self.locker.take()) else {
            return;
        };
        let driver = self.driver_thread.take();
        if self.forked() {
            // The threads do not exist here, and locks they held may never
            // be released: touch nothing, and let the memory go with the
            // process.
            std::mem::forget(locker);
            std::mem::forget(runtime);
            std::mem::forget(driver);
            return;
        }
        // The driver gives the runtime back within its turn and ends.
        self.driver.stop();
        let stopping = Stopping {
            runtime,
            driver,
            locker,
        };
        match Handle::try_current() {
            Err(e) if !e.is_thread_local_destroyed() => stopping.stop(),
            Err(_) => stopping.in_background(),
            // Nothing may block here (this may even be the driver thread,
            // in its turn): stop on a thread of its own.
            Ok(_) => {
                let slot = Arc::new(Mutex::new(Some(stopping)));
                let theirs = slot.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("{THREAD_NAME}-stop"))
                    .spawn(move || {
                        if let Some(stopping) = take(&theirs) {
                            stopping.stop();
                        }
                    });
                if spawned.is_err()
                    && let Some(stopping) = take(&slot)
                {
                    stopping.in_background();
                }
            }
        }
    }
}

/// A dropped Shared's parts, told to stop.
struct Stopping {
    runtime: Arc<Runtime>,
    driver: Option<JoinHandle<()>>,
    locker: AsyncLocker,
}

impl Stopping {
    /// Waits for the driver thread to end (unless this is it), and takes
    /// the runtime it shared.
    fn join(
        runtime: Arc<Runtime>,
        driver: Option<JoinHandle<()>>,
    ) -> Result<Runtime, Arc<Runtime>> {
        if let Some(driver) = driver
            && driver.thread().id() != std::thread::current().id()
        {
            let _ = driver.join();
        }
        Arc::try_unwrap(runtime)
    }

    /// The orderly stop, on a thread that may block (see [`stop`]).
    fn stop(self) {
        let Stopping {
            runtime,
            driver,
            locker,
        } = self;
        match Stopping::join(runtime, driver) {
            Ok(runtime) => stop(runtime, locker),
            Err(runtime) => {
                let _ours = runtime.enter();
                drop(locker);
            }
        }
    }

    /// Without waiting for anything: the Locker's tasks end, and the
    /// runtime goes with its last holder.
    fn in_background(self) {
        let Stopping {
            runtime,
            driver,
            locker,
        } = self;
        {
            let _ours = runtime.enter();
            drop(locker);
        }
        if let Ok(runtime) = Stopping::join(runtime, driver) {
            runtime.shutdown_background();
        }
    }
}

fn take<T>(slot: &Mutex<Option<T>>) -> Option<T> {
    slot.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// The orderly stop, on a thread that may block: the requests still
/// finishing in the background (releases, clean-ups) get up to
/// [`DROP_WAIT`], the Locker is dropped (its background tasks end), and
/// the threads get up to [`DROP_WAIT`] to stop.
fn stop(runtime: Runtime, locker: AsyncLocker) {
    runtime.block_on(async {
        let _ = tokio::time::timeout(DROP_WAIT, locker.admin().wait_for_background()).await;
    });
    {
        let _ours = runtime.enter();
        drop(locker);
    }
    runtime.shutdown_timeout(DROP_WAIT);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A Shared over a node that is never reached (building does no I/O),
    /// and a task on its runtime that holds `alive` until the runtime ends.
    fn shared_holding(alive: &Arc<()>) -> Shared {
        let rt = runtime();
        let locker = {
            let _in = rt.enter();
            AsyncLocker::new(["redis://127.0.0.1:1"]).expect("valid settings")
        };
        let held = alive.clone();
        rt.spawn(async move {
            let _held = held;
            std::future::pending::<()>().await;
        });
        Shared::new(rt, locker)
    }

    #[test]
    fn dropping_the_last_handle_stops_the_runtime() {
        let alive = Arc::new(());
        let shared = shared_holding(&alive);
        assert_eq!(Arc::strong_count(&alive), 2);
        let started = Instant::now();
        drop(shared);
        // The runtime is gone, and with it every task it ran.
        assert_eq!(Arc::strong_count(&alive), 1);
        assert!(started.elapsed() < 2 * DROP_WAIT + Duration::from_millis(500));
    }

    #[test]
    fn dropping_it_inside_a_runtime_stops_it_without_a_panic() {
        let alive = Arc::new(());
        let shared = shared_holding(&alive);
        let theirs = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        theirs.block_on(async move {
            assert!(matches!(shared.usable(), Err(Error::InsideRuntime)));
            drop(shared);
        });
        // Stopped on a thread of its own: within the bounds.
        let deadline = Instant::now() + 2 * DROP_WAIT + Duration::from_secs(2);
        while Arc::strong_count(&alive) > 1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(Arc::strong_count(&alive), 1);
    }

    #[test]
    fn a_thread_without_a_runtime_may_block() {
        let alive = Arc::new(());
        let shared = shared_holding(&alive);
        assert!(shared.usable().is_ok());
        assert!(!shared.forked());
        assert_eq!(shared.block_on(async { 7 }).unwrap(), 7);
    }
}
