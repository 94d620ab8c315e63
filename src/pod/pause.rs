//! The pause process: one per pod, holding the pod's namespaces. `nidus pause`
//! waits for `go` on stdin (the daemon starts it early), joins the pod cgroup
//! and unshares the namespaces, then forks the real
//! pause (PID 1 of a new PID namespace when asked). A pod with a user
//! namespace gets it with the others in one clone, so they are all owned by
//! it; the launcher writes its ID maps, and only then does the pause become
//! the namespace's root and go on. The pause sets the hostname,
//! loopback and sysctls, drops every capability and file descriptor, and then
//! execs the tiny idle loop (linux::tiny_programs), which only reaps zombies
//! until it is killed. The launcher prints one reply line —
//! `ok PID STARTTIME` or `error MESSAGE` (`wire::PauseStarted`) — and exits,
//! so pause is never the daemon's child by birth.

use std::fs;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use crate::linux::namespaces::{self, NewNamespaces};
use crate::linux::userns::{IdMap, IdMaps};
use crate::linux::{net, process};
use crate::wire::{words, Answer, Built, Go, Message, PauseStarted};

/// What the daemon asks of a pause process (the `nidus pause` arguments).
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct PauseArgs {
    /// Hostname to set in the new UTS namespace.
    #[arg(long)]
    pub(crate) hostname: Option<String>,
    /// A sysctl to set, as PATH=VALUE with PATH below /proc/sys.
    #[arg(long = "sysctl")]
    pub(crate) sysctls: Vec<String>,
    #[arg(long)]
    pub(crate) new_net: bool,
    #[arg(long)]
    pub(crate) new_ipc: bool,
    #[arg(long)]
    pub(crate) new_uts: bool,
    #[arg(long)]
    pub(crate) new_pid: bool,
    /// A cgroup.procs file to join before anything else (once per hierarchy).
    #[arg(long = "cgroup-procs")]
    pub(crate) cgroup_procs: Vec<PathBuf>,
    /// A user namespace of the pod's own: its UID and GID ranges, each as
    /// CONTAINER_ID:HOST_ID:LENGTH.
    #[arg(long = "uid-map", value_parser = parse_map)]
    pub(crate) uid_map: Option<IdMap>,
    #[arg(long = "gid-map", value_parser = parse_map)]
    pub(crate) gid_map: Option<IdMap>,
}

/// `CONTAINER_ID:HOST_ID:LENGTH`.
fn parse_map(text: &str) -> Result<IdMap, String> {
    let numbers: Vec<u32> =
        text.split(':').map(str::parse).collect::<Result<_, _>>().map_err(|_| format!("bad ID map {text:?}"))?;
    match numbers.as_slice() {
        [container_id, host_id, length] => {
            Ok(IdMap { container_id: *container_id, host_id: *host_id, length: *length })
        }
        _ => Err(format!("bad ID map {text:?} (CONTAINER_ID:HOST_ID:LENGTH)")),
    }
}

fn map_arg(map: &IdMap) -> String {
    format!("{}:{}:{}", map.container_id, map.host_id, map.length)
}

impl PauseArgs {
    pub(crate) fn namespaces(&self) -> NewNamespaces {
        NewNamespaces { net: self.new_net, ipc: self.new_ipc, uts: self.new_uts, pid: self.new_pid }
    }

    /// The pod's user namespace, when it has one.
    pub(crate) fn user_namespace(&self) -> Option<IdMaps> {
        Some(IdMaps { uids: self.uid_map?, gids: self.gid_map? })
    }

    /// Parses the arguments `to_args` writes, without clap (for the small
    /// `nidus-pause` binary, which must stay tiny).
    pub fn from_args(args: impl Iterator<Item = String>) -> Result<Self, String> {
        let mut parsed = Self::default();
        for arg in args {
            let (flag, value) = match arg.split_once('=') {
                Some((f, v)) => (f.to_string(), Some(v.to_string())),
                None => (arg.clone(), None),
            };
            match (flag.as_str(), value) {
                ("--hostname", Some(v)) => parsed.hostname = Some(v),
                ("--sysctl", Some(v)) => parsed.sysctls.push(v),
                ("--cgroup-procs", Some(v)) => parsed.cgroup_procs.push(PathBuf::from(v)),
                ("--uid-map", Some(v)) => parsed.uid_map = Some(parse_map(&v)?),
                ("--gid-map", Some(v)) => parsed.gid_map = Some(parse_map(&v)?),
                ("--new-net", None) => parsed.new_net = true,
                ("--new-ipc", None) => parsed.new_ipc = true,
                ("--new-uts", None) => parsed.new_uts = true,
                ("--new-pid", None) => parsed.new_pid = true,
                _ => return Err(format!("unknown pause argument {arg:?}")),
            }
        }
        Ok(parsed)
    }

