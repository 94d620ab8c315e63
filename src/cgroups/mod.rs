//! Cgroup layout: which cgroup version the node runs (detected at start, like
//! runc), where nidus's cgroup root is in each hierarchy, and creating,
//! joining and removing the cgroups of pods and containers under it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

pub(crate) mod ahead;
pub(crate) mod apply;
mod delegation;
pub mod device_program;
pub mod devices;
pub(crate) mod oom;
pub(crate) mod owned;
pub(crate) mod scopes;
pub(crate) mod stats;
pub(crate) use apply::Unenforceable;
pub use delegation::DAEMON_LEAF;
pub(crate) use owned::OwnedCgroups;
pub(crate) use stats::CgroupStats;

const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// v1 controllers nidus places its cgroups in (named hierarchies such as
/// `name=systemd` are left alone).
pub const V1_CONTROLLERS: &[&str] = &[
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "devices",
    "freezer",
    "blkio",
    "pids",
    "hugetlb",
    "net_cls",
    "net_prio",
    "perf_event",
    "rdma",
    "misc",
];

#[derive(Debug, thiserror::Error)]
pub(crate) enum CgroupError {
    #[error("cannot read the cgroup setup ({what}): {source}")]
    Detect { what: String, source: io::Error },
    #[error("no cgroup hierarchy found (is /sys/fs/cgroup mounted?)")]
    NoHierarchy,
    #[error("invalid cgroup path {}: {why}", crate::quote::quote(.path))]
    InvalidPath { path: String, why: &'static str },
    #[error("cannot create cgroup {path}: {source}")]
    Create { path: PathBuf, source: io::Error },
    #[error("cannot remove cgroup {path}: {source}")]
    Remove { path: PathBuf, source: io::Error },
    #[error("cannot rename cgroup {path}: {source}")]
    Rename { path: PathBuf, source: io::Error },
    #[error(
        "cgroup v2: {dir} holds other processes ({pids:?}), so it cannot give controllers to nidus's \
         relative cgroup root below it (no internal processes); start nidus in a cgroup of its own \
         (e.g. a systemd service with Delegate=yes) or give an absolute --cgroup-root"
    )]
    NotDelegatable { dir: PathBuf, pids: Vec<i32> },
    #[error(transparent)]
    Unenforceable(#[from] Unenforceable),
    #[error("cannot set the resources of cgroup {path}: {why}")]
    Apply { path: String, why: String },
    #[error("systemd, for cgroup {path}: {source}")]
    Systemd { path: String, source: crate::systemd::SystemdError },
    #[error(transparent)]
    BadSlice(#[from] crate::systemd::slice::BadSlice),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CgroupVersion {
    /// cgroup v1 controllers (legacy, or hybrid with an empty cgroup2 beside them).
    V1,
    /// The unified cgroup v2 hierarchy.
    V2,
}

/// One mounted hierarchy and where nidus's root sits in it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Hierarchy {
    pub(crate) controllers: Vec<String>,
    pub(crate) mount_point: PathBuf,
    /// nidus's cgroup root inside this hierarchy, as a directory.
    pub(crate) root_dir: PathBuf,
}

/// A cgroup below nidus's root, as a relative path such as
/// `kubepods/burstable/pod123/<sandbox id>`; the same path in every hierarchy.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
pub(crate) struct CgroupPath(String);

impl CgroupPath {
    /// Validates a path given by a client (e.g. `cgroup_parent`): absolute or
    /// relative, no `..`, no empty or odd segments.
    pub(crate) fn parse(path: &str) -> Result<Self, CgroupError> {
        let bad = |why| CgroupError::InvalidPath { path: path.to_string(), why };
        if path.len() > 2048 {
            return Err(bad("longer than 2048 bytes"));
        }
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        if segments.is_empty() {
            return Err(bad("empty"));
        }
        for segment in &segments {
            if *segment == "." || *segment == ".." {
                return Err(bad("'.' and '..' are not allowed"));
            }
            if segment.len() > 255 {
                return Err(bad("a segment is longer than 255 bytes"));
            }
            if !segment.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.:@+=".contains(&b)) {
                return Err(bad("only letters, digits and _-.:@+= may name a cgroup"));
            }
        }
        Ok(Self(segments.join("/")))
    }

    /// The parent cgroup; None at the top.
    pub(crate) fn parent(&self) -> Option<Self> {
        self.0.rsplit_once('/').map(|(parent, _)| Self(parent.to_string()))
    }

    pub(crate) fn join(&self, child: &str) -> Result<Self, CgroupError> {
        Self::parse(&format!("{}/{child}", self.0))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for CgroupPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "/{}", self.0)
    }
}

