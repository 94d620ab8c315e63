//! Processes: identity that survives PID reuse (pid + start time + boot id),
//! pidfds, the child-subreaper flag, fork, and the small process-hygiene calls
//! a long-lived helper (pause, monitor) makes before settling down.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Who a process is, precisely enough that a reused PID is never mistaken for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProcessIdentity {
    pub(crate) pid: i32,
    /// `starttime` from `/proc/PID/stat`, in clock ticks after boot.
    pub(crate) start_time: u64,
    /// `/proc/sys/kernel/random/boot_id` when the process was recorded.
    pub(crate) boot_id: String,
}

/// The few fields of `/proc/PID/stat` nidus uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    pub(crate) state: char,
    pub(crate) ppid: i32,
    /// The process group.
    pub(crate) pgrp: i32,
    pub(crate) start_time: u64,
}

impl ProcStat {
    /// A zombie or dead task is not running anymore, whatever its pid says.
    pub(crate) fn is_running(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// The kernel's id of the current boot; it changes at every reboot.
pub(crate) fn boot_id() -> io::Result<String> {
    Ok(fs::read_to_string("/proc/sys/kernel/random/boot_id")?.trim().to_string())
}

pub(crate) fn read_stat(pid: i32) -> io::Result<ProcStat> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat"))?)
}

/// Parses `/proc/PID/stat`; the command name may hold spaces and parentheses,
/// so fields are counted from the last `)`.
pub(crate) fn parse_stat(text: &str) -> io::Result<ProcStat> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "malformed /proc/PID/stat");
    let rest = &text[text.rfind(')').ok_or_else(bad)? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state); starttime is field 22.
    Ok(ProcStat {
        state: fields.first().and_then(|s| s.chars().next()).ok_or_else(bad)?,
        ppid: fields.get(1).and_then(|s| s.parse().ok()).ok_or_else(bad)?,
        pgrp: fields.get(2).and_then(|s| s.parse().ok()).ok_or_else(bad)?,
        start_time: fields.get(19).and_then(|s| s.parse().ok()).ok_or_else(bad)?,
    })
}

/// The running processes of process group `pgid`, with their stat.
pub(crate) fn group_members(pgid: i32) -> Vec<(i32, ProcStat)> {
    let Ok(entries) = fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, read_stat(pid).ok()?)))
        .filter(|(_, stat)| stat.pgrp == pgid && stat.is_running())
        .collect()
}

impl ProcessIdentity {
    /// Records the identity of a live process.
    pub(crate) fn of(pid: i32) -> io::Result<Self> {
        Ok(Self { pid, start_time: read_stat(pid)?.start_time, boot_id: boot_id()? })
    }

    /// True when this exact process is still running (not a zombie, not a
    /// newer process that reuses the pid, not a process of an earlier boot).
    pub(crate) fn is_running(&self) -> bool {
        match (boot_id(), read_stat(self.pid)) {
            (Ok(boot), Ok(stat)) => boot == self.boot_id && stat.start_time == self.start_time && stat.is_running(),
            _ => false,
        }
    }

    /// Opens a pidfd for this process, verified after opening: a pidfd taken on
    /// a reused pid would point at the wrong process, so the start time is read
    /// again once the pidfd pins the task.
    pub(crate) fn open_pidfd(&self) -> Option<Pidfd> {
        let pidfd = Pidfd::open(self.pid).ok()?;
        self.is_running().then_some(pidfd)
    }
}

/// A pidfd: a stable handle on one process (Linux ≥ 5.3), usable for processes
/// that are not our children.
#[derive(Debug)]
pub(crate) struct Pidfd(OwnedFd);

