//! The sandbox lifecycle: RunPodSandbox, StopPodSandbox, RemovePodSandbox,
//! status and listing, and reconciling persisted sandboxes with what is alive
//! when the daemon starts. A failed run undoes everything it made.

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::api::PodSandboxConfig;
use crate::cgroups::ahead::{self, AheadCgroups};
use crate::cgroups::{CgroupError, CgroupPath, Cgroups, OwnedCgroups};
use crate::clock::now_ns;
use crate::config::Config;
use crate::events::{EventHub, EventKind, Subject};
use crate::ids::{self, Resolved};
use crate::linux::mount;
use crate::linux::namespaces::{self, NewNamespaces};
use crate::linux::process::{Pidfd, ProcessIdentity};
use crate::linux::reaper::Reaper;
use crate::network::{HostPort, PodInfo, PodNetworks};
use crate::store::{self, StoreError};

use super::files::{self, DnsSpec};
use super::launch::{launch_pause, start_launcher, LaunchError};
use super::pause::PauseArgs;
use super::record::{Lifecycle, PodResources, SandboxPaths, SandboxRecord};
use super::sysctl::Sysctl;

/// A validated request to run a sandbox (built by the CRI layer).
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    pub config: PodSandboxConfig,
    pub runtime_handler: String,
    /// name, namespace, uid and attempt: unique among existing sandboxes.
    pub name_key: String,
    /// New namespaces of the pod; its own IPC namespace also gets its own /dev/shm.
    pub namespaces: NewNamespaces,
    /// The pod's own user namespace (owning its other namespaces), if any.
    pub userns: Option<crate::linux::userns::IdMaps>,
    pub hostname: String,
    pub dns: DnsSpec,
    pub sysctls: Vec<Sysctl>,
    pub cgroup_parent: Option<CgroupPath>,
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("sandbox {} not found", crate::quote::quote(.0))]
    NotFound(String),
    #[error("sandbox id prefix {} matches more than one sandbox", crate::quote::quote(.0))]
    Ambiguous(String),
    #[error("a sandbox named {} already exists: {id}", crate::quote::quote(.name))]
    NameInUse { name: String, id: String },
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Precondition(String),
    #[error(transparent)]
    Network(#[from] crate::network::NetworkError),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> SandboxError {
    let what = what.into();
    move |source| SandboxError::Io { what, source }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxState {
    Ready,
    NotReady,
}

/// A snapshot of one sandbox for status and listing.
#[derive(Debug, Clone)]
pub struct SandboxView {
    pub record: SandboxRecord,
    pub state: SandboxState,
    pub pause: Option<ProcessIdentity>,
    pub paths: SandboxPaths,
    /// The pod's addresses (IPv4 first); empty without a pod network.
    pub ips: Vec<std::net::IpAddr>,
}

struct PauseProcess {
    identity: ProcessIdentity,
    pidfd: Pidfd,
}

struct Live {
    record: SandboxRecord,
    pause: Option<PauseProcess>,
    removed: bool,
}

struct Entry {
    /// Serialises lifecycle operations (and so record writes) on this sandbox.
    op: tokio::sync::Mutex<()>,
    live: Mutex<Live>,
}

impl Entry {
    fn new(record: SandboxRecord, pause: Option<PauseProcess>) -> Arc<Self> {
        Arc::new(Self { op: tokio::sync::Mutex::new(()), live: Mutex::new(Live { record, pause, removed: false }) })
    }

    fn live(&self) -> MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes the record in memory and on disk; callers hold `op`.
    fn update_record(&self, path: &std::path::Path, change: impl FnOnce(&mut SandboxRecord)) -> Result<(), StoreError> {
        let record = {
            let mut live = self.live();
            change(&mut live.record);
            live.record.clone()
        };
        store::write_json(path, &record)
    }
}

#[derive(Default)]
struct Index {
    by_id: HashMap<String, Arc<Entry>>,
    /// name key → id, including sandboxes still being created.
    names: HashMap<String, String>,
}

pub struct Sandboxes {
    config: Arc<Config>,
    cgroups: Arc<Cgroups>,
    owned_cgroups: Arc<OwnedCgroups>,
    /// The first container cgroup of each new pod, made ahead (v1).
    ahead: Arc<AheadCgroups>,
    reaper: Reaper,
    pause_binary: PathBuf,
    network: Arc<PodNetworks>,
    index: Mutex<Index>,
    /// Where lifecycle events go (GetContainerEvents).
    events: EventHub,
}

const PAUSE_EXIT_TIMEOUT: Duration = Duration::from_secs(10);

impl Sandboxes {
    pub fn new(
        config: Arc<Config>,
        cgroups: Arc<Cgroups>,
        owned_cgroups: Arc<OwnedCgroups>,
        ahead: Arc<AheadCgroups>,
        reaper: Reaper,
        pause_binary: PathBuf,
        network: Arc<PodNetworks>,
    ) -> Self {
        Self {
            config,
            cgroups,
            owned_cgroups,
            ahead,
            reaper,
            pause_binary,
            network,
            index: Mutex::default(),
            events: EventHub::default(),
        }
    }

    /// Reports lifecycle events to `events` (instead of a hub of its own).
    pub fn reporting_to(mut self, events: EventHub) -> Self {
        self.events = events;
        self
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn paths(&self, id: &str) -> SandboxPaths {
        SandboxPaths::new(&self.config.root, &self.config.state, id)
    }

    /// Resolves an id or unique id prefix.
    pub fn resolve(&self, id: &str) -> Result<String, SandboxError> {
        let index = self.index();
        match ids::resolve(id, index.by_id.keys().map(String::as_str)) {
            Resolved::One(found) => Ok(found.to_string()),
            Resolved::None => Err(SandboxError::NotFound(id.to_string())),
            Resolved::Ambiguous => Err(SandboxError::Ambiguous(id.to_string())),
        }
    }

    fn entry(&self, id: &str) -> Result<(String, Arc<Entry>), SandboxError> {
        let id = self.resolve(id)?;
        let entry = self.index().by_id.get(&id).cloned().ok_or_else(|| SandboxError::NotFound(id.clone()))?;
        Ok((id, entry))
    }

    // ---- RunPodSandbox ----

    pub async fn run(&self, spec: SandboxSpec) -> Result<String, SandboxError> {
        let id = ids::new_id();
        let name_key = spec.name_key.clone();
        {
            let mut index = self.index();
            if let Some(existing) = index.names.get(&name_key) {
                return Err(SandboxError::NameInUse { name: name_key, id: existing.clone() });
            }
            index.names.insert(name_key.clone(), id.clone());
        }
        match self.create(&id, spec).await {
            Ok(entry) => {
                self.index().by_id.insert(id.clone(), entry.clone());
                // The sandbox is made and its pause runs: both at once.
                self.emit(EventKind::Created, &entry);
                self.emit(EventKind::Started, &entry);
                Ok(id)
            }
            Err(e) => {
                self.index().names.remove(&name_key);
                Err(e)
            }
        }
    }

    async fn create(&self, id: &str, spec: SandboxSpec) -> Result<Arc<Entry>, SandboxError> {
        let pod_cgroup = match &spec.cgroup_parent {
            Some(parent) => parent.clone(),
            None => CgroupPath::parse(&format!("{}/{id}", self.config.sandbox.default_cgroup_parent))?,
        };
        let mut record = SandboxRecord {
            id: id.to_string(),
            name_key: spec.name_key.clone(),
            config: spec.config.clone(),
            runtime_handler: spec.runtime_handler.clone(),
            created_at_ns: now_ns(),
            lifecycle: Lifecycle::Creating,
            namespaces: spec.namespaces,
            userns: spec.userns,
            hostname: spec.hostname.clone(),
            pause_cgroup: pod_cgroup.join(id)?,
            pod_cgroup,
            own_shm: spec.namespaces.ipc,
            resources: None,
        };
        let paths = self.paths(id);
        let mut pause = None;
        let made = self.make(&spec, &mut record, &paths, &mut pause).await;
        match made {
            Ok(()) => {
                tracing::info!(pod_id = %id, name = %spec.name_key, pause_pid = pause.as_ref().map(|p: &PauseProcess| p.identity.pid), "sandbox ready");
                // The first container's cgroup, made while the caller goes on.
                if let Ok(path) = ahead::path(&record.pod_cgroup, id) {
                    self.ahead.start(path);
                }
                Ok(Entry::new(record, pause))
            }
            Err(e) => {
                tracing::warn!(pod_id = %id, error = %e, "RunPodSandbox failed; undoing");
                let identity = pause.map(|p| p.identity);
                if let Err(undo) = self.tear_down(&record, identity.as_ref(), true).await {
                    tracing::error!(pod_id = %id, error = %undo, "could not undo a failed RunPodSandbox");
                }
                Err(e)
            }
        }
    }

    async fn make(
        &self,
        spec: &SandboxSpec,
        record: &mut SandboxRecord,
        paths: &SandboxPaths,
        pause: &mut Option<PauseProcess>,
    ) -> Result<(), SandboxError> {
        let args = PauseArgs {
            hostname: spec.namespaces.uts.then(|| spec.hostname.clone()),
            sysctls: spec.sysctls.iter().map(|s| format!("{}={}", s.proc_path, s.value)).collect(),
            new_net: spec.namespaces.net,
            new_ipc: spec.namespaces.ipc,
            new_uts: spec.namespaces.uts,
            new_pid: spec.namespaces.pid,
            cgroup_procs: self.cgroups.procs_files(&record.pause_cgroup),
            uid_map: spec.userns.map(|m| m.uids),
            gid_map: spec.userns.map(|m| m.gids),
        };
        // Its start overlaps the preparation below; it waits for `go`.
        let launcher = start_launcher(&self.pause_binary, &args)?;
        store::create_dir_new(&paths.dir, 0o700).map_err(io_err(format!("cannot create {}", paths.dir.display())))?;
        store::create_dir_new(&paths.run_dir, 0o700)
            .map_err(io_err(format!("cannot create {}", paths.run_dir.display())))?;
        // Not fsynced: lost in a power cut, the directory has no record and is
        // removed at the next start, which is just as right. The final record is durable.
        store::write_json_with(&paths.record(), record, store::Durability::Volatile)?;

        let node_resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
        let hosts = if spec.namespaces.net {
            files::pod_hosts()
        } else {
            std::fs::read_to_string("/etc/hosts").unwrap_or_else(|_| files::pod_hosts())
        };
        // A pod with a user namespace: its root owns the files it is given.
        let owner = spec.userns.map(|m| m.root());
        for (path, content) in [
            (paths.hostname(), format!("{}\n", spec.hostname)),
            (paths.hosts(), hosts),
            (paths.resolv_conf(), files::resolv_conf(&spec.dns, &node_resolv)),
        ] {
            store::write_atomic_with(&path, content.as_bytes(), 0o644, store::Durability::Volatile)?;
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::chown(&path, Some(uid), Some(gid))
                    .map_err(io_err(format!("cannot give {} to the pod's root", path.display())))?;
            }
        }

        if record.own_shm {
            let shm = paths.shm();
            store::create_dir_new(&shm, 0o755).map_err(io_err(format!("cannot create {}", shm.display())))?;
            let size_k = self.config.sandbox.shm_size_bytes.div_ceil(1024);
            let owned = owner.map(|(uid, gid)| format!(",uid={uid},gid={gid}")).unwrap_or_default();
            mount::mount_tmpfs(&shm, &format!("mode=1777,size={size_k}k{owned}"))
                .map_err(io_err(format!("cannot mount the pod's /dev/shm at {}", shm.display())))?;
        }

        self.owned_cgroups.create(&record.pause_cgroup, spec.cgroup_parent.as_ref())?;
        self.apply_pod_resources(&record.pod_cgroup, &record.pod_resources(), "config.linux.resources")?;

        // The durable record is written and fsynced while the pause starts,
        // and put in place once it has: a crash before that leaves the
        // CREATING record, which the next start undoes.
        let mut created = record.clone();
        created.lifecycle = Lifecycle::Created;
        let record_path = paths.record();
        let write = tokio::task::spawn_blocking(move || {
            store::PreparedWrite::json(&record_path, &created, store::Durability::Durable)
        });
        let timeout = Duration::from_secs(self.config.sandbox.pause_start_timeout_secs);
        let (launched, written) = tokio::join!(launch_pause(launcher, &self.reaper, timeout), write);
        let identity = launched?;
        let pidfd = identity
            .open_pidfd()
            .ok_or_else(|| SandboxError::Launch(LaunchError::SetUp("the pause process died at start".into())))?;
        *pause = Some(PauseProcess { identity: identity.clone(), pidfd });
        store::write_json_with(&paths.pause(), &identity, store::Durability::Volatile)?;
        if record.namespaces.net {
            self.network.attach(&pod_network_info(record, identity.pid)).await?;
        }

        let written = written
            .map_err(|e| SandboxError::Io { what: "writing the sandbox record".into(), source: io::Error::other(e) })?;
        written.and_then(store::PreparedWrite::commit)?;
        record.lifecycle = Lifecycle::Created;
        Ok(())
    }

    /// Limits the pod cgroup to the pod's resources plus its overhead;
    /// `field` names them in errors.
    fn apply_pod_resources(
        &self,
        pod_cgroup: &CgroupPath,
        pod: &PodResources,
        field: &str,
    ) -> Result<(), SandboxError> {
        let total = crate::container::resources::pod_total(&pod.resources, &pod.overhead);
        let oci = crate::container::resources::to_oci(&total, 0);
        self.cgroups.check_resources(&oci).map_err(|e| SandboxError::Invalid(format!("{field}.{e}")))?;
        self.cgroups.apply(pod_cgroup, &oci).map_err(|e| match e {
            CgroupError::Unenforceable(e) => SandboxError::Invalid(format!("{field}.{e}")),
            other => SandboxError::Cgroup(other),
        })
    }

    /// UpdatePodSandboxResources: new limits for a ready pod's cgroup.
    pub async fn update_resources(&self, id: &str, pod: PodResources) -> Result<(), SandboxError> {
        let (id, entry) = self.entry(id)?;
        let _op = entry.op.lock().await;
        let (pod_cgroup, ready) = {
            let live = entry.live();
            if live.removed {
                return Err(SandboxError::NotFound(id));
            }
            (live.record.pod_cgroup.clone(), self.view(&live).state == SandboxState::Ready)
        };
        if !ready {
            return Err(SandboxError::Precondition(format!("sandbox {id} is not ready; its resources cannot change")));
        }
        self.apply_pod_resources(&pod_cgroup, &pod, "resources")?;
        entry.update_record(&self.paths(&id).record(), |r| r.resources = Some(pod))?;
        tracing::info!(pod_id = %id, "pod resources updated");
        Ok(())
    }

    // ---- StopPodSandbox ----

    /// Kills the pause process and releases the pod's mounts; idempotent.
    pub async fn stop(&self, id: &str) -> Result<(), SandboxError> {
        let (id, entry) = self.entry(id)?;
        let _op = entry.op.lock().await;
        self.stop_locked(&id, &entry).await
    }

    async fn stop_locked(&self, id: &str, entry: &Entry) -> Result<(), SandboxError> {
        let (record, pause) = {
            let mut live = entry.live();
            if live.removed {
                return Err(SandboxError::NotFound(id.to_string()));
            }
            (live.record.clone(), live.pause.take())
        };
        // DEL while the pause still holds the namespace; a failure leaves
        // the pod as it was, for the caller to retry.
        let live_pid = pause.as_ref().filter(|p| !p.pidfd.has_exited()).map(|p| p.identity.pid);
        if let Err(e) = self.network.detach(id, live_pid).await {
            entry.live().pause = pause;
            return Err(e.into());
        }
        if let Some(pause) = pause {
            kill_and_wait(&pause).await;
        }
        let paths = self.paths(id);
        release_mounts(&paths)?;
        self.remove_cgroups(&record).await?;
        remove_file_if_present(&paths.pause())?;
        if record.lifecycle != Lifecycle::Stopped {
            entry.update_record(&paths.record(), |r| r.lifecycle = Lifecycle::Stopped)?;
            tracing::info!(pod_id = %id, "sandbox stopped");
            self.emit(EventKind::Stopped, entry);
        }
        Ok(())
    }

    /// Removes a sandbox's cgroup and the container cgroup made ahead for
    /// it if no container took it; one that cannot go now is retried later.
    /// The pod cgroup goes too when nidus named it (`<default parent>/<pod
    /// id>`), never when it is a `cgroup_parent` the client gave.
    async fn remove_cgroups(&self, record: &SandboxRecord) -> Result<(), SandboxError> {
        let (owned, aheads) = (self.owned_cgroups.clone(), self.ahead.clone());
        let (ahead, pause) = (ahead::path(&record.pod_cgroup, &record.id).ok(), record.pause_cgroup.clone());
        let own_pod_cgroup = record.owns_pod_cgroup().then(|| record.pod_cgroup.clone());
        tokio::task::spawn_blocking(move || {
            if let Some(ahead) = ahead {
                aheads.discard(&ahead);
            }
            owned.remove(&pause);
            if let Some(pod_cgroup) = own_pod_cgroup {
                owned.remove(&pod_cgroup);
            }
        })
        .await
        .map_err(|e| io_err("cgroup removal task")(io::Error::other(e)))?;
        Ok(())
    }

    // ---- RemovePodSandbox ----

    /// Stops the sandbox if needed and removes every trace of it. Removing an
    /// unknown sandbox succeeds (it may have been removed already).
    pub async fn remove(&self, id: &str) -> Result<(), SandboxError> {
        let (id, entry) = match self.entry(id) {
            Ok(found) => found,
            Err(SandboxError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let _op = entry.op.lock().await;
        if entry.live().removed {
            return Ok(());
        }
        self.stop_locked(&id, &entry).await?;
        let record = entry.live().record.clone();
        self.tear_down(&record, None, true).await?;
        let last = self.events.wanted().then(|| self.view(&entry.live()));
        entry.live().removed = true;
        {
            let mut index = self.index();
            index.by_id.remove(&id);
            if index.names.get(&record.name_key) == Some(&id) {
                index.names.remove(&record.name_key);
            }
        }
        tracing::info!(pod_id = %id, "sandbox removed");
        self.events.emit(EventKind::Deleted, || last.map(|v| Subject::Sandbox(Box::new(v))));
        Ok(())
    }

    /// Undoes whatever exists of a sandbox: pause, mounts, cgroups and, when
    /// `remove_dirs`, its directories (the record first, so a crash half-way
    /// leaves a directory without record, which the next start removes).
    async fn tear_down(
        &self,
        record: &SandboxRecord,
        pause: Option<&ProcessIdentity>,
        remove_dirs: bool,
    ) -> Result<(), SandboxError> {
        let pidfd = pause.and_then(ProcessIdentity::open_pidfd);
        let live_pid = pause.filter(|_| pidfd.as_ref().is_some_and(|p| !p.has_exited())).map(|p| p.pid);
        self.network.detach(&record.id, live_pid).await?;
        if let Some(pidfd) = pidfd {
            let _ = pidfd.send_signal(libc::SIGKILL);
            let _ = tokio::time::timeout(PAUSE_EXIT_TIMEOUT, pidfd.exited()).await;
        }
        let paths = self.paths(&record.id);
        release_mounts(&paths)?;
        self.remove_cgroups(record).await?;
        self.owned_cgroups.prune_above(&record.pause_cgroup);
        self.owned_cgroups.prune_above(&record.pod_cgroup);
        if remove_dirs {
            store::remove_tree(&paths.run_dir).map_err(io_err(format!("cannot remove {}", paths.run_dir.display())))?;
            remove_file_if_present(&paths.record())?;
            store::remove_tree(&paths.dir).map_err(io_err(format!("cannot remove {}", paths.dir.display())))?;
        }
        Ok(())
    }

    // ---- status and listing ----

    pub fn get(&self, id: &str) -> Result<SandboxView, SandboxError> {
        let (id, entry) = self.entry(id)?;
        let live = entry.live();
        if live.removed {
            return Err(SandboxError::NotFound(id));
        }
        Ok(self.view(&live))
    }

    pub fn list(&self) -> Vec<SandboxView> {
        let entries: Vec<Arc<Entry>> = self.index().by_id.values().cloned().collect();
        let mut views: Vec<SandboxView> = entries
            .iter()
            .filter_map(|e| {
                let live = e.live();
                (!live.removed).then(|| self.view(&live))
            })
            .collect();
        views.sort_by_key(|v| v.record.created_at_ns);
        views
    }

    /// Reports `kind` with the sandbox as it is now.
    fn emit(&self, kind: EventKind, entry: &Entry) {
        self.events.emit(kind, || {
            let live = entry.live();
            (!live.removed).then(|| Subject::Sandbox(Box::new(self.view(&live))))
        });
    }

    fn view(&self, live: &Live) -> SandboxView {
        let running = live.pause.as_ref().filter(|p| !p.pidfd.has_exited());
        let state = if live.record.lifecycle == Lifecycle::Created && running.is_some() {
            SandboxState::Ready
        } else {
            SandboxState::NotReady
        };
        SandboxView {
            record: live.record.clone(),
            state,
            pause: running.map(|p| p.identity.clone()),
            paths: self.paths(&live.record.id),
            ips: self.network.ips(&live.record.id),
        }
    }

    // ---- restart ----

    /// Reloads persisted sandboxes and reconciles them with what is alive:
    /// a live pause (same pid, start time and boot) keeps its sandbox READY;
    /// otherwise it is NOTREADY. Interrupted creations are undone.
    pub async fn load(&self) -> Result<(), SandboxError> {
        let base = self.config.root.join("sandboxes");
        let run_base = self.config.state.join("sandboxes");
        for dir in [&base, &run_base] {
            store::create_dir_all(dir, 0o700).map_err(io_err(format!("cannot create {}", dir.display())))?;
        }
        let ids = store::list_records(&base).map_err(io_err(format!("cannot list {}", base.display())))?;
        for id in &ids {
            let paths = self.paths(id);
            store::remove_interrupted_writes(&paths.dir);
            store::remove_interrupted_writes(&paths.run_dir);
            let record: SandboxRecord = match store::read_json(&paths.record()) {
                Ok(Some(record)) => record,
                Ok(None) => {
                    tracing::warn!(pod_id = %id, "removing the leftovers of an interrupted sandbox operation");
                    release_mounts(&paths)?;
                    let _ = store::remove_tree(&paths.run_dir);
                    let _ = store::remove_tree(&paths.dir);
                    continue;
                }
                Err(e) => {
                    tracing::error!(pod_id = %id, error = %e, "skipping a sandbox whose record cannot be read");
                    continue;
                }
            };
            let pause_identity: Option<ProcessIdentity> = store::read_json(&paths.pause()).unwrap_or_else(|e| {
                tracing::warn!(pod_id = %id, error = %e, "unreadable pause record; treating the pause as gone");
                None
            });
            if record.lifecycle == Lifecycle::Creating {
                tracing::warn!(pod_id = %id, "undoing a RunPodSandbox interrupted by a crash");
                self.tear_down(&record, pause_identity.as_ref(), true).await?;
                continue;
            }
            let pause = match (record.lifecycle, pause_identity) {
                (Lifecycle::Created, Some(identity)) => {
                    identity.open_pidfd().map(|pidfd| PauseProcess { identity, pidfd })
                }
                _ => None,
            };
            tracing::info!(pod_id = %id, ready = pause.is_some(), lifecycle = ?record.lifecycle, "sandbox reloaded");
            if let Some(pause) = &pause {
                self.network.resume(id, pause.identity.pid).await;
            }
            let mut index = self.index();
            index.names.insert(record.name_key.clone(), id.clone());
            index.by_id.insert(id.clone(), Entry::new(record, pause));
        }
        // Pod networks whose sandbox no longer exists.
        self.network.sweep(&ids).await;
        // Volatile directories whose sandbox no longer exists.
        for id in store::list_records(&run_base).unwrap_or_default() {
            if !ids.contains(&id) {
                let paths = self.paths(&id);
                release_mounts(&paths)?;
                let _ = store::remove_tree(&paths.run_dir);
            }
        }
        Ok(())
    }
}

/// What the pod network needs of a sandbox being made.
fn pod_network_info(record: &SandboxRecord, pause_pid: i32) -> PodInfo {
    let config = &record.config;
    let metadata = config.metadata.clone().unwrap_or_default();
    let host_ports = config
        .port_mappings
        .iter()
        .filter(|p| p.host_port > 0)
        .map(|p| HostPort {
            protocol: crate::api::Protocol::try_from(p.protocol)
                .map(|p| p.as_str_name().to_ascii_lowercase())
                .unwrap_or_else(|_| "tcp".into()),
            host_ip: p.host_ip.parse().ok(),
            host_port: p.host_port as u16,
            container_port: p.container_port as u16,
        })
        .collect();
    PodInfo {
        sandbox_id: record.id.clone(),
        name: metadata.name,
        namespace: metadata.namespace,
        uid: metadata.uid,
        host_ports,
        dns: config.dns_config.clone(),
        annotations: config.annotations.clone(),
        pause_pid,
    }
}

async fn kill_and_wait(pause: &PauseProcess) {
    if let Err(e) = pause.pidfd.send_signal(libc::SIGKILL) {
        tracing::warn!(pid = pause.identity.pid, error = %e, "cannot signal the pause process");
    }
    if tokio::time::timeout(PAUSE_EXIT_TIMEOUT, pause.pidfd.exited()).await.is_err() {
        tracing::error!(pid = pause.identity.pid, "pause process did not exit after SIGKILL");
    }
}

fn release_mounts(paths: &SandboxPaths) -> Result<(), SandboxError> {
    let shm = paths.shm();
    mount::unmount_all(&shm).map_err(io_err(format!("cannot unmount {}", shm.display())))
}

fn remove_file_if_present(path: &std::path::Path) -> Result<(), SandboxError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err(format!("cannot remove {}", path.display()))(e)),
        _ => Ok(()),
    }
}

/// The hostname a pod gets: its config's, or the node's when empty.
pub fn pod_hostname(requested: &str) -> String {
    if requested.is_empty() {
        namespaces::hostname().unwrap_or_else(|_| "localhost".into())
    } else {
        requested.to_string()
    }
}
