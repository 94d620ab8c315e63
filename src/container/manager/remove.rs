//! RemoveContainer: kill if needed, then every trace of the container; tear-down from the record, also for the restart path.

use super::*;

impl Containers {
    /// Kills the container if needed and removes every trace of it; removing
    /// an unknown container succeeds.
    pub(crate) async fn remove(&self, id: &str) -> Result<(), ContainerError> {
        let (id, entry) = match self.entry(id) {
            Ok(found) => found,
            Err(ContainerError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let _op = entry.lock_op().await;
        if entry.is_removed() {
            return Ok(());
        }
        self.stop_locked(&id, &entry, Duration::ZERO).await?;
        let record = entry.live().record.clone();
        let last = self.events.wanted().then(|| self.view_of(&entry)).flatten();
        self.tear_down(&record).await?;
        self.index.remove(&id);
        tracing::info!(container_id = %id, "container removed");
        self.events.emit(EventKind::Deleted, || last);
        Ok(())
    }

    /// Removes whatever exists of a container: processes, cgroup, image
    /// lease, directories (the record first, so a crash half-way leaves a
    /// directory without record, which the next start removes).
    pub(super) async fn tear_down(&self, record: &ContainerRecord) -> Result<(), ContainerError> {
        let paths = self.paths(&record.id);
        self.kill_all(&record.cgroup).await;
        let monitor: Option<ProcessIdentity> =
            store::read_json(&RunFiles::new(&paths.run_dir).monitor()).unwrap_or(None);
        if let Some(pidfd) = monitor.and_then(|m| m.open_pidfd()) {
            let _ = tokio::time::timeout(EXIT_RECORD_WAIT, pidfd.exited()).await;
        }
        self.remove_cgroup(&record.cgroup).await.map_err(|e| ContainerError::Build(e.to_string()))?;
        store::remove_tree(&paths.run_dir).map_err(io_err(format!("cannot remove {}", paths.run_dir.display())))?;
        match std::fs::remove_file(paths.record()) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(io_err("cannot remove the container record")(e))
            }
            _ => {}
        }
        store::remove_tree(&paths.dir).map_err(io_err(format!("cannot remove {}", paths.dir.display())))?;
        let (images, holder) = (self.images.clone(), record.id.clone());
        tokio::task::spawn_blocking(move || images.release(&holder))
            .await
            .map_err(|e| ContainerError::Build(e.to_string()))??;
        Ok(())
    }
}

impl Containers {
    /// Removes a container's cgroup (what still runs there is killed; one
    /// that cannot go now is retried later) and the parents nidus made for
    /// it; with systemd its scope is stopped too (usually unloaded already,
    /// once empty), so no unit stays behind.
    pub(super) async fn remove_cgroup(&self, cgroup: &CgroupPath) -> Result<(), tokio::task::JoinError> {
        let (owned, scopes, cgroup) = (self.owned_cgroups.clone(), self.cgroups.systemd.clone(), cgroup.clone());
        tokio::task::spawn_blocking(move || {
            owned.remove(&cgroup);
            owned.prune_above(&cgroup);
            if let Some(scopes) = scopes {
                if let Err(e) = scopes.stop_blocking(&cgroup) {
                    tracing::warn!(cgroup = %cgroup, error = %e, "cannot stop the container's scope");
                }
            }
        })
        .await
    }
}
