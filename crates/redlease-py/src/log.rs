//! The library's log events (`tracing`), handed to Python's `logging`.
//!
//! An event at or above the level the package last read from the
//! `redlease` logger ([`set_level`]) is formatted where it happens, into
//! one line (the message, then its fields as `key=value`), and put on a
//! bounded queue without waiting. One thread of its own takes the queue
//! and calls the package's emitter with the GIL: a library thread never
//! waits for the GIL (which a Python thread may hold while it waits for
//! that library thread), and a burst of events never slows the locks. When
//! the queue is full an event is dropped and counted; the next one passed
//! on says how many were.
//!
//! Logger names follow the event's target, `::` read as `.`: the library's
//! events go to `redlease.coord.renew` and the like, under `redlease`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};

use pyo3::prelude::*;
use tracing::field::{Field, Visit};
use tracing::subscriber::Interest;
use tracing::{span, Event, Level, Metadata, Subscriber};

/// How many events wait for the forwarding thread at most.
const QUEUE: usize = 1024;

/// The lowest Python level passed on (`logging.DEBUG` is 10); above
/// `logging.CRITICAL` (50) until the package sets it, so nothing is
/// formatted for nobody.
static LEVEL: AtomicU8 = AtomicU8::new(u8::MAX);

/// Events dropped on a full queue since the last one passed on.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// One event on its way: (Python level, logger name, line).
type Record = (u8, String, String);

struct Forwarder {
    queue: SyncSender<Record>,
    /// Cloned out before each call, never called under the lock (the
    /// thread that sets it holds the GIL).
    emit: Mutex<Option<Arc<Py<PyAny>>>>,
}

fn forwarder() -> &'static Forwarder {
    static FORWARDER: OnceLock<Forwarder> = OnceLock::new();
    FORWARDER.get_or_init(|| {
        let (queue, records) = sync_channel(QUEUE);
        // Without its thread, events fill the queue and are dropped: the
        // locks go on, untold.
        let _ = std::thread::Builder::new()
            .name("redlease-log".into())
            .spawn(move || forward(records));
        Forwarder {
            queue,
            emit: Mutex::new(None),
        }
    })
}

/// The forwarding thread: each record to the emitter, with the GIL.
fn forward(records: Receiver<Record>) {
    for (level, target, line) in records {
        if crate::closing() {
            continue;
        }
        let emit = forwarder()
            .emit
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(emit) = emit {
            crate::call_back(&emit, (level, target, line));
        }
    }
}

/// Sets the emitter, `emit(level, logger_name, line)`, and the lowest
/// level passed on (Python's numbers: 10 debug, 20 info, 30 warning). The
/// package calls it at import and whenever a Locker is made.
#[pyfunction]
pub fn set_logger(emit: Py<PyAny>, level: i64) {
    LEVEL.store(level.clamp(0, i64::from(u8::MAX)) as u8, Ordering::Relaxed);
    *forwarder().emit.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(emit));
}

/// The Python level of a `tracing` level.
fn python_level(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 40,
        Level::WARN => 30,
        Level::INFO => 20,
        Level::DEBUG => 10,
        _ => 5,
    }
}

/// Installs [`ToPython`] as this module's subscriber (its own copy of
/// `tracing`: other extension modules in the process keep theirs).
pub fn install() {
    let _ = tracing::subscriber::set_global_default(ToPython);
}

/// Hands events at or above [`LEVEL`] to the forwarding thread. Spans are
/// never enabled: the lines carry an event's own fields only, and a span
/// not enabled costs the library's hot paths nothing.
struct ToPython;

impl Subscriber for ToPython {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        // The level changes at run time: asked at every call (one load).
        Interest::sometimes()
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        meta.is_event() && python_level(meta.level()) >= LEVEL.load(Ordering::Relaxed)
    }

    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        // Never called: no span is enabled.
        span::Id::from_u64(1)
    }

    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

    fn enter(&self, _: &span::Id) {}

    fn exit(&self, _: &span::Id) {}

    fn event(&self, event: &Event<'_>) {
        let meta = event.metadata();
        let mut line = Line::default();
        event.record(&mut line);
        let mut text = line.message;
        text.push_str(&line.fields);
        let dropped = DROPPED.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            let _ = write!(
                text,
                " ({dropped} earlier log events dropped: Python's logging fell behind)"
            );
        }
        let record = (
            python_level(meta.level()),
            meta.target().replace("::", "."),
            text,
        );
        if forwarder().queue.try_send(record).is_err() {
            // Full (or its thread never started): counted, told later.
            DROPPED.fetch_add(dropped + 1, Ordering::Relaxed);
        }
    }
}

/// An event's message, then its other fields as ` key=value`.
#[derive(Default)]
struct Line {
    message: String,
    fields: String,
}

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }
}
