//! The sandbox lifecycle: RunPodSandbox, StopPodSandbox, RemovePodSandbox,
//! status and listing, and reconciling persisted sandboxes with what is alive
//! when the daemon starts. A failed run undoes everything it made.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::api::PodSandboxConfig;
use crate::cgroups::ahead::{self, AheadCgroups};
use crate::cgroups::{CgroupError, CgroupPath, Cgroups, OwnedCgroups};
use crate::clock::now_ns;
use crate::config::Config;
use crate::events::{Emitter, EventKind};
use crate::ids;
use crate::linux::mount;
use crate::linux::namespaces::{self, NewNamespaces};
use crate::linux::process::{Pidfd, ProcessIdentity};
use crate::linux::reaper::Reaper;
use crate::network::{HostPort, PodInfo, PodNetworks};
use crate::registry::{self, LookupError, Registry, Tracked};
use crate::store::{self, StoreError};

use super::files::{self, DnsSpec};
use super::launch::{launch_pause, start_launcher, LaunchError};
use super::pause::PauseArgs;
use super::record::{Lifecycle, PodResources, SandboxPaths, SandboxRecord};
use super::sysctl::Sysctl;

// One file per call.
mod load;
mod remove;
mod run;
mod status;
mod stop;
mod update_resources;

/// A validated request to run a sandbox (built by the CRI layer).
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    pub(crate) config: PodSandboxConfig,
    pub(crate) runtime_handler: String,
    /// name, namespace, uid and attempt: unique among existing sandboxes.
    pub name_key: String,
    /// New namespaces of the pod; its own IPC namespace also gets its own /dev/shm.
    pub(crate) namespaces: NewNamespaces,
    /// The pod's own user namespace (owning its other namespaces), if any.
    pub(crate) userns: Option<crate::linux::userns::IdMaps>,
    pub(crate) hostname: String,
    pub(crate) dns: DnsSpec,
    pub(crate) sysctls: Vec<Sysctl>,
    pub(crate) cgroup_parent: Option<CgroupPath>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SandboxError {
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

impl From<LookupError> for SandboxError {
    fn from(e: LookupError) -> Self {
        match e {
            LookupError::NotFound(id) => Self::NotFound(id),
            LookupError::Ambiguous(id) => Self::Ambiguous(id),
        }
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> SandboxError {
    let what = what.into();
    move |source| SandboxError::Io { what, source }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SandboxState {
    Ready,
    NotReady,
}

/// A snapshot of one sandbox for status and listing.
#[derive(Debug, Clone)]
pub struct SandboxView {
    /// Shared with the sandbox's entry: a view copies no record.
    pub record: Arc<SandboxRecord>,
    pub(crate) state: SandboxState,
    pub(crate) pause: Option<ProcessIdentity>,
    pub(crate) paths: SandboxPaths,
    /// The pod's addresses (IPv4 first); empty without a pod network.
    pub(crate) ips: Vec<std::net::IpAddr>,
}

struct PauseProcess {
    identity: ProcessIdentity,
    pidfd: Pidfd,
}

/// A sandbox in the index: its record and its pause.
struct Live {
    record: Arc<SandboxRecord>,
    pause: Option<PauseProcess>,
}

impl Live {
    fn new(record: SandboxRecord, pause: Option<PauseProcess>) -> Self {
        Self { record: Arc::new(record), pause }
    }
}

impl Tracked for Live {
    type Record = SandboxRecord;
    fn record_mut(&mut self) -> &mut Arc<SandboxRecord> {
        &mut self.record
    }
}

type Entry = registry::Entry<Live>;

pub(crate) struct Sandboxes {
    config: Arc<Config>,
    cgroups: Arc<Cgroups>,
    owned_cgroups: Arc<OwnedCgroups>,
    /// The first container cgroup of each new pod, made ahead (v1).
    ahead: Arc<AheadCgroups>,
    reaper: Reaper,
    pause_binary: PathBuf,
    network: Arc<PodNetworks>,
    /// The sandboxes by id and by name key (also those being created).
    index: Registry<Live>,
    /// Where lifecycle events go (GetContainerEvents).
    events: Emitter<SandboxView>,
}

const PAUSE_EXIT_TIMEOUT: Duration = Duration::from_secs(10);

impl Sandboxes {
    pub(crate) fn new(
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
            index: Registry::default(),
            events: Emitter::default(),
        }
    }

    /// Reports lifecycle events to `events` (instead of a hub of its own).
    pub(crate) fn reporting_to(mut self, events: Emitter<SandboxView>) -> Self {
        self.events = events;
        self
    }

    fn paths(&self, id: &str) -> SandboxPaths {
        SandboxPaths::new(&self.config.root, &self.config.state, id)
    }

    /// Resolves an id or unique id prefix.
    pub(crate) fn resolve(&self, id: &str) -> Result<String, SandboxError> {
        Ok(self.index.resolve(id)?)
    }

    fn entry(&self, id: &str) -> Result<(String, Arc<Entry>), SandboxError> {
        Ok(self.index.get(id)?)
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
pub(crate) fn pod_hostname(requested: &str) -> String {
    if requested.is_empty() {
        namespaces::hostname().unwrap_or_else(|_| "localhost".into())
    } else {
        requested.to_string()
    }
}
