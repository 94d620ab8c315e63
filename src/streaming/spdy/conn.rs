//! The server side of one SPDY/3.1 connection, as Kubernetes streaming
//! clients use it: the client opens streams (each is answered at once with
//! SYN_REPLY) and both sides send data and half-close with FIN. No SPDY flow
//! control (Kubernetes peers neither send nor honour WINDOW_UPDATE): what a
//! client sends is queued within the connection's byte budget
//! (`streaming::queue`), dropped on streams the session does not read, and
//! TCP slows the client down while the budget is spent. The client's pings
//! are echoed, and the server pings every few seconds, so a client that
//! vanished is noticed (the write fails) even while nothing else moves.
//! One task reads frames, one writes them; the session holding the
//! `Connection` sees new streams, writes through `Outbound`, and learns from
//! `gone` that the peer left, broke the protocol or was idle too long.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{mpsc, watch};

use super::frame::{self, Frame};
use super::headers::{HeaderReader, HeaderWriter, Headers};
use crate::streaming::queue::{Budget, ChunkReceiver, ChunkSender, CONNECTION_BUDGET};

/// Most streams one connection may have open at once.
pub(crate) const MAX_STREAMS: usize = 1024;
/// Largest data frame we send.
const CHUNK: usize = 32 << 10;
/// How often the server pings the client.
pub(crate) const PING_INTERVAL: Duration = Duration::from_secs(5);

/// A stream the client opened: its headers and what it sends, ending at its FIN.
pub(crate) struct IncomingStream {
    pub(crate) id: u32,
    pub(crate) headers: Headers,
    pub(crate) data: ChunkReceiver,
}

/// What a session asks its transport to send.
pub(crate) enum Out {
    Reply(u32),
    Data(u32, Bytes, bool),
    Reset(u32, u32),
    /// The echo of a client's ping.
    Ping(u32),
    /// A ping of the server's own (not activity: it keeps no session alive).
    Keepalive(u32),
    GoAway,
}

/// Sends on the connection; cheap to clone. Fails once the connection is gone.
#[derive(Clone)]
pub(crate) struct Outbound {
    pub(crate) tx: mpsc::Sender<Out>,
}

#[derive(Debug, thiserror::Error)]
#[error("the streaming connection is gone")]
pub(crate) struct Gone;

impl Outbound {
    /// Sends `data` on stream `id` in frames of at most 32 KiB.
    pub(crate) async fn data(&self, id: u32, data: &[u8]) -> Result<(), Gone> {
        for chunk in data.chunks(CHUNK) {
            self.tx.send(Out::Data(id, Bytes::copy_from_slice(chunk), false)).await.map_err(|_| Gone)?;
        }
        Ok(())
    }

    /// Half-closes stream `id` (an empty data frame with FIN).
    pub(crate) async fn finish(&self, id: u32) -> Result<(), Gone> {
        self.tx.send(Out::Data(id, Bytes::new(), true)).await.map_err(|_| Gone)
    }

    pub(crate) async fn reset(&self, id: u32, status: u32) -> Result<(), Gone> {
        self.tx.send(Out::Reset(id, status)).await.map_err(|_| Gone)
    }

    /// Tells the client we are done (GOAWAY) and lets the writer end.
    pub(crate) async fn go_away(&self) -> Result<(), Gone> {
        self.tx.send(Out::GoAway).await.map_err(|_| Gone)
    }
}

pub(crate) struct Connection {
    pub(crate) streams: mpsc::Receiver<IncomingStream>,
    pub(crate) outbound: Outbound,
    /// Becomes true when the peer is gone (end of connection, error, GOAWAY, idle).
    pub(crate) gone: watch::Receiver<bool>,
    writer: tokio::task::JoinHandle<()>,
}

