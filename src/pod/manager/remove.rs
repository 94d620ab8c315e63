//! RemovePodSandbox: every trace of the pod; tear-down from the record, also for the restart path.

use super::*;

impl Sandboxes {
    /// Stops the sandbox if needed and removes every trace of it. Removing an
    /// unknown sandbox succeeds (it may have been removed already).
    pub(crate) async fn remove(&self, id: &str) -> Result<(), SandboxError> {
        let (id, entry) = match self.entry(id) {
            Ok(found) => found,
            Err(SandboxError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let _op = entry.lock_op().await;
        if entry.is_removed() {
            return Ok(());
        }
        self.stop_locked(&id, &entry).await?;
        let record = entry.live().record.clone();
        self.tear_down(&record, None, true).await?;
        let last = self.events.wanted().then(|| self.view(&entry.live()));
        self.index.remove(&id);
        tracing::info!(pod_id = %id, "sandbox removed");
        self.events.emit(EventKind::Deleted, || last);
        Ok(())
    }

    /// Undoes whatever exists of a sandbox: pause, mounts, cgroups and, when
    /// `remove_dirs`, its directories (the record first, so a crash half-way
    /// leaves a directory without record, which the next start removes).
    pub(super) async fn tear_down(
        &self,
        record: &SandboxRecord,
        pause: Option<&ProcessIdentity>,
        remove_dirs: bool,
    ) -> Result<(), SandboxError> {
        let pidfd = pause.and_then(ProcessIdentity::open_pidfd);
        let live_pid = pause.filter(|_| pidfd.as_ref().is_some_and(|p| !p.has_exited())).map(|p| p.pid);
        self.network.detach(&record.id, live_pid).await?;
        if let Some(pidfd) = pidfd {
            let _ = pidfd.send_signal(libc::SIGKILL);
            let _ = tokio::time::timeout(PAUSE_EXIT_TIMEOUT, pidfd.exited()).await;
        }
        let paths = self.paths(&record.id);
        release_mounts(&paths)?;
        self.remove_cgroups(record).await?;
        self.owned_cgroups.prune_above(&record.pause_cgroup);
        self.owned_cgroups.prune_above(&record.pod_cgroup);
        if remove_dirs {
            store::remove_tree(&paths.run_dir).map_err(io_err(format!("cannot remove {}", paths.run_dir.display())))?;
            remove_file_if_present(&paths.record())?;
            store::remove_tree(&paths.dir).map_err(io_err(format!("cannot remove {}", paths.dir.display())))?;
        }
        Ok(())
    }
}
