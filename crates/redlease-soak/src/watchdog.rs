//! Notices when the machine stopped running this process: a plain OS
//! thread (not a Tokio task) sleeps 5 ms at a time and records each wake-up
//! that came more than `STALL` late. The checker does not blame the library
//! for time the whole process was not scheduled (a loaded 2-core machine,
//! a VM's stolen time), while a library call that blocks Tokio's threads
//! still shows, since this thread keeps running then.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How late a wake-up must be to count as a stall.
pub const STALL: Duration = Duration::from_millis(50);
const TICK: Duration = Duration::from_millis(5);

/// A stall: `(start, end)` as offsets from the run's epoch.
pub type Stall = (Duration, Duration);

pub struct Watchdog {
    stop: Arc<AtomicBool>,
    stalls: Arc<Mutex<Vec<Stall>>>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    pub fn start(epoch: Instant) -> Watchdog {
        let stop = Arc::new(AtomicBool::new(false));
        let stalls = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stop, stalls) = (stop.clone(), stalls.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let before = Instant::now();
                    std::thread::sleep(TICK);
                    let after = Instant::now();
                    if after - before > TICK + STALL {
                        // The sleep itself is not part of the stall.
                        let start = (before + TICK).saturating_duration_since(epoch);
                        let end = after.saturating_duration_since(epoch);
                        stalls.lock().expect("stall log").push((start, end));
                    }
                }
            })
        };
        Watchdog {
            stop,
            stalls,
            thread: Some(thread),
        }
    }

    /// Stops watching; the stalls seen, in time order.
    pub fn stop(mut self) -> Vec<Stall> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let stalls = self.stalls.lock().expect("stall log").clone();
        stalls
    }
}
