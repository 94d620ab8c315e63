//! Reading a file because a request (or an operator's directory) names it:
//! opened without blocking (a FIFO or a device never holds a thread), never
//! through a final symbolic link when the caller says so (nor, for a file
//! named in a directory, through any link that leads out of it), accepted only
//! as a regular file, refused above a size limit, and read with a cap, so no
//! path can make the daemon wait forever or allocate without bound.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::quote::quote;

#[derive(Debug, thiserror::Error)]
pub(crate) enum BoundedReadError {
    #[error("{} does not exist", quote(&.0.display().to_string()))]
    NotFound(PathBuf),
    #[error("{} is {kind}, not a regular file", quote(&.path.display().to_string()))]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("{} is {size} bytes, over the limit of {limit} bytes", quote(&.path.display().to_string()))]
    TooLarge { path: PathBuf, size: u64, limit: u64 },
    #[error("cannot read {}: {source}", quote(&.path.display().to_string()))]
    Io { path: PathBuf, source: io::Error },
    #[error("{} leads outside {} (a symbolic link out of the directory)", quote(&.path.display().to_string()), .dir.display())]
    Outside { path: PathBuf, dir: PathBuf },
}

/// Whether a symbolic link as the path's last component is followed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum FinalLink {
    Follow,
    Refuse,
}

/// Opens `path` for reading as a regular file of at most `limit` bytes.
pub(crate) fn open_regular(path: &Path, limit: u64, link: FinalLink) -> Result<(File, u64), BoundedReadError> {
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
    if link == FinalLink::Refuse {
        flags |= libc::O_NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new().read(true).custom_flags(flags).open(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => BoundedReadError::NotFound(path.to_path_buf()),
        _ if e.raw_os_error() == Some(libc::ELOOP) => {
            BoundedReadError::NotRegular { path: path.to_path_buf(), kind: "a symbolic link" }
        }
        _ => BoundedReadError::Io { path: path.to_path_buf(), source: e },
    })?;
    checked(file, path, limit)
}

/// `file` (opened as `path`) when it is a regular file of at most `limit` bytes, with its size.
fn checked(file: File, path: &Path, limit: u64) -> Result<(File, u64), BoundedReadError> {
    let meta = file.metadata().map_err(|e| BoundedReadError::Io { path: path.to_path_buf(), source: e })?;
    if !meta.is_file() {
        return Err(BoundedReadError::NotRegular { path: path.to_path_buf(), kind: kind_of(&meta) });
    }
    if meta.len() > limit {
        return Err(BoundedReadError::TooLarge { path: path.to_path_buf(), size: meta.len(), limit });
    }
    Ok((file, meta.len()))
}

/// Reads the whole of `path`, a regular file of at most `limit` bytes (a
/// file that grows while read is cut at `limit + 1` and refused).
pub(crate) fn read(path: &Path, limit: u64, link: FinalLink) -> Result<Vec<u8>, BoundedReadError> {
    let (file, size) = open_regular(path, limit, link)?;
    read_whole(file, size, path, limit)
}

/// Reads the whole of the file `name` in the directory `dir` as [`read`]
/// does, resolved with `openat2(RESOLVE_BENEATH)`: a symbolic link is followed
/// only while it stays inside `dir` (one leading out of it, or absolute, is
/// refused as [`BoundedReadError::Outside`]).
pub(crate) fn read_beneath(dir: &Path, name: &std::ffi::OsStr, limit: u64) -> Result<Vec<u8>, BoundedReadError> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    let path = dir.join(name);
    let io_error = |e: nix::errno::Errno| match e {
        nix::errno::Errno::ENOENT => BoundedReadError::NotFound(path.clone()),
        nix::errno::Errno::EXDEV => BoundedReadError::Outside { path: path.clone(), dir: dir.to_path_buf() },
        e => BoundedReadError::Io { path: path.clone(), source: io::Error::from(e) },
    };
    let directory =
        nix::fcntl::open(dir, OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())
            .map_err(io_error)?;
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = nix::fcntl::openat2(&directory, name, how).map_err(io_error)?;
    let (file, size) = checked(File::from(fd), &path, limit)?;
    read_whole(file, size, &path, limit)
}

fn read_whole(file: File, size: u64, path: &Path, limit: u64) -> Result<Vec<u8>, BoundedReadError> {
    let mut data = Vec::with_capacity(size as usize);
    file.take(limit + 1)
        .read_to_end(&mut data)
        .map_err(|e| BoundedReadError::Io { path: path.to_path_buf(), source: e })?;
    if data.len() as u64 > limit {
        return Err(BoundedReadError::TooLarge { path: path.to_path_buf(), size: data.len() as u64, limit });
    }
    Ok(data)
}

/// A small kernel or configuration file as text (at most 64 KiB).
pub(crate) fn read_small_text(path: &Path) -> Result<String, BoundedReadError> {
    let data = read(path, 64 * 1024, FinalLink::Follow)?;
    String::from_utf8(data).map_err(|e| BoundedReadError::Io {
        path: path.to_path_buf(),
        source: io::Error::new(io::ErrorKind::InvalidData, e),
    })
}

fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bounded_regular_files_are_read() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("f");
        std::fs::write(&file, b"12345").unwrap();
        assert_eq!(read(&file, 5, FinalLink::Refuse).unwrap(), b"12345");
        assert!(matches!(read(&file, 4, FinalLink::Refuse), Err(BoundedReadError::TooLarge { size: 5, .. })));
        let link = dir.join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(matches!(read(&link, 9, FinalLink::Refuse), Err(BoundedReadError::NotRegular { .. })));
        assert_eq!(read(&link, 9, FinalLink::Follow).unwrap(), b"12345");
        assert!(matches!(read(Path::new("/dev/zero"), 9, FinalLink::Follow), Err(BoundedReadError::NotRegular { .. })));
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = read(&fifo, 9, FinalLink::Follow).unwrap_err().to_string();
        assert!(err.contains("is a FIFO, not a regular file"), "{err}");
        assert!(matches!(read(&dir.join("none"), 9, FinalLink::Follow), Err(BoundedReadError::NotFound(_))));

        // In a directory: links inside it are followed, links out of it refused.
        let inner = dir.join("inner");
        std::fs::create_dir_all(&inner).unwrap();
        std::fs::write(inner.join("f"), b"abc").unwrap();
        std::os::unix::fs::symlink("f", inner.join("same")).unwrap();
        std::os::unix::fs::symlink(&file, inner.join("absolute")).unwrap();
        std::os::unix::fs::symlink("../f", inner.join("up")).unwrap();
        assert_eq!(read_beneath(&inner, "same".as_ref(), 9).unwrap(), b"abc");
        for name in ["absolute", "up"] {
            let err = read_beneath(&inner, name.as_ref(), 9).unwrap_err();
            assert!(matches!(err, BoundedReadError::Outside { .. }), "{name}: {err}");
        }
        assert!(matches!(read_beneath(&inner, "f".as_ref(), 2), Err(BoundedReadError::TooLarge { .. })));
        nix::unistd::mkfifo(&inner.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = read_beneath(&inner, "fifo".as_ref(), 9).unwrap_err().to_string();
        assert!(err.contains("is a FIFO, not a regular file"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
