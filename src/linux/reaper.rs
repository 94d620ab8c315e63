//! The daemon's child reaper. nidus serve is a child subreaper, so detached
//! helpers (pause, monitors) become its children when their launchers exit;
//! this reaps every child on SIGCHLD and hands each exit status to whoever
//! waits for that pid. Nothing else in the daemon may call wait*(): spawn with
//! `std::process::Command`, then `Reaper::wait(pid)`, never `Child::wait`;
//! or hand the command to `Reaper::run`, for a helper program run to its end.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use tokio::io::AsyncWriteExt;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::oneshot;

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExitStatus {
    Exited(i32),
    Signaled(i32),
}

impl ExitStatus {
    pub(crate) fn success(self) -> bool {
        self == ExitStatus::Exited(0)
    }
}

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitStatus::Exited(code) => write!(f, "exit status {code}"),
            ExitStatus::Signaled(sig) => write!(f, "killed by signal {sig}"),
        }
    }
}

/// A helper program run to its end (`Reaper::run`): how it ended and what
/// it printed.
pub(crate) struct Finished {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum RunError {
    /// It could not be started, or its pipes failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("it did not finish within {0:?} and was killed")]
    Timeout(Duration),
    #[error("its output was too large (over {0} bytes on stdout or stderr) and it was killed")]
    OutputTooLarge(u64),
}

/// One of a helper's output pipes, read as it writes, up to a cap.
struct Collected {
    pipe: tokio::net::unix::pipe::Receiver,
    bytes: Vec<u8>,
    cap: u64,
    eof: bool,
}

impl Collected {
    fn new(fd: OwnedFd, cap: u64) -> std::io::Result<Self> {
        Ok(Self { pipe: tokio::net::unix::pipe::Receiver::from_owned_fd(fd)?, bytes: Vec::new(), cap, eof: false })
    }

