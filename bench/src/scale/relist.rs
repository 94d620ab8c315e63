//! The relist: what kubelet's PLEG asks every second — ListPodSandbox,
//! ListContainers, then PodSandboxStatus and ContainerStatus (not verbose)
//! of one pod that changed (here each round the next pod in turn). Both
//! lists must hold every pod and container the runtime was given; any
//! failure fails the round.

use anyhow::{bail, Result};

use super::rounds::{timed, Calls};
use crate::cri::Cri;
use crate::lifecycle::SleepingPod;

/// One relist; `i` picks the pod whose status is asked.
pub async fn round(cri: &Cri, pods: &[SleepingPod], i: usize) -> Result<Calls> {
    let mut calls = Calls::with_capacity(4);
    let (took, listed_pods) = timed(cri.list_pods()).await;
    calls.push(("ListPodSandbox", took));
    let (took, listed_containers) = timed(cri.list_containers()).await;
    calls.push(("ListContainers", took));
    if let Some(pod) = pods.get(i % pods.len().max(1)) {
        calls.push(("PodSandboxStatus", timed(cri.pod_status(&pod.pod_id)).await.0));
        calls.push(("ContainerStatus", timed(cri.container_status(&pod.container_id)).await.0));
    }
    if let Some((call, Err(e))) = calls.iter().find(|(_, took)| took.is_err()) {
        bail!("{call}: {e}");
    }
    let (pods_listed, containers_listed) =
        (listed_pods.unwrap_or_default().len(), listed_containers.unwrap_or_default().len());
    if pods_listed < pods.len() || containers_listed < pods.len() {
        bail!("listed {pods_listed} pods and {containers_listed} containers of {}", pods.len());
    }
    Ok(calls)
}
