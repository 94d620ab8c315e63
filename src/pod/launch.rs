//! Daemon side of starting a pause process: run `nidus pause` (exec of our own
//! binary, never a fork of the daemon) as soon as a RunPodSandbox starts, say
//! `go` once the pod's cgroups and files are ready, read its one-line reply
//! (its last act), and reap the launcher. The pause it leaves behind is identified by pid and start time.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::helper;
use crate::linux::process::{boot_id, ProcessIdentity};
use crate::linux::reaper::Reaper;

use super::pause::PauseArgs;

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("cannot start the pause process {binary}: {source}")]
    Spawn { binary: String, source: std::io::Error },
    #[error("pause process set-up failed: {0}")]
    SetUp(String),
    #[error("pause process did not come up within {0:?}")]
    Timeout(Duration),
}

/// A launcher started while the daemon prepares the pod: it has loaded and
/// waits for `go` on stdin. Dropped without `go`, its input ends and so does it.
pub struct PendingLauncher {
    pid: i32,
    go: std::process::ChildStdin,
    reply: std::process::ChildStdout,
}

/// Starts `nidus pause ARGS` (the cgroups it joins need not exist yet).
pub fn start_launcher(binary: &Path, args: &PauseArgs) -> Result<PendingLauncher, LaunchError> {
    let helper::Piped { pid, input, output } =
        helper::spawn(Command::new(binary).arg("pause").args(args.to_args()).env_clear())
            .map_err(|source| LaunchError::Spawn { binary: binary.display().to_string(), source })?;
    Ok(PendingLauncher { pid, go: input, reply: output })
}

/// Tells a started launcher to build the pod (its cgroups exist now) and
/// waits for the pause it leaves behind.
pub async fn launch_pause(
    pending: PendingLauncher,
    reaper: &Reaper,
    timeout: Duration,
) -> Result<ProcessIdentity, LaunchError> {
    let PendingLauncher { pid: launcher, go, reply } = pending;
    let read = helper::say_then_read_line(go, b"go\n", reply);
    let line = match tokio::time::timeout(timeout, read).await {
        Ok(Ok(line)) => line,
        Ok(Err(_)) => String::new(),
        Err(_) => {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(launcher), nix::sys::signal::Signal::SIGKILL);
            reaper.wait(launcher).await;
            return Err(LaunchError::Timeout(timeout));
        }
    };
    let line = line.trim_end();
    if let Some(rest) = line.strip_prefix("ok ") {
        let mut parts = rest.split(' ');
        let pid = parts.next().and_then(|p| p.parse().ok());
        let start_time = parts.next().and_then(|p| p.parse().ok());
        if let (Some(pid), Some(start_time)) = (pid, start_time) {
            // Its last act was this reply: reaped in the background.
            let reaper = reaper.clone();
            tokio::spawn(async move { reaper.wait(launcher).await });
            let boot_id = boot_id().map_err(|e| LaunchError::SetUp(format!("cannot read boot id: {e}")))?;
            return Ok(ProcessIdentity { pid, start_time, boot_id });
        }
    }
    let status = reaper.wait(launcher).await;
    Err(LaunchError::SetUp(match line.strip_prefix("error ") {
        Some(why) => why.to_string(),
        None => format!("the launcher ended ({status}) without a reply"),
    }))
}
