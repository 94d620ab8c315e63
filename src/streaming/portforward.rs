//! portforward.k8s.io over SPDY: for each forwarded connection the client
//! opens an error and a data stream carrying the same `port` and
//! `requestID` headers; once both are there, a TCP connection to
//! localhost:PORT is made inside the pod's network namespace and bytes flow
//! both ways until each side has closed. A failed connection is reported on
//! that pair's error stream; the session goes on.

use std::collections::HashMap;
use std::fs::File;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

use super::spdy::{Connection, IncomingStream, Outbound};

pub(crate) const PROTOCOL: &str = "portforward.k8s.io";

/// How long a connection to the pod's port may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most pairs waiting for their second stream.
const MAX_HALF_PAIRS: usize = 1024;

/// The pod's network namespace, opened when the session starts.
pub(crate) struct PodNetwork {
    pub(crate) pod_id: String,
    pub(crate) netns: File,
}

#[derive(Default)]
struct HalfPair {
    data: Option<IncomingStream>,
    error: Option<IncomingStream>,
}

/// Runs one port-forward session on `conn` until the client leaves.
pub(crate) async fn serve(mut conn: Connection, network: PodNetwork) {
    let network = Arc::new(network);
    let mut waiting: HashMap<String, HalfPair> = HashMap::new();
    let mut forwards = JoinSet::new();
    let mut gone = conn.gone.clone();
    loop {
        let stream = tokio::select! {
            stream = conn.streams.recv() => stream,
            _ = gone.wait_for(|g| *g) => None,
            Some(_) = forwards.join_next(), if !forwards.is_empty() => continue,
        };
        let Some(stream) = stream else { break };
        let kind = stream.headers.get("streamtype").unwrap_or_default().to_ascii_lowercase();
        let Some(key) = pair_key(&stream, &kind) else {
            let _ = conn.outbound.reset(stream.id, super::spdy::frame::RST_PROTOCOL_ERROR).await;
            continue;
        };
        if !waiting.contains_key(&key) && waiting.len() >= MAX_HALF_PAIRS {
            let _ = conn.outbound.reset(stream.id, super::spdy::frame::RST_REFUSED_STREAM).await;
            continue;
        }
        let half = waiting.entry(key.clone()).or_default();
        if kind == "data" {
            half.data = Some(stream);
        } else {
            // The client sends nothing to read on its error stream.
            let mut stream = stream;
            stream.data.close();
            half.error = Some(stream);
        }
        if half.data.is_some() && half.error.is_some() {
            if let Some(HalfPair { data: Some(data), error: Some(error) }) = waiting.remove(&key) {
                forwards.spawn(forward(data, error, conn.outbound.clone(), network.clone()));
            }
        }
    }
    // Dropping the set ends every forward still running.
    drop(forwards);
    let _ = conn.outbound.go_away().await;
    conn.flush(Duration::from_secs(2)).await;
}

/// The pair a stream belongs to: its requestID; old clients send none, and
/// open the error stream right before the data stream (ids two apart).
fn pair_key(stream: &IncomingStream, kind: &str) -> Option<String> {
    if let Some(id) = stream.headers.get("requestid") {
        return Some(format!("r{id}"));
    }
    match kind {
        "error" => Some(format!("s{}", stream.id)),
        "data" => Some(format!("s{}", stream.id.checked_sub(2)?)),
        _ => None,
    }
}

async fn forward(data: IncomingStream, error: IncomingStream, outbound: Outbound, network: Arc<PodNetwork>) {
    let (data_id, error_id) = (data.id, error.id);
    let port = data.headers.get("port").and_then(|p| p.parse::<u16>().ok()).filter(|p| *p > 0);
    let result = match port {
        Some(port) => connect(&network, port).await,
        None => {
            Err(format!("invalid port header {}", crate::quote::quote(data.headers.get("port").unwrap_or_default())))
        }
    };
    match result {
        Ok(tcp) => {
            copy_both_ways(tcp, data, &outbound).await;
        }
        Err(why) => {
            let message = format!(
                "error forwarding port {} to pod {}: {why}",
                port.map_or_else(|| "?".to_string(), |p| p.to_string()),
                network.pod_id
            );
            tracing::info!(pod_id = %network.pod_id, "{message}");
            let _ = outbound.data(error_id, message.as_bytes()).await;
            let _ = outbound.finish(data_id).await;
        }
    }
    let _ = outbound.finish(error_id).await;
    drop(error);
}

/// A connection to localhost:`port` in the pod (IPv4, then IPv6).
async fn connect(network: &Arc<PodNetwork>, port: u16) -> Result<tokio::net::TcpStream, String> {
    let network = network.clone();
    let connected = tokio::task::spawn_blocking(move || {
        let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
        crate::linux::netns_connect::connect_in(&network.netns, v4, CONNECT_TIMEOUT).or_else(|v4_error| {
            crate::linux::netns_connect::connect_in(&network.netns, v6, CONNECT_TIMEOUT).map_err(|_| v4_error)
        })
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("connecting to localhost:{port}: {e}"))?;
    connected.set_nonblocking(true).map_err(|e| e.to_string())?;
    tokio::net::TcpStream::from_std(connected).map_err(|e| e.to_string())
}

/// Client to pod until the client half-closes; pod to client until the pod
/// closes, which ends the pair (as kubelet's runtimes do: the client waits
/// for the error stream's end before it closes its side).
async fn copy_both_ways(tcp: tokio::net::TcpStream, mut data: IncomingStream, outbound: &Outbound) {
    let id = data.id;
    let (mut from_pod, mut to_pod) = tcp.into_split();
    let inbound = tokio::spawn(async move {
        while let Some(chunk) = data.data.recv().await {
            if to_pod.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to_pod.shutdown().await;
    });
    let mut buf = vec![0u8; 32 << 10];
    loop {
        match from_pod.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if outbound.data(id, &buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    }
    inbound.abort();
    let _ = outbound.finish(id).await;
}
