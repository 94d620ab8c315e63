//! Running one CNI plugin: its configuration on stdin, the protocol's
//! environment (`CNI_COMMAND`, `CNI_CONTAINERID`, `CNI_NETNS`, `CNI_IFNAME`,
//! `CNI_ARGS`, `CNI_PATH`), its result or error JSON on stdout, within a
//! time limit after which it is killed, and within an output cap. It runs
//! in a process group of its own, killed once the plugin exits (nothing it
//! started outlives it). Its exit is collected by the daemon's reaper
//! (nothing else may wait for children).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::linux::reaper::{Finished, Reaper, RunError};

/// Most output read from a plugin.
const MAX_OUTPUT: u64 = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub(crate) enum PluginError {
    #[error("cannot run CNI plugin {plugin}: {source}")]
    Spawn { plugin: String, source: std::io::Error },
    #[error("CNI plugin {plugin} ({command}) did not finish within {timeout:?} and was killed")]
    Timeout { plugin: String, command: &'static str, timeout: Duration },
    #[error("CNI plugin {plugin} ({command}): output too large (over {limit} bytes); it was killed")]
    OutputTooLarge { plugin: String, command: &'static str, limit: u64 },
    #[error("CNI plugin {plugin} ({command}) failed: {message}")]
    Failed { plugin: String, command: &'static str, message: String },
    #[error("CNI plugin {plugin} ({command}) printed an invalid result: {why}")]
    BadOutput { plugin: String, command: &'static str, why: String },
}

/// One invocation.
pub(crate) struct Invocation<'a> {
    pub(crate) command: &'static str,
    pub(crate) container_id: &'a str,
    /// Empty when the namespace is gone (DEL after a reboot).
    pub(crate) netns: &'a str,
    pub(crate) ifname: &'a str,
    pub(crate) args: &'a str,
    pub(crate) bin_dirs: &'a [PathBuf],
}

/// Runs `program` with `config` on stdin; returns its stdout parsed as JSON
/// (`Value::Null` when it printed nothing, as DEL and CHECK may).
pub(crate) async fn run(
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
    command_line
        .env_clear()
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", invocation.container_id)
        .env("CNI_NETNS", invocation.netns)
        .env("CNI_IFNAME", invocation.ifname)
        .env("CNI_ARGS", invocation.args)
        .env("CNI_PATH", cni_path);
    let input = serde_json::to_vec(config).unwrap_or_default();
    let Finished { status, stdout: out, stderr: err } =
        match reaper.run(&mut command_line, &input, MAX_OUTPUT, timeout).await {
            Ok(finished) => finished,
            Err(RunError::Io(source)) => return Err(PluginError::Spawn { plugin, source }),
            Err(RunError::Timeout(_)) => return Err(PluginError::Timeout { plugin, command, timeout }),
            Err(RunError::OutputTooLarge(limit)) => return Err(PluginError::OutputTooLarge { plugin, command, limit }),
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
