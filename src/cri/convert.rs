//! Domain views → CRI messages: sandboxes as PodSandbox / PodSandboxStatus,
//! list filters, and the verbose `info` JSON crictl prints.

use std::collections::HashMap;

use crate::api;
use crate::container::{ContainerState, ContainerView};
use crate::pod::{SandboxState, SandboxView};

pub(crate) fn sandbox_state(state: SandboxState) -> api::PodSandboxState {
    match state {
        SandboxState::Ready => api::PodSandboxState::SandboxReady,
        SandboxState::NotReady => api::PodSandboxState::SandboxNotready,
    }
}

pub(crate) fn pod_sandbox(view: &SandboxView) -> api::PodSandbox {
    let config = &view.record.config;
    api::PodSandbox {
        id: view.record.id.clone(),
        metadata: config.metadata.clone(),
        state: sandbox_state(view.state) as i32,
        created_at: view.record.created_at_ns,
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        runtime_handler: view.record.runtime_handler.clone(),
    }
}

pub(crate) fn pod_sandbox_status(view: &SandboxView) -> api::PodSandboxStatus {
    let config = &view.record.config;
    let options = config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|sc| sc.namespace_options.clone())
        .unwrap_or_default();
    api::PodSandboxStatus {
        id: view.record.id.clone(),
        metadata: config.metadata.clone(),
        state: sandbox_state(view.state) as i32,
        created_at: view.record.created_at_ns,
        network: Some(pod_network_status(view)),
        linux: Some(api::LinuxPodSandboxStatus {
            namespaces: Some(api::Namespace {
                options: Some(api::NamespaceOption {
                    network: options.network,
                    pid: options.pid,
                    ipc: options.ipc,
                    userns_options: Some(user_namespace_status(view.record.userns.as_ref())),
                    ..Default::default()
                }),
            }),
        }),
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        runtime_handler: view.record.runtime_handler.clone(),
    }
}

/// The pod's addresses: the first as `ip`, the others (the other family) as `additional_ips`.
fn pod_network_status(view: &SandboxView) -> api::PodSandboxNetworkStatus {
    let mut ips = view.ips.iter().map(|ip| ip.to_string());
    api::PodSandboxNetworkStatus {
        ip: ips.next().unwrap_or_default(),
        additional_ips: ips.map(|ip| api::PodIp { ip }).collect(),
    }
}

/// The verbose `info` of PodSandboxStatus: one "info" key holding JSON, as
/// containerd does, so `crictl inspectp` shows it.
pub(crate) fn sandbox_info(view: &SandboxView) -> HashMap<String, String> {
    let record = &view.record;
    let pid = view.pause.as_ref().map(|p| p.pid);
    let ns_path = |kind: &str, own: bool| -> serde_json::Value {
        match (pid, own) {
            (Some(pid), true) => format!("/proc/{pid}/ns/{kind}").into(),
            (_, false) => "node".into(),
            (None, true) => serde_json::Value::Null,
        }
    };
    let info = serde_json::json!({
        "pid": pid,
        "pauseStartTime": view.pause.as_ref().map(|p| p.start_time),
        "lifecycle": record.lifecycle,
        "namespaces": {
            "network": ns_path("net", record.namespaces.net),
            "ipc": ns_path("ipc", record.namespaces.ipc),
            "uts": ns_path("uts", record.namespaces.uts),
            "pid": ns_path("pid", record.namespaces.pid),
        },
        "hostname": record.hostname,
        "cgroups": {
            "pod": record.pod_cgroup.to_string(),
            "pause": record.pause_cgroup.to_string(),
        },
        "files": {
            "hostname": view.paths.hostname(),
            "hosts": view.paths.hosts(),
            "resolvConf": view.paths.resolv_conf(),
            "shm": record.own_shm.then(|| view.paths.shm()),
        },
        "runtimeHandler": record.runtime_handler,
        "config": record.config,
    });
    HashMap::from([("info".to_string(), info.to_string())])
}

