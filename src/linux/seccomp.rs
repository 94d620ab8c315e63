//! Installing compiled seccomp filters on the calling thread with seccomp(2).
//! The filters are turned into kernel structures beforehand (`prepare`), so
//! installing them makes no allocation: the first installed filter already
//! judges every later call.

use std::io;

use crate::seccomp::Filter;

/// Filters ready for the kernel.
pub struct PreparedFilters {
    filters: Vec<(u32, Vec<libc::sock_filter>)>,
}

pub fn prepare(filters: &[Filter]) -> PreparedFilters {
    let filters = filters
        .iter()
        .map(|f| {
            let program =
                f.instructions.iter().map(|i| libc::sock_filter { code: i.code, jt: i.jt, jf: i.jf, k: i.k }).collect();
            (f.flags, program)
        })
        .collect();
    PreparedFilters { filters }
}

impl PreparedFilters {
    pub fn len(&self) -> usize {
        self.filters.len()
    }

    pub fn is_empty(&self) -> bool {
        self.filters.is_empty()
    }

    /// Installs every filter, first to last. Needs no_new_privs or
    /// CAP_SYS_ADMIN in the effective set.
    pub fn install(&self) -> io::Result<()> {
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
