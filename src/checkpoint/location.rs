//! Where a checkpoint archive goes: `location` checked (absolute, no `..`,
//! a file name), its parent directories opened from `/` one component at a
//! time without following any symlink (missing ones created 0700), and the
//! archive written to a nameless O_TMPFILE file in that directory that is
//! linked into place only when complete (never over an existing file or
//! planted symlink): a daemon killed while writing leaves nothing behind.
//! Where the file system has no O_TMPFILE, an O_EXCL temporary file beside
//! the location is renamed into place instead; its name is chosen up front
//! ([`Location::temp_path`]) so that it can be recorded before it exists,
//! and a daemon killed meanwhile removes it at its next start
//! ([`remove_abandoned`]).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, renameat2, OFlag, RenameFlags, AT_FDCWD};
use nix::sys::stat::{fstatat, mkdirat, Mode, SFlag};
use nix::unistd::{linkat, unlinkat, UnlinkatFlags};

#[derive(Debug, thiserror::Error)]
pub enum LocationError {
    #[error("location {} must be an absolute path to a file, without '.' or '..' components", crate::quote::quote(.0))]
    Invalid(String),
    #[error("location {path}: {component} is a symlink; checkpoint archives are never written through symlinks")]
    Symlink { path: PathBuf, component: PathBuf },
    #[error("location {path}: {component} is not a directory")]
    NotDirectory { path: PathBuf, component: PathBuf },
    #[error(
        "location {path}: {component} is on {filesystem}, a kernel file system; checkpoint archives go on a real one"
    )]
    KernelFilesystem { path: PathBuf, component: PathBuf, filesystem: &'static str },
    #[error("location {0} already exists")]
    Exists(PathBuf),
    #[error("location {path}: {what}: {source}")]
    Io { path: PathBuf, what: String, source: std::io::Error },
}

/// The kernel file systems (statfs magic numbers, linux/magic.h) no archive goes on.
const KERNEL_FILESYSTEMS: &[(u64, &str)] = &[
    (0x6265_6572, "sysfs"),
    (0x9fa0, "procfs"),
    (0x0027_e0eb, "cgroupfs"),
    (0x6367_7270, "cgroup2fs"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0xcafe_4a11, "bpffs"),
    (0x6265_6570, "configfs"),
    (0x6165_676c, "pstorefs"),
    (0xde5e_81e4, "efivarfs"),
    (0x1cd1, "devpts"),
];

/// A checked `location`: its parent directory, held open, the file name,
/// and the hidden name the archive has meanwhile where there is no O_TMPFILE.
#[derive(Debug)]
pub(crate) struct Location {
    pub(crate) path: PathBuf,
    dir: OwnedFd,
    name: OsString,
    temp_name: OsString,
}

/// What every temporary archive's name has after the location's name.
const TEMP_INFIX: &str = ".tmp-";

/// The archive being written, not yet at `location`.
pub(crate) struct PendingArchive {
    pub(crate) file: File,
    /// Where the file lives meanwhile: nowhere (O_TMPFILE, gone with the
    /// last descriptor), or a hidden name beside the location.
    temp_name: Option<OsString>,
}

/// Pure checks on the request's `location`.
pub fn check(location: &str) -> Result<PathBuf, LocationError> {
    let path = Path::new(location);
    let bad = || LocationError::Invalid(location.to_string());
    if !path.is_absolute() || location.ends_with('/') || location.contains('\0') {
        return Err(bad());
    }
    for component in Path::new(location).components() {
        match component {
            Component::RootDir | Component::Normal(_) => {}
            _ => return Err(bad()),
        }
    }
    // Path::components drops "." silently: look at the raw text as well.
    if location.split('/').any(|c| c == "." || c == "..") || path.file_name().is_none() {
        return Err(bad());
    }
    Ok(path.to_path_buf())
}