/// True when `labels` has every key=value of `selector`.
pub(crate) fn labels_match(selector: &HashMap<String, String>, labels: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

pub(crate) fn sandbox_matches(filter: &api::PodSandboxFilter, view: &SandboxView) -> bool {
    (filter.id.is_empty() || view.record.id.starts_with(&filter.id))
        && filter.state.as_ref().is_none_or(|s| s.state == sandbox_state(view.state) as i32)
        && labels_match(&filter.label_selector, &view.record.config.labels)
}

pub(crate) fn container_state(state: ContainerState) -> api::ContainerState {
    match state {
        ContainerState::Created => api::ContainerState::ContainerCreated,
        ContainerState::Running => api::ContainerState::ContainerRunning,
        ContainerState::Exited => api::ContainerState::ContainerExited,
    }
}

fn image_spec(view: &ContainerView) -> api::ImageSpec {
    api::ImageSpec {
        image: view.record.image.name.clone(),
        user_specified_image: view.record.image.requested.clone(),
        annotations: view.record.config.image.as_ref().map(|i| i.annotations.clone()).unwrap_or_default(),
        ..Default::default()
    }
}

pub(crate) fn container(view: &ContainerView) -> api::Container {
    let config = &view.record.config;
    api::Container {
        id: view.record.id.clone(),
        pod_sandbox_id: view.record.sandbox_id.clone(),
        metadata: config.metadata.clone(),
        image: Some(image_spec(view)),
        image_ref: view.record.image.reference.clone(),
        state: container_state(view.state) as i32,
        created_at: view.record.created_at_ns,
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        image_id: view.record.image.id.clone(),
    }
}

pub(crate) fn container_status(view: &ContainerView) -> api::ContainerStatus {
    let record = &view.record;
    let config = &record.config;
    let exit = view.exit.clone();
    api::ContainerStatus {
        id: record.id.clone(),
        metadata: config.metadata.clone(),
        state: container_state(view.state) as i32,
        created_at: record.created_at_ns,
        started_at: view.started_at_ns.unwrap_or(0),
        finished_at: exit.as_ref().map_or(0, |e| e.finished_at_ns),
        exit_code: exit.as_ref().map_or(0, |e| e.exit_code),
        image: Some(image_spec(view)),
        image_ref: record.image.reference.clone(),
        reason: exit.as_ref().map(|e| e.reason.clone()).unwrap_or_default(),
        message: exit.as_ref().map(|e| e.message.clone()).unwrap_or_default(),
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        mounts: config
            .mounts
            .iter()
            .map(|m| {
                let mut m = m.clone();
                // An image volume names the image it mounts by id (its digest).
                if let (Some(image), Some((_, id))) =
                    (m.image.as_mut(), record.image_volumes.iter().find(|(path, _)| *path == m.container_path))
                {
                    image.image_ref = id.clone();
                }
                m
            })
            .collect(),
        log_path: record.log_path.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
        resources: Some(api::ContainerResources {
            linux: Some(
                record
                    .resources
                    .clone()
                    .or_else(|| config.linux.as_ref().and_then(|l| l.resources.clone()))
                    .unwrap_or_default(),
            ),
            windows: None,
        }),
        image_id: record.image.id.clone(),
        user: Some(api::ContainerUser {
            linux: Some(api::LinuxContainerUser {
                uid: record.uid.into(),
                gid: record.gid.into(),
                supplemental_groups: record.additional_gids.iter().map(|g| i64::from(*g)).collect(),
            }),
        }),
        stop_signal: crate::container::signal::to_cri(record.stop_signal) as i32,
    }
}

/// The verbose `info` of ContainerStatus: one "info" key holding JSON.
pub(crate) fn container_info(view: &ContainerView) -> HashMap<String, String> {
    let record = &view.record;
    let spec: serde_json::Value = std::fs::read(view.paths.spec())
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(serde_json::Value::Null);
    let info = serde_json::json!({
        "sandboxID": record.sandbox_id,
        "pid": view.init.as_ref().map(|i| i.pid),
        "image": record.image,
        "cgroup": record.cgroup.to_string(),
        "security": record.security,
        "cgroupJoin": view.cgroup_join,
        "oomScoreAdj": record.oom_score_adj.map(|(requested, applied)| serde_json::json!({"requested": requested, "applied": applied})),
        "rootfs": {
            "upper": view.paths.upper(),
            "work": view.paths.work(),
        },
        "runDir": view.paths.run_dir,
        "config": record.config,
        "runtimeSpec": spec,
    });
    HashMap::from([("info".to_string(), info.to_string())])
}

pub(crate) fn container_matches(filter: &api::ContainerFilter, view: &ContainerView) -> bool {
    (filter.id.is_empty() || view.record.id.starts_with(&filter.id))
        && (filter.pod_sandbox_id.is_empty() || view.record.sandbox_id.starts_with(&filter.pod_sandbox_id))
        && filter.state.as_ref().is_none_or(|s| s.state == container_state(view.state) as i32)
        && labels_match(&filter.label_selector, &view.record.config.labels)
}

/// The pod's user namespace as the CRI reports it: POD with its mappings, or NODE.
fn user_namespace_status(maps: Option<&crate::linux::userns::IdMaps>) -> api::UserNamespace {
    let mapping = |m: &crate::linux::userns::IdMap| api::IdMapping {
        host_id: m.host_id,
        container_id: m.container_id,
        length: m.length,
    };
    match maps {
        Some(maps) => api::UserNamespace {
            mode: api::NamespaceMode::Pod as i32,
            uids: vec![mapping(&maps.uids)],
            gids: vec![mapping(&maps.gids)],
        },
        None => api::UserNamespace { mode: api::NamespaceMode::Node as i32, ..Default::default() },
    }
}
