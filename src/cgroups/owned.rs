//! The cgroups nidus must take away: parent directories it made (e.g. the
//! default parent `nidus/` when it was missing), removed once empty, and
//! cgroups whose removal failed (a process that would not die), retried
//! until they are gone.
//!
//! Ownership is per directory, in each hierarchy on its own: a parent that
//! nidus made in one hierarchy (kubelet leaves `devices` out of its QoS
//! cgroups on v1) is nidus's there and nowhere else. A parent at or above a
//! `cgroup_parent` the client gave is never recorded: nidus may make it when
//! it is missing, but it is the client's (kubelet's) to remove, as with runc
//! and containerd. Both sets are remembered in the volatile state directory,
//! so neither is forgotten across daemon restarts; like cgroups themselves
//! they do not outlive a reboot, so they are not fsynced. Creation and
//! pruning are serialised, so a prune never removes a parent that a
//! concurrent creation is about to use.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{CgroupError, CgroupPath, Cgroups};
use crate::store;

const OWNED_FILE: &str = "owned-cgroups.json";
const STALE_FILE: &str = "stale-cgroups.json";

pub(crate) struct OwnedCgroups {
    cgroups: Arc<Cgroups>,
    file: PathBuf,
    /// Directories nidus made, absolute, each in one hierarchy.
    owned: Mutex<BTreeSet<PathBuf>>,
    /// Cgroups whose removal failed, kept in `stale_file`.
    stale_file: PathBuf,
    stale: Mutex<BTreeSet<CgroupPath>>,
}

