//! The attach session: the container's own stdio, held by its monitor. The
//! monitor copies the output into pipes of ours (as well as into the CRI
//! log) and hands us its stdin write end and terminal; output goes to the
//! client until the container's output ends (it exited) or the client
//! leaves; stdin comes from the client for `stdin: true` containers; resizes
//! apply to its terminal.
//!
//! When the client closes its stdin, the session ends there (the client
//! detaches; the container and its stdin go on, for a later attach), as
//! with containerd. A `stdin_once` container's stdin is closed then too;
//! without a terminal its output still goes to the client until it ends
//! (kubectl's `run -i` reads what the command makes of its input). On a
//! terminal the detach keys Ctrl-P Ctrl-Q end the session as well, as with
//! docker and CRI-O; they are not passed to the container.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::remotecommand::{apply_resizes, copy_out, end_session, finish_connection, streams_or_close};
use super::runtime::ExecStdio;
use super::spdy::Connection;
use super::spdy::IncomingStream;
use super::status::Outcome;

/// How long the monitor may take to answer.
const MONITOR_TIMEOUT: Duration = Duration::from_secs(5);
/// Pipe room for output a client has not taken yet (the monitor drops what does not fit).
const PIPE_BYTES: i32 = 1 << 20;

/// What an attach session needs, captured at the Attach call.
pub(crate) struct AttachLaunch {
    pub(crate) container_id: String,
    /// The monitor's control socket.
    pub(crate) socket: PathBuf,
    /// How the container was created.
    pub(crate) tty: bool,
    pub(crate) stdin: bool,
    pub(crate) stdin_once: bool,
}

fn output_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(std::io::Error::from)?;
    // The monitor never waits for us: its end does not block.
    fcntl(&write, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).map_err(std::io::Error::from)?;
    let _ = fcntl(&write, FcntlArg::F_SETPIPE_SZ(PIPE_BYTES));
    fcntl(&read, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).map_err(std::io::Error::from)?;
    Ok((read, write))
}

fn set_nonblocking(fd: &OwnedFd) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    if let Ok(flags) = fcntl(fd, FcntlArg::F_GETFL) {
        let _ = fcntl(fd, FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK));
    }
}

/// Runs one attach session on `conn` to its end.
pub(crate) async fn serve(mut conn: Connection, protocol: String, launch: AttachLaunch, stdio: ExecStdio) {
    let container_id = launch.container_id.clone();
    let Some(mut streams) = streams_or_close(&mut conn, stdio, &protocol, &container_id).await else {
        finish_connection(conn).await;
        return;
    };
    let outbound = conn.outbound.clone();
    let outcome = match attach_pipes(&launch).await {
        Ok((outputs, attached)) => {
            let mut copies: Vec<JoinHandle<()>> = Vec::new();
            let mut background: Vec<JoinHandle<()>> = Vec::new();
            for (fd, name) in outputs.into_iter().zip(["stdout", "stderr"]) {
                // Unwanted output is read and dropped, so the session still ends with it.
                let id = streams.0.get(name).map(|s| s.id);
                copies.push(tokio::spawn(copy_out(fd, outbound.clone(), id)));
            }
            // Set when the client's stdin ends the session (it closed or detached).
            let (detach_tx, mut detached) = tokio::sync::watch::channel(false);
            if let (true, Some(fd), Some(stream)) = (launch.stdin, attached.stdin, streams.0.remove("stdin")) {
                let (socket, once, tty) = (launch.socket.clone(), launch.stdin_once, launch.tty);
                background.push(tokio::spawn(async move {
                    let end = forward_stdin(stream, fd, tty).await;
                    if once && end == StdinEnd::Closed {
                        if let Err(e) = crate::monitor::attach::close_stdin(&socket, MONITOR_TIMEOUT).await {
                            tracing::debug!(error = %e, "cannot close the container's stdin");
                        }
                    }
                    // A stdin_once container without a terminal sends its last output first.
                    if end == StdinEnd::Detached || !once || tty {
                        let _ = detach_tx.send(true);
                    }
                }));
            }
            if let (Some(terminal), Some(stream)) = (attached.terminal, streams.0.remove("resize")) {
                background.push(tokio::spawn(apply_resizes(stream, terminal)));
            }
            let mut gone = conn.gone.clone();
            let output_over = async {
                for copy in copies.iter_mut() {
                    let _ = copy.await;
                }
            };
            let ended = tokio::select! {
                () = output_over => true,
                Ok(_) = detached.wait_for(|d| *d) => {
                    tracing::info!(container_id = %container_id, "attach client detached (its stdin ended)");
                    true
                }
                _ = gone.wait_for(|g| *g) => false,
            };
            for task in copies.iter().chain(&background) {
                task.abort();
            }
            ended.then_some(Outcome::Exited(0))
        }
        Err(why) => Some(Outcome::Failed(why)),
    };
    let Some(outcome) = outcome else {
        tracing::info!(container_id = %container_id, "attach client gone");
        // The connection's writer ends here whatever still holds a sender.
        super::remotecommand::finish_connection(conn).await;
        return;
    };
    end_session(conn, &streams, &outcome, &[], &protocol).await;
}

