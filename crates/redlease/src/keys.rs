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

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag
/// (the part inside the first `{...}`, if not empty) or of the whole key,
/// modulo 16,384.
pub(crate) fn hash_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &bytes[open + 1..];
        rest.iter()
            .position(|&b| b == b'}')
            .filter(|&close| close > 0)
            .map(|close| &rest[..close])
    });
    crc16(tagged.unwrap_or(bytes)) % 16_384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
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
        assert_eq!(hash_slot(&keys.lock), hash_slot(&keys.fence));
        assert_eq!(hash_slot(&keys.lock), hash_slot("orders:42"));
    }

    #[test]
    fn hash_slots_match_redis() {
        // Values from the Redis Cluster specification and CLUSTER KEYSLOT.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(hash_slot("foo"), 12182);
        assert_eq!(hash_slot("{user1000}.following"), hash_slot("user1000"));
        assert_eq!(hash_slot("foo{}{bar}"), hash_slot("foo{}{bar}"));
        assert_ne!(hash_slot("foo{}{bar}"), hash_slot("bar"));
        assert_eq!(hash_slot("foo{{bar}}zap"), hash_slot("{bar"));
    }
}