    /// Waits for the next bytes (or the end) and takes them.
    async fn step(&mut self) -> Result<(), RunError> {
        self.pipe.readable().await?;
        let mut buf = [0u8; 16 << 10];
        while !self.eof {
            // try_read clears the readiness when the pipe turns out empty.
            match self.pipe.try_read(&mut buf) {
                Ok(0) => self.eof = true,
                Ok(n) => self.take(&buf[..n])?,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    fn take(&mut self, bytes: &[u8]) -> Result<(), RunError> {
        if (self.bytes.len() + bytes.len()) as u64 > self.cap {
            return Err(RunError::OutputTooLarge(self.cap));
        }
        self.bytes.extend_from_slice(bytes);
        Ok(())
    }

    /// Takes what is in the pipe now, without waiting: read(2) itself on the
    /// non-blocking pipe (tokio's `try_read` would trust a readiness it
    /// has not seen yet, and miss what a program wrote just before exiting).
    fn drain(&mut self) -> Result<(), RunError> {
        use std::os::fd::AsFd;
        let mut buf = [0u8; 16 << 10];
        while !self.eof {
            match nix::unistd::read(self.pipe.as_fd(), &mut buf) {
                Ok(0) => self.eof = true,
                Ok(n) => self.take(&buf[..n])?,
                Err(nix::errno::Errno::EAGAIN) => break,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(std::io::Error::from(e).into()),
            }
        }
        Ok(())
    }
}

/// Exits nobody claimed are kept this long, for a waiter that registers late.
const UNCLAIMED_TTL: Duration = Duration::from_secs(300);

#[derive(Default)]
struct State {
    unclaimed: HashMap<i32, (ExitStatus, Instant)>,
    waiters: HashMap<i32, oneshot::Sender<ExitStatus>>,
}

#[derive(Clone)]
pub(crate) struct Reaper {
    state: Arc<Mutex<State>>,
}

impl Reaper {
    /// Starts reaping on the current tokio runtime.
    pub(crate) fn start() -> std::io::Result<Self> {
        let mut sigchld = signal(SignalKind::child())?;
        let reaper = Reaper { state: Arc::default() };
        let worker = reaper.clone();
        tokio::spawn(async move {
            loop {
                worker.reap_all();
                if sigchld.recv().await.is_none() {
                    return;
                }
            }
        });
        Ok(reaper)
    }

    /// Waits for child `pid` to exit and returns how it ended. Cancel-safe:
    /// dropped (a `select!` that took another branch) after the exit reached
    /// it, it keeps that exit for the next `wait` on `pid`.
    pub(crate) async fn wait(&self, pid: i32) -> ExitStatus {
        let pending = match self.register(pid) {
            Registered::Exited(status) => return status,
            Registered::Pending(pending) => pending,
        };
        // A concurrent reap may have raced the registration: look once more.
        self.reap_all();
        pending.exit().await
    }

    /// The exit of `pid` if it is kept, else a waiter for it.
    fn register(&self, pid: i32) -> Registered {
        let mut state = lock(&self.state);
        if let Some((status, _)) = state.unclaimed.remove(&pid) {
            // The kept exit may be an earlier holder's of a reused pid: a
            // pid is reused only once its holder was reaped, so while
            // `pid` is our child and not reaped, the exit is not its own.
            // (Reaping holds the state lock, so none is in flight here.)
            if !is_unreaped_child(pid) {
                return Registered::Exited(status);
            }
        }
        let (tx, rx) = oneshot::channel();
        state.waiters.insert(pid, tx);
        Registered::Pending(Pending { state: self.state.clone(), pid, rx, taken: false })
    }

    /// Runs `command` to its end: `input` on its stdin, its stdout and
    /// stderr read as it writes them (up to `max_output` bytes each; more
    /// ends the run at once), its exit collected here. It runs in a process
    /// group of its own, which is killed when it exits (a child it left, one
    /// holding its stdout say, is not waited for), at `timeout`, or when its
    /// output is too large. (Its stdio is set here, and it dies with the
    /// daemon: `process::die_with_parent`.)
    pub(crate) async fn run(
        &self,
        command: &mut Command,
        input: &[u8],
        max_output: u64,
        timeout: Duration,
    ) -> Result<Finished, RunError> {
        use std::os::unix::process::CommandExt;
        super::process::die_with_parent(command);
        command.process_group(0);
        let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
        let pid = child.id() as i32;
        let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        // The reaper owns waiting; the std handle must never wait.
        drop(child);
        let kill_group = || {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        };
        let (Some(stdin), Some(stdout), Some(stderr)) = pipes else {
            kill_group();
            self.wait(pid).await;
            return Err(std::io::Error::other("the program's pipes are missing").into());
        };
        let collected = Collected::new(OwnedFd::from(stdout), max_output)
            .and_then(|out| Ok((out, Collected::new(OwnedFd::from(stderr), max_output)?)))
            .and_then(|pair| Ok((pair, tokio::net::unix::pipe::Sender::from_owned_fd(OwnedFd::from(stdin))?)));
        let ((mut out, mut err), mut stdin) = match collected {
            Ok(parts) => parts,
            Err(e) => {
                kill_group();
                self.wait(pid).await;
                return Err(e.into());
            }
        };
        let exited = self.wait(pid);
        let deadline = tokio::time::sleep(timeout);
        // A program may exit without reading all of its input.
        let write = async move {
            let _ = stdin.write_all(input).await;
        };
        tokio::pin!(exited, deadline, write);
        let mut written = false;
        let outcome = loop {
            tokio::select! {
                status = &mut exited => {
                    // What it wrote before it exited is in the pipes already.
                    break out.drain().and_then(|()| err.drain()).map(|()| status);
                }
                read = out.step(), if !out.eof => if let Err(e) = read { break Err(e) },
                read = err.step(), if !err.eof => if let Err(e) = read { break Err(e) },
                () = &mut write, if !written => written = true,
                () = &mut deadline => break Err(RunError::Timeout(timeout)),
            }
        };
        kill_group();
        match outcome {
            Ok(status) => Ok(Finished { status, stdout: out.bytes, stderr: err.bytes }),
            Err(e) => {
                exited.await;
                Err(e)
            }
        }
    }

    fn reap_all(&self) {
        // Reap and deliver under the lock, so `wait` never sees a child that
        // is reaped but whose exit is not delivered yet.
        let mut state = lock(&self.state);
        loop {
            let status = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => (pid.as_raw(), ExitStatus::Exited(code)),
                Ok(WaitStatus::Signaled(pid, sig, _)) => (pid.as_raw(), ExitStatus::Signaled(sig as i32)),
                Ok(WaitStatus::StillAlive) | Err(_) => return,
                Ok(_) => continue,
            };
            deliver(&mut state, status.0, status.1);
        }
    }
}

enum Registered {
    Exited(ExitStatus),
    Pending(Pending),
}

/// A registered wait for one pid's exit.
struct Pending {
    state: Arc<Mutex<State>>,
    pid: i32,
    rx: oneshot::Receiver<ExitStatus>,
    taken: bool,
}

impl Pending {
    async fn exit(mut self) -> ExitStatus {
        let status = (&mut self.rx).await.unwrap_or(ExitStatus::Signaled(libc::SIGKILL));
        self.taken = true;
        status
    }
}

impl Drop for Pending {
    /// An exit that reached this waiter after it was given up is kept, as
    /// one nobody waited for is: else the next `wait` on the pid never ends.
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        if let Ok(status) = self.rx.try_recv() {
            keep_unclaimed(&mut lock(&self.state), self.pid, status);
        }
    }
}

fn deliver(state: &mut State, pid: i32, status: ExitStatus) {
    // A waiter that gave up before the exit came (its receiver dropped)
    // leaves the exit unclaimed, for a later `wait` on the same pid.
    let undelivered = match state.waiters.remove(&pid) {
        Some(tx) => tx.send(status).err(),
        None => Some(status),
    };
    if let Some(status) = undelivered {
        keep_unclaimed(state, pid, status);
    }
}

fn keep_unclaimed(state: &mut State, pid: i32, status: ExitStatus) {
    let now = Instant::now();
    state.unclaimed.retain(|_, (_, at)| now.duration_since(*at) < UNCLAIMED_TTL);
    state.unclaimed.insert(pid, (status, now));
}

/// True while `pid` is a child of this process that has not been reaped
/// (running, or a zombie).
fn is_unreaped_child(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let parent = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
    parent == Some(std::process::id())
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreaped_children_are_told_apart() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().expect("spawning sleep");
        let pid = child.id() as i32;
        assert!(is_unreaped_child(pid), "a running child");
        child.kill().expect("kill");
        // A zombie is still unreaped.
        std::thread::sleep(Duration::from_millis(50));
        assert!(is_unreaped_child(pid), "a zombie child");
        child.wait().expect("wait");
        assert!(!is_unreaped_child(pid), "a reaped child");
        assert!(!is_unreaped_child(1), "not our child");
    }

