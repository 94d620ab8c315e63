//! Attach, daemon side of the monitor's control protocol: `attach` passes
//! the monitor one pipe per output stream (SCM_RIGHTS), which then gets a
//! copy of all the container's output; the reply passes back the
//! container's stdin write end and its terminal, when it has them.
//! `close-stdin` closes the monitor's stdin write end (stdin_once).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::time::Duration;

use super::control::ControlError;
use crate::wire::{Answer, Message, Passed, Request};

/// What an attacher gets from the monitor besides the output copies.
pub(crate) struct Attached {
    pub(crate) stdin: Option<OwnedFd>,
    pub(crate) terminal: Option<OwnedFd>,
}

fn unreachable(socket: &Path) -> impl Fn(std::io::Error) -> ControlError + '_ {
    move |source| ControlError::Unreachable { path: socket.display().to_string(), source }
}

/// Registers `outputs` (write ends of the stdout and, without a terminal,
/// stderr pipes) with the monitor at `socket`.
pub(crate) fn attach(socket: &Path, outputs: &[&OwnedFd], timeout: Duration) -> Result<Attached, ControlError> {
    let stream = crate::linux::socket::connect(socket).map_err(unreachable(socket))?;
    stream.set_read_timeout(Some(timeout)).map_err(unreachable(socket))?;
    stream.set_write_timeout(Some(timeout)).map_err(unreachable(socket))?;
    let fds: Vec<RawFd> = outputs.iter().map(|fd| fd.as_raw_fd()).collect();
    let request = format!("{}\n", Request::Attach.encode());
    crate::linux::socket::send_with_fds(&stream, request.as_bytes(), &fds).map_err(unreachable(socket))?;
    let mut buf = [0u8; 256];
    let (line, passed) = crate::linux::socket::receive_with_fds(&stream, &mut buf).map_err(unreachable(socket))?;
    let reply = String::from_utf8_lossy(&buf[..line]).trim_end().to_string();
    let said = match Answer::<Passed>::decode(&reply) {
        Ok(Answer::Done(said)) => said,
        Ok(Answer::Refused(why)) => return Err(ControlError::Refused(why)),
        Err(_) if reply.is_empty() => {
            return Err(ControlError::Refused("the monitor closed the connection without replying".into()))
        }
        Err(_) => return Err(ControlError::Refused(reply)),
    };
    // Passed back in the order of the reply's words: stdin, then the terminal.
    let mut passed = passed.into_iter();
    let mut attached = Attached { stdin: None, terminal: None };
    if said.stdin {
        attached.stdin = passed.next();
    }
    if said.terminal {
        attached.terminal = passed.next();
    }
    Ok(attached)
}

/// Closes the container's stdin write end held by the monitor.
pub(crate) async fn close_stdin(socket: &Path, timeout: Duration) -> Result<(), ControlError> {
    super::control::call(socket, super::control::Request::CloseStdin, timeout).await
}
