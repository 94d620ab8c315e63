//! One span and one outcome line per CRI call, of either API version: the
//! outermost layer in front of the services opens a span named `cri` with the
//! call's name and API, which the handler fills with the pod or container id
//! it reads (`validate::id` records them) and which work spawned for the call
//! keeps (`detached`); when the answer is ready it logs the call's gRPC code
//! and time, at debug for OK and at warn, with the status's message, for any
//! other code. A streaming call's line is logged when its stream opens.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use tracing::field::Empty;
use tracing::Instrument;

use crate::metrics::Metrics;

/// The span fields a handler may record: the `validate::id` field names
/// they stand for, and their names in the span.
const ID_FIELDS: [(&str, &str); 2] = [("pod_sandbox_id", "pod_id"), ("container_id", "container_id")];

/// Records `value` as the current call's pod or container id when `field`
/// names one.
pub(crate) fn record_id(field: &str, value: &str) {
    if let Some((_, name)) = ID_FIELDS.iter().find(|(f, _)| *f == field) {
        tracing::Span::current().record(*name, tracing::field::display(value));
    }
}

/// The layer; `metrics` counts each call and records its time by call and code.
#[derive(Clone, Default)]
pub(crate) struct InstrumentLayer {
    pub(crate) metrics: Metrics,
}

impl<S> tower::Layer<S> for InstrumentLayer {
    type Service = Instrumented<S>;
    fn layer(&self, inner: S) -> Instrumented<S> {
        Instrumented { inner, metrics: self.metrics.clone() }
    }
}

#[derive(Clone)]
pub(crate) struct Instrumented<S> {
    inner: S,
    metrics: Metrics,
}

type Answer = http::Response<tonic::body::Body>;

impl<S, B> tower::Service<http::Request<B>> for Instrumented<S>
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
        // The label is looked up only when metrics are recorded.
        let label = self.metrics.is_on().then(|| crate::metrics::call_label(request.uri().path()));
        let (api, call) = call_of(request.uri().path());
        let span = tracing::info_span!("cri", call = %call, api = %api, pod_id = Empty, container_id = Empty);
        let started = Instant::now();
        let answer = {
            let _entered = span.enter();
            self.inner.call(request)
        };
        let metrics = self.metrics.clone();
        Box::pin(
            async move {
                let answer = answer.await;
                let elapsed = started.elapsed();
                let elapsed_us = elapsed.as_micros() as u64;
                let code = match &answer {
                    Ok(response) => match tonic::Status::from_header_map(response.headers()) {
                        Some(status) if status.code() != tonic::Code::Ok => {
                            tracing::warn!(code = ?status.code(), elapsed_us, reason = %status.message(), "call failed");
                            status.code()
                        }
                        _ => {
                            tracing::debug!(elapsed_us, "call answered");
                            tonic::Code::Ok
                        }
                    },
                    Err(_) => {
                        tracing::warn!(elapsed_us, "call failed in the transport");
                        tonic::Code::Unknown
                    }
                };
                if let Some(label) = label {
                    metrics.call_answered(label, code, elapsed);
                }
                answer
            }
            .instrument(span),
        )
    }
}

/// `/runtime.v1.RuntimeService/CreateContainer` → (`runtime.v1`, `CreateContainer`).
fn call_of(path: &str) -> (&str, &str) {
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let service = parts.next().unwrap_or_default();
    let call = parts.next().unwrap_or(service);
    let api = service.rsplit_once('.').map_or(service, |(api, _)| api);
    (api, call)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_names_its_api_and_call() {
        assert_eq!(call_of("/runtime.v1.RuntimeService/CreateContainer"), ("runtime.v1", "CreateContainer"));
        assert_eq!(call_of("/runtime.v1alpha2.ImageService/PullImage"), ("runtime.v1alpha2", "PullImage"));
        assert_eq!(call_of("/odd"), ("odd", "odd"));
        assert_eq!(call_of(""), ("", ""));
    }
}
