//! Daemon side of starting a pause process: run `nidus pause` (exec of our own
//! binary, never a fork of the daemon) as soon as a RunPodSandbox starts, say
//! `go` once the pod's cgroups and files are ready, read its one-line reply
//! (its last act), and reap the launcher. The pause it leaves behind is identified by pid and start time.

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

/// A launcher started while the daemon prepares the pod: it has loaded and
/// waits for `go` on stdin. Dropped without `go`, its input ends and so does it.
pub struct PendingLauncher {
    pid: i32,
    go: std::process::ChildStdin,
    reply: std::process::ChildStdout,
}

/// Starts `nidus pause ARGS` (the cgroups it joins need not exist yet).
pub fn start_launcher(binary: &Path, args: &PauseArgs) -> Result<PendingLauncher, LaunchError> {
    let spawn_error = |source| LaunchError::Spawn { binary: binary.display().to_string(), source };
    let mut child = Command::new(binary)
        .arg("pause")
        .args(args.to_args())
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(spawn_error)?;
    let pid = child.id() as i32;
    let (go, reply) = (child.stdin.take(), child.stdout.take());
    // The reaper owns waiting; the std handle must never wait.
    drop(child);
    match (go, reply) {
        (Some(go), Some(reply)) => Ok(PendingLauncher { pid, go, reply }),
        _ => Err(spawn_error(std::io::Error::other("the launcher's pipes are missing"))),
    }
}

/// Tells a started launcher to build the pod (its cgroups exist now) and
/// waits for the pause it leaves behind.
pub async fn launch_pause(
    pending: PendingLauncher,
    reaper: &Reaper,
    timeout: Duration,
) -> Result<ProcessIdentity, LaunchError> {
    let PendingLauncher { pid: launcher, mut go, reply } = pending;
    // A launcher that died already fails the write; its reply then says nothing.
    let _ = std::io::Write::write_all(&mut go, b"go\n");
    let read = async move {
        use tokio::io::AsyncBufReadExt;
        let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(std::os::fd::OwnedFd::from(reply))?;
        let mut line = String::new();
        tokio::io::BufReader::new(pipe).read_line(&mut line).await?;
        drop(go);
        Ok::<_, std::io::Error>(line)
    };
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
