//! What a node's recent requests say about it: the back-off after a
//! refused connection, and the requests it still owes.

use std::sync::Arc;
use std::time::Duration;

use redis::RedisError;

use super::Request;

/// What the node's recent requests say about it: the backoff after a
/// refused connection and the requests it still owes. A cluster keeps this
/// per hash slot, so one dead or stalled shard does not hold up the
/// others' locks.
pub(super) enum Health {
    Whole(Arc<ServerHealth>),
    PerSlot(std::sync::Mutex<std::collections::HashMap<u16, Arc<ServerHealth>>>),
}

#[derive(Default)]
pub(super) struct ServerHealth {
    /// After a refused connection, requests fail at once until this
    /// instant, instead of each one trying to connect again.
    down: std::sync::Mutex<Backoff>,
    /// Whether `down` holds anything but the default: a healthy node's
    /// requests, every lock's, then skip its lock.
    troubled: std::sync::atomic::AtomicBool,
    /// Requests the client gave up on that the node has not answered yet.
    pub(super) owed: Arc<Owed>,
}

impl ServerHealth {
    fn backoff(&self) -> std::sync::MutexGuard<'_, Backoff> {
        self.down.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The back-off's end and cause, while it lasts.
    /// `now` is called only while in trouble: a healthy node's requests
    /// do not read the clock here.
    pub(super) fn backing_off(
        &self,
        now: impl FnOnce() -> std::time::Instant,
    ) -> Option<BackingOff> {
        if !self.troubled.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        let now = now();
        let b = self.backoff();
        b.until
            .filter(|&until| now < until)
            .map(|until| (until, b.cause.clone()))
    }

    /// A connection failed (with `cause`, if known).
    pub(super) fn failed(&self, cause: Option<Arc<RedisError>>) {
        let mut b = self.backoff();
        b.failed(std::time::Instant::now(), cause);
        self.troubled
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// The node answered: any back-off is over.
    pub(super) fn answered(&self) {
        if self.troubled.load(std::sync::atomic::Ordering::Acquire) {
            let mut b = self.backoff();
            *b = Backoff::default();
            self.troubled
                .store(false, std::sync::atomic::Ordering::Release);
        }
    }
}

/// When a back-off ends, and why it started.
pub(super) type BackingOff = (std::time::Instant, Option<Arc<RedisError>>);

/// Requests whose caller timed out but which are still queued on the
/// connection. While any is unanswered the node is not sent anything new:
/// it would only queue behind them, time out as well and pile more work on
/// a node that is already behind (congestion collapse). The oldest owed
/// request is the probe: once the node answers it, requests flow again.
#[derive(Default)]
pub(super) struct Owed {
    /// How many are owed, readable without the lock (almost always zero);
    /// changed only under `since`'s lock, so the two agree.
    count: std::sync::atomic::AtomicUsize,
    /// Since when requests have been owed, while any is.
    since: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Owed {
    /// How many are owed and since when, if any.
    pub(super) fn pending(&self) -> Option<(usize, std::time::Instant)> {
        use std::sync::atomic::Ordering;
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        let since = self.lock();
        since.map(|since| (self.count.load(Ordering::Acquire), since))
    }

    fn add(&self) {
        let mut since = self.lock();
        self.count
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        since.get_or_insert_with(std::time::Instant::now);
    }

    fn paid(&self) {
        use std::sync::atomic::Ordering;
        let mut since = self.lock();
        let left = self.count.load(Ordering::Acquire).saturating_sub(1);
        self.count.store(left, Ordering::Release);
        if left == 0 {
            *since = None;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<std::time::Instant>> {
        self.since.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Keeps waiting, in the background, for a request its caller gave up on,
/// and counts it as owed until the node answers it (or it is written off).
pub(super) fn owe<T: Send + 'static>(owed: &Arc<Owed>, request: Request<T>, timeout: Duration) {
    let owed = owed.clone();
    owed.add();
    tokio::spawn(async move {
        let _ = tokio::time::timeout(write_off_after(timeout), request).await;
        owed.paid();
    });
}

/// How long a request given up on is still waited for before it is
/// written off (the connection is then presumed dead, and new requests go
/// out again: at most one burst of given-up work per this period).
pub(crate) fn write_off_after(timeout: Duration) -> Duration {
    (8 * timeout).max(Duration::from_secs(2))
}

/// How long requests to a node that refused a connection skip it.
#[derive(Clone, Debug, Default)]
pub(super) struct Backoff {
    until: Option<std::time::Instant>,
    next: Duration,
    /// Why the last connection failed (NOAUTH, refused, ...): the errors
    /// of the back-off carry it, so they say more than "moments ago".
    cause: Option<Arc<redis::RedisError>>,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(50);
    const MAX: Duration = Duration::from_millis(250);

    pub(super) fn failed(
        &mut self,
        now: std::time::Instant,
        cause: Option<Arc<redis::RedisError>>,
    ) {
        let wait = self.next.clamp(Self::FIRST, Self::MAX);
        self.until = Some(now + wait);
        self.next = wait * 2;
        self.cause = cause;
    }
}
