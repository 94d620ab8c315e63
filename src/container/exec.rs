//! ExecSync, daemon side: runs `nidus-monitor exec` for one command in a
//! running container, collects stdout and stderr (each capped at 16 MiB, the
//! truncation noted on stderr), and kills it when the timeout passes.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use crate::linux::process::{spawn_with_fd3, Pidfd, SpawnedHelper};
use crate::linux::reaper::{ExitStatus, Reaper};
use crate::monitor::plan::ExecRequest;

/// Most bytes kept of each of stdout and stderr.
pub(crate) const OUTPUT_CAP: usize = 16 << 20;

#[derive(Debug)]
pub(crate) struct ExecOutput {
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    pub(crate) exit_code: i32,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ExecError {
    #[error("the command did not finish within {0:?} and was killed")]
    Timeout(Duration),
    #[error("{0}")]
    CannotStart(String),
    #[error("cannot run the exec helper {binary}: {source}")]
    Helper { binary: String, source: std::io::Error },
}

pub(crate) async fn exec_sync(
    helper: &Path,
    request: &ExecRequest,
    timeout: Option<Duration>,
    reaper: &Reaper,
) -> Result<ExecOutput, ExecError> {
    let helper_err = |source| ExecError::Helper { binary: helper.display().to_string(), source };
    let body = serde_json::to_vec(request).map_err(|e| helper_err(std::io::Error::other(e)))?;
    let (errors_r, errors_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| helper_err(e.into()))?;
    let SpawnedHelper { pid, stdin, stdout, stderr } =
        spawn_with_fd3(helper, &["exec"], errors_w).map_err(helper_err)?;
    // Our child, not reaped before this: the handle is to this very process.
    let mut unfinished = KilledIfAbandoned(Pidfd::open(pid).ok());
    let mut stdin = std::fs::File::from(stdin);
    let write = tokio::task::spawn_blocking(move || std::io::Write::write_all(&mut stdin, &body));
    let _ = write.await;
    let stdout = tokio::spawn(read_capped(stdout));
    let stderr = tokio::spawn(read_capped(stderr));
    let errors = tokio::spawn(read_capped(errors_r));
    let status = match timeout {
        Some(limit) => match tokio::time::timeout(limit, reaper.wait(pid)).await {
            Ok(status) => status,
            Err(_) => {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
                reaper.wait(pid).await;
                return Err(ExecError::Timeout(limit));
            }
        },
        None => reaper.wait(pid).await,
    };
    unfinished.0 = None;
    let (mut out, out_truncated) = stdout.await.unwrap_or_default();
    let (mut err, err_truncated) = stderr.await.unwrap_or_default();
    let (why, _) = errors.await.unwrap_or_default();
    if !why.is_empty() {
        return Err(ExecError::CannotStart(String::from_utf8_lossy(&why).into_owned()));
    }
    for (truncated, name) in [(out_truncated, "stdout"), (err_truncated, "stderr")] {
        if truncated {
            tracing::warn!(stream = name, "ExecSync output truncated at 16 MiB");
            let note = format!("\n[nidus: {name} truncated at 16 MiB]\n");
            if err.len() + note.len() <= OUTPUT_CAP {
                err.extend_from_slice(note.as_bytes());
            }
        }
    }
    out.shrink_to_fit();
    let exit_code = match status {
        ExitStatus::Exited(code) => code,
        ExitStatus::Signaled(sig) => 128 + sig,
    };
    Ok(ExecOutput { stdout: out, stderr: err, exit_code })
}

/// The command of an ExecSync nobody waits for any more (its caller gave
/// up, and the call with it): killed, as nobody will read what it says.
struct KilledIfAbandoned(Option<Pidfd>);

impl Drop for KilledIfAbandoned {
    fn drop(&mut self) {
        if let Some(command) = &self.0 {
            let _ = command.send_signal(libc::SIGKILL);
        }
    }
}

/// Reads a pipe to its end, keeping the first OUTPUT_CAP bytes; true when more came.
async fn read_capped(fd: OwnedFd) -> (Vec<u8>, bool) {
    let Ok(mut pipe) = tokio::net::unix::pipe::Receiver::from_owned_fd(fd) else {
        return (Vec::new(), false);
    };
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = OUTPUT_CAP - kept.len();
                if n > room {
                    truncated = true;
                }
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    (kept, truncated)
}
