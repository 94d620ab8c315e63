//! Running the hooks of one stage: each with the container's OCI state on
//! stdin (a memfd, so a hook that never reads cannot block us), its own
//! args and env only, stdout and stderr kept (a memfd too) for the error
//! message, in a process group of its own that is killed at its timeout.
//! The first hook that fails ends the stage. Used alike by the daemon, a
//! container's monitor and its init (no async, no threads).

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::memfd::{memfd_create, MFdFlags};
use oci_spec::runtime::Hook;
use serde::Serialize;

use super::definition::Stage;

/// How long a hook that sets no timeout may run: no hook may hold a CRI
/// call (or the daemon's exit handling) forever.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// How much of a failed hook's output its error quotes (the end of it).
const OUTPUT_QUOTED: u64 = 4096;

/// The OCI state a hook reads on stdin.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct State<'a> {
    pub oci_version: &'a str,
    pub id: &'a str,
    /// creating, created, running or stopped.
    pub status: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    pub bundle: &'a Path,
    pub annotations: &'a HashMap<String, String>,
}

#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("{stage} hook {path}: cannot start it: {why}")]
    Spawn { stage: &'static str, path: String, why: String },
    #[error("{stage} hook {path} failed ({status}){output}")]
    Failed { stage: &'static str, path: String, status: String, output: String },
    #[error("{stage} hook {path} did not finish within {seconds} s and was killed{output}")]
    Timeout { stage: &'static str, path: String, seconds: u64, output: String },
}

/// Runs `hooks` in order with `state` on stdin; the first failure ends the stage.
pub fn run_stage(stage: Stage, hooks: &[Hook], state: &State<'_>) -> Result<(), HookError> {
    if hooks.is_empty() {
        return Ok(());
    }
    let json = serde_json::to_vec(state).map_err(|e| HookError::Spawn {
        stage: stage.name(),
        path: String::new(),
        why: format!("encoding the state: {e}"),
    })?;
    hooks.iter().try_for_each(|hook| run_one(stage, hook, &json))
}

fn run_one(stage: Stage, hook: &Hook, state: &[u8]) -> Result<(), HookError> {
    let path = hook.path().display().to_string();
    let spawn_error = |why: String| HookError::Spawn { stage: stage.name(), path: path.clone(), why };
    let stdin = memfd("nidus-hook-state").map_err(&spawn_error)?;
    let mut stdin_file = File::from(stdin);
    stdin_file
        .write_all(state)
        .and_then(|()| stdin_file.seek(SeekFrom::Start(0)).map(drop))
        .map_err(|e| spawn_error(format!("writing the state: {e}")))?;
    let output = File::from(memfd("nidus-hook-output").map_err(&spawn_error)?);
    let stderr = output.try_clone().map_err(|e| spawn_error(format!("dup: {e}")))?;
    let mut command = Command::new(hook.path());
    let args = hook.args().clone().unwrap_or_default();
    if let Some((first, rest)) = args.split_first() {
        command.arg0(first).args(rest);
    }
    command.env_clear();
    for pair in hook.env().as_deref().unwrap_or_default() {
        match pair.split_once('=') {
            Some((key, value)) if !key.is_empty() => command.env(key, value),
            _ => command.env(pair, ""),
        };
    }
    command
        .stdin(Stdio::from(stdin_file))
        .stdout(Stdio::from(output.try_clone().map_err(|e| spawn_error(format!("dup: {e}")))?))
        .stderr(Stdio::from(stderr))
        .process_group(0);
    let mut child = command.spawn().map_err(|e| spawn_error(e.to_string()))?;
    let limit = hook.timeout().map_or(DEFAULT_TIMEOUT, |s| Duration::from_secs(s.max(1) as u64));
    let status = wait_until(&mut child, Instant::now() + limit);
    let text = output_tail(output);
    match status {
        Some(status) if status.success() => Ok(()),
        Some(status) => Err(HookError::Failed { stage: stage.name(), path, status: describe(status), output: text }),
        None => Err(HookError::Timeout { stage: stage.name(), path, seconds: limit.as_secs(), output: text }),
    }
}

fn memfd(name: &str) -> Result<std::os::fd::OwnedFd, String> {
    memfd_create(name, MFdFlags::MFD_CLOEXEC).map_err(|e| format!("memfd_create: {e}"))
}

/// The child's status, or None once it was killed (its whole process
/// group) at the deadline.
fn wait_until(child: &mut std::process::Child, deadline: Instant) -> Option<ExitStatus> {
    let mut pause = Duration::from_micros(100);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(_) => return child.wait().ok(),
        }
        let now = Instant::now();
        if now >= deadline {
            let group = nix::unistd::Pid::from_raw(-(child.id() as i32));
            let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(10));
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => status.to_string(),
    }
}

/// ": OUTPUT" (its last few KiB, trimmed), or nothing when it wrote nothing.
fn output_tail(mut output: File) -> String {
    let len = output.metadata().map(|m| m.len()).unwrap_or(0);
    let mut text = Vec::new();
    let _ = output.seek(SeekFrom::Start(len.saturating_sub(OUTPUT_QUOTED)));
    let _ = output.take(OUTPUT_QUOTED).read_to_end(&mut text);
    let text = String::from_utf8_lossy(&text);
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else {
        format!(": {}", text.replace('\n', " | "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(script: &str, timeout: Option<i64>) -> Hook {
        let mut hook = oci_spec::runtime::HookBuilder::default().path("/bin/sh").build().unwrap();
        hook.set_args(Some(vec!["sh".into(), "-c".into(), script.into()]));
        hook.set_env(Some(vec!["GREETING=hello".into()]));
        hook.set_timeout(timeout);
        hook
    }

    fn state(annotations: &HashMap<String, String>) -> State<'_> {
        State { oci_version: "1.2.0", id: "c1", status: "creating", pid: Some(7), bundle: Path::new("/b"), annotations }
    }

    #[test]
    fn state_on_stdin_env_and_failure_output() {
        let annotations = HashMap::new();
        let ok = hook(
            r#"read -r s; case "$s" in *'"id":"c1"'*'"pid":7'*) [ "$GREETING" = hello ];; *) exit 9;; esac"#,
            None,
        );
        run_stage(Stage::Prestart, &[ok], &state(&annotations)).unwrap();
        let failing = hook("echo broken >&2; exit 3", None);
        let err = run_stage(Stage::CreateContainer, &[failing], &state(&annotations)).unwrap_err().to_string();
        assert_eq!(err, "createContainer hook /bin/sh failed (exit status 3): broken");
    }

    #[test]
    fn timeout_kills_the_group() {
        let annotations = HashMap::new();
        let slow = hook("sleep 30 & sleep 30", Some(1));
        let began = Instant::now();
        let err = run_stage(Stage::Prestart, &[slow], &state(&annotations)).unwrap_err();
        assert!(matches!(err, HookError::Timeout { seconds: 1, .. }), "{err}");
        assert!(began.elapsed() < Duration::from_secs(5));
    }
}
