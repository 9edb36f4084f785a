//! Durations on the command line (`500ms`, `10s`, `2m`, `1h`, `1m30s`,
//! `1.5s`), parsed by `humantime`, and short human-readable ones in output.

use std::time::Duration;

/// What every duration error suggests.
const EXAMPLES: &str = "use e.g. 500ms, 10s, 2m";

/// Parses a duration with [`humantime::parse_duration`]: one or more
/// `<number><unit>` parts (`1m30s`, `1m 30s`, `1.5s`), units from `ns` to
/// `years` (`ms`, `s`/`sec`, `m`/`min`, `h`, `d`, ...); `0` alone is zero.
///
/// On top of humantime, two guesses are refused, since they are exactly
/// the kind that makes a lock's TTL wrong: a bare number (does `10` mean
/// seconds or milliseconds?), and the unit `M`, which humantime reads as
/// months where `m` is minutes.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.starts_with('-') {
        return Err(format!(
            "{text:?}: durations cannot be negative; {EXAMPLES}"
        ));
    }
    let parsed = humantime::parse_duration(text).map_err(|e| explain(text, &e))?;
    if units(text).any(|unit| unit == "M") {
        return Err(format!(
            "{text:?}: the unit M means months; write m for minutes, or months if you \
             mean it"
        ));
    }
    Ok(parsed)
}

/// [`parse`], for the flags where zero means nothing (a TTL, a timeout):
/// zero is refused as a usage error, not left to fail later or to time
/// out at once.
pub fn parse_positive(text: &str) -> Result<Duration, String> {
    let parsed = parse(text)?;
    if parsed.is_zero() {
        return Err(format!(
            "{:?} is zero, and this takes a positive duration; {EXAMPLES}",
            text.trim()
        ));
    }
    Ok(parsed)
}

/// The unit words of a duration text (`"1m 30s"` → `m`, `s`).
fn units(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphabetic()))
        .filter(|word| !word.is_empty())
}

/// A humantime error as a message that says what to write instead.
fn explain(text: &str, e: &humantime::DurationError) -> String {
    use humantime::DurationError as E;
    match e {
        E::Empty => format!("empty duration; {EXAMPLES}"),
        E::UnknownUnit { unit, value, .. } if unit.is_empty() => {
            format!("{text:?} has no unit; write e.g. {value}s or {value}ms")
        }
        E::UnknownUnit { unit, .. } => format!(
            "{text:?}: unknown unit {unit:?} (use ms, s, m or h; also ns, us, d, w, and \
             long forms such as sec, min, hours)"
        ),
        E::NumberOverflow => format!("{text:?} is too large, or finer than a nanosecond"),
        E::InvalidCharacter(_) | E::NumberExpected(_) => {
            format!("{text:?} is not a duration ({e}); {EXAMPLES}")
        }
    }
}

/// A short rendering for people: `250µs`, `2.5ms`, `850ms`, `9.2s`,
/// `2m05s`, `3h12m`. Never rounds a duration that is not zero to `0ms`.
pub fn show(d: Duration) -> String {
    let ms = d.as_millis();
    if d.is_zero() {
        "0s".to_string()
    } else if d < Duration::from_millis(1) {
        format!("{}µs", d.as_micros())
    } else if d < Duration::from_millis(10) && !d.subsec_micros().is_multiple_of(1_000) {
        format!("{:.1}ms", d.as_secs_f64() * 1e3)
    } else if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else if ms < 3_600_000 {
        let s = d.as_secs();
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        let m = d.as_secs() / 60;
        format!("{}h{:02}m", m / 60, m % 60)
    }
}

/// Milliseconds with two decimals, for latencies.
pub fn show_ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn accepts_the_documented_forms() {
        assert_eq!(parse("500ms"), Ok(ms(500)));
        assert_eq!(parse("10s"), Ok(ms(10_000)));
        assert_eq!(parse("2m"), Ok(ms(120_000)));
        assert_eq!(parse("1h"), Ok(ms(3_600_000)));
        assert_eq!(parse("1.5s"), Ok(ms(1_500)));
        assert_eq!(parse("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse(" 0 "), Ok(Duration::ZERO));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn accepts_humantimes_other_forms() {
        assert_eq!(parse("1m 30s"), Ok(ms(90_000)));
        assert_eq!(parse("2min"), Ok(ms(120_000)));
        assert_eq!(parse("10sec"), Ok(ms(10_000)));
        assert_eq!(parse("1d"), Ok(ms(86_400_000)));
        assert_eq!(parse("2 months"), Ok(Duration::from_secs(2 * 2_630_016)));
        assert_eq!(parse("250us"), Ok(Duration::from_micros(250)));
    }

    #[test]
    fn refuses_guesses_with_a_reason() {
        assert!(parse("10").unwrap_err().contains("no unit"));
        assert!(parse(" 10 ")
            .unwrap_err()
            .contains("write e.g. 10s or 10ms"));
        assert!(parse("10x").unwrap_err().contains("unknown unit \"x\""));
        assert!(parse("2M").unwrap_err().contains("M means months"));
        assert!(parse("1h2M").unwrap_err().contains("M means months"));
        assert!(parse("ten s").unwrap_err().contains("not a duration"));
        assert!(parse("").unwrap_err().contains("empty"));
        assert!(parse("  ").unwrap_err().contains("empty"));
        assert!(parse("s").unwrap_err().contains("not a duration"));
        assert!(parse("1..5s").unwrap_err().contains("not a duration"));
        assert!(parse("-1s").unwrap_err().contains("cannot be negative"));
        assert!(parse(" -1").unwrap_err().contains("cannot be negative"));
        assert!(parse("99999999999999999999h")
            .unwrap_err()
            .contains("too large"));
        assert!(parse("0.5ns")
            .unwrap_err()
            .contains("finer than a nanosecond"));
    }

    #[test]
    fn positive_durations_refuse_zero_only() {
        assert_eq!(parse_positive("1ms"), Ok(ms(1)));
        assert_eq!(parse_positive("250us"), Ok(Duration::from_micros(250)));
        for zero in ["0", "0s", " 0ms "] {
            assert!(
                parse_positive(zero).unwrap_err().contains("is zero"),
                "{zero}"
            );
        }
        assert!(parse_positive("-5s").unwrap_err().contains("negative"));
        assert!(parse_positive("10").unwrap_err().contains("no unit"));
    }

    #[test]
    fn shows_short_forms() {
        assert_eq!(show(Duration::ZERO), "0s");
        assert_eq!(show(Duration::from_micros(100)), "100µs");
        assert_eq!(show(Duration::from_micros(2_500)), "2.5ms");
        assert_eq!(show(ms(2)), "2ms");
        assert_eq!(show(ms(850)), "850ms");
        assert_eq!(show(ms(9_240)), "9.2s");
        assert_eq!(show(ms(125_000)), "2m05s");
        assert_eq!(show(ms(3_600_000 * 3 + 60_000 * 12)), "3h12m");
        assert_eq!(show_ms(Duration::from_micros(1_234)), "1.23 ms");
    }
}
