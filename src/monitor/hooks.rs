//! The runtime-namespace stages, run by a container's monitor: prestart
//! and createRuntime once the init has made the container's namespaces and
//! mounts and waits before pivot_root (it says `words::RUNTIME_HOOKS` on its ready
//! pipe and waits for a byte on its start pipe), or once CRIU has restored a
//! container, before it resumes. The hooks run in the monitor's own
//! namespaces (the runtime's): its PID namespace for children, which is the
//! container's while the init is forked, is set back to its own meanwhile.

use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;

use nix::sched::CloneFlags;

use super::plan::MonitorPlan;
use crate::hooks::Stage;
use crate::wire::{words, Answer, Built, Message, WireError};

/// Reads the init's report until it ends (`Built`, or its refusal),
/// running the runtime-namespace hooks whenever the init asks for them; a
/// failing hook makes the report its error. Nothing, or anything else: the
/// init died.
pub(super) fn await_ready(
    ready: OwnedFd,
    start: &OwnedFd,
    plan: &MonitorPlan,
    init_pid: i32,
) -> Result<Answer<Built>, WireError> {
    let mut ready = File::from(ready);
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match ready.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => text.extend_from_slice(&buf[..n]),
        }
        if text == words::RUNTIME_HOOKS {
            text.clear();
            if let Err(e) = run_runtime_stages(plan, init_pid) {
                return Ok(Answer::Refused(e));
            }
            if nix::unistd::write(start, words::HOOKS_RAN).is_err() {
                return Ok(Answer::Refused("the container's init is gone".into()));
            }
        }
    }
    Answer::decode(&String::from_utf8_lossy(&text))
}

/// prestart, then createRuntime, in the runtime's namespaces; `pid` is the
/// init's (as the runtime sees it).
pub(super) fn run_runtime_stages(plan: &MonitorPlan, pid: i32) -> Result<(), String> {
    let Some(hooks) = &plan.hooks else { return Ok(()) };
    if !hooks.has(Stage::Prestart) && !hooks.has(Stage::CreateRuntime) {
        return Ok(());
    }
    let own = File::open("/proc/self/ns/pid").map_err(|e| format!("opening our PID namespace: {e}"))?;
    let children = File::open("/proc/self/ns/pid_for_children").ok();
    nix::sched::setns(&own, CloneFlags::CLONE_NEWPID).map_err(|e| format!("setns(our PID namespace): {e}"))?;
    let ran = [Stage::Prestart, Stage::CreateRuntime].into_iter().try_for_each(|stage| {
        hooks.run(stage, &plan.container_id, "creating", Some(pid), &plan.bundle).map_err(|e| e.to_string())
    });
    if let Some(children) = children {
        // Back to the container's, for whatever the monitor forks later.
        let _ = nix::sched::setns(&children, CloneFlags::CLONE_NEWPID);
    }
    ran
}
