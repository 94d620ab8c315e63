//! What nidus remembers of a sandbox: the persisted record (under `root`), the
//! volatile pause record (under `state`, gone at reboot), and where each of a
//! sandbox's files lives.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::api::{LinuxContainerResources, PodSandboxConfig};
use crate::cgroups::CgroupPath;
use crate::linux::namespaces::NewNamespaces;

/// Where a sandbox is in its life, as persisted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Lifecycle {
    /// RunPodSandbox has begun; a crash now means undo everything at restart.
    Creating,
    /// Made; ready while its pause process lives.
    Created,
    /// StopPodSandbox done: pause gone, mounts released.
    Stopped,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub(crate) id: String,
    /// The reservation key: name, namespace, uid and attempt.
    pub name_key: String,
    pub config: PodSandboxConfig,
    pub(crate) runtime_handler: String,
    pub(crate) created_at_ns: i64,
    pub(crate) lifecycle: Lifecycle,
    pub(crate) namespaces: NewNamespaces,
    /// The pod's own user namespace (held by the pause, owning the pod's
    /// other namespaces); None: the node's.
    #[serde(default)]
    pub(crate) userns: Option<crate::linux::userns::IdMaps>,
    pub(crate) hostname: String,
    /// The pod cgroup (kubelet's cgroup_parent, or nidus's default).
    pub(crate) pod_cgroup: CgroupPath,
    /// The pause process's own cgroup, below the pod cgroup.
    pub(crate) pause_cgroup: CgroupPath,
    /// True when the pod has its own /dev/shm tmpfs.
    pub(crate) own_shm: bool,
    /// Pod-level resources set by UpdatePodSandboxResources (None: the
    /// config's `linux.resources` and `linux.overhead` are in force).
    #[serde(default)]
    pub(crate) resources: Option<PodResources>,
}

/// What the pod cgroup is limited to: the pod's resources plus its overhead.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PodResources {
    pub overhead: LinuxContainerResources,
    pub resources: LinuxContainerResources,
}

impl SandboxRecord {
    /// True when nidus named the pod cgroup (`<default parent>/<pod id>`,
    /// made for this pod alone) and so removes it with the pod; false for a
    /// `cgroup_parent` the client gave (kubelet's `pod<uid>`, which kubelet
    /// removes). A client cannot give the pod's id: nidus draws it.
    /// With the systemd driver nidus's own is the slice `<default parent>-pod<id>.slice`.
    pub(crate) fn owns_pod_cgroup(&self) -> bool {
        let own_slice = format!("-pod{}.slice", self.id);
        self.pod_cgroup.as_str().rsplit('/').next().is_some_and(|leaf| leaf == self.id || leaf.ends_with(&own_slice))
    }

    /// The pod resources in force.
    pub fn pod_resources(&self) -> PodResources {
        self.resources.clone().unwrap_or_else(|| {
            let linux = self.config.linux.clone().unwrap_or_default();
            PodResources {
                overhead: linux.overhead.unwrap_or_default(),
                resources: linux.resources.unwrap_or_default(),
            }
        })
    }
}

/// The on-disk places of one sandbox.
#[derive(Debug, Clone)]
pub(crate) struct SandboxPaths {
    /// Persistent: `root/sandboxes/ID`.
    pub(crate) dir: PathBuf,
    /// Volatile: `state/sandboxes/ID`.
    pub(crate) run_dir: PathBuf,
}

impl SandboxPaths {
    pub(crate) fn new(root: &Path, state: &Path, id: &str) -> Self {
        Self { dir: root.join("sandboxes").join(id), run_dir: state.join("sandboxes").join(id) }
    }

    pub(crate) fn record(&self) -> PathBuf {
        self.dir.join("sandbox.json")
    }
    pub(crate) fn hostname(&self) -> PathBuf {
        self.dir.join("hostname")
    }
    pub(crate) fn hosts(&self) -> PathBuf {
        self.dir.join("hosts")
    }
    pub(crate) fn resolv_conf(&self) -> PathBuf {
        self.dir.join("resolv.conf")
    }
    pub(crate) fn pause(&self) -> PathBuf {
        self.run_dir.join("pause.json")
    }
    pub(crate) fn shm(&self) -> PathBuf {
        self.run_dir.join("shm")
    }
}
