//! The one interface every measured client implements (redlease, the raw
//! redis-rs baseline, rslock), so each workload is written once and every
//! client runs exactly the same loop. Static dispatch: no boxing per call.

use std::future::Future;
use std::time::Duration;

use redlease::{Locker, RetryPolicy};

/// Any error a bench run can hit; the run stops at the first one.
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;

/// TTL of every lock in every workload (the issue fixes it at 10 s).
pub const TTL: Duration = Duration::from_secs(10);
/// Idle expiry of each lock's fencing counter (`<key>:fence`), for the
/// client with fencing on. Short, so the counters of the many fresh keys a
/// run creates leave Redis a minute later (the library's default is 10
/// minutes; the commands cost the same).
pub const FENCE_EXPIRY: Duration = Duration::from_secs(60);
/// How long a blocking acquire may wait before the run fails.
pub const WAIT: Duration = Duration::from_secs(30);
/// Sleep between attempts on a busy lock, uniform in [MIN, MAX]. Small so
/// that the contended figures show the lock, not a long back-off.
pub const RETRY_MIN: Duration = Duration::from_millis(1);
pub const RETRY_MAX: Duration = Duration::from_millis(5);

/// The Redis key for a lock name; all clients use the library's scheme so
/// every client sends keys of the same shape and length.
pub fn key_for(name: &str) -> String {
    format!("redlease:{{{name}}}")
}

/// The key of a lock's fencing counter, as the library names it.
pub fn fence_key_for(name: &str) -> String {
    format!("{}:fence", key_for(name))
}

/// A lock client under test.
pub trait LockClient: Send + Sync + 'static {
    /// What a held lock is.
    type Guard: Send + 'static;

    /// Short name for tables and JSON.
    fn label(&self) -> &'static str;

    /// Blocking acquire: retries a busy lock until it is held, or fails after
    /// at most [`WAIT`].
    fn acquire(&self, name: &str) -> impl Future<Output = Result<Self::Guard, BenchError>> + Send;

    /// Blocking shared (read) acquire, like [`acquire`](Self::acquire), for
    /// a client with read-write locks; the others fail (the runner never
    /// asks them: see `Workload::has_peers`).
    fn acquire_read(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Self::Guard, BenchError>> + Send {
        let error = format!(
            "{} has no read-write locks (asked to read {name})",
            self.label()
        );
        async move { Err(error.into()) }
    }

    /// Blocking acquire of one permit of the semaphore `name` of `permits`,
    /// like [`acquire`](Self::acquire), for a client with semaphores; the
    /// others fail (the runner never asks them: see `Workload::has_peers`).
    fn acquire_permit(
        &self,
        name: &str,
        permits: u32,
    ) -> impl Future<Output = Result<Self::Guard, BenchError>> + Send {
        let error = format!(
            "{} has no semaphores (asked for one of {permits} permits of {name})",
            self.label()
        );
        async move { Err(error.into()) }
    }

    /// Blocking acquire of every lock of `names`, held together, like
    /// [`acquire`](Self::acquire), for a client that can; the others fail
    /// (the runner never asks them: see `Workload::has_peers`).
    fn acquire_all(
        &self,
        names: &[String],
    ) -> impl Future<Output = Result<Self::Guard, BenchError>> + Send {
        let error = format!(
            "{} takes no several locks at once (asked for {names:?})",
            self.label()
        );
        async move { Err(error.into()) }
    }

    /// Gives the lock back; an error if it was no longer ours.
    fn release(&self, guard: Self::Guard) -> impl Future<Output = Result<(), BenchError>> + Send;
}

/// How the bench configures the library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The defaults.
    Default,
    /// Fencing tokens on (`LockerBuilder::fencing`).
    Fenced,
    /// The clock-jump guard off (`Advanced::clock_jump_guard`): no
    /// `PEXPIRETIME` with each acquire, to show what the guard costs.
    Unguarded,
    /// The express connection on (`Advanced::express_connection`): a lone
    /// request writes and reads its own connection.
    Express,
}

/// The library, configured as a user would for this bench.
pub struct Redlease {
    locker: Locker,
    variant: Variant,
}

impl Redlease {
    /// The retry policy every blocking acquire uses.
    pub fn policy() -> RetryPolicy {
        RetryPolicy::within(WAIT).delay(RETRY_MIN, RETRY_MAX)
    }

