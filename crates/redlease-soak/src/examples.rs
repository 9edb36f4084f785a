//! The few examples of each violation a report shows, and how times are
//! spelled in them: shared by every checker.

use std::collections::BTreeMap;
use std::time::Duration;

/// How many examples per category are kept.
pub(crate) const EXAMPLES: usize = 5;

/// Adds `text` to `category`'s examples unless it has [`EXAMPLES`]
/// already (`text` is only spelled then).
pub(crate) fn keep_example(
    examples: &mut BTreeMap<&'static str, Vec<String>>,
    category: &'static str,
    text: impl FnOnce() -> String,
) {
    let list = examples.entry(category).or_default();
    if list.len() < EXAMPLES {
        list.push(text());
    }
}

/// A time since the run began, as reports spell it: `1234.5ms`.
pub(crate) fn fmt_ms(d: Duration) -> String {
    format!("{:.1}ms", d.as_secs_f64() * 1e3)
}
