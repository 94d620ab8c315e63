//! The helper programs the daemon runs and talks to over a pipe pair (the
//! monitor, the pause launcher): started with stdin and stdout piped and
//! stderr discarded, then told one line and heard one line back. Waiting for
//! a helper's exit belongs to the reaper, never to this handle.

use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};

/// A started helper: its pid, and the pipes to its stdin and from its stdout.
pub struct Piped {
    pub pid: i32,
    pub input: ChildStdin,
    pub output: ChildStdout,
}

/// Spawns `command` (the spawn waits for its exec) with piped stdin and stdout.
pub fn spawn(command: &mut Command) -> io::Result<Piped> {
    let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?;
    let pid = child.id() as i32;
    let (input, output) = (child.stdin.take(), child.stdout.take());
    // The reaper owns waiting; the std handle must never wait.
    drop(child);
    match (input, output) {
        (Some(input), Some(output)) => Ok(Piped { pid, input, output }),
        _ => Err(io::Error::other("the helper's pipes are missing")),
    }
}

/// Writes `line` to a helper's input, then reads one line of its output on
/// the async threads; the input stays open until the reply is in. A helper
/// that died already fails the write, and its reply is then empty.
pub async fn say_then_read_line(mut input: ChildStdin, line: &[u8], output: ChildStdout) -> io::Result<String> {
    let _ = input.write_all(line);
    read_line_holding(input, output).await
}

/// Reads one line of a helper's output on the async threads, holding its
/// input open until the reply is in.
pub async fn read_line_holding(input: ChildStdin, output: ChildStdout) -> io::Result<String> {
    use tokio::io::AsyncBufReadExt;
    let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(output))?;
    let mut reply = String::new();
    tokio::io::BufReader::new(pipe).read_line(&mut reply).await?;
    drop(input);
    Ok(reply)
}

/// Whether a helper's output has something to read (or has ended) now.
pub fn readable_now(output: &ChildStdout) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(output.as_fd(), PollFlags::POLLIN)];
    !matches!(poll(&mut fds, PollTimeout::ZERO), Ok(0))
}
