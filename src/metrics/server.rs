//! The `/metrics` endpoint: HTTP/1.1 GET of the series as OpenMetrics
//! text, on the configured address. Bounded: a fixed number of connections
//! at once (more are closed at once), a request that must come whole within
//! a few seconds, and one request per connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::{Metrics, StateCounts};

/// How long a client may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The most of a request (line and headers) read before it is refused.
const MAX_REQUEST_BYTES: usize = 16 << 10;
const CONTENT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What a scrape reads from the daemon: pods and containers by state.
pub(crate) type States = Arc<dyn Fn() -> StateCounts + Send + Sync>;

/// Binds `address` and serves `/metrics` from `metrics` in the background.
pub(crate) async fn start(
    address: SocketAddr,
    max_connections: usize,
    metrics: Metrics,
    states: States,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(address).await?;
    let local = listener.local_addr()?;
    let connections = Arc::new(Semaphore::new(max_connections.max(1)));
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics endpoint: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(permit) = connections.clone().try_acquire_owned() else {
                tracing::debug!(peer = %peer, "too many metrics connections; closing a new one");
                continue;
            };
            let (metrics, states) = (metrics.clone(), states.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let (metrics, states) = (metrics.clone(), states.clone());
                    async move {
                        // Reading the pods and containers takes their locks: off the async threads.
                        let answer = tokio::task::spawn_blocking(move || answer(&request, &metrics, &states)).await;
                        Ok::<_, std::convert::Infallible>(answer.unwrap_or_else(|_| {
                            let mut failed = Response::new("the scrape failed\n".to_string());
                            *failed.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                            failed
                        }))
                    }
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(REQUEST_TIMEOUT)
                    .max_buf_size(MAX_REQUEST_BYTES)
                    .keep_alive(false)
                    .serve_connection(TokioIo::new(tcp), service);
                // A client that sends nothing, or reads nothing, is cut here.
                if tokio::time::timeout(REQUEST_TIMEOUT * 2, connection).await.is_err() {
                    tracing::debug!(peer = %peer, "metrics connection took too long; closed");
                }
                drop(permit);
            });
        }
    });
    tracing::info!(address = %local, "metrics endpoint listening");
    Ok(local)
}

fn answer(request: &Request<Incoming>, metrics: &Metrics, states: &States) -> Response<String> {
    let reply = |status: StatusCode, body: String| {
        let mut response = Response::new(body);
        *response.status_mut() = status;
        response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
        response
    };
    if request.uri().path() != "/metrics" {
        return reply(StatusCode::NOT_FOUND, "not found; the metrics are at /metrics\n".into());
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "only GET\n".into());
    }
    let mut response = reply(StatusCode::OK, metrics.render(&states()));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(CONTENT));
    response
}
