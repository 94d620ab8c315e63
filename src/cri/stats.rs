//! Usage readings → CRI stats messages (ContainerStats, PodSandboxStats),
//! their filters, and the cAdvisor-style metrics of ListPodSandboxMetrics
//! with their descriptors (one fixed set for the life of the process, since
//! kubelet reads the descriptors once).

use std::path::Path;
use std::sync::Arc;

use tonic::Status;

use crate::api::{self, MetricType, UInt64Value};
use crate::container::{ContainerState, ContainerView};
use crate::daemon::Daemon;
use crate::pod::{SandboxState, SandboxView};
use crate::stats::network::{default_interface, InterfaceUsage};
use crate::stats::{ContainerUsage, PodUsage};

use super::convert::labels_match;

/// Runs a reading on a blocking thread (it reads many small files).
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, Status> {
    tokio::task::spawn_blocking(work).await.map_err(|e| Status::internal(format!("stats reader: {e}")))
}

/// ContainerStats of one container (exited ones report no usage).
pub async fn one_container(daemon: Arc<Daemon>, id: &str) -> Result<api::ContainerStats, Status> {
    let view = daemon.containers.get(id)?;
    blocking(move || {
        let usage = daemon.stats.container(&view);
        container_stats(&usage, &view, &daemon.stats.containers_dir)
    })
    .await
}

/// ListContainerStats: the containers that have a cgroup (created or running).
pub async fn list_containers(
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

fn pod_reading(daemon: &Daemon, sandbox: &SandboxView, all: &[ContainerView]) -> (PodUsage, Vec<ContainerView>) {
    let own: Vec<ContainerView> = all
        .iter()
        .filter(|c| c.record.sandbox_id == sandbox.record.id && c.state != ContainerState::Exited)
        .cloned()
        .collect();
    (daemon.stats.pod(sandbox, &own), own)
}

/// PodSandboxStats of one pod.
pub async fn one_pod(daemon: Arc<Daemon>, id: &str) -> Result<api::PodSandboxStats, Status> {
    let sandbox = daemon.sandboxes.get(id)?;
    blocking(move || {
        let (usage, own) = pod_reading(&daemon, &sandbox, &daemon.containers.list());
        pod_stats(&usage, &sandbox, &own, &daemon.stats.containers_dir)
    })
    .await
}

/// ListPodSandboxStats: the ready pods the filter matches.
pub async fn list_pods(
    daemon: Arc<Daemon>,
    filter: Option<api::PodSandboxStatsFilter>,
) -> Result<Vec<api::PodSandboxStats>, Status> {
    blocking(move || {
        let all = daemon.containers.list();
        let out = daemon
            .sandboxes
            .list()
            .iter()
            .filter(|s| s.state == SandboxState::Ready)
            .filter(|s| filter.as_ref().is_none_or(|f| pod_stats_matches(f, s)))
            .map(|s| {
                let (usage, own) = pod_reading(&daemon, s, &all);
                pod_stats(&usage, s, &own, &daemon.stats.containers_dir)
            })
            .collect();
        forget_the_gone(&daemon, &all);
        out
    })
    .await
}

/// ListPodSandboxMetrics: every ready pod's metrics.
pub async fn list_pod_metrics(daemon: Arc<Daemon>) -> Result<Vec<api::PodSandboxMetrics>, Status> {
    blocking(move || {
        let all = daemon.containers.list();
        daemon
            .sandboxes
            .list()
            .iter()
            .filter(|s| s.state == SandboxState::Ready)
            .map(|s| {
                let (usage, own) = pod_reading(&daemon, s, &all);
                pod_metrics(&usage, s, &own)
            })
            .collect()
    })
    .await
}

fn value(v: u64) -> Option<UInt64Value> {
    Some(UInt64Value { value: v })
}

pub fn container_attributes(view: &ContainerView) -> api::ContainerAttributes {
    let config = &view.record.config;
    api::ContainerAttributes {
        id: view.record.id.clone(),
        metadata: config.metadata.clone(),
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
    }
}

fn cpu(at_ns: i64, usage: &crate::cgroups::CgroupStats, nano_cores: Option<u64>) -> Option<api::CpuUsage> {
    usage.cpu.as_ref().map(|cpu| api::CpuUsage {
        timestamp: at_ns,
        usage_core_nano_seconds: value(cpu.usage_ns),
        usage_nano_cores: nano_cores.and_then(value),
        psi: None,
    })
}

fn memory(at_ns: i64, usage: &crate::cgroups::CgroupStats) -> Option<api::MemoryUsage> {
    usage.memory.as_ref().map(|m| api::MemoryUsage {
        timestamp: at_ns,
        working_set_bytes: value(m.working_set_bytes),
        available_bytes: m.available_bytes().and_then(value),
        usage_bytes: value(m.usage_bytes),
        rss_bytes: value(m.rss_bytes),
        page_faults: value(m.page_faults),
        major_page_faults: value(m.major_page_faults),
        psi: None,
    })
}

pub fn container_stats(usage: &ContainerUsage, view: &ContainerView, containers_dir: &Path) -> api::ContainerStats {
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
        io: None,
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

pub fn pod_stats(
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
            io: None,
        }),
        windows: None,
    }
}

