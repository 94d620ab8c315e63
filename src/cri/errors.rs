//! Domain errors → gRPC statuses, and the answer of RPCs nidus does not serve yet.

use tonic::Status;

use crate::image::ImageError;
use crate::pod::SandboxError;

/// The status of an RPC that is not implemented yet, naming it.
pub fn unimplemented(rpc: &str) -> Status {
    Status::unimplemented(format!("{rpc} is not implemented by nidus yet"))
}

pub fn invalid(field: &str, why: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("{field}: {why}"))
}

impl From<SandboxError> for Status {
    fn from(e: SandboxError) -> Self {
        match e {
            SandboxError::NotFound(_) => Status::not_found(e.to_string()),
            SandboxError::Ambiguous(_) => Status::invalid_argument(e.to_string()),
            SandboxError::NameInUse { .. } => Status::already_exists(e.to_string()),
            SandboxError::Io { .. } | SandboxError::Store(_) | SandboxError::Cgroup(_) | SandboxError::Launch(_) => {
                Status::internal(e.to_string())
            }
        }
    }
}

/// An image store error as a gRPC status; `field` names the request field
/// that held the image reference.
pub fn image_error(field: &str, e: ImageError) -> Status {
    match e {
        ImageError::NotFound(_) => Status::not_found(e.to_string()),
        ImageError::InvalidReference(_) | ImageError::Ambiguous(_) => invalid(field, e),
        ImageError::InvalidHolder(_) => Status::invalid_argument(e.to_string()),
        ImageError::BadContent(_)
        | ImageError::BadLayer { .. }
        | ImageError::BlobMissing(_)
        | ImageError::Io { .. } => Status::internal(e.to_string()),
    }
}