/// The node's cgroup setup with nidus's root resolved in it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Cgroups {
    pub(crate) version: CgroupVersion,
    pub(crate) hierarchies: Vec<Hierarchy>,
    /// The systemd driver's scopes; None: cgroupfs (nidus makes the
    /// directories itself). Set once at start (`scopes::choose`).
    #[serde(skip)]
    pub(crate) systemd: Option<std::sync::Arc<scopes::SystemdScopes>>,
}

impl Cgroups {
    /// Detects the cgroup version and resolves `cgroup_root` in every
    /// hierarchy (relative: under this process's own cgroup), creating it.
    pub(crate) fn detect(cgroup_root: &str) -> Result<Self, CgroupError> {
        let detect_err = |what: &str| {
            let what = what.to_string();
            move |source| CgroupError::Detect { what, source }
        };
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").map_err(detect_err("/proc/self/mountinfo"))?;
        let own = fs::read_to_string("/proc/self/cgroup").map_err(detect_err("/proc/self/cgroup"))?;
        let unified = nix::sys::statfs::statfs("/sys/fs/cgroup")
            .map(|s| s.filesystem_type().0 == CGROUP2_SUPER_MAGIC)
            .unwrap_or(false);
        let version = if unified { CgroupVersion::V2 } else { CgroupVersion::V1 };
        let mut hierarchies = Vec::new();
        for mount in parse_cgroup_mounts(&mountinfo) {
            let wanted = match version {
                CgroupVersion::V2 => mount.fstype == "cgroup2",
                CgroupVersion::V1 => mount.fstype == "cgroup" && !mount.controllers.is_empty(),
            };
            if !wanted || hierarchies.iter().any(|h: &Hierarchy| h.controllers == mount.controllers) {
                continue;
            }
            let own_path = own_cgroup(&own, version, &mount.controllers).unwrap_or_else(|| "/".into());
            // On v2 a daemon in its own leaf resolves against the leaf's parent.
            let base = match version {
                CgroupVersion::V2 => delegation::relative_root_base(&own_path).to_string(),
                CgroupVersion::V1 => own_path,
            };
            let in_hierarchy = if cgroup_root.starts_with('/') {
                cgroup_root.to_string()
            } else {
                if version == CgroupVersion::V2 {
                    if let Some(base_rel) = strip_mount_root(&base, &mount.root) {
                        delegation::make_delegatable(&mount.mount_point.join(base_rel), base_rel.is_empty())?;
                    }
                }
                format!("{}/{}", base.trim_end_matches('/'), cgroup_root)
            };
            let Some(rel) = strip_mount_root(&in_hierarchy, &mount.root) else {
                continue;
            };
            let controllers = match version {
                CgroupVersion::V2 => fs::read_to_string(mount.mount_point.join("cgroup.controllers"))
                    .unwrap_or_default()
                    .split_whitespace()
                    .map(String::from)
                    .collect(),
                CgroupVersion::V1 => mount.controllers.clone(),
            };
            hierarchies.push(Hierarchy {
                controllers,
                root_dir: mount.mount_point.join(rel),
                mount_point: mount.mount_point,
            });
        }
        if hierarchies.is_empty() {
            return Err(CgroupError::NoHierarchy);
        }
        let cgroups = Self { version, hierarchies, systemd: None };
        for h in &cgroups.hierarchies {
            let mut created = Vec::new();
            cgroups.make_dirs(h, &h.mount_point, &h.root_dir, &mut created)?;
            if version == CgroupVersion::V2 {
                delegation::warn_about_missing_controllers(&h.root_dir);
            }
        }
        Ok(cgroups)
    }

