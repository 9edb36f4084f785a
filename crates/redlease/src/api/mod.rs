pub(crate) mod acquire;
pub(crate) mod admin;
pub(crate) mod builder;
pub(crate) mod lease;
pub(crate) mod lease_handle;
pub(crate) mod locker;
