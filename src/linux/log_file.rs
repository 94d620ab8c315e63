//! A container's CRI log file, confined to the pod's log directory (the
//! `log_directory` kubelet gave): the directory itself must not be a
//! symbolic link, and every component below it (subdirectories and the file)
//! is resolved with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, so no
//! planted link can make a container's output land anywhere else.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::fcntl::{openat, openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{mkdirat, Mode};

/// Where a log file goes: the pod's log directory and the path below it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LogLocation<'a> {
    pub(crate) directory: &'a Path,
    pub(crate) relative: &'a Path,
}

impl<'a> LogLocation<'a> {
    /// Splits a full log path under `directory`; `None` when it is not below it.
    pub(crate) fn split(directory: &'a Path, full: &'a Path) -> Option<Self> {
        let relative = full.strip_prefix(directory).ok()?;
        let plain = relative.components().all(|c| matches!(c, Component::Normal(_)));
        (plain && relative.file_name().is_some()).then_some(LogLocation { directory, relative })
    }
}

fn beneath() -> ResolveFlag {
    ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS
}

fn explain<'a>(what: &'a str, path: &'a Path) -> impl Fn(Errno) -> io::Error + 'a {
    let what = what.to_string();
    move |e| match e {
        Errno::ELOOP | Errno::EXDEV => io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{what} {} is or passes through a symbolic link; log files are never written through one",
                path.display()
            ),
        ),
        Errno::ENOTDIR if path.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()) => io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} {} is a symbolic link; log files are never written through one", path.display()),
        ),
        Errno::ENOTDIR => {
            io::Error::new(io::ErrorKind::InvalidInput, format!("{what} {}: not a directory", path.display()))
        }
        e => io::Error::new(io::Error::from(e).kind(), format!("{what} {}: {e}", path.display())),
    }
}

/// Opens the log directory (made when missing; it must not be a symlink) and
/// makes and opens each directory between it and the file; returns the
/// file's directory.
pub(crate) fn prepare_dirs(location: LogLocation<'_>) -> io::Result<OwnedFd> {
    let LogLocation { directory, relative } = location;
    if !directory.exists() {
        std::fs::create_dir_all(directory)?;
    }
    let dir_flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let mut dir = openat(nix::fcntl::AT_FDCWD, directory, dir_flags | OFlag::O_NOFOLLOW, Mode::empty())
        .map_err(explain("the log directory", directory))?;
    let parents: Vec<&OsStr> = relative.parent().map(|p| p.iter().collect()).unwrap_or_default();
    let mut walked = directory.to_path_buf();
    for part in parents {
        walked.push(part);
        match mkdirat(&dir, part, Mode::from_bits_truncate(0o755)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(explain("the log subdirectory", &walked)(e)),
        }
        dir = openat2(&dir, part, OpenHow::new().flags(dir_flags).resolve(beneath()))
            .map_err(explain("the log subdirectory", &walked))?;
    }
    Ok(dir)
}

/// Checks a log file can be opened where it belongs, before any output:
/// its directories are made (see [`prepare_dirs`]) and the file, when it
/// exists already, is a regular file, not a link.
pub(crate) fn prepare(location: LogLocation<'_>) -> io::Result<()> {
    let dir = prepare_dirs(location)?;
    let name = location.relative.file_name().ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    let full = location.directory.join(location.relative);
    match nix::sys::stat::fstatat(&dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(explain("the log file", &full)(e)),
        Ok(st)
            if nix::sys::stat::SFlag::from_bits_truncate(st.st_mode) & nix::sys::stat::SFlag::S_IFMT
                == nix::sys::stat::SFlag::S_IFREG =>
        {
            Ok(())
        }
        Ok(_) => Err(explain("the log file", &full)(Errno::ELOOP)),
    }
}

/// Opens (making when missing, 0640) the log file for appending.
pub(crate) fn open(location: LogLocation<'_>) -> io::Result<File> {
    let dir = prepare_dirs(location)?;
    let name = location.relative.file_name().ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    let how = OpenHow::new()
        .flags(OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_APPEND | OFlag::O_CLOEXEC | OFlag::O_NOCTTY)
        .mode(Mode::from_bits_truncate(0o640))
        .resolve(beneath());
    let full = location.directory.join(location.relative);
    let fd = openat2(&dir, name, how).map_err(explain("the log file", &full))?;
    Ok(File::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_stay_in_the_log_directory() {
        let scratch = tempfile::tempdir().unwrap();
        let base = scratch.path().to_path_buf();
        let logs = base.join("logs");
        let outside = base.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let ok = LogLocation { directory: &logs, relative: Path::new("c/0.log") };
        open(ok).unwrap();
        assert!(logs.join("c/0.log").is_file());
        std::os::unix::fs::symlink(&outside, logs.join("d")).unwrap();
        let through_dir = LogLocation { directory: &logs, relative: Path::new("d/0.log") };
        assert_eq!(open(through_dir).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        std::os::unix::fs::symlink(outside.join("f"), logs.join("c/1.log")).unwrap();
        let file_link = LogLocation { directory: &logs, relative: Path::new("c/1.log") };
        assert_eq!(open(file_link).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        let linked_dir = base.join("linked");
        std::os::unix::fs::symlink(&outside, &linked_dir).unwrap();
        let dir_link = LogLocation { directory: &linked_dir, relative: Path::new("0.log") };
        assert_eq!(open(dir_link).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "nothing was written outside");
        assert!(LogLocation::split(&logs, &logs.join("a/b.log")).is_some());
        assert!(LogLocation::split(&logs, &base.join("x.log")).is_none());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