    /// The driver in use, as `RuntimeConfig` and Status name it.
    pub(crate) fn driver(&self) -> &'static str {
        if self.systemd.is_some() {
            "systemd"
        } else {
            "cgroupfs"
        }
    }

    /// The cgroup of pod `id`: the client's `cgroup_parent` (with systemd a
    /// slice, expanded), or nidus's own below `default_parent`.
    pub(crate) fn pod_cgroup(
        &self,
        given: Option<&CgroupPath>,
        id: &str,
        default_parent: &str,
    ) -> Result<CgroupPath, CgroupError> {
        match (&self.systemd, given) {
            (Some(scopes), given) => Ok(scopes.pod_cgroup(given, id, default_parent)?),
            (None, Some(given)) => Ok(given.clone()),
            (None, None) => CgroupPath::parse(&format!("{default_parent}/{id}")),
        }
    }

    /// The cgroup of the pause or container `id` in `pod_cgroup`: its own
    /// directory, or with systemd its scope `nidus-<id>.scope`.
    pub(crate) fn leaf(&self, pod_cgroup: &CgroupPath, id: &str) -> Result<CgroupPath, CgroupError> {
        match &self.systemd {
            Some(_) => scopes::SystemdScopes::scope_path(pod_cgroup, id),
            None => pod_cgroup.join(id),
        }
    }

    /// The directory of `path` in every hierarchy.
    pub(crate) fn dirs(&self, path: &CgroupPath) -> Vec<PathBuf> {
        self.hierarchies.iter().map(|h| h.root_dir.join(path.as_str())).collect()
    }

    /// The files a single-threaded process writes `0` into to join `path`
    /// (every caller — pause, monitor, container init, exec helper — joins
    /// before it starts any thread). On v1 that is `tasks`: moving the calling
    /// thread alone skips the global `cgroup_threadgroup_rwsem`, whose write
    /// side waits for an RCU grace period (~13 ms here) whenever no other
    /// migration ran in the last one; `cgroup.procs` takes it every time. For
    /// a single-threaded process both move the same task. v2: `cgroup.procs`.
    pub(crate) fn procs_files(&self, path: &CgroupPath) -> Vec<PathBuf> {
        let file = match self.version {
            CgroupVersion::V1 => "tasks",
            CgroupVersion::V2 => "cgroup.procs",
        };
        self.dirs(path).into_iter().map(|d| d.join(file)).collect()
    }

    /// Creates `path` (and its missing parents) in every hierarchy and
    /// returns the directories it made. On failure nothing made here is left.
    pub(crate) fn create(&self, path: &CgroupPath) -> Result<Vec<PathBuf>, CgroupError> {
        let mut created_dirs = Vec::new();
        for h in &self.hierarchies {
            let target = h.root_dir.join(path.as_str());
            if let Err(e) = self.make_dirs(h, &h.root_dir, &target, &mut created_dirs) {
                for dir in created_dirs.iter().rev() {
                    let _ = fs::remove_dir(dir);
                }
                return Err(e);
            }
        }
        Ok(created_dirs)
    }

    /// nidus's cgroup root in every hierarchy.
    pub(crate) fn root_dirs(&self) -> impl Iterator<Item = &Path> {
        self.hierarchies.iter().map(|h| h.root_dir.as_path())
    }

    /// True when `dir` is strictly below nidus's cgroup root in one of the
    /// hierarchies (and names no `..`).
    pub(crate) fn is_below_root(&self, dir: &Path) -> bool {
        let plain =
            dir.components().all(|c| matches!(c, std::path::Component::RootDir | std::path::Component::Normal(_)));
        plain && self.root_dirs().any(|root| dir != root && dir.starts_with(root))
    }

    /// mkdir -p from `base` down to `target`, initialising each new level.
    fn make_dirs(
        &self,
        h: &Hierarchy,
        base: &Path,
        target: &Path,
        created: &mut Vec<PathBuf>,
    ) -> Result<(), CgroupError> {
        // The parents usually exist (the pod's cgroup, for a container): one
        // mkdir then, not one per level.
        if let Some(parent) = target.parent().filter(|p| p.starts_with(base)) {
            match self.make_level(h, parent, target, created) {
                Err(CgroupError::Create { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
                made => return made,
            }
        }
        let rel = target.strip_prefix(base).unwrap_or(Path::new(""));
        let mut dir = base.to_path_buf();
        for segment in rel.components() {
            let parent = dir.clone();
            dir.push(segment);
            self.make_level(h, &parent, &dir, created)?;
        }
        Ok(())
    }

    /// mkdir of one level (one that exists is fine), initialised when new.
    fn make_level(
        &self,
        h: &Hierarchy,
        parent: &Path,
        dir: &Path,
        created: &mut Vec<PathBuf>,
    ) -> Result<(), CgroupError> {
        match fs::create_dir(dir) {
            Ok(()) => {
                created.push(dir.to_path_buf());
                self.init_level(h, parent, dir);
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(source) => Err(CgroupError::Create { path: dir.to_path_buf(), source }),
        }
    }

    /// A new v1 cpuset cgroup starts with no cpus and no mems, which refuses
    /// every task: copy the parent's. On v2, delegate the parent's controllers.
    fn init_level(&self, h: &Hierarchy, parent: &Path, dir: &Path) {
        match self.version {
            CgroupVersion::V1 if h.controllers.iter().any(|c| c == "cpuset") => {
                for file in ["cpuset.cpus", "cpuset.mems"] {
                    let current = fs::read_to_string(dir.join(file)).unwrap_or_default();
                    if current.trim().is_empty() {
                        if let Ok(value) = fs::read_to_string(parent.join(file)) {
                            let _ = fs::write(dir.join(file), value.trim());
                        }
                    }
                }
            }
            CgroupVersion::V2 => {
                let available = fs::read_to_string(parent.join("cgroup.controllers")).unwrap_or_default();
                for controller in available.split_whitespace() {
                    if let Err(e) = fs::write(parent.join("cgroup.subtree_control"), format!("+{controller}")) {
                        tracing::debug!(cgroup = %parent.display(), controller, error = %e, "cannot delegate controller");
                    }
                }
            }
            CgroupVersion::V1 => {}
        }
    }

    /// SIGKILLs every process in `path` (v2: through `cgroup.kill`, which
    /// also reaches processes in child cgroups and frozen ones).
    pub(crate) fn kill(&self, path: &CgroupPath) {
        if self.version == CgroupVersion::V2 {
            for dir in self.dirs(path) {
                let kill = dir.join("cgroup.kill");
                if kill.exists() && fs::write(kill, "1").is_ok() {
                    return;
                }
            }
        }
        for pid in self.pids(path) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }

    /// Pids of every process in `path`, all hierarchies together.
    pub(crate) fn pids(&self, path: &CgroupPath) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .dirs(path)
            .iter()
            .filter_map(|d| fs::read_to_string(d.join("cgroup.procs")).ok())
            .flat_map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect::<Vec<i32>>())
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Removes `path` in every hierarchy, killing what still runs in it.
    /// A missing cgroup is not an error.
    pub(crate) fn remove(&self, path: &CgroupPath) -> Result<(), CgroupError> {
        let mut first_error = None;
        for dir in self.dirs(path) {
            if let Err(e) = remove_with_retry(&dir) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// One quick attempt at removing `path` and any child cgroups: kill what
    /// runs there, rmdir deepest first, no waiting. True when it is gone.
    pub(crate) fn try_remove(&self, path: &CgroupPath) -> bool {
        // Every hierarchy gets its attempt, even after one fails.
        self.dirs(path).iter().filter(|dir| remove_tree_once(dir).is_err()).count() == 0
    }

    /// cgroup v1: renames `from` to `to` (a sibling) in every hierarchy, so
    /// that a cgroup made ahead becomes the one asked for; when a hierarchy
    /// fails midway, those already renamed go back. cgroup v2 cannot rename
    /// a cgroup (the kernel refuses), nor can siblings of different parents.
    pub(crate) fn rename(&self, from: &CgroupPath, to: &CgroupPath) -> Result<(), CgroupError> {
        let refused = |why: &str| CgroupError::Rename {
            path: PathBuf::from(from.as_str()),
            source: io::Error::new(io::ErrorKind::Unsupported, why.to_string()),
        };
        if self.version == CgroupVersion::V2 {
            return Err(refused("cgroup v2 cannot rename a cgroup"));
        }
        if from.parent() != to.parent() {
            return Err(refused("a cgroup is renamed within its parent only"));
        }
        let pairs: Vec<(PathBuf, PathBuf)> = self.dirs(from).into_iter().zip(self.dirs(to)).collect();
        for (done, (old, new)) in pairs.iter().enumerate() {
            if let Err(source) = fs::rename(old, new) {
                for (old, new) in pairs[..done].iter().rev() {
                    let _ = fs::rename(new, old);
                }
                return Err(CgroupError::Rename { path: old.clone(), source });
            }
        }
        Ok(())
    }

    pub(crate) fn exists(&self, path: &CgroupPath) -> bool {
        self.dirs(path).iter().any(|d| d.exists())
    }

    /// The directories of `leaf`'s parents that `create` would make, in
    /// every hierarchy, nearest first, leaving out `given` (a parent the
    /// client named) and what is above it. In a hierarchy, a parent that is
    /// there ends the walk (its own parents are there too).
    pub(crate) fn missing_parent_dirs(&self, leaf: &CgroupPath, given: Option<&CgroupPath>) -> Vec<PathBuf> {
        let mut missing = Vec::new();
        for root in self.root_dirs() {
            let mut next = leaf.parent();
            while let Some(parent) = next.filter(|p| Some(p) != given) {
                let dir = root.join(parent.as_str());
                if dir.is_dir() {
                    break;
                }
                missing.push(dir);
                next = parent.parent();
            }
        }
        missing
    }
}

/// rmdir a cgroup (and any child cgroups), killing their processes and
/// retrying for about a second while they exit.
fn remove_with_retry(dir: &Path) -> Result<(), CgroupError> {
    let mut last = None;
    for attempt in 0..50 {
        match remove_tree_once(dir) {
            Ok(()) => return Ok(()),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(if attempt < 10 { 2 } else { 20 }));
    }
    Err(CgroupError::Remove { path: dir.to_path_buf(), source: last.unwrap_or_else(|| io::ErrorKind::Other.into()) })
}

/// One pass: kill everything in `dir` and below (v2: `cgroup.kill`, which
/// reaches frozen processes too), then rmdir deepest first. A missing
/// cgroup is removed already.
fn remove_tree_once(dir: &Path) -> io::Result<()> {
    let kill = dir.join("cgroup.kill");
    if kill.exists() {
        let _ = fs::write(kill, "1");
    }
    let mut dirs = vec![dir.to_path_buf()];
    collect_child_dirs(dir, &mut dirs);
    let mut result = Ok(());
    for d in dirs.iter().rev() {
        if let Ok(procs) = fs::read_to_string(d.join("cgroup.procs")) {
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            }
        }
        match fs::remove_dir(d) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => result = Err(e),
            _ => {}
        }
    }
    result
}

/// Every directory below `dir`, parents before children.
fn collect_child_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            out.push(entry.path());
            collect_child_dirs(&entry.path(), out);
        }
    }
}

