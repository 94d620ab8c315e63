//! One runtime under test (nidus, or containerd + runc): its directories, its
//! network namespace, the harness-made cgroup its daemon is placed in, the
//! daemon process and the CRI client to it; what it has left behind (for the
//! leak check), restarting the daemon alone (its pods left running, its
//! state kept), and stopping everything it started.

mod containerd;
mod network;
mod nidus;

use std::collections::BTreeSet;
use std::fs;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::Signal;

use crate::cgroups::{self, CgroupTree};
use crate::cri::{Cri, PodCgroupParent};
use crate::host;
use crate::images::Image;
use crate::lab::Places;
use crate::netns::NetNs;

pub use nidus::binary as nidus_binary;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Nidus,
    Containerd,
    /// A second nidus build (`NIDUS_BIN_B`), beside the first in the profiling mode.
    NidusB,
    /// nidus with the bench's bridge CNI configuration.
    NidusCni,
    /// nidus with its built-in pod network.
    NidusBuiltin,
    /// containerd + runc with the same bridge CNI configuration.
    ContainerdCni,
    /// containerd + crun (Debian's), the second reference.
    ContainerdCrun,
    /// nidus as `Nidus`, with one GetContainerEvents subscriber all along.
    NidusEvents,
    /// nidus with the systemd cgroup driver (a scope per pause and container
    /// in the pod's slice; needs systemd as PID 1).
    NidusSystemd,
    /// containerd + runc with `SystemdCgroup = true`.
    ContainerdSystemd,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Nidus => "nidus",
            Kind::Containerd => "containerd",
            Kind::NidusB => "nidus-b",
            Kind::NidusCni => "nidus-cni",
            Kind::NidusBuiltin => "nidus-builtin",
            Kind::ContainerdCni => "containerd-cni",
            Kind::ContainerdCrun => "containerd-crun",
            Kind::NidusEvents => "nidus-events",
            Kind::NidusSystemd => "nidus-systemd",
            Kind::ContainerdSystemd => "containerd-systemd",
        }
    }

    /// nidus (any build or network), as opposed to containerd.
    pub fn is_nidus(self) -> bool {
        matches!(
            self,
            Kind::Nidus | Kind::NidusB | Kind::NidusCni | Kind::NidusBuiltin | Kind::NidusEvents | Kind::NidusSystemd
        )
    }

    /// Pods in systemd slices and scopes (the systemd cgroup driver), outside
    /// the harness's cgroup: below `/<systemd_slice()>.slice`.
    pub fn is_systemd(self) -> bool {
        matches!(self, Kind::NidusSystemd | Kind::ContainerdSystemd)
    }

    /// The slice a systemd-driven runtime's pods go below (as kubelet's
    /// `kubepods.slice`): one per runtime, so that what one leaves is told
    /// from the other's.
    pub fn systemd_slice(self) -> &'static str {
        match self {
            Kind::ContainerdSystemd => "benchcontainerd",
            _ => "benchnidus",
        }
    }
}

/// Joins the cgroups named in `BENCH_CGROUP_PROCS` (colon-separated
/// `cgroup.procs` files), optionally mounts a private tmpfs on the directory
/// `BENCH_PRIVATE_RUN` names (the process must already be in a private mount
/// namespace), then execs the daemon.
const LAUNCH_SCRIPT: &str = r#"set -e
IFS=:
for procs in $BENCH_CGROUP_PROCS; do echo $$ > "$procs"; done
unset IFS
if [ -n "$BENCH_PRIVATE_RUN" ]; then
  mkdir -p "$BENCH_PRIVATE_RUN"
  mount -t tmpfs -o mode=0755,size=16m nidus-bench-run "$BENCH_PRIVATE_RUN"
fi
exec "$@""#;

pub struct Runtime {
    pub kind: Kind,
    /// Persistent files: root, config, logs.
    pub dir: PathBuf,
    /// Volatile state (on the harness's tmpfs).
    pub state: PathBuf,
    pub socket: PathBuf,
    /// Where pod log directories go.
    pub logs: PathBuf,
    pub cgroup: CgroupTree,
    pub netns: NetNs,
    pub version: String,
    daemon: Option<Child>,
    daemon_log: PathBuf,
    /// The daemon's command line and whether it has a private `/run`, for a restart.
    command: (String, Vec<String>, bool),
    /// The daemon's private mount namespace (held open while the runtime
    /// lives), for a restart to join: its `/run` holds containerd's shim
    /// sockets and the mounts of its pods.
    mount_ns: Option<fs::File>,
    cri: Option<Cri>,
    /// State entries present before any pod ran (image snapshots and such).
    baseline: BTreeSet<PathBuf>,
}

