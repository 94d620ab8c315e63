//! remotecommand over SPDY: the exec session. The client opens one stream
//! per channel (header `streamType`: error, stdin, stdout, stderr, resize);
//! once all it asked for are there the command starts, its output goes out
//! until end of file, stdin comes in until the client half-closes it, resize
//! events (JSON `{"Width":..,"Height":..}`) set the terminal size, and the
//! outcome ends on the error stream. A client gone mid-session gets its
//! command killed.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

use super::runtime::{ExecIo, ExecStdio, PreparedExec, RunningExec};
use super::spdy::{Connection, IncomingStream, Outbound};
use super::status::{error_stream_bytes, Outcome};

/// How long the client may take to open its streams (kubelet's default).
const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the output may take to drain once the command has ended.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// The remotecommand subprotocols, newest first; v1 is the bare name.
pub(crate) const PROTOCOLS: [&str; 5] =
    ["v5.channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io"];

/// v4 and later carry a metav1.Status on the error stream.
pub(crate) fn has_status_json(protocol: &str) -> bool {
    matches!(protocol, "v4.channel.k8s.io" | "v5.channel.k8s.io")
}

/// v3 and later have a resize stream.
fn has_resize(protocol: &str) -> bool {
    !matches!(protocol, "v2.channel.k8s.io" | "channel.k8s.io" | "")
}

/// The streams a session uses, by type.
pub(super) struct Streams(pub(super) HashMap<String, IncomingStream>);

/// Waits until the client has opened every stream `stdio` needs.
pub(super) async fn collect_streams(
    conn: &mut Connection,
    stdio: ExecStdio,
    protocol: &str,
) -> Result<Streams, String> {
    let mut wanted = vec!["error"];
    for (on, name) in [
        (stdio.stdin, "stdin"),
        (stdio.stdout, "stdout"),
        (stdio.stderr && !stdio.tty, "stderr"),
        (stdio.tty && has_resize(protocol), "resize"),
    ] {
        if on {
            wanted.push(name);
        }
    }
    let mut streams = HashMap::new();
    let deadline = tokio::time::Instant::now() + STREAM_CREATION_TIMEOUT;
    while !wanted.iter().all(|w| streams.contains_key(*w)) {
        let stream = tokio::time::timeout_at(deadline, conn.streams.recv())
            .await
            .map_err(|_| format!("timed out waiting for the client's streams ({})", wanted.join(", ")))?
            .ok_or("the client left before opening its streams")?;
        let kind = stream.headers.get("streamtype").unwrap_or_default().to_ascii_lowercase();
        match kind.as_str() {
            "stdin" | "resize" => {
                streams.insert(kind, stream);
            }
            // Nothing the client sends on these is read: it is dropped.
            "error" | "stdout" | "stderr" => {
                let mut stream = stream;
                stream.data.close();
                streams.insert(kind, stream);
            }
            _ => {
                let _ = conn.outbound.reset(stream.id, super::spdy::frame::RST_PROTOCOL_ERROR).await;
            }
        }
    }
    Ok(Streams(streams))
}

/// Runs one exec session on `conn` to its end.
pub(crate) async fn serve(mut conn: Connection, protocol: String, launch: Box<dyn PreparedExec>, stdio: ExecStdio) {
    let container_id = launch.container_id().to_string();
    let argv = launch.argv().to_vec();
    let Some(mut streams) = streams_or_close(&mut conn, stdio, &protocol, &container_id).await else {
        finish_connection(conn).await;
        return;
    };
    let outcome = match launch.start(stdio) {
        Ok((running, io)) => run(&mut conn, &mut streams, running, io).await,
        Err(e) => Some(Outcome::Failed(e)),
    };
    match outcome {
        Some(outcome) => {
            if let Outcome::Failed(why) = &outcome {
                tracing::info!(container_id = %container_id, error = %why, "exec session failed");
            }
            end_session(conn, &streams, &outcome, &argv, &protocol).await;
        }
        None => {
            tracing::info!(container_id = %container_id, "exec client gone; its command was killed");
            // The connection's writer ends here whatever still holds a sender.
            finish_connection(conn).await;
        }
    }
}

/// The client's streams, or None (logged) when it did not open them.
pub(super) async fn streams_or_close(
    conn: &mut Connection,
    stdio: ExecStdio,
    protocol: &str,
    container_id: &str,
) -> Option<Streams> {
    match collect_streams(conn, stdio, protocol).await {
        Ok(streams) => Some(streams),
        Err(why) => {
            tracing::info!(container_id = %container_id, "streaming session: {why}");
            None
        }
    }
}

/// Writes `outcome` on the error stream, ends it, and closes the connection.
pub(super) async fn end_session(
    conn: Connection,
    streams: &Streams,
    outcome: &Outcome,
    argv: &[String],
    protocol: &str,
) {
    if let Some(id) = streams.0.get("error").map(|s| s.id) {
        let bytes = error_stream_bytes(outcome, argv, has_status_json(protocol));
        if !bytes.is_empty() {
            let _ = conn.outbound.data(id, &bytes).await;
        }
        let _ = conn.outbound.finish(id).await;
    }
    finish_connection(conn).await;
}

