//! One timer for all of a node's requests.
//!
//! Every request to a node is bounded by a timeout. A tokio timer per
//! request enters and leaves the runtime's timer wheel every time, and
//! when requests come one at a time (a single task locking and releasing)
//! it also wakes the parked timer driver each time: in a throw-away
//! measurement on the 2-core test machine, a request answered by another
//! task cost about 1.2 µs more CPU with a tokio timeout than without, and
//! about 0.25 µs with the watcher below; with 64 requests in flight both
//! cost about 0.2 µs. A node's requests share one or a few timeouts and
//! mostly arrive in deadline order, so one watcher task per node serves
//! them all:
//!
//! - a waiting request writes its deadline and waker into a slot (one
//!   short lock) and frees the slot when it is answered or dropped
//!   (another);
//! - the watcher sleeps until the earliest deadline still waiting, marks
//!   every slot whose deadline has passed, wakes those requests, and sleeps
//!   again. While requests flow it wakes about once per timeout, not once
//!   per request, and it is told only when a request's deadline is earlier
//!   than the one it sleeps to.
//!
//! The bound is a tokio timeout's: a request that is not ready by its
//! deadline returns [`Elapsed`] within the timer's granularity (about a
//! millisecond) plus one scheduling hop for the watcher. Like
//! `tokio::time::timeout`, a request that is ready when polled is returned
//! even if its deadline has passed.
//!
//! The watcher runs on the runtime of the request that started it, and a
//! request is only left to it when polled on that same runtime: a request
//! polled on another one (a Locker shared by two runtimes, one of them
//! perhaps no longer driven) falls back to a tokio timer of its own. If the
//! watcher's runtime shuts down, the next request starts a new one.
//!
//! Cancel safety: dropping a [`Within`] frees its slot. The bounded future
//! is only borrowed, so a caller that gave up on it keeps it (the node
//! awaits given-up requests in the background, see `node::owe`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
#[cfg(test)]
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::{Instant, Sleep};

/// A node's request deadlines and the task that enforces them. Dropping it
/// stops the task.
pub(crate) struct Deadlines {
    shared: Arc<Shared>,
}

/// The deadline passed before the future was ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Elapsed;

struct Shared {
    slots: Mutex<Slots>,
    /// Tells the watcher to look again: an earlier deadline than the one it
    /// sleeps to, or the node is gone. A notification that finds the watcher
    /// busy is kept for its next wait, so none is lost.
    rearm: tokio::sync::Notify,
}

#[derive(Default)]
struct Slots {
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// The deadline the watcher sleeps to (`None`: it sleeps until told).
    /// No waiting slot has an earlier one.
    armed: Option<Instant>,
    /// The runtime the watcher runs on, while it runs.
    watcher: Option<tokio::runtime::Id>,
    closed: bool,
}

enum Slot {
    Free,
    Waiting { deadline: Instant, waker: Waker },
    Elapsed,
}

impl Deadlines {
    pub(crate) fn new() -> Self {
        let shared = Arc::new(Shared {
            slots: Mutex::default(),
            rearm: tokio::sync::Notify::new(),
        });
        Deadlines { shared }
    }

    /// `future`, bounded by `timeout` from now.
    #[cfg(test)]
    pub(crate) fn within<F: Future + Unpin>(&self, timeout: Duration, future: F) -> Within<'_, F> {
        self.until(Instant::now() + timeout, future)
    }

    /// `future`, bounded by `deadline`.
    pub(crate) fn until<F: Future + Unpin>(&self, deadline: Instant, future: F) -> Within<'_, F> {
        Within {
            deadlines: self,
            deadline,
            wait: Wait::Unregistered,
            future,
        }
    }

    #[cfg(test)]
    fn slots_in_use(&self) -> usize {
        let slots = self.shared.lock();
        slots.slots.len() - slots.free.len()
    }
}

impl Drop for Deadlines {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.rearm.notify_one();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Slots {
    fn insert(&mut self, deadline: Instant, waker: Waker) -> usize {
        let slot = Slot::Waiting { deadline, waker };
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        }
    }

    fn remove(&mut self, i: usize) {
        self.slots[i] = Slot::Free;
        self.free.push(i);
    }

    /// Marks every waiting slot whose deadline is at or before `now`,
    /// returning their wakers, and arms the earliest deadline left.
    fn expire(&mut self, now: Instant) -> Vec<Waker> {
        let mut woken = Vec::new();
        let mut earliest: Option<Instant> = None;
        for slot in &mut self.slots {
            if let Slot::Waiting { deadline, .. } = slot {
                if *deadline <= now {
                    if let Slot::Waiting { waker, .. } = std::mem::replace(slot, Slot::Elapsed) {
                        woken.push(waker);
                    }
                } else {
                    earliest = Some(earliest.map_or(*deadline, |e| e.min(*deadline)));
                }
            }
        }
        self.armed = earliest;
        woken
    }
}

