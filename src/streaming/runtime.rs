//! What an Exec session needs of the runtime, as the traits the container
//! side implements (`container/exec_stream.rs`): the command the CRI's Exec
//! call prepared, started once its client connects, and the command while it
//! runs. The session owns the client's side (its streams, terminal sizes, the
//! error stream); the runtime owns how a command starts in a container, ends
//! and is killed. (Attach talks to the container's monitor itself,
//! `monitor::attach`; PortForward connects in the pod's network namespace,
//! `linux::netns_connect`.)

use std::future::Future;
use std::os::fd::OwnedFd;
use std::pin::Pin;

/// Which of the client's streams the command gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExecStdio {
    pub(crate) stdin: bool,
    pub(crate) stdout: bool,
    pub(crate) stderr: bool,
    pub(crate) tty: bool,
}

/// The daemon's ends of a running command's stdio. With a terminal, stdin
/// and stdout are both the master, and `terminal` is kept for resizes.
pub(crate) struct ExecIo {
    pub(crate) stdin: Option<OwnedFd>,
    pub(crate) stdout: Option<OwnedFd>,
    pub(crate) stderr: Option<OwnedFd>,
    pub(crate) terminal: Option<OwnedFd>,
}

/// An Exec session's command as the CRI's Exec call prepared it.
pub(crate) trait PreparedExec: Send {
    /// The container it runs in.
    fn container_id(&self) -> &str;
    /// Its command line.
    fn argv(&self) -> &[String];
    /// Starts it with the client's streams: the running command and the
    /// daemon's ends of its stdio, or why it could not start.
    fn start(self: Box<Self>, stdio: ExecStdio) -> Result<(Box<dyn RunningExec>, ExecIo), String>;
}

/// A command an Exec session started.
pub(crate) trait RunningExec: Send + Sync {
    /// Waits for the command to end: its exit code (128 + signal when
    /// killed), or why it could not start.
    fn wait(&self) -> Pin<Box<dyn Future<Output = Result<i32, String>> + Send + '_>>;
    /// Kills the command.
    fn kill(&self);
}
