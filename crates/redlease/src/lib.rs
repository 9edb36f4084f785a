//! Distributed locks (leases) on Redis: on one Redis deployment, or as a
//! Redlock quorum over several independent ones.
//!
//! A [`Locker`] holds the nodes. [`Locker::lock`] waits for a lock,
//! [`Locker::try_lock`] tries once; both give a [`Lease`] that is valid until
//! [`Lease::valid_until`] unless extended or kept alive, and is given back
//! with [`Lease::release`]. [`Locker::close`] shuts a Locker down. Expert
//! settings sit behind [`LockerBuilder::advanced`], the operator's tools
//! (inspection, force release, key names) behind [`Locker::admin`].
//! [`Locker::read_lock`] and [`Locker::write_lock`] make it a read-write
//! lock: any number of readers, or one writer; a writer's lease becomes
//! a reader's with [`Lease::downgrade`], with no other writer in between.
//! [`Locker::semaphore`] admits at most N holders at once, each permit a
//! lease of its own (or k permits at once, with
//! [`Semaphore::acquire_many`]), over a quorum large enough for N.
//! [`Locker::lock_all`] takes several locks at once, all or none (some
//! of them shared, with [`Acquire::and_read`]), and
//! [`Lease::export`] hands a lease to another process, which
//! [adopts](Locker::adopt) it. [`Locker::election`] elects one leader
//! at a time, with a value and a term, and tells anyone who leads;
//! [`Locker::watch`] tells each change of a name, without polling.
//!
//! Every mode waits in turn: exclusive locks, readers, permits and sets
//! that want a name wait in one queue for it on the servers, first come,
//! first served across processes. A reader that arrives after a waiting
//! writer waits behind it, a waiter for k permits is never overtaken by
//! later ones for fewer, and a waiter whose process is gone is passed
//! over by the next release or attempt that reaches it. A refusal by the
//! line is [`HeldBy::Queued`].
//!
//! ```no_run
//! use std::time::Duration;
//! use redlease::{Error, Locker};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Error> {
//!     let locker = Locker::builder(["redis://127.0.0.1:6379"])
//!         .ttl(Duration::from_secs(10))
//!         .build()?;
//!
//!     // Only one process in the fleet runs the report at a time. The lease
//!     // is renewed in the background while it runs, and `lost()` resolves
//!     // as soon as it can no longer be trusted: the work stops there.
//!     let lease = locker.lock("nightly-report").keep_alive().await?;
//!     tokio::select! {
//!         why = lease.lost() => eprintln!("lost the lock ({why}); report abandoned"),
//!         () = build_report(lease.fencing_token()) => lease.release().await?,
//!     }
//!     locker.close().await;
//!     Ok(())
//! }
//! # async fn build_report(_fence: Option<u64>) {}
//! ```
//!
//! Programs without an async runtime (a CLI, a cron job, worker threads)
//! use [`blocking`]: the same Locker, settings and leases, with plain
//! calls; its own threads keep leases alive meanwhile.
//!
//! ```
//! use std::time::Duration;
//! use redlease::{blocking::Locker, Error};
//!
//! fn main() -> Result<(), Error> {
//! #   let nodes = redlease_testkit::RedisNodes::start(1);
//! #   let urls = nodes.urls();
//!     // let urls = ["redis://127.0.0.1:6379"];
//!     let locker = Locker::builder(urls)
//!         .ttl(Duration::from_secs(10))
//! #       .advanced(|a| a.restart_quarantine(Duration::ZERO)) // brand-new test servers
//!         .build()?;
//!     let lease = locker.request("nightly-report").keep_alive().lock()?;
//!     if !lease.is_lost() {
//!         // ... build the report, checking lease.is_lost() between steps ...
//!     }
//!     lease.release()
//! }
//! ```
//!
//! How the lock works (the algorithm, waiting in turn, renewal, slow nodes,
//! restarts and clock jumps, fencing, read-write locks, semaphores,
//! Cluster, Sentinel and durability, TLS, observability) is told in
//! `docs/library.md` in the repository;
//! the deployments guide and the fault figures are beside it.
//!
//! # Guarantees and limits
//!
//! While every assumption below holds, no two leases on the same resource
//! are valid at the same instant, except read leases together (a write
//! lease shares its time with no other lease) and at most N permits of a
//! semaphore of N (a hold of k permits counting k), and a lease that could not be made valid is never
//! returned. The assumptions:
//!
//! - **Bounded clock drift.** Each node expires keys with its own clock. The
//!   validity is cut by the drift allowance so that a node whose clock runs
//!   up to 1% fast (plus 2 ms) still holds the key until `valid_until`. A
//!   node whose clock jumps forward (an NTP step, a VM restored from
//!   snapshot) casts no vote for a Locker that sees the jump (see the library manual); run
//!   nodes with slewing time sync all the same.
//! - **A restart quarantine that covers every TTL.** A node that restarts
//!   without the keys it had casts no "yes" for the
//!   [restart quarantine](Advanced::restart_quarantine), which must
//!   cover the largest TTL any client uses. With the quarantine
//!   off, run nodes with `appendonly yes` and `appendfsync always`, or
//!   keep a crashed node down for longer than the largest TTL in use.
//!   Replicas do not help by themselves: Redis replication is asynchronous,
//!   so a failover can lose a lock key. Use independent primaries, or ask
//!   for [`Durability`].
//! - **No long pauses in the holder.** A process paused (GC, swap, SIGSTOP,
//!   a slow network write) past `valid_until` may still act on the protected
//!   resource after another client took the lock. No lock service can
//!   prevent that on its own; check [`Lease::remaining`] before each step,
//!   keep steps short against the TTL, and have the resource reject stale
//!   writers where possible.
//! - **Independent nodes.** The same server listed twice would fake a
//!   majority; the [`LockerBuilder`] rejects identical `host:port` pairs,
//!   and a server reached under two names (the same `run_id`) makes every
//!   acquire fail with [`Error::SameServer`]. Two servers that share a
//!   fate (one machine, one disk) are not told apart.
//!
//! Under faults (checked by the fault-injection suite in `redlease-soak`,
//! which kills, pauses, delays, blackholes, resets and partitions nodes in
//! the middle of a run and checks every call's history): crashes of a
//! minority of nodes, pauses up to twice the TTL, link latency beyond the
//! TTL, blackholed or reset links, replies buffered past the TTL and
//! asymmetric partitions all left the lock safe, with every call bounded
//! and every failure a typed error. A node without fsync'd persistence
//! restarted empty at once is safe with the restart quarantine (and
//! overlaps without it), and so is a node whose clock jumps forward, with
//! the clock-jump guard. One fault is not survivable by design, and the suite's
//! negative control shows it failing: a holder paused past its lease (a
//! lost update, unless the resource checks fencing tokens). See
//! GUARANTEES.md in the repository for the bounds and figures.
//!
//! Keys a node may still hold after a failed or abandoned operation always
//! carry the TTL, so the worst case of a lost reply is a lock that stays
//! taken until it expires, never one that is free while someone holds it.
//!
//! # Cancel safety
//!
//! Every future here can be dropped at any point. An acquire dropped
//! mid-flight deletes its token from every node in the background; a
//! waiting task that is dropped leaves its queue (its place in the lock's
//! queue on the servers too, in the background, handing on a lock that
//! was just handed to it); a [`Lease`] dropped without `release` is
//! released in the background.
//!
//! # Reentrancy
//!
//! Locks are not reentrant. A lease belongs to no task or thread, so a
//! second [`Locker::lock`] of a name that a lease of the same Locker holds
//! is one more taker: it waits until that lease is released or expires,
//! and a task that asks again for a lock it holds waits for itself until
//! its wait runs out. The refusal says so ([`Error::Taken`]'s
//! `by_this_locker`). Hand the [`Lease`] down to the code that needs the
//! lock instead of locking again.

