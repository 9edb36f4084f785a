//! The Redis names of a lock: its key, the fencing counter beside it, and
//! the channel its releases are announced on. Pure: no I/O.
//!
//! The resource sits in braces, a Redis Cluster hash tag, so the lock key,
//! its fencing counter and its channel all map to the same slot.

use std::sync::Arc;

use crate::core::error::Error;

/// The longest lock key, `prefix{resource}`, in bytes (the fencing counter
/// and the release channel add at most 9 more).
///
/// Redis itself takes keys of up to 512 MB, but a lock's key travels with
/// every request the lock makes (acquire, each renewal, release, the
/// release notification), sits in every node's memory and shows up in
/// errors: a name read from untrusted input could make each of them cost
/// megabytes. Lock names are identifiers; 4 KiB holds any of them, a file
/// path (Linux's `PATH_MAX` is 4096) or a URL included.
pub(crate) const MAX_KEY_LEN: usize = 4096;

/// How much of a refused name an error shows: enough to recognise it.
const SHOWN: usize = 32;

/// Checks that `resource` can name a lock under `prefix`: not empty, and
/// its key within [`MAX_KEY_LEN`]. The one check every call that takes a
/// lock name makes, before any I/O; the error never echoes a long name.
pub(crate) fn check_resource(prefix: &str, resource: &str) -> Result<(), Error> {
    if resource.is_empty() {
        return Err(Error::invalid("resource", "the lock name is empty"));
    }
    let key_len = prefix.len() + resource.len() + "{}".len();
    if key_len > MAX_KEY_LEN {
        let room = MAX_KEY_LEN - prefix.len() - "{}".len();
        let shown = shorten(resource);
        return Err(Error::invalid(
            "resource",
            format!(
                "the lock name {shown} is {} bytes, longer than the {room} bytes its Redis key \
                 leaves it (a key is at most {MAX_KEY_LEN} bytes, redlease::MAX_KEY_LEN, and \
                 the {}-byte prefix and the braces take the rest)",
                resource.len(),
                prefix.len()
            ),
        ));
    }
    Ok(())
}

/// Checks a key prefix: no braces (the resource is the key's hash tag),
/// and room for a name within [`MAX_KEY_LEN`].
pub(crate) fn check_prefix(prefix: &str) -> Result<(), Error> {
    if prefix.contains(['{', '}']) {
        return Err(Error::invalid(
            "key_prefix",
            format!(
                "{} contains a brace; the resource name is the key's hash tag",
                shorten(prefix)
            ),
        ));
    }
    // Room for the braces and a one-byte name.
    if prefix.len() + "{x}".len() > MAX_KEY_LEN {
        return Err(Error::invalid(
            "key_prefix",
            format!(
                "{} is {} bytes: no lock key would fit in {MAX_KEY_LEN} bytes \
                 (redlease::MAX_KEY_LEN)",
                shorten(prefix),
                prefix.len()
            ),
        ));
    }
    Ok(())
}

/// `text` quoted, cut after [`SHOWN`] characters (with `…`) when longer.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("{:?}…", &text[..end]),
        None => format!("{text:?}"),
    }
}

/// The keys of one lock: the lock itself and its fencing counter, which
/// share a Redis Cluster hash slot.
#[derive(Clone, Debug)]
pub(crate) struct LockKeys {
    pub(crate) lock: Arc<str>,
    /// How long the fencing counter lives without an acquisition; 0: the
    /// claim draws no fencing token.
    pub(crate) fence_expiry_ms: u64,
}

impl LockKeys {
    /// The keys of `resource` under `prefix`; the fencing counter is
    /// deleted after `fence_expiry_ms` without an acquisition.
    pub(crate) fn new(prefix: &str, resource: &str, fence_expiry_ms: u64) -> Self {
        LockKeys {
            lock: shared_lock_key(prefix, resource),
            fence_expiry_ms,
        }
    }

    /// The fencing counter's key. Spelled out only when used: most locks
    /// draw no fencing token.
    pub(crate) fn fence(&self) -> String {
        suffixed(&self.lock, FENCE_SUFFIX)
    }
}

const FENCE_SUFFIX: &str = ":fence";
const RELEASED_SUFFIX: &str = ":released";

