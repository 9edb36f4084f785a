//! Counts every panic in the process, library background tasks included,
//! for check 5. Panics of the harness itself (a node that fails to restart)
//! are not the library's and are reported as harness errors instead.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

static PANICS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static IN_HARNESS: Cell<bool> = const { Cell::new(false) };
}

/// Installs the counting hook in front of the default one (which still
/// prints the message and location).
pub fn install() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !IN_HARNESS.with(Cell::get) {
            PANICS.fetch_add(1, Ordering::SeqCst);
        }
        default(info);
    }));
}

/// Panics counted so far.
pub fn count() -> usize {
    PANICS.load(Ordering::SeqCst)
}

/// Runs `f` (blocking harness work such as restarting a node) with its
/// panics left out of the count.
pub fn harness<T>(f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            IN_HARNESS.with(|h| h.set(false));
        }
    }
    IN_HARNESS.with(|h| h.set(true));
    let _reset = Reset;
    f()
}

/// The message of a caught panic.
pub fn message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}
