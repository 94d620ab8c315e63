//! Daemon side of starting a pause process: run `nidus pause` (exec of our own
//! binary, never a fork of the daemon) as soon as a RunPodSandbox starts, say
//! `wire::Go` once the pod's cgroups and files are ready, read its one-line reply
//! (its last act), and reap the launcher. The pause it leaves behind is identified by pid and start time.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::helper::{self, ReplyError};
use crate::linux::process::{boot_id, ProcessIdentity};
use crate::linux::reaper::Reaper;

use super::pause::PauseArgs;
use crate::wire::{Go, PauseStarted};

#[derive(Debug, thiserror::Error)]
pub(crate) enum LaunchError {
    #[error("cannot start the pause process {binary}: {source}")]
    Spawn { binary: String, source: std::io::Error },
    #[error("pause process set-up failed: {0}")]
    SetUp(String),
    #[error("pause process did not come up within {0:?}")]
    Timeout(Duration),
}

/// A launcher started while the daemon prepares the pod: it has loaded and
/// waits for `go` on stdin. Dropped without `go`, its input ends and so does it.
pub(crate) struct PendingLauncher {
    pid: i32,
    go: std::process::ChildStdin,
    reply: std::process::ChildStdout,
}

impl PendingLauncher {
    /// The launcher's pid (the systemd driver starts the pod's scope around it).
    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }
}

/// Starts `nidus pause ARGS` (the cgroups it joins need not exist yet).
pub(crate) fn start_launcher(binary: &Path, args: &PauseArgs) -> Result<PendingLauncher, LaunchError> {
    let helper::Piped { pid, input, output } =
        helper::spawn(Command::new(binary).arg("pause").args(args.to_args()).env_clear())
            .map_err(|source| LaunchError::Spawn { binary: binary.display().to_string(), source })?;
    Ok(PendingLauncher { pid, go: input, reply: output })
}

/// Tells a started launcher to build the pod (its cgroups exist now) and
/// waits for the pause it leaves behind.
pub(crate) async fn launch_pause(
    pending: PendingLauncher,
    reaper: &Reaper,
    timeout: Duration,
) -> Result<ProcessIdentity, LaunchError> {
    let PendingLauncher { pid: launcher, go, reply } = pending;
    helper::say(&go, &Go);
    match helper::await_reply::<PauseStarted>(launcher, go, reply, timeout, reaper, None).await {
        Ok(PauseStarted { pid, start_time }) => {
            // Its last act was this reply: reaped in the background.
            let reaper = reaper.clone();
            tokio::spawn(async move { reaper.wait(launcher).await });
            let boot_id = boot_id().map_err(|e| LaunchError::SetUp(format!("cannot read boot id: {e}")))?;
            Ok(ProcessIdentity { pid, start_time, boot_id })
        }
        Err(ReplyError::Timeout(_)) => {
            reaper.wait(launcher).await;
            Err(LaunchError::Timeout(timeout))
        }
        Err(ReplyError::Refused(why)) => Err(LaunchError::SetUp(why)),
        Err(ReplyError::NoReply { ended }) => {
            let ended = ended.map_or_else(|| "still running".to_string(), |status| status.to_string());
            Err(LaunchError::SetUp(format!("the launcher ended ({ended}) without a reply")))
        }
    }
}
