//! The daemon's start: containers reloaded from their records, interrupted creations undone, orphaned leases released.

use super::*;

impl Containers {
    /// Reloads persisted containers: a live init (same pid, start time, boot)
    /// keeps its container CREATED or RUNNING; a dead one is EXITED with the
    /// exit its monitor recorded. Interrupted creations are undone, and
    /// interrupted checkpoints cleaned up after.
    pub(crate) async fn load(&self) -> Result<(), ContainerError> {
        let dirs = store::RecordDirs::new(&self.config.root, &self.config.state, "containers");
        let ids = dirs.open()?;
        for id in &ids {
            let paths = self.paths(id);
            let mut record: ContainerRecord = match store::read_json(&paths.record()) {
                Ok(Some(record)) => record,
                Ok(None) => {
                    tracing::warn!(container_id = %id, "removing the leftovers of an interrupted container operation");
                    let _ = store::remove_tree(&paths.run_dir);
                    let _ = store::remove_tree(&paths.dir);
                    // Its lease, if any, goes with the orphaned ones below.
                    continue;
                }
                Err(e) => {
                    tracing::error!(container_id = %id, error = %e, "skipping a container whose record cannot be read");
                    continue;
                }
            };
            let files = RunFiles::new(&paths.run_dir);
            if record.lifecycle == Lifecycle::Creating || interrupted_create(&files) {
                tracing::warn!(container_id = %id, "undoing a CreateContainer interrupted by a crash");
                self.tear_down(&record).await?;
                continue;
            }
            if record.started_at_ns.is_none() {
                // Started before the restart: the start time is in the run dir.
                record.started_at_ns = recorded_start(&files);
            }
            let init = store::read_json::<ProcessIdentity>(&files.init())
                .unwrap_or(None)
                .and_then(|identity| identity.open_pidfd().map(|pidfd| InitProcess { identity, pidfd }));
            let running = init.is_some();
            let cgroup_join = store::read_json::<CgroupJoin>(&files.cgroup_join()).unwrap_or(None);
            let slot = name_slot(&record.sandbox_id, &record.name_key);
            let entry = self.index.insert(id, &slot, Live::new(record.clone(), init, cgroup_join));
            self.clean_up_interrupted_checkpoint(id, &paths, &entry).await;
            if running {
                self.watch(id.clone(), entry);
            } else if record.exit.is_none() {
                self.await_exit(&entry).await;
            } else {
                // Exited before the restart, maybe before its poststop hooks ran.
                hooks::poststop_if_pending(&record, &paths).await;
            }
            tracing::info!(container_id = %id, running, "container reloaded");
        }
        for id in dirs.orphaned_run_dirs(&ids) {
            let _ = store::remove_tree(&self.paths(&id).run_dir);
        }
        self.release_orphaned_leases();
        Ok(())
    }

    /// Releases the image leases of containers that are gone: a daemon
    /// killed in RemoveContainer after the container's directory went but
    /// before its lease did would otherwise keep the layers forever.
    pub(super) fn release_orphaned_leases(&self) {
        let holders = match self.images.lease_holders() {
            Ok(holders) => holders,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the image leases");
                return;
            }
        };
        for holder in holders.into_iter().filter(|h| !self.index.contains(h)) {
            match self.images.release(&holder) {
                Ok(()) => {
                    tracing::info!(container_id = %holder, "released the image lease of a container that is gone")
                }
                Err(e) => tracing::warn!(container_id = %holder, error = %e, "cannot release an orphaned image lease"),
            }
        }
    }
}
