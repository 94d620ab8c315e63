//! Putting an OCI `linux.resources` in force on a cgroup (at create and on
//! update): what the node cannot enforce is refused up front, naming the
//! field; on cgroup v2 the values go through libcgroups' v2 manager (all but
//! the swap limit, which it cannot set to 0); on v1 nidus writes each
//! controller's files in that controller's own directory.
//!
//! Why v1 is not libcgroups: its v1 manager takes one cgroup path for every
//! hierarchy (and always rewrites the devices controller at that path), while
//! nidus's directories differ per hierarchy (a relative root sits under the
//! daemon's own cgroup in each; here memory is under `/process_api/<id>` and
//! cpu at `/`), and its per-controller appliers are private.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use libcgroups::common::{CgroupManager, ControllerOpt};
use oci_spec::runtime::{LinuxHugepageLimit, LinuxResources};

use super::{CgroupError, CgroupPath, CgroupVersion, Cgroups};

/// A resource this node cannot enforce, or a value it refuses: bad input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {why}")]
pub(crate) struct Unenforceable {
    /// The CRI field (below `linux.resources`), e.g. `unified`.
    pub(crate) field: String,
    pub(crate) why: String,
}

/// `unified` keys a client may never set: they move processes or reshape the tree.
const FORBIDDEN_UNIFIED: &[&str] =
    &["cgroup.procs", "cgroup.threads", "cgroup.subtree_control", "cgroup.type", "cgroup.kill", "cgroup.freeze"];

impl Cgroups {
    /// Refuses what this node cannot enforce: raw v2 keys on v1, unknown
    /// controllers, hugepage sizes the kernel does not have.
    pub(crate) fn check_resources(&self, resources: &LinuxResources) -> Result<(), Unenforceable> {
        let bad = |field: &str, why: String| Unenforceable { field: field.to_string(), why };
        if let Some(unified) = resources.unified().as_ref().filter(|u| !u.is_empty()) {
            if self.version == CgroupVersion::V1 {
                return Err(bad("unified", "raw cgroup v2 keys need cgroup v2, and this node runs cgroup v1".into()));
            }
            let controllers = self.hierarchies.first().map(|h| h.controllers.clone()).unwrap_or_default();
            for key in unified.keys() {
                check_unified_key(key, &controllers)
                    .map_err(|why| bad("unified", format!("{}: {why}", crate::quote::quote(key))))?;
            }
        }
        let sizes = node_hugepage_sizes();
        for limit in resources.hugepage_limits().as_deref().unwrap_or_default() {
            let size = limit.page_size();
            if page_size_kib(size).is_none_or(|kib| !sizes.contains(&kib)) {
                return Err(bad(
                    "hugepage_limits",
                    format!("page size {size:?} is not one this node has ({})", describe_sizes(&sizes)),
                ));
            }
        }
        Ok(())
    }

    /// Puts `resources` in force on `path` (which exists). Parts the node
    /// lacks the controller for (hugetlb, swap accounting) are left out.
    pub(crate) fn apply(&self, path: &CgroupPath, resources: &LinuxResources) -> Result<(), CgroupError> {
        let resources = self.enforceable(path, resources);
        match self.version {
            CgroupVersion::V2 => self.apply_v2(path, &resources),
            CgroupVersion::V1 => self.apply_v1(path, &resources),
        }
    }

    /// The directory of `path` in the hierarchy that has `controller`.
    pub(crate) fn controller_dir(&self, path: &CgroupPath, controller: &str) -> Option<PathBuf> {
        self.hierarchies
            .iter()
            .find(|h| h.controllers.iter().any(|c| c == controller))
            .map(|h| h.root_dir.join(path.as_str()))
    }

    /// True when `path` has `controller` (on v2: enabled for it by its parent).
    fn has_controller(&self, path: &CgroupPath, controller: &str) -> bool {
        match (self.version, self.controller_dir(path, controller)) {
            (_, None) => false,
            (CgroupVersion::V1, Some(_)) => true,
            (CgroupVersion::V2, Some(dir)) => fs::read_to_string(dir.join("cgroup.controllers"))
                .is_ok_and(|c| c.split_whitespace().any(|c| c == controller)),
        }
    }

