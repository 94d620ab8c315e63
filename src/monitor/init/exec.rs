//! The last steps before execve, for a container's init and for a command
//! run in a running container (`nidus-monitor exec`): the process's limits,
//! its user and capabilities, its AppArmor profile and seccomp filter, and
//! the lookup of its command in `$PATH`.

use std::ffi::CString;
use std::fs;
use std::io::{self, Write};
use std::os::fd::OwnedFd;

use nix::sched::CloneFlags;
use oci_spec::runtime::Spec;

use super::{load_seccomp, InContainerHooks};
use crate::apparmor::ExecProfile;
use crate::linux::capability_sets::CapabilitySets;
use crate::linux::seccomp::PreparedFilters;

/// What remains to do once StartContainer releases the init.
pub(super) struct Exec {
    /// The startContainer hooks, run once StartContainer releases the init.
    pub(super) hooks: InContainerHooks,
    pub(super) argv: Vec<CString>,
    pub(super) env: Vec<CString>,
    pub(super) path_dirs: Vec<String>,
    pub(super) confinement: Confinement,
}

/// The last steps before execve: the seccomp filter, and the capability sets
/// when they must follow it. Installing a filter needs no_new_privs or
/// CAP_SYS_ADMIN; without no_new_privs (kubelet's allowPrivilegeEscalation,
/// the default) the process keeps CAP_SYS_ADMIN in its effective set until
/// the filter is in, and drops to its own sets right after — so the filter
/// also judges that capset(2), the ambient prctl(2)s and the execve(2).
///
/// The AppArmor profile is asked for first (it takes effect at the execve):
/// the write to `/proc` must come before the seccomp filter, which may deny
/// it, and needs no capability of an unconfined process, so the drops before
/// it do not matter; nor does no_new_privs, which only bounds transitions
/// of a process already confined.
pub(super) struct Confinement {
    apparmor: Option<ExecProfile>,
    seccomp: Option<PreparedFilters>,
    capabilities_after: Option<CapabilitySets>,
}

impl Confinement {
    /// The AppArmor profile to ask for at the execve.
    pub(super) fn with_apparmor(self, apparmor: Option<ExecProfile>) -> Self {
        Self { apparmor, ..self }
    }

    fn apply(&self) -> Result<(), String> {
        if let Some(profile) = &self.apparmor {
            profile.apply().map_err(|e| e.to_string())?;
        }
        if let Some(filters) = &self.seccomp {
            filters.install().map_err(|e| format!("installing the seccomp filter: {e}"))?;
        }
        if let Some(sets) = &self.capabilities_after {
            sets.apply().map_err(|e| format!("setting capabilities after the seccomp filter: {e}"))?;
        }
        Ok(())
    }
}

pub(super) struct ExecError {
    pub(super) message: String,
    pub(super) exit_code: i32,
}

