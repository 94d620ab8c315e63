//! The container lifecycle: the index of containers, StartContainer,
//! StopContainer, RemoveContainer, status and listing, ExecSync,
//! UpdateContainerResources and ReopenContainerLog, and reconciling persisted
//! containers with what is alive when the daemon starts. CreateContainer is
//! `create`, checkpoints `checkpoint`, restores from them `restore`.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::api::{self, ContainerConfig};
use crate::cgroups::ahead::AheadCgroups;
use crate::cgroups::{CgroupError, CgroupPath, Cgroups, OwnedCgroups};
use crate::clock::now_ns;
use crate::config::Config;
use crate::events::{EventHub, EventKind, Subject};
use crate::ids::{self, Resolved};
use crate::linux::process::{Pidfd, ProcessIdentity};
use crate::linux::reaper::Reaper;
use crate::monitor::control::{self, ControlError, Request};
use crate::monitor::plan::{CgroupJoin, ExecRequest, ExitRecord, RunFiles, StartRecord, OOM_KILLED_REASON};
use crate::pod::SandboxView;
use crate::store::{self, StoreError};

use super::confinement::{ConfinementError, SeccompPrograms};
use super::exec::{self, ExecError, ExecOutput};
use super::monitor_pool::MonitorPool;
use super::record::{ContainerPaths, ContainerRecord, Lifecycle};
use super::spare_dirs::SpareDirs;
use super::{ImageSource, ImageSourceError};

mod checkpoint;
mod create;
mod hooks;
mod restore;
pub use checkpoint::CheckpointReport;

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
pub enum ContainerError {
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

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> ContainerError {
    let what = what.into();
    move |source| ContainerError::Io { what, source }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerState {
    Created,
    Running,
    Exited,
}

/// A snapshot of one container for status and listing.
#[derive(Debug, Clone)]
pub struct ContainerView {
    pub record: ContainerRecord,
    pub state: ContainerState,
    pub started_at_ns: Option<i64>,
    pub exit: Option<ExitRecord>,
    pub init: Option<ProcessIdentity>,
    /// How the init joined its cgroup (while its run directory exists).
    pub cgroup_join: Option<CgroupJoin>,
    pub paths: ContainerPaths,
}

struct InitProcess {
    identity: ProcessIdentity,
    pidfd: Pidfd,
}

struct Live {
    record: ContainerRecord,
    init: Option<InitProcess>,
    /// Exit seen but perhaps not persisted yet.
    exit: Option<ExitRecord>,
    removed: bool,
    /// How the init joined its cgroup (a fact of this boot: kept in the run dir).
    cgroup_join: Option<CgroupJoin>,
}

struct Entry {
    /// Serialises lifecycle operations (and so record writes) on this container.
    op: tokio::sync::Mutex<()>,
    live: Mutex<Live>,
}

impl Entry {
    fn new(record: ContainerRecord, init: Option<InitProcess>, cgroup_join: Option<CgroupJoin>) -> Arc<Self> {
        let exit = record.exit.clone();
        Arc::new(Self {
            op: tokio::sync::Mutex::new(()),
            live: Mutex::new(Live { record, init, exit, removed: false, cgroup_join }),
        })
    }

    fn live(&self) -> MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Default)]
struct Index {
    by_id: HashMap<String, Arc<Entry>>,
    /// sandbox id + name key → container id (including containers being created).
    names: HashMap<String, String>,
}

pub struct Containers {
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
    index: Mutex<Index>,
    /// The RuntimeDefault profile and compiled seccomp programs, by content.
    seccomp: Arc<SeccompPrograms>,
    /// The OCI hook definitions of the `[hooks] dirs`.
    hooks: crate::hooks::HookRegistry,
    /// The CDI devices of the `[cdi] spec_dirs` (read at the first create that asks for one).
    cdi: Arc<crate::cdi::CdiRegistry>,
    /// Where lifecycle events go (GetContainerEvents).
    events: EventHub,
    /// Counts OOM kills.
    metrics: crate::metrics::Metrics,
}

fn name_slot(sandbox_id: &str, name_key: &str) -> String {
    format!("{sandbox_id}/{name_key}")
}

impl Containers {
    pub fn new(
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
            index: Mutex::default(),
            seccomp,
            hooks,
            cdi,
            events: EventHub::default(),
            metrics: crate::metrics::Metrics::off(),
        }
    }