struct CgroupMount {
    fstype: String,
    root: String,
    mount_point: PathBuf,
    controllers: Vec<String>,
}

fn parse_cgroup_mounts(mountinfo: &str) -> Vec<CgroupMount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (pre, post) = line.split_once(" - ")?;
            let pre: Vec<&str> = pre.split(' ').collect();
            let post: Vec<&str> = post.split(' ').collect();
            let fstype = *post.first()?;
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            let controllers = post
                .get(2)
                .map(|opts| opts.split(',').filter(|o| V1_CONTROLLERS.contains(o)).map(String::from).collect())
                .unwrap_or_default();
            Some(CgroupMount {
                fstype: fstype.to_string(),
                root: pre.get(3)?.to_string(),
                mount_point: PathBuf::from(pre.get(4)?),
                controllers,
            })
        })
        .collect()
}

/// This process's cgroup in the hierarchy holding `controllers`.
fn own_cgroup(proc_self_cgroup: &str, version: CgroupVersion, controllers: &[String]) -> Option<String> {
    proc_self_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_id, list, path) = (parts.next()?, parts.next()?, parts.next()?);
        let matches = match version {
            CgroupVersion::V2 => list.is_empty(),
            CgroupVersion::V1 => {
                let listed: Vec<&str> = list.split(',').collect();
                !list.is_empty() && controllers.iter().all(|c| listed.contains(&c.as_str()))
            }
        };
        matches.then(|| path.to_string())
    })
}

