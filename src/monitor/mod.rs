//! The monitor: one process per container that is not the daemon's (it leads
//! its own session and outlives the daemon). It forks the container's init,
//! copies the container's stdout/stderr into the CRI log file, answers the
//! daemon on a Unix socket (start, reopen-log, attach, close-stdin; the
//! messages are `crate::wire`'s), and writes the exit record
//! atomically when the container ends, then exits itself.

pub(crate) mod attach;
pub(crate) mod control;
mod hooks;
pub mod init;
pub(crate) mod log;
pub mod plan;
mod prepared;
mod program;
mod restore;

pub use program::{finish, run};
