//! What containers and pods use, as CRI stats and metrics report it: cgroup
//! readings (cpu, memory, swap, tasks, pressure) with `usage_nano_cores`
//! between readings, a container's writable layer, and a pod's network
//! counters; for metrics also the cgroup's details (I/O per device, cpu
//! settings, kernel and peak memory), its processes' descriptors and
//! sockets, and the filesystem of the writable layers.

pub mod disk;
pub(crate) mod filesystem;
pub(crate) mod network;
pub(crate) mod processes;
pub(crate) mod refreshed_usage;
pub(crate) mod sampler;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use serde::Serialize;

use crate::cgroups::stats::CgroupDetails;
use crate::cgroups::{CgroupStats, CgroupVersion, Cgroups};
use crate::clock::now_ns;
use crate::container::{ContainerState, ContainerView};
use crate::pod::{SandboxState, SandboxView};
use disk::DiskUsage;
use filesystem::Filesystem;
use network::InterfaceUsage;
use processes::ProcessCounts;
use refreshed_usage::RefreshedUsage;
use sampler::UsageSampler;

/// One reading of a container.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ContainerUsage {
    pub(crate) id: String,
    pub(crate) at_ns: i64,
    pub(crate) cgroup: CgroupStats,
    /// Cpu cores in use since the previous reading (None: first reading).
    pub(crate) nano_cores: Option<u64>,
    /// Its writable layer (the overlay's upper directory).
    pub(crate) writable_layer: Option<DiskUsage>,
}

/// One reading of a pod: its cgroup (pause, monitors and containers), its
/// network namespace, and each of its containers.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PodUsage {
    pub(crate) id: String,
    pub(crate) at_ns: i64,
    pub(crate) cgroup: CgroupStats,
    pub(crate) nano_cores: Option<u64>,
    /// None when the pod uses the node's network (or its pause is gone).
    pub(crate) interfaces: Option<Vec<InterfaceUsage>>,
    pub(crate) containers: Vec<ContainerUsage>,
}

/// One reading of a container for metrics.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ContainerDetails {
    pub(crate) id: String,
    pub(crate) at_ns: i64,
    pub(crate) cgroup: CgroupDetails,
    /// Its processes' descriptors and sockets (None: no cgroup to list them from).
    pub(crate) processes: Option<ProcessCounts>,
    pub(crate) writable_layer: Option<DiskUsage>,
}

/// One reading of a pod for metrics: its network and its containers.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PodDetails {
    pub(crate) id: String,
    pub(crate) interfaces: Option<Vec<InterfaceUsage>>,
    pub(crate) containers: Vec<ContainerDetails>,
}

/// Takes readings; keeps the previous cpu reading of everything it read.
pub(crate) struct Collector {
    cgroups: Arc<Cgroups>,
    /// Where writable layers live (`<root>/containers`), for `fs_id`.
    pub(crate) containers_dir: PathBuf,
    sampler: UsageSampler,
    /// The device of `containers_dir`'s filesystem, once known.
    device: OnceLock<String>,
    /// Whether the node's cgroups have pressure files (cgroup v2, PSI on).
    pressure: bool,
    /// What `containers_dir` holds in all (ImageFsInfo's containers' filesystem).
    containers_usage: Arc<RefreshedUsage>,
}

impl Collector {
    pub(crate) fn new(cgroups: Arc<Cgroups>, containers_dir: PathBuf) -> Self {
        let pressure = cgroups.version == CgroupVersion::V2
            && cgroups.hierarchies.first().is_some_and(|h| h.root_dir.join("cpu.pressure").is_file());
        let containers_usage = Arc::new(RefreshedUsage::new(containers_dir.clone(), refreshed_usage::MAX_AGE));
        Self {
            cgroups,
            containers_dir,
            sampler: UsageSampler::default(),
            device: OnceLock::new(),
            pressure,
            containers_usage,
        }
    }

    /// What the containers' directories use in all: a figure at most
    /// `refreshed_usage::MAX_AGE` old (see `RefreshedUsage`).
    pub(crate) async fn containers_usage(&self) -> DiskUsage {
        self.containers_usage.get().await
    }

