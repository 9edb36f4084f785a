//! Logging: the library's `tracing` events, and redlease's own, as lines on
//! stderr (stdout stays the command's and the reports'). `-v` gives info,
//! `-vv` debug, `-vvv` trace; by default only warnings show, and with
//! `run --quiet` only errors. `RUST_LOG`, when set, replaces all of that.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The crates whose events are shown without `RUST_LOG`: every target of
/// the library, the CLI and the testkit starts with this.
const TARGET: &str = "redlease";

/// The level for [`TARGET`] by the number of `-v` flags.
fn level(verbose: u8, quiet: bool) -> &'static str {
    match verbose {
        0 if quiet => "error",
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    }
}

/// The filter to use, and a complaint about `RUST_LOG` if it is set but
/// unusable (then the flags decide, as if it were not set).
fn filter(verbose: u8, quiet: bool, rust_log: Option<&str>) -> (EnvFilter, Option<String>) {
    let default = || EnvFilter::new(format!("{TARGET}={}", level(verbose, quiet)));
    match rust_log.map(str::trim).filter(|s| !s.is_empty()) {
        None => (default(), None),
        Some(directives) => match EnvFilter::builder().parse(directives) {
            Ok(filter) => (filter, None),
            Err(e) => (
                default(),
                Some(format!("ignoring RUST_LOG={directives:?}: {e}")),
            ),
        },
    }
}

/// Installs the stderr logger; call once, before anything logs.
pub fn init(verbose: u8, quiet: bool) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let (filter, complaint) = filter(verbose, quiet, rust_log.as_deref());
    let installed = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init()
        .is_ok();
    if let Some(complaint) = complaint.filter(|_| installed) {
        eprintln!("redlease: warning: {complaint}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(verbose: u8, quiet: bool, rust_log: Option<&str>) -> String {
        filter(verbose, quiet, rust_log).0.to_string()
    }

    #[test]
    fn each_v_shows_one_level_more_of_redlease() {
        assert_eq!(shown(0, false, None), "redlease=warn");
        assert_eq!(shown(1, false, None), "redlease=info");
        assert_eq!(shown(2, false, None), "redlease=debug");
        assert_eq!(shown(3, false, None), "redlease=trace");
        assert_eq!(shown(9, false, None), "redlease=trace");
    }

    #[test]
    fn quiet_leaves_errors_unless_asked_for_more() {
        assert_eq!(shown(0, true, None), "redlease=error");
        assert_eq!(shown(1, true, None), "redlease=info");
    }

    #[test]
    fn rust_log_overrides_the_flags_when_set() {
        assert_eq!(shown(0, false, Some("redis=debug")), "redis=debug");
        assert_eq!(shown(3, true, Some("off")), "off");
        // Set but empty counts as not set.
        assert_eq!(shown(1, false, Some(" ")), "redlease=info");
    }

    #[test]
    fn an_unusable_rust_log_is_reported_and_ignored() {
        let (filter, complaint) = filter(2, false, Some("redlease=loud"));
        assert_eq!(filter.to_string(), "redlease=debug");
        let complaint = complaint.expect("a complaint");
        assert!(
            complaint.contains("RUST_LOG=\"redlease=loud\""),
            "{complaint}"
        );
    }
}