#![deny(missing_docs)]

mod api;
mod coord;
mod core;
mod protocol;
mod transport;

pub use crate::api::acquire::Acquire;
pub use crate::api::admin::Admin;
pub use crate::api::advanced::Advanced;
pub use crate::api::blocking;
pub use crate::api::builder::LockerBuilder;
pub use crate::api::election::{Campaign, Election, Leadership, Observe, MAX_LEADER_VALUE_LEN};
pub use crate::api::handle::HandleInfo;
pub use crate::api::lease::Lease;
pub use crate::api::lease_handle::LeaseHandle;
pub use crate::api::locker::{Locker, MAX_KEY_LEN};
pub use crate::api::semaphore::Semaphore;
pub use crate::api::try_acquire::TryAcquire;
pub use crate::api::watch::Watch;
pub use crate::coord::renew::RenewalStats;
pub use crate::core::durability::Durability;
pub use crate::core::error::{Error, Op};
pub use crate::core::leader::{Leader, LeaderRecord};
pub use crate::core::lease_state::LostReason;
pub use crate::core::lock_status::{KeyState, LockStatus, NodeLockState, NodeQuarantine, Verdict};
pub use crate::core::mode::LockMode;
pub use crate::core::node_error::{NodeError, NodeErrorKind, NodeId, Quarantine};
pub use crate::core::owner::{default_owner, Holder, MAX_OWNER_LEN};
pub use crate::core::refusal::{Held, HeldBy};
pub use crate::core::retry::RetryPolicy;
#[cfg(feature = "model")]
#[doc(hidden)]
pub use crate::core::rules;
pub use crate::core::server_code::ServerErrorCode;
pub use crate::core::validity::MAX_TTL;
pub use crate::protocol::capabilities::{Capabilities, ServerVersion};
pub use crate::protocol::commands as acl;
pub use crate::transport::node_url::{redact_url, NodeUrl, SentinelUrl};
pub use crate::transport::tls::TlsConfig;
#[doc(hidden)]
pub use crate::transport::tls::{
    handshake_failure as tls_handshake_failure, scheme_mismatch, SchemeMismatch,
};

/// The examples of README.md and docs/library.md, compiled with the
/// doctests so they keep up with the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
#[doc = include_str!("../../../docs/library.md")]
pub struct ReadmeDoctests;
