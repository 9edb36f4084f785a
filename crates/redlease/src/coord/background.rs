//! Requests a Locker finishes in the background: those to slower nodes
//! after a quorum already answered, and releases of dropped leases. Counted,
//! so a process about to exit can wait for them.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// Not `tokio_util::task::TaskTracker`: its `wait` resolves only once the
/// tracker is closed, and
/// [`Admin::wait_for_background`](crate::Admin::wait_for_background) must
/// wait for the tasks running now while the Locker stays open (closing and
/// reopening around each wait would race concurrent waits). A counter and
/// a `Notify` do exactly that.
#[derive(Default)]
pub(crate) struct Background {
    running: AtomicUsize,
    idle: Notify,
    /// Some [`InFlight`] flag came down.
    lowered: Notify,
}

/// Counts a task as finished when dropped: after it completes, panics or is
/// aborted alike.
struct Finished(Arc<Background>);

impl Drop for Finished {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Background {
    /// Spawns `task` on the current Tokio runtime and counts it.
    pub(crate) fn spawn(
        self: &Arc<Self>,
        task: impl Future<Output = ()> + Send + 'static,
    ) -> JoinHandle<()> {
        self.running.fetch_add(1, Ordering::AcqRel);
        let finished = Finished(self.clone());
        tokio::spawn(async move {
            let _finished = finished;
            task.await;
        })
    }

    /// Raises `flag` (found in `owner` by `field`) until the returned
    /// guard is dropped: the caller moves the guard into the task that
    /// finishes the requests, so the flag comes down when that task ends,
    /// completed or dropped with its runtime.
    pub(crate) fn raise<O: Send + Sync + 'static>(
        self: &Arc<Self>,
        owner: Arc<O>,
        field: fn(&O) -> &InFlight,
    ) -> Raised<O> {
        field(&owner).0.store(true, Ordering::Release);
        Raised {
            owner,
            field,
            background: self.clone(),
        }
    }

    /// Resolves once `flag` is down (see [`raise`](Self::raise)).
    ///
    /// Cancel safety: dropping the future loses nothing.
    pub(crate) async fn lowered(&self, flag: &InFlight) {
        loop {
            let notified = self.lowered.notified();
            tokio::pin!(notified);
            // Registered before the check, so a flag lowered in between
            // still wakes us.
            notified.as_mut().enable();
            if !flag.0.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }

    /// Resolves once no counted task is running.
    pub(crate) async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            // Registered before the check, so a task ending in between
            // still wakes us.
            notified.as_mut().enable();
            if self.running.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// Whether requests of a lease still run in the background (see
/// [`Background::raise`]), for a release that must not overtake them.
/// A byte in the lease's ownership rather than a handle on the task, which
/// would keep the whole task allocated for as long as the lease lives.
#[derive(Default)]
pub(crate) struct InFlight(AtomicBool);

/// Keeps an [`InFlight`] flag raised; lowers it and wakes the waiters when
/// dropped.
pub(crate) struct Raised<O> {
    owner: Arc<O>,
    field: fn(&O) -> &InFlight,
    background: Arc<Background>,
}

impl<O> Drop for Raised<O> {
    fn drop(&mut self) {
        (self.field)(&self.owner).0.store(false, Ordering::Release);
        self.background.lowered.notify_waiters();
    }
}

/// A Locker's long-running tasks (renewal, notifications), spawned on the
/// runtime of whoever first needs them. When that runtime ends, its tasks
/// end with it: [`running`](Self::running) then says so, and the owner
/// starts them again on the current runtime. Aborted when dropped.
#[derive(Default)]
pub(crate) struct RuntimeTasks(Vec<JoinHandle<()>>);

impl RuntimeTasks {
    /// Whether tasks were started and every one still runs.
    pub(crate) fn running(&self) -> bool {
        !self.0.is_empty() && self.0.iter().all(|t| !t.is_finished())
    }

    /// Ends them all (a restart, or for good).
    pub(crate) fn abort(&mut self) {
        self.0.drain(..).for_each(|t| t.abort());
    }

    /// Spawns `task` on the current runtime and keeps its handle.
    pub(crate) fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.0.push(tokio::spawn(task));
    }
}

impl Drop for RuntimeTasks {
    fn drop(&mut self) {
        self.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn idle_waits_for_every_task() {
        let bg = Arc::new(Background::default());
        bg.idle().await; // nothing running
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        bg.spawn(async move {
            let _ = rx.await;
        });
        let waiting = tokio::time::timeout(Duration::from_millis(50), bg.idle()).await;
        assert!(waiting.is_err(), "idle while a task runs");
        tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), bg.idle())
            .await
            .expect("idle once the task ended");
    }

    #[tokio::test]
    async fn an_aborted_task_counts_as_finished() {
        let bg = Arc::new(Background::default());
        let handle = bg.spawn(std::future::pending());
        handle.abort();
        tokio::time::timeout(Duration::from_secs(5), bg.idle())
            .await
            .expect("idle after abort");
    }

    #[derive(Default)]
    struct Owner {
        in_flight: InFlight,
    }

    #[tokio::test(start_paused = true)]
    async fn a_raised_flag_comes_down_when_its_task_ends() {
        let bg = Arc::new(Background::default());
        let owner = Arc::new(Owner::default());
        bg.lowered(&owner.in_flight).await; // never raised
        let raised = bg.raise(owner.clone(), |o| &o.in_flight);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        bg.spawn(async move {
            let _raised = raised;
            let _ = rx.await;
        });
        let early =
            tokio::time::timeout(Duration::from_secs(1), bg.lowered(&owner.in_flight)).await;
        assert!(early.is_err(), "down while its task still ran");
        tx.send(()).unwrap();
        bg.lowered(&owner.in_flight).await;
        bg.idle().await;
    }

    #[test]
    fn a_raised_flag_comes_down_when_its_runtime_drops_the_task() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let bg = Arc::new(Background::default());
        let owner = Arc::new(Owner::default());
        let raised = bg.raise(owner.clone(), |o| &o.in_flight);
        runtime.block_on(async {
            bg.spawn(async move {
                let _raised = raised;
                std::future::pending::<()>().await;
            });
        });
        drop(runtime);
        let other = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        other.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), bg.lowered(&owner.in_flight))
                .await
                .expect("the dropped task lowered it");
        });
    }
}
