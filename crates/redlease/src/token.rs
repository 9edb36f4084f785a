//! The random value that proves ownership of a lock key.

use std::fmt;

/// 128 bits from a CSPRNG, hex-encoded for Redis. Fresh for every
/// acquisition; its `Debug` never shows the value, so it cannot leak into
/// logs. Shared, because every node's request and every renewal batch
/// carries it: a clone is a reference count, not a copy.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Token(std::sync::Arc<str>);

impl Token {
    pub(crate) fn generate() -> Self {
        // rand's thread-local generator is a CSPRNG (ChaCha12) seeded and
        // periodically reseeded from the operating system: as strong as
        // asking the OS each time, without a system call per lock.
        let text: [u8; 32] = hex(rand::random::<u128>());
        Token(
            std::str::from_utf8(&text)
                .expect("hex digits are ASCII")
                .into(),
        )
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// The low `4 * N` bits of `bits` as `N` lowercase hex digits, leading
/// zeros kept, as `{:0N$x}` would write them. By hand: on every lock, the
/// formatting machinery costs more than the random draw.
pub(crate) fn hex<const N: usize>(bits: u128) -> [u8; N] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = [0u8; N];
    for (i, digit) in text.iter_mut().enumerate() {
        *digit = HEX[((bits >> (4 * (N - 1 - i))) & 0xf) as usize];
    }
    text
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_128_bit_hex_and_distinct() {
        let a = Token::generate();
        let b = Token::generate();
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn hex_writes_what_format_writes() {
        for bits in [0u128, 1, 0xabc, u64::MAX as u128, u128::MAX, 1 << 127] {
            assert_eq!(&hex::<32>(bits), format!("{bits:032x}").as_bytes());
            let low = bits as u64;
            assert_eq!(&hex::<16>(bits), format!("{low:016x}").as_bytes());
        }
    }

    #[test]
    fn hex_keeps_leading_zeros_and_order() {
        // The same digits as `{:032x}` would give.
        for _ in 0..100 {
            let t = Token::generate();
            let back = u128::from_str_radix(t.as_str(), 16).unwrap();
            assert_eq!(format!("{back:032x}"), t.as_str());
        }
    }

    #[test]
    fn debug_never_shows_the_value() {
        let t = Token::generate();
        let shown = format!("{t:?}");
        assert!(!shown.contains(t.as_str()), "{shown}");
    }
}
