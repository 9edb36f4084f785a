//! Logging: the library's `tracing` events, and redlease's own, as lines on
//! stderr (stdout stays the command's and the reports'). `-v` gives info,
//! `-vv` debug, `-vvv` trace; by default only warnings show, and with
//! `run --quiet` only errors. `RUST_LOG`, when set, replaces all of that.
//!
//! By default the lines are for operators, in redlease's own voice and
//! without timestamps: `redlease: warning: renewals to a node are failing:
//! node 2 (10.0.0.3:6379): connection refused`. The library says that once
//! when a node's renewals start failing and once (at info) when they work
//! again; the default shows both, so that a node that came back is not left
//! looking dead. With `-v` or `RUST_LOG`, lines carry the time, level and
//! module, for debugging.
//!
//! `RUST_LOG` takes targets and levels (`redlease=debug,redis=info`, or
//! `debug`), not the span and field filters of `EnvFilter`: those need a
//! regex engine, a tenth of the command's build, for no use here.

use std::fmt;
use std::io::IsTerminal;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

/// The crates whose events are shown without `RUST_LOG`: every target of
/// the library, the CLI and the testkit starts with this.
const TARGET: &str = "redlease";

/// The target of the library's renewal events, whose one info event is
/// "renewals to the node work again": shown by default, after its warning
/// ("renewals to a node are failing").
const RENEWALS: &str = "redlease::renewal";

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

/// What to log, and how.
struct Setup {
    filter: Targets,
    /// A complaint about `RUST_LOG` if it is set but unusable (then the
    /// flags decide, as if it were not set).
    complaint: Option<String>,
    /// Operator lines ([`Plain`]) rather than debugging ones.
    plain: bool,
}

fn setup(verbose: u8, quiet: bool, rust_log: Option<&str>) -> Setup {
    let default = || {
        let mut directives = format!("{TARGET}={}", level(verbose, quiet));
        if verbose == 0 && !quiet {
            directives.push_str(&format!(",{RENEWALS}=info"));
        }
        directives
            .parse()
            .expect("the default directives are well formed")
    };
    let flags = |complaint| Setup {
        filter: default(),
        complaint,
        plain: verbose == 0,
    };
    match rust_log.map(str::trim).filter(|s| !s.is_empty()) {
        None => flags(None),
        Some(directives) => match directives.parse::<Targets>() {
            Ok(filter) => Setup {
                filter,
                complaint: None,
                plain: false,
            },
            Err(e) => flags(Some(format!("ignoring RUST_LOG={directives:?}: {e}"))),
        },
    }
}

/// Installs the stderr logger; call once, before anything logs.
pub fn init(verbose: u8, quiet: bool) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let Setup {
        filter,
        complaint,
        plain,
    } = setup(verbose, quiet, rust_log.as_deref());
    // Every level through the builder (its own default stops at INFO):
    // the filter alone decides, so `RUST_LOG=redlease=debug` shows debug.
    let builder = tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::TRACE)
        .with_writer(std::io::stderr);
    let installed = match plain {
        true => builder.event_format(Plain).finish().with(filter).try_init(),
        false => builder
            .with_ansi(std::io::stderr().is_terminal())
            .finish()
            .with(filter)
            .try_init(),
    }
    .is_ok();
    if let Some(complaint) = complaint.filter(|_| installed) {
        eprintln!("redlease: warning: {complaint}");
    }
}

/// An event as one line for operators: `redlease: warning: MESSAGE: VALUE`
/// for an event with one field, `redlease: warning: MESSAGE (a=1, b=2)`
/// with more; no prefix below warnings.
struct Plain;

impl<S, N> FormatEvent<S, N> for Plain
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let level = match *event.metadata().level() {
            Level::ERROR => "error: ",
            Level::WARN => "warning: ",
            _ => "",
        };
        let mut line = format!("redlease: {level}{}", fields.message);
        match fields.others.as_slice() {
            [] => {}
            [(_, value)] => line.push_str(&format!(": {value}")),
            many => {
                let shown: Vec<String> = many.iter().map(|(k, v)| format!("{k}={v}")).collect();
                line.push_str(&format!(" ({})", shown.join(", ")));
            }
        }
        // One event, one line, whatever its values hold.
        writeln!(writer, "{}", line.replace('\n', " "))
    }
}

/// An event's message and its other fields, in order.
#[derive(Default)]
struct Fields {
    message: String,
    others: Vec<(&'static str, String)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.keep(field, value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.keep(field, format!("{value:?}"));
    }
}

impl Fields {
    fn keep(&mut self, field: &Field, value: String) {
        match field.name() {
            "message" => self.message = value,
            name => self.others.push((name, value)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(verbose: u8, quiet: bool, rust_log: Option<&str>) -> String {
        setup(verbose, quiet, rust_log).filter.to_string()
    }

    #[test]
    fn each_v_shows_one_level_more_of_redlease() {
        assert_eq!(
            shown(0, false, None),
            "redlease::renewal=info,redlease=warn"
        );
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
        let Setup {
            filter, complaint, ..
        } = setup(2, false, Some("redlease=loud"));
        assert_eq!(filter.to_string(), "redlease=debug");
        let complaint = complaint.expect("a complaint");
        assert!(
            complaint.contains("RUST_LOG=\"redlease=loud\""),
            "{complaint}"
        );
    }

    #[test]
    fn plain_lines_are_for_the_default_only() {
        assert!(setup(0, false, None).plain);
        assert!(setup(0, true, None).plain);
        assert!(!setup(1, false, None).plain);
        assert!(!setup(0, false, Some("redlease=warn")).plain);
        assert!(setup(0, false, Some("redlease=loud")).plain);
    }

    /// What `Plain` makes of the events `emit` logs.
    fn plain_lines(emit: impl FnOnce()) -> String {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .event_format(Plain)
            .finish()
            .with("info".parse::<Targets>().unwrap());
        tracing::subscriber::with_default(subscriber, emit);
        let bytes = buffer.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn plain_lines_read_as_sentences() {
        let why = "node 2 (10.0.0.3:6379): connection refused";
        let text = plain_lines(|| {
            tracing::warn!(error = %why, "renewals to a node are failing");
            tracing::info!(
                node = "node 2 (10.0.0.3:6379)",
                "renewals to the node work again"
            );
            tracing::warn!(key = "k", reason = "expired", "lease lost");
            tracing::error!("two\nlines");
        });
        assert_eq!(
            text,
            "redlease: warning: renewals to a node are failing: node 2 (10.0.0.3:6379): \
             connection refused\n\
             redlease: renewals to the node work again: node 2 (10.0.0.3:6379)\n\
             redlease: warning: lease lost (key=k, reason=expired)\n\
             redlease: error: two lines\n"
        );
    }
}
