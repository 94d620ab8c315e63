//! CRI `LinuxContainerResources` → OCI `linux.resources`: checking the values
//! a client sends (naming the field), the conversion itself (CRI and OCI share
//! v1 semantics: shares, quota/period, memory + swap), and a pod's total
//! (its resources plus its overhead) for the pod cgroup. Pure: no I/O.

use std::collections::HashMap;

use oci_spec::runtime::{
    LinuxCpuBuilder, LinuxHugepageLimitBuilder, LinuxMemoryBuilder, LinuxPidsBuilder, LinuxResources,
    LinuxResourcesBuilder,
};

use crate::api::LinuxContainerResources;

/// The kernel's CFS period bounds, in microseconds.
const CFS_PERIOD_US: std::ops::RangeInclusive<i64> = 1_000..=1_000_000;
/// The smallest CFS quota the kernel accepts, in microseconds.
const MIN_CFS_QUOTA_US: i64 = 1_000;
/// The CFS period kubelet uses when it names none.
pub(crate) const DEFAULT_CFS_PERIOD_US: i64 = 100_000;

/// A bad value: the field (below `linux.resources`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {why}")]
pub(crate) struct BadResource {
    pub(crate) field: String,
    pub(crate) why: String,
}

fn bad(field: &str, why: impl Into<String>) -> BadResource {
    BadResource { field: field.to_string(), why: why.into() }
}

/// Checks every value of `r` against what CRI and the kernel allow.
pub(crate) fn validate(r: &LinuxContainerResources) -> Result<(), BadResource> {
    if r.cpu_period != 0 && !CFS_PERIOD_US.contains(&r.cpu_period) {
        return Err(bad("cpu_period", format!("{} is outside 1000..=1000000 microseconds", r.cpu_period)));
    }
    if r.cpu_quota != 0 && r.cpu_quota != -1 && r.cpu_quota < MIN_CFS_QUOTA_US {
        return Err(bad("cpu_quota", format!("{} must be -1 (no limit) or at least 1000 microseconds", r.cpu_quota)));
    }
    if r.cpu_shares < 0 || r.cpu_shares > 262_144 {
        return Err(bad("cpu_shares", format!("{} is outside 0..=262144", r.cpu_shares)));
    }
    if r.memory_limit_in_bytes < 0 {
        return Err(bad("memory_limit_in_bytes", "must not be negative (0: no limit)"));
    }
    if r.memory_limit_in_bytes > 0 && r.memory_limit_in_bytes < 4096 {
        return Err(bad("memory_limit_in_bytes", "must be at least one page (4096 bytes)"));
    }
    match r.memory_swap_limit_in_bytes {
        0 | -1 => {}
        swap if swap < 0 => return Err(bad("memory_swap_limit_in_bytes", "must be -1, 0 or a size")),
        _ if r.memory_limit_in_bytes == 0 => {
            return Err(bad("memory_swap_limit_in_bytes", "needs memory_limit_in_bytes (it counts memory + swap)"))
        }
        swap if swap < r.memory_limit_in_bytes => {
            return Err(bad(
                "memory_swap_limit_in_bytes",
                format!("{swap} is below memory_limit_in_bytes (it counts memory + swap)"),
            ))
        }
        _ => {}
    }
    if !(-1000..=1000).contains(&r.oom_score_adj) {
        return Err(bad("oom_score_adj", format!("{} is outside -1000..=1000", r.oom_score_adj)));
    }
    for (field, list, online) in
        [("cpuset_cpus", &r.cpuset_cpus, ONLINE_CPUS), ("cpuset_mems", &r.cpuset_mems, ONLINE_MEMORY_NODES)]
    {
        if list.is_empty() {
            continue;
        }
        let Some(ranges) = cpu_ranges(list) else {
            return Err(bad(field, format!("{} is not a list like 0-3,6", crate::quote::quote(list))));
        };
        let online_text =
            crate::bounded_file::read_small_text(std::path::Path::new(online)).unwrap_or_else(|_| "0".into());
        let online_ranges = cpu_ranges(online_text.trim()).unwrap_or_else(|| vec![(0, 0)]);
        if let Some((first, last)) =
            ranges.iter().find(|(first, last)| !online_ranges.iter().any(|(a, b)| a <= first && last <= b))
        {
            return Err(bad(
                field,
                format!("{first}-{last} is not within this node's online set {}", online_text.trim()),
            ));
        }
    }
    for (i, limit) in r.hugepage_limits.iter().enumerate() {
        if crate::cgroups::apply::page_size_kib(&limit.page_size).is_none() {
            return Err(bad(
                &format!("hugepage_limits[{i}].page_size"),
                format!("{:?} is not like 2MB", limit.page_size),
            ));
        }
        if limit.limit > i64::MAX as u64 {
            return Err(bad(&format!("hugepage_limits[{i}].limit"), "too large"));
        }
    }
    for (key, value) in &r.unified {
        if key.is_empty() || key.contains('/') || key.contains('\0') || value.contains('\0') {
            return Err(bad("unified", format!("{key:?} is not a cgroup file name")));
        }
    }
    Ok(())
}

