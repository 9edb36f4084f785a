//! Every exchange with a server as the library sends and reads it, with
//! no I/O: the Lua scripts, the plain-command acquire and the native
//! compare-and-delete, and what the server's error replies mean.

pub(crate) mod compare_delete;
pub(crate) mod lua;
pub(crate) mod server_error;
pub(crate) mod set_nx;
