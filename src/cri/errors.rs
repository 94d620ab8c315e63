//! Domain errors → gRPC statuses, and the answer of RPCs nidus does not serve yet.

use tonic::Status;

use crate::checkpoint::{CheckpointError, CriuError, LocationError};
use crate::container::confinement::ConfinementError;
use crate::container::exec::ExecError;
use crate::container::{ContainerError, ImageSourceError};
use crate::image::ImageError;
use crate::monitor::control::ControlError;
use crate::network::builtin::hostport::HostPortError;
use crate::network::builtin::leases::LeaseError;
use crate::network::builtin::BuiltinError;
use crate::network::NetworkError;
use crate::pod::SandboxError;
use crate::runtime::PodError;

pub(crate) fn invalid(field: &str, why: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("{field}: {why}"))
}

impl From<SandboxError> for Status {
    fn from(e: SandboxError) -> Self {
        match e {
            SandboxError::NotFound(_) => Status::not_found(e.to_string()),
            SandboxError::Ambiguous(_) | SandboxError::Invalid(_) => Status::invalid_argument(e.to_string()),
            SandboxError::Precondition(_) => Status::failed_precondition(e.to_string()),
            SandboxError::NameInUse { .. } => Status::already_exists(e.to_string()),
            SandboxError::Network(network) => network_status(network),
            SandboxError::Io { .. } | SandboxError::Store(_) | SandboxError::Cgroup(_) | SandboxError::Launch(_) => {
                Status::internal(e.to_string())
            }
        }
    }
}

fn network_status(e: NetworkError) -> Status {
    let message = e.to_string();
    match e {
        NetworkError::Invalid(_)
        | NetworkError::Builtin(BuiltinError::HostPort(
            HostPortError::NoAddress { .. } | HostPortError::Protocol { .. },
        )) => Status::invalid_argument(message),
        NetworkError::Builtin(BuiltinError::HostPort(HostPortError::InUse { .. })) => Status::already_exists(message),
        NetworkError::Builtin(BuiltinError::Lease(LeaseError::Exhausted(_))) => Status::resource_exhausted(message),
        NetworkError::NotReady(_) => Status::failed_precondition(message),
        _ => Status::internal(message),
    }
}

impl From<ContainerError> for Status {
    fn from(e: ContainerError) -> Self {
        let message = e.to_string();
        match e {
            ContainerError::NotFound(_)
            | ContainerError::Image(ImageSourceError::NotFound(_))
            | ContainerError::Confinement(ConfinementError::Missing { .. }) => Status::not_found(message),
            ContainerError::Ambiguous(_)
            | ContainerError::Invalid(_)
            | ContainerError::Image(ImageSourceError::Invalid(_))
            | ContainerError::Confinement(ConfinementError::Invalid { .. }) => Status::invalid_argument(message),
            ContainerError::NameInUse { .. } => Status::already_exists(message),
            ContainerError::Precondition(_) => Status::failed_precondition(message),
            ContainerError::Checkpoint(e) => checkpoint_status(e, message),
            ContainerError::Exec(ExecError::Timeout(_)) => Status::deadline_exceeded(message),
            ContainerError::Start(_)
            | ContainerError::Exec(ExecError::CannotStart(_))
            | ContainerError::Control(ControlError::Refused(_)) => Status::unknown(message),
            ContainerError::Image(ImageSourceError::Failed(_))
            | ContainerError::Io { .. }
            | ContainerError::Store(_)
            | ContainerError::Cgroup(_)
            | ContainerError::Build(_)
            | ContainerError::Exec(ExecError::Helper { .. })
            | ContainerError::Control(ControlError::Unreachable { .. }) => Status::internal(message),
        }
    }
}

fn checkpoint_status(e: CheckpointError, message: String) -> Status {
    match e {
        CheckpointError::Criu(CriuError::Timeout { .. }) => Status::deadline_exceeded(message),
        CheckpointError::Criu(CriuError::Missing(_) | CriuError::TooOld { .. }) => Status::failed_precondition(message),
        CheckpointError::Location(LocationError::Exists(_)) => Status::already_exists(message),
        CheckpointError::Location(
            LocationError::Invalid(_)
            | LocationError::Symlink { .. }
            | LocationError::NotDirectory { .. }
            | LocationError::KernelFilesystem { .. },
        ) => Status::invalid_argument(message),
        CheckpointError::Archive { .. } => Status::invalid_argument(message),
        CheckpointError::Location(LocationError::Io { .. })
        | CheckpointError::Criu(CriuError::Failed { .. } | CriuError::Spawn { .. }) => Status::internal(message),
    }
}

impl From<PodError> for Status {
    fn from(e: PodError) -> Self {
        match e {
            PodError::Sandbox(e) => e.into(),
            PodError::Container(e) => e.into(),
        }
    }
}

/// An image store error as a gRPC status; `field` names the request field
/// that held the image reference.
pub(crate) fn image_error(field: &str, e: ImageError) -> Status {
    match e {
        ImageError::NotFound(_) => Status::not_found(e.to_string()),
        ImageError::InvalidReference(_) | ImageError::Ambiguous(_) => invalid(field, e),
        ImageError::InvalidHolder(_) => Status::invalid_argument(e.to_string()),
        ImageError::MountedBy { .. } => Status::failed_precondition(e.to_string()),
        ImageError::BadContent(_)
        | ImageError::BadLayer { .. }
        | ImageError::BlobMissing(_)
        | ImageError::Io { .. } => Status::internal(e.to_string()),
    }
}

/// A failed pull → its gRPC status (kubelet shows the message in ErrImagePull).
pub(crate) fn pull_status(e: crate::image::pull::PullError) -> Status {
    use crate::image::pull::PullError;
    let message = e.to_string();
    match e {
        PullError::InvalidReference(_) => invalid("image.image", message),
        PullError::NotFound { .. } | PullError::NoPlatform { .. } => Status::not_found(message),
        PullError::Unauthorized { .. } => Status::permission_denied(message),
        PullError::Stalled { .. } | PullError::TooSlow { .. } => Status::deadline_exceeded(message),
        PullError::Refused { .. } => Status::failed_precondition(message),
        PullError::Cancelled { .. } => Status::cancelled(message),
        PullError::Registry { .. } => Status::unavailable(message),
        PullError::BadContent { .. } => Status::data_loss(message),
        PullError::Store { .. } | PullError::Internal(_) => Status::internal(message),
    }
}
