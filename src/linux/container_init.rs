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

use std::ffi::CString;
use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Component, Path, PathBuf};

use nix::sched::CloneFlags;
use oci_spec::runtime::{LinuxNamespaceType, Mount, Spec};

use super::capability_sets::CapabilitySets;
use super::placed_fds;
use super::rootfs::{self, create_in_root, fd_path, open_in_root};
use super::seccomp::PreparedFilters;
use crate::container::spec::IMAGE_VOLUME_TYPE;
use crate::monitor::plan::MonitorPlan;
use crate::wire::words::{
    INIT_CONTROL as CONTROL_FD, INIT_EXEC_ERROR as EXEC_ERROR_FD, INIT_READY as READY_FD, INIT_START as START_FD,
    INIT_TERMINAL as TERMINAL_FD,
};
use crate::wire::{words, Answer, Built, CgroupMade, Message, PlanPath};

/// The init's stdio (already set up by the monitor).
pub struct InitStdio {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// A container with a terminal: the init's end of a Unix socket. Its
    /// stdio (/dev/null until then) becomes a terminal it opens in the
    /// container's own devpts once its mounts are made, and the terminal's
    /// master goes back to the monitor on this socket.
    pub terminal: Option<OwnedFd>,
}

/// Pipes between the init and its monitor.
pub struct InitPipes {
    /// init → monitor: `wire::Built` once built, or its refusal.
    pub ready: OwnedFd,
    /// monitor → init: one byte releases the init (StartContainer).
    pub start: OwnedFd,
    /// init → monitor: why execve failed; closed by a successful execve.
    pub exec_error: OwnedFd,
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
pub fn enter_pid_namespace_for_children(spec: &Spec) -> Result<(), String> {
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
pub fn run(spec: &Spec, plan: &MonitorPlan, mut stdio: InitStdio, pipes: InitPipes) -> ! {
    super::process::reset_signals();
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
pub fn run_prepared(stdio: InitStdio, pipes: InitPipes, control: OwnedFd) -> ! {
    super::process::reset_signals();
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
pub fn read_spec(bundle: &Path) -> Result<Spec, String> {
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
    let parked = super::process::Parked::new(&sources, 10)?;
    drop((stdio, pipes, sixth));
    parked.place_from(0)?;
    for target in READY_FD..=last {
        // Close-on-exec on a descriptor we just placed.
        let _ = placed_fds::set_close_on_exec(target);
    }
    drop(parked);
    super::process::close_fds_from(last as u32 + 1)
}

/// A container with a terminal, once its mounts are made: a terminal from
/// its own devpts (so `tty` names it, under its /dev/pts) on stdin, stdout
/// and stderr, the controlling terminal of a new session led by the init,
/// and bound over /dev/console (as runc does); its master goes to the
/// monitor on `TERMINAL_FD`, which is then closed.
fn take_terminal() -> Result<(), String> {
    use std::os::unix::net::UnixStream;
    let pty = super::pty::open_in_own_root().map_err(|e| format!("opening a terminal in /dev/pts: {e}"))?;
    let number = super::pty::number(&pty.master).map_err(|e| format!("the terminal's number: {e}"))?;
    bind_console(&format!("/dev/pts/{number}")).map_err(|e| format!("binding the terminal to /dev/console: {e}"))?;
    for target in 0..=2 {
        // Onto stdio, whose old files (the monitor's /dev/null) nothing else
        // here refers to.
        if let Err(e) = placed_fds::copy_onto(&pty.slave, target) {
            return Err(format!("the terminal on stdio: {e}"));
        }
    }
    drop(pty.slave);
    super::pty::take_stdin_as_controlling_terminal().map_err(|e| format!("taking the terminal: {e}"))?;
    // TERMINAL_FD was placed by place_fds and is owned here only.
    let socket = UnixStream::from(placed_fds::take(TERMINAL_FD));
    super::socket::send_with_fds(&socket, b"terminal", &[pty.master.as_raw_fd()])
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

/// What remains to do once StartContainer releases the init.
struct Exec {
    /// The startContainer hooks, run once StartContainer releases the init.
    hooks: InContainerHooks,
    argv: Vec<CString>,
    env: Vec<CString>,
    path_dirs: Vec<String>,
    confinement: Confinement,
}

/// The last steps before execve: the seccomp filter, and the capability sets
/// when they must follow it. Installing a filter needs no_new_privs or
/// CAP_SYS_ADMIN; without no_new_privs (kubelet's allowPrivilegeEscalation,
/// the default) the process keeps CAP_SYS_ADMIN in its effective set until
/// the filter is in, and drops to its own sets right after — so the filter
/// also judges that capset(2), the ambient prctl(2)s and the execve(2).
struct Confinement {
    seccomp: Option<PreparedFilters>,
    capabilities_after: Option<CapabilitySets>,
}

impl Confinement {
    fn apply(&self) -> Result<(), String> {
        if let Some(filters) = &self.seccomp {
            filters.install().map_err(|e| format!("installing the seccomp filter: {e}"))?;
        }
        if let Some(sets) = &self.capabilities_after {
            sets.apply().map_err(|e| format!("setting capabilities after the seccomp filter: {e}"))?;
        }
        Ok(())
    }
}

struct ExecError {
    message: String,
    exit_code: i32,
}

impl Exec {
    /// Resolves argv[0] like a shell (`$PATH` of the container's environment) and execs.
    fn run(self) -> ExecError {
        let Some(name) = self.argv.first().map(|a| a.to_string_lossy().into_owned()) else {
            return ExecError {
                message: "no command given: the image has no Entrypoint or Cmd and the container no command".into(),
                exit_code: 127,
            };
        };
        let candidates: Vec<String> = if name.contains('/') {
            vec![name.clone()]
        } else {
            self.path_dirs.iter().map(|d| format!("{}/{name}", d.trim_end_matches('/'))).collect()
        };
        let found = candidates.into_iter().find(|c| {
            let Ok(meta) = fs::metadata(c) else { return false };
            meta.is_file() && nix::unistd::access(c.as_str(), nix::unistd::AccessFlags::X_OK).is_ok()
        });
        let Some(path) = found else {
            let message = if name.contains('/') {
                match fs::metadata(&name) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        format!("exec: {name:?}: no such file or directory")
                    }
                    _ => format!("exec: {name:?}: permission denied"),
                }
            } else {
                format!("exec: {name:?}: executable file not found in $PATH")
            };
            return ExecError { message, exit_code: 127 };
        };
        let Ok(cpath) = CString::new(path.clone()) else {
            return ExecError { message: format!("exec: {path:?}: invalid path"), exit_code: 127 };
        };
        if let Err(message) = self.confinement.apply() {
            return ExecError { message, exit_code: 126 };
        }
        let err = nix::unistd::execve(&cpath, &self.argv, &self.env).unwrap_err();
        let code = if err == nix::errno::Errno::ENOENT { 127 } else { 126 };
        ExecError { message: format!("exec: {path:?}: {}", err.desc().to_lowercase()), exit_code: code }
    }
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
            super::userns::idmap_in_place(layer, userns.fd())
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
        super::userns::join_as_root(userns.fd()).map_err(|e| format!("cannot join the pod's user namespace: {e}"))?;
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
    let confinement = become_user(&process, seccomp)?;
    if process.no_new_privileges().unwrap_or(false) {
        super::process::set_no_new_privs().map_err(|e| format!("no_new_privs: {e}"))?;
    }

    Ok(Exec { hooks, ..exec_of(&process, confinement)? })
}

/// The hooks an init runs or has run (nothing at all for a container without).
struct InContainerHooks {
    hooks: Option<crate::hooks::ContainerHooks>,
    id: String,
    bundle: PathBuf,
    /// Our PID as the host sees it (the state's `pid`).
    host_pid: Option<i32>,
}

impl InContainerHooks {
    fn none() -> Self {
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

    fn run_start_container(&self) -> Result<(), String> {
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
fn load_seccomp(spec: &Spec, bundle: &Path) -> Result<Option<PreparedFilters>, String> {
    if spec.linux().as_ref().and_then(|l| l.seccomp().as_ref()).is_none() {
        return Ok(None);
    }
    let path = bundle.join(crate::seccomp::program::FILE_NAME);
    let bytes = fs::read(&path).map_err(|e| format!("reading the seccomp program {}: {e}", path.display()))?;
    let filters = crate::seccomp::program::decode(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Some(super::seccomp::prepare(&filters)))
}

fn plan_tty(process: &oci_spec::runtime::Process) -> bool {
    process.terminal().unwrap_or(false)
}

/// The pod's user namespace a container joins: its file, opened, and the
/// ID maps the spec carries.
struct PodUserNamespace {
    file: fs::File,
    maps: super::userns::IdMaps,
}

impl PodUserNamespace {
    fn fd(&self) -> BorrowedFd<'_> {
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
            Ok(super::userns::IdMap { container_id: m.container_id(), host_id: m.host_id(), length: m.size() })
        }
        _ => Err("a container's user namespace needs one uid and one gid mapping in its spec".to_string()),
    };
    let maps =
        super::userns::IdMaps { uids: one(linux.uid_mappings().as_ref())?, gids: one(linux.gid_mappings().as_ref())? };
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

/// Mount options → (flags, data, propagation, read-only, recursive read-only).
struct Options {
    flags: libc::c_ulong,
    data: Vec<String>,
    propagation: libc::c_ulong,
    readonly: bool,
    recursive_readonly: bool,
    bind: bool,
}

fn parse_options(options: &[String]) -> Options {
    let mut o =
        Options { flags: 0, data: Vec::new(), propagation: 0, readonly: false, recursive_readonly: false, bind: false };
    for opt in options {
        let flag = match opt.as_str() {
            "ro" => {
                o.readonly = true;
                libc::MS_RDONLY
            }
            "rw" => 0,
            "nosuid" => libc::MS_NOSUID,
            "nodev" => libc::MS_NODEV,
            "noexec" => libc::MS_NOEXEC,
            "strictatime" => libc::MS_STRICTATIME,
            "relatime" => libc::MS_RELATIME,
            "noatime" => libc::MS_NOATIME,
            "nodiratime" => libc::MS_NODIRATIME,
            // The defaults of a new bind: nothing to set.
            "exec" | "suid" | "dev" | "atime" | "diratime" | "norelatime" | "nostrictatime" => 0,
            "bind" => {
                o.bind = true;
                libc::MS_BIND
            }
            "rbind" => {
                o.bind = true;
                libc::MS_BIND | libc::MS_REC
            }
            "rro" => {
                o.recursive_readonly = true;
                0
            }
            "private" | "rprivate" | "slave" | "rslave" | "shared" | "rshared" => {
                let rec = if opt.starts_with('r') { libc::MS_REC } else { 0 };
                o.propagation = rec
                    | match opt.trim_start_matches('r') {
                        "private" => libc::MS_PRIVATE,
                        "slave" => libc::MS_SLAVE,
                        _ => libc::MS_SHARED,
                    };
                0
            }
            other => {
                o.data.push(other.to_string());
                0
            }
        };
        o.flags |= flag as libc::c_ulong;
    }
    o
}

/// For a bind mount with shared propagation (CRI Bidirectional), a detached
/// clone of its source's mount tree; `None` for every other mount.
fn shared_tree(m: &Mount) -> Result<Option<OwnedFd>, String> {
    let opts = parse_options(m.options().as_deref().unwrap_or_default());
    let shared = opts.propagation & libc::MS_SHARED as libc::c_ulong != 0;
    let is_bind = opts.bind || m.typ().as_deref() == Some("bind");
    if !(shared && is_bind) {
        return Ok(None);
    }
    let source = m.source().clone().unwrap_or_default();
    if !source.exists() {
        fs::create_dir_all(&source).map_err(|e| format!("cannot create {}: {e}", source.display()))?;
    }
    let recursive = opts.flags & libc::MS_REC as libc::c_ulong != 0;
    rootfs::clone_tree(&source, recursive)
        .map(Some)
        .map_err(|e| format!("mount {}: cannot clone {}: {e}", m.destination().display(), source.display()))
}

/// Mounts `m` inside the root; `tree`: its source's tree cloned ahead (see
/// [`shared_tree`]), attached instead of a fresh bind.
fn mount_one(
    root: RawFd,
    m: &Mount,
    tree: Option<&OwnedFd>,
    plan: &MonitorPlan,
    userns: Option<&PodUserNamespace>,
) -> io::Result<()> {
    let dest = m.destination();
    let typ = m.typ().clone().unwrap_or_default();
    if typ == IMAGE_VOLUME_TYPE {
        return mount_image_volume(root, m);
    }
    let mut opts = parse_options(m.options().as_deref().unwrap_or_default());
    if let Some(userns) = userns {
        owned_by_pod_root(&typ, &mut opts.data, &userns.maps);
    }
    if typ == "cgroup" {
        return mount_cgroups(root, dest, &opts, plan);
    }
    let source = m.source().clone().unwrap_or_default();
    let is_bind = opts.bind || typ == "bind";
    let target_is_dir = if is_bind {
        if !source.exists() {
            // Like containerd: a missing bind source directory is created.
            fs::create_dir_all(&source)?;
        }
        source.is_dir()
    } else {
        true
    };
    let target = create_in_root(root, dest, target_is_dir)?;
    let fstype = if is_bind { None } else { Some(typ.as_str()) };
    let first_flags = if opts.bind { opts.flags & !(libc::MS_RDONLY as libc::c_ulong) } else { opts.flags };
    let data = opts.data.join(",");
    let idmapped = match (userns, m.uid_mappings().is_some() && is_bind) {
        (Some(userns), true) => {
            let recursive = opts.flags & libc::MS_REC as libc::c_ulong != 0;
            Some(super::userns::idmapped_tree(&source, userns.fd(), recursive)?)
        }
        _ => None,
    };
    match tree.or(idmapped.as_ref()) {
        Some(tree) => rootfs::attach_tree(tree, &fd_path(&target))?,
        None => rootfs::mount(Some(&source.to_string_lossy()), &fd_path(&target), fstype, first_flags, Some(&data))?,
    }
    // From here on, name the new mount itself, not the directory beneath it.
    let mounted = open_in_root(root, dest, libc::O_PATH, 0)?;
    let mounted_path = fd_path(&mounted);
    // A bind takes its flags (read-only, nosuid, noexec, atime…) only when remounted.
    let bind_flags = (libc::MS_NOSUID
        | libc::MS_NODEV
        | libc::MS_NOEXEC
        | libc::MS_NOATIME
        | libc::MS_RELATIME
        | libc::MS_STRICTATIME
        | libc::MS_NODIRATIME) as libc::c_ulong;
    if is_bind && (opts.readonly || opts.flags & bind_flags != 0) {
        let keep = locked_flags(&mounted_path)?;
        let read_only = if opts.readonly { libc::MS_RDONLY } else { 0 };
        let flags = libc::MS_BIND | libc::MS_REMOUNT | read_only;
        rootfs::mount(
            None,
            &mounted_path,
            None,
            flags as libc::c_ulong | keep | (opts.flags & !(libc::MS_REC | libc::MS_BIND) as libc::c_ulong),
            None,
        )?;
    }
    if opts.propagation != 0 {
        rootfs::mount(None, &mounted_path, None, opts.propagation, None)?;
    }
    if opts.recursive_readonly {
        rootfs::make_recursively_read_only(&mounted_path)?;
    }
    Ok(())
}

/// The layers of an image volume's mount, lowest first.
fn image_volume_layers(m: &Mount) -> impl Iterator<Item = &Path> {
    m.options().as_deref().unwrap_or_default().iter().filter_map(|o| o.strip_prefix("lowerdir+=")).map(Path::new)
}

/// The value of an `x-nidus-NAME=` option of `m`.
fn nidus_option<'a>(m: &'a Mount, name: &str) -> Option<&'a str> {
    let prefix = format!("x-nidus-{name}=");
    m.options().as_deref().unwrap_or_default().iter().find_map(|o| o.strip_prefix(prefix.as_str()))
}

/// An image volume: its layers as a read-only overlay (one layer: bound
/// read-only), at the destination, or, with a sub path, first at its
/// scratch directory (outside the root), whose sub path (looked up without
/// following a symbolic link out of it) is then bound at the destination.
fn mount_image_volume(root: RawFd, m: &Mount) -> io::Result<()> {
    let layers: Vec<PathBuf> = image_volume_layers(m).map(Path::to_path_buf).collect();
    // `at` names the directory mounted on; `reopen` names the new mount
    // itself (a remount must name the mount, not the directory beneath it).
    let mount_layers = |at: &str, reopen: &dyn Fn() -> io::Result<OwnedFd>| -> io::Result<()> {
        match layers.as_slice() {
            [] => Err(io::Error::new(io::ErrorKind::InvalidInput, "an image volume without layers")),
            // overlayfs wants two lower layers when it has no upper one.
            [only] => {
                rootfs::mount(Some(&only.to_string_lossy()), at, None, libc::MS_BIND as libc::c_ulong, None)?;
                let mounted = reopen()?;
                let mounted_path = fd_path(&mounted);
                let flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
                rootfs::mount(None, &mounted_path, None, flags as libc::c_ulong | locked_flags(&mounted_path)?, None)
            }
            many => rootfs::mount_overlay_read_only(many, Path::new(at)),
        }
    };
    let dest = m.destination();
    let reopen_dest = || open_in_root(root, dest, libc::O_PATH, 0);
    let Some(sub_path) = nidus_option(m, "sub-path") else {
        let target = create_in_root(root, dest, true)?;
        return mount_layers(&fd_path(&target), &reopen_dest);
    };
    let scratch = nidus_option(m, "scratch")
        .map(PathBuf::from)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "an image volume's sub path without its scratch"))?;
    let at_scratch = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", scratch.display()));
    fs::create_dir_all(&scratch).map_err(at_scratch)?;
    let reopen_scratch = || -> io::Result<OwnedFd> { Ok(fs::File::open(&scratch)?.into()) };
    mount_layers(&scratch.to_string_lossy(), &reopen_scratch).map_err(at_scratch)?;
    let whole = fs::File::open(&scratch).map_err(at_scratch)?;
    let inner = open_in_root(whole.as_raw_fd(), Path::new(sub_path), libc::O_PATH | libc::O_NOFOLLOW, 0)
        .map_err(|e| io::Error::new(e.kind(), format!("the image's {sub_path}: {e}")))?;
    let is_dir = nix::sys::stat::fstat(&inner).map_err(io::Error::from)?.st_mode & libc::S_IFMT == libc::S_IFDIR;
    let target = create_in_root(root, dest, is_dir)?;
    let target_path = fd_path(&target);
    rootfs::mount(Some(&fd_path(&inner)), &target_path, None, libc::MS_BIND as libc::c_ulong, None)
        .map_err(|e| io::Error::new(e.kind(), format!("binding the image's {sub_path}: {e}")))?;
    // The fd is held while its /proc path names the mount.
    let mounted = reopen_dest()?;
    let mounted_path = fd_path(&mounted);
    let flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
    rootfs::mount(None, &mounted_path, None, flags as libc::c_ulong | locked_flags(&mounted_path)?, None)
}

/// In a user namespace, file systems made for the container are its root's:
/// a tmpfs's root directory (/dev's among them) is owned by the pod's root,
/// and a devpts gives its terminals the group the container's `tty` maps to.
fn owned_by_pod_root(typ: &str, data: &mut Vec<String>, maps: &super::userns::IdMaps) {
    let (uid, gid) = maps.root();
    match typ {
        "tmpfs" => {
            if !data.iter().any(|d| d.starts_with("uid=")) {
                data.push(format!("uid={uid}"));
            }
            if !data.iter().any(|d| d.starts_with("gid=")) {
                data.push(format!("gid={gid}"));
            }
        }
        "devpts" => {
            for option in data.iter_mut() {
                if let Some(group) = option.strip_prefix("gid=").and_then(|g| g.parse::<u32>().ok()) {
                    if let Some(host) = maps.gids.to_host(group) {
                        *option = format!("gid={host}");
                    }
                }
            }
        }
        _ => {}
    }
}

/// Flags a bind remount must keep (nosuid/nodev/noexec locked on the source mount).
fn locked_flags(path: &str) -> io::Result<libc::c_ulong> {
    let st = nix::sys::statvfs::statvfs(path).map_err(io::Error::from)?;
    let f = st.flags();
    use nix::sys::statvfs::FsFlags;
    let mut out = 0;
    for (flag, ms) in [
        (FsFlags::ST_NOSUID, libc::MS_NOSUID),
        (FsFlags::ST_NODEV, libc::MS_NODEV),
        (FsFlags::ST_NOEXEC, libc::MS_NOEXEC),
    ] {
        if f.contains(flag) {
            out |= ms as libc::c_ulong;
        }
    }
    Ok(out)
}

/// /sys/fs/cgroup inside the container: the container's own cgroups (the
/// init is in a cgroup namespace rooted at them), read-only unless privileged.
fn mount_cgroups(root: RawFd, dest: &Path, opts: &Options, plan: &MonitorPlan) -> io::Result<()> {
    let base_flags = (libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_RELATIME) as libc::c_ulong;
    let ro = if opts.readonly { libc::MS_RDONLY as libc::c_ulong } else { 0 };
    if let [only] = plan.cgroup_mounts.as_slice() {
        if only.dir.is_empty() {
            let target = create_in_root(root, dest, true)?;
            return rootfs::mount(
                Some("cgroup"),
                &fd_path(&target),
                Some(&only.fstype),
                base_flags | ro,
                Some(&only.data),
            );
        }
    }
    let target = create_in_root(root, dest, true)?;
    rootfs::mount(Some("tmpfs"), &fd_path(&target), Some("tmpfs"), base_flags, Some("mode=755"))?;
    // The tmpfs is ours and empty: its directories are made and named
    // relative to it, with no lookups through the image.
    let tmpfs = open_in_root(root, dest, libc::O_DIRECTORY | libc::O_RDONLY, 0)?;
    for cg in &plan.cgroup_mounts {
        let name = Path::new(&cg.dir);
        let mut parts = name.components();
        if !matches!((parts.next(), parts.next()), (Some(Component::Normal(_)), None)) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad cgroup mount name {:?}", cg.dir)));
        }
        nix::sys::stat::mkdirat(&tmpfs, name, nix::sys::stat::Mode::from_bits_truncate(0o755))
            .map_err(io::Error::from)?;
        let sub = format!("{}/{}", fd_path(&tmpfs), cg.dir);
        rootfs::mount(Some("cgroup"), &sub, Some(&cg.fstype), base_flags | ro, Some(&cg.data))?;
    }
    if opts.readonly {
        let mounted = open_in_root(root, dest, libc::O_PATH, 0)?;
        let flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY;
        rootfs::mount(None, &fd_path(&mounted), None, flags as libc::c_ulong | base_flags, None)?;
    }
    Ok(())
}

