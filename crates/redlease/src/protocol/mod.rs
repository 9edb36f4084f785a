//! Every exchange with a server as the library sends and reads it, with
//! no I/O: the Lua scripts, the plain-command acquire and the native
//! compare-and-delete, what the server's error replies mean, what a
//! server can do, and the commands each deployment needs.

pub(crate) mod capabilities;
// Public as `redlease::acl`.
pub mod commands;
pub(crate) mod compare_delete;
pub(crate) mod lua;
pub(crate) mod server_error;
pub(crate) mod set_nx;
