//! What users hold: the [`Locker`](crate::Locker), its builder and expert
//! settings, the lock requests, the [`Lease`](crate::Lease) and its
//! handle, and the operator's [`Admin`](crate::Admin) handle.

pub(crate) mod acquire;
pub(crate) mod admin;
pub(crate) mod advanced;
pub(crate) mod builder;
pub(crate) mod lease;
pub(crate) mod lease_handle;
pub(crate) mod locker;
pub(crate) mod try_acquire;
