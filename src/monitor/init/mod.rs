//! The container side of clone → execve: everything a container's init does
//! between the monitor's fork and the execve of the workload. It runs in a
//! single-threaded child of the monitor (no tokio, no locks held by anyone
//! else), joins the cgroup and the pod's namespaces, builds the root
//! filesystem and pivots into it, becomes the container's user with its
//! capabilities, reports "ok" and waits for StartContainer, then execs.
//!
//! An init forked ahead (`run_prepared`, while its monitor waits as a spare)
//! is told its plan once the daemon has written it, and builds from there
//! while the daemon still makes the cgroup: it waits for the monitor's word
//! that the cgroup is made only when it must join it — before it enters its
//! cgroup namespace and mounts /sys/fs/cgroup, the first steps that show
//! which cgroup it is in.
//!
//! The mounts and device nodes it makes are `mounts.rs`; its last steps
//! before execve (limits, user, capabilities, seccomp), and the same steps
//! for a command run in a running container (`nidus-monitor exec`), are
//! `exec.rs`.

mod exec;
mod mounts;

pub use exec::exec_in;

use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::sched::CloneFlags;
use oci_spec::runtime::{LinuxNamespaceType, Spec};

use crate::linux::placed_fds;
use crate::linux::rootfs;
use crate::linux::seccomp::PreparedFilters;
use crate::monitor::plan::{MonitorPlan, IMAGE_VOLUME_TYPE};
use crate::wire::words::{
    INIT_CONTROL as CONTROL_FD, INIT_EXEC_ERROR as EXEC_ERROR_FD, INIT_READY as READY_FD, INIT_START as START_FD,
    INIT_TERMINAL as TERMINAL_FD,
};
use crate::wire::{words, Answer, Built, CgroupMade, Message, PlanPath};
use exec::{apply_process_limits, become_user, exec_of, Exec};
use mounts::{image_volume_layers, make_devices, make_read_only, mask, mount_one, shared_tree};

/// The init's stdio (already set up by the monitor).
pub(crate) struct InitStdio {
    pub(crate) stdin: OwnedFd,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
    /// A container with a terminal: the init's end of a Unix socket. Its
    /// stdio (/dev/null until then) becomes a terminal it opens in the
    /// container's own devpts once its mounts are made, and the terminal's
    /// master goes back to the monitor on this socket.
    pub(crate) terminal: Option<OwnedFd>,
}

/// Pipes between the init and its monitor.
pub(crate) struct InitPipes {
    /// init → monitor: `wire::Built` once built, or its refusal.
    pub(crate) ready: OwnedFd,
    /// monitor → init: one byte releases the init (StartContainer).
    pub(crate) start: OwnedFd,
    /// init → monitor: why execve failed; closed by a successful execve.
    pub(crate) exec_error: OwnedFd,
}

/// When the init writes itself into the plan's `cgroup.procs` files (after
/// a plain fork; harmless after clone3 into the cgroup).
enum CgroupEntry {
    /// First thing: the cgroup is made already.
    AtOnce,
    /// Once its monitor says `wire::CgroupMade` on this pipe.
    WhenMade(io::BufReader<fs::File>),
}

/// Monitor side, before the fork: a container joining a PID namespace (the
/// pod's, or a target container's) must have it as the monitor's namespace
/// for children; a container with its own gets a fresh one the same way.
pub(crate) fn enter_pid_namespace_for_children(spec: &Spec) -> Result<(), String> {
    let Some(ns) = namespaces(spec).into_iter().find(|n| n.typ() == LinuxNamespaceType::Pid) else {
        return Ok(());
    };
    match ns.path() {
        Some(path) => {
            let file =
                fs::File::open(path).map_err(|e| format!("cannot open PID namespace {}: {e}", path.display()))?;
            nix::sched::setns(&file, CloneFlags::CLONE_NEWPID)
                .map_err(|e| format!("cannot join PID namespace {}: {e}", path.display()))
        }
        None => {
            nix::sched::unshare(CloneFlags::CLONE_NEWPID).map_err(|e| format!("cannot create a PID namespace: {e}"))
        }
    }
}

fn namespaces(spec: &Spec) -> Vec<oci_spec::runtime::LinuxNamespace> {
    spec.linux().as_ref().and_then(|l| l.namespaces().clone()).unwrap_or_default()
}

