//! One pod's life through the CRI, timed step by step — the same calls, in
//! the same order, for every runtime — and the plain "pod with one sleeping
//! container" the memory and density phases start by the hundred.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::cri::{container_config, pod_config, Cri, PodNetwork};

/// A timed step; `key` is its name in `latest.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    RunPodSandbox,
    CreateContainer,
    StartContainer,
    ContainerStatus,
    ExecSync,
    StopContainer,
    StopContainerIgnoringTerm,
    RemoveContainer,
    StopPodSandbox,
    RemovePodSandbox,
    PodAndContainer,
    FirstLogLine,
    /// CreateContainer + StartContainer of one container (a target of the issue).
    CreateAndStart,
}

impl Step {
    /// The steps `latest.json` reports, in table order.
    pub const REPORTED: [Step; 12] = [
        Step::RunPodSandbox,
        Step::CreateContainer,
        Step::StartContainer,
        Step::ContainerStatus,
        Step::ExecSync,
        Step::StopContainer,
        Step::StopContainerIgnoringTerm,
        Step::RemoveContainer,
        Step::StopPodSandbox,
        Step::RemovePodSandbox,
        Step::PodAndContainer,
        Step::FirstLogLine,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Step::RunPodSandbox => "run_pod_sandbox",
            Step::CreateContainer => "create_container",
            Step::StartContainer => "start_container",
            Step::ContainerStatus => "container_status",
            Step::ExecSync => "exec_sync",
            Step::StopContainer => "stop_container",
            Step::StopContainerIgnoringTerm => "stop_container_ignoring_term",
            Step::RemoveContainer => "remove_container",
            Step::StopPodSandbox => "stop_pod_sandbox",
            Step::RemovePodSandbox => "remove_pod_sandbox",
            Step::PodAndContainer => "pod_and_container",
            Step::FirstLogLine => "first_log_line",
            Step::CreateAndStart => "create_and_start",
        }
    }
}

/// What a lifecycle needs of a runtime; cheap to clone into tasks.
#[derive(Clone)]
pub struct Target {
    pub cri: Cri,
    /// Pod log directories go below this.
    pub logs: PathBuf,
    pub image: &'static str,
    /// How its pods' `cgroup_parent` is written (see `Runtime::pod_cgroup_parent`).
    pub cgroup_parent: crate::cri::PodCgroupParent,
}

/// Sets a handler, prints one line, then exits 0 on SIGTERM (`wait` returns
/// at once when the handler runs). The line comes after the trap: the shell is
/// PID 1 of its PID namespace, where a TERM that comes before a handler is
/// dropped, and the stop is sent only after the line was seen.
const TERM_EXITING: &[&str] = &["sh", "-c", "trap 'exit 0' TERM; echo ready; sleep 3600 & wait"];
/// PID 1 of its PID namespace without a handler: SIGTERM is ignored.
const TERM_IGNORING: &[&str] = &["sleep", "3600"];
const SLEEPING: &[&str] = &["sleep", "36000"];

/// How long the first log line may take before the iteration fails.
const LOG_LIMIT: Duration = Duration::from_secs(20);

/// Runs one pod through every timed step; on failure the pod is removed.
pub async fn timed_lifecycle(target: &Target, name: &str, network: PodNetwork) -> Result<Vec<(Step, Duration)>> {
    let log_dir = pod_log_dir(target, name)?;
    let pod = pod_config(name, &log_dir, network, &target.cgroup_parent);
    make_pod_slice(&pod).await.with_context(|| format!("pod {name}"))?;
    let mut pod_id = None;
    let result = timed_steps(target, &pod, &log_dir, &mut pod_id).await;
    if result.is_err() {
        if let Some(id) = pod_id {
            let _ = target.cri.stop_pod(&id).await;
            let _ = target.cri.remove_pod(&id).await;
        }
    }
    result.with_context(|| format!("pod {name}"))
}

async fn timed_steps(
    target: &Target,
    pod: &nidus::api::PodSandboxConfig,
    log_dir: &Path,
    pod_id_out: &mut Option<String>,
) -> Result<Vec<(Step, Duration)>> {
    let cri = &target.cri;
    let mut times = Vec::with_capacity(14);
    let started = Instant::now();
    let pod_id = cri.run_pod(pod).await?;
    times.push((Step::RunPodSandbox, started.elapsed()));
    *pod_id_out = Some(pod_id.clone());

    let term_exiting = crate::cri::as_kubelet_for(pod, container_config("work", target.image, TERM_EXITING));
    let t = Instant::now();
    let work = cri.create_container(&pod_id, pod, &term_exiting).await?;
    times.push((Step::CreateContainer, t.elapsed()));
    let start_sent = Instant::now();
    cri.start_container(&work).await?;
    let now = Instant::now();
    times.push((Step::StartContainer, now - start_sent));
    times.push((Step::CreateAndStart, now - t));
    times.push((Step::PodAndContainer, now - started));
    let log_file = log_dir.join("work/0.log");
    times.push((Step::FirstLogLine, wait_first_line(log_file, start_sent).await?));

    let t = Instant::now();
    let status = cri.container_status(&work).await?;
    times.push((Step::ContainerStatus, t.elapsed()));
    if status.state() != nidus::api::ContainerState::ContainerRunning {
        bail!("container not running after StartContainer: {:?}", status.state());
    }

    let t = Instant::now();
    let exec = cri.exec_sync(&work, &["true"]).await?;
    times.push((Step::ExecSync, t.elapsed()));
    if exec.exit_code != 0 {
        bail!("ExecSync true exited {}: {}", exec.exit_code, String::from_utf8_lossy(&exec.stderr));
    }

    let t = Instant::now();
    cri.stop_container(&work, 10).await?;
    times.push((Step::StopContainer, t.elapsed()));
    let stopped = cri.container_status(&work).await?;
    if stopped.exit_code != 0 {
        bail!("the TERM-exiting container exited {} (reason {:?}), not 0", stopped.exit_code, stopped.reason);
    }

    let t = Instant::now();
    cri.remove_container(&work).await?;
    times.push((Step::RemoveContainer, t.elapsed()));

    let term_ignoring = crate::cri::as_kubelet_for(pod, container_config("stubborn", target.image, TERM_IGNORING));
    let stubborn = cri.create_container(&pod_id, pod, &term_ignoring).await?;
    cri.start_container(&stubborn).await?;
    let t = Instant::now();
    cri.stop_container(&stubborn, 0).await?;
    times.push((Step::StopContainerIgnoringTerm, t.elapsed()));
    cri.remove_container(&stubborn).await?;

    let t = Instant::now();
    cri.stop_pod(&pod_id).await?;
    times.push((Step::StopPodSandbox, t.elapsed()));
    let t = Instant::now();
    cri.remove_pod(&pod_id).await?;
    times.push((Step::RemovePodSandbox, t.elapsed()));
    *pod_id_out = None;
    Ok(times)
}