/// The part of `path` (a path in the hierarchy) below the mount's root;
/// None when the mount does not show that part of the hierarchy.
fn strip_mount_root<'a>(path: &'a str, mount_root: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(mount_root.trim_end_matches('/'))?;
    (rest.is_empty() || rest.starts_with('/')).then(|| rest.trim_start_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_paths_are_validated() {
        assert_eq!(CgroupPath::parse("/kubepods/burstable/pod1").unwrap().as_str(), "kubepods/burstable/pod1");
        assert_eq!(CgroupPath::parse("a//b/").unwrap().as_str(), "a/b");
        assert!(CgroupPath::parse("/a/../b").is_err());
        assert!(CgroupPath::parse("").is_err());
        assert!(CgroupPath::parse("/").is_err());
        assert!(CgroupPath::parse("a/b c").is_err());
        let p = CgroupPath::parse("/a/b/c").unwrap();
        assert_eq!(p.parent().unwrap().as_str(), "a/b");
        assert_eq!(p.parent().and_then(|p| p.parent()).unwrap().as_str(), "a");
        assert!(CgroupPath::parse("a").unwrap().parent().is_none(), "the top has no parent");
    }

    #[test]
    fn finds_hybrid_v1_mounts_and_own_cgroup() {
        let mountinfo = "35 25 0:30 / /sys/fs/cgroup/memory rw,relatime shared:1 - cgroup cgroup rw,memory\n\
                         36 25 0:31 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
                         37 25 0:32 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n\
                         38 25 0:33 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n";
        let mounts = parse_cgroup_mounts(mountinfo);
        assert_eq!(mounts.len(), 4);
        assert_eq!(mounts[0].controllers, vec!["memory"]);
        assert!(mounts[2].controllers.is_empty());
        assert_eq!(mounts[3].controllers, vec!["cpu", "cpuacct"]);
        let own = "4:memory:/process_api/abc\n1:cpu,cpuacct:/\n0::/\n";
        assert_eq!(own_cgroup(own, CgroupVersion::V1, &["memory".into()]).as_deref(), Some("/process_api/abc"));
        assert_eq!(own_cgroup(own, CgroupVersion::V1, &["cpu".into(), "cpuacct".into()]).as_deref(), Some("/"));
        assert_eq!(own_cgroup(own, CgroupVersion::V2, &[]).as_deref(), Some("/"));
    }

    #[test]
    fn mount_roots_are_stripped() {
        assert_eq!(strip_mount_root("/a/b", "/"), Some("a/b"));
        assert_eq!(strip_mount_root("/a/b", "/a"), Some("b"));
        assert_eq!(strip_mount_root("/ab", "/a"), None);
        assert_eq!(strip_mount_root("/x", "/a"), None);
    }

    #[test]
    fn missing_parents_are_counted_per_hierarchy_and_stop_at_a_given_parent() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path();
        let hierarchy = |name: &str| Hierarchy {
            controllers: Vec::new(),
            mount_point: base.join(name),
            root_dir: base.join(name).join("root"),
        };
        let cgroups = Cgroups {
            version: CgroupVersion::V1,
            hierarchies: vec![hierarchy("cpu"), hierarchy("memory")],
            systemd: None,
        };
        let leaf = CgroupPath::parse("kubepods/burstable/pod1/c1").unwrap();
        let dir = |hierarchy: &str, path: &str| base.join(hierarchy).join("root").join(path);
        let make = |hierarchy: &str, path: &str| fs::create_dir_all(dir(hierarchy, path)).unwrap();
        // Not even nidus's root: every level of the path is missing (the root is not one).
        let levels = ["kubepods/burstable/pod1", "kubepods/burstable", "kubepods"];
        let everywhere: Vec<PathBuf> =
            ["cpu", "memory"].iter().flat_map(|h| levels.iter().map(move |l| dir(h, l))).collect();
        assert_eq!(cgroups.missing_parent_dirs(&leaf, None), everywhere);
        let given = CgroupPath::parse("kubepods/burstable/pod1").unwrap();
        assert!(cgroups.missing_parent_dirs(&leaf, Some(&given)).is_empty(), "the given parent is the client's");
        make("cpu", "kubepods/burstable");
        make("memory", "kubepods/burstable");
        assert_eq!(
            cgroups.missing_parent_dirs(&leaf, None),
            vec![dir("cpu", "kubepods/burstable/pod1"), dir("memory", "kubepods/burstable/pod1")]
        );
        // There in one hierarchy only: still to be made in the other.
        make("cpu", "kubepods/burstable/pod1");
        assert_eq!(cgroups.missing_parent_dirs(&leaf, None), vec![dir("memory", "kubepods/burstable/pod1")]);
        make("memory", "kubepods/burstable/pod1");
        assert!(cgroups.missing_parent_dirs(&leaf, None).is_empty());
        assert!(cgroups.missing_parent_dirs(&CgroupPath::parse("top").unwrap(), None).is_empty());
        assert!(cgroups.is_below_root(&dir("cpu", "kubepods")));
        assert!(!cgroups.is_below_root(&base.join("cpu/root")));
        assert!(!cgroups.is_below_root(&base.join("cpu/root/../x")));
        assert!(!cgroups.is_below_root(Path::new("/etc")));
    }
}