/// The init, forked when the container is to be built: never returns.
pub(crate) fn run(spec: &Spec, plan: &MonitorPlan, mut stdio: InitStdio, pipes: InitPipes) -> ! {
    crate::linux::process::reset_signals();
    let terminal = stdio.terminal.take();
    if let Err(e) = place_fds(stdio, pipes, terminal) {
        std::process::exit(report_and_exit_code(&format!("cannot set up file descriptors: {e}")));
    }
    build_and_exec(spec, plan, CgroupEntry::AtOnce)
}

/// The init forked ahead (by a spare monitor, as the first process of a PID
/// namespace of its own, stdio on pipes): never returns. It waits on
/// `control` for the path of its plan (one JSON line; end of input: the
/// monitor gave it up, and it exits), reads the plan and the spec, and
/// builds; it joins the container cgroup once the monitor says `wire::CgroupMade`.
pub(crate) fn run_prepared(stdio: InitStdio, pipes: InitPipes, control: OwnedFd) -> ! {
    crate::linux::process::reset_signals();
    if let Err(e) = place_fds(stdio, pipes, Some(control)) {
        std::process::exit(report_and_exit_code(&format!("cannot set up file descriptors: {e}")));
    }
    // CONTROL_FD was placed by place_fds and is owned here only.
    let mut control = io::BufReader::new(fs::File::from(placed_fds::take(CONTROL_FD)));
    let mut line = String::new();
    if !matches!(io::BufRead::read_line(&mut control, &mut line), Ok(n) if n > 0) {
        std::process::exit(0);
    }
    let (plan, spec) = match read_plan_and_spec(&line) {
        Ok(read) => read,
        Err(e) => std::process::exit(report_and_exit_code(&e)),
    };
    build_and_exec(&spec, &plan, CgroupEntry::WhenMade(control))
}

