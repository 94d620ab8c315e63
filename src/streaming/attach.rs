//! The attach session: the container's own stdio, held by its monitor. The
//! monitor copies the output into pipes of ours (as well as into the CRI
//! log) and hands us its stdin write end and terminal; output goes to the
//! client until the container's output ends (it exited) or the client
//! leaves; stdin comes from the client for `stdin: true` containers, and
//! closes the container's stdin when the client closes it and the container
//! has `stdin_once`; resizes apply to its terminal.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::remotecommand::{apply_resizes, copy_in, copy_out, end_session, finish_connection, streams_or_close};
use super::spdy::Connection;
use super::status::Outcome;
use crate::container::exec_stream::ExecStdio;

/// How long the monitor may take to answer.
const MONITOR_TIMEOUT: Duration = Duration::from_secs(5);
/// Pipe room for output a client has not taken yet (the monitor drops what does not fit).
const PIPE_BYTES: i32 = 1 << 20;

/// What an attach session needs, captured at the Attach call.
pub struct AttachLaunch {
    pub container_id: String,
    /// The monitor's control socket.
    pub socket: PathBuf,
    /// How the container was created.
    pub tty: bool,
    pub stdin: bool,
    pub stdin_once: bool,
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
pub async fn serve(mut conn: Connection, protocol: String, launch: AttachLaunch, stdio: ExecStdio) {
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
            if let (true, Some(fd), Some(stream)) = (launch.stdin, attached.stdin, streams.0.remove("stdin")) {
                let (socket, once) = (launch.socket.clone(), launch.stdin_once);
                background.push(tokio::spawn(async move {
                    copy_in(stream, fd).await;
                    if once {
                        if let Err(e) = crate::monitor::attach::close_stdin(&socket, MONITOR_TIMEOUT).await {
                            tracing::debug!(error = %e, "cannot close the container's stdin");
                        }
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
        return;
    };
    end_session(conn, &streams, &outcome, &[], &protocol).await;
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
