//! The harness's own cgroups: one directory per mounted hierarchy the harness
//! process belongs to (v1 controllers, named hierarchies such as
//! `name=systemd`, and the cgroup2 one), always nested under the harness's own
//! cgroup there, never anywhere else. Each runtime's daemon is placed in a
//! child of it, so everything the runtime starts stays below; the harness
//! lists, kills and removes only what is below its own directories.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use nix::sys::signal::Signal;

use crate::host;

/// One cgroup, as its directory in every hierarchy the harness is in.
#[derive(Debug, Clone)]
pub struct CgroupTree {
    /// Relative path below the harness's own cgroup (the same in every hierarchy).
    pub relative: String,
    pub dirs: Vec<PathBuf>,
}

/// A mounted hierarchy and the harness's own cgroup directory in it.
#[derive(Debug, Clone)]
struct Hierarchy {
    own_dir: PathBuf,
    cpuset: bool,
    cgroup2: bool,
    /// The harness is in the hierarchy's root cgroup, which may hold
    /// processes and hand controllers down at once.
    at_root: bool,
}

impl CgroupTree {
    /// Creates `<own cgroup>/<name>` in every hierarchy the harness is in
    /// (in cgroup2, beside the leaf the harness moved into, if it did).
    pub fn create_own_child(name: &str, leaf: Option<&HarnessLeaf>) -> Result<Self> {
        check_name(name)?;
        let hierarchies = own_hierarchies()?;
        if hierarchies.is_empty() {
            bail!("no mounted cgroup hierarchy holds this process (is /sys/fs/cgroup mounted?)");
        }
        let mut made = Self { relative: name.to_string(), dirs: Vec::new() };
        for h in hierarchies {
            let own_dir = match leaf {
                Some(leaf) if h.cgroup2 => leaf.own.clone(),
                _ => h.own_dir.clone(),
            };
            let dir = own_dir.join(name);
            fs::create_dir(&dir).with_context(|| format!("creating cgroup {}", dir.display()))?;
            made.dirs.push(dir.clone());
            if h.cpuset {
                inherit_cpuset(&dir)?;
            }
            // cgroup v2: the runtimes' cgroups below get every controller
            // this one has (it holds no process itself).
            if h.cgroup2 {
                enable_controllers(&dir)?;
            }
        }
        Ok(made)
    }

    /// Creates the child `name` of this cgroup in every hierarchy.
    pub fn child(&self, name: &str) -> Result<Self> {
        check_name(name)?;
        let mut made = Self { relative: format!("{}/{name}", self.relative), dirs: Vec::new() };
        for parent in &self.dirs {
            let dir = parent.join(name);
            fs::create_dir(&dir).with_context(|| format!("creating cgroup {}", dir.display()))?;
            if parent.join("cpuset.cpus").exists() {
                inherit_cpuset(&dir)?;
            }
            made.dirs.push(dir);
        }
        Ok(made)
    }

    /// The `cgroup.procs` files a process writes its PID to, to join this cgroup.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Every cgroup directory below this one (not this one), parents first.
    pub fn descendants(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for dir in &self.dirs {
            walk_dirs(dir, &mut found);
        }
        found
    }

    /// The processes in this very cgroup (not below it) in every hierarchy.
    pub fn own_processes(&self) -> BTreeSet<i32> {
        let mut sets = self.dirs.iter().map(|d| {
            fs::read_to_string(d.join("cgroup.procs"))
                .map(|text| text.lines().filter_map(|l| l.parse().ok()).collect::<BTreeSet<i32>>())
                .unwrap_or_default()
        });
        let first = sets.next().unwrap_or_default();
        sets.fold(first, |all, set| all.intersection(&set).copied().collect())
    }

    /// The processes in the child `name` of this cgroup (not below it), in
    /// any hierarchy where it exists.
    pub fn own_processes_of_child(&self, name: &str) -> BTreeSet<i32> {
        self.dirs.iter().flat_map(|d| pids_in(&d.join(name))).collect()
    }

    /// Every process in this cgroup or below it, in any hierarchy.
    pub fn processes(&self) -> BTreeSet<i32> {
        let mut dirs = self.dirs.clone();
        dirs.extend(self.descendants());
        dirs.iter()
            .filter_map(|d| fs::read_to_string(d.join("cgroup.procs")).ok())
            .flat_map(|text| text.lines().filter_map(|l| l.parse().ok()).collect::<Vec<i32>>())
            .collect()
    }

