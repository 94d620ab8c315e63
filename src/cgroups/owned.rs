//! The cgroups nidus must take away: parents it made (e.g.
//! `kubepods/burstable/pod…` when kubelet had not made them), removed once
//! empty, and cgroups whose removal failed (a process that would not die),
//! retried until they are gone. Both sets are remembered in the volatile state
//! directory, so neither is forgotten across daemon restarts; like cgroups
//! themselves they do not outlive a reboot, so they are not fsynced. Creation
//! and pruning are serialised, so a prune never removes a parent that a
//! concurrent creation is about to use.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{CgroupError, CgroupPath, Cgroups};
use crate::store;

const OWNED_FILE: &str = "owned-cgroups.json";
const STALE_FILE: &str = "stale-cgroups.json";

pub struct OwnedCgroups {
    cgroups: Arc<Cgroups>,
    file: PathBuf,
    owned: Mutex<BTreeSet<CgroupPath>>,
    /// Cgroups whose removal failed, kept in `stale_file`.
    stale_file: PathBuf,
    stale: Mutex<BTreeSet<CgroupPath>>,
}

impl OwnedCgroups {
    /// Loads the sets kept in `dir` (`owned-cgroups.json`,
    /// `stale-cgroups.json`; missing: empty), adopting those an older nidus
    /// kept in `legacy_dir` (the persistent root).
    pub fn load(cgroups: Arc<Cgroups>, dir: &Path, legacy_dir: &Path) -> Result<Self, store::StoreError> {
        let (file, stale_file) = (dir.join(OWNED_FILE), dir.join(STALE_FILE));
        let mut owned: BTreeSet<CgroupPath> = store::read_json(&file)?.unwrap_or_default();
        let mut stale: BTreeSet<CgroupPath> = store::read_json(&stale_file)?.unwrap_or_default();
        let mut adopted = Vec::new();
        for (name, set) in [(OWNED_FILE, &mut owned), (STALE_FILE, &mut stale)] {
            let legacy = legacy_dir.join(name);
            if let Some(old) = store::read_json::<BTreeSet<CgroupPath>>(&legacy)? {
                set.extend(old);
                adopted.push(legacy);
            }
        }
        let this = Self { cgroups, file, owned: Mutex::new(owned), stale_file, stale: Mutex::new(stale) };
        if !adopted.is_empty() {
            this.save(&this.file, &this.owned())?;
            this.save(&this.stale_file, &this.stale_set())?;
            for legacy in adopted {
                let _ = std::fs::remove_file(legacy);
            }
        }
        Ok(this)
    }

    fn save(&self, file: &Path, set: &BTreeSet<CgroupPath>) -> Result<(), store::StoreError> {
        store::write_json_with(file, set, store::Durability::Volatile)
    }

    /// Saves the owned set when it `changed`. A failed save is logged: the
    /// set in memory stays right, and the next change saves it whole.
    fn save_owned_if(&self, changed: bool, owned: &BTreeSet<CgroupPath>) {
        if changed {
            if let Err(e) = self.save(&self.file, owned) {
                tracing::warn!(error = %e, "cannot record the cgroups nidus made");
            }
        }
    }

    fn owned(&self) -> MutexGuard<'_, BTreeSet<CgroupPath>> {
        self.owned.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn stale_set(&self) -> MutexGuard<'_, BTreeSet<CgroupPath>> {
        self.stale.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates `leaf` and its missing parents; the parents made here join the
    /// owned set (the leaf belongs to whoever asked for it). They join it
    /// before the first mkdir: a daemon killed while making them leaves them
    /// recorded, and the next start prunes them (a recorded cgroup that was
    /// never made is dropped then too).
    pub fn create(&self, leaf: &CgroupPath) -> Result<(), CgroupError> {
        let mut owned = self.owned();
        let parents = self.cgroups.missing_ancestors(leaf);
        let before = owned.len();
        owned.extend(parents.iter().cloned());
        self.save_owned_if(owned.len() != before, &owned);
        let created = self.cgroups.create(leaf);
        if created.is_err() {
            // The failed create removed what it made: so are the records.
            let before = owned.len();
            owned.retain(|p| !parents.contains(p) || self.cgroups.exists(p));
            self.save_owned_if(owned.len() != before, &owned);
        }
        created
    }

    /// Removes `leaf` (killing what runs in it). When that fails, the cgroup
    /// is remembered and retried later (`retry_stale`), and this succeeds: the
    /// container or pod it belonged to can go.
    pub fn remove(&self, leaf: &CgroupPath) {
        let Err(e) = self.cgroups.remove(leaf) else { return };
        tracing::warn!(cgroup = %leaf, error = %e, "cannot remove the cgroup now; it is remembered and retried");
        let mut stale = self.stale_set();
        if stale.insert(leaf.clone()) {
            if let Err(e) = self.save(&self.stale_file, &stale) {
                tracing::error!(cgroup = %leaf, error = %e, "cannot record a cgroup left to remove");
            }
        }
    }

    /// Cgroups whose removal failed and that are still there.
    pub fn stale(&self) -> Vec<CgroupPath> {
        self.stale_set().iter().cloned().collect()
    }

    /// One more attempt at every cgroup whose removal failed (kill, rmdir,
    /// no waiting), then prunes empty parents. Returns those still left.
    pub fn retry_stale(&self) -> Vec<CgroupPath> {
        let left = {
            let mut stale = self.stale_set();
            if stale.is_empty() {
                return Vec::new();
            }
            let before = stale.len();
            stale.retain(|path| {
                let gone = self.cgroups.try_remove(path);
                if gone {
                    tracing::info!(cgroup = %path, "removed a cgroup left over from an earlier failure");
                }
                !gone
            });
            if stale.len() != before {
                if let Err(e) = self.save(&self.stale_file, &stale) {
                    tracing::warn!(error = %e, "cannot record the cgroups left to remove");
                }
            }
            stale.iter().cloned().collect::<Vec<_>>()
        };
        self.prune();
        left
    }

    /// Removes the owned ancestors of `leaf` (just removed) that are empty
    /// now, nearest first. It stops at the first that is not owned or not
    /// empty: nothing above that can be empty, and nidus makes parents only
    /// as an unbroken chain above a leaf. So a removal costs the depth of its
    /// own branch, not a look at every pod's cgroup on the node.
    pub fn prune_above(&self, leaf: &CgroupPath) {
        let mut owned = self.owned();
        let before = owned.len();
        let mut next = leaf.parent();
        while let Some(path) = next {
            if !owned.contains(&path) || !self.cgroups.remove_if_empty(&path) {
                break;
            }
            owned.remove(&path);
            next = path.parent();
        }
        self.save_owned_if(owned.len() != before, &owned);
    }

    /// Removes every owned cgroup that is empty now, deepest first (at start
    /// and after retrying stale cgroups; a single removal uses `prune_above`).
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
        self.save_owned_if(owned.len() != before, &owned);
    }
}