/// The plan at the JSON path `line`, and the spec of its bundle.
fn read_plan_and_spec(line: &str) -> Result<(MonitorPlan, Spec), String> {
    let PlanPath(path) = PlanPath::decode(line.trim_end()).map_err(|e| e.to_string())?;
    let plan: MonitorPlan =
        crate::store::read_existing_json(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let spec = read_spec(&plan.bundle)?;
    Ok((plan, spec))
}

/// The OCI spec in `bundle` (its config.json).
pub(crate) fn read_spec(bundle: &Path) -> Result<Spec, String> {
    crate::store::read_existing_json(&bundle.join("config.json")).map_err(|e| format!("reading the OCI spec: {e}"))
}

/// Builds the container, reports "ok", waits for StartContainer and execs.
fn build_and_exec(spec: &Spec, plan: &MonitorPlan, cgroup: CgroupEntry) -> ! {
    let exec = match build(spec, plan, cgroup) {
        Ok(exec) => exec,
        Err(e) => std::process::exit(report_and_exit_code(&e)),
    };
    {
        // READY_FD was placed by place_fds and is owned here only.
        let mut ready = fs::File::from(placed_fds::take(READY_FD));
        if ready.write_all(Built.encode().as_bytes()).is_err() {
            std::process::exit(1);
        }
    }
    // Wait for StartContainer: one byte; EOF means the monitor gave up on us.
    let mut byte = [0u8; 1];
    // START_FD was placed by place_fds and is owned here only.
    let mut start = fs::File::from(placed_fds::take(START_FD));
    if !matches!(start.read(&mut byte), Ok(1)) {
        std::process::exit(1);
    }
    drop(start);
    if let Err(e) = exec.hooks.run_start_container() {
        // EXEC_ERROR_FD was placed by place_fds and is owned here only.
        let mut report = fs::File::from(placed_fds::take(EXEC_ERROR_FD));
        let _ = report.write_all(e.as_bytes());
        std::process::exit(1);
    }
    let error = exec.run();
    // EXEC_ERROR_FD was placed by place_fds and is owned here only.
    let mut report = fs::File::from(placed_fds::take(EXEC_ERROR_FD));
    let _ = report.write_all(error.message.as_bytes());
    std::process::exit(error.exit_code)
}

fn report_and_exit_code(message: &str) -> i32 {
    // READY_FD is ours (or invalid, in which case write fails harmlessly).
    let mut ready = fs::File::from(placed_fds::take(READY_FD));
    let _ = ready.write_all(Answer::<Built>::Refused(message.to_string()).encode().as_bytes());
    1
}

// `place_fds` places in this order: stdio, then the contract's numbers.
const _: () = assert!(
    READY_FD == 3 && START_FD == 4 && EXEC_ERROR_FD == 5 && CONTROL_FD == 6 && TERMINAL_FD == 6,
    "place_fds places the pipes in the order of wire::words"
);

/// stdio on 0–2, the three pipes on 3–5 and the control pipe or the
/// terminal socket (if any) on 6 (close-on-exec), nothing else open.
fn place_fds(stdio: InitStdio, pipes: InitPipes, sixth: Option<OwnedFd>) -> io::Result<()> {
    // Copies above 6 first so the dup2s below cannot clobber a source; the
    // originals close before their numbers are reused.
    let mut sources = vec![&stdio.stdin, &stdio.stdout, &stdio.stderr, &pipes.ready, &pipes.start, &pipes.exec_error];
    sources.extend(sixth.as_ref());
    let sources: Vec<Option<RawFd>> = sources.into_iter().map(|fd| Some(fd.as_raw_fd())).collect();
    let last = sources.len() as RawFd - 1;
    let parked = crate::linux::process::Parked::new(&sources, 10)?;
    drop((stdio, pipes, sixth));
    parked.place_from(0)?;
    for target in READY_FD..=last {
        // Close-on-exec on a descriptor we just placed.
        let _ = placed_fds::set_close_on_exec(target);
    }
    drop(parked);
    crate::linux::process::close_fds_from(last as u32 + 1)
}

/// A container with a terminal, once its mounts are made: a terminal from
/// its own devpts (so `tty` names it, under its /dev/pts) on stdin, stdout
/// and stderr, the controlling terminal of a new session led by the init,
/// and bound over /dev/console (as runc does); its master goes to the
/// monitor on `TERMINAL_FD`, which is then closed.
fn take_terminal() -> Result<(), String> {
    use std::os::unix::net::UnixStream;
    let pty = crate::linux::pty::open_in_own_root().map_err(|e| format!("opening a terminal in /dev/pts: {e}"))?;
    let number = crate::linux::pty::number(&pty.master).map_err(|e| format!("the terminal's number: {e}"))?;
    bind_console(&format!("/dev/pts/{number}")).map_err(|e| format!("binding the terminal to /dev/console: {e}"))?;
    for target in 0..=2 {
        // Onto stdio, whose old files (the monitor's /dev/null) nothing else
        // here refers to.
        if let Err(e) = placed_fds::copy_onto(&pty.slave, target) {
            return Err(format!("the terminal on stdio: {e}"));
        }
    }
    drop(pty.slave);
    crate::linux::pty::take_stdin_as_controlling_terminal().map_err(|e| format!("taking the terminal: {e}"))?;
    // TERMINAL_FD was placed by place_fds and is owned here only.
    let socket = UnixStream::from(placed_fds::take(TERMINAL_FD));
    crate::linux::socket::send_with_fds(&socket, b"terminal", &[pty.master.as_raw_fd()])
        .map_err(|e| format!("handing the terminal to the monitor: {e}"))
}

/// Binds the terminal at `pts` over /dev/console, made as an empty file first.
fn bind_console(pts: &str) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let console = "/dev/console";
    if fs::symlink_metadata(console).is_err() {
        fs::OpenOptions::new().write(true).create(true).truncate(false).mode(0o600).open(console)?;
    }
    rootfs::mount(Some(pts), console, None, libc::MS_BIND as libc::c_ulong, None)
}