/// A future bounded by a deadline, from [`Deadlines::within`].
#[must_use = "futures do nothing unless polled"]
pub(crate) struct Within<'a, F> {
    deadlines: &'a Deadlines,
    deadline: Instant,
    wait: Wait,
    future: F,
}

enum Wait {
    /// Not polled yet, or answered.
    Unregistered,
    /// Left to the watcher, in this slot.
    Watched(usize),
    /// Polled on another runtime than the watcher's: a timer of its own.
    Own(Pin<Box<Sleep>>),
}

impl<F: Future + Unpin> Future for Within<'_, F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if let Poll::Ready(value) = Pin::new(&mut this.future).poll(cx) {
            this.unregister();
            return Poll::Ready(Ok(value));
        }
        let shared = &this.deadlines.shared;
        match &mut this.wait {
            Wait::Unregistered => {
                let runtime = Handle::current().id();
                let mut slots = shared.lock();
                if slots.watcher.is_some_and(|id| id != runtime) {
                    drop(slots);
                    let mut sleep = Box::pin(tokio::time::sleep_until(this.deadline));
                    if sleep.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Err(Elapsed));
                    }
                    this.wait = Wait::Own(sleep);
                    return Poll::Pending;
                }
                // A deadline already past is left to the watcher too: it
                // sleeps to no later than it (`armed`), so it wakes at once.
                this.wait = Wait::Watched(slots.insert(this.deadline, cx.waker().clone()));
                let start = slots.watcher.is_none();
                let earlier = slots.armed.is_none_or(|armed| this.deadline < armed);
                if start || earlier {
                    slots.armed = Some(this.deadline);
                }
                if start {
                    slots.watcher = Some(runtime);
                    drop(slots);
                    tokio::spawn(watch(Stopped(shared.clone())));
                } else if earlier {
                    drop(slots);
                    shared.rearm.notify_one();
                }
                Poll::Pending
            }
            Wait::Watched(i) => {
                let i = *i;
                let mut slots = shared.lock();
                match &mut slots.slots[i] {
                    Slot::Waiting { waker, .. } => {
                        if !waker.will_wake(cx.waker()) {
                            *waker = cx.waker().clone();
                        }
                        Poll::Pending
                    }
                    Slot::Elapsed | Slot::Free => {
                        slots.remove(i);
                        this.wait = Wait::Unregistered;
                        Poll::Ready(Err(Elapsed))
                    }
                }
            }
            Wait::Own(sleep) => match sleep.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<F> Within<'_, F> {
    fn unregister(&mut self) {
        if let Wait::Watched(i) = std::mem::replace(&mut self.wait, Wait::Unregistered) {
            self.deadlines.shared.lock().remove(i);
        }
    }
}

impl<F> Drop for Within<'_, F> {
    fn drop(&mut self) {
        self.unregister();
    }
}

/// Clears the watcher's place however its task ends, polled or not (a
/// runtime that shuts down drops it), so the next request starts a new one.
struct Stopped(Arc<Shared>);

impl Drop for Stopped {
    fn drop(&mut self) {
        self.0.lock().watcher = None;
    }
}

