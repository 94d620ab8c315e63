//! File operations confined to one directory tree: every path is resolved with
//! `openat2(RESOLVE_BENEATH)`, so `..`, absolute paths and symlinks that lead
//! outside the tree fail (EXDEV) instead of touching the host; entries are
//! made and changed relative to their parent's fd, never following a final symlink.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{openat, openat2, AtFlags, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{
    fchmodat, fstatat, mkdirat, mknodat, utimensat, FchmodatFlags, FileStat, Mode, SFlag, UtimensatFlags,
};
use nix::sys::time::TimeSpec;
use nix::unistd::{fchownat, linkat, symlinkat, unlinkat, Gid, Uid, UnlinkatFlags};

/// The kind of special file `mknod` makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeKind {
    Char,
    Block,
    Fifo,
}

/// The root of a confined tree.
#[derive(Debug)]
pub(crate) struct ConfinedRoot {
    fd: OwnedFd,
}

/// A directory inside a confined tree, held open; names given to its methods
/// are single path components.
#[derive(Debug)]
pub(crate) struct ConfinedDir {
    fd: OwnedFd,
}

fn io_err(e: Errno) -> io::Error {
    io::Error::from(e)
}

fn check_name(name: &OsStr) -> io::Result<()> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') || bytes.contains(&0) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{name:?} is not a single path component")));
    }
    Ok(())
}

impl ConfinedRoot {
    /// Opens the directory `path` (which must not be a symlink) as a tree root.
    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        let fd = openat(
            nix::fcntl::AT_FDCWD,
            path,
            OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY,
            Mode::empty(),
        )
        .map_err(io_err)?;
        Ok(Self { fd })
    }

    /// The root itself as a directory.
    pub(crate) fn root_dir(&self) -> io::Result<ConfinedDir> {
        Ok(ConfinedDir { fd: self.fd.try_clone()? })
    }

    /// Opens the directory at `relative` beneath the root. Symlinks on the way
    /// are followed only while they stay beneath the root: a path that would
    /// leave it fails with `EXDEV` (`io::ErrorKind::CrossesDevices`).
    pub(crate) fn dir(&self, relative: &Path) -> io::Result<ConfinedDir> {
        if relative.as_os_str().is_empty() {
            return self.root_dir();
        }
        let how = OpenHow::new()
            .flags(OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_RDONLY)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        let fd = openat2(&self.fd, relative, how).map_err(io_err)?;
        Ok(ConfinedDir { fd })
    }
}

impl ConfinedDir {
    /// The entry `name` without following a symlink; `None` when absent.
    pub(crate) fn lstat(&self, name: &OsStr) -> io::Result<Option<FileStat>> {
        check_name(name)?;
        match fstatat(&self.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(io_err(e)),
        }
    }

    /// True when this directory is marked opaque for overlayfs (xattr
    /// `trusted.overlay.opaque=y`): the layers below it do not show through.
    pub(crate) fn is_overlay_opaque(&self) -> bool {
        let name = c"trusted.overlay.opaque";
        let mut value = [0u8; 4];
        // SAFETY: the fd is an open directory; name is a valid C string; value
        // is a buffer of the length passed.
        let n = unsafe {
            libc::fgetxattr(self.fd.as_raw_fd(), name.as_ptr(), value.as_mut_ptr() as *mut libc::c_void, value.len())
        };
        n == 1 && value[0] == b'y'
    }

    /// The subdirectory `name`, which must be a real directory (not a symlink).
    pub(crate) fn subdir(&self, name: &OsStr) -> io::Result<ConfinedDir> {
        check_name(name)?;
        let fd = openat(
            &self.fd,
            name,
            OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY,
            Mode::empty(),
        )
        .map_err(io_err)?;
        Ok(ConfinedDir { fd })
    }

    pub(crate) fn mkdir(&self, name: &OsStr, mode: u32) -> io::Result<()> {
        check_name(name)?;
        mkdirat(&self.fd, name, Mode::from_bits_truncate(mode)).map_err(io_err)
    }