/// Builds the container around the init; returns what to exec.
fn build(spec: &Spec, plan: &MonitorPlan, cgroup: CgroupEntry) -> Result<Exec, String> {
    // Nothing outside may read our memory or /proc/self/exe while we hold host state.
    nix::sys::prctl::set_dumpable(false).map_err(|e| format!("prctl(PR_SET_DUMPABLE): {e}"))?;
    // Read while the bundle is still in reach (before the mount namespace changes).
    let seccomp = load_seccomp(spec, &plan.bundle)?;
    let join_cgroup = || {
        plan.cgroup_procs.iter().try_for_each(|procs| {
            fs::write(procs, "0").map_err(|e| format!("cannot join cgroup {}: {e}", procs.display()))
        })
    };
    if let CgroupEntry::AtOnce = cgroup {
        join_cgroup()?;
    }
    // Opened before the mount namespace changes what /proc names.
    let userns = user_namespace(spec)?;
    let own_cgroup_namespace = join_namespaces(spec)?;
    let root_path = spec.root().as_ref().map(|r| r.path().clone()).ok_or("the spec has no root")?;
    let mounts = spec.mounts().as_deref().unwrap_or_default();
    // Bidirectional binds are cloned while this namespace's mounts are still
    // peers of the node's; every other mount never propagates back to it.
    let shared_trees = mounts.iter().map(shared_tree).collect::<Result<Vec<_>, String>>()?;
    rootfs::mount(None, "/", None, (libc::MS_REC | libc::MS_SLAVE) as libc::c_ulong, None)
        .map_err(|e| format!("cannot make / a slave mount: {e}"))?;
    if let Some(userns) = &userns {
        // Each image layer seen through the pod's mapping, in this mount
        // namespace only: the layers stay as they are, shared by every pod.
        // (An image volume's layers too, each once.)
        let mut layers: Vec<&Path> = plan.rootfs.lower.iter().map(PathBuf::as_path).collect();
        for m in mounts.iter().filter(|m| m.typ().as_deref() == Some(IMAGE_VOLUME_TYPE)) {
            layers.extend(image_volume_layers(m));
        }
        let mut done = std::collections::HashSet::new();
        for layer in layers.into_iter().filter(|l| done.insert(*l)) {
            crate::linux::userns::idmap_in_place(layer, userns.fd())
                .map_err(|e| format!("cannot idmap the image layer {}: {e}", layer.display()))?;
        }
    }
    rootfs::mount_overlay(&plan.rootfs.lower, &plan.rootfs.upper, &plan.rootfs.work, &root_path)
        .map_err(|e| format!("cannot mount the container's root filesystem: {e}"))?;
    let root = fs::File::open(&root_path).map_err(|e| format!("cannot open {}: {e}", root_path.display()))?;
    let root_fd = root.as_raw_fd();
    // Up to the first cgroup file system, nothing shows which cgroup we are in.
    let first_cgroup = mounts.iter().position(|m| m.typ().as_deref() == Some("cgroup")).unwrap_or(mounts.len());
    let mount_all = |range: std::ops::Range<usize>| {
        range.into_iter().try_for_each(|i| {
            let m = &mounts[i];
            mount_one(root_fd, m, shared_trees[i].as_ref(), plan, userns.as_ref())
                .map_err(|e| format!("mount {}: {e}", m.destination().display()))
        })
    };
    mount_all(0..first_cgroup)?;
    if let CgroupEntry::WhenMade(mut control) = cgroup {
        let mut word = String::new();
        let _ = io::BufRead::read_line(&mut control, &mut word);
        if CgroupMade::decode(word.trim_end()).is_err() {
            return Err("the monitor gave up before the container cgroup was made".into());
        }
        join_cgroup()?;
    }
    if own_cgroup_namespace {
        nix::sched::unshare(CloneFlags::CLONE_NEWCGROUP)
            .map_err(|e| format!("cannot create a cgroup namespace: {e}"))?;
    }
    mount_all(first_cgroup..mounts.len())?;
    make_devices(root_fd, spec, userns.as_ref().map(|u| &u.maps)).map_err(|e| format!("devices: {e}"))?;
    let process = spec.process().clone().ok_or("the spec has no process")?;
    // Limits the node's root may set that the pod's root could not (a lower
    // oom_score_adj, a hard rlimit).
    apply_process_limits(&process)?;
    let hooks = InContainerHooks::of(plan)?;
    std::env::set_current_dir(&root_path).map_err(|e| format!("chdir {}: {e}", root_path.display()))?;
    drop(root);
    if let Some(userns) = &userns {
        // The pod's root from here on, in a mount namespace of the user
        // namespace (a copy of this one; the working directory moves with
        // it), where the container's root may mount as its capabilities
        // allow. The root file system is bound there anew: pivot_root
        // refuses a mount copied from the node's.
        crate::linux::userns::join_as_root(userns.fd())
            .map_err(|e| format!("cannot join the pod's user namespace: {e}"))?;
        nix::sched::unshare(CloneFlags::CLONE_NEWNS)
            .map_err(|e| format!("cannot make a mount namespace in the user namespace: {e}"))?;
        rootfs::rebind_cwd().map_err(|e| format!("cannot bind the root file system in the user namespace: {e}"))?;
    }
    hooks.before_pivot()?;
    rootfs::pivot_to_cwd().map_err(|e| format!("pivot_root: {e}"))?;

    let linux = spec.linux().clone().unwrap_or_default();
    for path in linux.masked_paths().as_deref().unwrap_or_default() {
        mask(path).map_err(|e| format!("masking {path}: {e}"))?;
    }
    for path in linux.readonly_paths().as_deref().unwrap_or_default() {
        make_read_only(path).map_err(|e| format!("making {path} read-only: {e}"))?;
    }
    if spec.root().as_ref().and_then(|r| r.readonly()).unwrap_or(false) {
        let flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY;
        rootfs::mount(None, "/", None, flags as libc::c_ulong, None).map_err(|e| format!("read-only root: {e}"))?;
    }

    if plan_tty(&process) {
        take_terminal()?;
    } else {
        // The init leads its own session (CRIU wants the pid namespace's init so).
        let _ = nix::unistd::setsid();
    }
    let cwd = process.cwd();
    fs::create_dir_all(cwd).map_err(|e| format!("working directory {}: {e}", cwd.display()))?;
    std::env::set_current_dir(cwd).map_err(|e| format!("working directory {}: {e}", cwd.display()))?;
    // Through the container's /proc, which this init mounted itself and
    // nothing of the container has run beside yet.
    let apparmor = match process.apparmor_profile() {
        Some(profile) => {
            Some(crate::apparmor::ExecProfile::open(Path::new("/proc"), profile).map_err(|e| e.to_string())?)
        }
        None => None,
    };
    let confinement = become_user(&process, seccomp)?.with_apparmor(apparmor);
    if process.no_new_privileges().unwrap_or(false) {
        crate::linux::process::set_no_new_privs().map_err(|e| format!("no_new_privs: {e}"))?;
    }

    Ok(Exec { hooks, ..exec_of(&process, confinement)? })
}

