//! Unix sockets at paths longer than `sun_path` allows (108 bytes, which a
//! deep state directory and a 64-digit id exceed): such a path is named
//! through `/proc/self/fd/N/NAME`, N an O_PATH handle on its directory.
//! Also descriptors passed over a connected socket (SCM_RIGHTS).

use std::fs::File;
use std::io;
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
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
pub(crate) fn bind(path: &Path) -> io::Result<UnixListener> {
    with_short_path(path, |p| UnixListener::bind(p))
}

/// Connects to the socket at `path`, however long.
pub(crate) fn connect(path: &Path) -> io::Result<UnixStream> {
    with_short_path(path, |p| UnixStream::connect(p))
}

/// Sends `bytes` with the descriptors `fds` attached (SCM_RIGHTS).
pub(crate) fn send_with_fds(stream: &UnixStream, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let rights = [ControlMessage::ScmRights(fds)];
    sendmsg::<()>(stream.as_raw_fd(), &[IoSlice::new(bytes)], &rights, MsgFlags::MSG_NOSIGNAL, None)?;
    Ok(())
}

/// Receives into `buf` with up to `MAX_FDS` descriptors attached, owned by
/// the caller from then on (close-on-exec); answers the byte count.
pub(crate) fn receive_with_fds(stream: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(stream.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
    let mut passed = Vec::new();
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            // SAFETY: the kernel just installed these descriptors in this
            // process for us; nothing else owns them.
            passed.extend(fds.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
        }
    }
    Ok((msg.bytes, passed))
}

/// Most descriptors `receive_with_fds` takes in one message.
const MAX_FDS: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_paths_bind_and_connect() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().join("x".repeat(120));
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
