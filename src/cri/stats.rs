//! Usage readings → CRI stats messages (ContainerStats, PodSandboxStats)
//! and their filters; pressure (PSI) where the kernel writes it, left out
//! where it does not (cgroup v1). The cAdvisor-style metrics of
//! ListPodSandboxMetrics and their descriptors are `metrics.rs`.

mod families;
mod metrics;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use tonic::Status;

use crate::api::{self, UInt64Value};
use crate::cgroups::stats::{Pressure, PressureLine};
use crate::cgroups::CgroupStats;
use crate::container::{ContainerState, ContainerView};
use crate::cri::Daemon;
use crate::pod::{SandboxState, SandboxView};
use crate::stats::network::{default_interface, InterfaceUsage};
use crate::stats::{ContainerUsage, PodUsage};

use super::convert::labels_match;
pub(crate) use metrics::list_pods as list_pod_metrics;

/// The descriptors of every metric nidus reports on this node (the same set every time).
pub(crate) fn metric_descriptors(daemon: &Daemon) -> Vec<api::MetricDescriptor> {
    metrics::descriptors(daemon.stats.has_pressure())
}

/// Runs a reading on a blocking thread (it reads many small files).
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, Status> {
    tokio::task::spawn_blocking(work).await.map_err(|e| Status::internal(format!("stats reader: {e}")))
}

/// ContainerStats of one container (exited ones report no usage).
pub(crate) async fn one_container(daemon: Arc<Daemon>, id: &str) -> Result<api::ContainerStats, Status> {
    let view = daemon.containers.get(id)?;
    blocking(move || {
        let usage = daemon.stats.container(&view);
        container_stats(&usage, &view, &daemon.stats.containers_dir)
    })
    .await
}

/// ListContainerStats: the containers that have a cgroup (created or running).
pub(crate) async fn list_containers(
    daemon: Arc<Daemon>,
    filter: Option<api::ContainerStatsFilter>,
) -> Result<Vec<api::ContainerStats>, Status> {
    blocking(move || {
        let all = daemon.containers.list();
        let out = all
            .iter()
            .filter(|v| v.state != ContainerState::Exited)
            .filter(|v| filter.as_ref().is_none_or(|f| container_stats_matches(f, v)))
            .map(|v| container_stats(&daemon.stats.container(v), v, &daemon.stats.containers_dir))
            .collect();
        forget_the_gone(&daemon, &all);
        out
    })
    .await
}

fn forget_the_gone(daemon: &Daemon, containers: &[ContainerView]) {
    let sandboxes = daemon.sandboxes.list();
    daemon
        .stats
        .keep_only(containers.iter().map(|c| c.record.id.as_str()), sandboxes.iter().map(|s| s.record.id.as_str()));
}

/// A pod's usage, from its containers that have a cgroup (created or running).
fn pod_reading(
    daemon: &Daemon,
    sandbox: &SandboxView,
    containers: Vec<ContainerView>,
) -> (PodUsage, Vec<ContainerView>) {
    let own: Vec<ContainerView> = containers.into_iter().filter(|c| c.state != ContainerState::Exited).collect();
    (daemon.stats.pod(sandbox, &own), own)
}

/// The containers grouped by their sandbox's id, in one pass.
fn by_sandbox(containers: Vec<ContainerView>) -> HashMap<String, Vec<ContainerView>> {
    let mut groups: HashMap<String, Vec<ContainerView>> = HashMap::new();
    for view in containers {
        groups.entry(view.record.sandbox_id.clone()).or_default().push(view);
    }
    groups
}

/// PodSandboxStats of one pod.
pub(crate) async fn one_pod(daemon: Arc<Daemon>, id: &str) -> Result<api::PodSandboxStats, Status> {
    let sandbox = daemon.sandboxes.get(id)?;
    blocking(move || {
        let (usage, own) = pod_reading(&daemon, &sandbox, daemon.containers.of_sandbox(&sandbox.record.id));
        pod_stats(&usage, &sandbox, &own, &daemon.stats.containers_dir)
    })
    .await
}

/// ListPodSandboxStats: the ready pods the filter matches.
pub(crate) async fn list_pods(
    daemon: Arc<Daemon>,
    filter: Option<api::PodSandboxStatsFilter>,
) -> Result<Vec<api::PodSandboxStats>, Status> {
    blocking(move || {
        let all = daemon.containers.list();
        forget_the_gone(&daemon, &all);
        let mut groups = by_sandbox(all);
        let out = daemon
            .sandboxes
            .list()
            .iter()
            .filter(|s| s.state == SandboxState::Ready)
            .filter(|s| filter.as_ref().is_none_or(|f| pod_stats_matches(f, s)))
            .map(|s| {
                let own = groups.remove(s.record.id.as_str()).unwrap_or_default();
                let (usage, own) = pod_reading(&daemon, s, own);
                pod_stats(&usage, s, &own, &daemon.stats.containers_dir)
            })
            .collect();
        out
    })
    .await
}

fn value(v: u64) -> Option<UInt64Value> {
    Some(UInt64Value { value: v })
}

pub(crate) fn container_attributes(view: &ContainerView) -> api::ContainerAttributes {
    let config = &view.record.config;
    api::ContainerAttributes {
        id: view.record.id.clone(),
        metadata: config.metadata.clone(),
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
    }
}

