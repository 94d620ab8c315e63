//! The container lifecycle: the index of containers, StartContainer,
//! StopContainer, RemoveContainer, status and listing, ExecSync,
//! UpdateContainerResources and ReopenContainerLog, and reconciling persisted
//! containers with what is alive when the daemon starts. CreateContainer is
//! `create`, checkpoints `checkpoint`, restores from them `restore`.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::api::{self, ContainerConfig};
use crate::cgroups::ahead::AheadCgroups;
use crate::cgroups::{CgroupError, CgroupPath, Cgroups, OwnedCgroups};
use crate::clock::now_ns;
use crate::config::Config;
use crate::events::{Emitter, EventKind};
use crate::linux::process::{Pidfd, ProcessIdentity};
use crate::linux::reaper::Reaper;
use crate::monitor::control::{self, ControlError, Request};
use crate::monitor::plan::{CgroupJoin, ExecRequest, ExitRecord, RunFiles, StartRecord, OOM_KILLED_REASON};
use crate::pod::SandboxView;
use crate::registry::{self, LookupError, Registry, Tracked};
use crate::store::{self, StoreError};

use super::confinement::{ConfinementError, SeccompPrograms};
use super::exec::{self, ExecError, ExecOutput};
use super::monitor_pool::MonitorPool;
use super::record::{ContainerPaths, ContainerRecord, Lifecycle};
use super::spare_dirs::SpareDirs;
use super::{ImageSource, ImageSourceError};

// One file per call (CreateContainer's in create.rs, and so on); exits.rs
// holds the exit tracking the calls share.
mod checkpoint;
mod create;
mod exec_sync;
mod exits;
mod hooks;
mod load;
mod remove;
mod reopen_log;
mod restore;
mod start;
mod status;
mod stop;
mod update_resources;

/// How long the monitor may take to build a container.
const CREATE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long after a create's build began the spares it took are replaced
/// (a spare monitor and a spare directory): a create is usually followed at
/// once by its start (kubelet, `crictl run`), together a few milliseconds
/// here, a dozen at the 99th percentile. Their start-up (about two
/// milliseconds of CPU) then comes after both rather than beside them.
const REFILL_LATER: Duration = Duration::from_millis(20);
/// How long the monitor may take to answer a control request.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a dead container's monitor may take to write its exit record.
const EXIT_RECORD_WAIT: Duration = Duration::from_secs(5);

/// Which PID namespace a container gets (CRI NamespaceOption.pid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PidMode {
    Own,
    Pod,
    Node,
    Target(String),
}