impl OwnedCgroups {
    /// Loads the sets kept in `dir` (`owned-cgroups.json`,
    /// `stale-cgroups.json`; missing: empty), adopting those an older nidus
    /// kept in `legacy_dir` (the persistent root).
    ///
    /// An older nidus recorded parents by relative path only, for every
    /// hierarchy at once, which took kubelet's cgroups for its own: such
    /// entries are dropped (the directories stay where they are). So is an
    /// entry that is not below nidus's cgroup root in a mounted hierarchy.
    pub(crate) fn load(cgroups: Arc<Cgroups>, dir: &Path, legacy_dir: &Path) -> Result<Self, store::StoreError> {
        let (file, stale_file) = (dir.join(OWNED_FILE), dir.join(STALE_FILE));
        let mut listed: Vec<String> = store::read_json(&file)?.unwrap_or_default();
        let mut stale: BTreeSet<CgroupPath> = store::read_json(&stale_file)?.unwrap_or_default();
        let mut adopted = Vec::new();
        if let Some(old) = store::read_json::<Vec<String>>(&legacy_dir.join(OWNED_FILE))? {
            listed.extend(old);
            adopted.push(legacy_dir.join(OWNED_FILE));
        }
        if let Some(old) = store::read_json::<BTreeSet<CgroupPath>>(&legacy_dir.join(STALE_FILE))? {
            stale.extend(old);
            adopted.push(legacy_dir.join(STALE_FILE));
        }
        let owned: BTreeSet<PathBuf> = listed.iter().map(PathBuf::from).filter(|d| cgroups.is_below_root(d)).collect();
        let dropped = listed.len() - owned.len();
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "cgroup records without a hierarchy (from an older nidus) or outside nidus's cgroup root are \
                 forgotten; their directories are left in place"
            );
        }
        let this = Self { cgroups, file, owned: Mutex::new(owned), stale_file, stale: Mutex::new(stale) };
        if !adopted.is_empty() || dropped > 0 {
            this.save_owned(&this.owned())?;
            this.save_stale(&this.stale_set())?;
            for legacy in adopted {
                let _ = std::fs::remove_file(legacy);
            }
        }
        Ok(this)
    }

    fn save_owned(&self, owned: &BTreeSet<PathBuf>) -> Result<(), store::StoreError> {
        store::write_json_with(&self.file, owned, store::Durability::Volatile)
    }

    fn save_stale(&self, stale: &BTreeSet<CgroupPath>) -> Result<(), store::StoreError> {
        store::write_json_with(&self.stale_file, stale, store::Durability::Volatile)
    }

    /// Saves the owned set when it `changed`. A failed save is logged: the
    /// set in memory stays right, and the next change saves it whole.
    fn save_owned_if(&self, changed: bool, owned: &BTreeSet<PathBuf>) {
        if changed {
            if let Err(e) = self.save_owned(owned) {
                tracing::warn!(error = %e, "cannot record the cgroups nidus made");
            }
        }
    }

    fn owned(&self) -> MutexGuard<'_, BTreeSet<PathBuf>> {
        self.owned.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn stale_set(&self) -> MutexGuard<'_, BTreeSet<CgroupPath>> {
        self.stale.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates `leaf` and its missing parents. The parents made here below
    /// `given` (the `cgroup_parent` a client gave, if any) join the owned
    /// set, each in the hierarchy it was missing from; `given` and what is
    /// above it may be made but stay the client's. The leaf belongs to
    /// whoever asked for it. The parents join the set before the first
    /// mkdir: a daemon killed while making them leaves them recorded, and
    /// the next start prunes them (a recorded cgroup that was never made is
    /// dropped then too).
    pub(crate) fn create(&self, leaf: &CgroupPath, given: Option<&CgroupPath>) -> Result<(), CgroupError> {
        let mut owned = self.owned();
        let planned = self.cgroups.missing_parent_dirs(leaf, given);
        let before = owned.len();
        owned.extend(planned.iter().cloned());
        self.save_owned_if(owned.len() != before, &owned);
        let created = self.cgroups.create(leaf);
        // Only what this create made is nidus's: a parent someone else made
        // in the meantime is theirs, and a failed create removed what it made.
        let made: &[PathBuf] = created.as_deref().unwrap_or(&[]);
        let before = owned.len();
        owned.retain(|d| !planned.contains(d) || made.contains(d));
        self.save_owned_if(owned.len() != before, &owned);
        created.map(|_| ())
    }

    /// Removes `leaf` (killing what runs in it). When that fails, the cgroup
    /// is remembered and retried later (`retry_stale`), and this succeeds: the
    /// container or pod it belonged to can go.
    pub(crate) fn remove(&self, leaf: &CgroupPath) {
        let Err(e) = self.cgroups.remove(leaf) else { return };
        tracing::warn!(cgroup = %leaf, error = %e, "cannot remove the cgroup now; it is remembered and retried");
        let mut stale = self.stale_set();
        if stale.insert(leaf.clone()) {
            if let Err(e) = self.save_stale(&stale) {
                tracing::error!(cgroup = %leaf, error = %e, "cannot record a cgroup left to remove");
            }
        }
    }

    /// Cgroups whose removal failed and that are still there.
    pub(crate) fn stale(&self) -> Vec<CgroupPath> {
        self.stale_set().iter().cloned().collect()
    }

    /// The directories nidus made and still owns.
    #[cfg(test)]
    pub(crate) fn owned_dirs(&self) -> Vec<PathBuf> {
        self.owned().iter().cloned().collect()
    }

    /// One more attempt at every cgroup whose removal failed (kill, rmdir,
    /// no waiting), then prunes empty parents. Returns those still left.
    pub(crate) fn retry_stale(&self) -> Vec<CgroupPath> {
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
                if let Err(e) = self.save_stale(&stale) {
                    tracing::warn!(error = %e, "cannot record the cgroups left to remove");
                }
            }
            stale.iter().cloned().collect::<Vec<_>>()
        };
        self.prune();
        left
    }

    /// Removes the owned ancestors of `leaf` (just removed) that are empty
    /// now, nearest first, in each hierarchy on its own. In a hierarchy it
    /// stops at the first ancestor that is not owned there or not empty:
    /// nothing above that can be empty, and nidus makes parents only as an
    /// unbroken chain above a leaf. So a removal costs the depth of its own
    /// branch, not a look at every pod's cgroup on the node.
    pub(crate) fn prune_above(&self, leaf: &CgroupPath) {
        let mut owned = self.owned();
        let before = owned.len();
        for root in self.cgroups.root_dirs() {
            let mut next = leaf.parent();
            while let Some(path) = next {
                let dir = root.join(path.as_str());
                if !owned.contains(&dir) || !remove_if_empty(&dir) {
                    break;
                }
                owned.remove(&dir);
                next = path.parent();
            }
        }
        self.save_owned_if(owned.len() != before, &owned);
    }

    /// Removes every owned directory that is empty now, deepest first (at
    /// start and after retrying stale cgroups; a single removal uses
    /// `prune_above`).
    pub(crate) fn prune(&self) {
        let mut owned = self.owned();
        let mut candidates: Vec<PathBuf> = owned.iter().cloned().collect();
        candidates.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        let before = owned.len();
        for dir in candidates {
            if remove_if_empty(&dir) {
                owned.remove(&dir);
            }
        }
        self.save_owned_if(owned.len() != before, &owned);
    }
}

