//! Spare monitors: `nidus-monitor run` processes started ahead of need, each
//! waiting on stdin for the container it is to build. CreateContainer takes
//! a spare (or starts a monitor when none is left), and a replacement starts
//! in the background a short while after that container's build began
//! (`Containers::refill_spares_later`), or at once when the create failed
//! (`refill`). So the
//! replacement's own start — an exec of a Rust program, its settling and the
//! fork of its init ahead, about two milliseconds of CPU here, most of it
//! in the idle class yet measurably in the way — comes after the create
//! and the start that usually follows it at once, rather than beside them.
//! Spares wait in the SCHED_IDLE class (moved there once exec'd) and go
//! back to the normal class when taken (before they fork any container).
//! A spare ends at end of input, so it never outlives the daemon.
//!
//! Each monitor settles (diagnostics, identity, control socket) in a
//! directory of its own under the spares' directory before it is taken;
//! taking it renames that directory to the container's run dir, so its
//! settling is off CreateContainer's path too.

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ChildStdout, Command};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::helper;
use crate::ids;
use crate::linux::process::{self, Pidfd};
use crate::monitor::plan::MonitorAssignment;
use crate::store;
use crate::wire::{Answer, BuildStep, Message, Settled};

/// A started monitor: its pid, and the pipes to say `go` and read its reply.
pub(crate) struct PendingMonitor {
    pub(crate) pid: i32,
    pub(crate) go: ChildStdin,
    pub(crate) reply: ChildStdout,
    /// Its directory: a spare's own until it is taken, then the run dir.
    dir: PathBuf,
    /// A handle that stays on this process even if the pid is reused: a
    /// spare's scheduling is changed only while it is alive.
    handle: Option<Pidfd>,
}

impl PendingMonitor {
    fn alive(&self) -> bool {
        self.handle.as_ref().is_some_and(|h| !h.has_exited())
    }

    /// Tells the monitor that the bundle's config.json and the plan are
    /// written: its init builds (or it reads the spec) while the daemon
    /// finishes the cgroup. A monitor that died already fails this, and
    /// later `go` too.
    pub(crate) fn plan_written(&self) {
        helper::say(&self.go, &BuildStep::Plan);
    }

    /// A copy of the monitor's input, to say `go` on from another thread.
    pub(crate) fn go_copy(&self) -> io::Result<std::os::fd::OwnedFd> {
        self.go.as_fd().try_clone_to_owned()
    }

    /// Ends a monitor that was never told `go` (its input closes) and
    /// removes its directory: it writes nothing more there once taken or
    /// settled.
    fn end(self) {
        let dir = self.dir.clone();
        drop(self);
        let _ = store::remove_tree(&dir);
    }

    /// A handle to wait for this monitor's end on (None when it has none):
    /// a failed create's undo waits on it, once the input has closed, so
    /// that nothing of the monitor writes in a run dir being removed.
    pub(crate) fn exit_watch(&self) -> Option<Pidfd> {
        self.handle.as_ref().and_then(|h| h.try_clone().ok())
    }
}

pub(crate) struct MonitorPool {
    binary: PathBuf,
    /// How many spares to keep (0: none, every monitor starts on demand).
    size: usize,
    spares: Mutex<Vec<PendingMonitor>>,
    /// Where monitors settle before they are taken: on the file system of
    /// the run dirs they are renamed to.
    spare_root: PathBuf,
}

impl Drop for MonitorPool {
    /// The spares end with the pool, and their directories go.
    fn drop(&mut self) {
        for monitor in self.spares().drain(..) {
            monitor.end();
        }
    }
}

impl MonitorPool {
    /// A pool whose monitors settle under `spare_root`. What an earlier
    /// daemon's spares left there goes (they end with that daemon).
    pub(crate) fn new(binary: PathBuf, size: usize, spare_root: PathBuf) -> Arc<Self> {
        if let Err(e) = store::remove_tree(&spare_root) {
            tracing::warn!(dir = %spare_root.display(), error = %e, "cannot remove earlier spare monitors' directories");
        }
        Arc::new(Self { binary, size, spares: Mutex::new(Vec::new()), spare_root })
    }

    pub(crate) fn binary(&self) -> &Path {
        &self.binary
    }

    fn spares(&self) -> MutexGuard<'_, Vec<PendingMonitor>> {
        self.spares.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many spares wait now.
    pub(crate) fn idle(&self) -> usize {
        self.spares().len()
    }

    /// Starts `nidus-monitor run DIR` in a new directory of its own (the
    /// spawn waits for its exec); `settled` waits until it has settled there.
    fn launch(&self) -> io::Result<PendingMonitor> {
        std::fs::create_dir_all(&self.spare_root)?;
        let dir = self.spare_root.join(ids::new_id());
        store::create_dir_new(&dir, 0o700)?;
        let spawned = helper::spawn(Command::new(&self.binary).arg("run").arg(&dir).env_clear());
        let helper::Piped { pid, input, output } = match spawned {
            Ok(piped) => piped,
            Err(e) => {
                let _ = store::remove_tree(&dir);
                return Err(e);
            }
        };
        // Our child, not reaped before this runs: the pid is still its own.
        let handle = Pidfd::open(pid).ok();
        Ok(PendingMonitor { pid, go: input, reply: output, dir, handle })
    }

