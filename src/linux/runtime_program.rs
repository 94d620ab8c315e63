//! The runtime's helper programs (`nidus-monitor`, `nidus-pause`) as the
//! daemon runs them: each is exec'd from a detached read-only bind mount of
//! its file, so a process in a container's PID namespace that reaches a
//! helper through `/proc/PID/exe` (a container init before its execve, the
//! pause of a shared-PID pod) finds a file it cannot open for writing (EROFS)
//! — the runc CVE-2019-5736 class — with no copy of the binary in memory.
//!
//! The daemon keeps an O_PATH descriptor of the mounted file (which keeps the
//! detached mount alive) and names it with a symlink `<dir>/<name>` →
//! `/proc/self/fd/N`: its children resolve that while they still hold fd N
//! (it closes on exec), so argv[0] and the process name stay the helper's.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A helper program and the path to exec it by.
pub(crate) struct RuntimeProgram {
    exec_path: PathBuf,
    /// False when the read-only mount could not be made (then the original
    /// file is exec'd).
    read_only: bool,
    _mounted: Option<OwnedFd>,
}

/// Lowest descriptor number used, clear of the 0–3 children are given.
const FD_FLOOR: libc::c_int = 100;

impl RuntimeProgram {
    /// Prepares `original` for exec through `dir` (created 0700); falls back
    /// to the original path, with a warning, when mounting is not possible.
    pub(crate) fn prepare(original: &Path, dir: &Path) -> Self {
        match Self::mount_read_only(original, dir) {
            Ok(program) => program,
            Err(e) => {
                tracing::warn!(
                    program = %original.display(),
                    error = %e,
                    "cannot run this helper from a read-only mount; a container process that reaches it \
                     through /proc/PID/exe could try to overwrite it"
                );
                Self { exec_path: original.to_path_buf(), read_only: false, _mounted: None }
            }
        }
    }

    pub(crate) fn exec_path(&self) -> &Path {
        &self.exec_path
    }

    pub(crate) fn read_only(&self) -> bool {
        self.read_only
    }

    fn mount_read_only(original: &Path, dir: &Path) -> io::Result<Self> {
        let name = original
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a program path without a file name"))?;
        crate::store::create_dir_all(dir, 0o700)?;
        let target = dir.join(format!(".{}.mount", name.to_string_lossy()));
        let target_str =
            target.to_str().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "non-UTF-8 path"))?;
        let original_str =
            original.to_str().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "non-UTF-8 path"))?;
        // A crash may have left the mount point (never the mount: it is detached at once).
        let _ = fs::remove_file(&target);
        fs::OpenOptions::new().write(true).create_new(true).open(&target)?;
        let mounted = (|| {
            super::rootfs::mount(Some(original_str), target_str, None, libc::MS_BIND as libc::c_ulong, None)?;
            let flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
            let opened = super::rootfs::mount(None, target_str, None, flags as libc::c_ulong, None)
                .and_then(|()| fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH).open(&target));
            // Detached whatever happened: the descriptor alone keeps the mount.
            let _ = nix::mount::umount2(&target, nix::mount::MntFlags::MNT_DETACH);
            opened
        })();
        let _ = fs::remove_file(&target);
        let file = mounted?;
        let fd = super::process::dup_at_least(file.as_raw_fd(), FD_FLOOR)?;
        drop(file);
        let raw = fd.as_raw_fd();
        let link = dir.join(name);
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink(format!("/proc/self/fd/{raw}"), &link)?;
        Ok(Self { exec_path: link, read_only: true, _mounted: Some(fd) })
    }
}
