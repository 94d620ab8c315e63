//! Installing compiled seccomp filters on the calling thread with seccomp(2).
//! The filters are kernel structures already (`seccomp::program::prepare`
//! makes them), so installing them makes no allocation: the first installed
//! filter already judges every later call.

use std::io;

/// Filters ready for the kernel.
pub(crate) struct PreparedFilters {
    filters: Vec<(u32, Vec<libc::sock_filter>)>,
}

impl PreparedFilters {
    /// Each filter's `SECCOMP_FILTER_FLAG_*` bits and its instructions, first to last.
    pub(crate) fn new(filters: Vec<(u32, Vec<libc::sock_filter>)>) -> Self {
        Self { filters }
    }

    /// Installs every filter, first to last. Needs no_new_privs or
    /// CAP_SYS_ADMIN in the effective set.
    pub(crate) fn install(&self) -> io::Result<()> {
        for (flags, program) in &self.filters {
            let fprog = libc::sock_fprog { len: program.len() as u16, filter: program.as_ptr().cast_mut() };
            // SAFETY: fprog points at `program`, which outlives the call; the
            // kernel copies the instructions and keeps no pointer to them.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER,
                    *flags as libc::c_ulong,
                    &fprog as *const libc::sock_fprog,
                )
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// How long installing `filters` takes, measured in `runs` forked children
/// (each sets no_new_privs, installs, reports its time and exits), in
/// nanoseconds per run. Only for single-threaded callers (the CLI).
pub(crate) fn time_install_in_children(filters: &PreparedFilters, runs: u32) -> io::Result<Vec<u64>> {
    use std::io::Read;
    let mut times = Vec::with_capacity(runs as usize);
    for _ in 0..runs {
        let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
        match super::process::fork()? {
            super::process::Forked::Child => {
                drop(read_end);
                let started = std::time::Instant::now();
                let result = super::process::set_no_new_privs().and_then(|()| filters.install());
                // An error travels as u64::MAX - errno.
                let nanos = match result {
                    Ok(()) => started.elapsed().as_nanos() as u64,
                    Err(e) => u64::MAX - e.raw_os_error().unwrap_or(0) as u64,
                };
                let _ = nix::unistd::write(&write_end, &nanos.to_le_bytes());
                // SAFETY: _exit ends the child at once, running no destructors
                // or atexit handlers of the parent's state.
                unsafe { libc::_exit(0) }
            }
            super::process::Forked::Parent { child } => {
                drop(write_end);
                let mut bytes = [0u8; 8];
                let read = std::fs::File::from(read_end).read_exact(&mut bytes);
                let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(child), None);
                read?;
                match u64::from_le_bytes(bytes) {
                    failed if failed > u64::MAX - 4096 => {
                        return Err(io::Error::from_raw_os_error((u64::MAX - failed) as i32))
                    }
                    nanos => times.push(nanos),
                }
            }
        }
    }
    Ok(times)
}
