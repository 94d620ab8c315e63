//! What the daemon hands a container's monitor, and the files the monitor
//! leaves in the container's volatile run directory for the daemon to read.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub(crate) use crate::wire::{CgroupJoin, MonitorAssignment};

impl MonitorPlan {
    /// Where the log file goes, confined to the pod's log directory.
    pub(crate) fn log_location(&self) -> Option<crate::linux::log_file::LogLocation<'_>> {
        let file = self.log_path.as_deref()?;
        let directory = self.log_directory.as_deref().or_else(|| file.parent())?;
        crate::linux::log_file::LogLocation::split(directory, file)
    }
}

/// The monitor's instructions besides the OCI spec (`bundle/config.json`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct MonitorPlan {
    pub(crate) container_id: String,
    /// Directory holding `config.json`.
    pub(crate) bundle: PathBuf,
    /// The container's volatile directory: socket and records (see RunFiles).
    pub(crate) run_dir: PathBuf,
    /// The CRI log file; None: output is read and dropped.
    pub(crate) log_path: Option<PathBuf>,
    /// The pod's log directory (kubelet's `log_directory`), which the log
    /// file must stay in; plans written before it existed use the file's parent.
    #[serde(default)]
    pub(crate) log_directory: Option<PathBuf>,
    pub(crate) rootfs: RootfsPlan,
    /// `cgroup.procs` of the container cgroup in every hierarchy.
    pub(crate) cgroup_procs: Vec<PathBuf>,
    /// How to show the container its cgroups at /sys/fs/cgroup.
    pub(crate) cgroup_mounts: Vec<CgroupMount>,
    /// Keep stdin open for attach (CRI `stdin`).
    pub(crate) stdin: bool,
    /// The container cgroup's directory in the memory hierarchy, where the
    /// monitor reads the OOM kills once the init has ended.
    #[serde(default)]
    pub(crate) memory_cgroup: Option<PathBuf>,
    /// cgroup v2: the container cgroup's directory, which the init is cloned
    /// straight into (clone3 with CLONE_INTO_CGROUP).
    #[serde(default)]
    pub(crate) clone_into_cgroup: Option<PathBuf>,
    /// Restore the init from a checkpoint (CRIU) instead of building it.
    #[serde(default)]
    pub(crate) restore: Option<RestorePlan>,
    /// The init the monitor forked ahead may build this container: the
    /// container has a PID namespace of its own, no terminal, and is not
    /// restored (that init is its namespace's PID 1, with pipes for stdio).
    #[serde(default)]
    pub(crate) prepared_init_fits: bool,
    /// The OCI hooks that apply to the container (None: no hook runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) hooks: Option<crate::hooks::ContainerHooks>,
}

/// How the monitor restores a checkpointed container (`criu restore`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct RestorePlan {
    pub(crate) criu: PathBuf,
    /// CRIU's images (the archive's `checkpoint/`).
    pub(crate) images: PathBuf,
    /// Where `restore.log` goes.
    pub(crate) work_dir: PathBuf,
    /// CRIU's names of the checkpointed init's stdout and stderr pipes.
    pub(crate) stdout_pipe: String,
    pub(crate) stderr_pipe: String,
    /// The new sandbox's network namespace (for CRIU's external `extNetNs`).
    pub(crate) net_ns: PathBuf,
    /// The new pod's namespaces CRIU runs (and so restores) in: (`uts`, path), (`ipc`, path).
    pub(crate) join_ns: Vec<(String, PathBuf)>,
    /// Bind mounts: CRIU key → the new source on the host.
    pub(crate) external_mounts: Vec<(String, PathBuf)>,
}

/// The overlay that becomes the container's root.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct RootfsPlan {
    /// Image layers, lowest first.
    pub(crate) lower: Vec<PathBuf>,
    pub(crate) upper: PathBuf,
    pub(crate) work: PathBuf,
}