impl Location {
    /// Opens (making when missing, 0700) every parent directory of `path`
    /// from `/` without following symlinks, and checks nothing is at `path`.
    pub(crate) fn open(path: &Path) -> Result<Location, LocationError> {
        let name = path.file_name().ok_or_else(|| LocationError::Invalid(path.display().to_string()))?.to_owned();
        let dir = open_parent(path, true)?
            .ok_or_else(|| LocationError::NotDirectory { path: path.to_path_buf(), component: path.to_path_buf() })?;
        let mut temp_name = OsString::from(".");
        temp_name.push(&name);
        temp_name.push(format!("{TEMP_INFIX}{:016x}", rand::random::<u64>()));
        let location = Location { path: path.to_path_buf(), dir, name, temp_name };
        location.ensure_absent()?;
        Ok(location)
    }

    /// Where the archive is while it is written when the file system has
    /// no O_TMPFILE (a hidden name beside the location; nothing is there yet).
    pub(crate) fn temp_path(&self) -> PathBuf {
        self.path.with_file_name(&self.temp_name)
    }

    fn ensure_absent(&self) -> Result<(), LocationError> {
        match fstatat(&self.dir, self.name.as_os_str(), nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
            Err(Errno::ENOENT) => Ok(()),
            Ok(st) if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK => {
                Err(LocationError::Symlink { path: self.path.clone(), component: self.path.clone() })
            }
            Ok(_) => Err(LocationError::Exists(self.path.clone())),
            Err(e) => Err(LocationError::Io { path: self.path.clone(), what: "stat".into(), source: e.into() }),
        }
    }

    /// A new, empty, 0600 file in `location`'s directory: without a name
    /// where the file system allows (O_TMPFILE), else under a hidden
    /// temporary name beside it (O_EXCL, never a symlink).
    pub(crate) fn create_pending(&self) -> Result<PendingArchive, LocationError> {
        let io = |what: &'static str| {
            let path = self.path.clone();
            move |e: Errno| LocationError::Io { path, what: what.into(), source: e.into() }
        };
        let mode = Mode::from_bits_truncate(0o600);
        let nameless = openat(&self.dir, ".", OFlag::O_TMPFILE | OFlag::O_WRONLY | OFlag::O_CLOEXEC, mode);
        let (fd, temp_name) = match nameless {
            Ok(fd) => (fd, None),
            // EOPNOTSUPP: this file system has none; EISDIR: nor has the kernel.
            Err(Errno::EOPNOTSUPP) | Err(Errno::EISDIR) => {
                let (fd, temp_name) = self.create_named(mode).map_err(io("creating the temporary archive"))?;
                (fd, Some(temp_name))
            }
            Err(e) => return Err(io("creating the temporary archive")(e)),
        };
        let pending = PendingArchive { file: File::from(fd), temp_name };
        // The umask may have taken bits away, never added any; say it exactly.
        if let Err(e) = nix::sys::stat::fchmod(&pending.file, mode) {
            self.discard(pending);
            return Err(io("chmod of the temporary archive")(e));
        }
        Ok(pending)
    }

    /// A new file under the hidden temporary name beside the location.
    fn create_named(&self, mode: Mode) -> Result<(OwnedFd, OsString), Errno> {
        let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(&self.dir, self.temp_name.as_os_str(), flags, mode)?;
        Ok((fd, self.temp_name.clone()))
    }

    /// Flushes the archive to disk and moves it to `location` (failing if
    /// something appeared there meanwhile).
    pub(crate) fn commit(&self, pending: PendingArchive) -> Result<(), LocationError> {
        let io = |what: &str| {
            let (path, what) = (self.path.clone(), what.to_string());
            move |source: std::io::Error| LocationError::Io { path, what, source }
        };
        let synced = pending.file.sync_all().map_err(io("writing the archive"));
        if let Err(e) = synced {
            self.discard(pending);
            return Err(e);
        }
        let placed = match &pending.temp_name {
            // linkat never replaces: EEXIST if something appeared meanwhile.
            None => linkat(
                AT_FDCWD,
                format!("/proc/self/fd/{}", pending.file.as_raw_fd()).as_str(),
                &self.dir,
                self.name.as_os_str(),
                nix::fcntl::AtFlags::AT_SYMLINK_FOLLOW,
            ),
            Some(temp_name) => renameat2(
                &self.dir,
                temp_name.as_os_str(),
                &self.dir,
                self.name.as_os_str(),
                RenameFlags::RENAME_NOREPLACE,
            ),
        };
        match placed {
            Ok(()) => drop(pending.file),
            Err(Errno::EEXIST) => {
                self.discard(pending);
                return Err(LocationError::Exists(self.path.clone()));
            }
            Err(e) => {
                self.discard(pending);
                return Err(io("moving the archive into place")(e.into()));
            }
        }
        if let Some(dir) = self.dir_for_sync() {
            let _ = nix::unistd::fsync(&dir);
        }
        Ok(())
    }

    /// Removes an archive that will not be completed (a nameless one goes
    /// with its descriptor).
    pub(crate) fn discard(&self, pending: PendingArchive) {
        drop(pending.file);
        if let Some(temp_name) = pending.temp_name {
            let _ = unlinkat(&self.dir, temp_name.as_os_str(), UnlinkatFlags::NoRemoveDir);
        }
    }

    /// The parent directory opened for reading (an O_PATH fd cannot be fsynced).
    fn dir_for_sync(&self) -> Option<OwnedFd> {
        openat(&self.dir, ".", OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty()).ok()
    }
}

