//! The idle cost with the pods running and nothing asked: the CPU time of
//! the runtime's own processes over one window (utime + stime of
//! `/proc/PID/stat`, in CPU seconds per minute; nidus: the daemon, its
//! monitors and pauses; containerd: the daemon, its shims and pauses — every
//! process in the runtime's cgroups but the containers'), both runtimes in
//! the same window; then the daemon's RSS/PSS, and per pod the RSS/PSS of
//! what the runtime runs beside the container (pause + monitor against
//! pause + shim, `memory::runtime_memory`; the daemon's spare helpers,
//! shared by all pods, apart), and the working set of the runtime's whole
//! cgroup tree.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;

use super::{AtN, Side};
use crate::host::{self, Memory};
use crate::memory::{self, ProgramMemory};
use crate::stats::{ratio, round3};

/// One runtime's idle figures at one pod count.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Idle {
    pub pods: usize,
    pub window_s: f64,
    /// CPU seconds per minute of every runtime process together.
    pub cpu_s_per_min: f64,
    /// The same by program (command name).
    pub cpu_s_per_min_by_program: BTreeMap<String, f64>,
    /// Runtime processes (daemon included).
    pub processes: usize,
    pub daemon_rss_kb: u64,
    pub daemon_pss_kb: u64,
    /// The daemon's own helpers outside any pod (nidus's spare monitor and
    /// its forked init), shared by all pods, not in the per-pod figures.
    pub helpers_rss_kb: u64,
    pub helpers_pss_kb: u64,
    /// What the runtime runs per pod beside the container (pause + monitor,
    /// pause + shim): every runtime process but the daemon and its helpers.
    pub per_pod_rss_kb: u64,
    pub per_pod_pss_kb: u64,
    pub per_pod_by_program: BTreeMap<String, ProgramMemory>,
    /// Working set of the runtime's cgroup tree (daemon, its processes, the pods).
    pub working_set_kb: Option<u64>,
}

/// A process's CPU time so far, and its identity (start time, name).
#[derive(Debug, Clone)]
struct Cpu {
    start: u64,
    ticks: u64,
    comm: String,
}

/// Measures both runtimes over the same `window`; (nidus, containerd).
pub async fn measure(sides: &[Side<'_>; 2], window: Duration) -> Result<(Idle, Idle)> {
    let mut containers = Vec::new();
    for side in sides {
        containers.push(memory::container_pids(side.rt, &side.target(), &side.pods).await?);
    }
    let own = |s: usize| -> BTreeSet<i32> {
        let mut pids = sides[s].rt.cgroup.processes();
        pids.retain(|p| !containers[s].contains(p));
        pids
    };
    let before: Vec<BTreeMap<i32, Cpu>> = (0..2).map(|s| cpu_of(&own(s))).collect();
    let began = Instant::now();
    tokio::time::sleep(window).await;
    let elapsed = began.elapsed();
    let after: Vec<BTreeMap<i32, Cpu>> = (0..2).map(|s| cpu_of(&own(s))).collect();
    let tick = tick_seconds()?;
    let mut idle = Vec::new();
    for (s, side) in sides.iter().enumerate() {
        let per_minute = 60.0 / elapsed.as_secs_f64();
        let mut by_program: BTreeMap<String, f64> = BTreeMap::new();
        for (pid, now) in &after[s] {
            // A process that started within the window counts whole.
            let then = before[s].get(pid).filter(|b| b.start == now.start).map(|b| b.ticks).unwrap_or(0);
            *by_program.entry(now.comm.clone()).or_default() += now.ticks.saturating_sub(then) as f64 * tick;
        }
        let total: f64 = by_program.values().sum();
        let daemon = memory::daemon(side.rt)?;
        let (runtime, _, programs) = memory::runtime_memory(side.rt, &containers[s], false);
        let helpers =
            side.rt.helpers().iter().filter_map(|pid| host::memory_of(*pid).ok()).fold(Memory::default(), |a, b| a + b);
        let pods = side.pods.len().max(1) as u64;
        idle.push(Idle {
            pods: side.pods.len(),
            window_s: round3(elapsed.as_secs_f64()),
            cpu_s_per_min: round3(total * per_minute),
            cpu_s_per_min_by_program: by_program.into_iter().map(|(k, v)| (k, round3(v * per_minute))).collect(),
            processes: after[s].len(),
            daemon_rss_kb: daemon.rss_kb,
            daemon_pss_kb: daemon.pss_kb,
            helpers_rss_kb: helpers.rss_kb,
            helpers_pss_kb: helpers.pss_kb,
            per_pod_rss_kb: runtime.rss_kb / pods,
            per_pod_pss_kb: runtime.pss_kb / pods,
            per_pod_by_program: programs
                .into_iter()
                .map(|(name, (count, m))| {
                    let per_pod = ProgramMemory {
                        processes_per_pod: count as f64 / pods as f64,
                        rss_kb: m.rss_kb / pods,
                        pss_kb: m.pss_kb / pods,
                    };
                    (name, per_pod)
                })
                .collect(),
            working_set_kb: side.rt.cgroup.working_set_kb(),
        });
        eprintln!(
            "  {}: {:.3} CPU s/min idle, daemon PSS {} kB, per pod PSS {} kB",
            side.rt.name(),
            total * per_minute,
            daemon.pss_kb,
            runtime.pss_kb / pods
        );
    }
    let containerd = idle.pop().context("two runtimes")?;
    let nidus = idle.pop().context("two runtimes")?;
    Ok((nidus, containerd))
}

pub fn at_n(n: usize, (nidus, containerd): (Idle, Idle)) -> AtN<Idle> {
    let ratios = BTreeMap::from([
        ("cpu_s_per_min", ratio(nidus.cpu_s_per_min, containerd.cpu_s_per_min)),
        ("daemon_pss_kb", ratio(nidus.daemon_pss_kb as f64, containerd.daemon_pss_kb as f64)),
        ("per_pod_pss_kb", ratio(nidus.per_pod_pss_kb as f64, containerd.per_pod_pss_kb as f64)),
        ("per_pod_rss_kb", ratio(nidus.per_pod_rss_kb as f64, containerd.per_pod_rss_kb as f64)),
    ]);
    AtN { n, nidus, containerd, ratios }
}

fn cpu_of(pids: &BTreeSet<i32>) -> BTreeMap<i32, Cpu> {
    pids.iter()
        .filter_map(|&pid| {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            Some((pid, parse_stat(&stat)?))
        })
        .collect()
}

/// utime + stime (fields 14, 15) and starttime (22) of `/proc/PID/stat`, with the command name.
fn parse_stat(stat: &str) -> Option<Cpu> {
    let (head, rest) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_string();
    // Fields resume at 3 (state) after the name.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Cpu { ticks: field(14)? + field(15)?, start: field(22)?, comm })
}

/// Seconds per clock tick (`_SC_CLK_TCK`).
fn tick_seconds() -> Result<f64> {
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .context("sysconf(_SC_CLK_TCK)")?
        .context("no _SC_CLK_TCK")?;
    Ok(1.0 / ticks as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields() {
        let stat = "4242 (containerd-shim) S 1 4242 4242 0 -1 4194560 3 0 0 0 17 4 0 0 20 0 11 0 98765 1 2 3";
        let cpu = parse_stat(stat).unwrap();
        assert_eq!((cpu.ticks, cpu.start, cpu.comm.as_str()), (21, 98765, "containerd-shim"));
        assert!(parse_stat("1 (x) S 1").is_none());
    }
}