pub(super) async fn finish_connection(conn: Connection) {
    let _ = conn.outbound.go_away().await;
    conn.flush(Duration::from_secs(2)).await;
}

/// Forwards stdio until the command ends; None when the client left first
/// (the command is then killed).
async fn run(
    conn: &mut Connection,
    streams: &mut Streams,
    running: Box<dyn RunningExec>,
    io: ExecIo,
) -> Option<Outcome> {
    let outbound = conn.outbound.clone();
    let mut copies: Vec<JoinHandle<()>> = Vec::new();
    let mut background: Vec<JoinHandle<()>> = Vec::new();
    for (fd, name) in [(io.stdout, "stdout"), (io.stderr, "stderr")] {
        if let (Some(fd), Some(stream)) = (fd, streams.0.get(name)) {
            copies.push(tokio::spawn(copy_out(fd, outbound.clone(), Some(stream.id))));
        }
    }
    if let (Some(fd), Some(stream)) = (io.stdin, streams.0.remove("stdin")) {
        background.push(tokio::spawn(copy_in(stream, fd)));
    }
    if let (Some(terminal), Some(stream)) = (io.terminal, streams.0.remove("resize")) {
        background.push(tokio::spawn(apply_resizes(stream, terminal)));
    }
    let mut gone = conn.gone.clone();
    let client_gone = async move {
        let _ = gone.wait_for(|g| *g).await;
    };
    tokio::pin!(client_gone);
    let ended = tokio::select! {
        ended = running.wait() => ended,
        () = &mut client_gone => {
            running.kill();
            let _ = running.wait().await;
            abort_all(copies.iter().chain(&background));
            return None;
        }
    };
    // Output written before the end still goes out, unless the client leaves.
    let drained = async {
        for copy in copies.iter_mut() {
            let _ = copy.await;
        }
    };
    tokio::select! {
        _ = tokio::time::timeout(DRAIN_GRACE, drained) => {}
        () = &mut client_gone => {
            abort_all(copies.iter().chain(&background));
            return None;
        }
    }
    abort_all(copies.iter().chain(&background));
    Some(match ended {
        Ok(code) => Outcome::Exited(code),
        Err(e) => Outcome::Failed(e),
    })
}

fn abort_all<'a>(tasks: impl Iterator<Item = &'a JoinHandle<()>>) {
    for task in tasks {
        task.abort();
    }
}

/// Sends what `fd` yields on stream `id` (reads and drops it without one),
/// then half-closes it. A terminal whose other side closed reads EIO, its
/// end of file.
pub(super) async fn copy_out(fd: OwnedFd, outbound: Outbound, id: Option<u32>) {
    if let Ok(mut source) = tokio::net::unix::pipe::Receiver::from_owned_fd_unchecked(fd) {
        let mut buf = vec![0u8; 32 << 10];
        loop {
            match source.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Some(id) = id {
                        if outbound.data(id, &buf[..n]).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    }
    if let Some(id) = id {
        let _ = outbound.finish(id).await;
    }
}

/// Writes what the client sends on `stream` to `fd`; closes `fd` at the
/// client's half-close (the command reads end of file).
pub(super) async fn copy_in(mut stream: IncomingStream, fd: OwnedFd) {
    let Ok(mut sink) = tokio::net::unix::pipe::Sender::from_owned_fd_unchecked(fd) else {
        return;
    };
    while let Some(chunk) = stream.data.recv().await {
        if sink.write_all(&chunk).await.is_err() {
            return;
        }
    }
}

#[derive(serde::Deserialize)]
struct TerminalSize {
    #[serde(rename = "Width")]
    width: u16,
    #[serde(rename = "Height")]
    height: u16,
}

/// Applies each size the client sends (a stream of JSON objects).
pub(super) async fn apply_resizes(mut stream: IncomingStream, terminal: OwnedFd) {
    let mut pending: Vec<u8> = Vec::new();
    while let Some(chunk) = stream.data.recv().await {
        pending.extend_from_slice(&chunk);
        let mut sizes = serde_json::Deserializer::from_slice(&pending).into_iter::<TerminalSize>();
        let mut used = 0;
        loop {
            match sizes.next() {
                Some(Ok(size)) => {
                    used = sizes.byte_offset();
                    if let Err(e) = crate::linux::pty::set_window_size(&terminal, size.width, size.height) {
                        tracing::debug!(error = %e, "cannot resize the exec terminal");
                    }
                }
                Some(Err(e)) if e.is_eof() => break,
                Some(Err(_)) => {
                    // Not a size: drop what was read so far and go on.
                    used = pending.len();
                    break;
                }
                None => break,
            }
        }
        pending.drain(..used);
        if pending.len() > 4096 {
            pending.clear();
        }
    }
}
