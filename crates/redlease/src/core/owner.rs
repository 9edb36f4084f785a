//! Who holds a lease, as the servers show it to anyone who looks: an
//! owner label (by default the host name and process id) and when the
//! lease was taken. Pure: no I/O.
//!
//! The servers store a hold as the lease's token followed by its owner:
//! `TOKEN\tLABEL\tMS` (`MS` the taker's wall clock at the acquire, in
//! milliseconds since the Unix epoch), then `\tDELAY` (milliseconds) for
//! a lease with a lock-delay, then whatever the scripts add (`|lineage`,
//! the `*` mark). A reader of the value shows the label and
//! the time, never the token. A label holds no tab or control character
//! and none of `|`, `*`, `~` and `#`, which the scripts read in a value.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest owner label, in bytes.
pub const MAX_OWNER_LEN: usize = 128;

/// Why `label` cannot be an owner label, if it cannot.
pub(crate) fn check_label(label: &str) -> Result<(), String> {
    if label.is_empty() {
        return Err("an owner label cannot be empty".into());
    }
    if label.len() > MAX_OWNER_LEN {
        return Err(format!(
            "{} bytes is longer than the longest owner label, {MAX_OWNER_LEN} bytes",
            label.len()
        ));
    }
    match label.chars().find(|&c| !allowed(c)) {
        Some(c) => Err(format!(
            "an owner label cannot hold {c:?} (no control character, nor | * ~ #)"
        )),
        None => Ok(()),
    }
}

fn allowed(c: char) -> bool {
    !c.is_control() && !matches!(c, '|' | '*' | '~' | '#')
}

/// `text` made an owner label: each character a label cannot hold
/// replaced by `_`, cut (at a character) to [`MAX_OWNER_LEN`] bytes;
/// `None` if nothing is left.
pub(crate) fn sanitize(text: &str) -> Option<String> {
    let mut out = String::new();
    for c in text.chars() {
        let c = if allowed(c) { c } else { '_' };
        if out.len() + c.len_utf8() > MAX_OWNER_LEN {
            break;
        }
        out.push(c);
    }
    (!out.is_empty()).then_some(out)
}

/// What a Locker's leases say they are unless told otherwise
/// ([`LockerBuilder::owner`](crate::LockerBuilder::owner)): `HOST:PID`,
/// or `pid PID` where the host name cannot be read.
///
/// ```
/// let me = redlease::default_owner();
/// assert!(me.ends_with(&std::process::id().to_string()));
/// ```
pub fn default_owner() -> String {
    let pid = std::process::id();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .and_then(|h| sanitize(h.trim()));
    let label = match host {
        Some(host) => format!("{host}:{pid}"),
        None => format!("pid {pid}"),
    };
    sanitize(&label).unwrap_or_else(|| format!("pid {pid}"))
}

/// What follows a token in a stored hold: `\tLABEL\tMS`, `MS` now, then
/// `\tDELAY` when `delay` is not zero.
pub(crate) fn suffix(label: &str, delay: Duration) -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    match delay.as_millis() {
        0 => format!("\t{label}\t{ms}"),
        delay => format!("\t{label}\t{ms}\t{delay}"),
    }
}

/// Whether `part` is what [`suffix`] writes: `\tLABEL\tMS[\tDELAY]`, with
/// a label [`check_label`] takes and each number a count of milliseconds.
pub(crate) fn is_owner_part(part: &str) -> bool {
    let Some((label, numbers)) = part.strip_prefix('\t').and_then(|p| p.split_once('\t')) else {
        return false;
    };
    let number = |n: &str| !n.is_empty() && n.len() <= 20 && n.bytes().all(|b| b.is_ascii_digit());
    let numbers_ok = match numbers.split_once('\t') {
        None => number(numbers),
        Some((ms, delay)) => number(ms) && number(delay),
    };
    check_label(label).is_ok() && numbers_ok
}

/// A holder as a stored hold names it (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// Its owner label; empty for a hold written without one (by an
    /// older redlease).
    pub owner: String,
    /// When it was taken, by the taker's clock; `None` when not said.
    pub since: Option<SystemTime>,
    /// How many permits it holds (1 for a lock or a reader).
    pub weight: u32,
    /// Its lease's lock-delay
    /// ([`LockerBuilder::lock_delay`](crate::LockerBuilder::lock_delay)),
    /// if it has one.
    pub lock_delay: Option<Duration>,
    /// How long its hold lasts yet on the server that said so, unless
    /// renewed or released (`None`: not said, or no expiry).
    pub expires_in: Option<Duration>,
}

