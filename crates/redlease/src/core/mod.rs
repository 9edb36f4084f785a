//! The ground floor, pure: the error model and the settings every layer
//! shares, and the decisions a lock makes without I/O (quorum, validity,
//! expiry bounds, fencing, retry, renewal schedule, vote guard, tokens,
//! what a refusal tells a waiter),
//! tested with injected time.

pub(crate) mod claim;
pub(crate) mod durability;
pub(crate) mod error;
pub(crate) mod expiry;
pub(crate) mod fencing;
pub(crate) mod handle;
pub(crate) mod keys;
pub(crate) mod leader;
pub(crate) mod lease_state;
pub(crate) mod lock_status;
pub(crate) mod mode;
pub(crate) mod node_error;
pub(crate) mod owner;
pub(crate) mod quorum;
pub(crate) mod refusal;
pub(crate) mod renew_schedule;
pub(crate) mod retry;
#[cfg(feature = "model")]
pub mod rules;
pub(crate) mod server_code;
pub(crate) mod slab;
pub(crate) mod telemetry;
pub(crate) mod token;
pub(crate) mod validity;
pub(crate) mod vote_guard;
