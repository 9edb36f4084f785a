//! [`Shared`]: what every handle of a blocking Locker shares: the
//! facade's own Tokio runtime, the async Locker it drives, and the
//! process they were made in.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

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

/// Worker threads of the facade's runtime. One: the callers block on
/// threads of their own, and the runtime only drives the sockets, timers
/// and background work, which are light. With two, a request woke
/// whichever worker was idle and its reply often arrived on the other,
/// so a single caller's cycle cost up to 1.4 times the CPU it costs with one
/// (`blocking_cost`, BENCHMARKS.md), and 8 threads at once ran no faster.
const WORKERS: usize = 1;

/// The name of the facade's threads (`top -H`, `ps -L`, a debugger).
const THREAD_NAME: &str = "redlease-blocking";

/// The runtime, the async Locker and the process id, shared by a blocking
/// Locker's clones, its leases and its requests. The threads stop when the
/// last of them is dropped.
pub(crate) struct Shared {
    /// `None` only while dropped.
    runtime: Option<Runtime>,
    /// `None` only while dropped.
    locker: Option<AsyncLocker>,
    /// The process the runtime's threads run in.
    pid: u32,
}

/// A multi-thread runtime of the facade's own.
///
/// # Panics
///
/// If the system refuses a thread or a file descriptor for it, as
/// `std::thread::spawn` panics when it cannot start a thread.
pub(crate) fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .thread_name(THREAD_NAME)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("redlease::blocking could not start its runtime threads: {e}"))
}

impl Shared {
    /// The shared state of a Locker whose `locker` runs on `runtime`.
    pub(crate) fn new(runtime: Runtime, locker: AsyncLocker) -> Shared {
        Shared {
            runtime: Some(runtime),
            locker: Some(locker),
            pid: std::process::id(),
        }
    }

    fn runtime(&self) -> &Runtime {
        self.runtime.as_ref().expect("the runtime lives until drop")
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
        self.runtime().block_on(work)
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
                let released = self.runtime().block_on(async move {
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
        if self.forked() {
            // The threads do not exist here, and locks they held may never
            // be released: touch nothing, and let the memory go with the
            // process.
            std::mem::forget(locker);
            std::mem::forget(runtime);
            return;
        }
        match Handle::try_current() {
            Err(e) if !e.is_thread_local_destroyed() => stop(runtime, locker),
            Err(_) => {
                drop(locker);
                runtime.shutdown_background();
            }
            // Nothing may block here: stop on a thread of its own.
            Ok(_) => {
                let slot = Arc::new(Mutex::new(Some((runtime, locker))));
                let theirs = slot.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("{THREAD_NAME}-stop"))
                    .spawn(move || {
                        if let Some((runtime, locker)) = take(&theirs) {
                            stop(runtime, locker);
                        }
                    });
                if spawned.is_err()
                    && let Some((runtime, locker)) = take(&slot)
                {
                    {
                        let _ours = runtime.enter();
                        drop(locker);
                    }
                    runtime.shutdown_background();
                }
            }
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