/// The standard device nodes, the spec's devices, and the /dev symlinks.
fn make_devices(root: RawFd, spec: &Spec, maps: Option<&super::userns::IdMaps>) -> io::Result<()> {
    use nix::sys::stat::{makedev, mknodat, Mode, SFlag};
    let dev = open_in_root(root, Path::new("/dev"), libc::O_DIRECTORY | libc::O_RDONLY, 0)?;
    // Path, type, numbers, mode, owner in the container (the spec's; root's by default).
    type Node = (PathBuf, SFlag, u64, u64, u32, (u32, u32));
    let mut nodes: Vec<Node> =
        [("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0)]
            .into_iter()
            .map(|(n, ma, mi)| (PathBuf::from(format!("/dev/{n}")), SFlag::S_IFCHR, ma, mi, 0o666, (0, 0)))
            .collect();
    for d in spec.linux().as_ref().and_then(|l| l.devices().clone()).unwrap_or_default() {
        let kind = match d.typ() {
            oci_spec::runtime::LinuxDeviceType::B => SFlag::S_IFBLK,
            _ => SFlag::S_IFCHR,
        };
        let owner = (d.uid().unwrap_or(0), d.gid().unwrap_or(0));
        nodes.push((d.path().clone(), kind, d.major() as u64, d.minor() as u64, d.file_mode().unwrap_or(0o666), owner));
    }
    // mknod's mode is masked by the umask: none while the nodes are made, so
    // each gets its mode exactly.
    let umask = nix::sys::stat::umask(Mode::empty());
    let made = nodes.into_iter().try_for_each(|(path, kind, major, minor, mode, (uid, gid))| -> io::Result<()> {
        // The node's IDs of the owner: in a user namespace, the IDs its
        // mappings give (its root's for the default nodes, as the node's are
        // the node's root's).
        let (host_uid, host_gid) = match maps {
            None => (uid, gid),
            Some(maps) => maps.uids.to_host(uid).zip(maps.gids.to_host(gid)).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{}: owner {uid}:{gid} is not mapped in the pod's user namespace", path.display()),
                )
            })?,
        };
        let parent = path.parent().unwrap_or(Path::new("/dev"));
        // Most nodes go straight into /dev, opened above; another parent's
        // handle (O_PATH) serves as the directory of the *at calls.
        let other = if parent == Path::new("/dev") { None } else { Some(create_in_root(root, parent, true)?) };
        let dir = other.as_ref().unwrap_or(&dev);
        let name =
            path.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "device without a name"))?;
        let _ = nix::unistd::unlinkat(dir, name, nix::unistd::UnlinkatFlags::NoRemoveDir);
        mknodat(dir, name, kind, Mode::from_bits_truncate(mode & 0o7777), makedev(major, minor))
            .map_err(|e| io::Error::new(io::Error::from(e).kind(), format!("mknod {}: {e}", path.display())))?;
        // mknod made it the node's root's.
        if (host_uid, host_gid) != (0, 0) {
            nix::unistd::fchownat(
                dir,
                name,
                Some(nix::unistd::Uid::from_raw(host_uid)),
                Some(nix::unistd::Gid::from_raw(host_gid)),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(|e| io::Error::new(io::Error::from(e).kind(), format!("chown {}: {e}", path.display())))?;
        }
        Ok(())
    });
    nix::sys::stat::umask(umask);
    made?;
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        let _ = nix::unistd::unlinkat(&dev, name, nix::unistd::UnlinkatFlags::NoRemoveDir);
        nix::unistd::symlinkat(target, &dev, name).map_err(io::Error::from)?;
    }
    Ok(())
}

