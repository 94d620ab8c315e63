//! What a cgroup has used, read from its files on v1 and v2, at two depths:
//! `stats` reads what the CRI stats messages need (cpu time and throttling;
//! memory, where working set = usage − inactive file as kubelet and cAdvisor
//! count it; swap; tasks; pressure), and `details` adds what only the
//! cAdvisor-style metrics need (kernel and peak memory, per-device I/O, the
//! cpu settings, the processes), so that the stats RPCs kubelet calls every
//! few seconds read only what they answer. A value the kernel does not
//! write is None, never zero.
//!
//! Not libcgroups' `stats()`: on v1 it wants one path for every hierarchy,
//! and on v2 it reads a dozen files (PSI, io, hugetlb) per call and fails as a
//! whole when any one is missing. Its public single-value and pids readers are used.

pub mod io;
pub mod pressure;
pub mod spec;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use libcgroups::stats::{parse_single_value, pid_stats};
use serde::Serialize;

use super::{CgroupPath, CgroupVersion, Cgroups};
pub use io::DeviceIo;
pub use pressure::{Pressure, PressureLine, PressureStats};
pub use spec::CpuSpec;

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
    /// Page cache mapped into processes (v1 `total_mapped_file`, v2 `file_mapped`).
    pub mapped_file_bytes: u64,
    /// Page faults of the cgroup and below (v1 `total_pgfault`, v2 `pgfault`).
    pub page_faults: u64,
    pub major_page_faults: u64,
    /// Page faults of the cgroup's own tasks (v1 `pgfault`; v2 counts the
    /// whole subtree only, so the same as `page_faults`).
    pub own_page_faults: u64,
    pub own_major_page_faults: u64,
    /// None: no limit.
    pub limit_bytes: Option<u64>,
    /// Swap in use (None: no swap accounting).
    pub swap_bytes: Option<u64>,
    /// Swap allowed (None: no limit, or no accounting).
    pub swap_limit_bytes: Option<u64>,
    /// The swap setting as written: v1 memory + swap (`memory.memsw.limit_in_bytes`),
    /// v2 swap alone (`memory.swap.max`); None: no limit, or no accounting.
    pub swap_setting_bytes: Option<u64>,
    /// Times the limit was hit (v1 `failcnt`, v2 `max` events).
    pub fail_count: u64,
    pub oom_kills: u64,
    /// Kernel memory (v2 `kernel` of `memory.stat`, Linux 5.18+; v1
    /// `memory.kmem.usage_in_bytes`, read by `details` only).
    pub kernel_bytes: Option<u64>,
    /// The most ever used (v1 `memory.max_usage_in_bytes`, v2 `memory.peak`,
    /// Linux 5.19+); read by `details` only.
    pub max_usage_bytes: Option<u64>,
}

impl MemoryStats {
    /// What may still be allocated before the limit: limit − working set.
    pub fn available_bytes(&self) -> Option<u64> {
        self.limit_bytes.map(|l| l.saturating_sub(self.working_set_bytes))
    }
}

/// Tasks (threads) in the cgroup and below, and the limit on them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PidsStats {
    pub current: u64,
    /// None: no limit (`max`).
    pub limit: Option<u64>,
}

/// One reading of a cgroup; a part is None when its controller (or the
/// kernel's support for it) is absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CgroupStats {
    pub cpu: Option<CpuStats>,
    pub memory: Option<MemoryStats>,
    pub pids: Option<PidsStats>,
    pub pressure: PressureStats,
}

/// A reading for metrics: the stats and what only metrics need.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CgroupDetails {
    pub stats: CgroupStats,
    pub cpu_spec: Option<CpuSpec>,
    /// Block I/O per device (None: no io/blkio controller there).
    pub io: Option<Vec<DeviceIo>>,
    /// The processes directly in the cgroup (`cgroup.procs`).
    pub processes: Option<Vec<i32>>,
}

impl Cgroups {
    /// Reads what the CRI stats need of `path`; a missing cgroup gives an empty reading.
    pub fn stats(&self, path: &CgroupPath) -> CgroupStats {
        self.read(path, false).stats
    }

