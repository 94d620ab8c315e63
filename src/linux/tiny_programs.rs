//! The tiny steady-state programs (src/linux/tiny/, built by build.rs and
//! embedded here) and how a helper hands over to one: the pause and the
//! monitor do their set-up in Rust with std, then exec a few-kilobyte static
//! program in place — same pid, same parentage — that does the waiting for
//! the rest of the pod's or container's life.
//!
//! Each program is exec'd from a sealed memfd: nothing on disk to find or
//! replace, and a process that reaches it through `/proc/PID/exe` finds a
//! file that cannot be written (the seals forbid it).

use std::ffi::CString;
use std::io;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::process::{dup_at_least, Parked};

/// The pause's idle loop: exit on TERM/INT, reap orphans, sleep.
pub(crate) const PAUSE_IDLE: Program =
    Program { name: "nidus-pause-idle", image: include_bytes!(concat!(env!("OUT_DIR"), "/pause_idle")) };
/// The monitor's loop: output to the CRI log, start/reopen-log/attach/close-stdin, exit.
pub(crate) const MONITOR_LOOP: Program =
    Program { name: "nidus-monitor-loop", image: include_bytes!(concat!(env!("OUT_DIR"), "/monitor_loop")) };

/// A program embedded in nidus.
#[derive(Clone, Copy)]
pub(crate) struct Program {
    pub(crate) name: &'static str,
    pub(crate) image: &'static [u8],
}

/// Descriptors numbered from this up are parked while arranging the
/// program's fixed descriptors, clear of any target number.
const PARK_FLOOR: RawFd = 64;

impl Program {
    /// Replaces this process with the program: `fds[i]` becomes descriptor
    /// `3 + i` (None: that number stays closed), every other descriptor from
    /// 3 up is closed by exec (callers open theirs close-on-exec), argv is
    /// the program's name and `args`. Returns only on failure, saying whether
    /// descriptors 3 and up were already rearranged (then the caller's own
    /// descriptor objects no longer name what they did).
    pub(crate) fn exec(&self, fds: &[Option<RawFd>], args: &[&str]) -> ExecFailure {
        let untouched = |error| ExecFailure { error, descriptors_changed: false };
        let memfd = match self.sealed_memfd() {
            Ok(fd) => fd,
            Err(e) => return untouched(e),
        };
        let argv: Vec<CString> =
            match std::iter::once(self.name).chain(args.iter().copied()).map(super::c_string).collect() {
                Ok(argv) => argv,
                Err(e) => return untouched(e),
            };
        let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        let envp: [*const libc::c_char; 1] = [std::ptr::null()];

        // Park every source (and the memfd) above the target numbers first,
        // so placing one never closes another.
        let parked = match Parked::new(fds, PARK_FLOOR) {
            Ok(parked) => parked,
            Err(e) => return untouched(e),
        };
        let memfd = match dup_at_least(memfd.as_raw_fd(), PARK_FLOOR) {
            Ok(p) => p,
            Err(e) => return untouched(e),
        };
        let changed = |error| ExecFailure { error, descriptors_changed: true };
        if let Err(e) = parked.place_from(3) {
            return changed(e);
        }
        let empty = c"";
        // SAFETY: argv and envp are null-terminated arrays of NUL-terminated
        // strings that outlive the call; AT_EMPTY_PATH execs the memfd itself.
        unsafe {
            libc::syscall(
                libc::SYS_execveat,
                memfd.as_raw_fd(),
                empty.as_ptr(),
                argv_ptrs.as_ptr(),
                envp.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        };
        changed(io::Error::last_os_error())
    }

    /// The program's image in an executable memfd sealed against any change.
    fn sealed_memfd(&self) -> io::Result<OwnedFd> {
        let name = super::c_string(self.name)?;
        let base = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        // MFD_EXEC (Linux 6.3) asks for an executable memfd; with
        // vm.memfd_noexec=2 the kernel refuses it (EACCES), so the failure
        // comes here, before any descriptor is moved. Older kernels reject
        // the flag (EINVAL) and have no non-executable memfds at all.
        // SAFETY: memfd_create with a NUL-terminated name returns a new fd or -1.
        let mut raw = unsafe { libc::memfd_create(name.as_ptr(), base | libc::MFD_EXEC) };
        if raw < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            // SAFETY: as above.
            raw = unsafe { libc::memfd_create(name.as_ptr(), base) };
        }
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: raw was just returned by memfd_create and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut file = std::fs::File::from(fd);
        file.write_all(self.image)?;
        let fd = OwnedFd::from(file);
        let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
        // SAFETY: F_ADD_SEALS on our own memfd.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(fd)
    }
}

/// Why a program could not be exec'd.
#[derive(Debug)]
pub(crate) struct ExecFailure {
    pub(crate) error: io::Error,
    /// True when descriptors 3 and up had already been rearranged.
    pub(crate) descriptors_changed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_programs_are_small_static_elf_executables() {
        for program in [PAUSE_IDLE, MONITOR_LOOP] {
            assert_eq!(&program.image[..4], b"\x7fELF", "{}", program.name);
            assert!(program.image.len() < 64 * 1024, "{} is {} bytes", program.name, program.image.len());
            // No program interpreter: statically linked.
            let text = program.image.windows(b"ld-linux".len()).any(|w| w == b"ld-linux");
            assert!(!text, "{} names a dynamic loader", program.name);
        }
    }
}
