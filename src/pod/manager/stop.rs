//! StopPodSandbox: the pod network detached, the pause stopped, the pod's cgroups removed.

use super::*;

impl Sandboxes {
    /// Kills the pause process and releases the pod's mounts; idempotent.
    pub(crate) async fn stop(&self, id: &str) -> Result<(), SandboxError> {
        let (id, entry) = self.entry(id)?;
        let _op = entry.lock_op().await;
        self.stop_locked(&id, &entry).await
    }

    pub(super) async fn stop_locked(&self, id: &str, entry: &Entry) -> Result<(), SandboxError> {
        if entry.is_removed() {
            return Err(SandboxError::NotFound(id.to_string()));
        }
        let (record, pause) = {
            let mut live = entry.live();
            (live.record.clone(), live.pause.take())
        };
        // DEL while the pause still holds the namespace; a failure leaves
        // the pod as it was, for the caller to retry.
        let live_pid = pause.as_ref().filter(|p| !p.pidfd.has_exited()).map(|p| p.identity.pid);
        if let Err(e) = self.network.detach(id, live_pid).await {
            entry.live().pause = pause;
            return Err(e.into());
        }
        if let Some(pause) = pause {
            kill_and_wait(&pause).await;
        }
        let paths = self.paths(id);
        release_mounts(&paths)?;
        self.remove_cgroups(&record).await?;
        remove_file_if_present(&paths.pause())?;
        if record.lifecycle != Lifecycle::Stopped {
            entry.update_record(&paths.record(), |r| r.lifecycle = Lifecycle::Stopped)?;
            tracing::info!(pod_id = %id, "sandbox stopped");
            self.emit(EventKind::Stopped, entry);
        }
        Ok(())
    }

    /// Removes a sandbox's cgroup and the container cgroup made ahead for
    /// it if no container took it; one that cannot go now is retried later.
    /// The pod cgroup goes too when nidus named it (`<default parent>/<pod
    /// id>`), never when it is a `cgroup_parent` the client gave.
    pub(super) async fn remove_cgroups(&self, record: &SandboxRecord) -> Result<(), SandboxError> {
        let (owned, aheads) = (self.owned_cgroups.clone(), self.ahead.clone());
        let (ahead, pause) = (ahead::path(&record.pod_cgroup, &record.id).ok(), record.pause_cgroup.clone());
        let own_pod_cgroup = record.owns_pod_cgroup().then(|| record.pod_cgroup.clone());
        let scopes = self.cgroups.systemd.clone();
        tokio::task::spawn_blocking(move || {
            if let Some(ahead) = ahead {
                aheads.discard(&ahead);
            }
            owned.remove(&pause);
            if let Some(pod_cgroup) = &own_pod_cgroup {
                owned.remove(pod_cgroup);
            }
            // systemd: the emptied scope (usually unloaded already) and
            // nidus's own slice are stopped, so no unit stays behind.
            if let Some(scopes) = &scopes {
                for path in std::iter::once(&pause).chain(own_pod_cgroup.as_ref()) {
                    if let Err(e) = scopes.stop_blocking(path) {
                        tracing::warn!(cgroup = %path, error = %e, "cannot stop the systemd unit");
                    }
                }
            }
        })
        .await
        .map_err(|e| io_err("cgroup removal task")(io::Error::other(e)))?;
        Ok(())
    }
}