impl Connection {
    /// Serves SPDY on `io` until the peer leaves or the idle timeout passes
    /// with no frame either way.
    pub(crate) fn serve<IO>(io: IO, idle_timeout: Duration) -> Connection
    where
        IO: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (read_half, write_half) = tokio::io::split(io);
        let (gone_tx, gone) = watch::channel(false);
        let gone_tx = Arc::new(gone_tx);
        let activity = Arc::new(Activity::new());
        let (out_tx, out_rx) = mpsc::channel(64);
        let (streams_tx, streams) = mpsc::channel(16);
        let reader = tokio::spawn(read_frames(
            BufReader::new(read_half),
            Outbound { tx: out_tx.clone() },
            streams_tx,
            activity.clone(),
            gone.clone(),
        ));
        let writer = tokio::spawn(write_frames(BufWriter::new(write_half), out_rx, activity.clone(), gone_tx.clone()));
        tokio::spawn(ping(Outbound { tx: out_tx.clone() }, gone.clone()));
        tokio::spawn(watch_over(reader, activity, idle_timeout, gone_tx));
        Connection { streams, outbound: Outbound { tx: out_tx }, gone, writer }
    }

    /// A connection made of channels, for a transport other than SPDY that
    /// drives the same sessions (WebSocket channels).
    pub(crate) fn from_parts(
        streams: mpsc::Receiver<IncomingStream>,
        outbound: Outbound,
        gone: watch::Receiver<bool>,
        writer: tokio::task::JoinHandle<()>,
    ) -> Connection {
        Connection { streams, outbound, gone, writer }
    }

    /// Waits until everything queued is written (after `go_away`), at most `limit`.
    pub(crate) async fn flush(self, limit: Duration) {
        let Connection { outbound, writer, streams, gone } = self;
        drop((outbound, streams, gone));
        let _ = tokio::time::timeout(limit, writer).await;
    }
}

/// When a frame last went either way.
pub(crate) struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Self { start: Instant::now(), last_ms: AtomicU64::new(0) }
    }
    pub(crate) fn touch(&self) {
        self.last_ms.store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    pub(crate) fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.start.elapsed().saturating_sub(last)
    }
}

/// Ends the connection when the reader ends or when it is idle too long.
async fn watch_over(
    mut reader: tokio::task::JoinHandle<()>,
    activity: Arc<Activity>,
    idle_timeout: Duration,
    gone: Arc<watch::Sender<bool>>,
) {
    loop {
        let left = idle_timeout.saturating_sub(activity.idle_for());
        if left.is_zero() {
            tracing::info!(timeout = ?idle_timeout, "streaming connection idle too long; closing it");
            reader.abort();
            break;
        }
        tokio::select! {
            _ = &mut reader => break,
            () = tokio::time::sleep(left) => {}
        }
    }
    let _ = gone.send(true);
}

/// Pings the client every few seconds until the connection is gone: a
/// client that vanished makes the write fail, which ends the connection.
/// Server pings have even ids.
async fn ping(outbound: Outbound, mut gone: watch::Receiver<bool>) {
    let mut id = 0u32;
    loop {
        tokio::select! {
            () = tokio::time::sleep(PING_INTERVAL) => {}
            _ = gone.wait_for(|g| *g) => return,
        }
        id = id.wrapping_add(2);
        if outbound.tx.send(Out::Keepalive(id)).await.is_err() {
            return;
        }
    }
}

/// Queues `data` for a stream, waiting while the budget is spent unless
/// the connection goes; false when the session stopped reading the stream.
async fn queue(tx: &ChunkSender, data: Bytes, gone: &mut watch::Receiver<bool>) -> Option<bool> {
    tokio::select! {
        sent = tx.send(data) => Some(sent.is_ok()),
        _ = gone.wait_for(|g| *g) => None,
    }
}