    /// The memory charged to this cgroup and everything below it, less its
    /// inactive file cache: kubelet's "working set" (user memory, kernel
    /// memory, and the page cache in use). From the memory controller's
    /// hierarchy — cgroup2 `memory.current` or v1 `memory.usage_in_bytes` —
    /// whichever this tree has; None when it has neither.
    pub fn working_set_kb(&self) -> Option<u64> {
        self.dirs.iter().find_map(|dir| {
            let usage =
                read_number(&dir.join("memory.current")).or_else(|| read_number(&dir.join("memory.usage_in_bytes")))?;
            let stat = fs::read_to_string(dir.join("memory.stat")).ok()?;
            // v1's hierarchical counter is `total_inactive_file`, v2's is `inactive_file`.
            let inactive = ["total_inactive_file", "inactive_file"].iter().find_map(|key| {
                stat.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse::<u64>().ok())
            })?;
            Some(usage.saturating_sub(inactive) / 1024)
        })
    }

    /// SIGKILLs every process in this cgroup or below until none is left (or 10 s pass).
    pub fn kill_all(&self) -> BTreeSet<i32> {
        host::wait_until(Duration::from_secs(10), Duration::from_millis(20), || {
            let pids = self.processes();
            for pid in &pids {
                host::signal(*pid, Signal::SIGKILL);
            }
            pids.is_empty()
        });
        self.processes()
    }

    /// Removes this cgroup and everything below it, deepest first; returns
    /// the directories that could not be removed.
    pub fn remove(&self) -> Vec<PathBuf> {
        let mut all = self.dirs.clone();
        all.extend(self.descendants());
        all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        let mut left = Vec::new();
        for dir in all {
            let gone =
                host::wait_until(Duration::from_secs(2), Duration::from_millis(20), || match fs::remove_dir(&dir) {
                    Ok(()) => true,
                    Err(e) => e.kind() == std::io::ErrorKind::NotFound,
                });
            if !gone {
                left.push(dir);
            }
        }
        left
    }

    /// True when `pid` is in this cgroup or below it in every hierarchy.
    pub fn contains(&self, pid: i32) -> Result<bool> {
        let own = own_hierarchies()?;
        let theirs = process_cgroups(pid)?;
        let mut checked = 0;
        for (h, dir) in own.iter().zip(&self.dirs) {
            // The process's cgroup in this hierarchy, found by the same mount.
            let Some(path) = theirs.iter().find(|(key, _)| *key == h.own_dir).map(|(_, p)| p) else {
                continue;
            };
            checked += 1;
            if !path.starts_with(dir) {
                return Ok(false);
            }
        }
        Ok(checked == self.dirs.len())
    }
}

/// On a cgroup2 hierarchy whose controllers reach the harness's cgroup (a
/// pure cgroup v2 node), a cgroup that hands controllers to its children
/// cannot hold processes: the harness moves into a leaf of its own cgroup,
/// beside the workplace `CgroupTree::create_own_child` makes there, and
/// enables its own cgroup's controllers for both. Dropping it undoes that
/// (the controllers it enabled, the move, the leaf).
pub struct HarnessLeaf {
    own: PathBuf,
    leaf: PathBuf,
    enabled: Vec<String>,
}

impl HarnessLeaf {
    /// None where nothing needs it: no cgroup2 controllers in the harness's
    /// cgroup (cgroup v1, or a hybrid host's cgroup2 with none), or the
    /// harness in the hierarchy's root, which the rule does not bind (and
    /// which the harness leaves alone).
    pub fn enter(label: &str) -> Result<Option<Self>> {
        check_name(label)?;
        let Some(own) = own_hierarchies()?.into_iter().find(|h| h.cgroup2 && !h.at_root).map(|h| h.own_dir) else {
            return Ok(None);
        };
        let controllers = fs::read_to_string(own.join("cgroup.controllers")).unwrap_or_default();
        if controllers.trim().is_empty() {
            return Ok(None);
        }
        let me = std::process::id() as i32;
        let others: Vec<i32> = pids_in(&own).into_iter().filter(|p| *p != me).collect();
        if !others.is_empty() {
            bail!(
                "cgroup v2: the harness's cgroup {} holds other processes too ({others:?}), so it cannot hand its \
                 controllers to the runtimes' cgroups; start nidus-bench in a cgroup of its own \
                 (e.g. `systemd-run --scope nidus-bench`)",
                own.display()
            );
        }
        let leaf = own.join(format!("{label}-harness"));
        fs::create_dir(&leaf).with_context(|| format!("creating cgroup {}", leaf.display()))?;
        let mut entered = Self { own: own.clone(), leaf: leaf.clone(), enabled: Vec::new() };
        fs::write(leaf.join("cgroup.procs"), me.to_string())
            .with_context(|| format!("moving the harness into {}", leaf.display()))?;
        entered.enabled = enable_controllers(&own)?;
        Ok(Some(entered))
    }
}