    /// The command line for these arguments (after the `pause` subcommand).
    pub(crate) fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(h) = &self.hostname {
            args.push(format!("--hostname={h}"));
        }
        for s in &self.sysctls {
            args.push(format!("--sysctl={s}"));
        }
        for (on, flag) in [
            (self.new_net, "--new-net"),
            (self.new_ipc, "--new-ipc"),
            (self.new_uts, "--new-uts"),
            (self.new_pid, "--new-pid"),
        ] {
            if on {
                args.push(flag.into());
            }
        }
        for f in &self.cgroup_procs {
            args.push(format!("--cgroup-procs={}", f.display()));
        }
        if let Some(map) = &self.uid_map {
            args.push(format!("--uid-map={}", map_arg(map)));
        }
        if let Some(map) = &self.gid_map {
            args.push(format!("--gid-map={}", map_arg(map)));
        }
        args
    }
}

/// Runs `nidus pause`; returns the launcher's exit code (the pause process
/// itself never returns).
pub fn run(args: &PauseArgs) -> i32 {
    // The daemon starts this while it prepares the pod and says `go` once
    // the pod's cgroups exist; end of input means it gave up.
    let mut go = String::new();
    if std::io::stdin().read_line(&mut go).is_err() || Go::decode(go.trim_end()).is_err() {
        return 1;
    }
    let reply = |answer: Answer<PauseStarted>| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", answer.encode());
        let _ = out.flush();
    };
    let refuse = |why: String| reply(Answer::Refused(why));
    if let Err(e) = enter(args) {
        refuse(e);
        return 1;
    }
    let (read_end, write_end) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => {
            refuse(format!("cannot create a pipe: {e}"));
            return 1;
        }
    };
    // With a user namespace: the child waits on this until its maps are written.
    let mapped = match args.user_namespace().map(|_| nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)).transpose() {
        Ok(mapped) => mapped,
        Err(e) => {
            refuse(format!("cannot create a pipe: {e}"));
            return 1;
        }
    };
    let forked = match args.user_namespace() {
        None => process::fork(),
        Some(_) => {
            crate::linux::clone3::fork_with_flags(libc::CLONE_NEWUSER as u64 | args.namespaces().clone_flags_bits())
        }
    };
    match forked {
        Err(e) => {
            refuse(format!("cannot fork the pause process: {e}"));
            1
        }
        Ok(process::Forked::Child) => {
            drop(read_end);
            if let Some((wait_r, wait_w)) = mapped {
                drop(wait_w);
                let mut byte = [0u8; 1];
                let ready = matches!(nix::unistd::read(&wait_r, &mut byte), Ok(1));
                let rooted = if ready {
                    crate::linux::userns::become_root().map_err(|e| e.to_string())
                } else {
                    Err("the launcher gave up".into())
                };
                if let Err(e) = rooted {
                    let why = Answer::<Built>::Refused(format!("cannot become the user namespace's root: {e}"));
                    let _ = write!(fs::File::from(write_end), "{}", why.encode());
                    std::process::exit(1);
                }
            }
            become_pause(args, write_end)
        }
        Ok(process::Forked::Parent { child }) => {
            drop(write_end);
            if let (Some(maps), Some((wait_r, wait_w))) = (args.user_namespace(), mapped) {
                drop(wait_r);
                if let Err(e) = crate::linux::userns::write_maps(child, &maps) {
                    let _ =
                        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child), nix::sys::signal::Signal::SIGKILL);
                    refuse(format!("cannot write the user namespace's ID maps: {e}"));
                    return 1;
                }
                let _ = nix::unistd::write(&wait_w, words::MAPS_WRITTEN);
            }
            let mut status = String::new();
            let _ = fs::File::from(read_end).read_to_string(&mut status);
            match Answer::<Built>::decode(&status) {
                Ok(Answer::Done(Built)) => match process::read_stat(child) {
                    Ok(stat) => {
                        reply(Answer::Done(PauseStarted { pid: child, start_time: stat.start_time }));
                        0
                    }
                    Err(e) => {
                        refuse(format!("pause process {child} vanished: {e}"));
                        1
                    }
                },
                Ok(Answer::Refused(why)) => {
                    refuse(why);
                    1
                }
                Err(_) => {
                    refuse("the pause process died during set-up".into());
                    1
                }
            }
        }
    }
}