/// The mount type of an image volume in the spec (nidus's own: an overlay of
/// the layers, read-only, or one layer bound read-only), which the init mounts.
pub(crate) const IMAGE_VOLUME_TYPE: &str = "nidus-image";

/// The PATH of a container's process when neither its image nor its config
/// sets one (the init looks its command up there then).
pub(crate) const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// One cgroup filesystem to mount under /sys/fs/cgroup.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct CgroupMount {
    /// Directory below /sys/fs/cgroup ("" for the cgroup2 root itself).
    pub(crate) dir: String,
    /// `cgroup` or `cgroup2`.
    pub(crate) fstype: String,
    /// Mount data, e.g. the v1 controller list `cpu,cpuacct`.
    pub(crate) data: String,
}

/// How a container ended, written atomically by its monitor.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct ExitRecord {
    pub(crate) exit_code: i32,
    /// The signal that killed the init, if one did.
    pub(crate) signal: Option<i32>,
    pub(crate) finished_at_ns: i64,
    pub(crate) reason: String,
    pub(crate) message: String,
}

/// When the container's process started (execve succeeded).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct StartRecord {
    pub(crate) started_at_ns: i64,
}

/// Reason kubelet sees for a container whose processes the kernel's OOM
/// killer killed (exactly this spelling).
pub(crate) const OOM_KILLED_REASON: &str = "OOMKilled";

/// Reason and exit code kubelet sees for a start that failed.
pub(crate) const START_ERROR_REASON: &str = "StartError";
pub(crate) const START_ERROR_EXIT_CODE: i32 = 128;

/// The files of a container's run directory.
#[derive(Debug, Clone)]
pub(crate) struct RunFiles {
    pub(crate) dir: PathBuf,
}

impl RunFiles {
    pub(crate) fn new(dir: &Path) -> Self {
        Self { dir: dir.to_path_buf() }
    }
    /// The monitor's instructions.
    pub(crate) fn plan(&self) -> PathBuf {
        self.dir.join("plan.json")
    }
    /// Identity of the container's init process (pid, start time, boot).
    pub(crate) fn init(&self) -> PathBuf {
        self.dir.join("init.json")
    }
    /// Identity of the monitor process.
    pub(crate) fn monitor(&self) -> PathBuf {
        self.dir.join("monitor.json")
    }
    /// How the init joined its cgroup (`CgroupJoin`).
    pub(crate) fn cgroup_join(&self) -> PathBuf {
        self.dir.join("cgroup-join.json")
    }
    pub(crate) fn started(&self) -> PathBuf {
        self.dir.join("started.json")
    }
    pub(crate) fn exit(&self) -> PathBuf {
        self.dir.join("exit.json")
    }
    /// The control socket (start, reopen-log).
    pub(crate) fn socket(&self) -> PathBuf {
        self.dir.join("monitor.sock")
    }
    /// The monitor's own diagnostics.
    pub(crate) fn monitor_log(&self) -> PathBuf {
        self.dir.join("monitor.log")
    }
    /// The restored init's pid, as `criu restore --pidfile` writes it.
    pub(crate) fn restored_pid(&self) -> PathBuf {
        self.dir.join("restored.pid")
    }
    /// Mount point of the rootfs (inside the container's mount namespace only).
    pub(crate) fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs")
    }
}

/// What `nidus-monitor exec` runs inside a running container (ExecSync): the
/// command, with the user, capabilities, environment and working directory of
/// the container's own process (from its OCI spec).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExecRequest {
    /// Directory holding the container's `config.json`.
    pub(crate) bundle: PathBuf,
    /// The container's init, whose namespaces the command joins.
    pub(crate) init: crate::linux::process::ProcessIdentity,
    /// `cgroup.procs` of the container cgroup in every hierarchy.
    pub(crate) cgroup_procs: Vec<PathBuf>,
    pub(crate) argv: Vec<String>,
    /// stdin, stdout and stderr are a terminal, which becomes the command's
    /// controlling terminal (streaming Exec with `tty`).
    #[serde(default)]
    pub(crate) tty: bool,
}
