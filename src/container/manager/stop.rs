//! StopContainer: the stop signal, the grace period, then SIGKILL of everything in the container's cgroup.

use super::*;

impl Containers {
    /// Sends the stop signal, waits `timeout`, then kills everything in the
    /// container; returns once it is dead and its exit is recorded.
    /// Idempotent, as the CRI has it: a container that is unknown, or
    /// removed meanwhile, is already stopped.
    pub(crate) async fn stop(&self, id: &str, timeout: Duration) -> Result<(), ContainerError> {
        let (id, entry) = match self.entry(id) {
            Ok(found) => found,
            Err(ContainerError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let _op = entry.lock_op().await;
        match self.stop_locked(&id, &entry, timeout).await {
            Err(ContainerError::NotFound(_)) => Ok(()),
            other => other,
        }
    }

    pub(super) async fn stop_locked(&self, id: &str, entry: &Entry, timeout: Duration) -> Result<(), ContainerError> {
        if entry.is_removed() {
            return Err(ContainerError::NotFound(id.to_string()));
        }
        let (pidfd_alive, stop_signal, cgroup, started) = {
            let live = entry.live();
            let alive = live.init.as_ref().is_some_and(|i| !i.pidfd.has_exited());
            (alive, live.record.stop_signal, live.record.cgroup.clone(), live.record.started_at_ns.is_some())
        };
        if pidfd_alive {
            if started && !timeout.is_zero() {
                self.signal_init(entry, stop_signal);
                let exited = {
                    let waiter = self.init_exit_waiter(entry);
                    tokio::time::timeout(timeout, waiter).await.is_ok()
                };
                if !exited {
                    tracing::info!(container_id = %id, "stop timeout passed; killing");
                }
            }
            self.kill_all(&cgroup).await;
            let waiter = self.init_exit_waiter(entry);
            if tokio::time::timeout(Duration::from_secs(10), waiter).await.is_err() {
                return Err(ContainerError::Build(format!("container {id} did not die after SIGKILL")));
            }
        }
        // Whatever it left in a shared PID namespace goes too.
        self.kill_all(&cgroup).await;
        self.await_exit(entry).await;
        Ok(())
    }

    pub(super) fn signal_init(&self, entry: &Entry, signal: i32) {
        let live = entry.live();
        if let Some(init) = &live.init {
            if let Err(e) = init.pidfd.send_signal(signal) {
                tracing::warn!(container_id = %live.record.id, error = %e, "cannot signal the container");
            }
        }
    }

    /// A future that resolves when the init exits (at once if there is none).
    pub(super) fn init_exit_waiter(&self, entry: &Entry) -> impl std::future::Future<Output = ()> + Send + 'static {
        let identity = entry.live().init.as_ref().map(|i| i.identity.clone());
        async move {
            if let Some(pidfd) = identity.and_then(|i| i.open_pidfd()) {
                pidfd.exited().await;
            }
        }
    }

    /// SIGKILLs every process in the container cgroup until it is empty.
    pub(super) async fn kill_all(&self, cgroup: &CgroupPath) {
        for _ in 0..200 {
            if self.cgroups.pids(cgroup).is_empty() {
                return;
            }
            self.cgroups.kill(cgroup);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
