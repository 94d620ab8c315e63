//! clone3(2) with `CLONE_INTO_CGROUP` (Linux ≥ 5.7, cgroup v2): a fork whose
//! child starts life in a given cgroup, so everything it allocates — from its
//! first page on — is charged there, and no window exists in which it runs
//! in its parent's cgroup.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::process::Forked;

/// `CLONE_INTO_CGROUP` from linux/sched.h (the libc crate's constant is typed
/// for 32 bits on some targets).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Why clone3 could not place the child: the kernel lacks it (fall back to
/// fork + joining by `cgroup.procs`) or refused this cgroup.
#[derive(Debug)]
pub enum CloneIntoCgroupError {
    /// ENOSYS/E2BIG/EINVAL: no clone3 or no CLONE_INTO_CGROUP here.
    Unsupported(io::Error),
    Failed(io::Error),
}

/// Forks into the cgroup whose directory `cgroup` is open (O_PATH is
/// enough). Only for single-threaded helper processes, as `process::fork`.
pub fn fork_into_cgroup(cgroup: BorrowedFd<'_>) -> Result<Forked, CloneIntoCgroupError> {
    // SAFETY: clone_args is plain old data; all-zero is its documented default.
    let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
    args.flags = CLONE_INTO_CGROUP;
    args.exit_signal = libc::SIGCHLD as u64;
    args.cgroup = cgroup.as_raw_fd() as u64;
    // SAFETY: like fork(2): the caller is single-threaded, so the child may go
    // on running any code; no stack is given, so the child continues on a copy
    // of ours. `args` lives across the call and its size is passed. The child's
    // libc still caches the parent's thread id, which only pthread-level calls
    // read; the helpers that call this use none of them in the child.
    let rc = unsafe {
        libc::syscall(libc::SYS_clone3, &mut args as *mut libc::clone_args, std::mem::size_of::<libc::clone_args>())
    };
    match rc {
        0 => Ok(Forked::Child),
        pid if pid > 0 => Ok(Forked::Parent { child: pid as i32 }),
        _ => {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::ENOSYS) | Some(libc::E2BIG) | Some(libc::EINVAL) => {
                    Err(CloneIntoCgroupError::Unsupported(err))
                }
                _ => Err(CloneIntoCgroupError::Failed(err)),
            }
        }
    }
}
