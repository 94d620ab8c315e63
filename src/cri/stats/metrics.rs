//! Metrics readings → ListPodSandboxMetrics, and the descriptors of
//! ListMetricDescriptors (one fixed set for the life of the process, since
//! kubelet reads the descriptors once: the families of `families.rs`, the
//! pressure ones only on nodes whose cgroups have pressure files). A value
//! the node does not expose is left out, never sent as 0; a limit that is
//! not set is 0, as cAdvisor sends it.

use std::sync::Arc;

use tonic::Status;

use super::blocking;
use super::families::{self as f, Family, Kind, BASE_LABELS};
use crate::api::{self, MetricType, UInt64Value};
use crate::container::{ContainerState, ContainerView};
use crate::cri::Daemon;
use crate::pod::{SandboxState, SandboxView};
use crate::stats::filesystem::{DeviceNames, Filesystem};
use crate::stats::{ContainerDetails, PodDetails};

/// The descriptors of every metric nidus reports on this node.
pub(crate) fn descriptors(pressure: bool) -> Vec<api::MetricDescriptor> {
    let pressure_families = if pressure { f::PRESSURE } else { &[] };
    f::ALWAYS
        .iter()
        .chain(pressure_families)
        .map(|family| api::MetricDescriptor {
            name: family.name.to_string(),
            help: family.help.to_string(),
            label_keys: BASE_LABELS.iter().chain(family.extra).map(|k| k.to_string()).collect(),
        })
        .collect()
}

/// ListPodSandboxMetrics: every ready pod's metrics.
pub(crate) async fn list_pods(daemon: Arc<Daemon>) -> Result<Vec<api::PodSandboxMetrics>, Status> {
    blocking(move || {
        let all = daemon.containers.list();
        let filesystem = daemon.stats.filesystem();
        let mut devices = DeviceNames::default();
        daemon
            .sandboxes
            .list()
            .iter()
            .filter(|s| s.state == SandboxState::Ready)
            .map(|s| {
                let own: Vec<ContainerView> = all
                    .iter()
                    .filter(|c| c.record.sandbox_id == s.record.id && c.state != ContainerState::Exited)
                    .cloned()
                    .collect();
                let details = daemon.stats.pod_details(s, &own);
                pod_metrics(&details, s, &own, filesystem.as_ref(), &mut devices)
            })
            .collect()
    })
    .await
}

/// Metrics of one label set.
struct Sink<'a> {
    labels: &'a [String],
    out: &'a mut Vec<api::Metric>,
}

impl Sink<'_> {
    /// `value` of `family`, with `extra` after the base label values.
    fn add(&mut self, family: &Family, extra: &[&str], value: u64) {
        debug_assert_eq!(extra.len(), family.extra.len(), "{}", family.name);
        let mut label_values = Vec::with_capacity(self.labels.len() + extra.len());
        label_values.extend_from_slice(self.labels);
        label_values.extend(extra.iter().map(|v| v.to_string()));
        self.out.push(api::Metric {
            name: family.name.to_string(),
            // Read on demand, not cached: kubelet's convention is 0.
            timestamp: 0,
            metric_type: match family.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
            } as i32,
            label_values,
            value: Some(UInt64Value { value }),
        });
    }

    fn one(&mut self, family: &Family, value: u64) {
        self.add(family, &[], value);
    }
}

const NS_PER_S: u64 = 1_000_000_000;

fn seconds(at_ns: i64) -> u64 {
    u64::try_from(at_ns).unwrap_or(0) / NS_PER_S
}

