//! What users hold: the [`Locker`](crate::Locker), its builder and expert
//! settings, the lock requests, the [`Lease`](crate::Lease) and its
//! handle, a [`Semaphore`](crate::Semaphore)'s permits, and the
//! operator's [`Admin`](crate::Admin) handle; and the same for threads
//! without an async runtime, in [`blocking`](crate::blocking).

pub(crate) mod acquire;
pub(crate) mod admin;
pub(crate) mod advanced;
pub mod blocking;
pub(crate) mod builder;
pub(crate) mod election;
pub(crate) mod handle;
pub(crate) mod lease;
pub(crate) mod lease_handle;
pub(crate) mod locker;
pub(crate) mod semaphore;
pub(crate) mod try_acquire;
pub(crate) mod watch;
