//! An exported lease as a string: what another Locker, in another process
//! perhaps, needs to continue it (see `Lease::export`). Pure: no I/O.
//!
//! The text is `rlh1.MODE.TTL.TOKEN.PREFIX.NAMES.FENCES`: `MODE` is `x`
//! (alone), `s` (a read hold) or `pN` (one of N permits), and for several
//! names one letter per name, `x` or `s` (a lone `x`: every name alone);
//! `TTL` the
//! lease's TTL in milliseconds; `TOKEN` the lease's token (48 hex
//! digits), which is what lets the holder of the handle release the lease
//! and nobody else, so the handle is a secret like the token; `PREFIX`
//! the key prefix and `NAMES` the names, each hex-encoded (names joined
//! by `-`); `FENCES` each name's fencing token in decimal, joined by `-`
//! (empty without fencing). Nothing in it tells anything of another
//! holder's token.

use std::num::NonZeroU32;
use std::time::Duration;

use crate::core::mode::Hold;
use crate::core::token::Token;

const VERSION: &str = "rlh1";

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
            [Hold::Permit { permits, .. }] => format!("p{permits}"),
            several => several
                .iter()
                .map(|h| if *h == Hold::Shared { 's' } else { 'x' })
                .collect(),
        };
        let names: Vec<String> = self.names.iter().map(|n| hex(n)).collect();
        let fences: Vec<String> = self.fences.iter().flatten().map(u64::to_string).collect();
        format!(
            "{VERSION}.{mode}.{}.{}.{}.{}.{}",
            self.ttl.as_millis(),
            self.token.as_str(),
            hex(&self.prefix),
            names.join("-"),
            fences.join("-"),
        )
    }

    /// Reads a handle's text; why not, for a text that is not one.
    pub(crate) fn decode(text: &str) -> Result<Exported, String> {
        let bad = |what: &str| format!("not a lease handle: {what}");
        let parts: Vec<&str> = text.trim().split('.').collect();
        let [version, mode, ttl, token, prefix, names, fences] = parts[..] else {
            return Err(bad(
                "it has not the 7 parts of rlh1.MODE.TTL.TOKEN.PREFIX.NAMES.FENCES",
            ));
        };
        if version != VERSION {
            return Err(bad(&format!("version {version:?}, not {VERSION}")));
        }
        let permit = |p: &str| {
            p.strip_prefix('p')
                .and_then(|n| n.parse::<NonZeroU32>().ok())
                .map(|permits| Hold::Permit {
                    permits,
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
        let token = Token::parse(token).ok_or_else(|| bad("its token"))?;
        let prefix = unhex(prefix).ok_or_else(|| bad("its key prefix"))?;
        let names = names
            .split('-')
            .map(unhex)
            .collect::<Option<Vec<String>>>()
            .filter(|n| !n.is_empty() && n.iter().all(|n| !n.is_empty()))
            .ok_or_else(|| bad("its names"))?;
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

    fn exported(hold: Hold, names: &[&str], fences: Option<Vec<u64>>) -> Exported {
        Exported {
            holds: vec![hold; names.len()],
            ttl: Duration::from_secs(30),
            token: Token::generate(&LockerTag::generate()),
            prefix: "redlease:".into(),
            names: names.iter().map(|n| n.to_string()).collect(),
            fences,
        }
    }

    #[test]
    fn a_handle_reads_back_as_it_was_written() {
        let permit = Hold::Permit {
            permits: NonZeroU32::new(3).unwrap(),
            majority: false,
        };
        for e in [
            exported(Hold::Exclusive, &["job"], None),
            exported(Hold::Exclusive, &["a.b-c", "d/é"], Some(vec![7, 1 << 60])),
            exported(Hold::Shared, &["catalog"], Some(vec![0])),
            exported(permit, &["pool"], None),
            Exported {
                holds: vec![Hold::Shared, Hold::Exclusive, Hold::Shared],
                ..exported(Hold::Exclusive, &["r", "w", "s"], None)
            },
        ] {
            let text = e.encode();
            assert!(text.starts_with("rlh1."), "{text}");
            assert_eq!(Exported::decode(&text).unwrap(), e);
            // The names' own dots and dashes do not break it.
            assert_eq!(text.split('.').count(), 7, "{text}");
        }
    }

    #[test]
    fn anything_else_is_refused_with_a_reason() {
        let good = exported(Hold::Exclusive, &["a", "b"], Some(vec![1, 2])).encode();
        let parts: Vec<&str> = good.split('.').collect();
        let with = |i: usize, part: &str| {
            let mut p = parts.clone();
            p[i] = part;
            p.join(".")
        };
        for text in [
            String::new(),
            "hello".into(),
            with(0, "rlh2"),
            with(1, "q"),
            with(1, "p0"),
            with(2, "0"),
            with(2, "soon"),
            with(3, "00ff"),
            with(3, &"G".repeat(48)),
            with(4, "zz"),
            with(5, ""),
            with(5, "61-"),
            with(6, "1"),
            with(6, "1-x"),
            with(1, "s"),
            with(1, "xsx"),
            with(1, "xp"),
            with(1, "p2"),
        ] {
            let e = Exported::decode(&text).expect_err(&text);
            assert!(e.starts_with("not a lease handle"), "{e}");
        }
    }

    #[test]
    fn its_debug_shows_no_token() {
        let e = exported(Hold::Exclusive, &["job"], None);
        assert!(!format!("{e:?}").contains(e.token.as_str()));
    }
}
