//! Requests a Locker finishes in the background: those to slower nodes
//! after a quorum already answered, and releases of dropped leases. Counted,
//! so a process about to exit can wait for them. A lease's requests still
//! running there are flagged per node ([`InFlight`]), so that its release
//! to a node follows them.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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

/// Which nodes still have a request of a lease running in the
/// background (see [`raise`]), bit `i` for node `i`, for a release that
/// must not overtake them there. Eight bytes in the lease's ownership
/// rather than a handle on the task, which would keep the whole task
/// allocated for as long as the lease lives.
#[derive(Default)]
pub(crate) struct InFlight(AtomicU64);

impl InFlight {
    /// The nodes whose request still runs, as bits.
    pub(crate) fn nodes(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// What holds an [`InFlight`] flag, and the notifier its waiters sleep
/// on: the lease's own, so a bit that comes down wakes only the tasks
/// that wait for that lease.
pub(crate) trait HoldsInFlight: Send + Sync + 'static {
    fn in_flight(&self) -> &InFlight;

    /// Woken whenever a bit comes down; it may be woken for other reasons
    /// too (its waiters look again).
    fn in_flight_wake(&self) -> &Notify;
}

/// Raises `owner`'s flag for the nodes in `nodes` (bit `i` for node `i`)
/// until the returned guard lowers them one by one ([`Raised::lower`]) or
/// is dropped: the caller moves the guard into the task that finishes the
/// requests, so every bit comes down when that task ends, completed or
/// dropped with its runtime.
pub(crate) fn raise<O: HoldsInFlight>(owner: Arc<O>, nodes: u64) -> Raised<O> {
    owner.in_flight().0.fetch_or(nodes, Ordering::Release);
    Raised { owner, nodes }
}

/// Resolves once the bits `nodes` of `owner`'s flag are down: no request
/// to those nodes still runs in the background (`u64::MAX`: to any node).
///
/// Cancel safety: dropping the future loses nothing.
pub(crate) async fn lowered<O: HoldsInFlight + ?Sized>(owner: &O, nodes: u64) {
    // Most calls find the bits down: no waiter to register.
    if owner.in_flight().nodes() & nodes == 0 {
        return;
    }
    loop {
        let notified = owner.in_flight_wake().notified();
        tokio::pin!(notified);
        // Registered before the check, so a bit lowered in between still
        // wakes us.
        notified.as_mut().enable();
        if owner.in_flight().nodes() & nodes == 0 {
            return;
        }
        notified.await;
    }
}

/// Keeps bits of an [`InFlight`] flag raised; lowers those still up and
/// wakes the waiters when dropped.
pub(crate) struct Raised<O: HoldsInFlight> {
    owner: Arc<O>,
    /// The bits this guard raised and has not lowered yet.
    nodes: u64,
}

impl<O: HoldsInFlight> Raised<O> {
    /// Node `i`'s request finished: its bit comes down, and a release
    /// waiting for that node goes ahead.
    pub(crate) fn lower(&mut self, i: usize) {
        self.lower_bits(1u64 << i);
    }

    fn lower_bits(&mut self, bits: u64) {
        let bits = bits & self.nodes;
        if bits != 0 {
            self.nodes &= !bits;
            self.owner.in_flight().0.fetch_and(!bits, Ordering::Release);
            self.owner.in_flight_wake().notify_waiters();
        }
    }
}

impl<O: HoldsInFlight> Drop for Raised<O> {
    fn drop(&mut self) {
        self.lower_bits(u64::MAX);
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
        wake: Notify,
    }

    impl HoldsInFlight for Owner {
        fn in_flight(&self) -> &InFlight {
            &self.in_flight
        }

        fn in_flight_wake(&self) -> &Notify {
            &self.wake
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_raised_flag_comes_down_when_its_task_ends() {
        let bg = Arc::new(Background::default());
        let owner = Arc::new(Owner::default());
        lowered(&*owner, u64::MAX).await; // never raised
        let raised = raise(owner.clone(), u64::MAX);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        bg.spawn(async move {
            let _raised = raised;
            let _ = rx.await;
        });
        let early = tokio::time::timeout(Duration::from_secs(1), lowered(&*owner, u64::MAX)).await;
        assert!(early.is_err(), "down while its task still ran");
        tx.send(()).unwrap();
        lowered(&*owner, u64::MAX).await;
        bg.idle().await;
    }

    #[tokio::test(start_paused = true)]
    async fn each_node_comes_down_on_its_own() {
        let owner = Arc::new(Owner::default());
        let mut raised = raise(owner.clone(), 0b11000);
        assert_eq!(owner.in_flight.nodes(), 0b11000);
        // Nodes that were never raised are down already.
        lowered(&*owner, 0b00111).await;
        let waiting = tokio::spawn({
            let owner = owner.clone();
            async move { lowered(&*owner, 1 << 3).await }
        });
        tokio::task::yield_now().await;
        raised.lower(4);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiting.is_finished(), "down when another node came down");
        raised.lower(3);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("down once its node came down")
            .unwrap();
        // Lowering twice changes nothing, and a guard that is dropped
        // lowers only what it still holds up: node 4, raised again by
        // another guard, stays up.
        raised.lower(3);
        let again = raise(owner.clone(), 1 << 4);
        drop(raised);
        assert_eq!(owner.in_flight.nodes(), 1 << 4);
        drop(again);
        lowered(&*owner, u64::MAX).await;
    }

    #[test]
    fn a_raised_flag_comes_down_when_its_runtime_drops_the_task() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let bg = Arc::new(Background::default());
        let owner = Arc::new(Owner::default());
        let raised = raise(owner.clone(), u64::MAX);
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
            tokio::time::timeout(Duration::from_secs(5), lowered(&*owner, u64::MAX))
                .await
                .expect("the dropped task lowered it");
        });
    }
}
