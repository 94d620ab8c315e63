//! The monitor's control protocol: one request line per connection on its
//! Unix socket, one reply line (`ok` or `error MESSAGE`).

use std::io;
use std::path::Path;
use std::time::Duration;

/// Requests the daemon sends a monitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Release the init to execve (StartContainer).
    Start,
    /// Reopen the log file (ReopenContainerLog, after kubelet rotated it).
    ReopenLog,
    /// Close the container's stdin (an attach with stdin_once ended).
    CloseStdin,
}

impl Request {
    pub fn as_str(self) -> &'static str {
        match self {
            Request::Start => "start",
            Request::ReopenLog => "reopen-log",
            Request::CloseStdin => "close-stdin",
        }
    }

    pub fn parse(line: &str) -> Option<Self> {
        match line.trim() {
            "start" => Some(Request::Start),
            "reopen-log" => Some(Request::ReopenLog),
            "close-stdin" => Some(Request::CloseStdin),
            _ => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("the container's monitor is not reachable at {path}: {source}")]
    Unreachable { path: String, source: io::Error },
    #[error("{0}")]
    Refused(String),
}

/// Sends one request and waits (up to `timeout`) for the reply, on the
/// async threads (the connect to a local socket does not block).
pub async fn call(socket: &Path, request: Request, timeout: Duration) -> Result<(), ControlError> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let unreachable = |source| ControlError::Unreachable { path: socket.display().to_string(), source };
    let stream = crate::linux::socket::connect(socket).map_err(unreachable)?;
    stream.set_nonblocking(true).map_err(unreachable)?;
    let mut stream = tokio::net::UnixStream::from_std(stream).map_err(unreachable)?;
    let exchange = async {
        stream.write_all(format!("{}\n", request.as_str()).as_bytes()).await?;
        let mut reply = String::new();
        tokio::io::BufReader::new(&mut stream).read_line(&mut reply).await?;
        Ok(reply)
    };
    let reply = match tokio::time::timeout(timeout, exchange).await {
        Ok(read) => read.map_err(unreachable)?,
        Err(_) => return Err(unreachable(std::io::ErrorKind::TimedOut.into())),
    };
    match reply.trim_end() {
        "ok" => Ok(()),
        "" => Err(ControlError::Refused("the monitor closed the connection without replying".into())),
        other => Err(ControlError::Refused(other.strip_prefix("error ").unwrap_or(other).to_string())),
    }
}
