//! The daemon's start: pods reloaded from their records, their pause checked, half-made pods undone.

use super::*;

impl Sandboxes {
    /// Reloads persisted sandboxes and reconciles them with what is alive:
    /// a live pause (same pid, start time and boot) keeps its sandbox READY;
    /// otherwise it is NOTREADY. Interrupted creations are undone.
    pub(crate) async fn load(&self) -> Result<(), SandboxError> {
        let dirs = store::RecordDirs::new(&self.config.root, &self.config.state, "sandboxes");
        let ids = dirs.open()?;
        for id in &ids {
            let paths = self.paths(id);
            let record: SandboxRecord = match store::read_json(&paths.record()) {
                Ok(Some(record)) => record,
                Ok(None) => {
                    tracing::warn!(pod_id = %id, "removing the leftovers of an interrupted sandbox operation");
                    release_mounts(&paths)?;
                    let _ = store::remove_tree(&paths.run_dir);
                    let _ = store::remove_tree(&paths.dir);
                    continue;
                }
                Err(e) => {
                    tracing::error!(pod_id = %id, error = %e, "skipping a sandbox whose record cannot be read");
                    continue;
                }
            };
            let pause_identity: Option<ProcessIdentity> = store::read_json(&paths.pause()).unwrap_or_else(|e| {
                tracing::warn!(pod_id = %id, error = %e, "unreadable pause record; treating the pause as gone");
                None
            });
            if record.lifecycle == Lifecycle::Creating {
                tracing::warn!(pod_id = %id, "undoing a RunPodSandbox interrupted by a crash");
                self.tear_down(&record, pause_identity.as_ref(), true).await?;
                continue;
            }
            let pause = match (record.lifecycle, pause_identity) {
                (Lifecycle::Created, Some(identity)) => {
                    identity.open_pidfd().map(|pidfd| PauseProcess { identity, pidfd })
                }
                _ => None,
            };
            tracing::info!(pod_id = %id, ready = pause.is_some(), lifecycle = ?record.lifecycle, "sandbox reloaded");
            if let Some(pause) = &pause {
                self.network.resume(id, pause.identity.pid).await;
            }
            let name = record.name_key.clone();
            self.index.insert(id, &name, Live::new(record, pause));
        }
        // Pod networks whose sandbox no longer exists.
        self.network.sweep(&ids).await;
        // Volatile directories whose sandbox no longer exists.
        for id in dirs.orphaned_run_dirs(&ids) {
            let paths = self.paths(&id);
            release_mounts(&paths)?;
            let _ = store::remove_tree(&paths.run_dir);
        }
        Ok(())
    }
}
