//! A restored container's init: instead of forking and building one, the
//! monitor runs `criu restore` in a helper child (its own mount namespace
//! holding the container's overlay, already in the container's cgroup) with
//! new stdout/stderr pipes in place of the checkpointed ones. CRIU restores
//! the tree as the monitor's own child (`--restore-sibling`), left stopped;
//! StartContainer's byte on the start pipe resumes it (SIGCONT) through a
//! detached resumer process, so the supervision (which may exec another
//! program) sees only the usual start handshake.

use std::fs::{self, File};
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;

use super::plan::{MonitorPlan, RestorePlan, RunFiles};
use super::program::pipe;
use crate::linux::process::{self, Forked};
use crate::linux::rootfs;

/// What the supervision needs from a restored init.
pub(crate) struct RestoredInit {
    pub(crate) pid: i32,
    /// Read ends of the init's new stdout and stderr.
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
    /// The monitor's ends of the start handshake (as for a built init): a
    /// byte on `start` resumes the tree; `exec_error` then reads EOF.
    pub(crate) start: OwnedFd,
    pub(crate) exec_error: OwnedFd,
}

/// The `criu restore` command line; `fds` are the inherited descriptors'
/// numbers (stdout, stderr, netns).
fn criu_args(plan: &MonitorPlan, restore: &RestorePlan, files: &RunFiles, fds: [i32; 3]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        restore.criu.display().to_string(),
        "restore".into(),
        "--images-dir".into(),
        restore.images.display().to_string(),
        "--work-dir".into(),
        restore.work_dir.display().to_string(),
        "--log-file".into(),
        "restore.log".into(),
        "-v4".into(),
        "--root".into(),
        files.rootfs().display().to_string(),
        "--restore-detached".into(),
        "--restore-sibling".into(),
        "--leave-stopped".into(),
        "--file-locks".into(),
        "--manage-cgroups=ignore".into(),
        // No TCP connections are dumped: no iptables/nftables lock needed.
        "--network-lock".into(),
        "skip".into(),
        "--pidfile".into(),
        files.restored_pid().display().to_string(),
        "--inherit-fd".into(),
        format!("fd[{}]:{}", fds[0], restore.stdout_pipe),
        "--inherit-fd".into(),
        format!("fd[{}]:{}", fds[1], restore.stderr_pipe),
        "--inherit-fd".into(),
        format!("fd[{}]:{}", fds[2], crate::checkpoint::criu::NET_KEY),
    ];
    for (key, source) in &restore.external_mounts {
        args.extend(["--external".into(), format!("mnt[{key}]:{}", source.display())]);
    }
    let _ = plan;
    args
}

