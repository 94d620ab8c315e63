//! UpdatePodSandboxResources: new limits on the pod's cgroup.

use super::*;

impl Sandboxes {
    /// UpdatePodSandboxResources: new limits for a ready pod's cgroup.
    pub(crate) async fn update_resources(&self, id: &str, pod: PodResources) -> Result<(), SandboxError> {
        let (id, entry) = self.entry(id)?;
        let _op = entry.lock_op().await;
        if entry.is_removed() {
            return Err(SandboxError::NotFound(id));
        }
        let (pod_cgroup, owned, ready) = {
            let live = entry.live();
            (
                live.record.pod_cgroup.clone(),
                live.record.owns_pod_cgroup(),
                self.view(&live).state == SandboxState::Ready,
            )
        };
        if !ready {
            return Err(SandboxError::Precondition(format!("sandbox {id} is not ready; its resources cannot change")));
        }
        self.apply_pod_resources(&pod_cgroup, owned, &pod, "resources").await?;
        entry.update_record(&self.paths(&id).record(), |r| r.resources = Some(pod))?;
        tracing::info!(pod_id = %id, "pod resources updated");
        Ok(())
    }
}
