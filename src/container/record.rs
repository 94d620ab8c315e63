//! What nidus remembers of a container: the persisted record (under `root`)
//! and where each of its files lives (persistent dir and volatile run dir).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::api::{ContainerConfig, LinuxContainerResources};
use crate::cgroups::CgroupPath;
use crate::monitor::plan::ExitRecord;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Lifecycle {
    /// CreateContainer has begun; a crash now means undo it at restart.
    Creating,
    /// Made, or being built by its monitor: made once the monitor recorded
    /// the init in the run dir (a crash before that is undone at restart);
    /// its state then comes from its processes and exit record.
    Created,
}

/// The image a container was made from.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct ImageUsed {
    /// As CreateContainer named it.
    pub(crate) requested: String,
    /// The image id (`sha256:` config digest).
    pub(crate) id: String,
    /// A name to show (first repo tag, else the id).
    pub(crate) name: String,
    /// A pinned reference (first repo digest, else the id).
    pub(crate) reference: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContainerRecord {
    pub(crate) id: String,
    pub(crate) sandbox_id: String,
    /// Unique per sandbox: name and attempt.
    pub(crate) name_key: String,
    pub config: ContainerConfig,
    pub(crate) image: ImageUsed,
    pub(crate) created_at_ns: i64,
    pub(crate) lifecycle: Lifecycle,
    pub(crate) log_path: Option<PathBuf>,
    pub(crate) cgroup: CgroupPath,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) additional_gids: Vec<u32>,
    pub(crate) stop_signal: i32,
    /// oom_score_adj asked for and put in the spec (may be clamped, see README).
    pub(crate) oom_score_adj: Option<(i32, i32)>,
    /// Set in memory at StartContainer (the monitor keeps it in the run
    /// dir's started.json) and persisted with the next record write.
    pub(crate) started_at_ns: Option<i64>,
    pub(crate) exit: Option<ExitRecord>,
    /// Seccomp profile, AppArmor and SELinux requests (for status).
    #[serde(default)]
    pub(crate) security: crate::container::security::SecurityReport,
    /// The OCI hooks that applied to it at create (None: none did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) hooks: Option<crate::hooks::ContainerHooks>,
    /// The CRI resources in force (set at create, changed by
    /// UpdateContainerResources); None: none asked for.
    #[serde(default)]
    pub(crate) resources: Option<LinuxContainerResources>,
    /// Its image volumes: container path and the image's id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) image_volumes: Vec<(String, String)>,
}

/// The on-disk places of one container.
#[derive(Debug, Clone)]
pub(crate) struct ContainerPaths {
    /// Persistent: `root/containers/ID` (record, config.json, upper and work dirs).
    pub(crate) dir: PathBuf,
    /// Volatile: `state/containers/ID` (the monitor's run directory).
    pub(crate) run_dir: PathBuf,
}

impl ContainerPaths {
    pub(crate) fn new(root: &Path, state: &Path, id: &str) -> Self {
        Self { dir: root.join("containers").join(id), run_dir: state.join("containers").join(id) }
    }
    pub(crate) fn record(&self) -> PathBuf {
        self.dir.join("container.json")
    }
    pub(crate) fn spec(&self) -> PathBuf {
        self.dir.join("config.json")
    }
    /// The compiled seccomp program the init and exec helper load.
    pub(crate) fn seccomp(&self) -> PathBuf {
        self.dir.join(crate::seccomp::program::FILE_NAME)
    }
    pub(crate) fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }
    pub(crate) fn work(&self) -> PathBuf {
        self.dir.join("work")
    }
}