/// Hides a path: /dev/null over a file, an empty read-only tmpfs over a directory.
fn mask(path: &str) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(meta) if meta.is_dir() => {
            rootfs::mount(Some("tmpfs"), path, Some("tmpfs"), libc::MS_RDONLY as libc::c_ulong, Some("size=0"))
        }
        Ok(_) => rootfs::mount(Some("/dev/null"), path, None, libc::MS_BIND as libc::c_ulong, None),
    }
}

fn make_read_only(path: &str) -> io::Result<()> {
    if !Path::new(path).exists() {
        return Ok(());
    }
    rootfs::mount(Some(path), path, None, (libc::MS_BIND | libc::MS_REC) as libc::c_ulong, None)?;
    let keep = locked_flags(path)?;
    rootfs::mount(None, path, None, (libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY) as libc::c_ulong | keep, None)
}

/// The process's oom_score_adj, rlimits and umask (the spec's, else 022 as
/// runc gives, whatever the daemon's own umask).
fn apply_process_limits(process: &oci_spec::runtime::Process) -> Result<(), String> {
    let umask = process.user().umask().unwrap_or(0o022);
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(umask & 0o777));
    if let Some(adj) = process.oom_score_adj() {
        fs::write("/proc/self/oom_score_adj", adj.to_string()).map_err(|e| format!("oom_score_adj {adj}: {e}"))?;
    }
    for limit in process.rlimits().as_deref().unwrap_or_default() {
        set_rlimit(limit)?;
    }
    Ok(())
}

