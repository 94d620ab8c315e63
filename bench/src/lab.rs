//! The harness's own workplace for one run: a directory under the system
//! temp dir, a tmpfs in it for the runtimes' volatile state, and a cgroup
//! below the harness's own. Dropping it kills whatever is still in that
//! cgroup, unmounts what is below the directory, removes the cgroups and,
//! once nothing is mounted there any more, the directory.

use std::fs;
use std::path::PathBuf;

use anyhow::{Context, Result};
use nix::mount::{mount, MsFlags};

use crate::cgroups::{CgroupTree, HarnessLeaf};
use crate::host;

/// Where the harness keeps everything of one run.
pub struct Places {
    /// On the machine's disk: roots, configs, logs, images.
    pub dir: PathBuf,
    /// A tmpfs: volatile state of both runtimes, as `/run` is on a node.
    pub run_dir: PathBuf,
    /// The harness's cgroup; each daemon gets a child of it.
    pub cgroup: CgroupTree,
    /// `nidus-bench-<pid>`: names of the directory, cgroup and namespaces.
    pub label: String,
}

pub struct Lab {
    pub places: Places,
    /// cgroup v2: the leaf the harness moved into (dropped after the
    /// workplace's cgroups are removed).
    leaf: Option<HarnessLeaf>,
}

impl Lab {
    pub fn new() -> Result<Self> {
        let label = format!("nidus-bench-{}", std::process::id());
        let dir = std::env::temp_dir().join(&label);
        fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let run_dir = dir.join("run");
        let made = (|| {
            let leaf = HarnessLeaf::enter(&label)?;
            fs::create_dir(&run_dir)?;
            mount(
                Some("nidus-bench"),
                &run_dir,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some("mode=0755,size=1g"),
            )
            .with_context(|| format!("mounting a tmpfs on {}", run_dir.display()))?;
            Ok((CgroupTree::create_own_child(&label, leaf.as_ref())?, leaf))
        })();
        match made {
            Ok((cgroup, leaf)) => Ok(Self { places: Places { dir, run_dir, cgroup, label }, leaf }),
            Err(e) => {
                host::unmount_under(&dir);
                if host::mounts_under("self", &dir).is_empty() {
                    let _ = fs::remove_dir_all(&dir);
                }
                Err(e)
            }
        }
    }

    /// After the runtimes are shut down: anything still running in the
    /// harness's cgroup, or mounted below its directory (but its own tmpfs),
    /// is a leak.
    pub fn final_check(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for pid in self.places.cgroup.processes() {
            problems.push(format!("process {pid} ({}) left after both daemons stopped", host::comm_of(pid)));
        }
        for mount in host::mounts_under("self", &self.places.dir) {
            if mount != self.places.run_dir {
                problems.push(format!("mount {} left after both daemons stopped", mount.display()));
            }
        }
        problems
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let places = &self.places;
        let survivors = places.cgroup.kill_all();
        if !survivors.is_empty() {
            eprintln!("warning: processes survive SIGKILL in {}: {survivors:?}", places.cgroup.relative);
        }
        host::unmount_under(&places.dir);
        let left = places.cgroup.remove();
        if !left.is_empty() {
            eprintln!("warning: cgroups could not be removed: {left:?}");
        }
        drop(self.leaf.take());
        let mounts = host::mounts_under("self", &places.dir);
        if mounts.is_empty() {
            let _ = fs::remove_dir_all(&places.dir);
        } else {
            eprintln!("warning: {} kept, mounts remain below it: {mounts:?}", places.dir.display());
        }
    }
}