    /// Reads everything metrics report of `path`.
    pub fn details(&self, path: &CgroupPath) -> CgroupDetails {
        self.read(path, true)
    }

    fn read(&self, path: &CgroupPath, detailed: bool) -> CgroupDetails {
        let dir = |controller: &str| self.controller_dir(path, controller).filter(|d| d.is_dir());
        match self.version {
            CgroupVersion::V2 => {
                let Some(dir) = self.hierarchies.first().map(|h| h.root_dir.join(path.as_str())).filter(|d| d.is_dir())
                else {
                    return CgroupDetails::default();
                };
                let stats = CgroupStats {
                    cpu: cpu_v2(&dir),
                    memory: memory_v2(&dir, detailed),
                    pids: pids(&dir),
                    pressure: pressure::read(&dir),
                };
                if !detailed {
                    return CgroupDetails { stats, ..Default::default() };
                }
                CgroupDetails { stats, cpu_spec: spec::read_v2(&dir), io: io::read_v2(&dir), processes: procs(&dir) }
            }
            CgroupVersion::V1 => {
                let cpu_dir = dir("cpu");
                let pids_dir = dir("pids");
                let stats = CgroupStats {
                    cpu: dir("cpuacct").and_then(|acct| cpu_v1(&acct, cpu_dir.as_deref())),
                    memory: dir("memory").and_then(|d| memory_v1(&d, detailed)),
                    pids: pids_dir.as_deref().and_then(pids),
                    // Pressure files are a cgroup v2 interface.
                    pressure: PressureStats::default(),
                };
                if !detailed {
                    return CgroupDetails { stats, ..Default::default() };
                }
                let procs_dir: Option<PathBuf> = pids_dir.or_else(|| dir("memory")).or_else(|| cpu_dir.clone());
                CgroupDetails {
                    stats,
                    cpu_spec: cpu_dir.as_deref().and_then(spec::read_v1),
                    io: dir("blkio").and_then(|d| io::read_v1(&d)),
                    processes: procs_dir.as_deref().and_then(procs),
                }
            }
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

fn pids(dir: &Path) -> Option<PidsStats> {
    // libcgroups reads `max` as limit 0.
    pid_stats(dir).ok().map(|p| PidsStats { current: p.current, limit: (p.limit > 0).then_some(p.limit) })
}

/// The pids in `dir`'s `cgroup.procs`.
fn procs(dir: &Path) -> Option<Vec<i32>> {
    let text = fs::read_to_string(dir.join("cgroup.procs")).ok()?;
    Some(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
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

fn memory_v2(dir: &Path, detailed: bool) -> Option<MemoryStats> {
    let usage = single(&dir.join("memory.current"))?;
    let stat = flat_keyed(&dir.join("memory.stat")).unwrap_or_default();
    let events = flat_keyed(&dir.join("memory.events")).unwrap_or_default();
    let get = |map: &HashMap<String, u64>, key: &str| map.get(key).copied().unwrap_or(0);
    let swap_limit = limit(&dir.join("memory.swap.max"));
    Some(MemoryStats {
        usage_bytes: usage,
        working_set_bytes: usage.saturating_sub(get(&stat, "inactive_file")),
        rss_bytes: get(&stat, "anon"),
        cache_bytes: get(&stat, "file"),
        mapped_file_bytes: get(&stat, "file_mapped"),
        page_faults: get(&stat, "pgfault"),
        major_page_faults: get(&stat, "pgmajfault"),
        own_page_faults: get(&stat, "pgfault"),
        own_major_page_faults: get(&stat, "pgmajfault"),
        limit_bytes: limit(&dir.join("memory.max")),
        swap_bytes: single(&dir.join("memory.swap.current")),
        swap_limit_bytes: swap_limit,
        swap_setting_bytes: swap_limit,
        fail_count: get(&events, "max"),
        oom_kills: get(&events, "oom_kill"),
        kernel_bytes: stat.get("kernel").copied(),
        max_usage_bytes: if detailed { single(&dir.join("memory.peak")) } else { None },
    })
}

fn memory_v1(dir: &Path, detailed: bool) -> Option<MemoryStats> {
    let usage = single(&dir.join("memory.usage_in_bytes"))?;
    let stat = flat_keyed(&dir.join("memory.stat")).unwrap_or_default();
    let get = |key: &str| stat.get(key).copied().unwrap_or(0);
    let memsw = single(&dir.join("memory.memsw.usage_in_bytes"));
    let limit_bytes = limit(&dir.join("memory.limit_in_bytes"));
    let memsw_limit = limit(&dir.join("memory.memsw.limit_in_bytes"));
    let extra = |file: &str| if detailed { single(&dir.join(file)) } else { None };
    Some(MemoryStats {
        usage_bytes: usage,
        working_set_bytes: usage.saturating_sub(get("total_inactive_file")),
        rss_bytes: get("total_rss"),
        cache_bytes: get("total_cache"),
        mapped_file_bytes: get("total_mapped_file"),
        page_faults: get("total_pgfault"),
        major_page_faults: get("total_pgmajfault"),
        own_page_faults: get("pgfault"),
        own_major_page_faults: get("pgmajfault"),
        limit_bytes,
        swap_bytes: memsw.map(|both| both.saturating_sub(usage)),
        swap_limit_bytes: memsw_limit.map(|both| both.saturating_sub(limit_bytes.unwrap_or(0))),
        swap_setting_bytes: memsw_limit,
        fail_count: single(&dir.join("memory.failcnt")).unwrap_or(0),
        oom_kills: super::oom::oom_kills(dir).unwrap_or(0),
        kernel_bytes: extra("memory.kmem.usage_in_bytes"),
        max_usage_bytes: extra("memory.max_usage_in_bytes"),
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

    #[test]
    fn v2_memory_reads_stat_keys_and_leaves_missing_files_empty() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::write(d.join("memory.current"), "1000\n").unwrap();
        fs::write(
            d.join("memory.stat"),
            "anon 300\nfile 600\nfile_mapped 50\ninactive_file 200\npgfault 9\npgmajfault 1\n",
        )
        .unwrap();
        fs::write(d.join("memory.max"), "max\n").unwrap();
        fs::write(d.join("memory.peak"), "4096\n").unwrap();
        let m = memory_v2(d, true).unwrap();
        assert_eq!((m.working_set_bytes, m.mapped_file_bytes, m.own_page_faults), (800, 50, 9));
        assert_eq!(m.limit_bytes, None);
        assert_eq!(m.kernel_bytes, None, "no `kernel` key (before Linux 5.18): none, not 0");
        assert_eq!(m.swap_bytes, None, "no swap accounting");
        assert_eq!(m.max_usage_bytes, Some(4096));
        assert_eq!(memory_v2(d, false).unwrap().max_usage_bytes, None, "the stats depth does not read it");
    }

    #[test]
    fn v1_memory_keeps_own_and_hierarchical_faults_apart() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::write(d.join("memory.usage_in_bytes"), "1000\n").unwrap();
        fs::write(
            d.join("memory.stat"),
            "pgfault 5\npgmajfault 1\ntotal_pgfault 50\ntotal_pgmajfault 10\ntotal_mapped_file 7\n",
        )
        .unwrap();
        fs::write(d.join("memory.limit_in_bytes"), "67108864\n").unwrap();
        fs::write(d.join("memory.memsw.usage_in_bytes"), "1000\n").unwrap();
        fs::write(d.join("memory.memsw.limit_in_bytes"), "67108864\n").unwrap();
        fs::write(d.join("memory.kmem.usage_in_bytes"), "2048\n").unwrap();
        let m = memory_v1(d, true).unwrap();
        assert_eq!((m.own_page_faults, m.own_major_page_faults, m.page_faults, m.major_page_faults), (5, 1, 50, 10));
        assert_eq!(m.mapped_file_bytes, 7);
        assert_eq!((m.swap_limit_bytes, m.swap_setting_bytes), (Some(0), Some(67_108_864)));
        assert_eq!(m.kernel_bytes, Some(2048));
        assert_eq!(m.max_usage_bytes, None, "no memory.max_usage_in_bytes here");
    }
}