/// Launcher side: join the pod cgroup, then unshare the namespaces (with a
/// user namespace, the clone of the pause makes them all at once instead).
fn enter(args: &PauseArgs) -> Result<(), String> {
    for procs in &args.cgroup_procs {
        fs::write(procs, "0").map_err(|e| format!("cannot join cgroup {}: {e}", procs.display()))?;
    }
    if args.user_namespace().is_some() {
        return Ok(());
    }
    namespaces::unshare(args.namespaces()).map_err(|e| format!("cannot create namespaces: {e}"))
}

/// Child side: set the sandbox up, report, and settle into reaping.
fn become_pause(args: &PauseArgs, report: OwnedFd) -> ! {
    let mut report = fs::File::from(report);
    // Before set_up: the pause's own root has no /dev/null.
    let _ = process::stdio_to_devnull();
    if let Err(e) = set_up(args) {
        let _ = write!(report, "{}", Answer::<Built>::Refused(e).encode());
        std::process::exit(1);
    }
    let _ = write!(report, "{}", Built.encode());
    drop(report);
    let _ = process::close_fds_from(3);
    // The rest of the pod's life in a few kilobytes; the same loop in this
    // process should the tiny program fail to exec.
    let _ = crate::linux::tiny_programs::PAUSE_IDLE.exec(&[], &[]);
    process::reap_children_forever()
}

fn set_up(args: &PauseArgs) -> Result<(), String> {
    let new = args.namespaces();
    if new.uts {
        if let Some(name) = &args.hostname {
            namespaces::set_hostname(name).map_err(|e| format!("cannot set hostname {name:?}: {e}"))?;
        }
    }
    if new.net {
        net::bring_up_loopback().map_err(|e| format!("cannot bring up loopback: {e}"))?;
    }
    for sysctl in &args.sysctls {
        let (path, value) = sysctl.split_once('=').ok_or_else(|| format!("malformed sysctl {sysctl:?}"))?;
        fs::write(format!("/proc/sys/{path}"), value)
            .map_err(|e| format!("cannot set sysctl {} to {value:?}: {e}", path.replace('/', ".")))?;
    }
    // A container sharing the pod's PID namespace sees pause as a process of
    // its own: nothing of the node may be reachable through it (its root,
    // cwd, memory or executable in /proc).
    nix::sys::prctl::set_dumpable(false).map_err(|e| format!("prctl(PR_SET_DUMPABLE): {e}"))?;
    crate::linux::rootfs::enter_empty_root("/proc")
        .map_err(|e| format!("cannot give the pause process an empty root: {e}"))?;
    nix::unistd::setsid().map_err(|e| format!("setsid: {e}"))?;
    std::env::set_current_dir("/").map_err(|e| format!("chdir /: {e}"))?;
    process::exit_on_term_signals().map_err(|e| format!("signal handlers: {e}"))?;
    process::drop_all_capabilities().map_err(|e| format!("cannot drop capabilities: {e}"))?;
    process::set_no_new_privs().map_err(|e| format!("no_new_privs: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: PauseArgs,
    }

    #[test]
    fn arguments_round_trip() {
        let args = PauseArgs {
            hostname: Some("web-0".into()),
            sysctls: vec!["net/ipv4/ip_forward=1".into(), "kernel/shmmax=a=b".into()],
            new_net: true,
            new_ipc: true,
            new_uts: true,
            new_pid: false,
            cgroup_procs: vec!["/sys/fs/cgroup/pids/x/cgroup.procs".into()],
            uid_map: Some(IdMap { container_id: 0, host_id: 65536, length: 65536 }),
            gid_map: Some(IdMap { container_id: 0, host_id: 131072, length: 65536 }),
        };
        let parsed = Wrapper::parse_from(std::iter::once("pause".to_string()).chain(args.to_args())).args;
        assert_eq!(parsed, args);
        assert_eq!(PauseArgs::from_args(args.to_args().into_iter()).unwrap(), args);
        assert!(PauseArgs::from_args(["--bogus".to_string()].into_iter()).is_err());
    }
}
