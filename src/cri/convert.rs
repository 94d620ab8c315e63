//! Domain views → CRI messages: sandboxes as PodSandbox / PodSandboxStatus,
//! list filters, and the verbose `info` JSON crictl prints.

use std::collections::HashMap;

use crate::api;
use crate::pod::{SandboxState, SandboxView};

pub fn sandbox_state(state: SandboxState) -> api::PodSandboxState {
    match state {
        SandboxState::Ready => api::PodSandboxState::SandboxReady,
        SandboxState::NotReady => api::PodSandboxState::SandboxNotready,
    }
}

pub fn pod_sandbox(view: &SandboxView) -> api::PodSandbox {
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

pub fn pod_sandbox_status(view: &SandboxView) -> api::PodSandboxStatus {
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
        network: Some(api::PodSandboxNetworkStatus::default()),
        linux: Some(api::LinuxPodSandboxStatus {
            namespaces: Some(api::Namespace {
                options: Some(api::NamespaceOption {
                    network: options.network,
                    pid: options.pid,
                    ipc: options.ipc,
                    ..Default::default()
                }),
            }),
        }),
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        runtime_handler: view.record.runtime_handler.clone(),
    }
}

/// The verbose `info` of PodSandboxStatus: one "info" key holding JSON, as
/// containerd does, so `crictl inspectp` shows it.
pub fn sandbox_info(view: &SandboxView) -> HashMap<String, String> {
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
pub fn labels_match(selector: &HashMap<String, String>, labels: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

pub fn sandbox_matches(filter: &api::PodSandboxFilter, view: &SandboxView) -> bool {
    (filter.id.is_empty() || view.record.id.starts_with(&filter.id))
        && filter.state.as_ref().is_none_or(|s| s.state == sandbox_state(view.state) as i32)
        && labels_match(&filter.label_selector, &view.record.config.labels)
}