/// Where the kernel lists the CPUs and memory nodes that are online.
const ONLINE_CPUS: &str = "/sys/devices/system/cpu/online";
const ONLINE_MEMORY_NODES: &str = "/sys/devices/system/node/online";

/// The ranges a list like `0-3,6,8-9` names, each `(first, last)`; `None`
/// when it is not such a list or a range runs backwards.
fn cpu_ranges(list: &str) -> Option<Vec<(u32, u32)>> {
    let number = |n: &str| if n.bytes().all(|b| b.is_ascii_digit()) { n.parse::<u32>().ok() } else { None };
    list.split(',')
        .map(|part| {
            let (first, last) = match part.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                None => (number(part)?, number(part)?),
            };
            (first <= last).then_some((first, last))
        })
        .collect()
}

/// The OCI resources of (validated) CRI resources; `pids_limit` > 0 adds a
/// pids limit (CRI has no field for it; see `[container] pids_limit`).
pub fn to_oci(r: &LinuxContainerResources, pids_limit: i64) -> LinuxResources {
    let mut builder = LinuxResourcesBuilder::default();
    let mut cpu = LinuxCpuBuilder::default();
    let mut any_cpu = false;
    if r.cpu_shares > 0 {
        cpu = cpu.shares(r.cpu_shares as u64);
        any_cpu = true;
    }
    if r.cpu_quota != 0 {
        cpu = cpu.quota(r.cpu_quota);
        any_cpu = true;
    }
    if r.cpu_period > 0 {
        cpu = cpu.period(r.cpu_period as u64);
        any_cpu = true;
    }
    if !r.cpuset_cpus.is_empty() {
        cpu = cpu.cpus(r.cpuset_cpus.clone());
        any_cpu = true;
    }
    if !r.cpuset_mems.is_empty() {
        cpu = cpu.mems(r.cpuset_mems.clone());
        any_cpu = true;
    }
    if any_cpu {
        if let Ok(cpu) = cpu.build() {
            builder = builder.cpu(cpu);
        }
    }
    if r.memory_limit_in_bytes > 0 || r.memory_swap_limit_in_bytes != 0 {
        let mut memory = LinuxMemoryBuilder::default();
        if r.memory_limit_in_bytes > 0 {
            memory = memory.limit(r.memory_limit_in_bytes);
        }
        if r.memory_swap_limit_in_bytes != 0 {
            memory = memory.swap(r.memory_swap_limit_in_bytes);
        }
        if let Ok(memory) = memory.build() {
            builder = builder.memory(memory);
        }
    }
    if pids_limit > 0 {
        if let Ok(pids) = LinuxPidsBuilder::default().limit(pids_limit).build() {
            builder = builder.pids(pids);
        }
    }
    let hugepages: Vec<_> = r
        .hugepage_limits
        .iter()
        .filter_map(|l| {
            LinuxHugepageLimitBuilder::default().page_size(l.page_size.clone()).limit(l.limit as i64).build().ok()
        })
        .collect();
    if !hugepages.is_empty() {
        builder = builder.hugepage_limits(hugepages);
    }
    if !r.unified.is_empty() {
        builder = builder.unified(r.unified.clone());
    }
    builder.build().unwrap_or_default()
}