/// `path`'s parent directory, opened from `/` one component at a time
/// without following symlinks; a missing directory is made (0700) when
/// `create`, else the answer is None. Kernel file systems are refused.
fn open_parent(path: &Path, create: bool) -> Result<Option<OwnedFd>, LocationError> {
    let io = |what: String| {
        let path = path.to_path_buf();
        move |e: Errno| LocationError::Io { path, what, source: e.into() }
    };
    let dir_flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut dir = openat(AT_FDCWD, "/", dir_flags, Mode::empty()).map_err(io("opening /".into()))?;
    let mut walked = PathBuf::from("/");
    let parent = path.parent().unwrap_or(Path::new("/"));
    for component in parent.components().filter(|c| matches!(c, Component::Normal(_))) {
        refuse_kernel_filesystem(path, &dir, &walked)?;
        let part = component.as_os_str();
        walked.push(part);
        let next = match openat(&dir, part, dir_flags, Mode::empty()) {
            Err(Errno::ENOENT) if !create => return Ok(None),
            Err(Errno::ENOENT) => {
                match mkdirat(&dir, part, Mode::from_bits_truncate(0o700)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(io(format!("creating {}", walked.display()))(e)),
                }
                openat(&dir, part, dir_flags, Mode::empty())
            }
            other => other,
        };
        dir = match next {
            Ok(fd) => fd,
            Err(Errno::ENOTDIR) | Err(Errno::ELOOP) => return Err(not_a_directory(path, &dir, part, walked)),
            Err(e) => return Err(io(format!("opening {}", walked.display()))(e)),
        };
    }
    refuse_kernel_filesystem(path, &dir, &walked)?;
    Ok(Some(dir))
}

/// Refuses a directory on a kernel file system (sysfs, procfs, cgroupfs, …):
/// nothing can be created there, and what is there is not a place for files.
fn refuse_kernel_filesystem(path: &Path, dir: &OwnedFd, walked: &Path) -> Result<(), LocationError> {
    let Ok(fs) = nix::sys::statfs::fstatfs(dir) else { return Ok(()) };
    let magic = fs.filesystem_type().0 as u64;
    match KERNEL_FILESYSTEMS.iter().find(|(m, _)| *m == magic) {
        Some((_, filesystem)) => Err(LocationError::KernelFilesystem {
            path: path.to_path_buf(),
            component: walked.to_path_buf(),
            filesystem,
        }),
        None => Ok(()),
    }
}

