//! The parent cgroups nidus made (e.g. `kubepods/burstable/pod…` when kubelet
//! had not made them): remembered on disk, and removed once empty. Creation and
//! pruning are serialised, so a prune never removes a parent that a concurrent
//! creation is about to use.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{CgroupError, CgroupPath, Cgroups};
use crate::store;

pub struct OwnedCgroups {
    cgroups: Arc<Cgroups>,
    file: PathBuf,
    owned: Mutex<BTreeSet<CgroupPath>>,
}

impl OwnedCgroups {
    /// Loads the set kept in `file` (missing: empty).
    pub fn load(cgroups: Arc<Cgroups>, file: PathBuf) -> Result<Self, store::StoreError> {
        let owned: BTreeSet<CgroupPath> = store::read_json(&file)?.unwrap_or_default();
        Ok(Self { cgroups, file, owned: Mutex::new(owned) })
    }

    fn owned(&self) -> MutexGuard<'_, BTreeSet<CgroupPath>> {
        self.owned.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates `leaf` and its missing parents; the parents made here join the
    /// owned set (the leaf belongs to whoever asked for it).
    pub fn create(&self, leaf: &CgroupPath) -> Result<(), CgroupError> {
        let mut owned = self.owned();
        let created = self.cgroups.create(leaf)?;
        let before = owned.len();
        for level in 1..created {
            if let Some(parent) = leaf.ancestor(level) {
                owned.insert(parent);
            }
        }
        if owned.len() != before {
            if let Err(e) = store::write_json(&self.file, &*owned) {
                tracing::warn!(error = %e, "cannot record the cgroups nidus made");
            }
        }
        Ok(())
    }

    /// Removes every owned cgroup that is empty now, deepest first.
    pub fn prune(&self) {
        let mut owned = self.owned();
        let mut candidates: Vec<CgroupPath> = owned.iter().cloned().collect();
        candidates.sort_by_key(|p| std::cmp::Reverse(p.as_str().matches('/').count()));
        let before = owned.len();
        for path in candidates {
            if self.cgroups.remove_if_empty(&path) {
                owned.remove(&path);
            }
        }
        if owned.len() != before {
            if let Err(e) = store::write_json(&self.file, &*owned) {
                tracing::warn!(error = %e, "cannot record the cgroups nidus made");
            }
        }
    }
}
