//! Running one CNI plugin: its configuration on stdin, the protocol's
//! environment (`CNI_COMMAND`, `CNI_CONTAINERID`, `CNI_NETNS`, `CNI_IFNAME`,
//! `CNI_ARGS`, `CNI_PATH`), its result or error JSON on stdout, within a
//! time limit after which it is killed. Its exit is collected by the
//! daemon's reaper (nothing else may wait for children).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::linux::reaper::Reaper;

/// Most output read from a plugin.
const MAX_OUTPUT: u64 = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("cannot run CNI plugin {plugin}: {source}")]
    Spawn { plugin: String, source: std::io::Error },
    #[error("CNI plugin {plugin} ({command}) did not finish within {timeout:?} and was killed")]
    Timeout { plugin: String, command: &'static str, timeout: Duration },
    #[error("CNI plugin {plugin} ({command}) failed: {message}")]
    Failed { plugin: String, command: &'static str, message: String },
    #[error("CNI plugin {plugin} ({command}) printed an invalid result: {why}")]
    BadOutput { plugin: String, command: &'static str, why: String },
}

/// One invocation.
pub struct Invocation<'a> {
    pub command: &'static str,
    pub container_id: &'a str,
    /// Empty when the namespace is gone (DEL after a reboot).
    pub netns: &'a str,
    pub ifname: &'a str,
    pub args: &'a str,
    pub bin_dirs: &'a [PathBuf],
}

/// Runs `program` with `config` on stdin; returns its stdout parsed as JSON
/// (`Value::Null` when it printed nothing, as DEL and CHECK may).
pub async fn run(
    program: &Path,
    invocation: &Invocation<'_>,
    config: &Value,
    reaper: &Reaper,
    timeout: Duration,
) -> Result<Value, PluginError> {
    let plugin = program.display().to_string();
    let command = invocation.command;
    let cni_path = std::env::join_paths(invocation.bin_dirs).unwrap_or_default();
    let mut command_line = Command::new(program);
    crate::linux::process::die_with_parent(&mut command_line);
    let mut child = command_line
        .env_clear()
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", invocation.container_id)
        .env("CNI_NETNS", invocation.netns)
        .env("CNI_IFNAME", invocation.ifname)
        .env("CNI_ARGS", invocation.args)
        .env("CNI_PATH", cni_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| PluginError::Spawn { plugin: plugin.clone(), source })?;
    let pid = child.id() as i32;
    let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    // The reaper owns waiting; the std handle must never wait.
    drop(child);
    let input = serde_json::to_vec(config).unwrap_or_default();
    let talk = async {
        let (Some(stdin), Some(stdout), Some(stderr)) = pipes else {
            return Err(std::io::Error::other("the plugin's pipes are missing"));
        };
        let mut stdin = tokio::net::unix::pipe::Sender::from_owned_fd(OwnedFd::from(stdin))?;
        let stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(stdout))?;
        let stderr = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(stderr))?;
        let write = async move {
            // A plugin may exit without reading all of its input.
            let _ = stdin.write_all(&input).await;
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let (mut stdout, mut stderr) = (stdout.take(MAX_OUTPUT), stderr.take(MAX_OUTPUT));
        let read_out = stdout.read_to_end(&mut out);
        let read_err = stderr.read_to_end(&mut err);
        let ((), read_out, read_err) = tokio::join!(write, read_out, read_err);
        read_out?;
        read_err?;
        let status = reaper.wait(pid).await;
        Ok((status, out, err))
    };
    let (status, out, err) = match tokio::time::timeout(timeout, talk).await {
        Ok(Ok(done)) => done,
        Ok(Err(e)) => {
            kill_and_reap(pid, reaper).await;
            return Err(PluginError::Spawn { plugin, source: e });
        }
        Err(_) => {
            kill_and_reap(pid, reaper).await;
            return Err(PluginError::Timeout { plugin, command, timeout });
        }
    };
    let parsed: Option<Value> = if out.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        match serde_json::from_slice(&out) {
            Ok(v) => Some(v),
            Err(e) if status.success() => {
                return Err(PluginError::BadOutput { plugin, command, why: e.to_string() });
            }
            Err(_) => None,
        }
    };
    if !status.success() {
        let message = match &parsed {
            Some(error) => error_message(error),
            None => {
                let stderr = String::from_utf8_lossy(&err);
                format!("{status}: {}", stderr.trim())
            }
        };
        return Err(PluginError::Failed { plugin, command, message });
    }
    Ok(parsed.unwrap_or(Value::Null))
}

/// The text of a CNI error object: `msg: details (code N)`.
fn error_message(error: &Value) -> String {
    let msg = error.get("msg").and_then(Value::as_str).unwrap_or("no message");
    let code = error.get("code").and_then(Value::as_u64).unwrap_or(0);
    match error.get("details").and_then(Value::as_str).filter(|d| !d.is_empty()) {
        Some(details) => format!("{msg}: {details} (code {code})"),
        None => format!("{msg} (code {code})"),
    }
}

async fn kill_and_reap(pid: i32, reaper: &Reaper) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    reaper.wait(pid).await;
}
