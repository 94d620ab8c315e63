//! StartContainer: the monitor starts the init, which execs the container's process.

use super::*;

impl Containers {
    pub(crate) async fn start(&self, id: &str) -> Result<(), ContainerError> {
        let (id, entry) = self.entry(id)?;
        let _op = entry.lock_op().await;
        let view = self.view_of(&entry).ok_or_else(|| ContainerError::NotFound(id.clone()))?;
        if view.state != ContainerState::Created {
            return Err(ContainerError::Precondition(format!(
                "container {id} is {}, not created",
                format!("{:?}", view.state).to_lowercase()
            )));
        }
        let files = RunFiles::new(&view.paths.run_dir);
        let result = control::call(&files.socket(), Request::Start, CONTROL_TIMEOUT).await;
        match result {
            Ok(()) => {
                // The start time stays in the run dir (started.json, the
                // monitor's) and in memory: like the init's pid it is a fact
                // of this boot, folded into the durable record with the exit.
                Arc::make_mut(&mut entry.live().record).started_at_ns =
                    Some(recorded_start(&files).unwrap_or_else(now_ns));
                tracing::info!(container_id = %id, "container started");
                self.emit(EventKind::Started, &entry);
                self.run_poststart(&view.record, view.init.as_ref().map(|i| i.pid)).await;
                Ok(())
            }
            Err(ControlError::Refused(why)) => {
                // The init exits after a failed execve: wait for its exit record.
                self.await_exit(&entry).await;
                tracing::warn!(container_id = %id, error = %why, "container start failed");
                Err(ContainerError::Start(why))
            }
            Err(e) => Err(e.into()),
        }
    }
}
