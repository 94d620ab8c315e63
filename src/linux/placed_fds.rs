//! Descriptors a single-threaded process placed at fixed numbers itself (a
//! container init's pipes and socket at 3–6, `wire::words`' numbers): taking
//! one over, borrowing one that stays open, setting close-on-exec, and copying
//! a descriptor onto a fixed number. The caller keeps the contract the numbers
//! stand for: it placed each, takes each over at most once, and closes none
//! it lends out.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Takes over the descriptor the caller placed at `fd` (closed when the
/// result is dropped).
pub(crate) fn take(fd: RawFd) -> OwnedFd {
    // SAFETY: the caller placed `fd` for this process alone and takes it over
    // once (see the module doc); a number that is not open only makes the
    // later reads and writes fail.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Borrows the descriptor the caller placed at `fd` and never closes.
pub(crate) fn borrow(fd: RawFd) -> BorrowedFd<'static> {
    // SAFETY: the caller placed `fd` and keeps it open until the process
    // ends (see the module doc).
    unsafe { BorrowedFd::borrow_raw(fd) }
}

/// Marks the descriptor at `fd` close-on-exec.
pub(crate) fn set_close_on_exec(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_SETFD only sets the flags of a descriptor the caller placed.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes `target` a copy of `fd` (dup2), closing what `target` was.
pub(crate) fn copy_onto(fd: impl AsFd, target: RawFd) -> io::Result<()> {
    // SAFETY: dup2 of a descriptor we hold onto a number the caller gives
    // over to it; nothing else here refers to the file `target` was.
    if unsafe { libc::dup2(fd.as_fd().as_raw_fd(), target) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
