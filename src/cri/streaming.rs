//! Exec, Attach and PortForward, CRI side: the request is checked (the container
//! runs, the pod is ready, a sensible set of streams) and the answer is the
//! URL of a streaming session that holds what the session needs.

use tonic::Status;

use super::errors::invalid;
use super::validate;
use crate::api::{AttachRequest, AttachResponse, ExecRequest, ExecResponse, PortForwardRequest, PortForwardResponse};
use crate::cri::Daemon;
use crate::pod::SandboxState;
use crate::streaming::portforward::PodNetwork;
use crate::streaming::runtime::ExecStdio;

pub(crate) fn exec(daemon: &Daemon, request: ExecRequest) -> Result<ExecResponse, Status> {
    let id = validate::id("container_id", &request.container_id)?;
    validate::exec_command(&request.cmd)?;
    let stdio = streams(request.stdin, request.stdout, request.stderr, request.tty)?;
    let launch = daemon.containers.prepare_exec(id, request.cmd)?;
    tracing::debug!(container_id = %launch.container_id, tty = stdio.tty, "exec session prepared");
    Ok(ExecResponse { url: daemon.streaming.exec_url(Box::new(launch), stdio).map_err(full)? })
}

pub(crate) fn attach(daemon: &Daemon, request: AttachRequest) -> Result<AttachResponse, Status> {
    let id = validate::id("container_id", &request.container_id)?;
    let stdio = streams(request.stdin, request.stdout, request.stderr, request.tty)?;
    let launch = daemon.containers.prepare_attach(id)?;
    if request.stdin && !launch.stdin {
        return Err(invalid("stdin", "the container was not created with stdin"));
    }
    Ok(AttachResponse { url: daemon.streaming.attach_url(launch, stdio).map_err(full)? })
}

fn full(e: crate::streaming::tokens::Full) -> Status {
    Status::resource_exhausted(e.to_string())
}

/// The streams an Exec or Attach asks for: at least one, and no stderr with
/// a terminal (as Kubernetes: a terminal merges stderr into stdout).
fn streams(stdin: bool, stdout: bool, stderr: bool, tty: bool) -> Result<ExecStdio, Status> {
    if tty && stderr {
        return Err(invalid("stderr", "tty and stderr cannot both be true"));
    }
    if !(stdin || stdout || stderr) {
        return Err(invalid("stdin, stdout, stderr", "one of them must be true"));
    }
    Ok(ExecStdio { stdin, stdout, stderr, tty })
}

pub(crate) fn port_forward(daemon: &Daemon, request: PortForwardRequest) -> Result<PortForwardResponse, Status> {
    let id = validate::id("pod_sandbox_id", &request.pod_sandbox_id)?;
    if let Some(port) = request.port.iter().find(|p| !(1..=65535).contains(*p)) {
        return Err(invalid("port", format!("{port} is not a TCP port (1 to 65535)")));
    }
    let view = daemon.sandboxes.get(id)?;
    let pause = view
        .pause
        .filter(|_| view.state == SandboxState::Ready)
        .ok_or_else(|| Status::failed_precondition(format!("pod sandbox {} is not ready", view.record.id)))?;
    let path = format!("/proc/{}/ns/net", pause.pid);
    let netns = std::fs::File::open(&path)
        .map_err(|e| Status::failed_precondition(format!("pod sandbox {} is not running: {e}", view.record.id)))?;
    // Opened before this check: the namespace is the pause's, not a successor's.
    if !pause.is_running() {
        return Err(Status::failed_precondition(format!("pod sandbox {} is not running", view.record.id)));
    }
    let url = daemon.streaming.port_forward_url(PodNetwork { pod_id: view.record.id.clone(), netns }).map_err(full)?;
    Ok(PortForwardResponse { url })
}
