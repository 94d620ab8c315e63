//! The CRI gRPC services (RuntimeService and ImageService of runtime.v1, and
//! of runtime.v1alpha2 through the same code): they validate requests, map CRI
//! messages to nidus's domain types and back, and turn domain errors into gRPC
//! statuses. No lifecycle logic lives here.

mod authority;
pub(crate) mod convert;
mod deadline;
mod detached;
mod errors;
mod events;
mod image_service;
mod instrument;
mod message_cap;
pub(crate) mod pod_checkpoint;
mod runtime_service;
mod state;
mod stats;
mod streaming;
mod v1alpha2;
pub(crate) mod validate;

pub(crate) use image_service::ImageApi;
pub(crate) use runtime_service::RuntimeApi;
pub(crate) use state::Daemon;
pub(crate) use v1alpha2::{ImageApiV1alpha2, RuntimeApiV1alpha2};

pub use authority::{AuthorityNormalizer, NormalizeError};
pub(crate) use authority::{NormalizedStream, MAX_HEADER_LIST};
pub(crate) use deadline::DeadlineLayer;
pub(crate) use events::Subject;
pub(crate) use instrument::InstrumentLayer;
pub(crate) use message_cap::cap_status_message;
pub use message_cap::MAX_STATUS_MESSAGE;

use crate::config::GrpcSettings;

/// The connections accepted on the CRI socket, each read through the layer
/// that accepts any `:authority` a local client sends (see [`authority`]).
pub(crate) fn normalized_connections(
    listener: tokio::net::UnixListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<NormalizedStream<tokio::net::UnixStream>>> {
    use tokio_stream::StreamExt;
    tokio_stream::wrappers::UnixListenerStream::new(listener).map(|accepted| accepted.map(NormalizedStream::new))
}

/// The CRI API version `Version` reports through runtime.v1.
pub(crate) const CRI_API_VERSION: &str = "v1";
/// The CRI API version `Version` reports through runtime.v1alpha2.
pub(crate) const CRI_V1ALPHA2_API_VERSION: &str = "v1alpha2";

/// The CRI APIs (protobuf packages) a daemon with this config serves.
pub(crate) fn served_apis(grpc: &GrpcSettings) -> Vec<&'static str> {
    let mut apis = vec!["runtime.v1"];
    if grpc.serve_v1alpha2 {
        apis.push("runtime.v1alpha2");
    }
    apis
}
