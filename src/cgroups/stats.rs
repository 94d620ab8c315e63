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
//! whole when any one is missing. Files are read through `files::CgroupDir`.

pub(crate) mod files;
pub(crate) mod io;
pub(crate) mod pressure;
pub(crate) mod spec;

use std::collections::HashMap;

use serde::Serialize;

use super::{CgroupPath, CgroupVersion, Cgroups};
pub(crate) use files::parse_flat_keyed;
use files::CgroupDir;
pub(crate) use io::DeviceIo;
pub(crate) use pressure::{Pressure, PressureLine, PressureStats};
pub(crate) use spec::CpuSpec;

/// Limits at or above this are "no limit" (v1 prints a page-rounded i64::MAX).
const NO_LIMIT: u64 = 1 << 62;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct CpuStats {
    /// Total cpu time, in nanoseconds.
    pub(crate) usage_ns: u64,
    pub(crate) user_ns: u64,
    pub(crate) system_ns: u64,
    /// CFS bandwidth periods elapsed, and those in which the cgroup was throttled.
    pub(crate) periods: u64,
    pub(crate) throttled_periods: u64,
    pub(crate) throttled_ns: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct MemoryStats {
    pub(crate) usage_bytes: u64,
    pub(crate) working_set_bytes: u64,
    /// Anonymous memory (v1 `total_rss`, v2 `anon`).
    pub(crate) rss_bytes: u64,
    /// Page cache.
    pub(crate) cache_bytes: u64,
    /// Page cache mapped into processes (v1 `total_mapped_file`, v2 `file_mapped`).
    pub(crate) mapped_file_bytes: u64,
    /// Page faults of the cgroup and below (v1 `total_pgfault`, v2 `pgfault`).
    pub(crate) page_faults: u64,
    pub(crate) major_page_faults: u64,
    /// Page faults of the cgroup's own tasks (v1 `pgfault`; v2 counts the
    /// whole subtree only, so the same as `page_faults`).
    pub(crate) own_page_faults: u64,
    pub(crate) own_major_page_faults: u64,
    /// None: no limit.
    pub(crate) limit_bytes: Option<u64>,
    /// Swap in use (None: no swap accounting).
    pub(crate) swap_bytes: Option<u64>,
    /// Swap allowed (None: no limit, or no accounting).
    pub(crate) swap_limit_bytes: Option<u64>,
    /// The swap setting as written: v1 memory + swap (`memory.memsw.limit_in_bytes`),
    /// v2 swap alone (`memory.swap.max`); None: no limit, or no accounting.
    pub(crate) swap_setting_bytes: Option<u64>,
    /// Times the limit was hit (v1 `failcnt`, v2 `max` events).
    pub(crate) fail_count: u64,
    pub(crate) oom_kills: u64,
    /// Kernel memory (v2 `kernel` of `memory.stat`, Linux 5.18+; v1
    /// `memory.kmem.usage_in_bytes`, read by `details` only).
    pub(crate) kernel_bytes: Option<u64>,
    /// The most ever used (v1 `memory.max_usage_in_bytes`, v2 `memory.peak`,
    /// Linux 5.19+); read by `details` only.
    pub(crate) max_usage_bytes: Option<u64>,
}

impl MemoryStats {
    /// What may still be allocated before the limit: limit − working set.
    pub(crate) fn available_bytes(&self) -> Option<u64> {
        self.limit_bytes.map(|l| l.saturating_sub(self.working_set_bytes))
    }
}

/// Tasks (threads) in the cgroup and below, and the limit on them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct PidsStats {
    pub(crate) current: u64,
    /// None: no limit (`max`).
    pub(crate) limit: Option<u64>,
}

/// One reading of a cgroup; a part is None when its controller (or the
/// kernel's support for it) is absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct CgroupStats {
    pub(crate) cpu: Option<CpuStats>,
    pub(crate) memory: Option<MemoryStats>,
    pub(crate) pids: Option<PidsStats>,
    pub(crate) pressure: PressureStats,
}

/// A reading for metrics: the stats and what only metrics need.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct CgroupDetails {
    pub(crate) stats: CgroupStats,
    pub(crate) cpu_spec: Option<CpuSpec>,
    /// Block I/O per device (None: no io/blkio controller there).
    pub(crate) io: Option<Vec<DeviceIo>>,
    /// The processes directly in the cgroup (`cgroup.procs`).
    pub(crate) processes: Option<Vec<i32>>,
}

impl Cgroups {
    /// Reads what the CRI stats need of `path`; a missing cgroup gives an empty reading.
    pub(crate) fn stats(&self, path: &CgroupPath) -> CgroupStats {
        self.read(path, false).stats
    }

    /// Reads everything metrics report of `path`.
    pub(crate) fn details(&self, path: &CgroupPath) -> CgroupDetails {
        self.read(path, true)
    }

