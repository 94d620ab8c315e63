//! Entry points for the fuzz targets under `fuzz/` (cargo-fuzz, `make fuzz`):
//! thin wrappers around the CRI edge's validation and conversion, which are
//! private to `cri`, called the way the runtime service calls them, and the
//! sandbox and container views the managers would make of what passed. Not an
//! API: nothing but the fuzz targets uses this module.

use std::collections::HashMap;
use std::path::Path;

use tonic::Status;

use crate::api;
use crate::cgroups::CgroupPath;
use crate::container::record::{ContainerPaths, ContainerRecord, ImageUsed, Lifecycle as ContainerLifecycle};
use crate::container::{ContainerCreate, ContainerState, ContainerView};
use crate::cri::{convert, validate};
use crate::linux::process::ProcessIdentity;
use crate::pod::record::{Lifecycle as SandboxLifecycle, SandboxPaths, SandboxRecord};
use crate::pod::{SandboxSpec, SandboxState, SandboxView};

/// Where the views' files would be (nothing is read or written there).
const ROOT: &str = "/nonexistent/nidus-fuzz/root";
const STATE: &str = "/nonexistent/nidus-fuzz/state";

/// RunPodSandbox's validation (`validate::sandbox_spec`).
pub fn validate_sandbox(config: Option<api::PodSandboxConfig>, runtime_handler: &str) -> Result<SandboxSpec, Status> {
    validate::sandbox_spec(config, runtime_handler)
}

/// CreateContainer's validation (`validate::container_create`).
pub fn validate_container(
    request: api::CreateContainerRequest,
    sandbox: SandboxView,
) -> Result<ContainerCreate, Status> {
    validate::container_create(request, sandbox)
}

/// The resources check of UpdateContainerResources and UpdatePodSandboxResources.
pub fn validate_resources(field: &str, resources: Option<&api::LinuxContainerResources>) -> Result<(), Status> {
    validate::resources(field, resources)
}

/// An id field of a request that needs one.
pub fn validate_id<'a>(field: &str, value: &'a str) -> Result<&'a str, Status> {
    validate::id(field, value)
}

/// The id of an idempotent Stop or Remove.
pub fn validate_id_to_end<'a>(field: &str, value: &'a str) -> Result<Option<&'a str>, Status> {
    validate::id_to_end(field, value)
}

/// The view of a sandbox made from `spec`, as the sandbox manager records
/// it (under the default cgroup parent when the spec names none), ready
/// with a pause process.
pub fn sandbox_view(id: &str, spec: &SandboxSpec) -> Result<SandboxView, String> {
    let pod_cgroup = match &spec.cgroup_parent {
        Some(parent) => parent.clone(),
        None => CgroupPath::parse(&format!("nidus/{id}")).map_err(|e| e.to_string())?,
    };
    let record = SandboxRecord {
        id: id.to_string(),
        name_key: spec.name_key.clone(),
        config: spec.config.clone(),
        runtime_handler: spec.runtime_handler.clone(),
        created_at_ns: 1,
        lifecycle: SandboxLifecycle::Created,
        namespaces: spec.namespaces,
        userns: spec.userns,
        hostname: spec.hostname.clone(),
        pause_cgroup: pod_cgroup.join(id).map_err(|e| e.to_string())?,
        pod_cgroup,
        own_shm: spec.namespaces.ipc,
        resources: None,
    };
    Ok(SandboxView {
        record: record.into(),
        state: SandboxState::Ready,
        pause: Some(ProcessIdentity { pid: 1, start_time: 1, boot_id: String::new() }),
        paths: SandboxPaths::new(Path::new(ROOT), Path::new(STATE), id),
        ips: Vec::new(),
    })
}

/// The view of a container made from a validated create, as the container
/// manager records it (the image named as requested), running.
pub fn container_view(id: &str, create: &ContainerCreate) -> Result<ContainerView, String> {
    let config = &create.config;
    let sandbox = &create.sandbox.record;
    let requested = config.image.as_ref().map(|i| i.image.clone()).unwrap_or_default();
    let log_path = match (sandbox.config.log_directory.as_str(), config.log_path.as_str()) {
        ("", _) | (_, "") => None,
        (dir, file) => Some(Path::new(dir).join(file)),
    };
    let record = ContainerRecord {
        id: id.to_string(),
        sandbox_id: sandbox.id.clone(),
        name_key: create.name_key.clone(),
        config: config.clone(),
        image: ImageUsed { id: requested.clone(), name: requested.clone(), reference: requested.clone(), requested },
        created_at_ns: 1,
        lifecycle: ContainerLifecycle::Created,
        log_path,
        cgroup: sandbox.pod_cgroup.join(id).map_err(|e| e.to_string())?,
        uid: 0,
        gid: 0,
        additional_gids: Vec::new(),
        stop_signal: crate::container::signal::from_cri(config.stop_signal).unwrap_or(libc::SIGTERM),
        oom_score_adj: None,
        started_at_ns: Some(2),
        exit: None,
        security: Default::default(),
        hooks: None,
        resources: config.linux.as_ref().and_then(|l| l.resources.clone()),
        image_volumes: Vec::new(),
    };
    Ok(ContainerView {
        record: record.into(),
        state: ContainerState::Running,
        started_at_ns: Some(2),
        exit: None,
        init: Some(ProcessIdentity { pid: 2, start_time: 2, boot_id: String::new() }),
        cgroup_join: None,
        paths: ContainerPaths::new(Path::new(ROOT), Path::new(STATE), id),
    })
}

/// ListPodSandbox's item, PodSandboxStatus's status and verbose info, and
/// whether `filter` selects the sandbox.
pub fn sandbox_messages(
    view: &SandboxView,
    filter: &api::PodSandboxFilter,
) -> (api::PodSandbox, api::PodSandboxStatus, HashMap<String, String>, bool) {
    (
        convert::pod_sandbox(view),
        convert::pod_sandbox_status(view),
        convert::sandbox_info(view),
        convert::sandbox_matches(filter, view),
    )
}

/// ListContainers' item, ContainerStatus's status and verbose info, and
/// whether `filter` selects the container.
pub fn container_messages(
    view: &ContainerView,
    filter: &api::ContainerFilter,
) -> (api::Container, api::ContainerStatus, HashMap<String, String>, bool) {
    (
        convert::container(view),
        convert::container_status(view),
        convert::container_info(view),
        convert::container_matches(filter, view),
    )
}