/// The watcher: sleeps to the earliest deadline, wakes what has passed,
/// until the node is dropped or its runtime shuts down.
async fn watch(stopped: Stopped) {
    let shared = &stopped.0;
    loop {
        let (armed, woken) = {
            let mut slots = shared.lock();
            if slots.closed {
                return;
            }
            let woken = slots.expire(Instant::now());
            (slots.armed, woken)
        };
        woken.into_iter().for_each(Waker::wake);
        match armed {
            Some(deadline) => {
                tokio::select! {
                    () = tokio::time::sleep_until(deadline) => {}
                    () = shared.rearm.notified() => {}
                }
            }
            None => shared.rearm.notified().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::pending;

    const SHORT: Duration = Duration::from_millis(30);

    #[tokio::test]
    async fn a_future_that_never_answers_elapses_at_its_deadline() {
        let deadlines = Deadlines::new();
        let started = std::time::Instant::now();
        let result = deadlines.within(SHORT, pending::<()>()).await;
        assert_eq!(result, Err(Elapsed));
        let took = started.elapsed();
        assert!(took >= SHORT, "elapsed early: {took:?}");
        assert!(took < Duration::from_secs(2), "elapsed late: {took:?}");
        assert_eq!(deadlines.slots_in_use(), 0);
    }

    #[tokio::test]
    async fn an_answer_is_returned_and_its_slot_freed() {
        let deadlines = Deadlines::new();
        for k in 0..100 {
            let answer = deadlines
                .within(
                    Duration::from_secs(5),
                    Box::pin(async move {
                        tokio::task::yield_now().await;
                        k
                    }),
                )
                .await;
            assert_eq!(answer, Ok(k));
        }
        assert_eq!(deadlines.slots_in_use(), 0);
        assert!(deadlines.shared.lock().slots.len() <= 1, "slots are reused");
    }

    #[tokio::test]
    async fn an_earlier_deadline_after_a_later_one_is_kept() {
        let deadlines = Arc::new(Deadlines::new());
        // The watcher first sleeps to a deadline 10 s away ...
        let long = {
            let deadlines = deadlines.clone();
            tokio::spawn(async move {
                deadlines
                    .within(Duration::from_secs(10), pending::<()>())
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        // ... and must wake for this one well before.
        let started = std::time::Instant::now();
        let result = deadlines.within(SHORT, pending::<()>()).await;
        assert_eq!(result, Err(Elapsed));
        assert!(started.elapsed() < Duration::from_secs(2));
        long.abort();
        let _ = long.await;
        assert_eq!(
            deadlines.slots_in_use(),
            0,
            "an aborted request frees its slot"
        );
    }

    #[tokio::test]
    async fn a_dropped_request_frees_its_slot() {
        let deadlines = Deadlines::new();
        let mut request = Box::pin(deadlines.within(Duration::from_secs(10), pending::<()>()));
        let waker = futures_util::task::noop_waker();
        let polled = request.as_mut().poll(&mut Context::from_waker(&waker));
        assert!(polled.is_pending());
        assert_eq!(deadlines.slots_in_use(), 1);
        drop(request);
        assert_eq!(deadlines.slots_in_use(), 0);
    }

    #[tokio::test]
    async fn the_bounded_future_is_kept_for_its_caller() {
        let deadlines = Deadlines::new();
        let (tx, rx) = tokio::sync::oneshot::channel::<u8>();
        let mut rx = rx;
        assert_eq!(deadlines.within(SHORT, &mut rx).await, Err(Elapsed));
        tx.send(7).unwrap();
        assert_eq!(rx.await, Ok(7));
    }

    #[test]
    fn requests_on_another_runtime_are_still_bounded() {
        let deadlines = Deadlines::new();
        let first = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // The watcher starts on `first`, which is not driven afterwards.
        first.block_on(async {
            assert_eq!(deadlines.within(SHORT, pending::<()>()).await, Err(Elapsed));
        });
        let second = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        second.block_on(async {
            let result = tokio::time::timeout(
                Duration::from_secs(5),
                deadlines.within(SHORT, pending::<()>()),
            )
            .await;
            assert_eq!(result, Ok(Err(Elapsed)), "bounded by a timer of its own");
        });
        // Once `first` is gone, the watcher moves to the runtime in use.
        drop(first);
        assert_eq!(deadlines.shared.lock().watcher, None);
        second.block_on(async {
            assert_eq!(deadlines.within(SHORT, pending::<()>()).await, Err(Elapsed));
        });
        assert!(deadlines.shared.lock().watcher.is_some());
    }

    #[tokio::test]
    async fn dropping_the_deadlines_stops_the_watcher() {
        let deadlines = Deadlines::new();
        assert_eq!(deadlines.within(SHORT, pending::<()>()).await, Err(Elapsed));
        let shared = deadlines.shared.clone();
        assert!(shared.lock().watcher.is_some());
        drop(deadlines);
        for _ in 0..100 {
            if shared.lock().watcher.is_none() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the watcher still runs 1 s after its node was dropped");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_requests_with_mixed_deadlines_each_end_once() {
        let deadlines = Arc::new(Deadlines::new());
        let tasks: Vec<_> = (0..200u64)
            .map(|k| {
                let deadlines = deadlines.clone();
                tokio::spawn(async move {
                    let timeout = Duration::from_millis(5 + (k * 7) % 40);
                    let answer_after = Duration::from_millis((k * 13) % 60);
                    let request = Box::pin(tokio::time::sleep(answer_after));
                    let result = deadlines.within(timeout, request).await;
                    // Either outcome is allowed near the deadline; far
                    // from it only one is.
                    if answer_after + Duration::from_millis(20) < timeout {
                        assert_eq!(result, Ok(()), "request {k} answered in time");
                    }
                    if timeout + Duration::from_millis(20) < answer_after {
                        assert_eq!(result, Err(Elapsed), "request {k} past its deadline");
                    }
                })
            })
            .collect();
        for task in tasks {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("every request ends")
                .unwrap();
        }
        assert_eq!(deadlines.slots_in_use(), 0);
    }
}