    fn read(&self, path: &CgroupPath, detailed: bool) -> CgroupDetails {
        let dir = |controller: &str| self.controller_dir(path, controller).and_then(|d| CgroupDir::open(&d));
        match self.version {
            CgroupVersion::V2 => {
                let Some(dir) = self.hierarchies.first().and_then(|h| CgroupDir::open(&h.root_dir.join(path.as_str())))
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
                CgroupDetails { stats, cpu_spec: spec::read_v2(&dir), io: io::read_v2(&dir), processes: dir.procs() }
            }
            CgroupVersion::V1 => {
                let cpu_dir = dir("cpu");
                let pids_dir = dir("pids");
                let memory_dir = dir("memory");
                let stats = CgroupStats {
                    cpu: dir("cpuacct").and_then(|acct| cpu_v1(&acct, cpu_dir.as_ref())),
                    memory: memory_dir.as_ref().and_then(|d| memory_v1(d, detailed)),
                    pids: pids_dir.as_ref().and_then(pids),
                    // Pressure files are a cgroup v2 interface.
                    pressure: PressureStats::default(),
                };
                if !detailed {
                    return CgroupDetails { stats, ..Default::default() };
                }
                let procs_dir = pids_dir.as_ref().or(memory_dir.as_ref()).or(cpu_dir.as_ref());
                CgroupDetails {
                    stats,
                    cpu_spec: cpu_dir.as_ref().and_then(spec::read_v1),
                    io: dir("blkio").and_then(|d| io::read_v1(&d)),
                    processes: procs_dir.and_then(CgroupDir::procs),
                }
            }
        }
    }
}

fn limit(dir: &CgroupDir, name: &str) -> Option<u64> {
    dir.single(name).filter(|l| *l < NO_LIMIT)
}

fn pids(dir: &CgroupDir) -> Option<PidsStats> {
    Some(PidsStats { current: dir.single("pids.current")?, limit: limit(dir, "pids.max") })
}

fn cpu_v2(dir: &CgroupDir) -> Option<CpuStats> {
    let stat = dir.flat_keyed("cpu.stat")?;
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

fn cpu_v1(cpuacct: &CgroupDir, cpu: Option<&CgroupDir>) -> Option<CpuStats> {
    let usage_ns = cpuacct.single("cpuacct.usage")?;
    // cpuacct.stat counts USER_HZ ticks (100 per second on Linux).
    let ticks = cpuacct.flat_keyed("cpuacct.stat").unwrap_or_default();
    let tick_ns = |key: &str| ticks.get(key).copied().unwrap_or(0).saturating_mul(10_000_000);
    let throttling = cpu.and_then(|d| d.flat_keyed("cpu.stat")).unwrap_or_default();
    Some(CpuStats {
        usage_ns,
        user_ns: tick_ns("user"),
        system_ns: tick_ns("system"),
        periods: throttling.get("nr_periods").copied().unwrap_or(0),
        throttled_periods: throttling.get("nr_throttled").copied().unwrap_or(0),
        throttled_ns: throttling.get("throttled_time").copied().unwrap_or(0),
    })
}

fn memory_v2(dir: &CgroupDir, detailed: bool) -> Option<MemoryStats> {
    let usage = dir.single("memory.current")?;
    let stat = dir.flat_keyed("memory.stat").unwrap_or_default();
    let events = dir.flat_keyed("memory.events").unwrap_or_default();
    let get = |map: &HashMap<String, u64>, key: &str| map.get(key).copied().unwrap_or(0);
    let swap_limit = limit(dir, "memory.swap.max");
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
        limit_bytes: limit(dir, "memory.max"),
        swap_bytes: dir.single("memory.swap.current"),
        swap_limit_bytes: swap_limit,
        swap_setting_bytes: swap_limit,
        fail_count: get(&events, "max"),
        oom_kills: get(&events, "oom_kill"),
        kernel_bytes: stat.get("kernel").copied(),
        max_usage_bytes: if detailed { dir.single("memory.peak") } else { None },
    })
}

fn memory_v1(dir: &CgroupDir, detailed: bool) -> Option<MemoryStats> {
    let usage = dir.single("memory.usage_in_bytes")?;
    let stat = dir.flat_keyed("memory.stat").unwrap_or_default();
    let get = |key: &str| stat.get(key).copied().unwrap_or(0);
    let memsw = dir.single("memory.memsw.usage_in_bytes");
    let limit_bytes = limit(dir, "memory.limit_in_bytes");
    let memsw_limit = limit(dir, "memory.memsw.limit_in_bytes");
    let extra = |file: &str| if detailed { dir.single(file) } else { None };
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
        fail_count: dir.single("memory.failcnt").unwrap_or(0),
        // What oom::oom_kills reads on v1.
        oom_kills: dir.flat_keyed("memory.oom_control").and_then(|m| m.get("oom_kill").copied()).unwrap_or(0),
        kernel_bytes: extra("memory.kmem.usage_in_bytes"),
        max_usage_bytes: extra("memory.max_usage_in_bytes"),
    })
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

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
        let cgroup = CgroupDir::open(d).unwrap();
        let m = memory_v2(&cgroup, true).unwrap();
        assert_eq!((m.working_set_bytes, m.mapped_file_bytes, m.own_page_faults), (800, 50, 9));
        assert_eq!(m.limit_bytes, None);
        assert_eq!(m.kernel_bytes, None, "no `kernel` key (before Linux 5.18): none, not 0");
        assert_eq!(m.swap_bytes, None, "no swap accounting");
        assert_eq!(m.max_usage_bytes, Some(4096));
        assert_eq!(memory_v2(&cgroup, false).unwrap().max_usage_bytes, None, "the stats depth does not read it");
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
        let m = memory_v1(&CgroupDir::open(d).unwrap(), true).unwrap();
        assert_eq!((m.own_page_faults, m.own_major_page_faults, m.page_faults, m.major_page_faults), (5, 1, 50, 10));
        assert_eq!(m.mapped_file_bytes, 7);
        assert_eq!((m.swap_limit_bytes, m.swap_setting_bytes), (Some(0), Some(67_108_864)));
        assert_eq!(m.kernel_bytes, Some(2048));
        assert_eq!(m.max_usage_bytes, None, "no memory.max_usage_in_bytes here");
    }
}
