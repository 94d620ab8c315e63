//! The monitor's control protocol, daemon side: one request line per
//! connection on its Unix socket, one reply line (`ok` or `error MESSAGE`);
//! the messages are `crate::wire`'s.

use std::io;
use std::path::Path;
use std::time::Duration;

pub(crate) use crate::wire::Request;
use crate::wire::{Answer, Message, Passed};

#[derive(Debug, thiserror::Error)]
pub(crate) enum ControlError {
    #[error("the container's monitor is not reachable at {path}: {source}")]
    Unreachable { path: String, source: io::Error },
    #[error("{0}")]
    Refused(String),
}

/// Sends one request and waits (up to `timeout`) for the reply, on the
/// async threads (the connect to a local socket does not block).
pub(crate) async fn call(socket: &Path, request: Request, timeout: Duration) -> Result<(), ControlError> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let unreachable = |source| ControlError::Unreachable { path: socket.display().to_string(), source };
    let stream = crate::linux::socket::connect(socket).map_err(unreachable)?;
    stream.set_nonblocking(true).map_err(unreachable)?;
    let mut stream = tokio::net::UnixStream::from_std(stream).map_err(unreachable)?;
    let exchange = async {
        stream.write_all(format!("{}\n", request.encode()).as_bytes()).await?;
        let mut reply = String::new();
        tokio::io::BufReader::new(&mut stream).read_line(&mut reply).await?;
        Ok(reply)
    };
    let reply = match tokio::time::timeout(timeout, exchange).await {
        Ok(read) => read.map_err(unreachable)?,
        Err(_) => return Err(unreachable(std::io::ErrorKind::TimedOut.into())),
    };
    match (reply.trim_end(), Answer::<Passed>::decode(reply.trim_end())) {
        ("", _) => Err(ControlError::Refused("the monitor closed the connection without replying".into())),
        (_, Ok(Answer::Done(passed))) if passed == Passed::default() => Ok(()),
        (_, Ok(Answer::Refused(why))) => Err(ControlError::Refused(why)),
        (other, _) => Err(ControlError::Refused(other.to_string())),
    }
}
