//! The stats round: what the summary API and the eviction manager ask every
//! 10 s — ListContainerStats, ListPodSandboxStats and ImageFsInfo. The
//! stats answered must cover every container and pod the runtime was given.
//! A call may fail alone: containerd 1.6 on cgroup v1 finds a pod's cgroup
//! for ListPodSandboxStats from its `cgroup_parent` taken from the root of
//! each hierarchy, but the harness's pods are nested below the harness's
//! own cgroup (runc nests a relative path below its own), so there it
//! cannot; `rounds` leaves such a call out of both runtimes' round times.

use anyhow::{bail, Result};

use super::rounds::{timed, Calls};
use crate::cri::Cri;
use crate::lifecycle::SleepingPod;

pub async fn round(cri: &Cri, pods: &[SleepingPod]) -> Result<Calls> {
    let mut calls = Calls::with_capacity(3);
    let (took, containers) = timed(cri.list_container_stats()).await;
    calls.push(("ListContainerStats", took));
    let (took, pod_stats) = timed(cri.list_pod_stats()).await;
    calls.push(("ListPodSandboxStats", took));
    calls.push(("ImageFsInfo", timed(cri.image_fs_info()).await.0));
    for (what, answered) in [("containers", containers.map(|c| c.len())), ("pods", pod_stats.map(|p| p.len()))] {
        if let Some(count) = answered.filter(|count| *count < pods.len()) {
            bail!("stats of {count} {what} of {}", pods.len());
        }
    }
    Ok(calls)
}
