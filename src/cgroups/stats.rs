//! What a cgroup has used: cpu time and throttling, memory (working set =
//! usage − inactive file, as kubelet and cAdvisor count it), swap and process
//! count, read from the few files CRI stats need, on v1 and v2.
//!
//! Not libcgroups' `stats()`: on v1 it wants one path for every hierarchy,
//! and on v2 it reads a dozen files (PSI, io, hugetlb) per call and fails as a
//! whole when any one is missing; kubelet asks for every container's stats
//! every few seconds. Its public single-value and pids readers are used.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use libcgroups::stats::{parse_single_value, pid_stats};
use serde::Serialize;

use super::{CgroupPath, CgroupVersion, Cgroups};

/// Limits at or above this are "no limit" (v1 prints a page-rounded i64::MAX).
const NO_LIMIT: u64 = 1 << 62;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CpuStats {
    /// Total cpu time, in nanoseconds.
    pub usage_ns: u64,
    pub user_ns: u64,
    pub system_ns: u64,
    /// CFS bandwidth periods elapsed, and those in which the cgroup was throttled.
    pub periods: u64,
    pub throttled_periods: u64,
    pub throttled_ns: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MemoryStats {
    pub usage_bytes: u64,
    pub working_set_bytes: u64,
    /// Anonymous memory (v1 `total_rss`, v2 `anon`).
    pub rss_bytes: u64,
    /// Page cache.
    pub cache_bytes: u64,
    pub page_faults: u64,
    pub major_page_faults: u64,
    /// None: no limit.
    pub limit_bytes: Option<u64>,
    /// Swap in use (None: no swap accounting).
    pub swap_bytes: Option<u64>,
    /// Swap allowed (None: no limit, or no accounting).
    pub swap_limit_bytes: Option<u64>,
    /// Times the limit was hit (v1 `failcnt`, v2 `max` events).
    pub fail_count: u64,
    pub oom_kills: u64,
}

impl MemoryStats {
    /// What may still be allocated before the limit: limit − working set.
    pub fn available_bytes(&self) -> Option<u64> {
        self.limit_bytes.map(|l| l.saturating_sub(self.working_set_bytes))
    }
}

/// One reading of a cgroup; a part is None when its controller is absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CgroupStats {
    pub cpu: Option<CpuStats>,
    pub memory: Option<MemoryStats>,
    /// Processes (tasks) in the cgroup and below.
    pub pids: Option<u64>,
}

impl Cgroups {
    /// Reads what `path` has used; a missing cgroup gives an empty reading.
    pub fn stats(&self, path: &CgroupPath) -> CgroupStats {
        let dir = |controller: &str| self.controller_dir(path, controller).filter(|d| d.is_dir());
        match self.version {
            CgroupVersion::V2 => {
                let Some(dir) = self.hierarchies.first().map(|h| h.root_dir.join(path.as_str())).filter(|d| d.is_dir())
                else {
                    return CgroupStats::default();
                };
                CgroupStats { cpu: cpu_v2(&dir), memory: memory_v2(&dir), pids: pids(&dir) }
            }
            CgroupVersion::V1 => CgroupStats {
                cpu: dir("cpuacct").and_then(|acct| cpu_v1(&acct, dir("cpu").as_deref())),
                memory: dir("memory").and_then(|d| memory_v1(&d)),
                pids: dir("pids").and_then(|d| pids(&d)),
            },
        }
    }
}

/// A flat-keyed cgroup file (`key value` lines).
pub fn flat_keyed(path: &Path) -> Option<HashMap<String, u64>> {
    let text = fs::read_to_string(path).ok()?;
    Some(parse_flat_keyed(&text))
}