fn set_rlimit(limit: &oci_spec::runtime::PosixRlimit) -> Result<(), String> {
    let name = format!("{:?}", limit.typ());
    let resource = match name.to_ascii_uppercase().trim_start_matches("RLIMIT").trim_start_matches('_') {
        "CPU" => libc::RLIMIT_CPU,
        "FSIZE" => libc::RLIMIT_FSIZE,
        "DATA" => libc::RLIMIT_DATA,
        "STACK" => libc::RLIMIT_STACK,
        "CORE" => libc::RLIMIT_CORE,
        "RSS" => libc::RLIMIT_RSS,
        "NPROC" => libc::RLIMIT_NPROC,
        "NOFILE" => libc::RLIMIT_NOFILE,
        "MEMLOCK" => libc::RLIMIT_MEMLOCK,
        "AS" => libc::RLIMIT_AS,
        "LOCKS" => libc::RLIMIT_LOCKS,
        "SIGPENDING" => libc::RLIMIT_SIGPENDING,
        "MSGQUEUE" => libc::RLIMIT_MSGQUEUE,
        "NICE" => libc::RLIMIT_NICE,
        "RTPRIO" => libc::RLIMIT_RTPRIO,
        "RTTIME" => libc::RLIMIT_RTTIME,
        _ => return Err(format!("unknown rlimit {name}")),
    };
    if let Err(e) = super::process::set_rlimit(resource, limit.soft(), limit.hard()) {
        return Err(format!("setrlimit {name} {}/{}: {e}", limit.soft(), limit.hard()));
    }
    Ok(())
}

