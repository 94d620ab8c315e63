//! clone3(2) forks: with `CLONE_INTO_CGROUP` (Linux ≥ 5.7, cgroup v2) a
//! child that starts life in a given cgroup, so everything it allocates —
//! from its first page on — is charged there, and no window exists in which
//! it runs in its parent's cgroup; with `CLONE_NEWPID` a child that is the
//! init of a PID namespace of its own.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::process::Forked;

/// `CLONE_INTO_CGROUP` from linux/sched.h (the libc crate's constant is typed
/// for 32 bits on some targets).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Why clone3 could not place the child: the kernel lacks it (fall back to
/// fork + joining by `cgroup.procs`) or refused this cgroup.
#[derive(Debug)]
pub(crate) enum CloneIntoCgroupError {
    /// ENOSYS/E2BIG/EINVAL: no clone3 or no CLONE_INTO_CGROUP here.
    Unsupported(io::Error),
    Failed(io::Error),
}

/// Forks into the cgroup whose directory `cgroup` is open (O_PATH is
/// enough). Only for single-threaded helper processes, as `process::fork`.
pub(crate) fn fork_into_cgroup(cgroup: BorrowedFd<'_>) -> Result<Forked, CloneIntoCgroupError> {
    clone3(CLONE_INTO_CGROUP, Some(cgroup)).map_err(|err| match err.raw_os_error() {
        Some(libc::ENOSYS) | Some(libc::E2BIG) | Some(libc::EINVAL) => CloneIntoCgroupError::Unsupported(err),
        _ => CloneIntoCgroupError::Failed(err),
    })
}

/// Forks a child that is the first process (PID 1) of a new PID namespace,
/// leaving the caller's namespace for its later children as it was (unlike
/// unshare). Only for single-threaded helper processes, as `process::fork`.
pub(crate) fn fork_into_new_pid_namespace() -> io::Result<Forked> {
    clone3(libc::CLONE_NEWPID as u64, None)
}

/// Forks a child with the `CLONE_*` namespace `flags` (new namespaces made
/// for it; with CLONE_NEWUSER the others are owned by its new user
/// namespace, and with CLONE_NEWPID it is that namespace's PID 1). Only for
/// single-threaded helper processes, as `process::fork`.
pub(crate) fn fork_with_flags(flags: u64) -> io::Result<Forked> {
    clone3(flags, None)
}

fn clone3(flags: u64, cgroup: Option<BorrowedFd<'_>>) -> io::Result<Forked> {
    // SAFETY: clone_args is plain old data; all-zero is its documented default.
    let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
    args.flags = flags;
    args.exit_signal = libc::SIGCHLD as u64;
    if let Some(cgroup) = cgroup {
        args.cgroup = cgroup.as_raw_fd() as u64;
    }
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
        _ => Err(io::Error::last_os_error()),
    }
}