impl Drop for HarnessLeaf {
    fn drop(&mut self) {
        let control = self.own.join("cgroup.subtree_control");
        for controller in self.enabled.iter().rev() {
            if let Err(e) = fs::write(&control, format!("-{controller}")) {
                eprintln!("warning: cannot disable {controller} in {}: {e}", control.display());
            }
        }
        let me = std::process::id().to_string();
        if let Err(e) = fs::write(self.own.join("cgroup.procs"), &me) {
            eprintln!("warning: cannot move the harness back to {}: {e}", self.own.display());
            return;
        }
        if let Err(e) = fs::remove_dir(&self.leaf) {
            eprintln!("warning: cannot remove {}: {e}", self.leaf.display());
        }
    }
}

/// Enables for `dir`'s children every controller `dir` has (cgroup v2);
/// returns those it enabled.
fn enable_controllers(dir: &Path) -> Result<Vec<String>> {
    let available = fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    let enabled = fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    let mut added = Vec::new();
    for controller in available.split_whitespace().filter(|c| !enabled.split_whitespace().any(|e| e == *c)) {
        let control = dir.join("cgroup.subtree_control");
        fs::write(&control, format!("+{controller}"))
            .with_context(|| format!("enabling {controller} in {}", control.display()))?;
        added.push(controller.to_string());
    }
    Ok(added)
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        bail!("bad cgroup name {name:?}");
    }
    Ok(())
}

/// A new v1 cpuset cgroup has no cpus and no mems, and refuses processes
/// until it gets its parent's.
fn inherit_cpuset(dir: &Path) -> Result<()> {
    let parent = dir.parent().context("cgroup without parent")?;
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let value =
            fs::read_to_string(parent.join(file)).with_context(|| format!("reading {file} of {}", parent.display()))?;
        fs::write(dir.join(file), value.trim()).with_context(|| format!("writing {file} of {}", dir.display()))?;
    }
    Ok(())
}

/// Every cgroup directory below `dir` (not `dir`), parents first.
pub fn walk_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            out.push(entry.path());
            walk_dirs(&entry.path(), out);
        }
    }
}

/// The processes in the cgroup `dir` (not below it).
fn pids_in(dir: &Path) -> BTreeSet<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|text| text.lines().filter_map(|l| l.parse().ok()).collect())
        .unwrap_or_default()
}

/// Every process in the cgroup `dir` or below it.
pub fn processes_below(dir: &Path) -> BTreeSet<i32> {
    let mut dirs = vec![dir.to_path_buf()];
    walk_dirs(dir, &mut dirs);
    dirs.iter().flat_map(|d| pids_in(d)).collect()
}

/// One cgroup mount: mount point, the root of the hierarchy it shows, and its
/// key in `/proc/PID/cgroup` (controllers such as `memory` or `name=systemd`;
/// empty for cgroup2).
#[derive(Debug, Clone)]
struct CgroupMount {
    mount_point: PathBuf,
    root: String,
    key: BTreeSet<String>,
    cgroup2: bool,
}

fn cgroup_mounts() -> Result<Vec<CgroupMount>> {
    let text = fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    let mut mounts = Vec::new();
    for line in text.lines() {
        let Some((pre, post)) = line.split_once(" - ") else { continue };
        let pre: Vec<&str> = pre.split(' ').collect();
        let post: Vec<&str> = post.split(' ').collect();
        let (Some(root), Some(mount_point), Some(fstype)) = (pre.get(3), pre.get(4), post.first()) else {
            continue;
        };
        let options = post.get(2).copied().unwrap_or("");
        let cgroup2 = *fstype == "cgroup2";
        if *fstype != "cgroup" && !cgroup2 {
            continue;
        }
        let key = if cgroup2 {
            BTreeSet::new()
        } else {
            options
                .split(',')
                .filter(|o| !["rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec"].contains(o))
                .filter(|o| !o.contains('=') || o.starts_with("name="))
                .filter(|o| !["xattr", "noprefix", "clone_children", "cpuset_v2_mode"].contains(o))
                .map(str::to_string)
                .collect()
        };
        mounts.push(CgroupMount { mount_point: PathBuf::from(mount_point), root: root.to_string(), key, cgroup2 });
    }
    Ok(mounts)
}