    /// `resources` without what this node cannot hold.
    fn enforceable(&self, path: &CgroupPath, resources: &LinuxResources) -> LinuxResources {
        let mut out = resources.clone();
        if out.hugepage_limits().as_ref().is_some_and(|l| !l.is_empty()) && !self.has_controller(path, "hugetlb") {
            tracing::debug!(cgroup = %path, "no hugetlb controller on this node: hugepage limits are not enforced");
            out.set_hugepage_limits(None);
        }
        if let Some(mut memory) = (*out.memory()).filter(|m| m.swap().is_some()) {
            let swap_file = match self.version {
                CgroupVersion::V2 => "memory.swap.max",
                CgroupVersion::V1 => "memory.memsw.limit_in_bytes",
            };
            if !self.controller_dir(path, "memory").is_some_and(|d| d.join(swap_file).exists()) {
                tracing::debug!(cgroup = %path, "no swap accounting on this node: the swap limit is not enforced");
                memory.set_swap(None);
                out.set_memory(Some(memory));
            }
        }
        out
    }

    fn apply_v2(&self, path: &CgroupPath, resources: &LinuxResources) -> Result<(), CgroupError> {
        let failed = |why: String| CgroupError::Apply { path: path.to_string(), why };
        let h = self.hierarchies.first().ok_or(CgroupError::NoHierarchy)?;
        let dir = h.root_dir.join(path.as_str());
        for key in resources.unified().as_ref().map(|u| u.keys().collect::<Vec<_>>()).unwrap_or_default() {
            if !dir.join(key).exists() {
                return Err(CgroupError::Unenforceable(Unenforceable {
                    field: "unified".into(),
                    why: format!(
                        "{}: the cgroup has no such file (is its controller enabled?)",
                        crate::quote::quote(key)
                    ),
                }));
            }
        }
        // libcgroups never writes a swap limit of 0 (it skips zeros), and 0 is
        // exactly CRI's "swap == memory: no swap": nidus writes swap itself.
        let swap = resources.memory().as_ref().and_then(|m| Some((m.swap()?, m.limit())));
        let mut without_swap = resources.clone();
        if let Some(mut memory) = *without_swap.memory() {
            memory.set_swap(None);
            without_swap.set_memory(Some(memory));
        }
        let relative = dir.strip_prefix(&h.mount_point).unwrap_or(&dir).to_path_buf();
        let manager = libcgroups::v2::manager::Manager::new(h.mount_point.clone(), relative)
            .map_err(|e| failed(e.to_string()))?;
        let options = ControllerOpt {
            resources: &without_swap,
            disable_oom_killer: false,
            oom_score_adj: None,
            freezer_state: None,
        };
        manager.apply(&options).map_err(|e| failed(e.to_string()))?;
        if let Some(value) = swap.and_then(|(swap, limit)| v2_swap_max(swap, limit)) {
            fs::write(dir.join("memory.swap.max"), &value)
                .map_err(|e| failed(format!("memory.swap.max {value}: {e}")))?;
        }
        Ok(())
    }

    fn apply_v1(&self, path: &CgroupPath, resources: &LinuxResources) -> Result<(), CgroupError> {
        let failed = |why: String| CgroupError::Apply { path: path.to_string(), why };
        for group in v1_writes(resources) {
            let dir = self
                .controller_dir(path, group.controller)
                .ok_or_else(|| failed(format!("the {} controller is not mounted on this node", group.controller)))?;
            write_in_order(&dir, &group.files).map_err(|(file, e)| failed(format!("{file}: {e}")))?;
        }
        Ok(())
    }
}

/// v2's `memory.swap.max` for OCI's memory + swap total `swap` and memory
/// `limit` (v2 counts swap alone); None: leave it as it is.
fn v2_swap_max(swap: i64, limit: Option<i64>) -> Option<String> {
    match (swap, limit) {
        (-1, _) | (_, Some(-1)) => Some("max".into()),
        (swap, Some(limit)) if swap > 0 && limit > 0 => Some(swap.saturating_sub(limit).max(0).to_string()),
        _ => None,
    }
}

/// Files of one v1 controller, written in order; when the kernel refuses the
/// first (a new limit must stay consistent with the old one, e.g. memory ≤
/// memory+swap, quota within period), the reverse order is tried.
#[derive(Debug, Clone, PartialEq, Eq)]
struct V1Group {
    controller: &'static str,
    files: Vec<(String, String)>,
}