/// The hooks an init runs or has run (nothing at all for a container without).
pub(super) struct InContainerHooks {
    hooks: Option<crate::hooks::ContainerHooks>,
    id: String,
    bundle: PathBuf,
    /// Our PID as the host sees it (the state's `pid`).
    host_pid: Option<i32>,
}

impl InContainerHooks {
    pub(super) fn none() -> Self {
        Self { hooks: None, id: String::new(), bundle: PathBuf::new(), host_pid: None }
    }

    fn of(plan: &MonitorPlan) -> Result<Self, String> {
        let hooks = plan.hooks.clone();
        // Before pivot_root, /proc is the host's: its `self` is our host PID.
        let host_pid = match &hooks {
            Some(_) => Some(
                fs::read_link("/proc/self")
                    .ok()
                    .and_then(|p| p.to_str().and_then(|p| p.parse().ok()))
                    .ok_or("cannot read our PID from /proc/self")?,
            ),
            None => None,
        };
        Ok(Self { hooks, id: plan.container_id.clone(), bundle: plan.bundle.clone(), host_pid })
    }

    /// The namespaces and mounts are made, pivot_root is next: the
    /// runtime's hooks (the monitor runs them while we wait), then the
    /// createContainer hooks here, in the container's namespaces.
    fn before_pivot(&self) -> Result<(), String> {
        use crate::hooks::Stage;
        let Some(hooks) = &self.hooks else { return Ok(()) };
        if hooks.has(Stage::Prestart) || hooks.has(Stage::CreateRuntime) {
            await_runtime_hooks()?;
        }
        hooks.run(Stage::CreateContainer, &self.id, "creating", self.host_pid, &self.bundle).map_err(|e| e.to_string())
    }

    pub(super) fn run_start_container(&self) -> Result<(), String> {
        let Some(hooks) = &self.hooks else { return Ok(()) };
        hooks
            .run(crate::hooks::Stage::StartContainer, &self.id, "created", self.host_pid, &self.bundle)
            .map_err(|e| e.to_string())
    }
}

/// Asks the monitor to run the runtime's hooks and waits until they ran
/// (end of input: they failed, or the monitor gave up on us).
fn await_runtime_hooks() -> Result<(), String> {
    // READY_FD and START_FD were placed by place_fds and stay open until the
    // process ends; the borrows end within this function.
    let (ready, start) = (placed_fds::borrow(READY_FD), placed_fds::borrow(START_FD));
    nix::unistd::write(ready, words::RUNTIME_HOOKS).map_err(|e| format!("asking for the runtime's hooks: {e}"))?;
    let mut byte = [0u8; 1];
    match nix::unistd::read(start, &mut byte) {
        Ok(1) => Ok(()),
        _ => Err("the monitor did not run the runtime's hooks".into()),
    }
}

