//! UpdateContainerResources: new limits on the container's cgroup.

use super::*;

impl Containers {
    /// UpdateContainerResources: puts `resources` in force on a created or
    /// running container's cgroup (an in-place pod resize), then records them
    /// and updates the container's OCI spec. oom_score_adj only counts at start.
    pub(crate) async fn update_resources(
        &self,
        id: &str,
        mut resources: api::LinuxContainerResources,
    ) -> Result<(), ContainerError> {
        let (id, entry) = self.entry(id)?;
        let _op = entry.lock_op().await;
        let view = self.view_of(&entry).ok_or_else(|| ContainerError::NotFound(id.clone()))?;
        if view.state == ContainerState::Exited {
            return Err(ContainerError::Precondition(format!(
                "container {id} has exited; its resources cannot change"
            )));
        }
        let oci = crate::resources::to_oci(&resources, self.config.container.pids_limit);
        self.cgroups.check_resources(&oci).map_err(resources_invalid("linux"))?;
        {
            let (cgroups, cgroup, oci) = (self.cgroups.clone(), view.record.cgroup.clone(), oci.clone());
            // systemd: the scope's properties first, then the exact values in the files.
            tokio::task::spawn_blocking(move || {
                if let Some(scopes) = &cgroups.systemd {
                    scopes.update_blocking(&cgroup, &oci)?;
                }
                cgroups.apply(&cgroup, &oci)
            })
            .await
            .map_err(|e| ContainerError::Build(e.to_string()))?
            .map_err(apply_error("linux"))?;
        }
        match store::read_existing_json::<oci_spec::runtime::Spec>(&view.paths.spec()) {
            Ok(mut spec) => {
                if let Some(linux) = spec.linux_mut() {
                    linux.set_resources(Some(oci));
                }
                let json = serde_json::to_vec_pretty(&spec).map_err(|e| ContainerError::Build(e.to_string()))?;
                store::write_atomic_with(&view.paths.spec(), &json, 0o600, store::Durability::Volatile)?;
            }
            Err(e) => tracing::warn!(container_id = %id, error = %e, "cannot update the container's OCI spec"),
        }
        resources.oom_score_adj = view.record.oom_score_adj.map_or(0, |(_, applied)| applied.into());
        entry.update_record(&view.paths.record(), |r| r.resources = Some(resources))?;
        tracing::info!(container_id = %id, "container resources updated");
        Ok(())
    }
}