async fn read_frames<R: AsyncRead + Unpin>(
    mut reader: R,
    outbound: Outbound,
    new_streams: mpsc::Sender<IncomingStream>,
    activity: Arc<Activity>,
    mut gone: watch::Receiver<bool>,
) {
    let mut headers = HeaderReader::new();
    let budget = Budget::new(CONNECTION_BUDGET);
    let mut open: HashMap<u32, ChunkSender> = HashMap::new();
    loop {
        let frame = match frame::read(&mut reader).await {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(error = %e, "streaming connection ended");
                return;
            }
        };
        activity.touch();
        match frame {
            Frame::SynStream { id, fin, block } => {
                let Ok(stream_headers) = headers.decompress(&block) else {
                    tracing::debug!("undecodable header block; closing the streaming connection");
                    return;
                };
                if open.len() >= MAX_STREAMS || open.contains_key(&id) {
                    let _ = outbound.reset(id, frame::RST_REFUSED_STREAM).await;
                    continue;
                }
                if outbound.tx.send(Out::Reply(id)).await.is_err() {
                    return;
                }
                let (tx, rx) = budget.stream();
                if !fin {
                    open.insert(id, tx);
                }
                if new_streams.send(IncomingStream { id, headers: stream_headers, data: rx }).await.is_err() {
                    // Nobody takes streams any more: the session is over.
                    let _ = outbound.reset(id, frame::RST_REFUSED_STREAM).await;
                }
            }
            Frame::SynReply { block, .. } | Frame::Headers { block, .. } => {
                // Never expected from a client, but its block is part of the zlib stream.
                if headers.decompress(&block).is_err() {
                    return;
                }
            }
            Frame::Data { id, fin, data } => {
                if let Some(tx) = open.get(&id) {
                    if !data.is_empty() {
                        match queue(tx, data, &mut gone).await {
                            Some(true) => {}
                            // Nobody reads that stream: what comes on it is dropped.
                            Some(false) => {
                                open.remove(&id);
                            }
                            None => return,
                        }
                    }
                }
                if fin {
                    open.remove(&id);
                }
            }
            Frame::RstStream { id } => {
                open.remove(&id);
            }
            // A client's pings (odd ids) are echoed; the answers to ours are not.
            Frame::Ping { id } if id % 2 == 1 => {
                if outbound.tx.send(Out::Ping(id)).await.is_err() {
                    return;
                }
            }
            Frame::Ping { .. } => {}
            Frame::GoAway => return,
            Frame::Ignored => {}
        }
    }
}

async fn write_frames<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut out: mpsc::Receiver<Out>,
    activity: Arc<Activity>,
    gone: Arc<watch::Sender<bool>>,
) {
    let Ok(mut headers) = HeaderWriter::new() else {
        let _ = gone.send(true);
        return;
    };
    let mut last_id = 0;
    while let Some(item) = out.recv().await {
        let mut active = !matches!(item, Out::Keepalive(_));
        let mut written = write_one(&mut writer, &mut headers, item, &mut last_id).await;
        // Batch what is already queued before flushing.
        while let (Ok(true), Ok(item)) = (&written, out.try_recv()) {
            active |= !matches!(item, Out::Keepalive(_));
            written = write_one(&mut writer, &mut headers, item, &mut last_id).await;
        }
        let done = match written {
            Ok(more) => writer.flush().await.is_err() || !more,
            Err(_) => true,
        };
        if active {
            activity.touch();
        }
        if done {
            break;
        }
    }
    let _ = writer.shutdown().await;
    let _ = gone.send(true);
}

/// Writes one frame; Ok(false) after GOAWAY (nothing more will be written).
async fn write_one<W: AsyncWrite + Unpin>(
    writer: &mut W,
    headers: &mut HeaderWriter,
    item: Out,
    last_id: &mut u32,
) -> std::io::Result<bool> {
    match item {
        Out::Reply(id) => {
            *last_id = (*last_id).max(id);
            let block = headers.compress(&Headers::default()).map_err(std::io::Error::other)?;
            writer.write_all(&frame::syn_reply(id, false, &block)).await?;
        }
        Out::Data(id, data, fin) => {
            writer.write_all(&frame::data_head(id, fin, data.len())).await?;
            writer.write_all(&data).await?;
        }
        Out::Reset(id, status) => writer.write_all(&frame::rst_stream(id, status)).await?,
        Out::Ping(id) | Out::Keepalive(id) => writer.write_all(&frame::ping(id)).await?,
        Out::GoAway => {
            writer.write_all(&frame::goaway(*last_id)).await?;
            return Ok(false);
        }
    }
    Ok(true)
}
