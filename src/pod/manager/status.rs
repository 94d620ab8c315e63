//! PodSandboxStatus and ListPodSandbox: a pod's view, and the events a pod reports.

use super::*;

impl Sandboxes {
    pub(crate) fn get(&self, id: &str) -> Result<SandboxView, SandboxError> {
        let (id, entry) = self.entry(id)?;
        if entry.is_removed() {
            return Err(SandboxError::NotFound(id));
        }
        let view = self.view(&entry.live());
        Ok(view)
    }

    /// Whether `id` (a full id) is a pod's here, without building its view.
    pub(crate) fn knows(&self, id: &str) -> bool {
        self.index.contains(id)
    }

    pub(crate) fn list(&self) -> Vec<SandboxView> {
        let mut views: Vec<SandboxView> =
            self.index.entries().iter().filter(|e| !e.is_removed()).map(|e| self.view(&e.live())).collect();
        views.sort_by_key(|v| v.record.created_at_ns);
        views
    }

    /// Reports `kind` with the sandbox as it is now.
    pub(super) fn emit(&self, kind: EventKind, entry: &Entry) {
        self.events.emit(kind, || (!entry.is_removed()).then(|| self.view(&entry.live())));
    }

    pub(super) fn view(&self, live: &Live) -> SandboxView {
        let running = live.pause.as_ref().filter(|p| !p.pidfd.has_exited());
        let state = if live.record.lifecycle == Lifecycle::Created && running.is_some() {
            SandboxState::Ready
        } else {
            SandboxState::NotReady
        };
        SandboxView {
            record: live.record.clone(),
            state,
            pause: running.map(|p| p.identity.clone()),
            paths: self.paths(&live.record.id),
            ips: self.network.ips(&live.record.id),
        }
    }
}