/// rmdir of an empty cgroup directory; true when it is gone (or was).
fn remove_if_empty(dir: &Path) -> bool {
    match std::fs::remove_dir(dir) {
        Ok(()) => true,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::{CgroupVersion, Hierarchy};

    /// Two fake v1 hierarchies in a temp dir; nidus's root is `root` in each.
    fn fake(base: &Path) -> Arc<Cgroups> {
        let hierarchy = |name: &str| Hierarchy {
            controllers: vec![name.to_string()],
            mount_point: base.join(name),
            root_dir: base.join(name).join("root"),
        };
        for name in ["cpu", "devices"] {
            std::fs::create_dir_all(base.join(name).join("root")).unwrap();
        }
        Arc::new(Cgroups {
            version: CgroupVersion::V1,
            hierarchies: vec![hierarchy("cpu"), hierarchy("devices")],
            systemd: None,
        })
    }

    fn path(p: &str) -> CgroupPath {
        CgroupPath::parse(p).unwrap()
    }

    #[test]
    fn a_parent_made_in_one_hierarchy_is_removed_there_only_and_a_given_parent_never() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path();
        let cgroups = fake(base);
        let state = base.join("state");
        std::fs::create_dir_all(&state).unwrap();
        // kubelet's layout: its QoS cgroup everywhere but in `devices`.
        std::fs::create_dir_all(base.join("cpu/root/kubepods/burstable")).unwrap();
        std::fs::write(base.join("cpu/root/kubepods/burstable/limit"), "2048").unwrap();
        let owned = OwnedCgroups::load(cgroups.clone(), &state, &state).unwrap();
        let given = path("kubepods/burstable/pod1");
        let leaf = given.join("sandbox").unwrap();
        owned.create(&leaf, Some(&given)).unwrap();
        assert!(base.join("devices/root/kubepods/burstable/pod1/sandbox").is_dir());
        assert!(owned.owned_dirs().is_empty(), "nothing at or above the given parent is nidus's");
        owned.remove(&leaf);
        owned.prune_above(&leaf);
        assert!(base.join("cpu/root/kubepods/burstable/pod1").is_dir());
        assert!(base.join("devices/root/kubepods/burstable/pod1").is_dir(), "kubelet's to remove");
        assert!(!base.join("cpu/root/kubepods/burstable/pod1/sandbox").exists());

        // nidus's own default parent, there in `cpu` only: made (and later
        // removed) in `devices`, never touched in `cpu`.
        std::fs::create_dir_all(base.join("cpu/root/nidus")).unwrap();
        let own = path("nidus/p2/p2");
        owned.create(&own, None).unwrap();
        let mut expected =
            vec![base.join("cpu/root/nidus/p2"), base.join("devices/root/nidus"), base.join("devices/root/nidus/p2")];
        expected.sort();
        assert_eq!(owned.owned_dirs(), expected);
        // The records survive a restart.
        let owned = OwnedCgroups::load(cgroups.clone(), &state, &state).unwrap();
        assert_eq!(owned.owned_dirs(), expected);
        owned.remove(&own);
        owned.prune_above(&own);
        assert!(base.join("cpu/root/nidus").is_dir(), "there before nidus");
        assert!(!base.join("devices/root/nidus").exists());
        assert!(owned.owned_dirs().is_empty());
        assert_eq!(std::fs::read_to_string(base.join("cpu/root/kubepods/burstable/limit")).unwrap(), "2048");
    }

    #[test]
    fn records_by_path_only_and_outside_the_root_are_forgotten_at_load() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path();
        let cgroups = fake(base);
        let state = base.join("state");
        std::fs::create_dir_all(&state).unwrap();
        let inside = base.join("cpu/root/nidus");
        std::fs::create_dir_all(&inside).unwrap();
        let listed = serde_json::json!(["kubepods", "/etc", base.join("cpu/other"), inside]);
        std::fs::write(state.join(OWNED_FILE), listed.to_string()).unwrap();
        let owned = OwnedCgroups::load(cgroups, &state, &state).unwrap();
        assert_eq!(owned.owned_dirs(), vec![inside.clone()]);
        owned.prune();
        assert!(!inside.exists());
    }
}
