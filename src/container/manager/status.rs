//! ContainerStatus and ListContainers: a container's view, from memory and its run directory.

use super::*;

impl Containers {
    pub(crate) fn get(&self, id: &str) -> Result<ContainerView, ContainerError> {
        let (id, entry) = self.entry(id)?;
        self.view_of(&entry).ok_or(ContainerError::NotFound(id))
    }

    /// Whether `id` (a full id) is a container's here, without building its view.
    pub(crate) fn knows(&self, id: &str) -> bool {
        self.index.contains(id)
    }

    pub(crate) fn list(&self) -> Vec<ContainerView> {
        let mut views: Vec<ContainerView> = self.index.entries().iter().filter_map(|e| self.view_of(e)).collect();
        views.sort_by_key(|v| v.record.created_at_ns);
        views
    }

    /// Views of one sandbox's containers, oldest first. Only theirs are
    /// built: a pod's status costs the same on a full node as on an empty one.
    pub(crate) fn of_sandbox(&self, sandbox_id: &str) -> Vec<ContainerView> {
        let mut views: Vec<ContainerView> = self
            .index
            .entries()
            .iter()
            .filter(|e| e.live().record.sandbox_id == sandbox_id)
            .filter_map(|e| self.view_of(e))
            .collect();
        views.sort_by_key(|v| v.record.created_at_ns);
        views
    }

    /// Ids of the containers of one sandbox, oldest first (read from the
    /// entries: no view, so no status check or exit record, is built).
    pub(crate) fn in_sandbox(&self, sandbox_id: &str) -> Vec<String> {
        let mut ids: Vec<(i64, String)> = self
            .index
            .entries()
            .iter()
            .filter(|e| !e.is_removed())
            .map(|e| e.live())
            .filter(|live| live.record.sandbox_id == sandbox_id)
            .map(|live| (live.record.created_at_ns, live.record.id.clone()))
            .collect();
        ids.sort();
        ids.into_iter().map(|(_, id)| id).collect()
    }

    pub(super) fn view_of(&self, entry: &Entry) -> Option<ContainerView> {
        if entry.is_removed() {
            return None;
        }
        let mut live = entry.live();
        let paths = self.paths(&live.record.id);
        let files = RunFiles::new(&paths.run_dir);
        let alive = live.init.as_ref().is_some_and(|i| !i.pidfd.has_exited());
        if !alive && live.exit.is_none() {
            // Dead: its monitor writes the record within moments of the exit.
            if let Ok(Some(exit)) = store::read_json::<ExitRecord>(&files.exit()) {
                live.exit = Some(exit);
            }
        }
        let started_at_ns = live.record.started_at_ns.or_else(|| recorded_start(&files));
        let state = match (&live.exit, alive, started_at_ns) {
            (Some(_), _, _) => ContainerState::Exited,
            (None, true, Some(_)) => ContainerState::Running,
            (None, true, None) => ContainerState::Created,
            // Dead without a record yet: still running as far as anyone can tell
            // for a moment, unless its monitor is gone too (then it is lost).
            (None, false, _) => {
                let monitor: Option<ProcessIdentity> = store::read_json(&files.monitor()).unwrap_or(None);
                if monitor.is_some_and(|m| m.is_running()) {
                    if started_at_ns.is_some() {
                        ContainerState::Running
                    } else {
                        ContainerState::Created
                    }
                } else {
                    // The monitor writes the record before it ends: read
                    // again, since it may have done both since the first look.
                    let recorded = store::read_json::<ExitRecord>(&files.exit()).ok().flatten();
                    live.exit = Some(recorded.unwrap_or_else(lost_exit));
                    ContainerState::Exited
                }
            }
        };
        Some(ContainerView {
            record: live.record.clone(),
            state,
            started_at_ns,
            exit: live.exit.clone(),
            init: live.init.as_ref().filter(|_| alive).map(|i| i.identity.clone()),
            cgroup_join: live.cgroup_join,
            paths,
        })
    }
}