impl Holder {
    /// The holder a stored value (or a set's member) names: its label
    /// and time, if it has them. Never the token.
    pub(crate) fn of_value(value: &str) -> Holder {
        let mut parts = value.splitn(4, '\t');
        let _token = parts.next();
        let owner = parts.next().unwrap_or("").to_string();
        // A number, up to what the scripts add (`|lineage`, `*`, `#i`).
        let ms = |part: Option<&str>| {
            let digits = part?.split(|c: char| !c.is_ascii_digit()).next()?;
            digits.parse::<u64>().ok().map(Duration::from_millis)
        };
        let since = ms(parts.next()).and_then(|d| UNIX_EPOCH.checked_add(d));
        let lock_delay = ms(parts.next()).filter(|d| !d.is_zero());
        Holder {
            owner,
            since,
            weight: 1,
            lock_delay,
            expires_in: None,
        }
    }

    /// The holder a lock key's value names, if it is a redlease holder's
    /// with an owner (48 hex digits, then `\tLABEL\tMS`).
    pub(crate) fn of_stored(value: &[u8]) -> Option<Holder> {
        let (token, rest) = value.split_at_checked(crate::core::token::Token::LEN)?;
        if !token.iter().all(u8::is_ascii_hexdigit) || rest.first() != Some(&b'\t') {
            return None;
        }
        let end = rest
            .iter()
            .position(|&b| matches!(b, b'|' | b'*' | b'#'))
            .unwrap_or(rest.len());
        Holder::of_owner_part(std::str::from_utf8(&rest[..end]).ok()?)
    }

    /// The holder a token's tail (`\tLABEL\tMS`, as the scripts give it)
    /// names; `None` for an empty one.
    pub(crate) fn of_owner_part(part: &str) -> Option<Holder> {
        (!part.is_empty()).then(|| Holder::of_value(part))
    }

    /// The same holder, of `weight` permits.
    pub(crate) fn weighing(mut self, weight: u32) -> Holder {
        self.weight = weight;
        self
    }

    /// Whether `other` is this holder as another node shows it.
    fn same_lease(&self, other: &Holder) -> bool {
        (&self.owner, self.since, self.weight, self.lock_delay)
            == (&other.owner, other.since, other.weight, other.lock_delay)
    }

    /// The same holder, whose hold lasts `expires_in` yet.
    pub(crate) fn lasting(mut self, expires_in: Option<Duration>) -> Holder {
        self.expires_in = expires_in;
        self
    }

    /// How long the name stays kept for this holder's lock-delay, if it is
    /// in it now: its lease ended without a release (its holder died, or
    /// lost it), and the name is not granted again until the delay is over.
    ///
    /// ```
    /// # fn f(status: &redlease::LockStatus) {
    /// for holder in status.holders() {
    ///     if let Some(left) = holder.in_lock_delay() {
    ///         println!("{} ended without a release; free in {left:?}", holder.owner);
    ///     }
    /// }
    /// # }
    /// ```
    pub fn in_lock_delay(&self) -> Option<Duration> {
        let (delay, left) = (self.lock_delay?, self.expires_in?);
        (left <= delay).then_some(left)
    }

    /// "build-7:4121 for 12 s" (the time by this machine's clock), or
    /// "an owner without a label".
    pub fn describe(&self, now: SystemTime) -> String {
        let who = match self.owner.is_empty() {
            true => "an owner without a label".to_string(),
            false => self.owner.clone(),
        };
        let held = self
            .since
            .and_then(|since| now.duration_since(since).ok())
            .map(|d| format!(" for {}", short(d)))
            .unwrap_or_default();
        let weight = match self.weight {
            1 => String::new(),
            w => format!(" ({w} permits)"),
        };
        let delay = match self.in_lock_delay() {
            Some(left) => format!(
                ", ended without a release: in its lock-delay for {} more",
                short(left)
            ),
            None => String::new(),
        };
        format!("{who}{weight}{held}{delay}")
    }

    /// `holders` each once, [described](Self::describe) and joined by
    /// "; " ("build-7:4121 for 12 s; ci-3:88 for 2 s"); `None` for none.
    ///
    /// ```
    /// # fn f(status: &redlease::LockStatus) {
    /// let now = std::time::SystemTime::now();
    /// if let Some(who) = redlease::Holder::describe_all(&status.holders(), now) {
    ///     println!("held by {who}");
    /// }
    /// # }
    /// ```
    pub fn describe_all<'a>(
        holders: impl IntoIterator<Item = &'a Holder>,
        now: SystemTime,
    ) -> Option<String> {
        let said: Vec<String> = distinct(holders).iter().map(|h| h.describe(now)).collect();
        (!said.is_empty()).then(|| said.join("; "))
    }
}

