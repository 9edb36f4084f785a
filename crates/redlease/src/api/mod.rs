//! What users hold: the [`Locker`](crate::Locker) and its builder, the
//! acquire future, the [`Lease`](crate::Lease) and its handle, and the
//! operator's tools.

pub(crate) mod acquire;
pub(crate) mod admin;
pub(crate) mod builder;
pub(crate) mod lease;
pub(crate) mod lease_handle;
pub(crate) mod locker;
