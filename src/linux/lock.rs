//! Lock files: one `nidus serve` per state directory (a lock of the process,
//! gone with it), and the locks cooperating processes take on the stores.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, Flock, FlockArg};

#[derive(Debug, thiserror::Error)]
pub(crate) enum LockError {
    #[error("another nidus instance holds the lock {path} (pid {holder}); stop it or choose another state directory")]
    Held { path: PathBuf, holder: String },
    #[error("cannot open lock file {path}: {source}")]
    Open { path: PathBuf, source: std::io::Error },
    #[error("cannot lock {path}: {source}")]
    Lock { path: PathBuf, source: Errno },
}

/// A held lock; released when dropped (or when the process dies).
#[derive(Debug)]
pub(crate) struct LockFile {
    _lock: Held,
}

#[derive(Debug)]
enum Held {
    /// flock(2): belongs to the open file, shared with every copy of it.
    Flock(#[allow(dead_code)] Flock<File>),
    /// A POSIX record lock: belongs to this process alone. Its children hold
    /// no part of it, so it ends with us even while a child forked a moment
    /// before our death has not yet exec'd (and closed its copy of the file).
    Process(#[allow(dead_code)] File),
}

/// Takes the exclusive instance lock at `path`, creating the file (0600) when
/// missing, and records our pid in it for the message another instance
/// prints. Nothing else in this process may open that file: closing any
/// descriptor of it would drop a POSIX lock.
pub(crate) fn acquire(path: &Path) -> Result<LockFile, LockError> {
    let open_err = |source| LockError::Open { path: path.to_path_buf(), source };
    let mut file = open_lock_file(path)?;
    let mut holder = String::new();
    let _ = file.read_to_string(&mut holder);
    let whole_file = libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    };
    match nix::fcntl::fcntl(&file, FcntlArg::F_SETLK(&whole_file)) {
        Ok(_) => {}
        Err(Errno::EAGAIN | Errno::EACCES) => {
            let holder = holder.trim();
            return Err(LockError::Held {
                path: path.to_path_buf(),
                holder: if holder.is_empty() { "unknown".into() } else { holder.into() },
            });
        }
        Err(source) => return Err(LockError::Lock { path: path.to_path_buf(), source }),
    }
    let mut lock = file;
    let pid = std::process::id().to_string();
    let write = |f: &mut File| -> std::io::Result<()> {
        f.set_len(0)?;
        f.seek(SeekFrom::Start(0))?;
        f.write_all(pid.as_bytes())?;
        f.sync_all()
    };
    write(&mut lock).map_err(open_err)?;
    Ok(LockFile { _lock: Held::Process(lock) })
}

/// A lock cooperating processes wait for: exclusive (one holder) or shared
/// (many holders, no exclusive one). Released when dropped.
pub(crate) fn wait(path: &Path, shared: bool) -> Result<LockFile, LockError> {
    let file = open_lock_file(path)?;
    let arg = if shared { FlockArg::LockShared } else { FlockArg::LockExclusive };
    match Flock::lock(file, arg) {
        Ok(lock) => Ok(LockFile { _lock: Held::Flock(lock) }),
        Err((_, source)) => Err(LockError::Lock { path: path.to_path_buf(), source }),
    }
}

/// The exclusive lock at `path` if nobody holds it (shared or exclusive) now.
pub(crate) fn try_exclusive(path: &Path) -> Result<Option<LockFile>, LockError> {
    let file = open_lock_file(path)?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Some(LockFile { _lock: Held::Flock(lock) })),
        Err((_, Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, source)) => Err(LockError::Lock { path: path.to_path_buf(), source }),
    }
}

fn open_lock_file(path: &Path) -> Result<File, LockError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| LockError::Open { path: path.to_path_buf(), source })
}
