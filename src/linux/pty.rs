//! Pseudo-terminals for streaming Exec with a tty: a master/slave pair, the
//! window size set on the master (resize events), and the slave made the
//! controlling terminal of the command's new session.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

pub struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

/// A new pseudo-terminal pair, both ends close-on-exec.
pub fn open() -> io::Result<Pty> {
    let pair = nix::pty::openpty(None, None).map_err(io::Error::from)?;
    for fd in [&pair.master, &pair.slave] {
        nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))
            .map_err(io::Error::from)?;
    }
    Ok(Pty { master: pair.master, slave: pair.slave })
}

/// Sets the terminal's size in character cells (TIOCSWINSZ).
pub fn set_window_size(master: &OwnedFd, columns: u16, rows: u16) -> io::Result<()> {
    let size = libc::winsize { ws_row: rows, ws_col: columns, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCSWINSZ reads one winsize from the pointer, which points to a
    // live value on our stack; the fd is open (borrowed from an OwnedFd).
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &size as *const libc::winsize) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// In a child about to exec: a new session whose controlling terminal is
/// the terminal on stdin.
pub fn take_stdin_as_controlling_terminal() -> io::Result<()> {
    nix::unistd::setsid().map_err(io::Error::from)?;
    // SAFETY: TIOCSCTTY takes an int argument (0: do not steal the terminal
    // from another session) and touches no memory of ours.
    if unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