/// Restores the container; the init is this process's child when it returns.
pub(crate) fn restore(plan: &MonitorPlan, restore: &RestorePlan, files: &RunFiles) -> Result<RestoredInit, String> {
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let net = File::open(&restore.net_ns).map_err(|e| format!("opening {}: {e}", restore.net_ns.display()))?;
    let fds = [out_w.as_raw_fd(), err_w.as_raw_fd(), net.as_raw_fd()];
    let args = criu_args(plan, restore, files, fds);
    let _ = fs::remove_file(files.restored_pid());
    let helper = match process::fork().map_err(|e| format!("fork: {e}"))? {
        Forked::Child => {
            let code = match run_criu(plan, restore, &[out_w.as_fd(), err_w.as_fd(), net.as_fd()], &args) {
                Ok(never) => match never {},
                Err(e) => {
                    eprintln!("monitor: restore helper: {e}");
                    1
                }
            };
            std::process::exit(code)
        }
        Forked::Parent { child } => child,
    };
    drop((out_w, err_w, net));
    let log = restore.work_dir.join("restore.log");
    loop {
        match waitpid(Pid::from_raw(helper), None) {
            Ok(WaitStatus::Exited(_, 0)) => break,
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => {
                return Err(format!("criu restore failed; its log is {}: {}", log.display(), log_tail(&log)))
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(format!("waiting for criu restore: {e}")),
        }
    }
    // The images hold every page of the container's memory: once restored,
    // a copy unpacked for this container goes (an image's layer stays).
    if restore.images.starts_with(&restore.work_dir) {
        let _ = fs::remove_dir_all(&restore.images);
    }
    let pid: i32 = fs::read_to_string(files.restored_pid())
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .ok_or_else(|| format!("criu restore left no pid in {}", files.restored_pid().display()))?;
    let (start_r, start_w) = pipe()?;
    let (exec_r, exec_w) = pipe()?;
    // Forked twice so the resumer is nobody's child here (the daemon, a
    // subreaper, reaps it): the supervision waits for the init only.
    match process::fork().map_err(|e| format!("fork: {e}"))? {
        Forked::Child => {
            drop((start_w, exec_r, out_r, err_r));
            if let Ok(Forked::Child) = process::fork() {
                resume_on_start(pid, &plan.cgroup_procs, start_r, exec_w);
            }
            std::process::exit(0)
        }
        Forked::Parent { child } => {
            let _ = waitpid(Pid::from_raw(child), None);
        }
    }
    drop((start_r, exec_w));
    Ok(RestoredInit { pid, stdout: out_r, stderr: err_r, start: start_w, exec_error: exec_r })
}

/// In the resumer: waits for StartContainer's byte (EOF: the monitor is
/// gone), then continues every stopped process of the container; closing
/// `exec_error` tells the monitor it is running.
fn resume_on_start(init: i32, cgroup_procs: &[std::path::PathBuf], start: OwnedFd, exec_error: OwnedFd) {
    let mut byte = [0u8; 1];
    if !matches!(File::from(start).read(&mut byte), Ok(1)) {
        return;
    }
    let mut pids = vec![init];
    for procs in cgroup_procs {
        let text = fs::read_to_string(procs).unwrap_or_default();
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    pids.sort_unstable();
    pids.dedup();
    for pid in pids {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGCONT);
    }
    drop(exec_error);
}

/// In the helper child: into the container's cgroup, a private mount
/// namespace with the container's overlay at the rootfs mount point, the
/// inherited descriptors kept across exec, then CRIU.
fn run_criu(
    plan: &MonitorPlan,
    restore: &RestorePlan,
    keep: &[std::os::fd::BorrowedFd<'_>],
    args: &[String],
) -> Result<std::convert::Infallible, String> {
    for procs in &plan.cgroup_procs {
        fs::write(procs, "0").map_err(|e| format!("cannot join cgroup {}: {e}", procs.display()))?;
    }
    // CRIU restores the tree in its own UTS and IPC namespaces (the dump left
    // them out): the new pod's.
    for (kind, path) in &restore.join_ns {
        let flag = match kind.as_str() {
            "uts" => nix::sched::CloneFlags::CLONE_NEWUTS,
            "ipc" => nix::sched::CloneFlags::CLONE_NEWIPC,
            other => return Err(format!("cannot join a {other} namespace")),
        };
        let file = File::open(path).map_err(|e| format!("opening {}: {e}", path.display()))?;
        nix::sched::setns(&file, flag).map_err(|e| format!("joining {}: {e}", path.display()))?;
    }
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).map_err(|e| format!("unshare(CLONE_NEWNS): {e}"))?;
    rootfs::mount(None, "/", None, (libc::MS_REC | libc::MS_SLAVE) as libc::c_ulong, None)
        .map_err(|e| format!("cannot make / a slave mount: {e}"))?;
    let target = RunFiles::new(&plan.run_dir).rootfs();
    rootfs::mount_overlay(&plan.rootfs.lower, &plan.rootfs.upper, &plan.rootfs.work, &target)
        .map_err(|e| format!("cannot mount the container's root filesystem: {e}"))?;
    for fd in keep {
        fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty())).map_err(|e| format!("fcntl: {e}"))?;
    }
    let cargs: Vec<std::ffi::CString> =
        args.iter().map(|a| std::ffi::CString::new(a.as_str())).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    let path = cargs.first().ok_or("no criu")?.clone();
    let env: [std::ffi::CString; 1] = [c"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned()];
    let err = nix::unistd::execve(&path, &cargs, &env).unwrap_err();
    Err(format!("exec {}: {err}", path.to_string_lossy()))
}

fn log_tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let errors: Vec<&str> = text.lines().filter(|l| l.contains("Error")).collect();
    errors[errors.len().saturating_sub(3)..].join(" | ")
}
