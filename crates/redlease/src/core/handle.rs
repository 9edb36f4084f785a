//! An exported lease as a string: what another Locker, in another process
//! perhaps, needs to continue it (see `Lease::export`). Pure: no I/O.
//!
//! The text is `rlh2.MODE.TTL.TOKEN.PREFIX.NAMES.FENCES.CHECK`: `MODE` is
//! `x` (alone), `s` (a read hold) or `pN` (one of N permits), and for
//! several names one letter per name, `x` or `s` (a lone `x`: every name
//! alone); `TTL` the lease's TTL in milliseconds; `TOKEN` the lease's
//! token (48 hex digits, then `-` and its owner hex-encoded if it names
//! one), which is what lets the holder of the handle release the lease
//! and nobody else, so the handle is a secret like the token; `PREFIX` the key prefix and `NAMES` the names, each hex-encoded
//! (names joined by `-`); `FENCES` each name's fencing token in decimal,
//! joined by `-` (empty without fencing); `CHECK` the first 64 bits of
//! the SHA-1 of everything before it, in 16 hex digits. Nothing in it
//! tells anything of another holder's token.
//!
//! The check is what makes a handle that was cut short or edited (a
//! fencing token with a digit less, a name changed) fail to read, rather
//! than read as another lease's fields: every field, the secret token
//! included, goes into it, so nobody without the token can make a handle
//! that passes, and a single change anywhere is caught but with odds of
//! 2^-64. It is not a signature: whoever has the handle holds the lease
//! anyway. A handle of the older format without a check (`rlh1.`) is
//! refused, saying so.

use std::num::NonZeroU32;
use std::time::Duration;

use crate::core::mode::Hold;
use crate::core::token::Token;

const VERSION: &str = "rlh2";

/// The format before the check: refused, by name.
const UNCHECKED_VERSION: &str = "rlh1";

/// Hex digits of the check: 64 bits.
const CHECK_LEN: usize = 16;