    /// Reports lifecycle events to `events` (instead of a hub of its own).
    pub fn reporting_to(mut self, events: EventHub) -> Self {
        self.events = events;
        self
    }

    /// Where OOM kills are counted.
    pub fn observed_by(mut self, metrics: crate::metrics::Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Reports `kind` with the container as it is now.
    fn emit(&self, kind: EventKind, entry: &Entry) {
        self.events.emit(kind, || self.view_of(entry).map(|v| Subject::Container(Box::new(v))));
    }

    /// Starts the spare monitors and makes the spare container directories
    /// (in the background).
    pub fn refill_spares(&self) {
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
    pub fn seccomp_cache_stats(&self) -> crate::seccomp::cache::CacheStats {
        self.seccomp.cache_stats()
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn paths(&self, id: &str) -> ContainerPaths {
        ContainerPaths::new(&self.config.root, &self.config.state, id)
    }

    pub fn resolve(&self, id: &str) -> Result<String, ContainerError> {
        let index = self.index();
        match ids::resolve(id, index.by_id.keys().map(String::as_str)) {
            Resolved::One(found) => Ok(found.to_string()),
            Resolved::None => Err(ContainerError::NotFound(id.to_string())),
            Resolved::Ambiguous => Err(ContainerError::Ambiguous(id.to_string())),
        }
    }

    fn entry(&self, id: &str) -> Result<(String, Arc<Entry>), ContainerError> {
        let id = self.resolve(id)?;
        let entry = self.index().by_id.get(&id).cloned().ok_or_else(|| ContainerError::NotFound(id.clone()))?;
        Ok((id, entry))
    }

    // ---- StartContainer ----

    pub async fn start(&self, id: &str) -> Result<(), ContainerError> {
        let (id, entry) = self.entry(id)?;
        let _op = entry.op.lock().await;
        let view = self.view_of(&entry).ok_or_else(|| ContainerError::NotFound(id.clone()))?;
        if view.state != ContainerState::Created {
            return Err(ContainerError::Precondition(format!(
                "container {id} is {}, not created",
                format!("{:?}", view.state).to_lowercase()
            )));
        }
        let files = RunFiles::new(&view.paths.run_dir);
        let result = control::call(&files.socket(), Request::Start, CONTROL_TIMEOUT).await;
        match result {
            Ok(()) => {
                // The start time stays in the run dir (started.json, the
                // monitor's) and in memory: like the init's pid it is a fact
                // of this boot, folded into the durable record with the exit.
                entry.live().record.started_at_ns = Some(recorded_start(&files).unwrap_or_else(now_ns));
                tracing::info!(container_id = %id, "container started");
                self.emit(EventKind::Started, &entry);
                self.run_poststart(&view.record, view.init.as_ref().map(|i| i.pid)).await;
                Ok(())
            }
            Err(ControlError::Refused(why)) => {
                // The init exits after a failed execve: wait for its exit record.
                self.await_exit(&entry).await;
                tracing::warn!(container_id = %id, error = %why, "container start failed");
                Err(ContainerError::Start(why))
            }
            Err(e) => Err(e.into()),
        }
    }

    // ---- StopContainer ----

    /// Sends the stop signal, waits `timeout`, then kills everything in the
    /// container; returns once it is dead and its exit is recorded.
    /// Idempotent, as the CRI has it: a container that is unknown, or
    /// removed meanwhile, is already stopped.
    pub async fn stop(&self, id: &str, timeout: Duration) -> Result<(), ContainerError> {
        let (id, entry) = match self.entry(id) {
            Ok(found) => found,
            Err(ContainerError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let _op = entry.op.lock().await;
        match self.stop_locked(&id, &entry, timeout).await {
            Err(ContainerError::NotFound(_)) => Ok(()),
            other => other,
        }
    }

    async fn stop_locked(&self, id: &str, entry: &Entry, timeout: Duration) -> Result<(), ContainerError> {
        let (pidfd_alive, stop_signal, cgroup, started) = {
            let live = entry.live();
            if live.removed {
                return Err(ContainerError::NotFound(id.to_string()));
            }
            let alive = live.init.as_ref().is_some_and(|i| !i.pidfd.has_exited());
            (alive, live.record.stop_signal, live.record.cgroup.clone(), live.record.started_at_ns.is_some())
        };
        if pidfd_alive {
            if started && !timeout.is_zero() {
                self.signal_init(entry, stop_signal);
                let exited = {
                    let waiter = self.init_exit_waiter(entry);
                    tokio::time::timeout(timeout, waiter).await.is_ok()
                };
                if !exited {
                    tracing::info!(container_id = %id, "stop timeout passed; killing");
                }
            }
            self.kill_all(&cgroup).await;
            let waiter = self.init_exit_waiter(entry);
            if tokio::time::timeout(Duration::from_secs(10), waiter).await.is_err() {
                return Err(ContainerError::Build(format!("container {id} did not die after SIGKILL")));
            }
        }
        // Whatever it left in a shared PID namespace goes too.
        self.kill_all(&cgroup).await;
        self.await_exit(entry).await;
        Ok(())
    }

    fn signal_init(&self, entry: &Entry, signal: i32) {
        let live = entry.live();
        if let Some(init) = &live.init {
            if let Err(e) = init.pidfd.send_signal(signal) {
                tracing::warn!(container_id = %live.record.id, error = %e, "cannot signal the container");
            }
        }
    }

    /// A future that resolves when the init exits (at once if there is none).
    fn init_exit_waiter(&self, entry: &Entry) -> impl std::future::Future<Output = ()> + Send + 'static {
        let identity = entry.live().init.as_ref().map(|i| i.identity.clone());
        async move {
            if let Some(pidfd) = identity.and_then(|i| i.open_pidfd()) {
                pidfd.exited().await;
            }
        }
    }

    /// SIGKILLs every process in the container cgroup until it is empty.
    async fn kill_all(&self, cgroup: &CgroupPath) {
        for _ in 0..200 {
            if self.cgroups.pids(cgroup).is_empty() {
                return;
            }
            self.cgroups.kill(cgroup);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits (briefly) for the monitor's exit record of a dead init, and keeps it.
    async fn await_exit(&self, entry: &Entry) {
        let (id, run_dir, already) = {
            let live = entry.live();
            (
                live.record.id.clone(),
                self.paths(&live.record.id).run_dir,
                live.exit.is_some() && live.record.exit.is_some(),
            )
        };
        if !already {
            let exit = recorded_exit(&run_dir).await;
            {
                let mut live = entry.live();
                live.exit = Some(exit.clone());
                live.init = None;
            }
            if exit.reason == OOM_KILLED_REASON {
                self.metrics.oom_killed();
            }
            if let Err(e) = self.update_record(&id, entry, |r| r.exit = Some(exit)) {
                tracing::warn!(container_id = %id, error = %e, "cannot record the container's exit");
            }
            self.emit(EventKind::Stopped, entry);
        }
        let record = entry.live().record.clone();
        hooks::poststop_if_pending(&record, &self.paths(&id)).await;
    }

    /// Keeps the exit of a container that ends on its own.
    fn watch(&self, id: String, entry: Arc<Entry>) {
        let waiter = self.init_exit_waiter(&entry);
        let this = WatchHandle { entry, id };
        let run_dir = self.paths(&this.id).run_dir;
        let paths = self.paths(&this.id);
        let record_path = paths.record();
        let events = self.events.clone();
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            waiter.await;
            // Let an operation that already handles the exit finish first.
            let _op = this.entry.op.lock().await;
            if this.entry.live().removed {
                return;
            }
            let exit = recorded_exit(&run_dir).await;
            if exit.reason == OOM_KILLED_REASON {
                metrics.oom_killed();
            }
            let (record, cgroup_join) = {
                let mut live = this.entry.live();
                if live.record.exit.is_some() {
                    return;
                }
                live.exit = Some(exit.clone());
                live.record.exit = Some(exit);
                (live.record.clone(), live.cgroup_join)
            };
            if let Err(e) = store::write_json(&record_path, &record) {
                tracing::warn!(container_id = %this.id, error = %e, "cannot record the container's exit");
            }
            tracing::info!(container_id = %this.id, exit_code = record.exit.as_ref().map(|e| e.exit_code), "container exited");
            events.emit(EventKind::Stopped, || {
                Some(Subject::Container(Box::new(ContainerView {
                    record: record.clone(),
                    state: ContainerState::Exited,
                    started_at_ns: record.started_at_ns,
                    exit: record.exit.clone(),
                    init: None,
                    cgroup_join,
                    paths: paths.clone(),
                })))
            });
            hooks::poststop_if_pending(&record, &paths).await;
        });
    }

    fn update_record(
        &self,
        id: &str,
        entry: &Entry,
        change: impl FnOnce(&mut ContainerRecord),
    ) -> Result<(), StoreError> {
        let record = {
            let mut live = entry.live();
            change(&mut live.record);
            live.record.clone()
        };
        store::write_json(&self.paths(id).record(), &record)
    }

    // ---- RemoveContainer ----

    /// Kills the container if needed and removes every trace of it; removing
    /// an unknown container succeeds.
    pub async fn remove(&self, id: &str) -> Result<(), ContainerError> {
        let (id, entry) = match self.entry(id) {
            Ok(found) => found,
            Err(ContainerError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let _op = entry.op.lock().await;
        if entry.live().removed {
            return Ok(());
        }
        self.stop_locked(&id, &entry, Duration::ZERO).await?;
        let record = entry.live().record.clone();
        let last = self.events.wanted().then(|| self.view_of(&entry)).flatten();
        self.tear_down(&record).await?;
        entry.live().removed = true;
        {
            let mut index = self.index();
            index.by_id.remove(&id);
            let slot = name_slot(&record.sandbox_id, &record.name_key);
            if index.names.get(&slot) == Some(&id) {
                index.names.remove(&slot);
            }
        }
        tracing::info!(container_id = %id, "container removed");
        self.events.emit(EventKind::Deleted, || last.map(|v| Subject::Container(Box::new(v))));
        Ok(())
    }

    /// Removes whatever exists of a container: processes, cgroup, image
    /// lease, directories (the record first, so a crash half-way leaves a
    /// directory without record, which the next start removes).
    async fn tear_down(&self, record: &ContainerRecord) -> Result<(), ContainerError> {
        let paths = self.paths(&record.id);
        self.kill_all(&record.cgroup).await;
        let monitor: Option<ProcessIdentity> =
            store::read_json(&RunFiles::new(&paths.run_dir).monitor()).unwrap_or(None);
        if let Some(pidfd) = monitor.and_then(|m| m.open_pidfd()) {
            let _ = tokio::time::timeout(EXIT_RECORD_WAIT, pidfd.exited()).await;
        }
        let owned = self.owned_cgroups.clone();
        let cgroup = record.cgroup.clone();
        tokio::task::spawn_blocking(move || {
            owned.remove(&cgroup);
            owned.prune_above(&cgroup);
        })
        .await
        .map_err(|e| ContainerError::Build(e.to_string()))?;
        store::remove_tree(&paths.run_dir).map_err(io_err(format!("cannot remove {}", paths.run_dir.display())))?;
        match std::fs::remove_file(paths.record()) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(io_err("cannot remove the container record")(e))
            }
            _ => {}
        }
        store::remove_tree(&paths.dir).map_err(io_err(format!("cannot remove {}", paths.dir.display())))?;
        let (images, holder) = (self.images.clone(), record.id.clone());
        tokio::task::spawn_blocking(move || images.release(&holder))
            .await
            .map_err(|e| ContainerError::Build(e.to_string()))??;
        Ok(())
    }

    // ---- status, listing, exec, logs ----

    pub fn get(&self, id: &str) -> Result<ContainerView, ContainerError> {
        let (id, entry) = self.entry(id)?;
        self.view_of(&entry).ok_or(ContainerError::NotFound(id))
    }

    pub fn list(&self) -> Vec<ContainerView> {
        let entries: Vec<Arc<Entry>> = self.index().by_id.values().cloned().collect();
        let mut views: Vec<ContainerView> = entries.iter().filter_map(|e| self.view_of(e)).collect();
        views.sort_by_key(|v| v.record.created_at_ns);
        views
    }

    /// Ids of the containers of one sandbox.
    pub fn in_sandbox(&self, sandbox_id: &str) -> Vec<String> {
        self.list().into_iter().filter(|v| v.record.sandbox_id == sandbox_id).map(|v| v.record.id).collect()
    }

    fn view_of(&self, entry: &Entry) -> Option<ContainerView> {
        let mut live = entry.live();
        if live.removed {
            return None;
        }
        let paths = self.paths(&live.record.id);
        let files = RunFiles::new(&paths.run_dir);
        let alive = live.init.as_ref().is_some_and(|i| !i.pidfd.has_exited());
        if !alive && live.exit.is_none() {
            // Dead: its monitor writes the record within moments of the exit.
            if let Ok(Some(exit)) = store::read_json::<ExitRecord>(&files.exit()) {
                live.exit = Some(exit);
            }
        }
        let started_at_ns = live.record.started_at_ns.or_else(|| recorded_start(&files));
        let state = match (&live.exit, alive, started_at_ns) {
            (Some(_), _, _) => ContainerState::Exited,
            (None, true, Some(_)) => ContainerState::Running,
            (None, true, None) => ContainerState::Created,
            // Dead without a record yet: still running as far as anyone can tell
            // for a moment, unless its monitor is gone too (then it is lost).
            (None, false, _) => {
                let monitor: Option<ProcessIdentity> = store::read_json(&files.monitor()).unwrap_or(None);
                if monitor.is_some_and(|m| m.is_running()) {
                    if started_at_ns.is_some() {
                        ContainerState::Running
                    } else {
                        ContainerState::Created
                    }
                } else {
                    // The monitor writes the record before it ends: read
                    // again, since it may have done both since the first look.
                    let recorded = store::read_json::<ExitRecord>(&files.exit()).ok().flatten();
                    live.exit = Some(recorded.unwrap_or_else(lost_exit));
                    ContainerState::Exited
                }
            }
        };
        Some(ContainerView {
            record: live.record.clone(),
            state,
            started_at_ns,
            exit: live.exit.clone(),
            init: live.init.as_ref().filter(|_| alive).map(|i| i.identity.clone()),
            cgroup_join: live.cgroup_join,
            paths,
        })
    }

    pub async fn exec_sync(
        &self,
        id: &str,
        argv: Vec<String>,
        timeout: Option<Duration>,
    ) -> Result<ExecOutput, ContainerError> {
        let (_, request) = self.exec_request(id, argv)?;
        Ok(exec::exec_sync(self.monitors.binary(), &request, timeout, &self.reaper).await?)
    }

    /// What the exec helper needs to run `argv` in the running container `id`
    /// (and the container's full id).
    fn exec_request(&self, id: &str, argv: Vec<String>) -> Result<(String, ExecRequest), ContainerError> {
        let view = self.get(id)?;
        let init = view
            .init
            .filter(|_| view.state == ContainerState::Running)
            .ok_or_else(|| ContainerError::Precondition(format!("container {} is not running", view.record.id)))?;
        let request = ExecRequest {
            bundle: view.paths.dir.clone(),
            init,
            cgroup_procs: self.cgroups.procs_files(&view.record.cgroup),
            argv,
            tty: false,
        };
        Ok((view.record.id, request))
    }

    /// Exec (streaming): checks the container runs and captures what the
    /// command's start needs, for when the client connects.
    pub fn prepare_exec(&self, id: &str, argv: Vec<String>) -> Result<super::exec_stream::ExecLaunch, ContainerError> {
        let (container_id, request) = self.exec_request(id, argv)?;
        Ok(super::exec_stream::ExecLaunch {
            container_id,
            helper: self.monitors.binary().to_path_buf(),
            request,
            reaper: self.reaper.clone(),
        })
    }

    /// Attach: checks the container runs and names its monitor's socket and
    /// the stdio it was created with.
    pub fn prepare_attach(&self, id: &str) -> Result<crate::streaming::attach::AttachLaunch, ContainerError> {
        let view = self.get(id)?;
        if view.state != ContainerState::Running {
            return Err(ContainerError::Precondition(format!("container {} is not running", view.record.id)));
        }
        let config = &view.record.config;
        Ok(crate::streaming::attach::AttachLaunch {
            container_id: view.record.id.clone(),
            socket: RunFiles::new(&view.paths.run_dir).socket(),
            tty: config.tty,
            stdin: config.stdin,
            stdin_once: config.stdin_once,
        })
    }

    /// UpdateContainerResources: puts `resources` in force on a created or
    /// running container's cgroup (an in-place pod resize), then records them
    /// and updates the container's OCI spec. oom_score_adj only counts at start.
    pub async fn update_resources(
        &self,
        id: &str,
        mut resources: api::LinuxContainerResources,
    ) -> Result<(), ContainerError> {
        let (id, entry) = self.entry(id)?;
        let _op = entry.op.lock().await;
        let view = self.view_of(&entry).ok_or_else(|| ContainerError::NotFound(id.clone()))?;
        if view.state == ContainerState::Exited {
            return Err(ContainerError::Precondition(format!(
                "container {id} has exited; its resources cannot change"
            )));
        }
        let oci = super::resources::to_oci(&resources, self.config.container.pids_limit);
        self.cgroups.check_resources(&oci).map_err(resources_invalid("linux"))?;
        {
            let (cgroups, cgroup, oci) = (self.cgroups.clone(), view.record.cgroup.clone(), oci.clone());
            tokio::task::spawn_blocking(move || cgroups.apply(&cgroup, &oci))
                .await
                .map_err(|e| ContainerError::Build(e.to_string()))?
                .map_err(apply_error("linux"))?;
        }
        match store::read_existing_json::<oci_spec::runtime::Spec>(&view.paths.spec()) {
            Ok(mut spec) => {
                if let Some(linux) = spec.linux_mut() {
                    linux.set_resources(Some(oci));
                }
                let json = serde_json::to_vec_pretty(&spec).map_err(|e| ContainerError::Build(e.to_string()))?;
                store::write_atomic_with(&view.paths.spec(), &json, 0o600, store::Durability::Volatile)?;
            }
            Err(e) => tracing::warn!(container_id = %id, error = %e, "cannot update the container's OCI spec"),
        }
        resources.oom_score_adj = view.record.oom_score_adj.map_or(0, |(_, applied)| applied.into());
        self.update_record(&id, &entry, |r| r.resources = Some(resources))?;
        tracing::info!(container_id = %id, "container resources updated");
        Ok(())
    }

    pub async fn reopen_log(&self, id: &str) -> Result<(), ContainerError> {
        let view = self.get(id)?;
        if view.state != ContainerState::Running {
            return Err(ContainerError::Precondition(format!("container {} is not running", view.record.id)));
        }
        let socket = RunFiles::new(&view.paths.run_dir).socket();
        control::call(&socket, Request::ReopenLog, CONTROL_TIMEOUT).await?;
        Ok(())
    }

    // ---- restart ----

    /// Reloads persisted containers: a live init (same pid, start time, boot)
    /// keeps its container CREATED or RUNNING; a dead one is EXITED with the
    /// exit its monitor recorded. Interrupted creations are undone, and
    /// interrupted checkpoints cleaned up after.
    pub async fn load(&self) -> Result<(), ContainerError> {
        let base = self.config.root.join("containers");
        let run_base = self.config.state.join("containers");
        for dir in [&base, &run_base] {
            store::create_dir_all(dir, 0o700).map_err(io_err(format!("cannot create {}", dir.display())))?;
        }
        let ids = store::list_records(&base).map_err(io_err(format!("cannot list {}", base.display())))?;
        for id in &ids {
            let paths = self.paths(id);
            store::remove_interrupted_writes(&paths.dir);
            store::remove_interrupted_writes(&paths.run_dir);
            let mut record: ContainerRecord = match store::read_json(&paths.record()) {
                Ok(Some(record)) => record,
                Ok(None) => {
                    tracing::warn!(container_id = %id, "removing the leftovers of an interrupted container operation");
                    let _ = store::remove_tree(&paths.run_dir);
                    let _ = store::remove_tree(&paths.dir);
                    // Its lease, if any, goes with the orphaned ones below.
                    continue;
                }
                Err(e) => {
                    tracing::error!(container_id = %id, error = %e, "skipping a container whose record cannot be read");
                    continue;
                }
            };
            let files = RunFiles::new(&paths.run_dir);
            if record.lifecycle == Lifecycle::Creating || interrupted_create(&files) {
                tracing::warn!(container_id = %id, "undoing a CreateContainer interrupted by a crash");
                self.tear_down(&record).await?;
                continue;
            }
            if record.started_at_ns.is_none() {
                // Started before the restart: the start time is in the run dir.
                record.started_at_ns = recorded_start(&files);
            }
            let init = store::read_json::<ProcessIdentity>(&files.init())
                .unwrap_or(None)
                .and_then(|identity| identity.open_pidfd().map(|pidfd| InitProcess { identity, pidfd }));
            let running = init.is_some();
            let cgroup_join = store::read_json::<CgroupJoin>(&files.cgroup_join()).unwrap_or(None);
            let entry = Entry::new(record.clone(), init, cgroup_join);
            {
                let mut index = self.index();
                index.names.insert(name_slot(&record.sandbox_id, &record.name_key), id.clone());
                index.by_id.insert(id.clone(), entry.clone());
            }
            self.clean_up_interrupted_checkpoint(id, &paths, &entry).await;
            if running {
                self.watch(id.clone(), entry);
            } else if record.exit.is_none() {
                self.await_exit(&entry).await;
            } else {
                // Exited before the restart, maybe before its poststop hooks ran.
                hooks::poststop_if_pending(&record, &paths).await;
            }
            tracing::info!(container_id = %id, running, "container reloaded");
        }
        for id in store::list_records(&run_base).unwrap_or_default() {
            if !ids.contains(&id) {
                let _ = store::remove_tree(&self.paths(&id).run_dir);
            }
        }
        self.release_orphaned_leases();
        Ok(())
    }

    /// Releases the image leases of containers that are gone: a daemon
    /// killed in RemoveContainer after the container's directory went but
    /// before its lease did would otherwise keep the layers forever.
    fn release_orphaned_leases(&self) {
        let holders = match self.images.lease_holders() {
            Ok(holders) => holders,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the image leases");
                return;
            }
        };
        let known: std::collections::HashSet<String> = self.index().by_id.keys().cloned().collect();
        for holder in holders.into_iter().filter(|h| !known.contains(h)) {
            match self.images.release(&holder) {
                Ok(()) => {
                    tracing::info!(container_id = %holder, "released the image lease of a container that is gone")
                }
                Err(e) => tracing::warn!(container_id = %holder, error = %e, "cannot release an orphaned image lease"),
            }
        }
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
