//! The CRIU binary: where it is, whether it is new enough for this kernel,
//! and running it with a deadline (stopped when the deadline passes, also
//! by the next daemon when this one ends first). The daemon's reaper waits
//! for it, as for every child of the daemon.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use crate::linux::process::{Pidfd, ProcessIdentity};
use crate::linux::reaper::Reaper;
use crate::store;

/// Oldest CRIU that dumps on kernels ≥ 6.13 (3.x does not know `[vvar_vclock]`).
pub(crate) const NEEDED: Version = Version { major: 4, minor: 1, patch: 0 };

/// The `--external` key of the pod's network namespace (dump: the init's
/// netns inode; restore: the new sandbox's, through `--inherit-fd`).
pub(crate) const NET_KEY: &str = "extNetNs";

/// Where CRIU is looked for when the config names none (after PATH).
const SEARCH_DIRS: &[&str] = &["/usr/local/sbin", "/usr/sbin"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Version {
    pub(crate) major: u32,
    pub(crate) minor: u32,
    pub(crate) patch: u32,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum CriuError {
    #[error("CRIU {NEEDED} or newer is needed for checkpoints; none was found ({0})")]
    Missing(String),
    #[error("CRIU {found} at {path} is too old for this kernel; {NEEDED} or newer is needed")]
    TooOld { path: PathBuf, found: String },
    #[error("criu {action} did not finish within {secs} s; it was stopped")]
    Timeout { action: &'static str, secs: u64 },
    #[error("criu {action} failed ({status}); its log is {log}: {tail}")]
    Failed { action: &'static str, status: String, log: PathBuf, tail: String },
    #[error("cannot run {path}: {source}")]
    Spawn { path: PathBuf, source: std::io::Error },
}

/// A CRIU binary known to be new enough.
#[derive(Debug, Clone)]
pub(crate) struct Criu {
    pub(crate) path: PathBuf,
    pub(crate) version: Version,
}

/// Parses `criu --version` output ("Version: 4.1.1", maybe followed by a GitID line).
pub(crate) fn parse_version(text: &str) -> Option<Version> {
    let line = text.lines().find_map(|l| l.trim().strip_prefix("Version:"))?;
    let mut numbers = line.trim().split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty());
    let major = numbers.next()?.parse().ok()?;
    let minor = numbers.next()?.parse().ok()?;
    let patch = numbers.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    Some(Version { major, minor, patch })
}

/// The configured binary, or the first `criu` in PATH, /usr/local/sbin or /usr/sbin.
fn candidates(configured: Option<&Path>) -> Vec<PathBuf> {
    if let Some(path) = configured {
        return vec![path.to_path_buf()];
    }
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path_var).collect();
    dirs.extend(SEARCH_DIRS.iter().map(PathBuf::from));
    dirs.into_iter().map(|d| d.join("criu")).filter(|p| p.is_file()).collect()
}

impl Criu {
    /// Finds CRIU and checks its version (run each time: an operator may
    /// install or upgrade CRIU while nidus runs).
    pub(crate) async fn find(configured: Option<&Path>, reaper: &Reaper) -> Result<Criu, CriuError> {
        let found = candidates(configured);
        let Some(first) = found.first() else {
            return Err(CriuError::Missing("no criu in PATH, /usr/local/sbin or /usr/sbin".into()));
        };
        let mut too_old = None;
        for path in &found {
            let text = match version_output(path, reaper).await {
                Ok(text) => text,
                Err(e) if configured.is_some() => return Err(CriuError::Missing(format!("{}: {e}", path.display()))),
                Err(_) => continue,
            };
            match parse_version(&text) {
                Some(version) if version >= NEEDED => return Ok(Criu { path: path.clone(), version }),
                Some(version) => too_old.get_or_insert((path.clone(), version.to_string())),
                None => too_old.get_or_insert((path.clone(), format!("of unknown version ({:?})", text.trim()))),
            };
        }
        match too_old {
            Some((path, found)) => Err(CriuError::TooOld { path, found }),
            None => Err(CriuError::Missing(format!("{} did not run", first.display()))),
        }
    }

    /// Runs `criu ARGS` inside the namespaces `enter` names (`--uts=PATH`,
    /// through nsenter, which execs CRIU in place), logging to `log`,
    /// stopping it when `deadline` passes (see [`stop`]). CRIU leads a
    /// process group of its own, so that what it forks is ended with it.
    /// While it runs, its identity is in `running`: CRIU outlives a daemon
    /// killed meanwhile (ending a dump half-way is not safe for the
    /// processes it holds, see [`stop`]), and the next daemon sees it to its
    /// end with the same deadline ([`supervise_orphan`]), starting no other
    /// on the same tree meanwhile ([`still_running`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn run(
        &self,
        action: &'static str,
        enter: &[String],
        args: &[String],
        log: &Path,
        running: &Path,
        deadline: Duration,
        reaper: &Reaper,
    ) -> Result<(), CriuError> {
        let mut command = if enter.is_empty() {
            std::process::Command::new(&self.path)
        } else {
            let mut nsenter = std::process::Command::new("nsenter");
            nsenter.args(enter).arg("--").arg(&self.path);
            nsenter
        };
        let child = command
            .process_group(0)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| CriuError::Spawn { path: self.path.clone(), source })?;
        let pid = child.id() as i32;
        // The reaper owns waiting; the std handle must never wait.
        drop(child);
        // Not fsynced: a reboot ends CRIU too.
        if let Ok(identity) = ProcessIdentity::of(pid) {
            let _ = store::write_json_with(running, &identity, store::Durability::Volatile);
        }
        let ended = tokio::time::timeout(deadline, reaper.wait(pid)).await;
        if ended.is_err() {
            stop(pid, reaper).await;
        }
        let _ = std::fs::remove_file(running);
        let Ok(status) = ended else {
            return Err(CriuError::Timeout { action, secs: deadline.as_secs().max(1) });
        };
        if status.success() {
            return Ok(());
        }
        Err(CriuError::Failed { action, status: status.to_string(), log: log.to_path_buf(), tail: log_tail(log) })
    }
}

