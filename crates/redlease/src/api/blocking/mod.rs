//! The blocking API: locks for programs without an async runtime (CLIs,
//! build tools, cron jobs, batch workers, rayon or plain threads).
//!
//! [`Locker`], [`Lease`] and [`Semaphore`] have the async API's
//! operations, settings, guarantees and errors, with plain calls in place
//! of futures: [`Locker::lock`] waits for a lock (10 s by default),
//! [`Locker::try_lock`] tries once, [`Locker::with_lock`] runs a closure
//! under a kept-alive lock, and [`Locker::request`] sets a TTL, a wait or
//! keep-alive per call. A lease is [extended](Lease::extend),
//! [released](Lease::release), or [kept alive](Acquire::keep_alive);
//! [`Lease::is_lost`] and [`Lease::wait_lost`] tell when it can no longer
//! be trusted. The caller sets up nothing: no runtime, no `async`.
//!
//! ```
//! use std::time::Duration;
//! use redlease::{blocking::Locker, Error};
//!
//! fn main() -> Result<(), Error> {
//! #   let nodes = redlease_testkit::RedisNodes::start(1);
//! #   let urls = nodes.urls();
//!     // let urls = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"];
//!     let locker = Locker::builder(urls)
//!         .ttl(Duration::from_secs(10))
//! #       .advanced(|a| a.restart_quarantine(Duration::ZERO)) // brand-new test servers
//!         .build()?;
//!
//!     // Wait for the lock, work, give it back:
//!     let lease = locker.lock("nightly-report")?;
//!     // ... only one process in the fleet gets here at a time ...
//!     lease.release()?;
//!
//!     // Work that may outlast the TTL: the Locker's threads renew the
//!     // lease while this thread works; check is_lost() between steps.
//!     let batches = locker.with_lock("nightly-import", |lease| {
//!         let mut done = 0;
//!         while done < 3 && !lease.is_lost() {
//!             done += 1; // ... import a batch ...
//!         }
//!         done
//!     })?;
//!     assert_eq!(batches, 3);
//!     Ok(())
//! }
//! ```
//!
//! # Threads
//!
//! Each Locker built here runs a Tokio runtime of its own, on one thread
//! named `redlease-blocking` and on the threads that call it. A call runs
//! the runtime on the calling thread: it writes its requests, waits for
//! the sockets and reads the replies there, with no other thread woken.
//! Between calls (a millisecond after the last one ended), the
//! `redlease-blocking` thread runs it: the renewal of kept-alive leases,
//! the lost signal, release notifications and the requests that finish in
//! the background go on while the calling thread is busy, asleep or
//! blocked elsewhere. Clones of a Locker share the runtime and the thread;
//! they stop when the last clone and the last lease it gave are dropped.
//! Any number of threads may use one Locker (or its clones) at once.
//!
//! # Blocking, and where it is refused
//!
//! Each call that waits says what for, and its bound, under "Blocking" in
//! its docs: a lock for its wait (the retry policy's, 10 s by default),
//! everything else for one round trip to the nodes, bounded by the node
//! timeout. Called on a thread with a Tokio runtime (in an async task, a
//! `spawn_blocking` closure, or after `Runtime::enter`), a call returns
//! [`Error::InsideRuntime`](crate::Error::InsideRuntime) at once instead
//! of blocking the runtime, or deadlocking on it: async code uses the
//! async API ([`Locker::as_async`], [`Locker::from_async`] for the other
//! way round). Drops never panic there: see below.
//!
//! # Drops
//!
//! Dropping a [`Lease`] releases it, and waits for the release up to
//! [`DROP_WAIT`] (1 s); a release still running then goes on in the
//! background. Dropping the last handle of a Locker waits up to
//! [`DROP_WAIT`] for the requests still finishing in the background
//! (releases, clean-ups of failed attempts), then up to [`DROP_WAIT`] for
//! its threads to stop. On a thread with a Tokio runtime, where nothing
//! may block, a dropped lease is released in the background on the
//! Locker's threads, and a dropped Locker stops on a thread of its own.
//! [`Locker::close`] is the orderly end of a short-lived program: it
//! releases every lease the Locker still holds.
//!
//! # Processes that fork
//!
//! `fork()` copies only the calling thread: in the child, a Locker's
//! threads do not exist, and its connections are the parent's sockets. A
//! Locker (or lease) inherited by a child is unusable there, and says so
//! instead of hanging: every call returns
//! [`Error::Forked`](crate::Error::Forked) at once (each call compares
//! the process id with the one recorded when the Locker was built), an
//! inherited lease reads as lost ([`LostReason::Closed`](crate::LostReason::Closed)),
//! and dropping either in the child does nothing: no release (the lease
//! is the parent's, which still holds and renews it) and no word on the
//! parent's connections; their memory goes with the child. The parent is
//! not affected. A program that forks workers builds a Locker in each
//! worker after the fork (or forks before building one); a child that
//! execs at once needs nothing.
//! The async Locker inside ([`Locker::as_async`]) is not checked: do not
//! use it in a child.
//!
//! # Cost
//!
//! A call costs what the async call costs, plus handing the request to
//! the Locker's threads and waking the caller with the reply; the
//! uncontended lock cycle through the facade against the async API is in
//! BENCHMARKS.md in the repository.

mod acquire;
mod builder;
mod election;
mod lease;
mod locker;
mod runtime;
mod semaphore;
mod watch;

pub use acquire::Acquire;
pub use builder::LockerBuilder;
pub use election::{Election, Leadership, Observe};
pub use lease::Lease;
pub use locker::Locker;
pub use runtime::DROP_WAIT;
pub use semaphore::Semaphore;
pub use watch::Watch;