    /// One Locker over `urls`, shared by all workers (one multiplexed
    /// connection per node), configured as `variant` says. Must run inside
    /// the Tokio runtime.
    pub fn new(urls: &[String], variant: Variant) -> Result<Self, BenchError> {
        let mut builder = Locker::builder(urls)
            // The bench's servers are brand new (none can have lost a
            // lock), and it measures locks, not the quarantine's wait.
            .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO))
            .ttl(TTL)
            .retry(Self::policy());
        match variant {
            Variant::Default => {}
            Variant::Fenced => {
                builder = builder
                    .fencing(true)
                    .advanced(|a| a.fence_expiry(FENCE_EXPIRY))
            }
            Variant::Unguarded => builder = builder.advanced(|a| a.clock_jump_guard(false)),
            Variant::Express => builder = builder.advanced(|a| a.express_connection(true)),
        }
        Ok(Redlease {
            locker: builder.build()?,
            variant,
        })
    }

    /// How many of the nodes hold each permit of a semaphore of `permits`:
    /// `n * N / (N + 1) + 1` of `n` nodes (all 5 of 5 for 4 permits).
    pub fn permit_quorum(&self, permits: u32) -> usize {
        self.locker.semaphore("x", permits).quorum()
    }

    /// The Redis keys the library uses for `name`: the lock and its
    /// fencing counter.
    pub fn keys(&self, name: &str) -> (String, String) {
        (
            self.locker.admin().key(name),
            self.locker.admin().fence_key(name),
        )
    }
}

impl LockClient for Redlease {
    type Guard = redlease::Lease;

    fn label(&self) -> &'static str {
        match self.variant {
            Variant::Default => "redlease",
            Variant::Fenced => "redlease+fence",
            Variant::Unguarded => "no-clock-guard",
            Variant::Express => "redlease+express",
        }
    }

    async fn acquire(&self, name: &str) -> Result<Self::Guard, BenchError> {
        Ok(self.locker.lock(name).await?)
    }

    async fn acquire_read(&self, name: &str) -> Result<Self::Guard, BenchError> {
        Ok(self.locker.read_lock(name).await?)
    }

    async fn acquire_permit(&self, name: &str, permits: u32) -> Result<Self::Guard, BenchError> {
        // Over 5 nodes, 4 permits need all 5 nodes for each permit (no
        // node may fail), which the library refuses unless accepted: the
        // bench measures that semaphore, so it accepts it. On one node, or
        // wherever a node may fail, this changes nothing.
        let semaphore = self.locker.semaphore(name, permits).allow_no_failures();
        Ok(semaphore.acquire().await?)
    }

    async fn acquire_all(&self, names: &[String]) -> Result<Self::Guard, BenchError> {
        // All or none, one lease for them all: one script call per node
        // to take them, one to give them back.
        Ok(self.locker.lock_all(names.iter().cloned()).await?)
    }

    async fn release(&self, lease: Self::Guard) -> Result<(), BenchError> {
        Ok(lease.release().await?)
    }
}

/// The library without `lock_all`: several locks taken one after another
/// with `lock`, in the order given, and released in reverse, as a caller
/// holding nested locks would. Its own `Locker`, with the defaults (as the
/// `redlease` client's).
pub struct Nested {
    lib: Redlease,
}

impl Nested {
    /// Must run inside the Tokio runtime.
    pub fn new(urls: &[String]) -> Result<Self, BenchError> {
        Ok(Nested {
            lib: Redlease::new(urls, Variant::Default)?,
        })
    }
}

impl LockClient for Nested {
    /// The leases in the order they were taken.
    type Guard = Vec<redlease::Lease>;

    fn label(&self) -> &'static str {
        "nested"
    }

    async fn acquire(&self, name: &str) -> Result<Self::Guard, BenchError> {
        Ok(vec![self.lib.locker.lock(name).await?])
    }

    async fn acquire_all(&self, names: &[String]) -> Result<Self::Guard, BenchError> {
        let mut leases = Vec::with_capacity(names.len());
        for name in names {
            leases.push(self.lib.locker.lock(name.as_str()).await?);
        }
        Ok(leases)
    }

    async fn release(&self, leases: Self::Guard) -> Result<(), BenchError> {
        for lease in leases.into_iter().rev() {
            lease.release().await?;
        }
        Ok(())
    }
}
