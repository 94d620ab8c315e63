//! Streaming Exec, daemon side: starts `nidus-monitor exec-stream` (the same
//! helper and container entry as ExecSync, request on its fd 4) with the
//! client's stdio as pipes or a pseudo-terminal, and hands the session the
//! daemon's ends, the exit code, and a kill that reaches the command: the
//! runtime side of an Exec session (`streaming::runtime`'s traits).

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Mutex;

use tokio::io::AsyncReadExt;

use crate::linux::process::{spawn_with_fds, Pidfd};
use crate::linux::reaper::{ExitStatus, Reaper};
use crate::monitor::plan::ExecRequest;
use crate::streaming::runtime::{self, ExecIo, ExecStdio};

/// Everything needed to start the command later, when the client connects.
pub(crate) struct ExecLaunch {
    pub(crate) container_id: String,
    pub(crate) helper: PathBuf,
    pub(crate) request: ExecRequest,
    pub(crate) reaper: Reaper,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ExecStreamError {
    #[error("cannot start the exec helper {binary}: {source}")]
    Helper { binary: String, source: std::io::Error },
    #[error("{0}")]
    CannotStart(String),
}

pub(crate) struct RunningExec {
    pid: i32,
    /// Present until the helper is reaped: a kill cannot hit a reused pid.
    pidfd: Mutex<Option<Pidfd>>,
    errors: Mutex<Option<OwnedFd>>,
    reaper: Reaper,
}

impl ExecLaunch {
    /// Starts the command; the helper joins the container and execs it.
    pub(crate) fn start(mut self, stdio: ExecStdio) -> Result<(RunningExec, ExecIo), ExecStreamError> {
        let binary = self.helper.display().to_string();
        let helper_err = |source: std::io::Error| ExecStreamError::Helper { binary: binary.clone(), source };
        let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from);
        let null = || std::fs::OpenOptions::new().read(true).write(true).open("/dev/null").map(OwnedFd::from);
        self.request.tty = stdio.tty;
        let (child_fds, io) = if stdio.tty {
            let pty = crate::linux::pty::open_in_container(self.request.init.pid).map_err(helper_err)?;
            // Opened through the init's /proc entry: it must still be that init.
            if !self.request.init.is_running() {
                return Err(ExecStreamError::CannotStart("the container is not running".into()));
            }
            let slave = |_| pty.slave.try_clone();
            let child = [0, 1, 2].map(slave);
            let child = child.into_iter().collect::<std::io::Result<Vec<_>>>().map_err(helper_err)?;
            let dup = || pty.master.try_clone().map_err(helper_err);
            let io = ExecIo {
                stdin: if stdio.stdin { Some(dup()?) } else { None },
                stdout: if stdio.stdout { Some(dup()?) } else { None },
                stderr: None,
                terminal: Some(dup()?),
            };
            (child, io)
        } else {
            let mut child = Vec::new();
            let mut io = ExecIo { stdin: None, stdout: None, stderr: None, terminal: None };
            if stdio.stdin {
                let (r, w) = pipe().map_err(helper_err)?;
                child.push(r);
                io.stdin = Some(w);
            } else {
                child.push(null().map_err(helper_err)?);
            }
            for (wanted, slot) in [(stdio.stdout, &mut io.stdout), (stdio.stderr, &mut io.stderr)] {
                if wanted {
                    let (r, w) = pipe().map_err(helper_err)?;
                    child.push(w);
                    *slot = Some(r);
                } else {
                    child.push(null().map_err(helper_err)?);
                }
            }
            (child, io)
        };
        let body = serde_json::to_vec(&self.request).map_err(|e| helper_err(std::io::Error::other(e)))?;
        let (errors_r, errors_w) = pipe().map_err(helper_err)?;
        let (request_r, request_w) = pipe().map_err(helper_err)?;
        let mut fds = child_fds;
        fds.push(errors_w);
        fds.push(request_r);
        let pid = spawn_with_fds(&self.helper, &["exec-stream"], fds).map_err(helper_err)?;
        // Our child, not reaped before this: the handle is to this very process.
        let running = RunningExec {
            pid,
            pidfd: Mutex::new(Pidfd::open(pid).ok()),
            errors: Mutex::new(Some(errors_r)),
            reaper: self.reaper.clone(),
        };
        // The request is small (a pipe holds 64 KiB); a larger one is written off the async threads.
        let mut request = std::fs::File::from(request_w);
        std::thread::spawn(move || std::io::Write::write_all(&mut request, &body));
        for fd in [&io.stdin, &io.stdout, &io.stderr, &io.terminal].into_iter().flatten() {
            set_nonblocking(fd).map_err(helper_err)?;
        }
        Ok((running, io))
    }
}

fn set_nonblocking(fd: &OwnedFd) -> std::io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = OFlag::from_bits_truncate(fcntl(fd.as_fd(), FcntlArg::F_GETFL).map_err(std::io::Error::from)?);
    fcntl(fd.as_fd(), FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK)).map_err(std::io::Error::from)?;
    Ok(())
}

impl RunningExec {
    /// Waits for the command to end: its exit code (128 + signal when
    /// killed), or why it could not start.
    pub(crate) async fn wait(&self) -> Result<i32, ExecStreamError> {
        let status = self.reaper.wait(self.pid).await;
        self.pidfd.lock().unwrap_or_else(|p| p.into_inner()).take();
        let errors = self.errors.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(errors) = errors {
            let why = read_bounded(errors).await;
            if !why.is_empty() {
                return Err(ExecStreamError::CannotStart(String::from_utf8_lossy(&why).into_owned()));
            }
        }
        Ok(match status {
            ExitStatus::Exited(code) => code,
            ExitStatus::Signaled(sig) => 128 + sig,
        })
    }

    /// Kills the helper, and with it the command (its parent-death signal).
    pub(crate) fn kill(&self) {
        if let Some(helper) = self.pidfd.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            let _ = helper.send_signal(libc::SIGKILL);
        }
    }
}

impl Drop for RunningExec {
    fn drop(&mut self) {
        // A session that ends before its command does leaves nobody to read it.
        self.kill();
    }
}

/// What the helper wrote on its error channel (at most 64 KiB).
async fn read_bounded(fd: OwnedFd) -> Vec<u8> {
    let Ok(pipe) = tokio::net::unix::pipe::Receiver::from_owned_fd(fd) else {
        return Vec::new();
    };
    let mut kept = Vec::new();
    let _ = pipe.take(64 << 10).read_to_end(&mut kept).await;
    kept
}

impl runtime::PreparedExec for ExecLaunch {
    fn container_id(&self) -> &str {
        &self.container_id
    }

    fn argv(&self) -> &[String] {
        &self.request.argv
    }

    fn start(self: Box<Self>, stdio: ExecStdio) -> Result<(Box<dyn runtime::RunningExec>, ExecIo), String> {
        let (running, io) = ExecLaunch::start(*self, stdio).map_err(|e| e.to_string())?;
        Ok((Box::new(running), io))
    }
}

impl runtime::RunningExec for RunningExec {
    fn wait(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<i32, String>> + Send + '_>> {
        Box::pin(async move { RunningExec::wait(self).await.map_err(|e| e.to_string()) })
    }

    fn kill(&self) {
        RunningExec::kill(self)
    }
}
