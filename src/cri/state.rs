//! The daemon's state every CRI service shares (`Daemon`): the managers,
//! the stores, the servers beside the CRI, and what the start found. `nidus
//! serve` (`daemon.rs`) makes it and serves the CRI with it.

use std::path::PathBuf;
use std::sync::Arc;

use crate::cgroups::{Cgroups, OwnedCgroups};
use crate::config::Config;
use crate::container::Containers;
use crate::image::ImageStore;
use crate::linux::lock::LockFile;
use crate::linux::runtime_program::RuntimeProgram;
use crate::pod::Sandboxes;

/// Everything the CRI services share.
pub(crate) struct Daemon {
    pub(crate) config: Arc<Config>,
    pub(crate) cgroups: Arc<Cgroups>,
    pub(crate) sandboxes: Sandboxes,
    /// Pod networks (CNI or built-in) and NetworkReady.
    pub(crate) network: Arc<crate::network::PodNetworks>,
    pub(crate) containers: Containers,
    pub(crate) pause_binary: PathBuf,
    pub(crate) monitor_binary: PathBuf,
    pub(crate) images: Arc<ImageStore>,
    /// Pulls from registries into `images`.
    pub(crate) puller: Arc<crate::image::pull::Puller>,
    /// pause and monitor as exec'd (from read-only mounts of their files).
    pub(crate) runtime_programs: Vec<RuntimeProgram>,
    /// Cgroups nidus still has to remove (reported in Status verbose).
    pub(crate) owned_cgroups: Arc<OwnedCgroups>,
    /// Usage readings for the stats and metrics RPCs.
    pub(crate) stats: crate::stats::Collector,
    /// The Exec/Attach/PortForward session server.
    pub(crate) streaming: crate::streaming::StreamingServer,
    /// Whether pods with a user namespace of their own can work here (the
    /// probe at start), or why not.
    pub(crate) user_namespaces: Result<(), String>,
    /// Whether containers run under AppArmor profiles (the node enforces
    /// AppArmor and nidus's default profile is loaded).
    pub(crate) apparmor: bool,
    /// Container and sandbox lifecycle events (GetContainerEvents).
    pub(crate) events: crate::events::EventHub<super::Subject>,
    /// The state directories' locks, held while the daemon runs.
    pub(crate) _locks: Vec<LockFile>,
}

impl Daemon {
    /// The RuntimeReady check: state directories writable, cgroup root
    /// present, the pause program present.
    pub(crate) fn health(&self) -> Result<(), String> {
        for dir in [&self.config.root, &self.config.state] {
            nix::unistd::access(dir.as_path(), nix::unistd::AccessFlags::W_OK)
                .map_err(|e| format!("state directory {} is not writable: {e}", dir.display()))?;
        }
        for h in &self.cgroups.hierarchies {
            if !h.root_dir.is_dir() {
                return Err(format!("cgroup root {} is missing", h.root_dir.display()));
            }
        }
        for (what, program) in [("pause", &self.pause_binary), ("monitor", &self.monitor_binary)] {
            if !program.is_file() {
                return Err(format!("{what} program {} is missing", program.display()));
            }
        }
        Ok(())
    }

    /// Pods and containers by state, for the metrics.
    pub(crate) fn state_counts(&self) -> crate::metrics::StateCounts {
        use crate::container::manager::ContainerState;
        use crate::pod::manager::SandboxState;
        let (mut ready, mut not_ready) = (0, 0);
        for pod in self.sandboxes.list() {
            match pod.state {
                SandboxState::Ready => ready += 1,
                SandboxState::NotReady => not_ready += 1,
            }
        }
        let (mut created, mut running, mut exited) = (0, 0, 0);
        for container in self.containers.list() {
            match container.state {
                ContainerState::Created => created += 1,
                ContainerState::Running => running += 1,
                ContainerState::Exited => exited += 1,
            }
        }
        crate::metrics::StateCounts {
            pods: vec![("ready", ready), ("notready", not_ready)],
            containers: vec![("created", created), ("running", running), ("exited", exited)],
        }
    }

    /// Status(verbose) info: versions, config, cgroup setup.
    pub(crate) fn verbose_info(&self) -> serde_json::Value {
        serde_json::json!({
            "runtimeName": "nidus",
            "runtimeVersion": env!("CARGO_PKG_VERSION"),
            "runtimeApiVersion": super::CRI_API_VERSION,
            "servedApis": super::served_apis(&self.config.grpc),
            "config": *self.config,
            "cgroupVersion": self.cgroups.version,
            "cgroupDriver": self.cgroups.driver(),
            "systemdVersion": self.cgroups.systemd.as_ref().map(|s| s.version().to_string()),
            "cgroupHierarchies": self.cgroups.hierarchies,
            "pauseBinary": self.pause_binary,
            "monitorBinary": self.monitor_binary,
            "helpersFromReadOnlyMounts": self.runtime_programs.iter().all(RuntimeProgram::read_only),
            "staleCgroups": self.owned_cgroups.stale().iter().map(|c| c.to_string()).collect::<Vec<_>>(),
            "containers": self.containers.list().len(),
            "seccompPrograms": self.containers.seccomp_cache_stats(),
            "sandboxes": self.sandboxes.list().len(),
            "network": self.network.describe(),
            "pulls": self.puller.in_flight(),
            "appArmor": self.apparmor_info(),
        })
    }

    /// Status(verbose)'s AppArmor part: enforced or not, and the default
    /// profile's mode as the kernel lists it.
    fn apparmor_info(&self) -> serde_json::Value {
        if !self.apparmor {
            return serde_json::json!({ "enabled": crate::apparmor::enabled(), "enforced": false });
        }
        let mode = crate::apparmor::loaded_mode(crate::apparmor::DEFAULT_PROFILE);
        serde_json::json!({
            "enabled": true,
            "enforced": true,
            "defaultProfile": crate::apparmor::DEFAULT_PROFILE,
            "defaultProfileMode": match mode {
                Ok(Some(mode)) => mode,
                Ok(None) => "not loaded".to_string(),
                Err(e) => e.to_string(),
            },
        })
    }
}