/// Groups, gid, uid, then exactly the spec's capabilities — or, when a
/// seccomp filter must go in without no_new_privs, CAP_SYS_ADMIN kept in the
/// effective set and the spec's sets applied after the filter (see
/// `Confinement`).
fn become_user(process: &oci_spec::runtime::Process, seccomp: Option<PreparedFilters>) -> Result<Confinement, String> {
    switch_user(process)?;
    let sets = CapabilitySets::of(&process.capabilities().clone().unwrap_or_default());
    let no_new_privs = process.no_new_privileges().unwrap_or(false);
    if seccomp.is_some() && !no_new_privs {
        caps::raise(None, caps::CapSet::Effective, caps::Capability::CAP_SYS_ADMIN).map_err(|e| {
            format!(
                "installing a seccomp filter without no_new_privs needs CAP_SYS_ADMIN, which the runtime lacks: {e}"
            )
        })?;
        return Ok(Confinement { seccomp, capabilities_after: Some(sets) });
    }
    sets.apply().map_err(|e| format!("setting capabilities: {e}"))?;
    Ok(Confinement { seccomp, capabilities_after: None })
}

/// The bounding set, supplementary groups, gid and uid (capabilities kept
/// in the permitted set across the uid change).
fn switch_user(process: &oci_spec::runtime::Process) -> Result<(), String> {
    use caps::{CapSet, Capability as Cap, CapsHashSet};
    let bounding: CapsHashSet = process
        .capabilities()
        .as_ref()
        .and_then(|c| c.bounding().as_ref())
        .map(|s| s.iter().filter_map(|c| format!("CAP_{c}").parse::<Cap>().ok()).collect())
        .unwrap_or_default();
    for cap in caps::all() {
        if !bounding.contains(&cap) {
            caps::drop(None, CapSet::Bounding, cap)
                .map_err(|e| format!("dropping {cap} from the bounding set: {e}"))?;
        }
    }
    let user = process.user();
    nix::sys::prctl::set_keepcaps(true).map_err(|e| format!("PR_SET_KEEPCAPS: {e}"))?;
    let groups: Vec<nix::unistd::Gid> =
        user.additional_gids().clone().unwrap_or_default().into_iter().map(nix::unistd::Gid::from_raw).collect();
    nix::unistd::setgroups(&groups).map_err(|e| format!("setgroups: {e}"))?;
    let gid = nix::unistd::Gid::from_raw(user.gid());
    nix::unistd::setresgid(gid, gid, gid).map_err(|e| format!("setgid {}: {e}", user.gid()))?;
    let uid = nix::unistd::Uid::from_raw(user.uid());
    nix::unistd::setresuid(uid, uid, uid).map_err(|e| format!("setuid {}: {e}", user.uid()))?;
    nix::sys::prctl::set_keepcaps(false).map_err(|e| format!("PR_SET_KEEPCAPS: {e}"))?;
    Ok(())
}