/// `holders` each once (the same lease seen on several nodes is one
/// holder, lasting as long as the longest any node keeps it), in the
/// order given.
pub(crate) fn distinct<'a>(holders: impl IntoIterator<Item = &'a Holder>) -> Vec<Holder> {
    let mut seen: Vec<Holder> = Vec::new();
    for h in holders {
        match seen.iter_mut().find(|s| s.same_lease(h)) {
            Some(s) => s.expires_in = s.expires_in.max(h.expires_in),
            None => seen.push(h.clone()),
        }
    }
    seen
}

/// A duration as a person reads it: "850 ms", "12 s", "3 min 5 s", "2 h 4 min".
fn short(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{} ms", d.as_millis()),
        1..=119 => format!("{s} s"),
        120..=7199 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s / 60) % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_that_the_scripts_could_misread_are_refused() {
        assert!(check_label("build-7:4121 (./deploy.sh --prod)").is_ok());
        assert!(check_label("déploiement:12").is_ok());
        for bad in ["", "a|b", "a*", "~x", "a#2", "tab\there", "line\nend"] {
            assert!(check_label(bad).is_err(), "{bad:?}");
        }
        assert!(check_label(&"x".repeat(MAX_OWNER_LEN)).is_ok());
        assert!(check_label(&"x".repeat(MAX_OWNER_LEN + 1)).is_err());
    }

    #[test]
    fn sanitize_gives_a_label_check_label_takes() {
        for text in ["a|b*c~d#e\tf", &"é".repeat(100), "ok", "\u{7}"] {
            let label = sanitize(text).unwrap();
            assert!(check_label(&label).is_ok(), "{text:?} -> {label:?}");
        }
        assert_eq!(sanitize(""), None);
        assert_eq!(sanitize("a|b").unwrap(), "a_b");
    }

    #[test]
    fn the_default_label_names_the_process() {
        let label = default_owner();
        assert!(check_label(&label).is_ok(), "{label:?}");
        assert!(label.ends_with(&std::process::id().to_string()), "{label}");
    }

    #[test]
    fn a_stored_value_names_its_holder_never_its_token() {
        let token = "0123456789abcdef".repeat(3);
        let value = format!("{token}\tbuild-7:4121 (./deploy.sh)\t1795000000000|replid*");
        let h = Holder::of_value(&value);
        assert_eq!(h.owner, "build-7:4121 (./deploy.sh)");
        assert_eq!(
            h.since,
            UNIX_EPOCH.checked_add(Duration::from_millis(1_795_000_000_000))
        );
        let now = h.since.unwrap() + Duration::from_secs(12);
        let said = h.describe(now);
        assert_eq!(said, "build-7:4121 (./deploy.sh) for 12 s");
        assert!(!said.contains(&token));
        // A value without an owner (an older redlease, another program).
        let bare = Holder::of_value(&token);
        assert_eq!((bare.owner.as_str(), bare.since), ("", None));
        assert_eq!(bare.describe(now), "an owner without a label");
    }

    #[test]
    fn suffix_is_read_back() {
        let s = suffix("host:1", Duration::ZERO);
        assert!(is_owner_part(&s));
        let h = Holder::of_value(&format!("{}{s}", "a".repeat(48)));
        assert_eq!(h.owner, "host:1");
        assert!(h.since.is_some());
        assert_eq!(h.lock_delay, None);
        let s = suffix("host:1", Duration::from_secs(15));
        assert!(is_owner_part(&s));
        let h = Holder::of_value(&format!("{}{s}|replid*", "a".repeat(48)));
        assert_eq!(h.lock_delay, Some(Duration::from_secs(15)));
        assert!(!is_owner_part("\thost:1\t12\t"));
        assert!(!is_owner_part("\thost:1\t12\tx"));
    }

    #[test]
    fn a_holder_is_in_its_lock_delay_only_past_its_ttl() {
        let h = Holder::of_value(&format!("{}\tci:1\t5\t15000", "a".repeat(48)));
        let at = |ms| h.clone().lasting(Some(Duration::from_millis(ms)));
        assert_eq!(at(20_000).in_lock_delay(), None, "within its TTL");
        assert_eq!(
            at(14_000).in_lock_delay(),
            Some(Duration::from_millis(14_000))
        );
        assert!(at(14_000)
            .describe(SystemTime::now())
            .contains("lock-delay"));
        let plain = Holder::of_value(&format!("{}\tci:1\t5", "a".repeat(48)));
        assert_eq!(plain.lasting(Some(Duration::ZERO)).in_lock_delay(), None);
    }
}