impl Exec {
    /// Resolves argv[0] like a shell (`$PATH` of the container's environment) and execs.
    pub(super) fn run(self) -> ExecError {
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

/// The process's oom_score_adj, rlimits and umask (the spec's, else 022 as
/// runc gives, whatever the daemon's own umask).
pub(super) fn apply_process_limits(process: &oci_spec::runtime::Process) -> Result<(), String> {
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
    if let Err(e) = crate::linux::process::set_rlimit(resource, limit.soft(), limit.hard()) {
        return Err(format!("setrlimit {name} {}/{}: {e}", limit.soft(), limit.hard()));
    }
    Ok(())
}

/// Groups, gid, uid, then exactly the spec's capabilities — or, when a
/// seccomp filter must go in without no_new_privs, CAP_SYS_ADMIN kept in the
/// effective set and the spec's sets applied after the filter (see
/// `Confinement`).
pub(super) fn become_user(
    process: &oci_spec::runtime::Process,
    seccomp: Option<PreparedFilters>,
) -> Result<Confinement, String> {
    switch_user(process)?;
    let sets = CapabilitySets::of(&process.capabilities().clone().unwrap_or_default());
    let no_new_privs = process.no_new_privileges().unwrap_or(false);
    if seccomp.is_some() && !no_new_privs {
        caps::raise(None, caps::CapSet::Effective, caps::Capability::CAP_SYS_ADMIN).map_err(|e| {
            format!(
                "installing a seccomp filter without no_new_privs needs CAP_SYS_ADMIN, which the runtime lacks: {e}"
            )
        })?;
        return Ok(Confinement { apparmor: None, seccomp, capabilities_after: Some(sets) });
    }
    sets.apply().map_err(|e| format!("setting capabilities: {e}"))?;
    Ok(Confinement { apparmor: None, seccomp, capabilities_after: None })
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
    // Asked for through the node's procfs, opened before joining the
    // container, whose processes could have mounted over its /proc.
    let apparmor = match process.apparmor_profile() {
        Some(profile) => match ExecProfile::open(std::path::Path::new("/proc"), profile) {
            Ok(exec_profile) => Some(exec_profile),
            Err(e) => return fail(&errors, e.to_string()),
        },
        None => None,
    };
    if let Err(e) = join_running(request) {
        return fail(&errors, e);
    }
    // Held open here only: the child reads end-of-file on it once we are gone.
    let (alive_r, alive_w) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(pipe) => pipe,
        Err(e) => return fail(&errors, format!("pipe: {e}")),
    };
    match crate::linux::process::fork() {
        Err(e) => fail(&errors, format!("fork: {e}")),
        Ok(crate::linux::process::Forked::Child) => {
            drop(alive_w);
            crate::linux::process::reset_signals();
            // Inside the container's PID namespace from here: nothing there may
            // read our memory or reach the runtime binary through /proc, and
            // the command inherits stdin, stdout and stderr only.
            let hygiene = nix::sys::prctl::set_dumpable(false)
                .map_err(|e| format!("prctl(PR_SET_DUMPABLE): {e}"))
                .and_then(|()| crate::linux::process::close_on_exec_from(3).map_err(|e| format!("close_range: {e}")))
                .and_then(|()| match request.tty {
                    true => crate::linux::pty::take_stdin_as_controlling_terminal()
                        .map_err(|e| format!("making the terminal the controlling terminal: {e}")),
                    false => Ok(()),
                });
            if let Err(e) = hygiene {
                std::process::exit(fail(&errors, e));
            }
            let code = match prepare_exec(&process, seccomp, apparmor, &alive_r) {
                Ok(exec) => {
                    let error = exec.run();
                    let _ = (&errors).write_all(error.message.as_bytes());
                    error.exit_code
                }
                Err(e) => fail(&errors, e),
            };
            std::process::exit(code)
        }
        Ok(crate::linux::process::Forked::Parent { child }) => {
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
        crate::linux::userns::join_as_root(std::os::fd::AsFd::as_fd(&user))
            .map_err(|e| format!("cannot join the container's user namespace: {e}"))?;
    }
    Ok(())
}

/// In the exec child: the container process's oom_score_adj, rlimits and
/// umask, working directory, user, capabilities, no_new_privs, and its
/// AppArmor profile and seccomp filter as the last steps before execve.
/// `helper_alive` is the read end of a pipe only the helper holds open.
fn prepare_exec(
    process: &oci_spec::runtime::Process,
    seccomp: Option<PreparedFilters>,
    apparmor: Option<ExecProfile>,
    helper_alive: &OwnedFd,
) -> Result<Exec, String> {
    apply_process_limits(process)?;
    let cwd = process.cwd();
    std::env::set_current_dir(cwd).map_err(|e| format!("working directory {}: {e}", cwd.display()))?;
    let confinement = become_user(process, seccomp)?.with_apparmor(apparmor);
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
        crate::linux::process::set_no_new_privs().map_err(|e| format!("no_new_privs: {e}"))?;
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

pub(super) fn exec_of(process: &oci_spec::runtime::Process, confinement: Confinement) -> Result<Exec, String> {
    let env: Vec<String> = process.env().clone().unwrap_or_default();
    let path_dirs = env
        .iter()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or(crate::monitor::plan::DEFAULT_PATH)
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
