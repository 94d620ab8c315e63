//! Pseudo-terminals in a container's own devpts instance: for streaming
//! Exec with a tty (opened by the daemon through the init's root), and for a
//! container created with a terminal (opened by its init once its mounts are
//! made); the window size set on the master (resize events), and the slave
//! made the controlling terminal of a new session.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

pub(crate) struct Pty {
    pub(crate) master: OwnedFd,
    pub(crate) slave: OwnedFd,
}

/// A new pseudo-terminal pair in the devpts instance of the container whose
/// init is `init_pid` (its `/dev/pts/ptmx`, resolved inside its root), so
/// the command sees its terminal under its own `/dev/pts`; both ends
/// close-on-exec, the master non-blocking.
pub(crate) fn open_in_container(init_pid: i32) -> io::Result<Pty> {
    open_under(&format!("/proc/{init_pid}/root"), true)
}

/// A new pseudo-terminal pair in the devpts instance mounted at `/dev/pts`
/// of our own root (a container's init after pivot_root); both ends
/// close-on-exec, the master blocking.
pub(crate) fn open_in_own_root() -> io::Result<Pty> {
    open_under("/", false)
}

/// The pair from `dev/pts/ptmx` under the directory `root`.
fn open_under(root: &str, nonblocking: bool) -> io::Result<Pty> {
    use nix::fcntl::{open, openat2, OFlag, OpenHow, ResolveFlag};
    use nix::sys::stat::{fstat, major, minor, Mode, SFlag};
    use std::os::fd::FromRawFd;

    let root =
        open(root, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty()).map_err(io::Error::from)?;
    let mut flags = OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
    if nonblocking {
        flags |= OFlag::O_NONBLOCK;
    }
    let how = OpenHow::new().flags(flags).resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let master = openat2(&root, "dev/pts/ptmx", how).map_err(io::Error::from)?;
    // The container owns that path: it must be the multiplexer itself (5:2).
    let stat = fstat(&master).map_err(io::Error::from)?;
    let is_char = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFCHR;
    if !is_char || major(stat.st_rdev) != 5 || minor(stat.st_rdev) != 2 {
        return Err(io::Error::other("the container's /dev/pts/ptmx is not the pseudo-terminal multiplexer"));
    }
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int from the pointer, a live value on our stack.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock as *const libc::c_int) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: TIOCGPTPEER takes open flags and returns a new fd of the peer
    // (found from the master, not by a path), or -1.
    let slave =
        unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTPEER, libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) };
    if slave < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the ioctl returned a fresh fd that nothing else owns.
    let slave = unsafe { OwnedFd::from_raw_fd(slave) };
    Ok(Pty { master, slave })
}

/// The number N of the terminal's slave, `/dev/pts/N` in its devpts (TIOCGPTN).
pub(crate) fn number(master: &OwnedFd) -> io::Result<u32> {
    let mut n: libc::c_uint = 0;
    // SAFETY: TIOCGPTN writes one unsigned int through the pointer, a live
    // value on our stack; the fd is open (borrowed from an OwnedFd).
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTN, &mut n as *mut libc::c_uint) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n)
}

/// Sets the terminal's size in character cells (TIOCSWINSZ).
pub(crate) fn set_window_size(master: &OwnedFd, columns: u16, rows: u16) -> io::Result<()> {
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
pub(crate) fn take_stdin_as_controlling_terminal() -> io::Result<()> {
    nix::unistd::setsid().map_err(io::Error::from)?;
    // SAFETY: TIOCSCTTY takes an int argument (0: do not steal the terminal
    // from another session) and touches no memory of ours.
    if unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
