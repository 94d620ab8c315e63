//! ExecSync, and the launches streaming Exec and Attach use.

use super::*;

impl Containers {
    pub(crate) async fn exec_sync(
        &self,
        id: &str,
        argv: Vec<String>,
        timeout: Option<Duration>,
    ) -> Result<ExecOutput, ContainerError> {
        let (_, request) = self.exec_request(id, argv)?;
        Ok(exec::exec_sync(self.monitors.binary(), &request, timeout, &self.reaper).await?)
    }

    /// What the exec helper needs to run `argv` in the running container `id`
    /// (and the container's full id).
    pub(super) fn exec_request(&self, id: &str, argv: Vec<String>) -> Result<(String, ExecRequest), ContainerError> {
        let view = self.get(id)?;
        let init = view
            .init
            .filter(|_| view.state == ContainerState::Running)
            .ok_or_else(|| ContainerError::Precondition(format!("container {} is not running", view.record.id)))?;
        let request = ExecRequest {
            bundle: view.paths.dir.clone(),
            init,
            cgroup_procs: self.cgroups.procs_files(&view.record.cgroup),
            argv,
            tty: false,
        };
        Ok((view.record.id.clone(), request))
    }

    /// Exec (streaming): checks the container runs and captures what the
    /// command's start needs, for when the client connects.
    pub(crate) fn prepare_exec(
        &self,
        id: &str,
        argv: Vec<String>,
    ) -> Result<crate::container::exec_stream::ExecLaunch, ContainerError> {
        let (container_id, request) = self.exec_request(id, argv)?;
        Ok(crate::container::exec_stream::ExecLaunch {
            container_id,
            helper: self.monitors.binary().to_path_buf(),
            request,
            reaper: self.reaper.clone(),
        })
    }

    /// Attach: checks the container runs and names its monitor's socket and
    /// the stdio it was created with.
    pub(crate) fn prepare_attach(&self, id: &str) -> Result<crate::streaming::attach::AttachLaunch, ContainerError> {
        let view = self.get(id)?;
        if view.state != ContainerState::Running {
            return Err(ContainerError::Precondition(format!("container {} is not running", view.record.id)));
        }
        let config = &view.record.config;
        Ok(crate::streaming::attach::AttachLaunch {
            container_id: view.record.id.clone(),
            socket: RunFiles::new(&view.paths.run_dir).socket(),
            tty: config.tty,
            stdin: config.stdin,
            stdin_once: config.stdin_once,
        })
    }
}
