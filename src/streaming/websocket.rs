//! WebSocket transports (tokio-tungstenite): the remotecommand channel
//! protocols (`v5.channel.k8s.io` down to `channel.k8s.io`: each binary
//! message is a channel byte — 0 stdin, 1 stdout, 2 stderr, 3 error, 4
//! resize — and its data; v5's `[255, channel]` closes a channel), presented
//! to the exec session as the same streams SPDY gives it; and port-forward
//! as SPDY tunnelled in binary messages (`SPDY/3.1+portforward.k8s.io`,
//! what client-go's port-forward over WebSocket speaks). Messages are at
//! most 1 MiB; stdin and resizes are queued within the connection's byte
//! budget (`streaming::queue`), and the reader stops reading while it is
//! spent; the server pings every few seconds, so a client that vanished is
//! noticed even while nothing else moves.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::queue::{Budget, ChunkSender, CONNECTION_BUDGET};
use super::runtime::ExecStdio;
use super::spdy::conn::{Activity, Out, PING_INTERVAL};
use super::spdy::{Connection, Headers, IncomingStream, Outbound};

/// The subprotocol of port-forward over WebSocket.
pub(crate) const TUNNEL_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";
/// The v5 signal that a channel is closed: `[CLOSE, channel]`.
const CLOSE: u8 = 255;

type Socket = WebSocketStream<TokioIo<Upgraded>>;

/// The largest message or frame a client may send.
const MAX_MESSAGE: usize = 1 << 20;

pub(crate) async fn accept(upgraded: Upgraded) -> Socket {
    let config = WebSocketConfig::default().max_message_size(Some(MAX_MESSAGE)).max_frame_size(Some(MAX_MESSAGE));
    WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config)).await
}

fn normal_close() -> Message {
    Message::Close(Some(CloseFrame { code: CloseCode::Normal, reason: "".into() }))
}

/// The exec session's streams over a channel-protocol WebSocket. The streams
/// are those the Exec request asked for (ids: channel + 1).
pub(crate) fn channel_connection(socket: Socket, stdio: ExecStdio, idle_timeout: Duration) -> Connection {
    let (mut sink, mut source) = socket.split();
    let (out_tx, mut out_rx) = mpsc::channel::<Out>(64);
    let (streams_tx, streams) = mpsc::channel(8);
    let (gone_tx, gone) = watch::channel(false);
    let gone_tx = Arc::new(gone_tx);
    let activity = Arc::new(Activity::new());
    let budget = Budget::new(CONNECTION_BUDGET);
    let mut inputs: HashMap<u8, ChunkSender> = HashMap::new();
    let channels = [
        (true, 3u8, "error"),
        (stdio.stdout, 1, "stdout"),
        (stdio.stderr && !stdio.tty, 2, "stderr"),
        (stdio.stdin, 0, "stdin"),
        (stdio.tty, 4, "resize"),
    ];
    for (_, channel, kind) in channels.into_iter().filter(|(on, _, _)| *on) {
        // Only stdin and resize carry anything from the client.
        let (tx, rx) = budget.stream();
        if matches!(channel, 0 | 4) {
            inputs.insert(channel, tx);
        }
        let headers = Headers(vec![("streamtype".into(), kind.into())]);
        let _ = streams_tx.try_send(IncomingStream { id: u32::from(channel) + 1, headers, data: rx });
    }
    // As Kubernetes' server: an empty message on the first channel written
    // tells the client the session is set up.
    let first_written: u8 = if stdio.stdout {
        1
    } else if stdio.stderr {
        2
    } else {
        3
    };
    let (writer_gone, writer_activity) = (gone_tx.clone(), activity.clone());
    let writer = tokio::spawn(async move {
        let mut ok = sink.send(Message::Binary(Bytes::from(vec![first_written]))).await.is_ok();
        let mut pings = tokio::time::interval_at(tokio::time::Instant::now() + PING_INTERVAL, PING_INTERVAL);
        while ok {
            let out = tokio::select! {
                out = out_rx.recv() => out,
                _ = pings.tick() => {
                    // Not activity: it keeps no session alive.
                    ok = sink.send(Message::Ping(Bytes::new())).await.is_ok();
                    continue;
                }
            };
            let Some(out) = out else { break };
            writer_activity.touch();
            ok = match out {
                Out::Data(id, data, _) if !data.is_empty() => {
                    let mut message = Vec::with_capacity(data.len() + 1);
                    message.push((id - 1) as u8);
                    message.extend_from_slice(&data);
                    sink.send(Message::Binary(message.into())).await.is_ok()
                }
                Out::GoAway => {
                    let _ = sink.send(normal_close()).await;
                    false
                }
                _ => true,
            };
        }
        let _ = writer_gone.send(true);
    });
    let mut reader_gone = gone.clone();
    tokio::spawn(async move {
        loop {
            let left = idle_timeout.saturating_sub(activity.idle_for());
            if left.is_zero() {
                tracing::info!(timeout = ?idle_timeout, "streaming WebSocket idle too long; closing it");
                break;
            }
            let message = tokio::select! {
                next = tokio::time::timeout(left, source.next()) => match next {
                    Ok(Some(Ok(message))) => message,
                    Err(_) => continue,
                    Ok(_) => break,
                },
                _ = reader_gone.wait_for(|g| *g) => break,
            };
            match message {
                Message::Binary(data) if !data.is_empty() => {
                    activity.touch();
                    let (channel, payload) = (data[0], data.slice(1..));
                    if channel == CLOSE {
                        if let Some(closed) = payload.first() {
                            inputs.remove(closed);
                        }
                    } else if let Some(tx) = inputs.get(&channel) {
                        // Waits while the budget is spent, unless the connection goes.
                        let sent = tokio::select! {
                            sent = tx.send(payload) => sent.is_ok(),
                            _ = reader_gone.wait_for(|g| *g) => break,
                        };
                        if !sent {
                            inputs.remove(&channel);
                        }
                    }
                }
                Message::Close(_) => break,
                // Pongs answer our pings: not activity.
                _ => {}
            }
        }
        let _ = gone_tx.send(true);
    });
    Connection::from_parts(streams, Outbound { tx: out_tx }, gone, writer)
}

/// A byte stream carried in binary messages, for SPDY tunnelled in a
/// WebSocket; runs until both directions end.
pub(crate) fn tunnel(socket: Socket, idle_timeout: Duration) -> Connection {
    let (ours, theirs) = tokio::io::duplex(256 << 10);
    let (mut from_session, mut to_session) = tokio::io::split(theirs);
    let (mut sink, mut source) = socket.split();
    tokio::spawn(async move {
        let outward = async move {
            let mut buf = vec![0u8; 32 << 10];
            loop {
                match from_session.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if sink.send(Message::Binary(Bytes::copy_from_slice(&buf[..n]))).await.is_err() {
                            return;
                        }
                    }
                }
            }
            let _ = sink.send(normal_close()).await;
        };
        let inward = async move {
            while let Some(Ok(message)) = source.next().await {
                let written = match message {
                    Message::Binary(data) => to_session.write_all(&data).await.is_ok(),
                    Message::Close(_) => false,
                    _ => true,
                };
                if !written {
                    break;
                }
            }
            let _ = to_session.shutdown().await;
        };
        tokio::join!(outward, inward);
    });
    Connection::serve(ours, idle_timeout)
}