/// [`lock_key`] as an `Arc<str>` in one allocation: a short key is spelled
/// on the stack and copied once into the `Arc` (`String` into `Arc<str>`
/// would allocate twice). This runs for every lock.
fn shared_lock_key(prefix: &str, resource: &str) -> Arc<str> {
    const ON_STACK: usize = 256;
    let len = prefix.len() + resource.len() + 2;
    if len > ON_STACK {
        return lock_key(prefix, resource).into();
    }
    let mut text = [0u8; ON_STACK];
    let parts = [prefix.as_bytes(), b"{", resource.as_bytes(), b"}"];
    let mut at = 0;
    for part in parts {
        text[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    Arc::from(std::str::from_utf8(&text[..len]).expect("spelled from two strs and braces"))
}

/// The lock key of `resource` under `prefix`.
pub(crate) fn lock_key(prefix: &str, resource: &str) -> String {
    // By hand, in one allocation: this runs for every lock.
    let mut key = String::with_capacity(prefix.len() + resource.len() + 2);
    key.push_str(prefix);
    key.push('{');
    key.push_str(resource);
    key.push('}');
    key
}

/// The channel a lock's releases are announced on.
pub(crate) fn release_channel(lock_key: &str) -> String {
    suffixed(lock_key, RELEASED_SUFFIX)
}

/// The channel on which a release hands the lock of `lock_key` to a
/// waiter of the Locker tagged `tag` (see `coord::turn`): the release
/// channel, then `:` and the tag, so in the lock's hash slot.
pub(crate) fn own_channel(lock_key: &str, tag: &str) -> String {
    let mut text = release_channel(lock_key);
    text.push(':');
    text.push_str(tag);
    text
}

/// The channel on which every change of the name of `lock_key` is told
/// to its watchers (engine.lua, `E.changed`), in the lock's hash slot.
pub(crate) fn changed_channel(lock_key: &str) -> String {
    suffixed(lock_key, ":changed")
}

/// The key of the leader record of the election on `lock_key`
/// (proclaim.lua), in the lock's hash slot.
pub(crate) fn leader_key(lock_key: &str) -> String {
    suffixed(lock_key, ":leader")
}

fn suffixed(key: &str, suffix: &str) -> String {
    let mut text = String::with_capacity(key.len() + suffix.len());
    text.push_str(key);
    text.push_str(suffix);
    text
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
    fn the_release_script_announces_on_the_release_channel() {
        // The scripts spell the channels themselves (see engine.lua and
        // release.lua).
        let spelled = format!("key .. '{RELEASED_SUFFIX}'");
        assert!(include_str!("../protocol/scripts/release.lua").contains(&spelled));
        let own = format!("key .. '{RELEASED_SUFFIX}:' .. tag");
        assert!(include_str!("../protocol/scripts/engine.lua").contains(&own));
        assert_eq!(release_channel("app:{x}"), "app:{x}:released");
        assert_eq!(own_channel("app:{x}", "0a1b"), "app:{x}:released:0a1b");
    }

    #[test]
    fn a_shared_key_is_spelled_as_lock_key_spells_it() {
        let long = "r".repeat(300);
        for (prefix, resource) in [("app:", "orders:42"), ("", ""), ("p:", long.as_str())] {
            assert_eq!(
                &*shared_lock_key(prefix, resource),
                lock_key(prefix, resource)
            );
        }
    }

    #[test]
    fn a_locks_names_share_its_hash_tag() {
        let keys = LockKeys::new("app:", "orders:42", 600_000);
        assert_eq!(&*keys.lock, "app:{orders:42}");
        assert_eq!(keys.fence(), "app:{orders:42}:fence");
        assert_eq!(release_channel(&keys.lock), "app:{orders:42}:released");
        assert_eq!(hash_slot(&keys.lock), hash_slot(&keys.fence()));
        assert_eq!(hash_slot(&keys.lock), hash_slot("orders:42"));
    }

    #[test]
    fn names_are_checked_with_their_prefix() {
        let room = MAX_KEY_LEN - "app:".len() - 2;
        assert!(check_resource("app:", &"n".repeat(room)).is_ok());
        let long = "n".repeat(room + 1);
        let Err(Error::InvalidInput { field, reason }) = check_resource("app:", &long) else {
            panic!("a name one byte too long was accepted");
        };
        assert_eq!(field, "resource");
        assert!(
            reason.contains(&format!("is {} bytes", room + 1)),
            "{reason}"
        );
        assert!(
            reason.contains(&format!("\"{}\"…", "n".repeat(SHOWN))),
            "{reason}"
        );
        assert!(reason.len() < 300, "{reason}");
        let Err(Error::InvalidInput { reason, .. }) = check_resource("app:", "") else {
            panic!("an empty name was accepted");
        };
        assert_eq!(reason, "the lock name is empty");
        // A multi-byte character is not cut in half.
        assert!(check_resource("", &"é".repeat(MAX_KEY_LEN)).is_err());
    }

    #[test]
    fn a_prefix_must_leave_room_and_have_no_brace() {
        assert!(check_prefix("redlease:").is_ok());
        assert!(check_prefix(&"p".repeat(MAX_KEY_LEN - 3)).is_ok());
        assert!(check_prefix(&"p".repeat(MAX_KEY_LEN - 2)).is_err());
        assert!(check_prefix("app:{x}:").is_err());
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