/// `nidus-monitor exec`: runs `request.argv` inside a running container —
/// its cgroup and namespaces, its user, capabilities, environment and working
/// directory — with our stdout/stderr, and returns the command's exit code
/// (128 + signal when killed). Why the command could not start is written to
/// `errors` (the caller's fd 3), which a successful execve closes.
pub fn exec_in(request: &crate::monitor::plan::ExecRequest, errors: fs::File) -> i32 {
    let fail = |mut errors: &fs::File, message: String| {
        let _ = errors.write_all(message.as_bytes());
        126
    };
    let spec: Spec = match crate::store::read_existing_json(&request.bundle.join("config.json")) {
        Ok(spec) => spec,
        Err(e) => return fail(&errors, format!("reading the container's spec: {e}")),
    };
    let Some(mut process) = spec.process().clone() else {
        return fail(&errors, "the container's spec has no process".into());
    };
    process.set_args(Some(request.argv.clone()));
    if request.tty {
        // As other runtimes do for an exec with a terminal.
        let mut env = process.env().clone().unwrap_or_default();
        if !env.iter().any(|e| e.starts_with("TERM=")) {
            env.push("TERM=xterm".into());
        }
        process.set_env(Some(env));
    }
    // Read while the bundle is in reach, before joining the container.
    let seccomp = match load_seccomp(&spec, &request.bundle) {
        Ok(seccomp) => seccomp,
        Err(e) => return fail(&errors, e),
    };
    if let Err(e) = join_running(request) {
        return fail(&errors, e);
    }
    // Held open here only: the child reads end-of-file on it once we are gone.
    let (alive_r, alive_w) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(pipe) => pipe,
        Err(e) => return fail(&errors, format!("pipe: {e}")),
    };
    match super::process::fork() {
        Err(e) => fail(&errors, format!("fork: {e}")),
        Ok(super::process::Forked::Child) => {
            drop(alive_w);
            super::process::reset_signals();
            // Inside the container's PID namespace from here: nothing there may
            // read our memory or reach the runtime binary through /proc, and
            // the command inherits stdin, stdout and stderr only.
            let hygiene = nix::sys::prctl::set_dumpable(false)
                .map_err(|e| format!("prctl(PR_SET_DUMPABLE): {e}"))
                .and_then(|()| super::process::close_on_exec_from(3).map_err(|e| format!("close_range: {e}")))
                .and_then(|()| match request.tty {
                    true => super::pty::take_stdin_as_controlling_terminal()
                        .map_err(|e| format!("making the terminal the controlling terminal: {e}")),
                    false => Ok(()),
                });
            if let Err(e) = hygiene {
                std::process::exit(fail(&errors, e));
            }
            let code = match prepare_exec(&process, seccomp, &alive_r) {
                Ok(exec) => {
                    let error = exec.run();
                    let _ = (&errors).write_all(error.message.as_bytes());
                    error.exit_code
                }
                Err(e) => fail(&errors, e),
            };
            std::process::exit(code)
        }
        Ok(super::process::Forked::Parent { child }) => {
            drop((errors, alive_r));
            loop {
                match nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(child), None) {
                    Ok(nix::sys::wait::WaitStatus::Exited(_, code)) => return code,
                    Ok(nix::sys::wait::WaitStatus::Signaled(_, sig, _)) => return 128 + sig as i32,
                    Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => return 255,
                }
            }
        }
    }
}