/// Base label values of a container: container name, id, image, runtime name, namespace, pod.
fn container_labels(view: &ContainerView, sandbox: &SandboxView) -> Vec<String> {
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

fn container_metrics(
    usage: &ContainerDetails,
    view: &ContainerView,
    sandbox: &SandboxView,
    filesystem: Option<&Filesystem>,
    devices: &mut DeviceNames,
) -> api::ContainerMetrics {
    let labels = container_labels(view, sandbox);
    let mut metrics = Vec::new();
    let mut sink = Sink { labels: &labels, out: &mut metrics };
    let stats = &usage.cgroup.stats;
    if let Some(cpu) = &stats.cpu {
        sink.add(&f::CPU_USAGE, &["total"], cpu.usage_ns / NS_PER_S);
        sink.one(&f::CPU_USER, cpu.user_ns / NS_PER_S);
        sink.one(&f::CPU_SYSTEM, cpu.system_ns / NS_PER_S);
        sink.one(&f::CFS_PERIODS, cpu.periods);
        sink.one(&f::CFS_THROTTLED_PERIODS, cpu.throttled_periods);
        sink.one(&f::CFS_THROTTLED_SECONDS, cpu.throttled_ns / NS_PER_S);
    }
    if let Some(spec) = &usage.cgroup.cpu_spec {
        if let Some(period) = spec.period_us {
            sink.one(&f::SPEC_CPU_PERIOD, period);
        }
        if let Some(quota) = spec.quota_us {
            sink.one(&f::SPEC_CPU_QUOTA, quota);
        }
        if let Some(shares) = spec.shares {
            sink.one(&f::SPEC_CPU_SHARES, shares);
        }
    }
    if let Some(m) = &stats.memory {
        sink.one(&f::MEMORY_USAGE, m.usage_bytes);
        sink.one(&f::MEMORY_WORKING_SET, m.working_set_bytes);
        sink.one(&f::MEMORY_RSS, m.rss_bytes);
        sink.one(&f::MEMORY_CACHE, m.cache_bytes);
        sink.one(&f::MEMORY_MAPPED_FILE, m.mapped_file_bytes);
        if let Some(kernel) = m.kernel_bytes {
            sink.one(&f::MEMORY_KERNEL, kernel);
        }
        if let Some(max) = m.max_usage_bytes {
            sink.one(&f::MEMORY_MAX_USAGE, max);
        }
        if let Some(swap) = m.swap_bytes {
            sink.one(&f::MEMORY_SWAP, swap);
            // The swap files exist exactly where swap is accounted.
            sink.one(&f::SPEC_MEMORY_SWAP_LIMIT, m.swap_setting_bytes.unwrap_or(0));
        }
        sink.one(&f::MEMORY_FAILCNT, m.fail_count);
        for (kind, scope, v) in [
            ("pgfault", "container", m.own_page_faults),
            ("pgmajfault", "container", m.own_major_page_faults),
            ("pgfault", "hierarchy", m.page_faults),
            ("pgmajfault", "hierarchy", m.major_page_faults),
        ] {
            sink.add(&f::MEMORY_FAILURES, &[kind, scope], v);
        }
        sink.one(&f::OOM_EVENTS, m.oom_kills);
        sink.one(&f::SPEC_MEMORY_LIMIT, m.limit_bytes.unwrap_or(0));
    }
    if let Some(pids) = &stats.pids {
        sink.one(&f::THREADS, pids.current);
        sink.one(&f::THREADS_MAX, pids.limit.unwrap_or(0));
    }
    if let Some(p) = &usage.processes {
        sink.one(&f::PROCESSES, p.processes);
        sink.one(&f::FILE_DESCRIPTORS, p.file_descriptors);
        sink.one(&f::SOCKETS, p.sockets);
    }
    for (family_stalled, family_waiting, pressure) in [
        (&f::PRESSURE_CPU_STALLED, &f::PRESSURE_CPU_WAITING, &stats.pressure.cpu),
        (&f::PRESSURE_MEMORY_STALLED, &f::PRESSURE_MEMORY_WAITING, &stats.pressure.memory),
        (&f::PRESSURE_IO_STALLED, &f::PRESSURE_IO_WAITING, &stats.pressure.io),
    ] {
        let Some(pressure) = pressure else { continue };
        if let Some(full) = pressure.full {
            sink.one(family_stalled, full.total_us / 1_000_000);
        }
        if let Some(some) = pressure.some {
            sink.one(family_waiting, some.total_us / 1_000_000);
        }
    }
    for io in usage.cgroup.io.iter().flatten() {
        let device = devices.name(io.major, io.minor);
        let (major, minor) = (io.major.to_string(), io.minor.to_string());
        sink.add(&f::FS_READS_BYTES, &[&device], io.read_bytes);
        sink.add(&f::FS_READS, &[&device], io.reads);
        sink.add(&f::FS_WRITES_BYTES, &[&device], io.write_bytes);
        sink.add(&f::FS_WRITES, &[&device], io.writes);
        sink.add(&f::BLKIO_DEVICE_USAGE, &[&device, &major, &minor, "Read"], io.read_bytes);
        sink.add(&f::BLKIO_DEVICE_USAGE, &[&device, &major, &minor, "Write"], io.write_bytes);
    }
    if let Some(disk) = usage.writable_layer {
        let device = filesystem.map(|fs| fs.device.as_str()).unwrap_or_default();
        sink.add(&f::FS_USAGE, &[device], disk.bytes);
        sink.add(&f::FS_INODES, &[device], disk.inodes);
        if let Some(fs) = filesystem {
            sink.add(&f::FS_LIMIT, &[device], fs.capacity_bytes);
            sink.add(&f::FS_INODES_FREE, &[device], fs.inodes_free);
        }
    }
    let started = view.started_at_ns.unwrap_or(view.record.created_at_ns);
    sink.one(&f::START_TIME, seconds(started));
    sink.one(&f::LAST_SEEN, seconds(usage.at_ns));
    api::ContainerMetrics { container_id: usage.id.clone(), metrics }
}

pub(crate) fn pod_metrics(
    usage: &PodDetails,
    sandbox: &SandboxView,
    containers: &[ContainerView],
    filesystem: Option<&Filesystem>,
    devices: &mut DeviceNames,
) -> api::PodSandboxMetrics {
    let pod = sandbox.record.config.metadata.clone().unwrap_or_default();
    let labels = vec![
        "POD".to_string(),
        sandbox.record.id.clone(),
        String::new(),
        format!("k8s_POD_{}_{}_{}", pod.name, pod.namespace, pod.uid),
        pod.namespace.clone(),
        pod.name.clone(),
    ];
    let mut metrics = Vec::new();
    let mut sink = Sink { labels: &labels, out: &mut metrics };
    for i in usage.interfaces.iter().flatten() {
        let name = [i.name.as_str()];
        sink.add(&f::NET_RX_BYTES, &name, i.rx_bytes);
        sink.add(&f::NET_RX_PACKETS, &name, i.rx_packets);
        sink.add(&f::NET_RX_ERRORS, &name, i.rx_errors);
        sink.add(&f::NET_RX_DROPPED, &name, i.rx_dropped);
        sink.add(&f::NET_TX_BYTES, &name, i.tx_bytes);
        sink.add(&f::NET_TX_PACKETS, &name, i.tx_packets);
        sink.add(&f::NET_TX_ERRORS, &name, i.tx_errors);
        sink.add(&f::NET_TX_DROPPED, &name, i.tx_dropped);
    }
    api::PodSandboxMetrics {
        pod_sandbox_id: sandbox.record.id.clone(),
        metrics,
        container_metrics: usage
            .containers
            .iter()
            .filter_map(|u| {
                let view = containers.iter().find(|v| v.record.id == u.id)?;
                Some(container_metrics(u, view, sandbox, filesystem, devices))
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_are_unique_and_fixed() {
        for pressure in [false, true] {
            let descriptors = descriptors(pressure);
            let mut names: Vec<&str> = descriptors.iter().map(|d| d.name.as_str()).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), descriptors.len());
            assert!(descriptors.iter().all(|d| !d.help.is_empty() && d.label_keys[..6] == *BASE_LABELS));
            assert_eq!(super::descriptors(pressure), descriptors, "the set never changes");
        }
        let has = |pressure: bool, name: &str| descriptors(pressure).iter().any(|d| d.name == name);
        assert!(!has(false, "container_pressure_cpu_waiting_seconds_total"), "no PSI: not described");
        assert!(has(true, "container_pressure_cpu_waiting_seconds_total"));
        let keys = |name: &str| descriptors(false).into_iter().find(|d| d.name == name).unwrap().label_keys;
        assert_eq!(keys("container_blkio_device_usage_total")[6..], ["device", "major", "minor", "operation"]);
        assert_eq!(keys("container_memory_failures_total")[6..], ["failure_type", "scope"]);
        assert_eq!(keys("container_cpu_usage_seconds_total")[6..], ["cpu"]);
        assert_eq!(keys("container_fs_limit_bytes")[6..], ["device"]);
        assert_eq!(keys("container_threads_max").len(), 6);
    }
}
