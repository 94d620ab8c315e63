//! Spare monitors: `nidus-monitor run` processes started ahead of need, each
//! waiting on stdin for the container it is to build. CreateContainer takes
//! a spare (or starts a monitor when none is left) and, once that one builds
//! (or is dismissed), has a replacement start in the background (`refill`),
//! so the monitor's own start — an exec of a Rust program, about a
//! millisecond of CPU here — is off the request's path, and takes CPU the
//! build leaves rather than the preparation's. Spares start
//! in the SCHED_IDLE class, so their start takes only CPU nobody else wants,
//! and go back to the normal class when taken (before they fork any
//! container). A spare ends at end of input, so it never outlives the daemon.

use std::io::{self, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ChildStdout, Command};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::helper;
use crate::linux::process::{self, Pidfd};
use crate::monitor::plan::MonitorAssignment;

/// A started monitor: its pid, and the pipes to say `go` and read its reply.
pub struct PendingMonitor {
    pub pid: i32,
    pub go: ChildStdin,
    pub reply: ChildStdout,
    /// A handle that stays on this process even if the pid is reused: a
    /// spare's scheduling is changed only while it is alive.
    handle: Option<Pidfd>,
}

impl PendingMonitor {
    fn alive(&self) -> bool {
        self.handle.as_ref().is_some_and(|h| !h.has_exited())
    }

    /// Tells the monitor that the bundle's config.json is written: it reads
    /// the spec while the daemon finishes. A monitor that died already
    /// fails this, and later `go` too.
    pub fn spec_written(&self) {
        let _ = (&self.go).write_all(b"spec\n");
    }

    /// A copy of the monitor's input, to say `go` on from another thread.
    pub fn go_copy(&self) -> io::Result<std::os::fd::OwnedFd> {
        self.go.as_fd().try_clone_to_owned()
    }

    /// Ends a monitor that will not get `go` (its input closes) and waits
    /// (a few seconds at most) until it has, so nothing of it writes in a
    /// run dir being removed.
    pub async fn dismiss(self) {
        let PendingMonitor { go, reply, handle, .. } = self;
        drop((go, reply));
        if let Some(handle) = handle {
            let _ = tokio::time::timeout(DISMISS_WAIT, handle.exited()).await;
        }
    }
}

/// How long `dismiss` waits for a monitor to end.
const DISMISS_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

pub struct MonitorPool {
    binary: PathBuf,
    /// How many spares to keep (0: none, every monitor starts on demand).
    size: usize,
    spares: Mutex<Vec<PendingMonitor>>,
}

impl MonitorPool {
    pub fn new(binary: PathBuf, size: usize) -> Arc<Self> {
        Arc::new(Self { binary, size, spares: Mutex::new(Vec::new()) })
    }

    pub fn binary(&self) -> &Path {
        &self.binary
    }

    fn spares(&self) -> MutexGuard<'_, Vec<PendingMonitor>> {
        self.spares.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many spares wait now.
    pub fn idle(&self) -> usize {
        self.spares().len()
    }

    /// Starts `nidus-monitor run` (the spawn waits for its exec).
    fn launch(&self) -> io::Result<PendingMonitor> {
        let helper::Piped { pid, input, output } = helper::spawn(Command::new(&self.binary).arg("run").env_clear())?;
        // Our child, not reaped before this runs: the pid is still its own.
        let handle = Pidfd::open(pid).ok();
        Ok(PendingMonitor { pid, go: input, reply: output, handle })
    }

    /// A monitor assigned to a container: a spare when one waits, else a new
    /// one. It settles (diagnostics, identity, control socket) while the
    /// caller prepares, then waits for `go`; dropped without `go`, it ends.
    /// The caller calls `refill` once it has said `go` or dismissed it.
    pub async fn take(self: &Arc<Self>, assignment: &MonitorAssignment) -> io::Result<PendingMonitor> {
        let mut line = serde_json::to_vec(assignment).map_err(io::Error::other)?;
        line.push(b'\n');
        let spare = self.spares().pop();
        if let Some(mut monitor) = spare {
            // A spare that died (killed by hand) is dropped: start another.
            if monitor.alive()
                && process::set_idle_scheduling(monitor.pid, false).is_ok()
                && monitor.go.write_all(&line).is_ok()
            {
                return Ok(monitor);
            }
        }
        let this = self.clone();
        let mut monitor = tokio::task::spawn_blocking(move || this.launch()).await.map_err(io::Error::other)??;
        monitor.go.write_all(&line)?;
        Ok(monitor)
    }

    /// Starts spares in the background until `size` wait. Each is spawned
    /// in the normal class and moved to SCHED_IDLE once exec'd, so its
    /// start-up takes only CPU nobody else wants. Not the spawn itself: a
    /// child starved between fork and exec holds copies of all the daemon's
    /// descriptors, and would keep a daemon killed meanwhile from releasing
    /// its socket to the next one.
    pub fn refill(self: &Arc<Self>) {
        if self.idle() >= self.size {
            return;
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.fill());
    }

    /// Starts spares here until `size` wait.
    fn fill(&self) {
        while self.idle() < self.size {
            match self.launch() {
                Ok(monitor) => {
                    if !monitor.alive() {
                        tracing::warn!(pid = monitor.pid, "a spare monitor died at once");
                        return;
                    }
                    if let Err(e) = process::set_idle_scheduling(monitor.pid, true) {
                        tracing::debug!(pid = monitor.pid, error = %e, "a spare monitor stays in the normal class");
                    }
                    let mut spares = self.spares();
                    if spares.len() >= self.size {
                        // Another refill got there first: this one ends at end of input.
                        return;
                    }
                    spares.push(monitor);
                }
                Err(e) => {
                    tracing::warn!(binary = %self.binary.display(), error = %e, "cannot start a spare monitor");
                    return;
                }
            }
        }
    }
}
