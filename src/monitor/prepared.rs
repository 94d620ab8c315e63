//! The init a monitor forks ahead, while it waits as a spare: the first
//! process of a PID namespace of its own, its stdio on pipes, waiting to be
//! told which container to build (`init::run_prepared`). That
//! takes the fork off CreateContainer's path, and lets the init build as
//! soon as the plan is written instead of once the cgroup is made (it joins
//! the cgroup when told it is).

use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::Path;

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

use super::init::{self, InitPipes, InitStdio};
use super::program::pipe;
use crate::linux::clone3;
use crate::linux::process::{self, Forked};
use crate::wire::{CgroupMade, Message, PlanPath};

/// Our ends of a prepared init's pipes, handed to the supervision.
pub(crate) struct InitEnds {
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
    /// The write end of its stdin (kept only for a container that asked for stdin).
    pub(crate) stdin: OwnedFd,
    /// init → us: `wire::Built`, or its refusal.
    pub(crate) ready: OwnedFd,
    /// us → init: one byte releases it.
    pub(crate) start: OwnedFd,
    /// init → us: why its execve failed.
    pub(crate) exec_error: OwnedFd,
}

/// A forked, waiting init. Dropped before `hand_over`, it is killed and reaped.
pub(crate) struct PreparedInit {
    child: Child,
    /// us → init: the plan's path (`wire::PlanPath`), then `wire::CgroupMade`.
    control: File,
    ends: InitEnds,
}

/// Our child, killed and reaped when dropped unless kept.
struct Child(i32);

impl Child {
    fn keep(self) -> i32 {
        let pid = self.0;
        std::mem::forget(self);
        pid
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0), Signal::SIGKILL);
        let _ = waitpid(Pid::from_raw(self.0), None);
    }
}

impl PreparedInit {
    /// Forks it. SIGCHLD must be blocked (and read through a signalfd)
    /// already, so that no exit of it is missed.
    pub(crate) fn fork() -> Result<Self, String> {
        let (stdin_r, stdin_w) = pipe()?;
        let (stdout_r, stdout_w) = pipe()?;
        let (stderr_r, stderr_w) = pipe()?;
        let (ready_r, ready_w) = pipe()?;
        let (start_r, start_w) = pipe()?;
        let (exec_r, exec_w) = pipe()?;
        let (control_r, control_w) = pipe()?;
        match clone3::fork_into_new_pid_namespace().map_err(|e| format!("clone3(CLONE_NEWPID): {e}"))? {
            Forked::Child => {
                drop((stdin_w, stdout_r, stderr_r, ready_r, start_w, exec_r, control_w));
                init::run_prepared(
                    InitStdio { stdin: stdin_r, stdout: stdout_w, stderr: stderr_w, terminal: None },
                    InitPipes { ready: ready_w, start: start_r, exec_error: exec_w },
                    control_r,
                )
            }
            Forked::Parent { child } => Ok(Self {
                child: Child(child),
                control: File::from(control_w),
                ends: InitEnds {
                    stdout: stdout_r,
                    stderr: stderr_r,
                    stdin: stdin_w,
                    ready: ready_r,
                    start: start_w,
                    exec_error: exec_r,
                },
            }),
        }
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.0
    }

    /// Moves it into or out of the idle class (it waits there while its monitor is a spare).
    pub(crate) fn set_idle(&self, idle: bool) -> Result<(), String> {
        process::set_idle_scheduling(self.pid(), idle).map_err(|e| format!("sched_setscheduler of the init: {e}"))
    }

    /// Tells it to build the container planned in `plan` (plan.json).
    pub(crate) fn build(&mut self, plan: &Path) -> Result<(), String> {
        let path = PlanPath(plan.to_path_buf()).try_encode().map_err(|e| e.to_string())?;
        self.control.write_all(format!("{path}\n").as_bytes()).map_err(|e| format!("telling the init its plan: {e}"))
    }

    /// Tells it that the container cgroup is made: it joins it. (Writing
    /// its pid into `cgroup.procs` from here costs milliseconds at times
    /// on cgroup v1 while it builds; its own writes do not.)
    pub(crate) fn cgroup_made(&mut self) -> Result<(), String> {
        self.control
            .write_all(format!("{}\n", CgroupMade.encode()).as_bytes())
            .map_err(|e| format!("telling the init its cgroup is made: {e}"))
    }

    /// Its pid and our ends of its pipes; from here on it is the caller's to end.
    pub(crate) fn hand_over(self) -> (i32, InitEnds) {
        (self.child.keep(), self.ends)
    }
}