impl Pidfd {
    pub(crate) fn open(pid: i32) -> io::Result<Self> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1;
        // no memory is passed.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the syscall returned a fresh fd that nothing else owns.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }))
    }

    /// Another handle on the same process.
    pub(crate) fn try_clone(&self) -> io::Result<Self> {
        self.0.try_clone().map(Self)
    }

    /// Sends `signal` to the process; a process that already exited is not an error.
    pub(crate) fn send_signal(&self, signal: i32) -> io::Result<()> {
        // SAFETY: pidfd_send_signal with a null siginfo and zero flags reads no
        // memory of ours; the fd is owned by self.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::ESRCH) {
                return Ok(());
            }
            return Err(err);
        }
        Ok(())
    }

    /// True once the process has exited (the pidfd turns readable at exit,
    /// whether or not the process has been reaped).
    pub(crate) fn has_exited(&self) -> bool {
        self.wait_exit(Duration::ZERO)
    }

    /// Waits up to `timeout` for the process to exit; true when it did.
    pub(crate) fn wait_exit(&self, timeout: Duration) -> bool {
        let mut pfd = libc::pollfd { fd: self.0.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        loop {
            // SAFETY: pfd is a valid pollfd on our stack and nfds is 1.
            let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
            if rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return rc > 0;
        }
    }

    /// Resolves once the process has exited, without blocking a thread.
    pub(crate) async fn exited(&self) {
        use std::os::fd::AsFd;
        // SAFETY: the borrowed pidfd stays open and unchanged for as long as
        // the AsyncFd lives: both end with this call, which borrows self.
        let registered =
            unsafe { tokio::io::unix::AsyncFd::register_with_interest(self.0.as_fd(), tokio::io::Interest::READABLE) };
        let Ok(async_fd) = registered else {
            // Not registrable (should not happen for a pidfd): poll slowly.
            while !self.has_exited() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            return;
        };
        let _ = async_fd.readable().await;
    }
}

/// Makes this process the reaper of its orphaned descendants, so helpers that
/// detach (pause, monitors) are reaped here rather than left as zombies on a
/// node whose PID 1 does not reap.
pub(crate) fn set_child_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}

