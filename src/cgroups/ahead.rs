//! Container cgroups made ahead (cgroup v1): once RunPodSandbox has made a
//! pod, `<pod cgroup>/next-<sandbox id>` is made in the background, limited
//! to the default devices, while the caller goes on to its first
//! CreateContainer; that container renames it to its own in every hierarchy
//! (waiting for it if still being made) instead of making eight on its path.
//! Nothing is made ahead on v2: the kernel cannot rename a cgroup there, and
//! making one is a single mkdir.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use super::devices;
use super::owned::OwnedCgroups;
use super::{CgroupError, CgroupPath, CgroupVersion, Cgroups};

/// The cgroup made ahead for sandbox `sandbox_id` in its pod's cgroup.
pub(crate) fn path(pod_cgroup: &CgroupPath, sandbox_id: &str) -> Result<CgroupPath, CgroupError> {
    pod_cgroup.join(&format!("next-{sandbox_id}"))
}

/// How long a CreateContainer waits for a cgroup still being made ahead
/// before it makes its own.
const WAIT: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Making,
    Ready,
    /// Taken by a container, discarded, or never made: nothing to wait for.
    Gone,
}

struct Slot {
    state: Mutex<State>,
    changed: Condvar,
}

impl Slot {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits (up to `limit`) while the cgroup is being made; returns the
    /// state, still locked.
    fn settled(&self, limit: Duration) -> MutexGuard<'_, State> {
        let guard = self.state();
        self.changed
            .wait_timeout_while(guard, limit, |s| *s == State::Making)
            .map(|(guard, _)| guard)
            .unwrap_or_else(|p| p.into_inner().0)
    }
}

/// The cgroups being made or made ahead, by path.
pub(crate) struct AheadCgroups {
    cgroups: Arc<Cgroups>,
    owned: Arc<OwnedCgroups>,
    slots: Mutex<HashMap<CgroupPath, Arc<Slot>>>,
}

impl AheadCgroups {
    pub(crate) fn new(cgroups: Arc<Cgroups>, owned: Arc<OwnedCgroups>) -> Arc<Self> {
        Arc::new(Self { cgroups, owned, slots: Mutex::default() })
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<CgroupPath, Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn slot(&self, ahead: &CgroupPath) -> Option<Arc<Slot>> {
        self.slots().get(ahead).cloned()
    }

    /// Starts making `ahead` on the blocking pool (v1; nothing on v2).
    pub(crate) fn start(self: &Arc<Self>, ahead: CgroupPath) {
        if self.cgroups.version == CgroupVersion::V2 {
            return;
        }
        let slot = Arc::new(Slot { state: Mutex::new(State::Making), changed: Condvar::new() });
        if self.slots().insert(ahead.clone(), slot.clone()).is_some() {
            tracing::warn!(cgroup = %ahead, "a cgroup was already being made ahead there");
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let made = this.make(&ahead);
            if let Err(e) = &made {
                tracing::warn!(cgroup = %ahead, error = %e, "no container cgroup made ahead");
            }
            let mut state = slot.state();
            if *state == State::Gone {
                // Discarded while being made (a very slow mkdir): not left behind.
                this.owned.remove(&ahead);
            } else {
                *state = if made.is_ok() { State::Ready } else { State::Gone };
            }
            drop(state);
            slot.changed.notify_all();
        });
    }

    /// Makes `ahead` with the default device rules; on failure nothing of it
    /// is left.
    fn make(&self, ahead: &CgroupPath) -> Result<(), CgroupError> {
        self.owned.create(ahead, ahead.parent().as_ref())?;
        let rules = devices::rules_for(false, &[]).unwrap_or_default();
        devices::restrict(&self.cgroups, ahead, &rules).map_err(|e| {
            self.owned.remove(ahead);
            CgroupError::Apply { path: ahead.as_str().to_string(), why: e.to_string() }
        })
    }

    /// Blocking: takes `ahead` as `container`'s cgroup (a sibling of it),
    /// waiting a little while it is being made. True when it is now
    /// `container`'s; false when the caller must make one.
    pub(crate) fn take(&self, ahead: &CgroupPath, container: &CgroupPath) -> bool {
        let Some(slot) = self.slot(ahead) else { return false };
        let mut state = slot.settled(WAIT);
        if *state != State::Ready {
            return false;
        }
        *state = State::Gone;
        drop(state);
        self.slots().remove(ahead);
        self.cgroups.rename(ahead, container).is_ok()
    }

    /// Blocking: `ahead` is no longer wanted (its sandbox stops): waits for
    /// it to be made if it is being made, then removes it. Also removes one
    /// left by an earlier daemon.
    pub(crate) fn discard(&self, ahead: &CgroupPath) {
        if let Some(slot) = self.slot(ahead) {
            let mut state = slot.settled(WAIT * 10);
            *state = State::Gone;
            drop(state);
            self.slots().remove(ahead);
        }
        if self.cgroups.exists(ahead) {
            self.owned.remove(ahead);
        }
    }
}
