//! Unix sockets at paths longer than `sun_path` allows (108 bytes, which a
//! deep state directory and a 64-digit id exceed): such a path is named
//! through `/proc/self/fd/N/NAME`, N an O_PATH handle on its directory.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// Longest path used as is (sun_path holds 108 bytes with the NUL).
const DIRECT_MAX: usize = 100;

/// Calls `f` with a short name for `path`, valid during the call.
fn with_short_path<T>(path: &Path, f: impl FnOnce(&Path) -> io::Result<T>) -> io::Result<T> {
    if path.as_os_str().len() <= DIRECT_MAX {
        return f(path);
    }
    let dir =
        path.parent().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "socket path has no directory"))?;
    let name =
        path.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "socket path has no name"))?;
    let handle =
        File::options().read(true).custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC).open(dir)?;
    let short = PathBuf::from(format!("/proc/self/fd/{}", handle.as_raw_fd())).join(name);
    let result = f(&short);
    drop(handle);
    result
}

/// Binds a listening socket at `path`, however long.
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    with_short_path(path, |p| UnixListener::bind(p))
}

/// Connects to the socket at `path`, however long.
pub fn connect(path: &Path) -> io::Result<UnixStream> {
    with_short_path(path, |p| UnixStream::connect(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_paths_bind_and_connect() {
        let dir = std::env::temp_dir().join(format!("nidus-sock-{:016x}", rand::random::<u64>())).join("x".repeat(120));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("monitor.sock");
        assert!(path.as_os_str().len() > 108);
        let listener = bind(&path).unwrap();
        let _client = connect(&path).unwrap();
        let (_server, _) = listener.accept().unwrap();
        assert!(path.exists());
        std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    }
}