/// Ctrl-P then Ctrl-Q: the detach keys of docker and CRI-O.
const DETACH_KEYS: [u8; 2] = [0x10, 0x11];

/// How the client's stdin ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StdinEnd {
    /// The client closed it (or the container's stdin would take no more).
    Closed,
    /// The client typed the detach keys.
    Detached,
}

/// Writes what the client sends on `stream` to the container's stdin `fd`
/// until the client closes it or, when `detach_keys`, types Ctrl-P Ctrl-Q.
async fn forward_stdin(mut stream: IncomingStream, fd: OwnedFd, detach_keys: bool) -> StdinEnd {
    let Ok(mut sink) = tokio::net::unix::pipe::Sender::from_owned_fd_unchecked(fd) else {
        return StdinEnd::Closed;
    };
    let mut keys = DetachKeys::default();
    while let Some(chunk) = stream.data.recv().await {
        let (bytes, detach) = if detach_keys { keys.scan(&chunk) } else { (chunk.to_vec(), false) };
        if tokio::io::AsyncWriteExt::write_all(&mut sink, &bytes).await.is_err() {
            return StdinEnd::Closed;
        }
        if detach {
            return StdinEnd::Detached;
        }
    }
    // A Ctrl-P the client typed last is the container's.
    let _ = tokio::io::AsyncWriteExt::write_all(&mut sink, keys.held()).await;
    StdinEnd::Closed
}

/// Finds the detach keys in the client's input, across chunks.
#[derive(Default)]
struct DetachKeys {
    /// A Ctrl-P held back: the first key, maybe.
    holding: bool,
}

impl DetachKeys {
    /// The bytes of `chunk` for the container, and whether the keys were
    /// typed (then what came after them is dropped).
    fn scan(&mut self, chunk: &[u8]) -> (Vec<u8>, bool) {
        let mut out = Vec::with_capacity(chunk.len() + 1);
        for &b in chunk {
            if self.holding {
                self.holding = false;
                if b == DETACH_KEYS[1] {
                    return (out, true);
                }
                out.push(DETACH_KEYS[0]);
            }
            if b == DETACH_KEYS[0] {
                self.holding = true;
            } else {
                out.push(b);
            }
        }
        (out, false)
    }

    /// What is held back when the input ends.
    fn held(&self) -> &'static [u8] {
        if self.holding {
            &DETACH_KEYS[..1]
        } else {
            &[]
        }
    }
}

/// Registers our output pipes with the monitor: our read ends, and what it passed back.
async fn attach_pipes(launch: &AttachLaunch) -> Result<(Vec<OwnedFd>, crate::monitor::attach::Attached), String> {
    let streams = if launch.tty { 1 } else { 2 };
    let mut reads = Vec::new();
    let mut writes = Vec::new();
    for _ in 0..streams {
        let (read, write) = output_pipe().map_err(|e| format!("pipe: {e}"))?;
        reads.push(read);
        writes.push(write);
    }
    let socket = launch.socket.clone();
    let attached = tokio::task::spawn_blocking(move || {
        let ends: Vec<&OwnedFd> = writes.iter().collect();
        crate::monitor::attach::attach(&socket, &ends, MONITOR_TIMEOUT)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("cannot attach to the container: {e}"))?;
    for fd in [&attached.stdin, &attached.terminal].into_iter().flatten() {
        set_nonblocking(fd);
    }
    Ok((reads, attached))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detach_keys_are_found_across_chunks_and_a_lone_ctrl_p_is_passed_on() {
        let mut keys = DetachKeys::default();
        assert_eq!(keys.scan(b"ls\n"), (b"ls\n".to_vec(), false));
        assert_eq!(keys.scan(b"a\x10b"), (b"a\x10b".to_vec(), false));
        assert_eq!(keys.scan(b"x\x10"), (b"x".to_vec(), false));
        assert_eq!(keys.held(), b"\x10");
        assert_eq!(keys.scan(b"\x10"), (b"\x10".to_vec(), false), "Ctrl-P Ctrl-P: the first is the container's");
        assert_eq!(keys.scan(b"\x11rest"), (Vec::new(), true));
        let mut keys = DetachKeys::default();
        assert_eq!(keys.scan(b"echo\x10\x11after"), (b"echo".to_vec(), true));
    }
}
