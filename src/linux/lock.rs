//! Exclusive, non-blocking lock files: one `nidus serve` per state directory.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another nidus instance holds the lock {path} (pid {holder}); stop it or choose another state directory")]
    Held { path: PathBuf, holder: String },
    #[error("cannot open lock file {path}: {source}")]
    Open { path: PathBuf, source: std::io::Error },
    #[error("cannot lock {path}: {source}")]
    Lock { path: PathBuf, source: Errno },
}

/// A held lock; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct LockFile {
    _lock: Flock<File>,
}

/// Takes the exclusive lock at `path`, creating the file (0600) when missing,
/// and records our pid in it for the message another instance prints.
pub fn acquire(path: &Path) -> Result<LockFile, LockError> {
    let open_err = |source| LockError::Open { path: path.to_path_buf(), source };
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map_err(open_err)?;
    let mut holder = String::new();
    let _ = file.read_to_string(&mut holder);
    let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => lock,
        Err((_, Errno::EWOULDBLOCK)) => {
            let holder = holder.trim();
            return Err(LockError::Held {
                path: path.to_path_buf(),
                holder: if holder.is_empty() { "unknown".into() } else { holder.into() },
            });
        }
        Err((_, source)) => return Err(LockError::Lock { path: path.to_path_buf(), source }),
    };
    let pid = std::process::id().to_string();
    let write = |f: &mut File| -> std::io::Result<()> {
        f.set_len(0)?;
        f.seek(SeekFrom::Start(0))?;
        f.write_all(pid.as_bytes())?;
        f.sync_all()
    };
    write(&mut lock).map_err(open_err)?;
    Ok(LockFile { _lock: lock })
}
