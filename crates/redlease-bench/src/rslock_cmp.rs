//! The `rslock` crate on the same workloads, for `--compare rslock`.
//!
//! rslock's own behaviour, as of 0.10: `lock()` sends `SET key val NX PX ttl`
//! to every node and waits for all of them; a failed attempt deletes its
//! value everywhere, then sleeps a random 0..retry_delay ms before the next
//! one; `unlock()` is best effort and reports nothing. We give it the same
//! keys and TTL, and a retry delay of 5 ms (uniform 0-4 ms; ours is 1-5 ms).

use crate::client::{key_for, BenchError, LockClient, RETRY_MAX, TTL, WAIT};

/// What `--compare rslock` runs.
pub struct Rslock {
    manager: rslock::LockManager,
}

impl Rslock {
    /// rslock's attempt cap: effectively unbounded, because the acquire
    /// below is bounded by [`WAIT`] instead, like the other clients.
    const ATTEMPTS: u32 = u32::MAX;

    /// One LockManager over `urls`, shared by all workers (its clones share
    /// the connections). Connects lazily, on the first lock.
    pub fn new(urls: &[String]) -> Result<Self, BenchError> {
        // LockManager::new unwraps bad URLs; check them first for a clean error.
        let clients = urls
            .iter()
            .map(|u| redis::Client::open(u.as_str()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut manager = rslock::LockManager::from_clients(clients);
        manager.set_retry(Self::ATTEMPTS, RETRY_MAX);
        Ok(Rslock { manager })
    }
}

impl LockClient for Rslock {
    type Guard = rslock::Lock;

    fn label(&self) -> &'static str {
        "rslock"
    }

    async fn acquire(&self, name: &str) -> Result<rslock::Lock, BenchError> {
        let key = key_for(name);
        match tokio::time::timeout(WAIT, self.manager.lock(key.as_bytes(), TTL)).await {
            Ok(Ok(lock)) => Ok(lock),
            Ok(Err(e)) => Err(format!("rslock: {key}: {e}").into()),
            Err(_) => Err(format!("rslock: {key} still busy after {WAIT:?}").into()),
        }
    }

    async fn release(&self, lock: rslock::Lock) -> Result<(), BenchError> {
        // Best effort in rslock: it cannot tell whether the lock was still ours.
        self.manager.unlock(&lock).await;
        Ok(())
    }
}