/// The container's compiled seccomp filters (`seccomp.bpf` beside its
/// `config.json`) when its spec has a profile; a profile without its program
/// is an error, never an unconfined container.
pub(super) fn load_seccomp(spec: &Spec, bundle: &Path) -> Result<Option<PreparedFilters>, String> {
    if spec.linux().as_ref().and_then(|l| l.seccomp().as_ref()).is_none() {
        return Ok(None);
    }
    let path = bundle.join(crate::seccomp::program::FILE_NAME);
    let bytes = fs::read(&path).map_err(|e| format!("reading the seccomp program {}: {e}", path.display()))?;
    let filters = crate::seccomp::program::decode(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Some(crate::seccomp::program::prepare(&filters)))
}

fn plan_tty(process: &oci_spec::runtime::Process) -> bool {
    process.terminal().unwrap_or(false)
}

/// The pod's user namespace a container joins: its file, opened, and the
/// ID maps the spec carries.
struct PodUserNamespace {
    file: fs::File,
    pub(super) maps: crate::linux::userns::IdMaps,
}

impl PodUserNamespace {
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.file)
    }
}

fn user_namespace(spec: &Spec) -> Result<Option<PodUserNamespace>, String> {
    let Some(ns) = namespaces(spec).into_iter().find(|n| n.typ() == LinuxNamespaceType::User) else {
        return Ok(None);
    };
    let path = ns.path().clone().ok_or("a container's user namespace must be its pod's (a path)")?;
    let file =
        fs::File::open(&path).map_err(|e| format!("cannot open the pod's user namespace {}: {e}", path.display()))?;
    let linux = spec.linux().clone().unwrap_or_default();
    let one = |maps: Option<&Vec<oci_spec::runtime::LinuxIdMapping>>| match maps.map(Vec::as_slice) {
        Some([m]) => {
            Ok(crate::linux::userns::IdMap { container_id: m.container_id(), host_id: m.host_id(), length: m.size() })
        }
        _ => Err("a container's user namespace needs one uid and one gid mapping in its spec".to_string()),
    };
    let maps = crate::linux::userns::IdMaps {
        uids: one(linux.uid_mappings().as_ref())?,
        gids: one(linux.gid_mappings().as_ref())?,
    };
    Ok(Some(PodUserNamespace { file, maps }))
}

/// Joins the spec's namespaces that have a path and makes the others,
/// except a new cgroup namespace: that comes once the init is in its
/// cgroup (its root is the cgroup it is made in). Returns whether the spec
/// asks for one.
fn join_namespaces(spec: &Spec) -> Result<bool, String> {
    let mut fresh = CloneFlags::empty();
    let mut joins = Vec::new();
    for ns in namespaces(spec) {
        let flag = match ns.typ() {
            LinuxNamespaceType::Network => CloneFlags::CLONE_NEWNET,
            LinuxNamespaceType::Ipc => CloneFlags::CLONE_NEWIPC,
            LinuxNamespaceType::Uts => CloneFlags::CLONE_NEWUTS,
            LinuxNamespaceType::Mount => CloneFlags::CLONE_NEWNS,
            LinuxNamespaceType::Cgroup => CloneFlags::CLONE_NEWCGROUP,
            // Entered by the monitor before the fork.
            LinuxNamespaceType::Pid => continue,
            // Joined last, once everything that needs the node's root is done.
            LinuxNamespaceType::User => continue,
            other => return Err(format!("{other:?} namespaces are not supported")),
        };
        match ns.path() {
            Some(path) => {
                let file =
                    fs::File::open(path).map_err(|e| format!("cannot open namespace {}: {e}", path.display()))?;
                joins.push((file, flag, path.clone()));
            }
            None => fresh |= flag,
        }
    }
    for (file, flag, path) in &joins {
        nix::sched::setns(file, *flag).map_err(|e| format!("cannot join namespace {}: {e}", path.display()))?;
    }
    let own_cgroup_namespace = fresh.contains(CloneFlags::CLONE_NEWCGROUP);
    fresh.remove(CloneFlags::CLONE_NEWCGROUP);
    nix::sched::unshare(fresh).map_err(|e| format!("cannot create namespaces: {e}"))?;
    Ok(own_cgroup_namespace)
}
