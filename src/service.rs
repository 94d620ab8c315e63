//! The daemon as a systemd service (`Type=notify`, sd_notify(3), through
//! the `sd-notify` crate): STATUS= lines as the start goes on, READY=1 once
//! the daemon's own CRI socket answers a `Version` call, STOPPING=1 when
//! shutdown begins, and, when systemd set `WATCHDOG_USEC` for this process,
//! WATCHDOG=1 every half of it, each only after the same `Version` call
//! answered on the socket within that half.
//!
//! What that call proves: the async runtime still schedules tasks, the
//! listener accepts connections, and the HTTP/2 server, the layers in front
//! of the services and the RuntimeService answer — what kubelet needs before
//! anything else. It proves nothing about one pod's or one container's
//! operations (a call stuck on one entry's lock holds no other, and is no
//! reason to restart the daemon).
//!
//! Without `NOTIFY_SOCKET` (not started by systemd as a notify service)
//! nothing is sent and nothing is probed. Each notification is logged at
//! info, but the watchdog's pings after the first, at debug.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sd_notify::NotifyState;
use tokio::task::JoinHandle;

use crate::api::runtime_service_client::RuntimeServiceClient;
use crate::api::VersionRequest;

/// How long one readiness probe may take before it is tried again.
const READY_PROBE_LIMIT: Duration = Duration::from_secs(5);
/// The pause between readiness probes that failed.
const READY_RETRY: Duration = Duration::from_millis(100);

/// The service manager, when one listens (`NOTIFY_SOCKET` set).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ServiceManager {
    listening: bool,
}

impl ServiceManager {
    /// The service manager of this process's environment.
    pub(crate) fn from_env() -> Self {
        Self { listening: std::env::var_os("NOTIFY_SOCKET").is_some() }
    }

    /// A STATUS= line: what the daemon is doing.
    pub(crate) fn status(&self, text: &str) {
        self.send(&[NotifyState::Status(text)], true);
    }

    /// STOPPING=1, with the reason as STATUS=.
    pub(crate) fn stopping(&self, text: &str) {
        self.send(&[NotifyState::Stopping, NotifyState::Status(text)], true);
    }

    fn send(&self, states: &[NotifyState<'_>], at_info: bool) -> bool {
        if !self.listening {
            return false;
        }
        let sent = states.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(" ");
        match sd_notify::notify(states) {
            Ok(()) if at_info => {
                tracing::info!(sent = %sent, "notified the service manager");
                true
            }
            Ok(()) => {
                tracing::debug!(sent = %sent, "notified the service manager");
                true
            }
            Err(e) => {
                tracing::warn!(sent = %sent, error = %e, "cannot notify the service manager");
                false
            }
        }
    }

    /// Tells READY=1 (with `serving` as STATUS=) once `socket` answers, then,
    /// when systemd asked for it, pings the watchdog while it answers. None
    /// when no service manager listens. The task runs until aborted.
    pub(crate) fn spawn_readiness(self, socket: PathBuf, serving: String) -> Option<JoinHandle<()>> {
        if !self.listening {
            return None;
        }
        Some(tokio::spawn(async move {
            let mut failures = 0u32;
            while let Err(why) = answers(&socket, READY_PROBE_LIMIT).await {
                failures += 1;
                if failures % 50 == 1 {
                    tracing::warn!(socket = %socket.display(), reason = %why, failures, "the CRI socket does not answer yet: not ready");
                }
                tokio::time::sleep(READY_RETRY).await;
            }
            self.send(&[NotifyState::Ready, NotifyState::Status(&serving)], true);
            if let Some(every) = watchdog_interval() {
                self.watchdog(&socket, every).await;
            }
        }))
    }

    /// WATCHDOG=1 every `every`, each after `socket` answered within it.
    async fn watchdog(self, socket: &Path, every: Duration) {
        tracing::info!(every_ms = every.as_millis() as u64, "watchdog: pinging while the CRI socket answers Version");
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut first = true;
        loop {
            ticks.tick().await;
            match answers(socket, every).await {
                Ok(()) => {
                    if self.send(&[NotifyState::Watchdog], first) {
                        first = false;
                    }
                }
                Err(why) => tracing::warn!(reason = %why, "the CRI socket did not answer: no watchdog ping"),
            }
        }
    }
}

/// Half of the `WATCHDOG_USEC` systemd set for this process (`WATCHDOG_PID`
/// absent or ours), the interval sd_watchdog_enabled(3) advises.
fn watchdog_interval() -> Option<Duration> {
    half(sd_notify::watchdog_enabled()?)
}

fn half(timeout: Duration) -> Option<Duration> {
    let every = timeout / 2;
    (!every.is_zero()).then_some(every)
}

/// Whether `socket` answers a `Version` call within `limit`.
async fn answers(socket: &Path, limit: Duration) -> Result<(), String> {
    let call = async {
        let channel = crate::socket_client::socket_channel(socket).await?;
        RuntimeServiceClient::new(channel)
            .version(VersionRequest::default())
            .await
            .map_err(|status| format!("Version answered {:?}: {}", status.code(), status.message()))?;
        Ok(())
    };
    tokio::time::timeout(limit, call).await.map_err(|_| format!("no answer to Version within {limit:?}"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_pings_at_half_its_timeout() {
        assert_eq!(half(Duration::from_secs(30)), Some(Duration::from_secs(15)));
        assert_eq!(half(Duration::from_micros(3)), Some(Duration::from_nanos(1500)));
    }

    #[test]
    fn a_zero_watchdog_timeout_means_no_pings() {
        assert_eq!(half(Duration::ZERO), None);
        assert_eq!(half(Duration::from_nanos(1)), None);
    }
}