    /// A pid that is no child of this process.
    fn not_our_child() -> i32 {
        (i32::MAX - 64..i32::MAX).find(|pid| !is_unreaped_child(*pid)).expect("a free pid")
    }

    // What `select!` does to a wait when another branch wins in the same
    // poll: the exit was sent to it, and it is dropped unread. (No reaping
    // here: it would take the other tests' children.)
    #[tokio::test]
    async fn an_exit_sent_to_a_dropped_wait_is_kept_for_the_next() {
        let reaper = Reaper { state: Arc::default() };
        let pid = not_our_child();
        let Registered::Pending(first) = reaper.register(pid) else { panic!("no exit yet") };
        deliver(&mut lock(&reaper.state), pid, ExitStatus::Exited(3));
        drop(first);
        assert!(matches!(reaper.register(pid), Registered::Exited(ExitStatus::Exited(3))));
    }

    #[tokio::test]
    async fn an_exit_reaches_its_waiter_or_waits_for_one() {
        let reaper = Reaper { state: Arc::default() };
        let pid = not_our_child();
        let Registered::Pending(waiter) = reaper.register(pid) else { panic!("no exit yet") };
        deliver(&mut lock(&reaper.state), pid, ExitStatus::Signaled(9));
        assert_eq!(waiter.exit().await, ExitStatus::Signaled(9));
        assert!(lock(&reaper.state).unclaimed.is_empty(), "taken, not kept");
        // Nobody waiting: kept for a later wait.
        deliver(&mut lock(&reaper.state), pid, ExitStatus::Exited(0));
        assert!(matches!(reaper.register(pid), Registered::Exited(ExitStatus::Exited(0))));
    }
}