/// What `resources` means as v1 controller files.
fn v1_writes(resources: &LinuxResources) -> Vec<V1Group> {
    let mut groups = Vec::new();
    if let Some(cpu) = resources.cpu() {
        let mut files = Vec::new();
        if let Some(shares) = cpu.shares().filter(|s| *s > 0) {
            files.push(("cpu.shares".to_string(), shares.to_string()));
        }
        if let Some(period) = cpu.period().filter(|p| *p > 0) {
            files.push(("cpu.cfs_period_us".to_string(), period.to_string()));
        }
        if let Some(quota) = cpu.quota().filter(|q| *q != 0) {
            files.push(("cpu.cfs_quota_us".to_string(), if quota < 0 { "-1".into() } else { quota.to_string() }));
        }
        if !files.is_empty() {
            groups.push(V1Group { controller: "cpu", files });
        }
        let mut files = Vec::new();
        for (file, value) in [("cpuset.cpus", cpu.cpus()), ("cpuset.mems", cpu.mems())] {
            if let Some(value) = value.as_ref().filter(|v| !v.is_empty()) {
                files.push((file.to_string(), value.clone()));
            }
        }
        if !files.is_empty() {
            groups.push(V1Group { controller: "cpuset", files });
        }
    }
    if let Some(memory) = resources.memory() {
        let mut files = Vec::new();
        if let Some(limit) = memory.limit().filter(|l| *l != 0) {
            files.push(("memory.limit_in_bytes".to_string(), if limit < 0 { "-1".into() } else { limit.to_string() }));
        }
        if let Some(swap) = memory.swap().filter(|s| *s != 0) {
            files.push((
                "memory.memsw.limit_in_bytes".to_string(),
                if swap < 0 { "-1".into() } else { swap.to_string() },
            ));
        }
        if !files.is_empty() {
            groups.push(V1Group { controller: "memory", files });
        }
    }
    if let Some(pids) = resources.pids() {
        let limit = pids.limit();
        groups.push(V1Group {
            controller: "pids",
            files: vec![("pids.max".to_string(), if limit > 0 { limit.to_string() } else { "max".into() })],
        });
    }
    let hugepages: Vec<&LinuxHugepageLimit> = resources.hugepage_limits().iter().flatten().collect();
    if !hugepages.is_empty() {
        groups.push(V1Group {
            controller: "hugetlb",
            files: hugepages
                .iter()
                .map(|l| (format!("hugetlb.{}.limit_in_bytes", l.page_size()), l.limit().max(0).to_string()))
                .collect(),
        });
    }
    groups
}

fn write_in_order(dir: &Path, files: &[(String, String)]) -> Result<(), (String, io::Error)> {
    let write = |(file, value): &(String, String)| fs::write(dir.join(file), value).map_err(|e| (file.clone(), e));
    match files.first().map(write) {
        Some(Err((_, e))) if e.raw_os_error() == Some(libc::EINVAL) && files.len() > 1 => {
            for entry in files.iter().skip(1) {
                write(entry)?;
            }
            write(&files[0])
        }
        Some(Err(e)) => Err(e),
        _ => files.iter().skip(1).try_for_each(write),
    }
}

fn check_unified_key(key: &str, controllers: &[String]) -> Result<(), String> {
    if key.is_empty() || key.contains('/') || key.starts_with('.') || key.contains("..") {
        return Err("not a cgroup file name".into());
    }
    if FORBIDDEN_UNIFIED.contains(&key) {
        return Err("this file is managed by the runtime".into());
    }
    let (controller, _) = key.split_once('.').ok_or("not a cgroup file name (controller.file)")?;
    if controller != "cgroup" && !controllers.iter().any(|c| c == controller) {
        return Err(format!("the {controller} controller is not available on this node"));
    }
    Ok(())
}

/// Hugepage sizes of this node, in KiB (`/sys/kernel/mm/hugepages/hugepages-<N>kB`).
fn node_hugepage_sizes() -> Vec<u64> {
    let mut sizes: Vec<u64> = fs::read_dir("/sys/kernel/mm/hugepages")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.strip_prefix("hugepages-")?.strip_suffix("kB")?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    sizes.sort_unstable();
    sizes
}

fn describe_sizes(kib: &[u64]) -> String {
    if kib.is_empty() {
        return "none".into();
    }
    kib.iter().map(|k| format_page_size(*k)).collect::<Vec<_>>().join(", ")
}

/// `2MB` → 2048 (KiB); the CRI/OCI spelling of a page size.
pub(crate) fn page_size_kib(size: &str) -> Option<u64> {
    let digits: String = size.chars().take_while(|c| c.is_ascii_digit()).collect();
    let value: u64 = digits.parse().ok()?;
    let unit = match &size[digits.len()..] {
        "KB" | "kB" => 1,
        "MB" => 1 << 10,
        "GB" => 1 << 20,
        _ => return None,
    };
    value.checked_mul(unit)
}

