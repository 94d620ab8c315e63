//! Spare monitors: `nidus-monitor run` processes started ahead of need, each
//! waiting on stdin for the container it is to build. CreateContainer takes
//! a spare (or starts a monitor when none is left) and a replacement starts
//! in the background, so the monitor's own start — an exec of a Rust program,
//! about a millisecond of CPU here — is off the request's path. Spares start
//! in the SCHED_IDLE class, so their start takes only CPU nobody else wants,
//! and go back to the normal class when taken (before they fork any
//! container). A spare ends at end of input, so it never outlives the daemon.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::linux::process;
use crate::monitor::plan::MonitorAssignment;

/// A started monitor: its pid, and the pipes to say `go` and read its reply.
#[derive(Debug)]
pub struct PendingMonitor {
    pub pid: i32,
    pub go: ChildStdin,
    pub reply: ChildStdout,
}

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
        let mut child = Command::new(&self.binary)
            .arg("run")
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let pid = child.id() as i32;
        let (go, reply) = (child.stdin.take(), child.stdout.take());
        // The reaper owns waiting; the std handle must never wait.
        drop(child);
        match (go, reply) {
            (Some(go), Some(reply)) => Ok(PendingMonitor { pid, go, reply }),
            _ => Err(io::Error::other("the monitor's pipes are missing")),
        }
    }

    /// A monitor assigned to a container: a spare when one waits, else a new
    /// one. It settles (session, pod cgroup, diagnostics) while the caller
    /// prepares, then waits for `go`; dropped without `go`, it ends.
    pub async fn take(self: &Arc<Self>, assignment: &MonitorAssignment) -> io::Result<PendingMonitor> {
        let mut line = serde_json::to_vec(assignment).map_err(io::Error::other)?;
        line.push(b'\n');
        let spare = self.spares().pop();
        self.refill();
        if let Some(mut monitor) = spare {
            // A spare that died (killed by hand) fails these: start another.
            let normal = process::set_idle_scheduling(monitor.pid, false);
            if normal.is_ok() && monitor.go.write_all(&line).is_ok() {
                return Ok(monitor);
            }
        }
        let this = self.clone();
        let mut monitor = tokio::task::spawn_blocking(move || this.launch()).await.map_err(io::Error::other)??;
        monitor.go.write_all(&line)?;
        Ok(monitor)
    }

    /// Starts spares in the background until `size` wait. The starting
    /// thread runs in SCHED_IDLE meanwhile, so the spawn, the exec and the
    /// spare's start-up all take only CPU nobody else wants.
    pub fn refill(self: &Arc<Self>) {
        if self.idle() >= self.size {
            return;
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = process::set_idle_scheduling(0, true) {
                tracing::debug!(error = %e, "spare monitors start in the normal class");
            }
            this.fill();
            // The thread goes back to the pool: back to the normal class.
            if let Err(e) = process::set_idle_scheduling(0, false) {
                tracing::warn!(error = %e, "a blocking thread stays in SCHED_IDLE");
            }
        });
    }

    /// Starts spares here until `size` wait; they inherit this thread's class.
    fn fill(&self) {
        while self.idle() < self.size {
            match self.launch() {
                Ok(monitor) => {
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