fn not_a_directory(path: &Path, dir: &OwnedFd, part: &OsStr, walked: PathBuf) -> LocationError {
    let is_link = fstatat(dir, part, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        .is_ok_and(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK);
    if is_link {
        LocationError::Symlink { path: path.to_path_buf(), component: walked }
    } else {
        LocationError::NotDirectory { path: path.to_path_buf(), component: walked }
    }
}

/// Whether `name` is one [`Location::open`] chooses for a temporary archive.
fn is_temp_name(name: &OsStr) -> bool {
    let name = name.to_string_lossy();
    name.starts_with('.') && name.rsplit_once(TEMP_INFIX).is_some_and(|(_, hex)| hex.len() == 16)
}

/// Removes the temporary archive a checkpoint interrupted by a crash left at
/// `temp` (its [`Location::temp_path`]), reached as `open` reaches a
/// location (no symlink followed), and only if it is a regular file with
/// such a name. True when there was one; nothing there is no error.
pub(crate) fn remove_abandoned(temp: &Path) -> Result<bool, LocationError> {
    let name = match temp.file_name() {
        Some(name) if temp.is_absolute() && is_temp_name(name) => name,
        _ => return Err(LocationError::Invalid(temp.display().to_string())),
    };
    let Some(dir) = open_parent(temp, false)? else { return Ok(false) };
    let io = |what: &str| {
        let (path, what) = (temp.to_path_buf(), what.to_string());
        move |e: Errno| LocationError::Io { path, what, source: e.into() }
    };
    match fstatat(&dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Err(Errno::ENOENT) => Ok(false),
        Err(e) => Err(io("stat")(e)),
        // Not an archive of ours: left alone.
        Ok(st) if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG => Ok(false),
        Ok(_) => match unlinkat(&dir, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) => Ok(true),
            Err(Errno::ENOENT) => Ok(false),
            Err(e) => Err(io("removing the abandoned temporary archive")(e)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_must_be_absolute_plain_file_paths() {
        assert!(check("/var/lib/kubelet/checkpoints/checkpoint-a_b-c-2024.tar").is_ok());
        for bad in ["relative.tar", "./x.tar", "/a/../b.tar", "/a/./b.tar", "/a/b/", "/", "", "/a/b\0.tar"] {
            assert!(check(bad).is_err(), "{bad:?} must be refused");
        }
    }

    fn scratch() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn archives_appear_whole_and_private_in_new_private_directories() {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let scratch = scratch();
        let dir = scratch.path();
        let path = dir.join("a/b/ckpt.tar");
        let location = Location::open(&path).unwrap();
        assert_eq!(std::fs::metadata(dir.join("a/b")).unwrap().permissions().mode() & 0o777, 0o700);
        let mut pending = location.create_pending().unwrap();
        pending.file.write_all(b"data").unwrap();
        // This host's file systems have O_TMPFILE: the file has no name yet.
        assert!(pending.temp_name.is_none(), "an O_TMPFILE archive");
        assert_eq!(
            std::fs::read_dir(dir.join("a/b")).unwrap().count(),
            0,
            "nothing in the directory before the commit"
        );
        location.commit(pending).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"data");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(matches!(Location::open(&path), Err(LocationError::Exists(_))));
        let discarded = Location::open(&dir.join("a/b/other.tar")).unwrap();
        let pending = discarded.create_pending().unwrap();
        discarded.discard(pending);
        assert_eq!(std::fs::read_dir(dir.join("a/b")).unwrap().count(), 1, "only the committed archive");
        // Something that appears at the location meanwhile is never replaced.
        let raced = Location::open(&dir.join("a/b/raced.tar")).unwrap();
        let mut pending = raced.create_pending().unwrap();
        pending.file.write_all(b"data").unwrap();
        std::fs::write(dir.join("a/b/raced.tar"), b"planted").unwrap();
        assert!(matches!(raced.commit(pending), Err(LocationError::Exists(_))));
        assert_eq!(std::fs::read(dir.join("a/b/raced.tar")).unwrap(), b"planted");
        assert_eq!(std::fs::read_dir(dir.join("a/b")).unwrap().count(), 2, "the archive and the planted file only");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn without_o_tmpfile_a_hidden_temporary_file_is_renamed_into_place() {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let scratch = scratch();
        let dir = scratch.path();
        let path = dir.join("ckpt.tar");
        let location = Location::open(&path).unwrap();
        let (fd, temp_name) = location.create_named(Mode::from_bits_truncate(0o600)).unwrap();
        let mut pending = PendingArchive { file: File::from(fd), temp_name: Some(temp_name.clone()) };
        pending.file.write_all(b"data").unwrap();
        assert!(dir.join(&temp_name).exists(), "the temporary file beside the location");
        std::fs::write(&path, b"planted").unwrap();
        assert!(matches!(location.commit(pending), Err(LocationError::Exists(_))), "never over a file");
        assert_eq!(std::fs::read(&path).unwrap(), b"planted");
        assert!(!dir.join(&temp_name).exists(), "the refused archive is gone");
        std::fs::remove_file(&path).unwrap();
        let (fd, temp_name) = location.create_named(Mode::from_bits_truncate(0o600)).unwrap();
        let mut pending = PendingArchive { file: File::from(fd), temp_name: Some(temp_name) };
        pending.file.write_all(b"data").unwrap();
        location.commit(pending).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"data");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_dir(dir).unwrap().count(), 1, "only the archive");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_temporary_archive_a_crash_left_is_removed_by_its_recorded_name_only() {
        use std::io::Write;
        let scratch = scratch();
        let dir = scratch.path();
        let path = dir.join("ckpt.tar");
        let location = Location::open(&path).unwrap();
        let temp = location.temp_path();
        assert_eq!(temp.parent(), Some(dir));
        assert!(!temp.exists(), "chosen, not made, at open");
        // A daemon killed while writing: the file stays under its hidden name.
        let (fd, _) = location.create_named(Mode::from_bits_truncate(0o600)).unwrap();
        File::from(fd).write_all(b"half").unwrap();
        drop(location);
        std::fs::write(dir.join("other.tar"), b"kept").unwrap();
        assert!(remove_abandoned(&temp).unwrap(), "the abandoned archive is removed");
        assert!(!temp.exists());
        assert!(!remove_abandoned(&temp).unwrap(), "nothing left to remove");
        assert_eq!(std::fs::read(dir.join("other.tar")).unwrap(), b"kept");
        // Only a regular file of such a name, reached without symlinks.
        std::os::unix::fs::symlink(dir.join("other.tar"), &temp).unwrap();
        assert!(!remove_abandoned(&temp).unwrap(), "a symlink is left alone");
        assert!(dir.join("other.tar").exists() && temp.symlink_metadata().is_ok());
        std::os::unix::fs::symlink(dir, dir.join("link")).unwrap();
        let through = dir.join("link").join(temp.file_name().unwrap());
        assert!(matches!(remove_abandoned(&through), Err(LocationError::Symlink { .. })));
        assert!(remove_abandoned(&dir.join("other.tar")).is_err(), "not a temporary archive's name");
        assert!(!remove_abandoned(&dir.join("gone/.x.tar.tmp-0123456789abcdef")).unwrap(), "a missing directory");
        assert!(!dir.join("gone").exists(), "is not made");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn symlinks_on_the_way_or_at_the_location_are_refused() {
        let scratch = scratch();
        let dir = scratch.path();
        std::fs::create_dir(dir.join("real")).unwrap();
        std::os::unix::fs::symlink(dir.join("real"), dir.join("link")).unwrap();
        std::os::unix::fs::symlink(dir.join("real/x.tar"), dir.join("planted.tar")).unwrap();
        assert!(matches!(Location::open(&dir.join("link/ckpt.tar")), Err(LocationError::Symlink { .. })));
        assert!(matches!(Location::open(&dir.join("planted.tar")), Err(LocationError::Symlink { .. })));
        std::fs::write(dir.join("file"), b"").unwrap();
        assert!(matches!(Location::open(&dir.join("file/ckpt.tar")), Err(LocationError::NotDirectory { .. })));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