pub fn container_stats_matches(filter: &api::ContainerStatsFilter, view: &ContainerView) -> bool {
    (filter.id.is_empty() || view.record.id.starts_with(&filter.id))
        && (filter.pod_sandbox_id.is_empty() || view.record.sandbox_id.starts_with(&filter.pod_sandbox_id))
        && labels_match(&filter.label_selector, &view.record.config.labels)
}

pub fn pod_stats_matches(filter: &api::PodSandboxStatsFilter, view: &SandboxView) -> bool {
    (filter.id.is_empty() || view.record.id.starts_with(&filter.id))
        && labels_match(&filter.label_selector, &view.record.config.labels)
}

// ---- metrics ----

/// Labels of every container metric, in this order.
const CONTAINER_LABELS: &[&str] = &["container", "id", "image", "name", "namespace", "pod"];
/// Labels of the pod's network metrics, in this order.
const NETWORK_LABELS: &[&str] = &["container", "id", "image", "name", "namespace", "pod", "interface"];

/// (name, help, counter?) of the per-container metrics.
const CONTAINER_METRICS: &[(&str, &str, bool)] = &[
    ("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", true),
    ("container_cpu_user_seconds_total", "Cumulative user cpu time consumed in seconds.", true),
    ("container_cpu_system_seconds_total", "Cumulative system cpu time consumed in seconds.", true),
    ("container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.", true),
    ("container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.", true),
    ("container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled.", true),
    (
        "container_memory_usage_bytes",
        "Current memory usage in bytes, including all memory regardless of when it was accessed.",
        false,
    ),
    ("container_memory_working_set_bytes", "Current working set in bytes.", false),
    ("container_memory_rss", "Size of RSS in bytes.", false),
    ("container_memory_cache", "Number of bytes of page cache memory.", false),
    ("container_memory_swap", "Container swap usage in bytes.", false),
    ("container_memory_failcnt", "Number of memory usage hits limits.", true),
    ("container_oom_events_total", "Count of out of memory events observed for the container.", true),
    ("container_spec_memory_limit_bytes", "Memory limit for the container.", false),
    ("container_processes", "Number of processes running inside the container.", false),
    ("container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", false),
    ("container_fs_inodes_total", "Number of inodes the container uses on this filesystem.", false),
    ("container_last_seen", "Last time a container was seen by the exporter.", false),
];

/// (name, help) of the pod's network metrics (all counters).
const NETWORK_METRICS: &[(&str, &str)] = &[
    ("container_network_receive_bytes_total", "Cumulative count of bytes received."),
    ("container_network_receive_packets_total", "Cumulative count of packets received."),
    ("container_network_receive_errors_total", "Cumulative count of errors encountered while receiving."),
    ("container_network_receive_packets_dropped_total", "Cumulative count of packets dropped while receiving."),
    ("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted."),
    ("container_network_transmit_packets_total", "Cumulative count of packets transmitted."),
    ("container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting."),
    ("container_network_transmit_packets_dropped_total", "Cumulative count of packets dropped while transmitting."),
];

/// The descriptors of every metric nidus reports (the same set every time).
pub fn metric_descriptors() -> Vec<api::MetricDescriptor> {
    let labels = |keys: &[&str]| keys.iter().map(|k| k.to_string()).collect::<Vec<_>>();
    CONTAINER_METRICS
        .iter()
        .map(|(name, help, _)| api::MetricDescriptor {
            name: name.to_string(),
            help: help.to_string(),
            label_keys: labels(CONTAINER_LABELS),
        })
        .chain(NETWORK_METRICS.iter().map(|(name, help)| api::MetricDescriptor {
            name: name.to_string(),
            help: help.to_string(),
            label_keys: labels(NETWORK_LABELS),
        }))
        .collect()
}

fn metric(name: &str, counter: bool, label_values: &[String], v: u64) -> api::Metric {
    api::Metric {
        name: name.to_string(),
        // Read on demand, not cached: kubelet's convention is 0.
        timestamp: 0,
        metric_type: if counter { MetricType::Counter } else { MetricType::Gauge } as i32,
        label_values: label_values.to_vec(),
        value: value(v),
    }
}