/// What the pod cgroup gets: the pod's resources plus its overhead (kubelet
/// sends them apart). A dimension the pod leaves unlimited stays unlimited.
pub fn pod_total(resources: &LinuxContainerResources, overhead: &LinuxContainerResources) -> LinuxContainerResources {
    let mut total = resources.clone();
    if resources.memory_limit_in_bytes > 0 {
        total.memory_limit_in_bytes = resources.memory_limit_in_bytes.saturating_add(overhead.memory_limit_in_bytes);
        if resources.memory_swap_limit_in_bytes > 0 {
            total.memory_swap_limit_in_bytes =
                resources.memory_swap_limit_in_bytes.saturating_add(overhead.memory_limit_in_bytes);
        }
    }
    if resources.cpu_quota > 0 && overhead.cpu_quota > 0 {
        // Overhead in the pod's period.
        let period = if resources.cpu_period > 0 { resources.cpu_period } else { DEFAULT_CFS_PERIOD_US };
        let overhead_period = if overhead.cpu_period > 0 { overhead.cpu_period } else { DEFAULT_CFS_PERIOD_US };
        total.cpu_quota =
            resources.cpu_quota.saturating_add(overhead.cpu_quota.saturating_mul(period) / overhead_period);
    }
    if resources.cpu_shares > 0 || overhead.cpu_shares > 0 {
        total.cpu_shares = resources.cpu_shares.saturating_add(overhead.cpu_shares).min(262_144);
    }
    let mut unified: HashMap<String, String> = overhead.unified.clone();
    unified.extend(resources.unified.clone());
    total.unified = unified;
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::HugepageLimit;

    fn mib(n: i64) -> i64 {
        n << 20
    }

    #[test]
    fn kubelet_resources_become_oci() {
        let cri = LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 50_000,
            cpu_shares: 512,
            memory_limit_in_bytes: mib(64),
            memory_swap_limit_in_bytes: mib(64),
            cpuset_cpus: "0".into(),
            hugepage_limits: vec![HugepageLimit { page_size: "2MB".into(), limit: 0 }],
            unified: HashMap::from([("memory.high".into(), "50000000".into())]),
            ..Default::default()
        };
        validate(&cri).unwrap();
        let oci = to_oci(&cri, 0);
        let cpu = oci.cpu().as_ref().unwrap();
        assert_eq!((cpu.shares(), cpu.quota(), cpu.period()), (Some(512), Some(50_000), Some(100_000)));
        assert_eq!(cpu.cpus().as_deref(), Some("0"));
        let memory = oci.memory().as_ref().unwrap();
        assert_eq!((memory.limit(), memory.swap()), (Some(mib(64)), Some(mib(64))));
        assert!(oci.pids().is_none());
        assert_eq!(oci.hugepage_limits().as_ref().unwrap()[0].page_size(), "2MB");
        assert_eq!(oci.unified().as_ref().unwrap()["memory.high"], "50000000");
        assert_eq!(to_oci(&cri, 100).pids().as_ref().unwrap().limit(), 100);
        // Nothing asked for: nothing in the spec.
        let empty = to_oci(&LinuxContainerResources::default(), 0);
        assert!(empty.cpu().is_none() && empty.memory().is_none() && empty.unified().is_none());
    }

    #[test]
    fn bad_values_name_their_field() {
        let check = |r: LinuxContainerResources| validate(&r).unwrap_err().field;
        assert_eq!(check(LinuxContainerResources { cpu_period: 10, ..Default::default() }), "cpu_period");
        assert_eq!(check(LinuxContainerResources { cpu_quota: 5, ..Default::default() }), "cpu_quota");
        assert_eq!(check(LinuxContainerResources { cpu_shares: -2, ..Default::default() }), "cpu_shares");
        assert_eq!(
            check(LinuxContainerResources { memory_limit_in_bytes: -5, ..Default::default() }),
            "memory_limit_in_bytes"
        );
        assert_eq!(
            check(LinuxContainerResources {
                memory_limit_in_bytes: mib(64),
                memory_swap_limit_in_bytes: mib(32),
                ..Default::default()
            }),
            "memory_swap_limit_in_bytes"
        );
        assert_eq!(check(LinuxContainerResources { oom_score_adj: 1001, ..Default::default() }), "oom_score_adj");
        assert_eq!(check(LinuxContainerResources { cpuset_cpus: "0-".into(), ..Default::default() }), "cpuset_cpus");
        assert_eq!(
            check(LinuxContainerResources {
                hugepage_limits: vec![HugepageLimit { page_size: "2M".into(), limit: 1 }],
                ..Default::default()
            }),
            "hugepage_limits[0].page_size"
        );
        assert_eq!(
            check(LinuxContainerResources {
                unified: HashMap::from([("../memory.max".into(), "1".into())]),
                ..Default::default()
            }),
            "unified"
        );
        assert!(validate(&LinuxContainerResources {
            cpu_quota: -1,
            cpuset_cpus: "0,0-0".into(),
            ..Default::default()
        })
        .is_ok());
    }

    #[test]
    fn the_pod_cgroup_gets_resources_plus_overhead() {
        let resources = LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 200_000,
            cpu_shares: 2048,
            memory_limit_in_bytes: mib(256),
            ..Default::default()
        };
        let overhead = LinuxContainerResources {
            cpu_period: 50_000,
            cpu_quota: 10_000,
            cpu_shares: 102,
            memory_limit_in_bytes: mib(32),
            ..Default::default()
        };
        let total = pod_total(&resources, &overhead);
        assert_eq!(total.memory_limit_in_bytes, mib(288));
        assert_eq!(total.cpu_quota, 220_000, "overhead quota scaled to the pod's period");
        assert_eq!(total.cpu_period, 100_000);
        assert_eq!(total.cpu_shares, 2150);
        // An unlimited pod stays unlimited whatever its overhead.
        let unlimited = pod_total(&LinuxContainerResources::default(), &overhead);
        assert_eq!((unlimited.memory_limit_in_bytes, unlimited.cpu_quota), (0, 0));
        assert_eq!(unlimited.cpu_shares, 102);
    }
}
