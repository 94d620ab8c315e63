//! Running the hooks of one stage: each with the container's OCI state on
//! stdin (a memfd, so a hook that never reads cannot block us), its own
//! args and env only, stdout and stderr read through a pipe as it writes
//! them, of which only the last 4 KiB are kept for the error message, in a
//! process group of its own that is killed at its timeout. The hook's exit
//! ends its run: a child it left holding the pipe is not waited for. The
//! first hook that fails ends the stage. Used alike by the daemon, a
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
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// How much of a failed hook's output its error quotes (the end of it).
const OUTPUT_QUOTED: u64 = 4096;

/// The OCI state a hook reads on stdin.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct State<'a> {
    pub(crate) oci_version: &'a str,
    pub(crate) id: &'a str,
    /// creating, created, running or stopped.
    pub(crate) status: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) pid: Option<i32>,
    pub(crate) bundle: &'a Path,
    pub(crate) annotations: &'a HashMap<String, String>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum HookError {
    #[error("{stage} hook {path}: cannot start it: {why}")]
    Spawn { stage: &'static str, path: String, why: String },
    #[error("{stage} hook {path} failed ({status}){output}")]
    Failed { stage: &'static str, path: String, status: String, output: String },
    #[error("{stage} hook {path} did not finish within {seconds} s and was killed{output}")]
    Timeout { stage: &'static str, path: String, seconds: u64, output: String },
}

/// Runs `hooks` in order with `state` on stdin; the first failure ends the stage.
pub(crate) fn run_stage(stage: Stage, hooks: &[Hook], state: &State<'_>) -> Result<(), HookError> {
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
    let (output, output_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
        .map_err(|e| spawn_error(format!("pipe: {e}")))?;
    // The hook's end blocks as usual: only ours does not.
    nix::fcntl::fcntl(&output_end, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()))
        .map_err(|e| spawn_error(format!("fcntl: {e}")))?;
    let output_end = File::from(output_end);
    let stderr = output_end.try_clone().map_err(|e| spawn_error(format!("dup: {e}")))?;
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
    command.stdin(Stdio::from(stdin_file)).stdout(Stdio::from(output_end)).stderr(Stdio::from(stderr)).process_group(0);
    let mut child = command.spawn().map_err(|e| spawn_error(e.to_string()))?;
    // Our copies of the hook's ends are gone with `command`.
    drop(command);
    let limit = hook.timeout().map_or(DEFAULT_TIMEOUT, |s| Duration::from_secs(s.max(1) as u64));
    let mut tail = Tail::default();
    let status = wait_until(&mut child, Instant::now() + limit, &File::from(output), &mut tail);
    let text = tail.quoted();
    match status {
        Some(status) if status.success() => Ok(()),
        Some(status) => Err(HookError::Failed { stage: stage.name(), path, status: describe(status), output: text }),
        None => Err(HookError::Timeout { stage: stage.name(), path, seconds: limit.as_secs(), output: text }),
    }
}

/// The end of a hook's output: at most twice what is quoted is held.
#[derive(Default)]
struct Tail(Vec<u8>);

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
        let keep = OUTPUT_QUOTED as usize;
        if self.0.len() > 2 * keep {
            self.0.drain(..self.0.len() - keep);
        }
    }

    /// Takes what `output` holds now (at most 1 MiB: a hook writing without
    /// end must not keep its runner from looking at the clock), without waiting.
    fn read_available(&mut self, mut output: &File) {
        let mut buf = [0u8; 16 << 10];
        for _ in 0..64 {
            match output.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => self.push(&buf[..n]),
            }
        }
    }

    /// ": OUTPUT" (its last few KiB, trimmed), or nothing when it wrote nothing.
    fn quoted(&self) -> String {
        let start = self.0.len().saturating_sub(OUTPUT_QUOTED as usize);
        let text = String::from_utf8_lossy(&self.0[start..]);
        let text = text.trim();
        if text.is_empty() {
            String::new()
        } else {
            format!(": {}", text.replace('\n', " | "))
        }
    }
}

fn memfd(name: &str) -> Result<std::os::fd::OwnedFd, String> {
    memfd_create(name, MFdFlags::MFD_CLOEXEC).map_err(|e| format!("memfd_create: {e}"))
}

/// The child's status, or None once it was killed (its whole process
/// group) at the deadline; its output is read into `tail` meanwhile.
fn wait_until(
    child: &mut std::process::Child,
    deadline: Instant,
    output: &File,
    tail: &mut Tail,
) -> Option<ExitStatus> {
    use std::os::fd::AsFd;
    let mut pause = Duration::from_micros(100);
    loop {
        tail.read_available(output);
        match child.try_wait() {
            Ok(Some(status)) => {
                // What it wrote before it exited is in the pipe already.
                tail.read_available(output);
                return Some(status);
            }
            Ok(None) => {}
            Err(_) => return child.wait().ok(),
        }
        let now = Instant::now();
        if now >= deadline {
            let group = nix::unistd::Pid::from_raw(-(child.id() as i32));
            let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
            let _ = child.wait();
            tail.read_available(output);
            return None;
        }
        // Woken early by output; at most `pause` otherwise (it exited, say).
        let wait = pause.min(deadline - now);
        let mut fds = [nix::poll::PollFd::new(output.as_fd(), nix::poll::PollFlags::POLLIN)];
        let millis = u16::try_from(wait.as_millis().max(1)).unwrap_or(u16::MAX);
        let readable = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(millis)).unwrap_or(0);
        let hung_up = fds[0].revents().is_some_and(|r| r.contains(nix::poll::PollFlags::POLLHUP));
        if readable == 0 || hung_up {
            // Nothing to read (or nobody left to write): back off.
            if hung_up {
                std::thread::sleep(wait);
            }
            pause = (pause * 2).min(Duration::from_millis(10));
        }
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
    fn a_flood_of_output_is_quoted_by_its_end_and_a_child_left_behind_is_not_waited_for() {
        let annotations = HashMap::new();
        let flood = hook("head -c 50000000 /dev/zero | tr '\\0' x; echo; echo the-end >&2; exit 4", None);
        let err = run_stage(Stage::Poststop, &[flood], &state(&annotations)).unwrap_err().to_string();
        assert!(err.ends_with("| the-end"), "{}", &err[err.len().saturating_sub(200)..]);
        assert!(err.len() < 5000, "the quote is the last 4 KiB: {} bytes", err.len());
        // It exits at once, leaving a child that holds its output for 5 s.
        let began = Instant::now();
        let leaves = hook("sleep 5 & echo started", Some(20));
        run_stage(Stage::Poststart, &[leaves], &state(&annotations)).unwrap();
        assert!(began.elapsed() < Duration::from_secs(4), "waited {:?} for the child", began.elapsed());
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