    /// Creates the regular file `name`, which must not exist, for writing.
    pub(crate) fn create_file(&self, name: &OsStr) -> io::Result<File> {
        check_name(name)?;
        let fd = openat(
            &self.fd,
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(io_err)?;
        Ok(File::from(fd))
    }

    pub(crate) fn symlink(&self, name: &OsStr, target: &OsStr) -> io::Result<()> {
        check_name(name)?;
        symlinkat(target, &self.fd, name).map_err(io_err)
    }

    /// Makes `name` here a hard link to `source_name` in `source_dir` (a
    /// symlink is linked itself, not followed).
    pub(crate) fn hard_link(&self, name: &OsStr, source_dir: &ConfinedDir, source_name: &OsStr) -> io::Result<()> {
        check_name(name)?;
        check_name(source_name)?;
        linkat(&source_dir.fd, source_name, &self.fd, name, AtFlags::empty()).map_err(io_err)
    }

    pub(crate) fn mknod(&self, name: &OsStr, kind: NodeKind, mode: u32, major: u64, minor: u64) -> io::Result<()> {
        check_name(name)?;
        let kind = match kind {
            NodeKind::Char => SFlag::S_IFCHR,
            NodeKind::Block => SFlag::S_IFBLK,
            NodeKind::Fifo => SFlag::S_IFIFO,
        };
        mknodat(&self.fd, name, kind, Mode::from_bits_truncate(mode), nix::sys::stat::makedev(major, minor))
            .map_err(io_err)
    }

    /// Removes the non-directory entry `name`.
    pub(crate) fn unlink(&self, name: &OsStr) -> io::Result<()> {
        check_name(name)?;
        unlinkat(&self.fd, name, UnlinkatFlags::NoRemoveDir).map_err(io_err)
    }

    /// Removes the directory `name` and everything in it, never following a symlink.
    pub(crate) fn remove_tree(&self, name: &OsStr) -> io::Result<()> {
        check_name(name)?;
        let dir = self.subdir(name)?;
        dir.empty_out()?;
        unlinkat(&self.fd, name, UnlinkatFlags::RemoveDir).map_err(io_err)
    }

    fn empty_out(&self) -> io::Result<()> {
        // The fd's magic link names exactly this directory.
        let names: Vec<OsString> = std::fs::read_dir(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))?
            .map(|entry| entry.map(|e| e.file_name()))
            .collect::<io::Result<_>>()?;
        for name in names {
            match self.lstat(&name)? {
                Some(st) if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR => {
                    self.remove_tree(&name)?
                }
                Some(_) => self.unlink(&name)?,
                None => {}
            }
        }
        Ok(())
    }

    /// Sets the owner of `name` without following a symlink.
    pub(crate) fn chown(&self, name: &OsStr, uid: u32, gid: u32) -> io::Result<()> {
        check_name(name)?;
        fchownat(&self.fd, name, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)), AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(io_err)
    }

    /// Sets the mode of `name`, which the caller knows is not a symlink
    /// (Linux cannot change a symlink's mode).
    pub(crate) fn chmod(&self, name: &OsStr, mode: u32) -> io::Result<()> {
        check_name(name)?;
        fchmodat(&self.fd, name, Mode::from_bits_truncate(mode), FchmodatFlags::FollowSymlink).map_err(io_err)
    }

    /// Sets access and modification time of `name` without following a symlink.
    pub(crate) fn set_mtime(&self, name: &OsStr, seconds: i64) -> io::Result<()> {
        check_name(name)?;
        let t = TimeSpec::new(seconds, 0);
        utimensat(&self.fd, name, &t, &t, UtimensatFlags::NoFollowSymlink).map_err(io_err)
    }

    /// Sets the extended attribute `key` of `name` without following a
    /// symlink and without opening the entry (devices and fifos stay closed).
    pub(crate) fn set_xattr(&self, name: &OsStr, key: &str, value: &[u8]) -> io::Result<()> {
        check_name(name)?;
        // The parent is reached through its fd's magic link, so no path
        // component can be swapped; lsetxattr does not follow `name`.
        let mut path = format!("/proc/self/fd/{}/", self.fd.as_raw_fd()).into_bytes();
        path.extend_from_slice(name.as_bytes());
        let path = super::c_string(path)?;
        let key = super::c_string(key)?;
        // SAFETY: `path` and `key` are NUL-terminated strings and `value` is a
        // valid slice for `value.len()` bytes, all alive for the call; the
        // kernel only reads them.
        let rc = unsafe { libc::lsetxattr(path.as_ptr(), key.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Flushes every dirty inode of this directory's filesystem to disk.
    pub(crate) fn sync_filesystem(&self) -> io::Result<()> {
        nix::unistd::syncfs(&self.fd).map_err(io_err)
    }
}

impl AsFd for ConfinedDir {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