fn psi_data(line: PressureLine) -> api::PsiData {
    api::PsiData {
        // The kernel counts microseconds; the CRI, nanoseconds.
        total: line.total_us.saturating_mul(1000),
        avg10: line.avg10,
        avg60: line.avg60,
        avg300: line.avg300,
    }
}

fn psi(pressure: Option<Pressure>) -> Option<api::PsiStats> {
    pressure.map(|p| api::PsiStats { full: p.full.map(psi_data), some: p.some.map(psi_data) })
}

fn cpu(at_ns: i64, usage: &CgroupStats, nano_cores: Option<u64>) -> Option<api::CpuUsage> {
    usage.cpu.as_ref().map(|cpu| api::CpuUsage {
        timestamp: at_ns,
        usage_core_nano_seconds: value(cpu.usage_ns),
        usage_nano_cores: nano_cores.and_then(value),
        psi: psi(usage.pressure.cpu),
    })
}

/// I/O pressure; the CRI's IoUsage carries nothing else, so no pressure file: no IoUsage.
fn io(at_ns: i64, usage: &CgroupStats) -> Option<api::IoUsage> {
    usage.pressure.io.map(|p| api::IoUsage { timestamp: at_ns, psi: psi(Some(p)) })
}

fn memory(at_ns: i64, usage: &CgroupStats) -> Option<api::MemoryUsage> {
    usage.memory.as_ref().map(|m| api::MemoryUsage {
        timestamp: at_ns,
        working_set_bytes: value(m.working_set_bytes),
        available_bytes: m.available_bytes().and_then(value),
        usage_bytes: value(m.usage_bytes),
        rss_bytes: value(m.rss_bytes),
        page_faults: value(m.page_faults),
        major_page_faults: value(m.major_page_faults),
        psi: psi(usage.pressure.memory),
    })
}

pub(crate) fn container_stats(
    usage: &ContainerUsage,
    view: &ContainerView,
    containers_dir: &Path,
) -> api::ContainerStats {
    let at = usage.at_ns;
    api::ContainerStats {
        attributes: Some(container_attributes(view)),
        cpu: cpu(at, &usage.cgroup, usage.nano_cores),
        memory: memory(at, &usage.cgroup),
        writable_layer: usage.writable_layer.map(|disk| api::FilesystemUsage {
            timestamp: at,
            fs_id: Some(api::FilesystemIdentifier { mountpoint: containers_dir.display().to_string() }),
            used_bytes: value(disk.bytes),
            inodes_used: value(disk.inodes),
        }),
        swap: usage.cgroup.memory.as_ref().and_then(|m| {
            m.swap_bytes.map(|used| api::SwapUsage {
                timestamp: at,
                swap_usage_bytes: value(used),
                swap_available_bytes: m.swap_limit_bytes.map(|limit| limit.saturating_sub(used)).and_then(value),
            })
        }),
        io: io(at, &usage.cgroup),
    }
}

fn interface(i: &InterfaceUsage) -> api::NetworkInterfaceUsage {
    api::NetworkInterfaceUsage {
        name: i.name.clone(),
        rx_bytes: value(i.rx_bytes),
        rx_errors: value(i.rx_errors),
        tx_bytes: value(i.tx_bytes),
        tx_errors: value(i.tx_errors),
    }
}

pub(crate) fn pod_stats(
    usage: &PodUsage,
    sandbox: &SandboxView,
    containers: &[ContainerView],
    containers_dir: &Path,
) -> api::PodSandboxStats {
    let config = &sandbox.record.config;
    let at = usage.at_ns;
    api::PodSandboxStats {
        attributes: Some(api::PodSandboxAttributes {
            id: sandbox.record.id.clone(),
            metadata: config.metadata.clone(),
            labels: config.labels.clone(),
            annotations: config.annotations.clone(),
        }),
        linux: Some(api::LinuxPodSandboxStats {
            cpu: cpu(at, &usage.cgroup, usage.nano_cores),
            memory: memory(at, &usage.cgroup),
            network: usage.interfaces.as_ref().map(|interfaces| api::NetworkUsage {
                timestamp: at,
                default_interface: default_interface(interfaces).map(interface),
                interfaces: interfaces.iter().map(interface).collect(),
            }),
            process: usage.cgroup.pids.map(|p| api::ProcessUsage { timestamp: at, process_count: value(p.current) }),
            containers: usage
                .containers
                .iter()
                .filter_map(|u| {
                    let view = containers.iter().find(|v| v.record.id == u.id)?;
                    Some(container_stats(u, view, containers_dir))
                })
                .collect(),
            io: io(at, &usage.cgroup),
        }),
        windows: None,
    }
}

pub(crate) fn container_stats_matches(filter: &api::ContainerStatsFilter, view: &ContainerView) -> bool {
    (filter.id.is_empty() || view.record.id.starts_with(&filter.id))
        && (filter.pod_sandbox_id.is_empty() || view.record.sandbox_id.starts_with(&filter.pod_sandbox_id))
        && labels_match(&filter.label_selector, &view.record.config.labels)
}

pub(crate) fn pod_stats_matches(filter: &api::PodSandboxStatsFilter, view: &SandboxView) -> bool {
    (filter.id.is_empty() || view.record.id.starts_with(&filter.id))
        && labels_match(&filter.label_selector, &view.record.config.labels)
}