/// The CRIU that [`Criu::run`] recorded in `running`, when it still runs
/// (an earlier daemon's, left working when that daemon died).
pub(crate) fn still_running(running: &Path) -> Option<ProcessIdentity> {
    let identity = recorded(running)?;
    if identity.is_running() {
        return Some(identity);
    }
    let _ = std::fs::remove_file(running);
    None
}

/// The CRIU recorded in `running`, running or not.
pub(crate) fn recorded(running: &Path) -> Option<ProcessIdentity> {
    store::read_existing_json::<ProcessIdentity>(running).ok()
}

/// Removes the record in `running` if it is still `criu`'s (a later CRIU
/// run may have recorded itself there meanwhile).
fn forget(running: &Path, criu: &ProcessIdentity) {
    if recorded(running).as_ref() == Some(criu) {
        let _ = std::fs::remove_file(running);
    }
}

/// How long what an earlier daemon's CRIU left is given to end once killed.
const ORPHAN_WAIT: Duration = Duration::from_secs(5);

/// How a CRIU run an earlier daemon left ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OrphanEnd {
    /// It had ended before the restart.
    Before,
    /// It finished on its own, before its deadline.
    Finished,
    /// It was stopped once its deadline passed.
    Stopped,
}

/// What a CRIU run an earlier daemon left came to.
#[derive(Debug)]
pub(crate) struct Orphan {
    pub(crate) criu: ProcessIdentity,
    pub(crate) end: OrphanEnd,
    /// The processes it forked and left in its process group, ended.
    pub(crate) left: usize,
    /// Those, or CRIU, still there after being killed.
    pub(crate) lingering: usize,
}

/// Sees the CRIU run recorded in `running` (the daemon that started it
/// ended first) to its end, as that daemon would have: it finishes on its
/// own, or is stopped (see [`stop`]) once `deadline` passes. Then what it
/// forked and left in its process group is ended (a helper of CRIU's
/// start-up stops itself until CRIU ends it: forever, once CRIU is
/// killed). The record goes once CRIU has ended. None when nothing of this
/// boot is recorded.
pub(crate) async fn supervise_orphan(running: &Path, deadline: SystemTime) -> Option<Orphan> {
    let criu = recorded(running)?;
    if crate::linux::process::boot_id().ok().as_deref() != Some(criu.boot_id.as_str()) {
        forget(running, &criu);
        return None;
    }
    let end = match criu.open_pidfd() {
        None => OrphanEnd::Before,
        Some(pidfd) => {
            let remaining = deadline.duration_since(SystemTime::now()).unwrap_or_default();
            if tokio::time::timeout(remaining, pidfd.exited()).await.is_ok() {
                OrphanEnd::Finished
            } else {
                stop_orphan(&criu, &pidfd).await;
                OrphanEnd::Stopped
            }
        }
    };
    // CRIU leads its group: what is in it, started after CRIU and running
    // CRIU's program, CRIU forked. (A group's id, its leader's pid, is not
    // reused while the group has members.)
    let left: Vec<Pidfd> = crate::linux::process::group_members(criu.pid)
        .into_iter()
        .filter(|(pid, stat)| {
            *pid != criu.pid
                && stat.start_time >= criu.start_time
                && std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "criu")
        })
        .filter_map(|(pid, stat)| {
            ProcessIdentity { pid, start_time: stat.start_time, boot_id: criu.boot_id.clone() }.open_pidfd()
        })
        .collect();
    for pidfd in &left {
        let _ = pidfd.send_signal(libc::SIGKILL);
    }
    let mut lingering = usize::from(criu.is_running());
    for pidfd in &left {
        if tokio::time::timeout(ORPHAN_WAIT, pidfd.exited()).await.is_err() {
            lingering += 1;
        }
    }
    if !criu.is_running() {
        forget(running, &criu);
    }
    Some(Orphan { criu, end, left: left.len(), lingering })
}

