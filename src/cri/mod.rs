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
pub mod pod_checkpoint;
mod runtime_service;
mod state;
mod stats;
mod streaming;
mod v1alpha2;
pub(crate) mod validate;

pub use image_service::ImageApi;
pub use runtime_service::RuntimeApi;
pub use state::Daemon;
pub use v1alpha2::{ImageApiV1alpha2, RuntimeApiV1alpha2};

pub use authority::{AuthorityNormalizer, NormalizeError, NormalizedStream, MAX_HEADER_LIST};
pub use deadline::DeadlineLayer;
pub use events::Subject;
pub use instrument::InstrumentLayer;
pub use message_cap::{cap_status_message, MAX_STATUS_MESSAGE};

use crate::config::GrpcSettings;

/// The connections accepted on the CRI socket, each read through the layer
/// that accepts any `:authority` a local client sends (see [`authority`]).
pub fn normalized_connections(
    listener: tokio::net::UnixListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<NormalizedStream<tokio::net::UnixStream>>> {
    use tokio_stream::StreamExt;
    tokio_stream::wrappers::UnixListenerStream::new(listener).map(|accepted| accepted.map(NormalizedStream::new))
}

/// The CRI API version `Version` reports through runtime.v1.
pub const CRI_API_VERSION: &str = "v1";
/// The CRI API version `Version` reports through runtime.v1alpha2.
pub const CRI_V1ALPHA2_API_VERSION: &str = "v1alpha2";

/// The CRI APIs (protobuf packages) a daemon with this config serves.
pub fn served_apis(grpc: &GrpcSettings) -> Vec<&'static str> {
    let mut apis = vec!["runtime.v1"];
    if grpc.serve_v1alpha2 {
        apis.push("runtime.v1alpha2");
    }
    apis
}
