//! Daemon side of starting a pause process: run `nidus pause` (exec of our own
//! binary, never a fork of the daemon), read its one-line reply, and reap the
//! launcher. The pause it leaves behind is identified by pid and start time.

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

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

pub async fn launch_pause(
    binary: &Path,
    args: &PauseArgs,
    reaper: &Reaper,
    timeout: Duration,
) -> Result<ProcessIdentity, LaunchError> {
    let mut child = Command::new(binary)
        .arg("pause")
        .args(args.to_args())
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|source| LaunchError::Spawn { binary: binary.display().to_string(), source })?;
    let launcher = child.id() as i32;
    let stdout = child.stdout.take();
    // The reaper owns waiting; the std handle must never wait.
    drop(child);
    let read = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        if let Some(out) = stdout {
            let _ = std::io::BufReader::new(out).read_line(&mut line);
        }
        line
    });
    let line = match tokio::time::timeout(timeout, read).await {
        Ok(Ok(line)) => line,
        Ok(Err(_)) => String::new(),
        Err(_) => {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(launcher), nix::sys::signal::Signal::SIGKILL);
            reaper.wait(launcher).await;
            return Err(LaunchError::Timeout(timeout));
        }
    };
    let status = reaper.wait(launcher).await;
    let line = line.trim_end();
    if let Some(rest) = line.strip_prefix("ok ") {
        let mut parts = rest.split(' ');
        let pid = parts.next().and_then(|p| p.parse().ok());
        let start_time = parts.next().and_then(|p| p.parse().ok());
        if let (Some(pid), Some(start_time), true) = (pid, start_time, status.success()) {
            let boot_id = boot_id().map_err(|e| LaunchError::SetUp(format!("cannot read boot id: {e}")))?;
            return Ok(ProcessIdentity { pid, start_time, boot_id });
        }
    }
    Err(LaunchError::SetUp(match line.strip_prefix("error ") {
        Some(why) => why.to_string(),
        None => format!("the launcher ended ({status}) without a reply"),
    }))
}