/// Joins a running container's cgroup and namespaces (the PID namespace for
/// the child to come).
fn join_running(request: &crate::monitor::plan::ExecRequest) -> Result<(), String> {
    let pid = request.init.pid;
    // Open every namespace before entering any: /proc changes meaning after the mount namespace.
    let mut opened = Vec::new();
    for (kind, flag) in [
        ("ipc", CloneFlags::CLONE_NEWIPC),
        ("uts", CloneFlags::CLONE_NEWUTS),
        ("net", CloneFlags::CLONE_NEWNET),
        ("cgroup", CloneFlags::CLONE_NEWCGROUP),
        ("pid", CloneFlags::CLONE_NEWPID),
        ("mnt", CloneFlags::CLONE_NEWNS),
    ] {
        let path = format!("/proc/{pid}/ns/{kind}");
        let file = fs::File::open(&path).map_err(|e| format!("the container is not running ({path}: {e})"))?;
        opened.push((file, flag, kind));
    }
    // A container in its pod's user namespace: joined last (its root then),
    // once the node's root has joined the rest.
    let user = format!("/proc/{pid}/ns/user");
    let user = fs::File::open(&user).map_err(|e| format!("the container is not running ({user}: {e})"))?;
    let own_user = fs::metadata("/proc/self/ns/user").map_err(|e| format!("/proc/self/ns/user: {e}"))?;
    let theirs = user.metadata().map_err(|e| format!("the container's user namespace: {e}"))?;
    let in_userns = {
        use std::os::unix::fs::MetadataExt;
        (theirs.dev(), theirs.ino()) != (own_user.dev(), own_user.ino())
    };
    if !request.init.is_running() {
        return Err("the container is not running".into());
    }
    for procs in &request.cgroup_procs {
        fs::write(procs, "0").map_err(|e| format!("cannot join cgroup {}: {e}", procs.display()))?;
    }
    for (file, flag, kind) in &opened {
        nix::sched::setns(file, *flag).map_err(|e| format!("cannot join the container's {kind} namespace: {e}"))?;
    }
    if in_userns {
        super::userns::join_as_root(std::os::fd::AsFd::as_fd(&user))
            .map_err(|e| format!("cannot join the container's user namespace: {e}"))?;
    }
    Ok(())
}

