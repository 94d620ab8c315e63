//! A client's gRPC deadline (the `grpc-timeout` header) as a time budget:
//! for every call, a layer in front of the services answers
//! DeadlineExceeded a little before the gRPC server's own timer would
//! answer its bare Cancelled ("Timeout expired"); a call that enforces time
//! limits itself (ExecSync) ends its work within the same budget.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tonic::metadata::MetadataMap;

/// How much before the client's deadline a call gives up: a tenth of the
/// time, within these bounds, leaves room to end the work and answer before
/// the client's own timer fires.
const MIN_MARGIN: Duration = Duration::from_millis(50);
const MAX_MARGIN: Duration = Duration::from_secs(1);

/// The time left until the client's deadline, less a margin; `None` when
/// the client set none (or an unreadable one, which the server ignores too).
pub(crate) fn client_deadline(metadata: &MetadataMap) -> Option<Duration> {
    budget_of(metadata.get("grpc-timeout")?.to_str().ok()?)
}

fn budget_of(grpc_timeout: &str) -> Option<Duration> {
    let budget = parse_grpc_timeout(grpc_timeout)?;
    Some(budget.saturating_sub((budget / 10).clamp(MIN_MARGIN, MAX_MARGIN)))
}

/// The layer that answers every call past its client's deadline with
/// DeadlineExceeded, naming the call (the work of a call that must run to
/// its end goes on, `cri::detached`).
#[derive(Clone, Copy, Default)]
pub(crate) struct DeadlineLayer;

impl<S> tower::Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;
    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline { inner }
    }
}

#[derive(Clone)]
pub(crate) struct Deadline<S> {
    inner: S,
}

type Answer = http::Response<tonic::body::Body>;

impl<S, B> tower::Service<http::Request<B>> for Deadline<S>
where
    S: tower::Service<http::Request<B>, Response = Answer>,
    S::Future: Send + 'static,
{
    type Response = Answer;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let timeout = request.headers().get("grpc-timeout").and_then(|v| v.to_str().ok()).map(str::to_string);
        let budget = timeout.as_deref().and_then(budget_of);
        let answer = self.inner.call(request);
        let (Some(budget), Some(timeout)) = (budget, timeout) else { return Box::pin(answer) };
        Box::pin(async move {
            match tokio::time::timeout(budget, answer).await {
                Ok(answer) => answer,
                Err(_) => Ok(tonic::Status::deadline_exceeded(format!(
                    "the client's deadline (grpc-timeout {timeout}) passed before the call finished"
                ))
                .into_http()),
            }
        })
    }
}

/// The sooner of two optional limits.
pub(crate) fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `grpc-timeout`: at most 8 digits and a unit (gRPC over HTTP/2).
fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    if !value.is_ascii() {
        return None;
    }
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_as_the_protocol_says() {
        assert_eq!(parse_grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grpc_timeout("1500m"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_grpc_timeout("3H"), Some(Duration::from_secs(3 * 3600)));
        assert_eq!(parse_grpc_timeout("123456789S"), None);
        assert_eq!(parse_grpc_timeout("S"), None);
        assert_eq!(parse_grpc_timeout("5x"), None);
        assert_eq!(parse_grpc_timeout("5é"), None);
        assert_eq!(earliest(Some(Duration::from_secs(3)), Some(Duration::from_secs(1))), Some(Duration::from_secs(1)));
        assert_eq!(earliest(None, Some(Duration::from_secs(1))), Some(Duration::from_secs(1)));
    }
}
