//! The Redis names of a lock: its key, the fencing counter beside it, and
//! the channel its releases are announced on. Pure: no I/O.
//!
//! The resource sits in braces, a Redis Cluster hash tag, so the lock key,
//! its fencing counter and its channel all map to the same slot.

use std::sync::Arc;

/// The keys of one lock: the lock itself and its fencing counter, which
/// share a Redis Cluster hash slot.
#[derive(Clone, Debug)]
pub(crate) struct LockKeys {
    pub(crate) lock: Arc<str>,
    pub(crate) fence: Arc<str>,
    pub(crate) fence_expiry_ms: u64,
}

impl LockKeys {
    /// The keys of `resource` under `prefix`; the fencing counter is
    /// deleted after `fence_expiry_ms` without an acquisition.
    pub(crate) fn new(prefix: &str, resource: &str, fence_expiry_ms: u64) -> Self {
        let lock = lock_key(prefix, resource);
        LockKeys {
            fence: format!("{lock}:fence").into(),
            lock: lock.into(),
            fence_expiry_ms,
        }
    }
}

/// The lock key of `resource` under `prefix`.
pub(crate) fn lock_key(prefix: &str, resource: &str) -> String {
    format!("{prefix}{{{resource}}}")
}

/// The channel a lock's releases are announced on.
pub(crate) fn release_channel(lock_key: &str) -> String {
    format!("{lock_key}:released")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_locks_names_share_its_hash_tag() {
        let keys = LockKeys::new("app:", "orders:42", 600_000);
        assert_eq!(&*keys.lock, "app:{orders:42}");
        assert_eq!(&*keys.fence, "app:{orders:42}:fence");
        assert_eq!(release_channel(&keys.lock), "app:{orders:42}:released");
    }
}
