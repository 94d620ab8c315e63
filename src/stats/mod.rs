//! What containers and pods use, as CRI stats and metrics report it: cgroup
//! readings (cpu, memory, swap, processes) with `usage_nano_cores` between
//! readings, a container's writable layer, and a pod's network counters.

pub mod disk;
pub mod network;
pub mod sampler;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use crate::cgroups::{CgroupStats, Cgroups};
use crate::container::{ContainerState, ContainerView};
use crate::pod::manager::now_ns;
use crate::pod::{SandboxState, SandboxView};
use disk::DiskUsage;
use network::InterfaceUsage;
use sampler::UsageSampler;

/// One reading of a container.
#[derive(Debug, Clone, Serialize)]
pub struct ContainerUsage {
    pub id: String,
    pub at_ns: i64,
    pub cgroup: CgroupStats,
    /// Cpu cores in use since the previous reading (None: first reading).
    pub nano_cores: Option<u64>,
    /// Its writable layer (the overlay's upper directory).
    pub writable_layer: Option<DiskUsage>,
}

/// One reading of a pod: its cgroup (pause, monitors and containers), its
/// network namespace, and each of its containers.
#[derive(Debug, Clone, Serialize)]
pub struct PodUsage {
    pub id: String,
    pub at_ns: i64,
    pub cgroup: CgroupStats,
    pub nano_cores: Option<u64>,
    /// None when the pod uses the node's network (or its pause is gone).
    pub interfaces: Option<Vec<InterfaceUsage>>,
    pub containers: Vec<ContainerUsage>,
}

/// Takes readings; keeps the previous cpu reading of everything it read.
pub struct Collector {
    cgroups: Arc<Cgroups>,
    /// Where writable layers live (`<root>/containers`), for `fs_id`.
    pub containers_dir: PathBuf,
    sampler: UsageSampler,
}

impl Collector {
    pub fn new(cgroups: Arc<Cgroups>, containers_dir: PathBuf) -> Self {
        Self { cgroups, containers_dir, sampler: UsageSampler::default() }
    }

    /// Reads one container (blocking: runs on a blocking thread).
    pub fn container(&self, view: &ContainerView) -> ContainerUsage {
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
    pub fn pod(&self, sandbox: &SandboxView, containers: &[ContainerView]) -> PodUsage {
        // The containers first: the pod's cumulative counters (CPU time), read
        // after theirs, are then never below their sum.
        let containers = containers.iter().map(|c| self.container(c)).collect();
        let at_ns = now_ns();
        let cgroup = self.cgroups.stats(&sandbox.record.pod_cgroup);
        let key = format!("pod/{}", sandbox.record.id);
        let nano_cores = cgroup.cpu.as_ref().and_then(|c| self.sampler.nano_cores(&key, at_ns, c.usage_ns));
        let interfaces = match (&sandbox.pause, sandbox.record.namespaces.net, sandbox.state) {
            (Some(pause), true, SandboxState::Ready) => network::interfaces_of(pause.pid),
            _ => None,
        };
        PodUsage { id: sandbox.record.id.clone(), at_ns, cgroup, nano_cores, interfaces, containers }
    }

    /// After a full listing: forget the readings of what no longer exists.
    pub fn keep_only<'a>(&self, containers: impl Iterator<Item = &'a str>, pods: impl Iterator<Item = &'a str>) {
        let mut alive: HashSet<String> = containers.map(String::from).collect();
        alive.extend(pods.map(|p| format!("pod/{p}")));
        self.sampler.keep_only(&alive);
    }
}
