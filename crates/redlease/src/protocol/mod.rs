//! Every exchange with a server as the library sends and reads it, with
//! no I/O: each script call a typed request that declares its script's
//! keys, arguments and reply and encodes itself, each reply a typed value
//! read with `FromRedisValue`; the plain-command acquire and the native
//! compare-and-delete; error replies classified once into a
//! [`ServerErrorCode`](crate::core::server_code::ServerErrorCode); what a
//! server can do; and the commands each deployment needs.

pub(crate) mod acquire;
pub(crate) mod capabilities;
pub(crate) mod claim;
// Public as `redlease::acl`.
pub mod commands;
pub(crate) mod compare_delete;
pub(crate) mod election;
pub(crate) mod lease;
pub(crate) mod lua;
pub(crate) mod server_error;
pub(crate) mod set_nx;