/// A validated CreateContainer request.
#[derive(Debug, Clone)]
pub struct ContainerCreate {
    pub sandbox: SandboxView,
    pub config: ContainerConfig,
    /// Unique within the sandbox: name and attempt.
    pub name_key: String,
    pub pid: PidMode,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ContainerError {
    #[error("container {} not found", crate::quote::quote(.0))]
    NotFound(String),
    #[error("container id prefix {} matches more than one container", crate::quote::quote(.0))]
    Ambiguous(String),
    #[error("a container named {} already exists in sandbox {sandbox}: {id}", crate::quote::quote(.name))]
    NameInUse { name: String, sandbox: String, id: String },
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Precondition(String),
    #[error(transparent)]
    Image(#[from] ImageSourceError),
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error("building the container failed: {0}")]
    Build(String),
    #[error("starting the container failed: {0}")]
    Start(String),
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error(transparent)]
    Confinement(#[from] ConfinementError),
    #[error(transparent)]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
}

impl From<LookupError> for ContainerError {
    fn from(e: LookupError) -> Self {
        match e {
            LookupError::NotFound(id) => Self::NotFound(id),
            LookupError::Ambiguous(id) => Self::Ambiguous(id),
        }
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> ContainerError {
    let what = what.into();
    move |source| ContainerError::Io { what, source }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ContainerState {
    Created,
    Running,
    Exited,
}

/// A snapshot of one container for status and listing.
#[derive(Debug, Clone)]
pub struct ContainerView {
    /// Shared with the container's entry: a view copies no record.
    pub record: Arc<ContainerRecord>,
    pub(crate) state: ContainerState,
    pub(crate) started_at_ns: Option<i64>,
    pub(crate) exit: Option<ExitRecord>,
    pub(crate) init: Option<ProcessIdentity>,
    /// How the init joined its cgroup (while its run directory exists).
    pub(crate) cgroup_join: Option<CgroupJoin>,
    pub(crate) paths: ContainerPaths,
}

struct InitProcess {
    identity: ProcessIdentity,
    pidfd: Pidfd,
}

/// A container in the index: its record, its init and its exit.
struct Live {
    record: Arc<ContainerRecord>,
    init: Option<InitProcess>,
    /// Exit seen but perhaps not persisted yet.
    exit: Option<ExitRecord>,
    /// How the init joined its cgroup (a fact of this boot: kept in the run dir).
    cgroup_join: Option<CgroupJoin>,
}

impl Live {
    fn new(record: ContainerRecord, init: Option<InitProcess>, cgroup_join: Option<CgroupJoin>) -> Self {
        let exit = record.exit.clone();
        Self { record: Arc::new(record), init, exit, cgroup_join }
    }
}

impl Tracked for Live {
    type Record = ContainerRecord;
    fn record_mut(&mut self) -> &mut Arc<ContainerRecord> {
        &mut self.record
    }
}

type Entry = registry::Entry<Live>;

pub(crate) struct Containers {
    config: Arc<Config>,
    cgroups: Arc<Cgroups>,
    owned_cgroups: Arc<OwnedCgroups>,
    /// The pods' first container cgroups, made ahead (v1).
    ahead: Arc<AheadCgroups>,
    reaper: Reaper,
    /// Spare monitors, and the binary of monitors and the exec helper.
    monitors: Arc<MonitorPool>,
    /// Spare container directories (as many as spare monitors).
    dirs: Arc<SpareDirs>,
    images: Arc<dyn ImageSource>,
    /// The containers by id and by name slot (also those being created).
    index: Registry<Live>,
    /// The RuntimeDefault profile and compiled seccomp programs, by content.
    seccomp: Arc<SeccompPrograms>,
    /// The OCI hook definitions of the `[hooks] dirs`.
    hooks: crate::hooks::HookRegistry,
    /// The CDI devices of the `[cdi] spec_dirs` (read at the first create that asks for one).
    cdi: Arc<crate::cdi::CdiRegistry>,
    /// Where lifecycle events go (GetContainerEvents).
    events: Emitter<ContainerView>,
    /// Counts OOM kills.
    metrics: crate::metrics::Metrics,
    /// Whether the node enforces AppArmor (containers then run under their
    /// profile; see `security::apparmor_profile`).
    pub(super) apparmor: bool,
}

fn name_slot(sandbox_id: &str, name_key: &str) -> String {
    format!("{sandbox_id}/{name_key}")
}

impl Containers {
    pub(crate) fn new(
        config: Arc<Config>,
        cgroups: Arc<Cgroups>,
        owned_cgroups: Arc<OwnedCgroups>,
        ahead: Arc<AheadCgroups>,
        reaper: Reaper,
        monitor_binary: PathBuf,
        images: Arc<dyn ImageSource>,
    ) -> Self {
        let spare_monitors = config.container.spare_monitors;
        // Beside the run dirs the spares' directories are renamed to.
        let spare_root = config.state.join("spare-monitors");
        // Beside the containers' directories the spares are renamed to.
        let dirs = SpareDirs::new(config.root.join("spare-containers"), spare_monitors);
        let seccomp = Arc::new(SeccompPrograms::new(config.limits.seccomp_profile_bytes));
        let hooks = crate::hooks::HookRegistry::new(config.hooks.dirs.clone());
        hooks.load_now();
        // Read now too, so that a broken spec file is reported before the first container.
        let cdi = Arc::new(crate::cdi::CdiRegistry::new(config.cdi.spec_dirs.clone()));
        cdi.devices();
        Self {
            config,
            cgroups,
            owned_cgroups,
            ahead,
            reaper,
            monitors: MonitorPool::new(monitor_binary, spare_monitors, spare_root),
            dirs,
            images,
            index: Registry::default(),
            seccomp,
            hooks,
            cdi,
            events: Emitter::default(),
            metrics: crate::metrics::Metrics::off(),
            apparmor: false,
        }
    }

    /// Confines containers with AppArmor (the node enforces it, and nidus's
    /// default profile is loaded).
    pub(crate) fn confined_by_apparmor(mut self, enabled: bool) -> Self {
        self.apparmor = enabled;
        self
    }

    /// Reports lifecycle events to `events` (instead of a hub of its own).
    pub(crate) fn reporting_to(mut self, events: Emitter<ContainerView>) -> Self {
        self.events = events;
        self
    }

    /// Where OOM kills are counted.
    pub(crate) fn observed_by(mut self, metrics: crate::metrics::Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Reports `kind` with the container as it is now.
    fn emit(&self, kind: EventKind, entry: &Entry) {
        self.events.emit(kind, || self.view_of(entry));
    }

    /// Starts the spare monitors and makes the spare container directories
    /// (in the background).
    pub(crate) fn refill_spares(&self) {
        self.monitors.refill();
        self.dirs.refill();
    }

    /// `refill_spares` after `REFILL_LATER` (nothing then if the spares are
    /// all there): for a create whose build has begun.
    fn refill_spares_later(&self) {
        if self.monitors.full() && self.dirs.full() {
            return;
        }
        let (monitors, dirs) = (self.monitors.clone(), self.dirs.clone());
        tokio::spawn(async move {
            tokio::time::sleep(REFILL_LATER).await;
            monitors.refill();
            dirs.refill();
        });
    }

    /// Compiled seccomp programs: how many, compiled and reused since start.
    pub(crate) fn seccomp_cache_stats(&self) -> crate::seccomp::cache::CacheStats {
        self.seccomp.cache_stats()
    }

    fn paths(&self, id: &str) -> ContainerPaths {
        ContainerPaths::new(&self.config.root, &self.config.state, id)
    }

    pub(crate) fn resolve(&self, id: &str) -> Result<String, ContainerError> {
        Ok(self.index.resolve(id)?)
    }

    fn entry(&self, id: &str) -> Result<(String, Arc<Entry>), ContainerError> {
        Ok(self.index.get(id)?)
    }
}

struct WatchHandle {
    entry: Arc<Entry>,
    id: String,
}

/// The init's exit as its monitor records it once the init is gone: the
/// monitor writes `exit.json` and then ends, so this waits (up to
/// EXIT_RECORD_WAIT) for the monitor's end; a monitor that ended without a
/// record (killed) leaves a lost exit.
async fn recorded_exit(run_dir: &Path) -> ExitRecord {
    let files = RunFiles::new(run_dir);
    let read = || store::read_json::<ExitRecord>(&files.exit()).ok().flatten();
    if let Some(exit) = read() {
        return exit;
    }
    let monitor: Option<ProcessIdentity> = store::read_json(&files.monitor()).unwrap_or(None);
    if let Some(pidfd) = monitor.and_then(|m| m.open_pidfd()) {
        let _ = tokio::time::timeout(EXIT_RECORD_WAIT, pidfd.exited()).await;
    }
    read().unwrap_or_else(lost_exit)
}

/// When the init's execve succeeded, as its monitor recorded it (started.json).
fn recorded_start(files: &RunFiles) -> Option<i64> {
    store::read_json::<StartRecord>(&files.started()).ok().flatten().map(|s| s.started_at_ns)
}

/// Whether the daemon ended while a CreateContainer was building the init:
/// the run dir is there (no reboot since) but the monitor never recorded an
/// init in it (it records the init once forked, and takes the record back
/// when the build fails).
fn interrupted_create(files: &RunFiles) -> bool {
    files.dir.is_dir() && !files.init().exists()
}

/// The exit of a container whose monitor died before recording it (or of a
/// container that did not survive a reboot).
fn lost_exit() -> ExitRecord {
    ExitRecord {
        exit_code: 255,
        signal: None,
        finished_at_ns: now_ns(),
        reason: "Unknown".into(),
        message: "the container's exit status was lost (its monitor is gone, or the node rebooted)".into(),
    }
}

/// A resource the node cannot enforce, as the bad input it is.
fn resources_invalid(field: &'static str) -> impl Fn(crate::cgroups::Unenforceable) -> ContainerError {
    move |e| ContainerError::Invalid(format!("{field}.{e}"))
}

/// A failed apply: bad input when the node refused a value, else internal.
fn apply_error(field: &'static str) -> impl Fn(CgroupError) -> ContainerError {
    move |e| match e {
        CgroupError::Unenforceable(e) => ContainerError::Invalid(format!("{field}.{e}")),
        other => ContainerError::Cgroup(other),
    }
}
