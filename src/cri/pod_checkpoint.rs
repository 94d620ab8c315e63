//! CheckpointPod and RestorePod (KEP-5823): a pod's containers checkpointed
//! one by one into a staging directory, then written with the pod's config
//! as one archive (`checkpoint::pod_archive`); and the pod made again from
//! one: a new sandbox with the archived (or the request's) config, each
//! container restored through CreateContainer and started, in order. Both
//! are whole or nothing: a refusal or a failure part way leaves no archive
//! and no pod, and so does a crash (the archive is written nameless until
//! complete; a restore names its pod before making it, and the next start
//! removes that pod). Staging directories live under
//! `<root>/pod-checkpoints`, emptied at every start.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tonic::Status;

use crate::api::*;
use crate::checkpoint::location::{self, Location};
use crate::checkpoint::pod_archive::{self, ContainerEntry, PodFacts, PodManifest};
use crate::container::{ContainerState, Containers};
use crate::cri::Daemon;
use crate::pod::{SandboxState, Sandboxes};
use crate::store;

use super::errors::invalid;
use super::validate;

/// Below the daemon's root: the staging directories of pod checkpoints and restores.
pub(crate) const STAGING: &str = "pod-checkpoints";

/// What the archive says of the dumps' consistency.
const CONSISTENCY: &str =
    "per-container: each container is frozen while CRIU dumps it and then goes on; the pod is not frozen as a whole";

/// In a restore's staging directory: the name key of the pod it makes,
/// written before the pod is.
const RESTORING: &str = "restoring";

/// Removes what an interrupted CheckpointPod or RestorePod left (at start,
/// after the records are read): the pods of restores that never answered,
/// then every staging directory.
pub(crate) async fn remove_abandoned(root: &Path, sandboxes: &Sandboxes, containers: &Containers) {
    let dir = root.join(STAGING);
    if !dir.exists() {
        return;
    }
    for staging in store::list_records(&dir).unwrap_or_default() {
        let marker = dir.join(&staging).join(RESTORING);
        let Ok(name_key) = std::fs::read_to_string(&marker) else {
            continue;
        };
        for pod in sandboxes.list().iter().filter(|p| p.record.name_key == name_key) {
            tracing::warn!(pod_id = %pod.record.id, "removing the pod of a RestorePod interrupted by a crash");
            if let Err(e) = crate::runtime::remove_pod(sandboxes, containers, &pod.record.id).await {
                tracing::error!(pod_id = %pod.record.id, error = %e, "cannot remove the pod of an interrupted RestorePod");
            }
        }
    }
    if let Err(e) = store::remove_tree(&dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot remove abandoned pod checkpoint staging");
    }
}

/// A staging directory of its own, removed when dropped.
struct Staging(PathBuf);

impl Staging {
    fn new(root: &Path) -> Result<Self, Status> {
        let dir = root.join(STAGING).join(crate::ids::new_id());
        store::create_dir_all(&dir, 0o700)
            .map_err(|e| Status::internal(format!("cannot create {}: {e}", dir.display())))?;
        Ok(Self(dir))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = store::remove_tree(&self.0);
    }
}

pub(crate) async fn checkpoint(daemon: Arc<Daemon>, request: CheckpointPodRequest) -> Result<(), Status> {
    let pod_id = validate::id("pod_sandbox_id", &request.pod_sandbox_id)?;
    let output = location::check(&request.output_path).map_err(|e| invalid("output_path", e))?;
    let pod = daemon.sandboxes.get(pod_id)?;
    let pod_id = pod.record.id.clone();
    if pod.state != SandboxState::Ready {
        return Err(Status::failed_precondition(format!(
            "pod {pod_id} is not ready: only a running pod is checkpointed"
        )));
    }
    if pod.record.userns.is_some() {
        return Err(Status::failed_precondition(format!(
            "pod {pod_id} has a user namespace of its own, whose containers CRIU cannot checkpoint here"
        )));
    }
    let options = pod
        .record
        .config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.as_ref());
    if let Some(options) = options {
        if options.network == NamespaceMode::Node as i32 {
            return Err(Status::failed_precondition(format!(
                "pod {pod_id} uses the node's network: its sockets belong to the node and cannot move with it"
            )));
        }
        if options.pid == NamespaceMode::Node as i32 {
            return Err(Status::failed_precondition(format!(
                "pod {pod_id} uses the node's PID namespace: CRIU cannot restore its processes' ids elsewhere"
            )));
        }
    }
    let in_pod = daemon.containers.in_sandbox(&pod_id);
    let chosen: Vec<String> = if request.container_ids.is_empty() {
        in_pod.clone()
    } else {
        let mut chosen = Vec::new();
        for (i, asked) in request.container_ids.iter().enumerate() {
            let field = format!("container_ids[{i}]");
            let id = daemon.containers.resolve(validate::id(&field, asked)?).map_err(|e| invalid(&field, e))?;
            if !in_pod.contains(&id) {
                return Err(invalid(&field, format!("container {id} is not in pod {pod_id}")));
            }
            if !chosen.contains(&id) {
                chosen.push(id);
            }
        }
        chosen
    };
    let mut views = Vec::new();
    for id in &chosen {
        let view = daemon.containers.get(id)?;
        if view.state != ContainerState::Running {
            return Err(Status::failed_precondition(format!(
                "container {id} ({}) is {}: a pod is checkpointed with every container running",
                view.record.config.metadata.as_ref().map(|m| m.name.as_str()).unwrap_or_default(),
                format!("{:?}", view.state).to_lowercase()
            )));
        }
        views.push(view);
    }
    if views.is_empty() {
        return Err(Status::failed_precondition(format!("pod {pod_id} has no container to checkpoint")));
    }
    views.sort_by_key(|v| v.record.created_at_ns);
    let target = output.clone();
    let location = tokio::task::spawn_blocking(move || Location::open(&target))
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| invalid("output_path", e))?;
    let staging = Staging::new(&daemon.config.root)?;
    let timeout = Duration::from_secs(daemon.config.checkpoint.default_timeout_secs);
    let mut entries = Vec::new();
    let mut files = Vec::new();
    for (i, view) in views.iter().enumerate() {
        let name = view.record.config.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default();
        let file = staging.0.join(format!("{i}.tar"));
        tracing::info!(pod_id = %pod_id, container_id = %view.record.id, step = i + 1, of = views.len(), "checkpointing the pod's container");
        daemon.containers.checkpoint(&view.record.id, &file, timeout).await?;
        let archive = pod_archive::entry_name(i, &name);
        files.push((archive.clone(), file));
        entries.push(ContainerEntry {
            attempt: view.record.config.metadata.as_ref().map_or(0, |m| m.attempt),
            name,
            id: view.record.id.clone(),
            archive,
            config: view.record.config.clone(),
        });
    }
    let manifest = PodManifest {
        format: pod_archive::FORMAT.into(),
        version: pod_archive::VERSION,
        checkpointed_time: crate::checkpoint::archive::rfc3339(crate::clock::now_ns() / 1_000_000_000),
        consistency: CONSISTENCY.into(),
        pod: PodFacts {
            id: pod_id.clone(),
            config: pod.record.config.clone(),
            runtime_handler: pod.record.runtime_handler.clone(),
            ips: pod.ips.iter().map(ToString::to_string).collect(),
        },
        containers: entries,
    };
    let bytes = tokio::task::spawn_blocking(move || pod_archive::write(&location, &manifest, &files))
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| Status::internal(format!("writing the pod archive {}: {e}", output.display())))?;
    drop(staging);
    tracing::info!(pod_id = %pod_id, location = %output.display(), archive_bytes = bytes, containers = chosen.len(), "pod checkpointed");
    Ok(())
}