/// 2048 (KiB) → `2MB`.
pub(crate) fn format_page_size(kib: u64) -> String {
    if kib >= 1 << 20 && kib % (1 << 20) == 0 {
        format!("{}GB", kib >> 20)
    } else if kib >= 1 << 10 && kib % (1 << 10) == 0 {
        format!("{}MB", kib >> 10)
    } else {
        format!("{kib}KB")
    }
}

#[cfg(test)]
mod tests {
    use oci_spec::runtime::{LinuxCpuBuilder, LinuxMemoryBuilder, LinuxPidsBuilder, LinuxResourcesBuilder};

    use super::*;

    #[test]
    fn v1_files_follow_the_resources() {
        let resources = LinuxResourcesBuilder::default()
            .cpu(
                LinuxCpuBuilder::default()
                    .shares(512u64)
                    .quota(50_000i64)
                    .period(100_000u64)
                    .cpus("0")
                    .build()
                    .unwrap(),
            )
            .memory(LinuxMemoryBuilder::default().limit(64i64 << 20).swap(64i64 << 20).build().unwrap())
            .pids(LinuxPidsBuilder::default().limit(10i64).build().unwrap())
            .hugepage_limits(vec![oci_spec::runtime::LinuxHugepageLimitBuilder::default()
                .page_size("2MB")
                .limit(0i64)
                .build()
                .unwrap()])
            .build()
            .unwrap();
        let groups = v1_writes(&resources);
        let find = |c: &str| groups.iter().find(|g| g.controller == c).unwrap().files.clone();
        assert_eq!(
            find("cpu"),
            vec![
                ("cpu.shares".into(), "512".into()),
                ("cpu.cfs_period_us".into(), "100000".into()),
                ("cpu.cfs_quota_us".into(), "50000".into())
            ]
        );
        assert_eq!(find("cpuset"), vec![("cpuset.cpus".into(), "0".into())]);
        assert_eq!(
            find("memory"),
            vec![
                ("memory.limit_in_bytes".into(), "67108864".into()),
                ("memory.memsw.limit_in_bytes".into(), "67108864".into())
            ]
        );
        assert_eq!(find("pids"), vec![("pids.max".into(), "10".into())]);
        assert_eq!(find("hugetlb"), vec![("hugetlb.2MB.limit_in_bytes".into(), "0".into())]);
        // Unlimited quota and no limit at all.
        let unlimited = LinuxResourcesBuilder::default()
            .cpu(LinuxCpuBuilder::default().quota(-1i64).build().unwrap())
            .memory(LinuxMemoryBuilder::default().limit(-1i64).build().unwrap())
            .build()
            .unwrap();
        let groups = v1_writes(&unlimited);
        assert_eq!(groups[0].files, vec![("cpu.cfs_quota_us".to_string(), "-1".to_string())]);
        assert_eq!(groups[1].files, vec![("memory.limit_in_bytes".to_string(), "-1".to_string())]);
        assert!(v1_writes(&LinuxResources::default()).is_empty());
    }

    #[test]
    fn v2_swap_counts_swap_alone() {
        assert_eq!(v2_swap_max(64 << 20, Some(64 << 20)).as_deref(), Some("0"), "swap == memory: no swap");
        assert_eq!(v2_swap_max(96 << 20, Some(64 << 20)).as_deref(), Some("33554432"));
        assert_eq!(v2_swap_max(-1, Some(64 << 20)).as_deref(), Some("max"));
        assert_eq!(v2_swap_max(64 << 20, None), None, "no memory limit: swap cannot be expressed");
    }

    #[test]
    fn unified_keys_are_checked() {
        let controllers = vec!["memory".to_string(), "pids".to_string()];
        assert!(check_unified_key("memory.high", &controllers).is_ok());
        assert!(check_unified_key("pids.max", &controllers).is_ok());
        assert!(check_unified_key("cgroup.max.descendants", &controllers).is_ok());
        assert!(check_unified_key("cgroup.procs", &controllers).is_err());
        assert!(check_unified_key("../memory.max", &controllers).is_err());
        assert!(check_unified_key("io.max", &controllers).unwrap_err().contains("io controller"));
        assert!(check_unified_key("nodot", &controllers).is_err());
    }

    #[test]
    fn page_sizes_are_spelled_like_kubelet() {
        assert_eq!(page_size_kib("2MB"), Some(2048));
        assert_eq!(page_size_kib("1GB"), Some(1 << 20));
        assert_eq!(page_size_kib("64KB"), Some(64));
        assert_eq!(page_size_kib("2M"), None);
        assert_eq!(format_page_size(2048), "2MB");
        assert_eq!(format_page_size(1 << 20), "1GB");
        assert_eq!(format_page_size(64), "64KB");
    }
}