/// Time from `since` until `path` holds a complete line, polled every 100 µs
/// on a blocking thread (the async timer's granularity is a millisecond).
async fn wait_first_line(path: PathBuf, since: Instant) -> Result<Duration> {
    tokio::task::spawn_blocking(move || loop {
        if let Ok(text) = fs::read(&path) {
            if text.contains(&b'\n') {
                return Ok(since.elapsed());
            }
        }
        if since.elapsed() > LOG_LIMIT {
            return Err(anyhow!("no log line in {} within {}s", path.display(), LOG_LIMIT.as_secs()));
        }
        std::thread::sleep(Duration::from_micros(100));
    })
    .await
    .context("log watcher")?
}

/// Makes the pod's log directory and its containers' (kubelet's part).
fn pod_log_dir(target: &Target, name: &str) -> Result<PathBuf> {
    let dir = target.logs.join(name);
    for sub in ["work", "stubborn", "sleep"] {
        fs::create_dir_all(dir.join(sub)).with_context(|| format!("creating {}", dir.display()))?;
    }
    Ok(dir)
}

/// A running pod with one sleeping container.
#[derive(Debug, Clone)]
pub struct SleepingPod {
    pub pod_id: String,
    pub container_id: String,
}

/// Starts a pod with one `sleep` container; on failure the pod is removed.
pub async fn start_sleeping_pod(target: &Target, name: &str) -> Result<SleepingPod> {
    let log_dir = pod_log_dir(target, name)?;
    let pod = pod_config(name, &log_dir, PodNetwork::Node, &target.cgroup_parent);
    make_pod_slice(&pod).await.with_context(|| format!("pod {name}"))?;
    let pod_id = target.cri.run_pod(&pod).await.with_context(|| format!("pod {name}"))?;
    let made = async {
        let id = target.cri.create_container(&pod_id, &pod, &container_config("sleep", target.image, SLEEPING)).await?;
        target.cri.start_container(&id).await?;
        Ok::<_, anyhow::Error>(id)
    }
    .await;
    match made {
        Ok(container_id) => Ok(SleepingPod { pod_id, container_id }),
        Err(e) => {
            let _ = remove_pod(target, &pod_id).await;
            Err(e.context(format!("pod {name}")))
        }
    }
}

/// How long systemd may take to make a pod's slice.
const SLICE_LIMIT: Duration = Duration::from_secs(10);

/// With the systemd driver, kubelet makes the pod's slice (a transient
/// unit, over D-Bus) before RunPodSandbox, and stops it once the pod is
/// removed: the harness does the same, untimed (`busctl`, systemd's own
/// client), so that the runtimes' figures do not include it. The leak check
/// stops the empty slices (see `leaks`). Nothing for a cgroupfs parent.
async fn make_pod_slice(pod: &nidus::api::PodSandboxConfig) -> Result<()> {
    let parent = pod.linux.as_ref().map(|l| l.cgroup_parent.as_str()).unwrap_or_default();
    let Some(prefix) = parent.strip_suffix(".slice").and_then(|name| name.rsplit_once("-pod")).map(|(p, _)| p) else {
        return Ok(());
    };
    let dir = PathBuf::from(format!("/sys/fs/cgroup/{prefix}.slice/{parent}"));
    let name = parent.to_string();
    // Off the harness's thread: concurrent lifecycles go on meanwhile.
    tokio::task::spawn_blocking(move || {
        crate::host::run(
            "busctl",
            &[
                "call",
                "org.freedesktop.systemd1",
                "/org/freedesktop/systemd1",
                "org.freedesktop.systemd1.Manager",
                "StartTransientUnit",
                "ssa(sv)a(sa(sv))",
                &name,
                "fail",
                "1",
                "DefaultDependencies",
                "b",
                "false",
                "0",
            ],
        )
    })
    .await?
    .with_context(|| format!("making the pod slice {parent}"))?;
    let began = Instant::now();
    while !dir.is_dir() {
        if began.elapsed() > SLICE_LIMIT {
            bail!("systemd did not make {} within {SLICE_LIMIT:?}", dir.display());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

/// StopPodSandbox then RemovePodSandbox (which removes its containers), as
/// kubelet ends a pod.
pub async fn remove_pod(target: &Target, pod_id: &str) -> Result<()> {
    target.cri.stop_pod(pod_id).await?;
    target.cri.remove_pod(pod_id).await
}