impl Runtime {
    /// Makes the runtime's directories, network namespace and cgroup, starts
    /// its daemon there and waits until it answers with RuntimeReady.
    pub async fn start(kind: Kind, places: &Places) -> Result<Self> {
        let name = kind.name();
        let dir = places.dir.join(name);
        let state = places.run_dir.join(name);
        for d in [&dir, &state] {
            fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        let netns = NetNs::create(&format!("{}-{name}", places.label))?;
        let cgroup = places.cgroup.child(name)?;
        let mut runtime = Self {
            kind,
            socket: state.join(format!("{name}.sock")),
            logs: dir.join("logs"),
            daemon_log: dir.join("daemon.log"),
            dir,
            state,
            cgroup,
            netns,
            version: String::new(),
            daemon: None,
            command: (String::new(), Vec::new(), false),
            mount_ns: None,
            cri: None,
            baseline: BTreeSet::new(),
        };
        fs::create_dir_all(&runtime.logs)?;
        runtime.command = match kind.is_nidus() {
            true => nidus::prepare(&runtime)?,
            false => containerd::prepare(&runtime)?,
        };
        runtime.spawn(false)?;
        runtime.wait_ready().await?;
        if runtime.command.2 {
            let pid = runtime.daemon_pid().context("the daemon is not running")?;
            let path = format!("/proc/{pid}/ns/mnt");
            runtime.mount_ns = Some(fs::File::open(&path).with_context(|| format!("opening {path}"))?);
        }
        Ok(runtime)
    }

    /// Starts the daemon: the first time (`again` false) in a new private
    /// mount namespace if it has one, with a new log; again in the one it
    /// had, the log appended to.
    fn spawn(&mut self, again: bool) -> Result<()> {
        let procs: Vec<String> = self.cgroup.procs_files().iter().map(|p| p.display().to_string()).collect();
        if procs.iter().any(|p| p.contains(':') || p.contains(char::is_whitespace)) {
            bail!("cgroup paths with ':' or spaces are not supported: {procs:?}");
        }
        let (program, args, private_run) = &self.command;
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={}", self.netns.path().display()));
        match (private_run, again) {
            (false, _) => {}
            (true, false) => {
                // Own mount namespace: the daemon's mounts (and its shims') are
                // its own, and vanish with its last process.
                cmd.args(["--", "unshare", "--mount", "--propagation", "private"]);
                // containerd's shim sockets are in `/run/containerd/s`. With
                // systemd cgroups runc needs the system bus in
                // `/run/dbus`: only `/run/containerd` is made private then.
                cmd.env("BENCH_PRIVATE_RUN", if self.kind.is_systemd() { "/run/containerd" } else { "/run" });
            }
            (true, true) => {
                let held = self.mount_ns.as_ref().context("the daemon's mount namespace was not kept")?;
                cmd.arg(format!("--mount=/proc/{}/fd/{}", std::process::id(), held.as_raw_fd()));
            }
        }
        cmd.arg("--").args(["sh", "-c", LAUNCH_SCRIPT, "sh", program]).args(args);
        cmd.env("BENCH_CGROUP_PROCS", procs.join(":"));
        let log = match again {
            false => fs::File::create(&self.daemon_log)?,
            true => fs::OpenOptions::new().append(true).open(&self.daemon_log)?,
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.kind.name()))?;
        self.daemon = Some(child);
        Ok(())
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.daemon.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.daemon = None;
                bail!("{} exited at start ({status}); its log:\n{}", self.kind.name(), self.log_tail());
            }
            if self.socket.exists() {
                if let Ok(cri) = Cri::connect(&self.socket).await {
                    if let (Ok(version), Ok(true)) = (cri.version().await, cri.runtime_ready().await) {
                        self.version = version.runtime_version;
                        self.cri = Some(cri);
                        return Ok(());
                    }
                }
            }
            if Instant::now() > deadline {
                bail!("{} did not become ready within 60 s; its log:\n{}", self.kind.name(), self.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn name(&self) -> &'static str {
        self.kind.name()
    }

    /// Stops the daemon alone (`Stop::Clean`: SIGTERM, waited for up to 10 s;
    /// `Stop::Kill`: SIGKILL), leaving its pods, monitors or shims running
    /// and its state where it is, then starts it again the same way (in the
    /// same namespaces and cgroup) and times it back: to a Status that
    /// answers RuntimeReady, and to a ListContainers that lists
    /// `containers` running containers, polled every 2 ms.
    pub async fn restart(&mut self, stop: Stop, containers: usize) -> Result<Restarted> {
        let mut child = self.daemon.take().context("the daemon is not running")?;
        self.cri = None;
        let pid = child.id() as i32;
        let began = Instant::now();
        match stop {
            Stop::Clean => {
                host::signal(pid, Signal::SIGTERM);
                let deadline = began + Duration::from_secs(10);
                while child.try_wait()?.is_none() {
                    if Instant::now() > deadline {
                        host::signal(pid, Signal::SIGKILL);
                        let _ = child.wait();
                        bail!("{} did not exit within 10 s of SIGTERM; killed", self.name());
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            Stop::Kill => {
                host::signal(pid, Signal::SIGKILL);
                child.wait()?;
            }
        }
        let stopped = began.elapsed();
        let began = Instant::now();
        self.spawn(true)?;
        let deadline = began + Duration::from_secs(120);
        let mut ready = None;
        loop {
            if let Some(status) = self.daemon.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.daemon = None;
                bail!("{} exited at its restart ({status}); its log:\n{}", self.name(), self.log_tail());
            }
            if self.cri.is_none() {
                if let Ok(cri) = Cri::connect(&self.socket).await {
                    self.cri = Some(cri);
                }
            }
            if let Some(cri) = &self.cri {
                if ready.is_none() && cri.runtime_ready().await.unwrap_or(false) {
                    ready = Some(began.elapsed());
                }
                if ready.is_some() {
                    let listed = cri.list_containers().await.unwrap_or_default();
                    let running =
                        listed.iter().filter(|c| c.state() == ::nidus::api::ContainerState::ContainerRunning).count();
                    if running >= containers {
                        let listed = began.elapsed();
                        self.version = cri.version().await?.runtime_version;
                        return Ok(Restarted { stopped, ready: ready.unwrap_or(listed), listed });
                    }
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "{} restarted did not list {containers} running containers within 120 s; its log:\n{}",
                    self.name(),
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// The daemon runs and has a client (false after a restart that failed).
    pub fn is_up(&self) -> bool {
        self.daemon.is_some() && self.cri.is_some()
    }

    pub fn cri(&self) -> &Cri {
        self.cri.as_ref().expect("the client exists once start returned")
    }

    pub fn daemon_pid(&self) -> Option<i32> {
        self.daemon.as_ref().map(|c| c.id() as i32)
    }

    /// Copies the daemon's log to `<dir>/<runtime>-daemon.log`.
    pub fn save_log(&self, dir: &std::path::Path) -> Result<()> {
        fs::create_dir_all(dir)?;
        fs::copy(&self.daemon_log, dir.join(format!("{}-daemon.log", self.name())))?;
        Ok(())
    }

    /// The last lines of the daemon's log.
    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.daemon_log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Imports the images into the runtime's own store and checks its
    /// ImageService lists them; then records the state entries as the
    /// baseline of the leak check.
    pub async fn import(&mut self, images: &[&Image]) -> Result<()> {
        for image in images {
            match self.kind.is_nidus() {
                true => nidus::import(self, image)?,
                false => containerd::import(self, image)?,
            }
            if !self.cri().image_present(image.reference).await? {
                bail!("{} does not list {} after the import", self.name(), image.reference);
            }
        }
        self.baseline = self.state_entries().into_iter().collect();
        Ok(())
    }

    /// Per-pod and per-container state the runtime keeps on disk.
    fn state_entries(&self) -> Vec<PathBuf> {
        let dirs = match self.kind.is_nidus() {
            true => nidus::state_dirs(self),
            false => containerd::state_dirs(self),
        };
        dirs.iter().flat_map(|d| host::entries(d)).collect()
    }

    /// Lets the runtime delete what nothing references any more (containerd
    /// removes snapshots lazily, in its garbage collection).
    pub fn collect_garbage(&self) -> Result<()> {
        match self.kind.is_nidus() {
            true => Ok(()),
            false => containerd::collect_garbage(self),
        }
    }

    /// State entries that were not there after the images were imported.
    pub fn new_state_entries(&self) -> Vec<PathBuf> {
        self.state_entries().into_iter().filter(|e| !self.baseline.contains(e)).collect()
    }

    /// Processes in the runtime's cgroups (and, with the systemd driver, its
    /// slice) other than the daemon: what it started (pause, monitors, shims,
    /// containers).
    pub fn processes(&self) -> BTreeSet<i32> {
        let mut pids = self.cgroup.processes();
        if let Some(slice) = self.systemd_slice_dir() {
            pids.extend(cgroups::processes_below(&slice));
        }
        if let Some(daemon) = self.daemon_pid() {
            pids.remove(&daemon);
        }
        pids.retain(|pid| !self.helpers().contains(pid));
        pids
    }

    /// Processes the daemon keeps outside any pod (nidus's spare monitors,
    /// and the init each has forked ahead): its own children and theirs,
    /// still in its own cgroup in every hierarchy.
    pub fn helpers(&self) -> BTreeSet<i32> {
        let Some(daemon) = self.daemon_pid() else { return BTreeSet::new() };
        let mut own = self.cgroup.own_processes();
        // On cgroup v2 nidus moves into a leaf of its cgroup (to delegate
        // controllers), and its helpers with it.
        if self.kind.is_nidus() {
            own.extend(self.cgroup.own_processes_of_child(nidus::DAEMON_LEAF));
        }
        let children: BTreeSet<i32> =
            own.iter().copied().filter(|&pid| pid != daemon && host::parent_of(pid) == Some(daemon)).collect();
        let grandchildren =
            own.iter().copied().filter(|&pid| host::parent_of(pid).is_some_and(|parent| children.contains(&parent)));
        grandchildren.chain(children.iter().copied()).collect()
    }

    /// Mounts the runtime's pods left below its directories, seen from the
    /// host and from the daemon's own mount namespace.
    pub fn mounts(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let mut namespaces = vec!["self".to_string()];
        namespaces.extend(self.daemon_pid().map(|p| p.to_string()));
        for ns in &namespaces {
            for base in [&self.dir, &self.state] {
                for mount in host::mounts_under(ns, base) {
                    if !found.contains(&mount) {
                        found.push(mount);
                    }
                }
            }
        }
        found
    }

    /// How this runtime's pods' `cgroup_parent` is written. With the
    /// systemd driver it is a slice below `Kind::systemd_slice`. Otherwise it
    /// is a path: nidus nests any `cgroup_parent` below its (relative) cgroup
    /// root. runc (cgroupfs driver, relative cgroupsPath) nests it below its
    /// own cgroup in each v1 hierarchy — the shim's, which is the daemon's
    /// harness-made cgroup — but below the mount's root in the cgroup2
    /// hierarchy of a hybrid host; there the harness's own cgroup is the
    /// root, so starting the path with the daemon's cgroup keeps the pod
    /// inside it in every hierarchy (in v1 the pod cgroup then sits at
    /// `<daemon cgroup>/<daemon cgroup>/pod<uid>`).
    pub fn pod_cgroup_parent(&self) -> PodCgroupParent {
        if self.kind.is_systemd() {
            return PodCgroupParent::Slice(self.kind.systemd_slice().to_string());
        }
        match self.kind.is_nidus() {
            true => PodCgroupParent::Path(String::new()),
            false => PodCgroupParent::Path(format!("{}/", self.cgroup.relative)),
        }
    }

    /// The slice this runtime's pods go below, in the cgroup2 hierarchy
    /// (systemd driver only).
    pub fn systemd_slice_dir(&self) -> Option<PathBuf> {
        self.kind.is_systemd().then(|| PathBuf::from(format!("/sys/fs/cgroup/{}.slice", self.kind.systemd_slice())))
    }

    /// Where the runtime puts pods' `cgroup_parent`s, in every hierarchy
    /// (directories that do not exist in a hierarchy are left out).
    pub fn pod_cgroup_parents(&self) -> Vec<PathBuf> {
        let mut parents = Vec::new();
        if let Some(slice) = self.systemd_slice_dir() {
            parents.extend(slice.is_dir().then_some(slice));
            return parents;
        }
        for dir in &self.cgroup.dirs {
            match self.kind.is_nidus() {
                true => parents.push(dir.join(nidus::CGROUP_ROOT)),
                false => {
                    // cgroup2 (the path from the mount root), or v1 (below the daemon's).
                    parents.push(dir.clone());
                    parents.push(dir.join(&self.cgroup.relative));
                }
            }
        }
        parents.retain(|p| p.is_dir());
        parents
    }

    /// Cgroups below the daemon's own, other than where pod cgroups go and
    /// the directories above that, and nidus's own leaf (cgroup v2); with the
    /// systemd driver, also any cgroup below the runtime's slice but its
    /// pods' slices (a scope left behind).
    pub fn cgroups(&self) -> Vec<PathBuf> {
        let parents = self.pod_cgroup_parents();
        let mut left: Vec<PathBuf> = self
            .cgroup
            .descendants()
            .into_iter()
            .filter(|d| !parents.iter().any(|p| p.starts_with(d)))
            .filter(|d| !(self.kind.is_nidus() && d.file_name().is_some_and(|n| n == nidus::DAEMON_LEAF)))
            .collect();
        if let Some(slice) = self.systemd_slice_dir() {
            let mut below = Vec::new();
            cgroups::walk_dirs(&slice, &mut below);
            left.extend(below.into_iter().filter(|d| d.parent() != Some(slice.as_path()) || !is_slice(d)));
        }
        left
    }

    /// Stops the daemon (SIGTERM, then SIGKILL after 10 s), then kills
    /// whatever is left in its cgroups.
    pub fn shut_down(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            host::signal(child.id() as i32, Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() {
                if Instant::now() > deadline {
                    host::signal(child.id() as i32, Signal::SIGKILL);
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.cri = None;
        let left = self.cgroup.kill_all();
        if !left.is_empty() {
            eprintln!("warning: processes of {} survive SIGKILL: {left:?}", self.name());
        }
        // With its last process gone, the namespace and its mounts go too.
        self.mount_ns = None;
    }

    /// The cgroup `path` of this runtime's tree in one line, for messages.
    pub fn cgroup_label(&self) -> String {
        self.cgroup.relative.clone()
    }

    /// Checks that `pid` (a pod's process) is inside this runtime's cgroups in
    /// every hierarchy: runc and nidus must nest below the harness's cgroup.
    /// With the systemd driver: that `pid` is in a scope below the runtime's
    /// slice instead.
    pub fn check_contained(&self, pid: i32, what: &str) -> Result<()> {
        if self.kind.is_systemd() {
            let cgroups = fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .with_context(|| format!("reading /proc/{pid}/cgroup"))?;
            let unified = cgroups.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or_default();
            let slice = format!("/{}.slice/", self.kind.systemd_slice());
            if !unified.starts_with(&slice) || !unified.ends_with(".scope") {
                bail!("{what} (pid {pid}) of {} is not in a scope below {slice}: {unified}", self.name());
            }
            return Ok(());
        }
        if !self.cgroup.contains(pid)? {
            let cgroups = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            bail!(
                "{what} (pid {pid}) of {} is not inside the harness cgroup {} in every hierarchy:\n{cgroups}",
                self.name(),
                self.cgroup_label()
            );
        }
        Ok(())
    }
}

/// How `Runtime::restart` stops the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM, and its exit waited for.
    Clean,
    /// SIGKILL.
    Kill,
}

impl Stop {
    pub fn key(self) -> &'static str {
        match self {
            Stop::Clean => "clean",
            Stop::Kill => "kill_9",
        }
    }
}

/// What a restart took.
#[derive(Debug, Clone, Copy)]
pub struct Restarted {
    /// From the signal to the daemon's exit.
    pub stopped: Duration,
    /// From the new daemon's start to a Status that answers RuntimeReady.
    pub ready: Duration,
    /// From the new daemon's start to a ListContainers listing every container running.
    pub listed: Duration,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// A directory named `*.slice`.
fn is_slice(dir: &std::path::Path) -> bool {
    dir.file_name().is_some_and(|n| n.to_string_lossy().ends_with(".slice"))
}
