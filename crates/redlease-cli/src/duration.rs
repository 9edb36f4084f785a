//! Durations on the command line (`500ms`, `10s`, `2m`, `1h`, `1m30s`,
//! `1.5s`) and short human-readable ones in output.

use std::time::Duration;

/// Parses a duration: one or more `<number><unit>` parts, unit one of
/// `ms`, `s`, `m`, `h`; `0` alone is zero. A bare number is refused, since
/// whether `10` means seconds or milliseconds is exactly the kind of guess
/// that makes a lock's TTL wrong.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err("empty duration; use e.g. 500ms, 10s, 2m".to_string());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        if number.is_empty() {
            return Err(format!(
                "{text:?} is not a duration; use e.g. 500ms, 10s, 2m"
            ));
        }
        let value: f64 = number
            .parse()
            .map_err(|_| format!("{text:?}: {number:?} is not a number"))?;
        let unit_secs = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => {
                return Err(format!(
                    "{text:?} has no unit; write e.g. {number}s or {number}ms"
                ))
            }
            other => {
                return Err(format!(
                    "{text:?}: unknown unit {other:?} (use ms, s, m or h)"
                ))
            }
        };
        let part = Duration::try_from_secs_f64(value * unit_secs)
            .map_err(|_| format!("{text:?} is too large"))?;
        total = total
            .checked_add(part)
            .ok_or_else(|| format!("{text:?} is too large"))?;
        rest = next;
    }
    Ok(total)
}

/// A short rendering for people: `850ms`, `9.2s`, `2m05s`, `3h12m`.
pub fn show(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
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
    fn refuses_guesses_with_a_reason() {
        assert!(parse("10").unwrap_err().contains("no unit"));
        assert!(parse("10x").unwrap_err().contains("unknown unit"));
        assert!(parse("ten s").is_err());
        assert!(parse("").is_err());
        assert!(parse("s").is_err());
        assert!(parse("1..5s").unwrap_err().contains("not a number"));
        assert!(parse("-1s").is_err());
        assert!(parse("99999999999999999999h")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn shows_short_forms() {
        assert_eq!(show(ms(850)), "850ms");
        assert_eq!(show(ms(9_240)), "9.2s");
        assert_eq!(show(ms(125_000)), "2m05s");
        assert_eq!(show(ms(3_600_000 * 3 + 60_000 * 12)), "3h12m");
        assert_eq!(show_ms(Duration::from_micros(1_234)), "1.23 ms");
    }
}
