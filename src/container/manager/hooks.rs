//! The OCI hooks on the daemon's side of a container's life: which apply
//! (at create: its CDI devices' hooks, then the definitions of the `[hooks]
//! dirs` that match it), poststart once
//! StartContainer's execve succeeded, and poststop once the container has
//! exited, before its resources go. A container with poststop hooks has a
//! marker in its directory from create until they ran, so one that exited
//! while the daemon was down gets them at the next start. Both stages'
//! failures are logged only; neither changes the container's outcome.

use std::path::PathBuf;

use crate::container::record::{ContainerPaths, ContainerRecord};
use crate::hooks::{ContainerFacts, ContainerHooks, Stage};
use crate::store;

use super::{ContainerError, Containers};

/// In a container's directory while its poststop hooks have yet to run.
const POSTSTOP_PENDING: &str = "poststop-pending";

fn marker(paths: &ContainerPaths) -> PathBuf {
    paths.dir.join(POSTSTOP_PENDING)
}

impl Containers {
    /// The hooks that apply to a container of this spec (the CRI config's
    /// mounts are the bind mounts `hasBindMounts` asks about) after those
    /// the spec carries already (its CDI devices'); puts them in the spec and
    /// marks the poststop ones pending.
    pub(super) fn apply_hooks(
        &self,
        oci: &mut oci_spec::runtime::Spec,
        config: &crate::api::ContainerConfig,
        paths: &ContainerPaths,
    ) -> Result<Option<ContainerHooks>, ContainerError> {
        let matching = {
            let none = std::collections::HashMap::new();
            let facts = ContainerFacts {
                annotations: oci.annotations().as_ref().unwrap_or(&none),
                command: oci
                    .process()
                    .as_ref()
                    .and_then(|p| p.args().as_ref())
                    .and_then(|a| a.first())
                    .map(String::as_str),
                has_bind_mounts: !config.mounts.is_empty(),
            };
            self.hooks.matching(&facts)
        };
        let Some(hooks) = crate::hooks::merged(oci.hooks().clone(), matching) else { return Ok(None) };
        oci.set_hooks(Some(hooks.clone()));
        let hooks = ContainerHooks { hooks, annotations: oci.annotations().clone().unwrap_or_default() };
        if hooks.has(Stage::Poststop) {
            store::write_atomic_with(&marker(paths), b"", 0o600, store::Durability::Durable)?;
        }
        Ok(Some(hooks))
    }

    /// The poststart hooks of a container just started (init `pid`).
    pub(super) async fn run_poststart(&self, record: &ContainerRecord, pid: Option<i32>) {
        let Some(hooks) = record.hooks.clone().filter(|h| h.has(Stage::Poststart)) else { return };
        let (id, bundle) = (record.id.clone(), self.paths(&record.id).dir);
        let ran = tokio::task::spawn_blocking(move || hooks.run(Stage::Poststart, &id, "running", pid, &bundle)).await;
        match ran {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(container_id = %record.id, error = %e, "poststart hook failed"),
            Err(e) => tracing::warn!(container_id = %record.id, error = %e, "poststart hooks did not run"),
        }
    }
}

/// Runs the poststop hooks of an exited container when they are pending
/// (only a container with poststop hooks looks for the marker), then
/// clears the marker.
pub(super) async fn poststop_if_pending(record: &ContainerRecord, paths: &ContainerPaths) {
    let Some(hooks) = record.hooks.clone().filter(|h| h.has(Stage::Poststop)) else { return };
    let marker = marker(paths);
    if !marker.exists() {
        return;
    }
    let (id, bundle) = (record.id.clone(), paths.dir.clone());
    let ran = tokio::task::spawn_blocking(move || hooks.run(Stage::Poststop, &id, "stopped", None, &bundle)).await;
    match ran {
        Ok(Ok(())) => tracing::debug!(container_id = %record.id, "poststop hooks ran"),
        Ok(Err(e)) => tracing::warn!(container_id = %record.id, error = %e, "poststop hook failed"),
        Err(e) => tracing::warn!(container_id = %record.id, error = %e, "poststop hooks did not run"),
    }
    if let Err(e) = std::fs::remove_file(&marker) {
        tracing::warn!(container_id = %record.id, error = %e, "cannot clear the poststop marker");
    }
}
