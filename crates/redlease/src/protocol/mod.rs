pub(crate) mod compare_delete;
pub(crate) mod lua;
pub(crate) mod server_error;
pub(crate) mod set_nx;