/// Puts `pid` (0: this process) in the SCHED_IDLE class, which runs only on
/// an otherwise idle CPU, or back in the normal class (SCHED_OTHER; the nice
/// value is kept).
pub(crate) fn set_idle_scheduling(pid: i32, idle: bool) -> io::Result<()> {
    let policy = if idle { libc::SCHED_IDLE } else { libc::SCHED_OTHER };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler reads `param`, a valid local, and changes
    // only the scheduling of `pid`.
    if unsafe { libc::sched_setscheduler(pid, policy, &param) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether this process is in the SCHED_IDLE class.
pub(crate) fn is_idle_scheduled() -> io::Result<bool> {
    // SAFETY: sched_getscheduler(0) only reads this process's policy.
    let policy = unsafe { libc::sched_getscheduler(0) };
    if policy < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(policy == libc::SCHED_IDLE)
}

/// Sets no_new_privs for this process and its future children.
pub(crate) fn set_no_new_privs() -> io::Result<()> {
    nix::sys::prctl::set_no_new_privs().map_err(io::Error::from)
}

/// Sets this process's limit of `resource` (a `libc::RLIMIT_*`).
pub(crate) fn set_rlimit(resource: libc::__rlimit_resource_t, soft: u64, hard: u64) -> io::Result<()> {
    let value = libc::rlimit { rlim_cur: soft, rlim_max: hard };
    // SAFETY: value is a valid rlimit for the duration of the call.
    if unsafe { libc::setrlimit(resource, &value) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) enum Forked {
    Parent { child: i32 },
    Child,
}

/// Forks. Only for single-threaded helper processes (pause, monitor): the
/// daemon never forks itself.
pub(crate) fn fork() -> io::Result<Forked> {
    // SAFETY: callers are single-threaded helper processes, so the child may
    // use any function, not only async-signal-safe ones.
    match unsafe { nix::unistd::fork() }.map_err(io::Error::from)? {
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent { child: child.as_raw() }),
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
    }
}

/// Closes every file descriptor from `first` upwards.
pub(crate) fn close_fds_from(first: u32) -> io::Result<()> {
    // SAFETY: close_range only closes descriptors; callers own every fd at or
    // above `first` and hold no Rust object that wraps one of them.
    let rc = unsafe { libc::close_range(first, u32::MAX, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A close-on-exec duplicate of `fd` numbered `floor` or above.
pub(crate) fn dup_at_least(fd: RawFd, floor: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor (or -1) that we own.
    let raw = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, floor) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: raw was just returned by fcntl and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Descriptors copied out of the way (from a floor above every number they
/// are to take), so that putting them on fixed numbers never clobbers one.
pub(crate) struct Parked(Vec<Option<OwnedFd>>);

impl Parked {
    /// Parks a copy of each descriptor at `floor` or above (None stays None).
    pub(crate) fn new(fds: &[Option<RawFd>], floor: RawFd) -> io::Result<Self> {
        fds.iter().map(|fd| fd.map(|fd| dup_at_least(fd, floor)).transpose()).collect::<io::Result<_>>().map(Self)
    }

    /// Makes the i-th parked descriptor number `first + i`, not close-on-exec
    /// (a None closes that number). The parked copies close when dropped.
    pub(crate) fn place_from(&self, first: RawFd) -> io::Result<()> {
        for (i, fd) in self.0.iter().enumerate() {
            let target = first + i as RawFd;
            let rc = match fd {
                // SAFETY: dup2 onto a number the caller gives over to this
                // descriptor; the copy is not close-on-exec.
                Some(fd) => unsafe { libc::dup2(fd.as_raw_fd(), target) },
                // SAFETY: closing a number the caller wants closed.
                None => unsafe {
                    libc::close(target);
                    0
                },
            };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// Marks every file descriptor from `first` upwards close-on-exec.
pub(crate) fn close_on_exec_from(first: u32) -> io::Result<()> {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets descriptor flags.
    let rc = unsafe { libc::close_range(first, u32::MAX, libc::CLOSE_RANGE_CLOEXEC as libc::c_int) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Points stdin, stdout and stderr at /dev/null.
pub(crate) fn stdio_to_devnull() -> io::Result<()> {
    let null = fs::OpenOptions::new().read(true).write(true).open("/dev/null")?;
    nix::unistd::dup2_stdin(&null).map_err(io::Error::from)?;
    nix::unistd::dup2_stdout(&null).map_err(io::Error::from)?;
    nix::unistd::dup2_stderr(&null).map_err(io::Error::from)?;
    Ok(())
}

/// A helper started by `spawn_with_fd3`: its pid (to be waited for through
/// the Reaper) and the daemon's ends of its stdin, stdout and stderr pipes.
pub(crate) struct SpawnedHelper {
    pub(crate) pid: i32,
    pub(crate) stdin: OwnedFd,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
}

/// Starts `program` with `args`, an empty environment, pipes on 0–2 and
/// `fd3` as its descriptor 3 (an extra channel, e.g. for errors); nothing
/// else is inherited (the daemon opens everything close-on-exec). It is
/// posix_spawn (a vfork, then exec), not a fork: forking the daemon would
/// copy its page tables and write-protect all its memory for nothing.
pub(crate) fn spawn_with_fd3(program: &std::path::Path, args: &[&str], fd3: OwnedFd) -> io::Result<SpawnedHelper> {
    let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from);
    let (stdin_r, stdin_w) = pipe()?;
    let (stdout_r, stdout_w) = pipe()?;
    let (stderr_r, stderr_w) = pipe()?;
    let pid = spawn_with_fds(program, args, vec![stdin_r, stdout_w, stderr_w, fd3])?;
    Ok(SpawnedHelper { pid, stdin: stdin_w, stdout: stdout_r, stderr: stderr_r })
}

/// Starts `program` with `args`, an empty environment and `fds[i]` as its
/// descriptor i; nothing else is inherited. Returns its pid.
pub(crate) fn spawn_with_fds(program: &std::path::Path, args: &[&str], fds: Vec<OwnedFd>) -> io::Result<i32> {
    use nix::spawn::{posix_spawn, PosixSpawnAttr, PosixSpawnFileActions};
    use nix::sys::signal::{SigSet, Signal};
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;

    let path = super::c_string(program.as_os_str().as_bytes())?;
    let mut argv = vec![path.clone()];
    for arg in args {
        argv.push(super::c_string(*arg)?);
    }
    // Every source above the last target, so that no dup2 below overwrites a
    // later source (and none is its own target, whose close-on-exec flag would stay).
    let last = fds.len() as RawFd - 1;
    let sources = fds
        .into_iter()
        .map(|fd| if fd.as_raw_fd() > last { Ok(fd) } else { dup_at_least(fd.as_raw_fd(), last + 1) })
        .collect::<io::Result<Vec<OwnedFd>>>()?;
    let mut actions = PosixSpawnFileActions::init().map_err(io::Error::from)?;
    for (target, source) in sources.iter().enumerate() {
        actions.add_dup2(source.as_raw_fd(), target as RawFd).map_err(io::Error::from)?;
    }
    // As std's spawn does: no blocked signals, SIGPIPE back to its default.
    let mut attr = PosixSpawnAttr::init().map_err(io::Error::from)?;
    attr.set_flags(
        nix::spawn::PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK | nix::spawn::PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF,
    )
    .map_err(io::Error::from)?;
    attr.set_sigmask(&SigSet::empty()).map_err(io::Error::from)?;
    let mut default = SigSet::empty();
    default.add(Signal::SIGPIPE);
    attr.set_sigdefault(&default).map_err(io::Error::from)?;
    let no_env: [CString; 0] = [];
    let pid = posix_spawn(path.as_c_str(), &actions, &attr, &argv, &no_env).map_err(io::Error::from)?;
    Ok(pid.as_raw())
}

/// The file descriptor 4 a streaming exec helper was given (its request).
pub fn take_fd4() -> io::Result<fs::File> {
    // SAFETY: F_GETFD only reads descriptor flags.
    if unsafe { libc::fcntl(4, libc::F_GETFD) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd 4 is open (checked above) and was handed to this process by
    // its parent for exactly this use; nothing else in the process owns it.
    Ok(unsafe { fs::File::from_raw_fd(4) })
}

/// The file descriptor 3 a helper was given by `spawn_with_fd3`.
pub fn take_fd3() -> io::Result<fs::File> {
    // Check it is open before anything claims it.
    // SAFETY: F_GETFD only reads descriptor flags.
    if unsafe { libc::fcntl(3, libc::F_GETFD) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd 3 is open (checked above) and was handed to this process by
    // its parent for exactly this use; nothing else in the process owns it.
    Ok(unsafe { fs::File::from_raw_fd(3) })
}

/// Points stdin and stdout at /dev/null, keeping stderr (a diagnostics file).
pub(crate) fn stdio_to_devnull_keep_stderr() -> io::Result<()> {
    let null = fs::OpenOptions::new().read(true).write(true).open("/dev/null")?;
    nix::unistd::dup2_stdin(&null).map_err(io::Error::from)?;
    nix::unistd::dup2_stdout(&null).map_err(io::Error::from)?;
    Ok(())
}

/// Gives a process about to exec a clean slate: every signal, real-time ones
/// included, at its default disposition, and none blocked. Ignored signals
/// survive execve, and this process inherits some: Rust ignores SIGPIPE, and
/// glibc's posix_spawn (how the daemon starts a monitor) leaves the two
/// signals glibc keeps for itself (32 and 33) ignored in the child.
pub(crate) fn reset_signals() {
    for signal in 1..=libc::SIGRTMAX() {
        if signal != libc::SIGKILL && signal != libc::SIGSTOP {
            set_default_disposition(signal);
        }
    }
    let _ = nix::sys::signal::SigSet::empty().thread_set_mask();
}

/// rt_sigaction(signal, SIG_DFL) as a raw system call: glibc's sigaction
/// refuses the signals it reserves (32 and 33).
fn set_default_disposition(signal: libc::c_int) {
    // The kernel's struct sigaction is the handler first, then flags, an
    // optional restorer and the mask, 32 bytes or fewer: all zeros is
    // SIG_DFL (0) with no flags and an empty mask.
    let default = [0u64; 4];
    let mask_size: libc::size_t = 8;
    // SAFETY: `default` is a readable, zeroed buffer at least as large as the
    // kernel's struct sigaction; the old action is not asked for (null), and
    // installing SIG_DFL runs no code of ours.
    let _ = unsafe {
        libc::syscall(libc::SYS_rt_sigaction, signal, default.as_ptr(), std::ptr::null_mut::<libc::c_void>(), mask_size)
    };
}

/// Drops every capability from all sets, the bounding set included.
pub(crate) fn drop_all_capabilities() -> io::Result<()> {
    use caps::CapSet;
    let to_io = |e: caps::errors::CapsError| io::Error::other(e.to_string());
    caps::clear(None, CapSet::Bounding).map_err(to_io)?;
    caps::clear(None, CapSet::Ambient).map_err(to_io)?;
    caps::clear(None, CapSet::Inheritable).map_err(to_io)?;
    caps::clear(None, CapSet::Effective).map_err(to_io)?;
    caps::clear(None, CapSet::Permitted).map_err(to_io)?;
    Ok(())
}

extern "C" fn exit_on_signal(_: libc::c_int) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(0) }
}

/// Installs handlers that exit(0) on SIGTERM and SIGINT (an init process of a
/// PID namespace ignores signals it has no handler for), and ignores SIGHUP and SIGPIPE.
pub(crate) fn exit_on_term_signals() -> io::Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let exit = SigAction::new(SigHandler::Handler(exit_on_signal), SaFlags::empty(), SigSet::empty());
    let ignore = SigAction::new(SigHandler::SigIgn, SaFlags::empty(), SigSet::empty());
    for (signal, action) in
        [(Signal::SIGTERM, &exit), (Signal::SIGINT, &exit), (Signal::SIGHUP, &ignore), (Signal::SIGPIPE, &ignore)]
    {
        // SAFETY: the handler only calls _exit, which is async-signal-safe.
        unsafe { sigaction(signal, action) }.map_err(io::Error::from)?;
    }
    Ok(())
}

extern "C" fn note_child_exit(_: libc::c_int) {}

/// Reaps children forever (the job of a PID namespace's init), including
/// orphans reparented to us later. SIGCHLD stays blocked except inside
/// sigsuspend, so an exit between the last waitpid and the sleep is not missed.
pub(crate) fn reap_children_forever() -> ! {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    let handler = SigAction::new(SigHandler::Handler(note_child_exit), SaFlags::SA_NOCLDSTOP, SigSet::empty());
    // SAFETY: the handler does nothing; it only makes SIGCHLD wake sigsuspend.
    let _ = unsafe { sigaction(Signal::SIGCHLD, &handler) };
    let _ = chld.thread_block();
    loop {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let _ = SigSet::empty().suspend();
    }
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit (as Go
/// runtimes and containerd do), so that descriptors clients make the daemon
/// hold cannot starve its own work under the 1024 a service inherits.
/// Returns the limits as they were (soft, hard).
pub(crate) fn raise_nofile_limit() -> std::io::Result<(u64, u64)> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(std::io::Error::from)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(std::io::Error::from)?;
    }
    Ok((soft, hard))
}

/// Makes the program `command` starts die (SIGKILL) when the thread that
/// started it exits: for short-lived helpers (CNI plugins, nft: what
/// `Reaper::run` runs) started from the daemon's long-lived async worker threads, so a daemon killed mid-call
/// leaves no helper finishing its work after the restarted daemon undid it.
pub(crate) fn die_with_parent(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and only
    // makes the async-signal-safe prctl system call.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_awkward_command_names() {
        let text = "1234 (a) b (c)) S 1 1230 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100";
        let stat = parse_stat(text).unwrap();
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.ppid, 1);
        assert_eq!(stat.pgrp, 1230);
        assert_eq!(stat.start_time, 987654);
    }

    #[test]
    fn identity_of_self_is_running_and_pid_reuse_is_detected() {
        let me = ProcessIdentity::of(std::process::id() as i32).unwrap();
        assert!(me.is_running());
        let reused = ProcessIdentity { start_time: me.start_time + 1, ..me.clone() };
        assert!(!reused.is_running());
        let other_boot = ProcessIdentity { boot_id: "another-boot".into(), ..me };
        assert!(!other_boot.is_running());
    }
}