/// The check of a handle's text before its last `.`.
fn check_of(body: &str) -> String {
    let digest = sha1_smol::Sha1::from(body).digest().bytes();
    digest[..CHECK_LEN / 2]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What a handle holds.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Exported {
    /// Each name's hold, in the order of `names`.
    pub(crate) holds: Vec<Hold>,
    pub(crate) ttl: Duration,
    pub(crate) token: Token,
    pub(crate) prefix: String,
    /// One name, or a multi-lock's in their canonical order.
    pub(crate) names: Vec<String>,
    /// Each name's fencing token, when drawn.
    pub(crate) fences: Option<Vec<u64>>,
}

impl std::fmt::Debug for Exported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No token: a handle in the logs must not release the lease.
        f.debug_struct("Exported")
            .field("holds", &self.holds)
            .field("ttl", &self.ttl)
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<String> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let bytes = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

/// A token as a handle spells it: the secret, then `-` and the owner
/// part hex-encoded, if any.
fn token_field(token: &Token) -> String {
    match token.owner_part() {
        "" => token.secret().to_string(),
        owner => format!("{}-{}", token.secret(), hex(owner)),
    }
}

fn read_token_field(field: &str) -> Option<Token> {
    match field.split_once('-') {
        None => Token::parse(field),
        Some((secret, owner)) => Token::parse(&format!("{secret}{}", unhex(owner)?)),
    }
}

impl Exported {
    /// The first name's hold (the only one's, for a lease of one name).
    pub(crate) fn hold(&self) -> Hold {
        self.holds[0]
    }

    /// The handle's text.
    pub(crate) fn encode(&self) -> String {
        let mode: String = match &self.holds[..] {
            [Hold::Exclusive] => "x".into(),
            [Hold::Shared] => "s".into(),
            [Hold::Permit {
                permits, weight, ..
            }] if weight.get() == 1 => format!("p{permits}"),
            [Hold::Permit {
                permits, weight, ..
            }] => format!("p{permits}:{weight}"),
            several => several
                .iter()
                .map(|h| if *h == Hold::Shared { 's' } else { 'x' })
                .collect(),
        };
        let names: Vec<String> = self.names.iter().map(|n| hex(n)).collect();
        let fences: Vec<String> = self.fences.iter().flatten().map(u64::to_string).collect();
        let body = format!(
            "{VERSION}.{mode}.{}.{}.{}.{}.{}",
            self.ttl.as_millis(),
            token_field(&self.token),
            hex(&self.prefix),
            names.join("-"),
            fences.join("-"),
        );
        let check = check_of(&body);
        format!("{body}.{check}")
    }

    /// Reads a handle's text (spaces and line ends around it aside); why
    /// not, for a text that is not one, or one that was cut short or
    /// altered (its check does not match its fields). The reason never
    /// quotes the text: it may hold a lease's token.
    pub(crate) fn decode(text: &str) -> Result<Exported, String> {
        let bad = |what: &str| format!("not a lease handle: {what}");
        let text = text.trim();
        let version = text.split('.').next().unwrap_or_default();
        if version == UNCHECKED_VERSION {
            return Err(bad(&format!(
                "it is in the {UNCHECKED_VERSION} format of an older redlease, which carries no \
                 check of its fields; this version reads {VERSION} handles only (release the \
                 lease with the version that exported it, or let it expire)"
            )));
        }
        if version != VERSION {
            return Err(bad(&format!("it does not begin with {VERSION}.")));
        }
        let Some((body, check)) = text.rsplit_once('.') else {
            return Err(bad("it was cut short: nothing follows its version"));
        };
        if check.len() != CHECK_LEN || check != check_of(body) {
            return Err(bad(
                "it was cut short or altered: its check does not match its fields (pass the \
                 whole handle, exactly as it was exported)",
            ));
        }
        let parts: Vec<&str> = body.split('.').collect();
        let [_, mode, ttl, token, prefix, names, fences] = parts[..] else {
            return Err(bad(
                "it has not the 8 parts of rlh2.MODE.TTL.TOKEN.PREFIX.NAMES.FENCES.CHECK",
            ));
        };
        let permit = |p: &str| {
            let (permits, weight) = match p.strip_prefix('p')?.split_once(':') {
                Some((n, w)) => (n.parse::<NonZeroU32>().ok()?, w.parse::<NonZeroU32>().ok()?),
                None => (p[1..].parse::<NonZeroU32>().ok()?, NonZeroU32::MIN),
            };
            (weight <= permits).then_some(Hold::Permit {
                permits,
                weight,
                majority: false,
            })
        };
        let letter = |c: char| match c {
            'x' => Some(Hold::Exclusive),
            's' => Some(Hold::Shared),
            _ => None,
        };
        let ttl = ttl
            .parse::<u64>()
            .ok()
            .filter(|&ms| ms > 0)
            .map(Duration::from_millis)
            .ok_or_else(|| bad("its TTL"))?;
        let token = read_token_field(token).ok_or_else(|| bad("its token"))?;
        let prefix = unhex(prefix).ok_or_else(|| bad("its key prefix"))?;
        let names = names
            .split('-')
            .map(unhex)
            .collect::<Option<Vec<String>>>()
            .filter(|n| !n.is_empty() && n.iter().all(|n| !n.is_empty()))
            .ok_or_else(|| bad("its names"))?;
        // A lease of several names lists them as every taker takes them:
        // sorted, each once.
        if names.windows(2).any(|n| n[0] >= n[1]) {
            return Err(bad("its names are out of their order, or repeated"));
        }
        let holds: Vec<Hold> = match (names.len(), mode) {
            (1, m) => m
                .parse::<char>()
                .ok()
                .and_then(letter)
                .or_else(|| permit(m))
                .map(|h| vec![h]),
            (n, "x") => Some(vec![Hold::Exclusive; n]),
            (n, m) => m
                .chars()
                .map(letter)
                .collect::<Option<Vec<Hold>>>()
                .filter(|h| h.len() == n),
        }
        .ok_or_else(|| bad(&format!("mode {mode:?} for {} names", names.len())))?;
        let fences = match fences {
            "" => None,
            f => Some(
                f.split('-')
                    .map(|n| n.parse::<u64>().ok())
                    .collect::<Option<Vec<u64>>>()
                    .filter(|f| f.len() == names.len())
                    .ok_or_else(|| bad("its fencing tokens"))?,
            ),
        };
        Ok(Exported {
            holds,
            ttl,
            token,
            prefix,
            names,
            fences,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::token::LockerTag;
    use proptest::prelude::*;

    fn exported(hold: Hold, names: &[&str], fences: Option<Vec<u64>>) -> Exported {
        Exported {
            holds: vec![hold; names.len()],
            ttl: Duration::from_secs(30),
            token: Token::generate(&LockerTag::generate(), None, std::time::Duration::ZERO),
            prefix: "redlease:".into(),
            names: names.iter().map(|n| n.to_string()).collect(),
            fences,
        }
    }

    #[test]
    fn a_handle_reads_back_as_it_was_written() {
        let permit = Hold::Permit {
            permits: NonZeroU32::new(3).unwrap(),
            weight: NonZeroU32::MIN,
            majority: false,
        };
        let weighted = Hold::Permit {
            permits: NonZeroU32::new(5).unwrap(),
            weight: NonZeroU32::new(2).unwrap(),
            majority: false,
        };
        for e in [
            exported(weighted, &["pool"], None),
            exported(Hold::Exclusive, &["job"], None),
            exported(Hold::Exclusive, &["a.b-c", "d/é"], Some(vec![7, 1 << 60])),
            exported(Hold::Shared, &["catalog"], Some(vec![0])),
            exported(permit, &["pool"], None),
            Exported {
                holds: vec![Hold::Shared, Hold::Shared, Hold::Exclusive],
                ..exported(Hold::Exclusive, &["r", "s", "w"], None)
            },
            // A token naming its owner, dots and dashes in the label.
            Exported {
                token: Token::generate(
                    &LockerTag::generate(),
                    Some("ci-7.eu:42 (make -j8 deploy)"),
                    std::time::Duration::ZERO,
                ),
                ..exported(Hold::Exclusive, &["job"], Some(vec![3]))
            },
            // A token naming its lock-delay too.
            Exported {
                token: Token::generate(
                    &LockerTag::generate(),
                    Some("ci-7:42"),
                    std::time::Duration::from_secs(15),
                ),
                ..exported(Hold::Exclusive, &["job"], None)
            },
        ] {
            let text = e.encode();
            assert!(text.starts_with("rlh2."), "{text}");
            assert_eq!(Exported::decode(&text).unwrap(), e);
            // The names' own dots and dashes do not break it.
            assert_eq!(text.split('.').count(), 8, "{text}");
        }
    }

    /// `body` with its check, as `encode` ends it.
    fn sealed(body: &str) -> String {
        format!("{body}.{}", check_of(body))
    }

    #[test]
    fn anything_else_is_refused_with_a_reason() {
        let good = exported(Hold::Exclusive, &["a", "b"], Some(vec![1, 2])).encode();
        let body = good.rsplit_once('.').unwrap().0;
        let parts: Vec<&str> = body.split('.').collect();
        // A part replaced, and the check made to match: what only the
        // fields' own rules can refuse.
        let with = |i: usize, part: &str| {
            let mut p = parts.clone();
            p[i] = part;
            sealed(&p.join("."))
        };
        for text in [
            String::new(),
            "hello".into(),
            "rlh2".into(),
            "rlh2.".into(),
            sealed("rlh2"),
            sealed("rlh2.x.1"),
            with(0, "rlh3"),
            with(1, "q"),
            with(1, "p0"),
            with(2, "0"),
            with(2, "soon"),
            with(2, "99999999999999999999999"),
            with(3, "00ff"),
            with(3, &"G".repeat(48)),
            with(4, "zz"),
            with(5, ""),
            with(5, "61-"),
            // Out of the canonical order (b before a), and repeated.
            with(5, "62-61"),
            with(5, "61-61"),
            with(5, "6162-61"),
            with(6, "1"),
            with(6, "1-x"),
            with(1, "s"),
            with(1, "xsx"),
            with(1, "xp"),
            with(1, "p2"),
            format!("{body}.{}", "0".repeat(16)),
            format!("{good}0"),
            good.to_uppercase(),
        ] {
            let e = Exported::decode(&text).expect_err(&text);
            assert!(e.starts_with("not a lease handle"), "{e}");
        }
        assert!(
            Exported::decode(&format!(" {good}\n")).is_ok(),
            "spaces around"
        );
    }

    #[test]
    fn a_handle_cut_short_or_edited_is_refused_as_such() {
        let e = exported(
            Hold::Exclusive,
            &["job"],
            Some(vec![179_591_796_160_000_000]),
        );
        let good = e.encode();
        // The issue's cases: the fencing token a few digits shorter.
        for cut in [1, 3, 10] {
            let short = &good[..good.len() - cut];
            let why = Exported::decode(short).expect_err(short);
            assert!(why.contains("cut short or altered"), "{why}");
        }
        let body = good.rsplit_once('.').unwrap().0;
        let edited = good.replacen(".179591796160000000.", ".179591796160000001.", 1);
        assert_ne!(edited, good);
        let why = Exported::decode(&edited).unwrap_err();
        assert!(why.contains("cut short or altered"), "{why}");
        // Without its check at all: the 7 parts of the older format.
        let why = Exported::decode(body).unwrap_err();
        assert!(why.contains("cut short or altered"), "{why}");
        // The older format is named, never read unchecked.
        let old = body.replacen("rlh2.", "rlh1.", 1);
        let why = Exported::decode(&old).unwrap_err();
        assert!(why.contains("rlh1 format"), "{why}");
        // No reason quotes the token.
        for text in [&good[..good.len() - 3], &edited, body, &old] {
            let why = Exported::decode(text).unwrap_err();
            assert!(!why.contains(e.token.as_str()), "{why}");
        }
    }

    /// Every kind of handle, from the generated parts.
    fn any_exported() -> impl Strategy<Value = Exported> {
        let hold = prop_oneof![
            Just(Hold::Exclusive),
            Just(Hold::Shared),
            (1u32..=100_000, any::<u32>()).prop_map(|(n, w)| Hold::Permit {
                permits: NonZeroU32::new(n).unwrap(),
                weight: NonZeroU32::new(1 + w % n).unwrap(),
                majority: false,
            }),
        ];
        let names = proptest::collection::vec("[a-z.\\-/é]{1,8}", 1..4);
        let fences = proptest::option::of(any::<u64>());
        (hold, names, fences, 1u64..=1 << 53, "[a-z:]{0,8}").prop_map(
            |(hold, mut names, fence, ttl_ms, prefix)| {
                // As a lease lists them: sorted, each once.
                names.sort();
                names.dedup();
                let many = names.len() > 1;
                let holds = match (many, hold) {
                    (true, Hold::Permit { .. }) => vec![Hold::Exclusive; names.len()],
                    (_, hold) => vec![hold; names.len()],
                };
                Exported {
                    holds,
                    ttl: Duration::from_millis(ttl_ms),
                    token: Token::generate(&LockerTag::generate(), None, std::time::Duration::ZERO),
                    prefix,
                    fences: fence.map(|f| (0..names.len() as u64).map(|i| f ^ i).collect()),
                    names,
                }
            },
        )
    }

    proptest! {
        #[test]
        fn every_handle_reads_back(e in any_exported()) {
            prop_assert_eq!(Exported::decode(&e.encode()).unwrap(), e);
        }

        #[test]
        fn every_truncation_is_refused(e in any_exported()) {
            let good = e.encode();
            // Every prefix (byte boundaries: the text is ASCII).
            for len in 0..good.len() {
                let why = Exported::decode(&good[..len]);
                prop_assert!(why.is_err(), "{} of {} bytes read", len, good.len());
                prop_assert!(why.unwrap_err().starts_with("not a lease handle"));
            }
            // Cut at the front too.
            for from in 1..good.len() {
                prop_assert!(Exported::decode(&good[from..]).is_err());
            }
        }

        #[test]
        fn every_single_character_edit_is_refused(
            e in any_exported(),
            at in any::<proptest::sample::Index>(),
            by in any::<char>(),
        ) {
            let good = e.encode();
            let at = at.index(good.len());
            let mut edited = good.clone();
            edited.replace_range(at..at + 1, by.encode_utf8(&mut [0; 4]));
            prop_assume!(edited != good);
            prop_assert!(Exported::decode(&edited).is_err(), "{}", edited);
            // A character put in anywhere but around the text (where
            // spaces are dropped) or taken out.
            let mut inserted = good.clone();
            inserted.insert(at.max(1), by);
            prop_assert!(Exported::decode(&inserted).is_err(), "{}", inserted);
            let mut removed = good.clone();
            removed.remove(at);
            prop_assert!(Exported::decode(&removed).is_err(), "{}", removed);
        }

        #[test]
        fn any_text_is_refused_without_a_panic(text in "\\PC{0,300}") {
            let _ = Exported::decode(&text);
            let _ = Exported::decode(&format!("rlh2.{text}"));
        }
    }

    #[test]
    fn a_huge_text_is_refused_without_a_panic() {
        let good = exported(Hold::Exclusive, &["job"], None).encode();
        for text in [
            "é".repeat(1 << 20),
            format!("{good}{}", ".".repeat(1 << 20)),
            format!("rlh2.{}", "-".repeat(1 << 20)),
        ] {
            assert!(Exported::decode(&text).is_err());
        }
    }

    #[test]
    fn its_debug_shows_no_token() {
        let e = exported(Hold::Exclusive, &["job"], None);
        assert!(!format!("{e:?}").contains(e.token.as_str()));
    }
}