    /// True when the node's cgroups report pressure (PSI), which decides
    /// whether the pressure metrics are described at all.
    pub(crate) fn has_pressure(&self) -> bool {
        self.pressure
    }

    /// Reads one container (blocking: runs on a blocking thread).
    pub(crate) fn container(&self, view: &ContainerView) -> ContainerUsage {
        let at_ns = now_ns();
        let cgroup = if view.state == ContainerState::Exited {
            CgroupStats::default()
        } else {
            self.cgroups.stats(&view.record.cgroup)
        };
        let nano_cores = cgroup.cpu.as_ref().and_then(|c| self.sampler.nano_cores(&view.record.id, at_ns, c.usage_ns));
        ContainerUsage {
            id: view.record.id.clone(),
            at_ns,
            cgroup,
            nano_cores,
            writable_layer: disk::usage_of(&view.paths.upper()),
        }
    }

    /// Reads one pod and `containers` (its own).
    pub(crate) fn pod(&self, sandbox: &SandboxView, containers: &[ContainerView]) -> PodUsage {
        // The containers first: the pod's cumulative counters (CPU time), read
        // after theirs, are then never below their sum.
        let containers = containers.iter().map(|c| self.container(c)).collect();
        let at_ns = now_ns();
        let cgroup = self.cgroups.stats(&sandbox.record.pod_cgroup);
        let key = format!("pod/{}", sandbox.record.id);
        let nano_cores = cgroup.cpu.as_ref().and_then(|c| self.sampler.nano_cores(&key, at_ns, c.usage_ns));
        let interfaces = interfaces(sandbox);
        PodUsage { id: sandbox.record.id.clone(), at_ns, cgroup, nano_cores, interfaces, containers }
    }

    /// Reads one container for metrics (blocking). Unlike `container`, it
    /// leaves the cpu rate's previous reading alone.
    pub(crate) fn container_details(&self, view: &ContainerView) -> ContainerDetails {
        let at_ns = now_ns();
        let cgroup = if view.state == ContainerState::Exited {
            CgroupDetails::default()
        } else {
            self.cgroups.details(&view.record.cgroup)
        };
        let processes = cgroup.processes.as_deref().map(processes::count);
        ContainerDetails {
            id: view.record.id.clone(),
            at_ns,
            cgroup,
            processes,
            writable_layer: disk::usage_of(&view.paths.upper()),
        }
    }

    /// Reads one pod's network and `containers` (its own) for metrics.
    pub(crate) fn pod_details(&self, sandbox: &SandboxView, containers: &[ContainerView]) -> PodDetails {
        PodDetails {
            id: sandbox.record.id.clone(),
            interfaces: interfaces(sandbox),
            containers: containers.iter().map(|c| self.container_details(c)).collect(),
        }
    }

    /// The filesystem the writable layers are on (one statvfs; the mount
    /// table is read once, when first asked).
    pub(crate) fn filesystem(&self) -> Option<Filesystem> {
        let device = match self.device.get() {
            Some(device) => device.clone(),
            None => {
                let device = filesystem::mount_source_of(&self.containers_dir);
                if !device.is_empty() {
                    let _ = self.device.set(device.clone());
                }
                device
            }
        };
        filesystem::filesystem_of(&self.containers_dir, &device)
    }

    /// After a full listing: forget the readings of what no longer exists.
    pub(crate) fn keep_only<'a>(&self, containers: impl Iterator<Item = &'a str>, pods: impl Iterator<Item = &'a str>) {
        let mut alive: HashSet<String> = containers.map(String::from).collect();
        alive.extend(pods.map(|p| format!("pod/{p}")));
        self.sampler.keep_only(&alive);
    }
}

/// The interfaces of a ready pod's own network namespace (None: the node's
/// network, or no pause).
fn interfaces(sandbox: &SandboxView) -> Option<Vec<InterfaceUsage>> {
    match (&sandbox.pause, sandbox.record.namespaces.net, sandbox.state) {
        (Some(pause), true, SandboxState::Ready) => network::interfaces_of(pause.pid),
        _ => None,
    }
}
