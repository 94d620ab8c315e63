//! The helper programs the daemon runs and talks to over a pipe pair (the
//! monitor, the pause launcher): started with stdin and stdout piped and
//! stderr discarded, then told one line and heard one line back (the
//! words are `crate::wire`'s). Waiting for a helper's exit belongs to the
//! reaper, never to this handle.

use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use crate::linux::reaper::{ExitStatus, Reaper};
use crate::wire::{Answer, Message};

/// A started helper: its pid, and the pipes to its stdin and from its stdout.
pub(crate) struct Piped {
    pub(crate) pid: i32,
    pub(crate) input: ChildStdin,
    pub(crate) output: ChildStdout,
}

/// Spawns `command` (the spawn waits for its exec) with piped stdin and stdout.
pub(crate) fn spawn(command: &mut Command) -> io::Result<Piped> {
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

/// Writes `message` as a line to a helper's input. A helper that died
/// already fails the write; its reply is then empty.
pub(crate) fn say(mut input: &ChildStdin, message: &impl Message) {
    let _ = input.write_all(format!("{}\n", message.encode()).as_bytes());
}

/// Why a helper's one-line answer is not what was asked for.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplyError {
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// It said `error MESSAGE`.
    #[error("{0}")]
    Refused(String),
    /// It ended (or closed its output) without an answer, or said
    /// something else; how it ended, unless it had not within the wait.
    #[error("ended without a reply")]
    NoReply { ended: Option<ExitStatus> },
}

/// Awaits a helper's one-line answer on the async threads, holding its
/// input open until then: a `T`, or why not. One that does not answer
/// within `timeout` is killed (its reaping is the caller's). One that
/// refuses or ends without an answer is waited for (up to `exit_wait`, or
/// until it ends when None), so that it is gone when the caller moves on.
pub(crate) async fn await_reply<T: Message>(
    pid: i32,
    input: ChildStdin,
    output: ChildStdout,
    timeout: Duration,
    reaper: &Reaper,
    exit_wait: Option<Duration>,
) -> Result<T, ReplyError> {
    let line = match tokio::time::timeout(timeout, read_line_holding(input, output)).await {
        Ok(Ok(line)) => line,
        Ok(Err(_)) => String::new(),
        Err(_) => {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            return Err(ReplyError::Timeout(timeout));
        }
    };
    let answer = Answer::<T>::decode(line.trim_end());
    if let Ok(Answer::Done(done)) = answer {
        return Ok(done);
    }
    let ended = match exit_wait {
        Some(wait) => tokio::time::timeout(wait, reaper.wait(pid)).await.ok(),
        None => Some(reaper.wait(pid).await),
    };
    Err(match answer {
        Ok(Answer::Refused(why)) => ReplyError::Refused(why),
        _ => ReplyError::NoReply { ended },
    })
}

/// Reads one line of a helper's output on the async threads, holding its
/// input open until the reply is in.
async fn read_line_holding(input: ChildStdin, output: ChildStdout) -> io::Result<String> {
    use tokio::io::AsyncBufReadExt;
    let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(output))?;
    let mut reply = String::new();
    tokio::io::BufReader::new(pipe).read_line(&mut reply).await?;
    drop(input);
    Ok(reply)
}

/// Whether a helper's output has something to read (or has ended) now.
pub(crate) fn readable_now(output: &ChildStdout) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(output.as_fd(), PollFlags::POLLIN)];
    !matches!(poll(&mut fds, PollTimeout::ZERO), Ok(0))
}