pub(crate) async fn restore(daemon: Arc<Daemon>, request: RestorePodRequest) -> Result<RestorePodResponse, Status> {
    let path = location::check(&request.checkpoint_path).map_err(|e| invalid("checkpoint_path", e))?;
    let staging = Staging::new(&daemon.config.root)?;
    let (into, limit, reading) = (staging.0.clone(), daemon.config.limits.checkpoint_archive_bytes, path.clone());
    let (manifest, archives) = tokio::task::spawn_blocking(move || pod_archive::read(&reading, limit, &into))
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| invalid("checkpoint_path", format!("{}: {e}", path.display())))?;
    let config = request.config.clone().unwrap_or_else(|| manifest.pod.config.clone());
    let handler = if request.runtime_handler.is_empty() {
        manifest.pod.runtime_handler.clone()
    } else {
        request.runtime_handler.clone()
    };
    for (i, given) in request.container_configs.iter().enumerate() {
        let name = given.metadata.as_ref().map(|m| m.name.as_str()).unwrap_or_default();
        if !manifest.containers.iter().any(|c| c.name == name) {
            return Err(invalid(
                &format!("container_configs[{i}].metadata.name"),
                format!("no container {name:?} is in the archive"),
            ));
        }
    }
    let spec = validate::sandbox_spec(Some(config.clone()), &handler)?;
    // Before the pod exists: a crash from here on leaves a name the next
    // start finds the pod by, and removes it.
    store::write_atomic(&staging.0.join(RESTORING), spec.name_key.as_bytes(), 0o600)
        .map_err(|e| Status::internal(format!("cannot record the restore: {e}")))?;
    let pod_id = daemon.sandboxes.run(spec).await?;
    let restored =
        restore_containers(&daemon, &pod_id, &config, &manifest, &archives, &request.container_configs).await;
    match restored {
        Ok(restored_containers) => {
            tracing::info!(pod_id = %pod_id, from = %request.checkpoint_path, containers = restored_containers.len(), "pod restored");
            Ok(RestorePodResponse { pod_sandbox_id: pod_id, restored_containers })
        }
        Err(status) => {
            tracing::warn!(pod_id = %pod_id, error = %status.message(), "RestorePod failed; removing the pod it made");
            if let Err(e) = crate::runtime::remove_pod(&daemon.sandboxes, &daemon.containers, &pod_id).await {
                tracing::error!(pod_id = %pod_id, error = %e, "cannot remove the pod of a failed RestorePod");
            }
            Err(status)
        }
    }
}

/// Restores and starts each container of `manifest` in the new pod, in order.
async fn restore_containers(
    daemon: &Daemon,
    pod_id: &str,
    pod_config: &PodSandboxConfig,
    manifest: &PodManifest,
    archives: &[PathBuf],
    given: &[ContainerConfig],
) -> Result<Vec<RestoredContainer>, Status> {
    let mut restored = Vec::new();
    for (entry, archive) in manifest.containers.iter().zip(archives) {
        let mut config = given
            .iter()
            .find(|c| c.metadata.as_ref().is_some_and(|m| m.name == entry.name))
            .cloned()
            .unwrap_or_else(|| entry.config.clone());
        // The checkpoint is the image: restore through CreateContainer.
        config.image = Some(ImageSpec { image: archive.display().to_string(), ..Default::default() });
        let request = CreateContainerRequest {
            pod_sandbox_id: pod_id.to_string(),
            config: Some(config),
            sandbox_config: Some(pod_config.clone()),
        };
        let create = validate::container_create(request, daemon.sandboxes.get(pod_id)?)?;
        let container_id = daemon.containers.create(create).await?;
        daemon.containers.start(&container_id).await?;
        restored.push(RestoredContainer { name: entry.name.clone(), container_id });
    }
    Ok(restored)
}