    /// Blocking: waits for a launched monitor's `settled` (at once when it
    /// said it already). One that said anything else (its error) or died
    /// is ended and its directory removed.
    fn settled(mut monitor: PendingMonitor) -> io::Result<PendingMonitor> {
        // Nothing follows `settled` before the assignment: whole reads are safe.
        let mut said = Vec::new();
        let mut chunk = [0u8; 256];
        while said.len() < 4096 && !said.ends_with(b"\n") {
            match monitor.reply.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => said.extend_from_slice(&chunk[..n]),
            }
        }
        let said = String::from_utf8_lossy(&said).into_owned();
        if said.strip_suffix('\n').map(Settled::decode) == Some(Ok(Settled)) {
            return Ok(monitor);
        }
        monitor.end();
        let said = said.trim_end();
        Err(io::Error::other(match Answer::<Settled>::decode(said) {
            Ok(Answer::Refused(why)) => why,
            _ => format!("the monitor ended before it settled ({said:?})"),
        }))
    }

    /// A monitor assigned to a container: a spare when one waits, else a new
    /// one (which settles first). Its directory becomes the run dir; it
    /// then waits for `go`, and dropped without `go`, it ends. The caller
    /// has spares refilled later once it has said `go`, and `refill` when
    /// its create failed (an undo of the create).
    pub(crate) async fn take(self: &Arc<Self>, assignment: &MonitorAssignment) -> io::Result<PendingMonitor> {
        let mut line = assignment.try_encode().map_err(io::Error::other)?.into_bytes();
        line.push(b'\n');
        let spare = self.spares().pop();
        if let Some(monitor) = spare {
            // A spare that died (killed by hand) is dropped: start another.
            if monitor.alive() && process::set_idle_scheduling(monitor.pid, false).is_ok() {
                // One still settling (it was just started) is waited for:
                // that takes less than starting another.
                let settled = if helper::readable_now(&monitor.reply) {
                    Self::settled(monitor)
                } else {
                    tokio::task::spawn_blocking(move || Self::settled(monitor)).await.map_err(io::Error::other)?
                };
                match settled.and_then(|monitor| Self::assign(monitor, assignment, &line)) {
                    Ok(monitor) => return Ok(monitor),
                    Err(e) => tracing::warn!(error = %e, "a spare monitor could not be assigned; starting another"),
                }
            } else {
                monitor.end();
            }
        }
        let this = self.clone();
        let monitor = tokio::task::spawn_blocking(move || this.launch().and_then(Self::settled))
            .await
            .map_err(io::Error::other)??;
        Self::assign(monitor, assignment, &line)
    }

    /// Renames a settled monitor's directory to the run dir and sends it the
    /// assignment; on failure the monitor ends and its directory goes.
    fn assign(mut monitor: PendingMonitor, assignment: &MonitorAssignment, line: &[u8]) -> io::Result<PendingMonitor> {
        if let Err(e) = std::fs::rename(&monitor.dir, &assignment.run_dir) {
            monitor.end();
            return Err(e);
        }
        monitor.dir = assignment.run_dir.clone();
        if let Err(e) = monitor.go.write_all(line) {
            monitor.end();
            return Err(e);
        }
        Ok(monitor)
    }

    /// Starts spares in the background until `size` wait. Each is spawned
    /// in the normal class and moved to SCHED_IDLE once exec'd, so its
    /// start-up takes only CPU nobody else wants. Not the spawn itself: a
    /// child starved between fork and exec holds copies of all the daemon's
    /// descriptors, and would keep a daemon killed meanwhile from releasing
    /// its socket to the next one.
    pub(crate) fn refill(self: &Arc<Self>) {
        if self.full() {
            return;
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.fill());
    }

    /// Whether all the spares wait.
    pub(crate) fn full(&self) -> bool {
        self.idle() >= self.size
    }

    /// Starts spares here until `size` wait.
    fn fill(&self) {
        while self.idle() < self.size {
            match self.launch() {
                Ok(monitor) => {
                    if !monitor.alive() {
                        tracing::warn!(pid = monitor.pid, "a spare monitor died at once");
                        monitor.end();
                        return;
                    }
                    let mut spares = self.spares();
                    if spares.len() >= self.size {
                        // Another refill got there first: this one ends at end of input.
                        drop(spares);
                        monitor.end();
                        return;
                    }
                    // It settles in the idle class; `take` waits if it must.
                    // Set under the lock: a spare in the idle class is one
                    // `take` finds (what the tests and an operator see).
                    if let Err(e) = process::set_idle_scheduling(monitor.pid, true) {
                        tracing::debug!(pid = monitor.pid, error = %e, "a spare monitor stays in the normal class");
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
