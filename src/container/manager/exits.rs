//! A container's exit: awaited after a stop or a failed start, watched while it runs, and kept in its record.

use super::*;

impl Containers {
    /// Waits (briefly) for the monitor's exit record of a dead init, and keeps it.
    pub(super) async fn await_exit(&self, entry: &Entry) {
        let (id, run_dir, already) = {
            let live = entry.live();
            (
                live.record.id.clone(),
                self.paths(&live.record.id).run_dir,
                live.exit.is_some() && live.record.exit.is_some(),
            )
        };
        if !already {
            let exit = recorded_exit(&run_dir).await;
            {
                let mut live = entry.live();
                live.exit = Some(exit.clone());
                live.init = None;
            }
            if exit.reason == OOM_KILLED_REASON {
                self.metrics.oom_killed();
            }
            if let Err(e) = entry.update_record(&self.paths(&id).record(), |r| r.exit = Some(exit)) {
                tracing::warn!(container_id = %id, error = %e, "cannot record the container's exit");
            }
            self.emit(EventKind::Stopped, entry);
        }
        let record = entry.live().record.clone();
        hooks::poststop_if_pending(&record, &self.paths(&id)).await;
    }

    /// Keeps the exit of a container that ends on its own.
    pub(super) fn watch(&self, id: String, entry: Arc<Entry>) {
        let waiter = self.init_exit_waiter(&entry);
        let this = WatchHandle { entry, id };
        let run_dir = self.paths(&this.id).run_dir;
        let paths = self.paths(&this.id);
        let record_path = paths.record();
        let events = self.events.clone();
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            waiter.await;
            // Let an operation that already handles the exit finish first.
            let _op = this.entry.lock_op().await;
            if this.entry.is_removed() {
                return;
            }
            let exit = recorded_exit(&run_dir).await;
            if exit.reason == OOM_KILLED_REASON {
                metrics.oom_killed();
            }
            let (record, cgroup_join) = {
                let mut live = this.entry.live();
                if live.record.exit.is_some() {
                    return;
                }
                live.exit = Some(exit.clone());
                Arc::make_mut(&mut live.record).exit = Some(exit);
                (live.record.clone(), live.cgroup_join)
            };
            if let Err(e) = store::write_json(&record_path, &*record) {
                tracing::warn!(container_id = %this.id, error = %e, "cannot record the container's exit");
            }
            tracing::info!(container_id = %this.id, exit_code = record.exit.as_ref().map(|e| e.exit_code), "container exited");
            events.emit(EventKind::Stopped, || {
                Some(ContainerView {
                    record: record.clone(),
                    state: ContainerState::Exited,
                    started_at_ns: record.started_at_ns,
                    exit: record.exit.clone(),
                    init: None,
                    cgroup_join,
                    paths: paths.clone(),
                })
            });
            hooks::poststop_if_pending(&record, &paths).await;
        });
    }
}