/// Label values of a container: container name, id, image, runtime name, namespace, pod.
fn container_label_values(view: &ContainerView, sandbox: &SandboxView) -> Vec<String> {
    let pod = sandbox.record.config.metadata.clone().unwrap_or_default();
    let name = view.record.config.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default();
    vec![
        name.clone(),
        view.record.id.clone(),
        view.record.image.name.clone(),
        format!("k8s_{name}_{}_{}_{}", pod.name, pod.namespace, pod.uid),
        pod.namespace,
        pod.name,
    ]
}

fn container_metrics(usage: &ContainerUsage, view: &ContainerView, sandbox: &SandboxView) -> api::ContainerMetrics {
    let labels = container_label_values(view, sandbox);
    let mut metrics = Vec::new();
    let mut add = |name: &str, v: u64| {
        let counter = CONTAINER_METRICS.iter().find(|(n, _, _)| *n == name).is_some_and(|(_, _, c)| *c);
        metrics.push(metric(name, counter, &labels, v));
    };
    if let Some(cpu) = &usage.cgroup.cpu {
        add("container_cpu_usage_seconds_total", cpu.usage_ns / 1_000_000_000);
        add("container_cpu_user_seconds_total", cpu.user_ns / 1_000_000_000);
        add("container_cpu_system_seconds_total", cpu.system_ns / 1_000_000_000);
        add("container_cpu_cfs_periods_total", cpu.periods);
        add("container_cpu_cfs_throttled_periods_total", cpu.throttled_periods);
        add("container_cpu_cfs_throttled_seconds_total", cpu.throttled_ns / 1_000_000_000);
    }
    if let Some(m) = &usage.cgroup.memory {
        add("container_memory_usage_bytes", m.usage_bytes);
        add("container_memory_working_set_bytes", m.working_set_bytes);
        add("container_memory_rss", m.rss_bytes);
        add("container_memory_cache", m.cache_bytes);
        if let Some(swap) = m.swap_bytes {
            add("container_memory_swap", swap);
        }
        add("container_memory_failcnt", m.fail_count);
        add("container_oom_events_total", m.oom_kills);
        add("container_spec_memory_limit_bytes", m.limit_bytes.unwrap_or(0));
    }
    if let Some(count) = usage.cgroup.pids.map(|p| p.current) {
        add("container_processes", count);
    }
    if let Some(disk) = usage.writable_layer {
        add("container_fs_usage_bytes", disk.bytes);
        add("container_fs_inodes_total", disk.inodes);
    }
    add("container_last_seen", (usage.at_ns / 1_000_000_000).max(0) as u64);
    api::ContainerMetrics { container_id: usage.id.clone(), metrics }
}

pub fn pod_metrics(usage: &PodUsage, sandbox: &SandboxView, containers: &[ContainerView]) -> api::PodSandboxMetrics {
    let pod = sandbox.record.config.metadata.clone().unwrap_or_default();
    let mut metrics = Vec::new();
    for i in usage.interfaces.iter().flatten() {
        let labels = vec![
            "POD".to_string(),
            sandbox.record.id.clone(),
            String::new(),
            format!("k8s_POD_{}_{}_{}", pod.name, pod.namespace, pod.uid),
            pod.namespace.clone(),
            pod.name.clone(),
            i.name.clone(),
        ];
        for (name, v) in [
            ("container_network_receive_bytes_total", i.rx_bytes),
            ("container_network_receive_packets_total", i.rx_packets),
            ("container_network_receive_errors_total", i.rx_errors),
            ("container_network_receive_packets_dropped_total", i.rx_dropped),
            ("container_network_transmit_bytes_total", i.tx_bytes),
            ("container_network_transmit_packets_total", i.tx_packets),
            ("container_network_transmit_errors_total", i.tx_errors),
            ("container_network_transmit_packets_dropped_total", i.tx_dropped),
        ] {
            metrics.push(metric(name, true, &labels, v));
        }
    }
    api::PodSandboxMetrics {
        pod_sandbox_id: sandbox.record.id.clone(),
        metrics,
        container_metrics: usage
            .containers
            .iter()
            .filter_map(|u| {
                let view = containers.iter().find(|v| v.record.id == u.id)?;
                Some(container_metrics(u, view, sandbox))
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_are_unique_and_cover_every_metric() {
        let descriptors = metric_descriptors();
        let mut names: Vec<&str> = descriptors.iter().map(|d| d.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), descriptors.len());
        assert!(names.contains(&"container_cpu_usage_seconds_total"));
        assert!(names.contains(&"container_memory_working_set_bytes"));
        assert!(names.contains(&"container_network_receive_bytes_total"));
        assert_eq!(metric_descriptors(), descriptors, "the set never changes");
    }
}
