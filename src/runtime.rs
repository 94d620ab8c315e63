//! Operations that span a pod and its containers: stopping a pod stops its
//! containers first (their monitors record their exits) and then its pause;
//! removing a pod removes its containers, then the sandbox.

use std::time::Duration;

use crate::container::{ContainerError, Containers};
use crate::pod::{SandboxError, Sandboxes};

#[derive(Debug, thiserror::Error)]
pub(crate) enum PodError {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error(transparent)]
    Container(#[from] ContainerError),
}

/// StopPodSandbox: every container of the pod is killed (kubelet has already
/// stopped them gracefully), then the sandbox.
pub(crate) async fn stop_pod(sandboxes: &Sandboxes, containers: &Containers, id: &str) -> Result<(), PodError> {
    let id = match sandboxes.resolve(id) {
        Ok(id) => id,
        Err(SandboxError::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for container in containers.in_sandbox(&id) {
        containers.stop(&container, Duration::ZERO).await?;
    }
    Ok(sandboxes.stop(&id).await?)
}

/// RemovePodSandbox: the pod's containers, then the sandbox; an unknown pod
/// is already removed.
pub(crate) async fn remove_pod(sandboxes: &Sandboxes, containers: &Containers, id: &str) -> Result<(), PodError> {
    let id = match sandboxes.resolve(id) {
        Ok(id) => id,
        Err(SandboxError::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for container in containers.in_sandbox(&id) {
        containers.remove(&container).await?;
    }
    Ok(sandboxes.remove(&id).await?)
}