/// In the exec child: the container process's oom_score_adj, rlimits and
/// umask, working directory, user, capabilities, no_new_privs, and its seccomp
/// filter as the last step before execve.
/// `helper_alive` is the read end of a pipe only the helper holds open.
fn prepare_exec(
    process: &oci_spec::runtime::Process,
    seccomp: Option<PreparedFilters>,
    helper_alive: &OwnedFd,
) -> Result<Exec, String> {
    apply_process_limits(process)?;
    let cwd = process.cwd();
    std::env::set_current_dir(cwd).map_err(|e| format!("working directory {}: {e}", cwd.display()))?;
    let confinement = become_user(process, seccomp)?;
    // Die with the helper, so a timed-out exec does not linger. Set after the
    // uid change, which clears it; a helper gone before that means give up.
    // (Its pid cannot tell: from inside the container's PID namespace the
    // helper has none, and a helper killed before we looked would go unseen.)
    nix::sys::prctl::set_pdeathsig(Some(nix::sys::signal::Signal::SIGKILL))
        .map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
    if helper_gone(helper_alive) {
        return Err("the exec helper is gone".into());
    }
    if process.no_new_privileges().unwrap_or(false) {
        super::process::set_no_new_privs().map_err(|e| format!("no_new_privs: {e}"))?;
    }
    exec_of(process, confinement)
}

/// True when the pipe's only writer (the helper) has closed it, i.e. ended.
fn helper_gone(alive: &OwnedFd) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let mut fds = [PollFd::new(alive.as_fd(), PollFlags::POLLIN)];
    // Nothing is ever written: readiness is the end of the pipe, and a pipe
    // that cannot be polled vouches for nothing.
    !matches!(poll(&mut fds, PollTimeout::ZERO), Ok(0))
}

fn exec_of(process: &oci_spec::runtime::Process, confinement: Confinement) -> Result<Exec, String> {
    let env: Vec<String> = process.env().clone().unwrap_or_default();
    let path_dirs = env
        .iter()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or(crate::container::command::DEFAULT_PATH)
        .split(':')
        .filter(|d| !d.is_empty())
        .map(String::from)
        .collect();
    let to_c = |items: &[String]| -> Result<Vec<CString>, String> {
        items.iter().map(|s| CString::new(s.as_str()).map_err(|_| format!("NUL byte in {s:?}"))).collect()
    };
    Ok(Exec {
        hooks: InContainerHooks::none(),
        argv: to_c(process.args().as_deref().unwrap_or_default())?,
        env: to_c(&env)?,
        path_dirs,
        confinement,
    })
}
