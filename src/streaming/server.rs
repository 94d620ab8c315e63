//! The streaming HTTP/1.1 server (hyper): `/exec/TOKEN`, `/attach/TOKEN`
//! and `/portforward/TOKEN` upgraded to SPDY/3.1 or a WebSocket, the
//! subprotocol negotiated from the client's `X-Stream-Protocol-Version` or
//! `Sec-WebSocket-Protocol` headers (the client's first choice we speak), a
//! cap on open sessions, then the session.

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{
    HeaderValue, CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_PROTOCOL, UPGRADE,
};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;

use super::spdy::Connection;
use super::{portforward, remotecommand, websocket, Pending, Shared};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

const PROTOCOL_HEADER: &str = "x-stream-protocol-version";

/// How long a client may take over its TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a request (line and headers) read before it is refused.
const MAX_REQUEST_BYTES: usize = 64 << 10;

pub(super) fn spawn_accept_loop(listener: TcpListener, tls: Option<TlsAcceptor>, shared: Arc<Shared>) {
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "streaming server: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            // Past the cap a connection is closed at once: it costs a
            // descriptor for no longer than this.
            let Ok(permit) = shared.connections.clone().try_acquire_owned() else {
                tracing::debug!(peer = %peer, "too many streaming connections; closing a new one");
                drop(tcp);
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let (shared, tls) = (shared.clone(), tls.clone());
            tokio::spawn(async move {
                match tls {
                    None => serve_http(tcp, shared, peer, permit).await,
                    Some(acceptor) => match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => serve_http(stream, shared, peer, permit).await,
                        Ok(Err(e)) => tracing::debug!(peer = %peer, error = %e, "streaming TLS handshake failed"),
                        Err(_) => tracing::debug!(peer = %peer, "streaming TLS handshake timed out"),
                    },
                }
            });
        }
    });
}

