//! The random value that proves ownership of a lock key.

use std::fmt;
use std::time::Duration;

/// The Locker's [`LockerTag`], then 128 bits from a CSPRNG, hex-encoded
/// for Redis (48 digits): the secret. The 128 random bits are fresh for
/// every acquisition and are what makes the token unguessable; the tag only
/// says which Locker took the lock. With an owner, `\tLABEL\tMS` follows
/// (see [`owner`](crate::core::owner)): the servers store the whole of it
/// for a hold, and show anyone who looks the owner, never the secret. Its
/// `Debug` never shows the value, so it cannot leak into logs.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Token(Box<str>);

impl Token {
    /// The secret's length: 48 hex digits.
    pub(crate) const LEN: usize = LockerTag::LEN + 32;

    /// A fresh token of the Locker tagged `tag`, naming `owner` (a checked
    /// label) if given, and the lease's lock-delay if not zero.
    pub(crate) fn generate(tag: &LockerTag, owner: Option<&str>, delay: Duration) -> Self {
        loop {
            // rand's thread-local generator is a CSPRNG (ChaCha12) seeded
            // and periodically reseeded from the operating system: as
            // strong as asking the OS each time, without a system call per
            // lock.
            let mut text = [0u8; Token::LEN];
            text[..LockerTag::LEN].copy_from_slice(&tag.0);
            text[LockerTag::LEN..].copy_from_slice(&hex::<32>(rand::random::<u128>()));
            let secret = std::str::from_utf8(&text).expect("hex digits are ASCII");
            match owner {
                None => return Token(secret.into()),
                // A label never holds its own lease's secret: what shows
                // the owner to anyone who looks would show it too.
                Some(label) if label.contains(&secret[LockerTag::LEN..]) => continue,
                Some(label) => {
                    let owned = format!("{secret}{}", crate::core::owner::suffix(label, delay));
                    return Token(owned.into());
                }
            }
        }
    }

    /// What the servers store: the secret, then the owner if any.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The secret alone.
    pub(crate) fn secret(&self) -> &str {
        &self.0[..Token::LEN]
    }

    /// What follows the secret: `\tLABEL\tMS`, or nothing.
    pub(crate) fn owner_part(&self) -> &str {
        &self.0[Token::LEN..]
    }

    /// A token as [`as_str`](Self::as_str) spells it (48 lowercase hex
    /// digits, then nothing or `\tLABEL\tMS` with a label that
    /// [`check_label`](crate::core::owner::check_label) takes), from an
    /// exported lease's handle; `None` otherwise.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let secret = text.get(..Token::LEN)?;
        let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
        if !secret.bytes().all(hex) {
            return None;
        }
        let rest = &text[Token::LEN..];
        if !rest.is_empty() && !crate::core::owner::is_owner_part(rest) {
            return None;
        }
        Some(Token(text.into()))
    }
}

/// 64 random bits as 16 hex digits, drawn once per Locker, that begin
/// every token it hands out. A refused acquire sees the holder's value, so
/// it can tell a lock held by another task of its own Locker, whose release
/// wakes the waiters in-process, from one held elsewhere, whose release
/// must be published to them (see refused.lua). Not a secret: it
/// grants nothing without the token's random part.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct LockerTag([u8; LockerTag::LEN]);

impl LockerTag {
    pub(crate) const LEN: usize = 16;

    pub(crate) fn generate() -> Self {
        LockerTag(hex::<16>(u128::from(rand::random::<u64>())))
    }

    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("hex digits are ASCII")
    }

    #[cfg(test)]
    fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for LockerTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockerTag({})", self.as_str())
    }
}

/// The id a release is announced with, so waiters can tell which nodes
/// confirmed the same release: 16 hex digits, kept on the stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReleaseId([u8; 16]);

impl ReleaseId {
    /// A fresh random id (64 bits), for a forced release.
    pub(crate) fn new() -> Self {
        ReleaseId(hex(u128::from(rand::random::<u64>())))
    }

    /// The id the release script announces the release of `token` with:
    /// the first 64 bits of its SHA-1, which the script computes itself
    /// (one argument less on every release) and which says nothing usable
    /// of the token.
    pub(crate) fn of(token: &Token) -> Self {
        let digest = sha1_smol::Sha1::from(token.as_str()).digest().bytes();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        ReleaseId(hex(u128::from(u64::from_be_bytes(first))))
    }

    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("hex digits are ASCII")
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
    fn tokens_are_the_tag_and_128_random_bits_in_hex_and_distinct() {
        let tag = LockerTag::generate();
        let a = Token::generate(&tag, None, Duration::ZERO);
        let b = Token::generate(&tag, None, Duration::ZERO);
        assert_eq!(a.as_str().len(), 48);
        assert!(a.as_str().chars().all(|c| c.is_ascii_hexdigit()));
        assert!(a.as_str().starts_with(tag.as_str()));
        assert!(a.as_str().as_bytes().starts_with(tag.as_bytes()));
        assert_ne!(a, b);
        assert_ne!(a.as_str()[16..], b.as_str()[16..]);
        let other = LockerTag::generate();
        assert_ne!(tag, other);
        assert!(!a.as_str().as_bytes().starts_with(other.as_bytes()));
    }

    #[test]
    fn a_release_id_is_what_the_release_script_computes() {
        // string.sub(redis.sha1hex(token), 1, 16); SHA-1 of
        // "0123456789abcdef" three times is
        // 480f0a5bfe9d1ec3f8936b9441f6e89d301711f5 (Python's hashlib).
        let token = Token::parse(&"0123456789abcdef".repeat(3)).unwrap();
        assert_eq!(ReleaseId::of(&token).as_str(), "480f0a5bfe9d1ec3");
        let tag = LockerTag::generate();
        let (a, b) = (
            Token::generate(&tag, None, Duration::ZERO),
            Token::generate(&tag, None, Duration::ZERO),
        );
        assert_ne!(ReleaseId::of(&a), ReleaseId::of(&b));
        assert!(!a.as_str().contains(ReleaseId::of(&a).as_str()));
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
        let tag = LockerTag::generate();
        for _ in 0..100 {
            let t = Token::generate(&tag, None, Duration::ZERO);
            let back = u128::from_str_radix(&t.as_str()[16..], 16).unwrap();
            assert_eq!(format!("{back:032x}"), t.as_str()[16..]);
        }
    }

    #[test]
    fn a_token_names_its_owner_after_the_secret_and_reads_back() {
        let tag = LockerTag::generate();
        let t = Token::generate(&tag, Some("build-7:4121 (./deploy.sh)"), Duration::ZERO);
        assert_eq!(t.secret().len(), 48);
        assert!(t.as_str().starts_with(t.secret()));
        assert!(t.owner_part().starts_with("\tbuild-7:4121 (./deploy.sh)\t"));
        assert_eq!(Token::parse(t.as_str()), Some(t.clone()));
        let secret = t.secret().to_string();
        for bad in [
            format!("{secret}\t"),
            format!("{secret}\tlabel"),
            format!("{secret}\tla|bel\t12"),
            format!("{secret}\tlabel\t"),
            format!("{secret}\tlabel\t12x"),
            format!("{secret}x"),
        ] {
            assert_eq!(Token::parse(&bad), None, "{bad:?}");
        }
        // Debug shows neither.
        assert!(!format!("{t:?}").contains(&secret));
    }

    #[test]
    fn debug_never_shows_the_value() {
        let t = Token::generate(&LockerTag::generate(), None, Duration::ZERO);
        let shown = format!("{t:?}");
        assert!(!shown.contains(t.as_str()), "{shown}");
    }
}