pub fn parse_flat_keyed(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(' ')?;
            Some((key.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

fn single(path: &Path) -> Option<u64> {
    parse_single_value(path).ok()
}

fn limit(path: &Path) -> Option<u64> {
    single(path).filter(|l| *l < NO_LIMIT)
}

fn pids(dir: &Path) -> Option<u64> {
    pid_stats(dir).ok().map(|p| p.current)
}

fn cpu_v2(dir: &Path) -> Option<CpuStats> {
    let stat = flat_keyed(&dir.join("cpu.stat"))?;
    let us = |key: &str| stat.get(key).copied().unwrap_or(0).saturating_mul(1000);
    Some(CpuStats {
        usage_ns: us("usage_usec"),
        user_ns: us("user_usec"),
        system_ns: us("system_usec"),
        periods: stat.get("nr_periods").copied().unwrap_or(0),
        throttled_periods: stat.get("nr_throttled").copied().unwrap_or(0),
        throttled_ns: us("throttled_usec"),
    })
}

fn cpu_v1(cpuacct: &Path, cpu: Option<&Path>) -> Option<CpuStats> {
    let usage_ns = single(&cpuacct.join("cpuacct.usage"))?;
    // cpuacct.stat counts USER_HZ ticks (100 per second on Linux).
    let ticks = flat_keyed(&cpuacct.join("cpuacct.stat")).unwrap_or_default();
    let tick_ns = |key: &str| ticks.get(key).copied().unwrap_or(0).saturating_mul(10_000_000);
    let throttling = cpu.and_then(|d| flat_keyed(&d.join("cpu.stat"))).unwrap_or_default();
    Some(CpuStats {
        usage_ns,
        user_ns: tick_ns("user"),
        system_ns: tick_ns("system"),
        periods: throttling.get("nr_periods").copied().unwrap_or(0),
        throttled_periods: throttling.get("nr_throttled").copied().unwrap_or(0),
        throttled_ns: throttling.get("throttled_time").copied().unwrap_or(0),
    })
}

fn memory_v2(dir: &Path) -> Option<MemoryStats> {
    let usage = single(&dir.join("memory.current"))?;
    let stat = flat_keyed(&dir.join("memory.stat")).unwrap_or_default();
    let events = flat_keyed(&dir.join("memory.events")).unwrap_or_default();
    let get = |map: &HashMap<String, u64>, key: &str| map.get(key).copied().unwrap_or(0);
    Some(MemoryStats {
        usage_bytes: usage,
        working_set_bytes: usage.saturating_sub(get(&stat, "inactive_file")),
        rss_bytes: get(&stat, "anon"),
        cache_bytes: get(&stat, "file"),
        page_faults: get(&stat, "pgfault"),
        major_page_faults: get(&stat, "pgmajfault"),
        limit_bytes: limit(&dir.join("memory.max")),
        swap_bytes: single(&dir.join("memory.swap.current")),
        swap_limit_bytes: limit(&dir.join("memory.swap.max")),
        fail_count: get(&events, "max"),
        oom_kills: get(&events, "oom_kill"),
    })
}

fn memory_v1(dir: &Path) -> Option<MemoryStats> {
    let usage = single(&dir.join("memory.usage_in_bytes"))?;
    let stat = flat_keyed(&dir.join("memory.stat")).unwrap_or_default();
    let get = |key: &str| stat.get(key).copied().unwrap_or(0);
    let memsw = single(&dir.join("memory.memsw.usage_in_bytes"));
    let limit_bytes = limit(&dir.join("memory.limit_in_bytes"));
    Some(MemoryStats {
        usage_bytes: usage,
        working_set_bytes: usage.saturating_sub(get("total_inactive_file")),
        rss_bytes: get("total_rss"),
        cache_bytes: get("total_cache"),
        page_faults: get("total_pgfault"),
        major_page_faults: get("total_pgmajfault"),
        limit_bytes,
        swap_bytes: memsw.map(|both| both.saturating_sub(usage)),
        swap_limit_bytes: limit(&dir.join("memory.memsw.limit_in_bytes"))
            .map(|both| both.saturating_sub(limit_bytes.unwrap_or(0))),
        fail_count: single(&dir.join("memory.failcnt")).unwrap_or(0),
        oom_kills: super::oom::oom_kills(dir).unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_keyed_files_parse() {
        let map = parse_flat_keyed("usage_usec 1500\nuser_usec 1000\nbad line here\nnr_periods 4\n");
        assert_eq!(map["usage_usec"], 1500);
        assert_eq!(map["nr_periods"], 4);
        assert!(!map.contains_key("bad"));
    }

    #[test]
    fn available_is_limit_minus_working_set() {
        let m = MemoryStats { working_set_bytes: 10, limit_bytes: Some(64), ..Default::default() };
        assert_eq!(m.available_bytes(), Some(54));
        assert_eq!(MemoryStats::default().available_bytes(), None);
    }
}