/// Serves one connection: its request, which must come whole within the
/// request timeout; an upgrade then runs as a session of its own and the
/// connection's permit goes. Any other answer closes the connection.
async fn serve_http<IO>(io: IO, shared: Arc<Shared>, peer: std::net::SocketAddr, permit: OwnedSemaphorePermit)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let request_timeout = shared.request_timeout;
    let service = hyper::service::service_fn(move |request| {
        let shared = shared.clone();
        async move { Ok::<_, std::convert::Infallible>(route(request, shared)) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(request_timeout)
        .max_buf_size(MAX_REQUEST_BYTES)
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    // The header timeout starts with the first byte: a client that sends
    // nothing at all is cut here.
    match tokio::time::timeout(request_timeout + Duration::from_secs(1), connection).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(peer = %peer, error = %e, "streaming connection ended with an error"),
        Err(_) => tracing::debug!(peer = %peer, "streaming connection sent no request in time; closed"),
    }
    drop(permit);
}

/// An answer that is not an upgrade; the connection closes after it.
fn plain(status: StatusCode, message: impl Into<String>) -> Response<String> {
    let mut response = Response::new(message.into());
    *response.status_mut() = status;
    response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The protocols a client offers in every `name` header (also comma-separated).
fn offered_protocols(request: &Request<Incoming>, name: impl hyper::header::AsHeaderName) -> Vec<String> {
    request
        .headers()
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// True when a `name` header lists `token` (case-insensitive, comma lists).
fn header_has(request: &Request<Incoming>, name: impl hyper::header::AsHeaderName, token: &str) -> bool {
    request
        .headers()
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|part| part.trim().eq_ignore_ascii_case(token)))
}

/// How the client wants to talk.
enum Transport {
    Spdy,
    /// A WebSocket, with the client's `Sec-WebSocket-Key`.
    WebSocket(String),
}

fn transport_of(request: &Request<Incoming>) -> Option<Transport> {
    if !header_has(request, CONNECTION, "upgrade") {
        return None;
    }
    if header_has(request, UPGRADE, "spdy/3.1") {
        return Some(Transport::Spdy);
    }
    let key = request.headers().get(SEC_WEBSOCKET_KEY).and_then(|k| k.to_str().ok())?;
    header_has(request, UPGRADE, "websocket").then(|| Transport::WebSocket(key.to_string()))
}

fn route(request: Request<Incoming>, shared: Arc<Shared>) -> Response<String> {
    let path = request.uri().path().to_string();
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let (Some(kind), Some(token)) = (parts.next(), parts.next()) else {
        return plain(StatusCode::NOT_FOUND, "not found\n");
    };
    if !matches!(kind, "exec" | "attach" | "portforward") {
        return plain(StatusCode::NOT_FOUND, "not found\n");
    }
    let Some(transport) = transport_of(&request) else {
        return plain(StatusCode::BAD_REQUEST, "this endpoint needs an upgrade to SPDY/3.1 or a WebSocket\n");
    };
    let served: &[&str] = match (kind, &transport) {
        ("exec" | "attach", _) => &remotecommand::PROTOCOLS,
        (_, Transport::Spdy) => &[portforward::PROTOCOL],
        (_, Transport::WebSocket(_)) => &[websocket::TUNNEL_PROTOCOL],
    };
    let offered = match transport {
        Transport::Spdy => offered_protocols(&request, PROTOCOL_HEADER),
        Transport::WebSocket(_) => offered_protocols(&request, SEC_WEBSOCKET_PROTOCOL),
    };
    let protocol = if offered.is_empty() {
        // Clients older than protocol negotiation speak the first version.
        None
    } else {
        match offered.iter().find(|p| served.contains(&p.as_str())) {
            Some(p) => Some(p.clone()),
            None => {
                return plain(
                    StatusCode::FORBIDDEN,
                    format!("unable to upgrade: no common protocol; this server speaks {}\n", served.join(", ")),
                )
            }
        }
    };
    // A request refused up to here, for another endpoint, or for the
    // session cap, leaves the token for a retry.
    if !shared.tokens.has(token, |p| p.endpoint() == kind) {
        return plain(StatusCode::NOT_FOUND, "unknown or expired session token\n");
    }
    let Ok(permit) = shared.sessions.clone().try_acquire_owned() else {
        return plain(StatusCode::TOO_MANY_REQUESTS, "too many streaming sessions; try again later\n");
    };
    let Some(pending) = shared.tokens.take_if(token, |p| p.endpoint() == kind) else {
        return plain(StatusCode::NOT_FOUND, "unknown or expired session token\n");
    };
    let idle = shared.idle_timeout;
    let open = shared.metrics.session_begun(kind_label(kind));
    let session_protocol = protocol.clone().unwrap_or_default();
    let websocket = matches!(transport, Transport::WebSocket(_));
    tokio::spawn(async move {
        let upgraded = match hyper::upgrade::on(request).await {
            Ok(upgraded) => upgraded,
            Err(e) => {
                tracing::debug!(error = %e, "streaming upgrade failed");
                return;
            }
        };
        match (pending, websocket) {
            (Pending::Exec { launch, stdio }, false) => {
                let conn = Connection::serve(TokioIo::new(upgraded), idle);
                remotecommand::serve(conn, session_protocol, launch, stdio).await
            }
            (Pending::Exec { launch, stdio }, true) => {
                let conn = websocket::channel_connection(websocket::accept(upgraded).await, stdio, idle);
                remotecommand::serve(conn, session_protocol, launch, stdio).await
            }
            (Pending::Attach { launch, stdio }, false) => {
                let conn = Connection::serve(TokioIo::new(upgraded), idle);
                super::attach::serve(conn, session_protocol, launch, stdio).await
            }
            (Pending::Attach { launch, stdio }, true) => {
                let conn = websocket::channel_connection(websocket::accept(upgraded).await, stdio, idle);
                super::attach::serve(conn, session_protocol, launch, stdio).await
            }
            (Pending::PortForward(network), false) => {
                portforward::serve(Connection::serve(TokioIo::new(upgraded), idle), network).await
            }
            (Pending::PortForward(network), true) => {
                portforward::serve(websocket::tunnel(websocket::accept(upgraded).await, idle), network).await
            }
        }
        drop((permit, open));
    });
    let mut response = Response::new(String::new());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    let protocol = protocol.and_then(|p| HeaderValue::from_str(&p).ok());
    match transport {
        Transport::Spdy => {
            headers.insert(UPGRADE, HeaderValue::from_static("SPDY/3.1"));
            if let Some(value) = protocol {
                headers.insert(PROTOCOL_HEADER, value);
            }
        }
        Transport::WebSocket(key) => {
            headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
            if let Ok(accept) = HeaderValue::from_str(&derive_accept_key(key.as_bytes())) {
                headers.insert(SEC_WEBSOCKET_ACCEPT, accept);
            }
            if let Some(value) = protocol {
                headers.insert(SEC_WEBSOCKET_PROTOCOL, value);
            }
        }
    }
    response
}

pub(super) type Sessions = Arc<Semaphore>;

/// The metrics label of an endpoint (a fixed set).
fn kind_label(endpoint: &str) -> &'static str {
    match endpoint {
        "exec" => "exec",
        "attach" => "attach",
        _ => "portforward",
    }
}
