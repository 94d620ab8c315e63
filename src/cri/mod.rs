//! The CRI gRPC services (runtime.v1 RuntimeService and ImageService): they
//! validate requests, map CRI messages to nidus's domain types and back, and
//! turn domain errors into gRPC statuses. No lifecycle logic lives here.

mod convert;
mod errors;
mod image_service;
mod runtime_service;
mod validate;

pub use image_service::ImageApi;
pub use runtime_service::RuntimeApi;

/// The CRI API version this server speaks.
pub const CRI_API_VERSION: &str = "v1";
