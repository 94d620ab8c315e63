//! ReopenContainerLog: the monitor reopens the log file.

use super::*;

impl Containers {
    pub(crate) async fn reopen_log(&self, id: &str) -> Result<(), ContainerError> {
        let view = self.get(id)?;
        if view.state != ContainerState::Running {
            return Err(ContainerError::Precondition(format!("container {} is not running", view.record.id)));
        }
        let socket = RunFiles::new(&view.paths.run_dir).socket();
        control::call(&socket, Request::ReopenLog, CONTROL_TIMEOUT).await?;
        Ok(())
    }
}