/// [`stop`] for a CRIU that is not the daemon's child: its pidfd is
/// signalled, and its group, while it leads one.
async fn stop_orphan(criu: &ProcessIdentity, pidfd: &Pidfd) {
    for signal in [libc::SIGTERM, libc::SIGKILL] {
        if pidfd.has_exited() {
            return;
        }
        let _ = pidfd.send_signal(signal);
        if crate::linux::process::read_stat(criu.pid).is_ok_and(|stat| stat.pgrp == criu.pid) && criu.is_running() {
            if let Ok(signal) = nix::sys::signal::Signal::try_from(signal) {
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(criu.pid), signal);
            }
        }
        let _ = tokio::time::timeout(ORPHAN_WAIT, pidfd.exited()).await;
    }
}

/// `criu --version`'s output.
async fn version_output(path: &Path, reaper: &Reaper) -> std::io::Result<String> {
    let mut child = std::process::Command::new(path)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let pid = child.id() as i32;
    let stdout = child.stdout.take();
    drop(child);
    let read = tokio::task::spawn_blocking(move || {
        let mut text = String::new();
        if let Some(mut out) = stdout {
            let _ = std::io::Read::read_to_string(&mut out, &mut text);
        }
        text
    });
    let text = match tokio::time::timeout(Duration::from_secs(10), read).await {
        Ok(Ok(text)) => text,
        _ => String::new(),
    };
    if tokio::time::timeout(Duration::from_secs(10), reaper.wait(pid)).await.is_err() {
        stop(pid, reaper).await;
    }
    Ok(text)
}

/// SIGTERM, a grace period, then SIGKILL, to CRIU's process group (what it
/// forked goes too; sent before CRIU is seen to end, while the group's id
/// is still its own). CRIU catches neither, so a dump ends where it is:
/// the kernel detaches it from the processes it seized, which run on, and
/// a parasite left in one returns it to its own code when CRIU's socket
/// closes; but a process CRIU was making run an injected system call
/// meets the trap that follows it untraced, and dies of SIGTRAP. No safe
/// way to end a dump half-way exists: only its deadline does.
async fn stop(pid: i32, reaper: &Reaper) {
    let group = nix::unistd::Pid::from_raw(pid);
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGTERM);
    if tokio::time::timeout(Duration::from_secs(5), reaper.wait(pid)).await.is_ok() {
        return;
    }
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    let _ = tokio::time::timeout(Duration::from_secs(5), reaper.wait(pid)).await;
}

/// The last error lines of a CRIU log, for the message.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let errors: Vec<&str> = text.lines().filter(|l| l.contains("Error") || l.contains("err")).collect();
    let lines = if errors.is_empty() { text.lines().collect::<Vec<_>>() } else { errors };
    lines[lines.len().saturating_sub(3)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_compare() {
        assert_eq!(parse_version("Version: 4.1.1\n"), Some(Version { major: 4, minor: 1, patch: 1 }));
        assert_eq!(parse_version("Version: 3.17.1\nGitID: v3.17.1\n").map(|v| v < NEEDED), Some(true));
        assert_eq!(parse_version("Version: 4.1\n"), Some(Version { major: 4, minor: 1, patch: 0 }));
        assert!(parse_version("Version: 4.2-rc1").is_some_and(|v| v >= NEEDED));
        assert_eq!(parse_version("criu: command not found"), None);
    }
}