/// `(own dir of the matching mount, the process's cgroup directory)` for each
/// hierarchy `pid` is in that is mounted here.
fn process_cgroups(pid: i32) -> Result<Vec<(PathBuf, PathBuf)>> {
    let text =
        fs::read_to_string(format!("/proc/{pid}/cgroup")).with_context(|| format!("reading /proc/{pid}/cgroup"))?;
    let own = own_hierarchies()?;
    let mut found = Vec::new();
    for (mount, path) in resolve_lines(&text)? {
        let own_dir = own.iter().find(|h| h.own_dir.starts_with(&mount.mount_point)).map(|h| h.own_dir.clone());
        if let Some(own_dir) = own_dir {
            found.push((own_dir, path));
        }
    }
    Ok(found)
}

/// The mount and the cgroup directory of each line of a `/proc/PID/cgroup`.
fn resolve_lines(text: &str) -> Result<Vec<(CgroupMount, PathBuf)>> {
    let mounts = cgroup_mounts()?;
    let mut resolved = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let key: BTreeSet<String> = controllers.split(',').filter(|c| !c.is_empty()).map(str::to_string).collect();
        let Some(mount) = mounts.iter().find(|m| if key.is_empty() { m.cgroup2 } else { !m.cgroup2 && m.key == key })
        else {
            continue;
        };
        // A mount may show a sub-tree of the hierarchy: strip its root.
        let Some(inside) = Path::new(path).strip_prefix(&mount.root).ok().map(Path::to_path_buf) else {
            continue;
        };
        let dir = mount.mount_point.join(inside);
        resolved.push((mount.clone(), dir));
    }
    Ok(resolved)
}

fn own_hierarchies() -> Result<Vec<Hierarchy>> {
    let text = fs::read_to_string("/proc/self/cgroup").context("reading /proc/self/cgroup")?;
    Ok(resolve_lines(&text)?
        .into_iter()
        .map(|(mount, own_dir)| Hierarchy {
            at_root: own_dir == mount.mount_point,
            cpuset: mount.key.contains("cpuset"),
            cgroup2: mount.cgroup2,
            own_dir,
        })
        .collect())
}

fn read_number(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree of an empty hierarchy and a memory one holding `files`, in a
    /// scratch directory named by `label`.
    fn tree_with(label: &str, files: &[(&str, &str)]) -> (CgroupTree, PathBuf) {
        let dir = std::env::temp_dir().join(format!("nidus-bench-ws-{}-{label}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (empty, memory) = (dir.join("unified"), dir.join("memory"));
        fs::create_dir_all(&empty).unwrap();
        fs::create_dir_all(&memory).unwrap();
        for (name, text) in files {
            fs::write(memory.join(name), text).unwrap();
        }
        (CgroupTree { relative: "t".into(), dirs: vec![empty, memory] }, dir)
    }

    #[test]
    fn working_set_is_usage_less_inactive_file_in_v1_and_v2() {
        // v1: the hierarchical `total_inactive_file`, not this cgroup's own `inactive_file`.
        let (v1, dir) = tree_with(
            "v1",
            &[
                ("memory.usage_in_bytes", "10485760\n"),
                ("memory.stat", "inactive_file 4096\ntotal_inactive_file_x 1\ntotal_inactive_file 2097152\n"),
            ],
        );
        assert_eq!(v1.working_set_kb(), Some(8192));
        fs::remove_dir_all(dir).unwrap();
        let (v2, dir) = tree_with(
            "v2",
            &[
                ("memory.current", "5242880\n"),
                ("memory.stat", "anon 1\ninactive_file 1048576\nactive_file 3\n"),
                ("memory.usage_in_bytes", "1\n"),
            ],
        );
        assert_eq!(v2.working_set_kb(), Some(4096));
        fs::remove_dir_all(dir).unwrap();
        let (none, dir) = tree_with("none", &[("memory.stat", "inactive_file 1\n")]);
        assert_eq!(none.working_set_kb(), None);
        fs::remove_dir_all(dir).unwrap();
    }
}
