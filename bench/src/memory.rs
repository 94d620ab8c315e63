//! The memory phase: RSS and PSS (from `/proc/PID/smaps_rollup`) of each
//! daemon idle and with 10 and 100 pods of one `sleep` container each, and of
//! the processes the runtime runs per pod — every process in the runtime's
//! cgroups except the daemon and the containers' own (nidus: pause +
//! monitor, and the daemon's spare monitor shared by all; containerd: shim +
//! pause).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::host::{self, Memory};
use crate::lifecycle::{SleepingPod, Target};
use crate::pods;
use crate::runtime::Runtime;

/// Pods running while the daemon is measured, in order.
pub const POD_COUNTS: [usize; 2] = [10, 100];
/// Time given to a daemon to settle after pods started, before it is measured.
const SETTLE: Duration = Duration::from_secs(2);

/// One runtime's memory figures (`latest.json` → `<runtime>.memory`, plus PSS
/// and the per-process breakdown).
#[derive(Debug, Clone, Serialize, Default)]
pub struct MemoryFigures {
    pub daemon_rss_kb_idle: u64,
    pub daemon_rss_kb_10: u64,
    pub daemon_rss_kb_100: u64,
    pub per_pod_rss_kb: u64,
    pub per_pod_pss_kb: u64,
    pub daemon_pss_kb_idle: u64,
    pub daemon_pss_kb_10: u64,
    pub daemon_pss_kb_100: u64,
    /// Runtime-owned processes per pod.
    pub processes_per_pod: f64,
    /// Mean RSS/PSS per pod of each runtime-owned program, by command name.
    pub per_pod_by_program: BTreeMap<String, ProgramMemory>,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct ProgramMemory {
    pub processes_per_pod: f64,
    pub rss_kb: u64,
    pub pss_kb: u64,
}

/// The daemon's memory now.
pub fn daemon(rt: &Runtime) -> Result<Memory> {
    let pid = rt.daemon_pid().context("the daemon is not running")?;
    host::memory_of(pid)
}

/// Starts 10 then 100 sleeping pods, measures, and removes them again.
pub async fn measure(rt: &Runtime, target: &Target, concurrency: usize, figures: &mut MemoryFigures) -> Result<()> {
    let mut pods = Vec::new();
    let mut errors = Vec::new();
    for count in POD_COUNTS {
        let more = pods::start_many(
            target,
            pods::names(&format!("mem-{}", rt.name()), pods.len(), count - pods.len()),
            concurrency,
        )
        .await;
        pods.extend(more.pods);
        errors.extend(more.errors);
        if !errors.is_empty() {
            break;
        }
        tokio::time::sleep(SETTLE).await;
        let memory = daemon(rt)?;
        match count {
            10 => (figures.daemon_rss_kb_10, figures.daemon_pss_kb_10) = (memory.rss_kb, memory.pss_kb),
            _ => (figures.daemon_rss_kb_100, figures.daemon_pss_kb_100) = (memory.rss_kb, memory.pss_kb),
        }
        eprintln!("  {}: {count} pods, daemon RSS {} kB, PSS {} kB", rt.name(), memory.rss_kb, memory.pss_kb);
    }
    let measured = if errors.is_empty() {
        match per_pod_figures(rt, target, &pods).await {
            Ok(f) => Some(f),
            Err(e) => {
                errors.push(format!("{e:#}"));
                None
            }
        }
    } else {
        None
    };
    let (_, removal_errors) = pods::remove_many(target, &pods, concurrency).await;
    errors.extend(removal_errors);
    if !errors.is_empty() {
        bail!("memory phase of {}: {}", rt.name(), errors.join("; "));
    }
    if let Some((total, processes, by_program)) = measured {
        let n = pods.len() as u64;
        figures.per_pod_rss_kb = total.rss_kb / n;
        figures.per_pod_pss_kb = total.pss_kb / n;
        figures.processes_per_pod = processes as f64 / n as f64;
        figures.per_pod_by_program = by_program
            .into_iter()
            .map(|(name, (count, m))| {
                (
                    name,
                    ProgramMemory {
                        processes_per_pod: count as f64 / n as f64,
                        rss_kb: m.rss_kb / n,
                        pss_kb: m.pss_kb / n,
                    },
                )
            })
            .collect();
    }
    Ok(())
}

type ByProgram = BTreeMap<String, (usize, Memory)>;

/// Sum of the memory of the runtime-owned processes, their count, and the
/// same by program name.
async fn per_pod_figures(rt: &Runtime, target: &Target, pods: &[SleepingPod]) -> Result<(Memory, usize, ByProgram)> {
    let mut container_pids = Vec::with_capacity(pods.len());
    for pod in pods {
        let info = target.cri.container_info(&pod.container_id).await?;
        let pid =
            info["pid"].as_i64().with_context(|| format!("no pid in the verbose status of {}", pod.container_id))?;
        container_pids.push(pid as i32);
    }
    let mut owned = rt.processes();
    for pid in &container_pids {
        if !owned.contains(pid) {
            bail!("container process {pid} of {} is outside the harness cgroup {}", rt.name(), rt.cgroup_label());
        }
    }
    // The daemon's spare monitors count too: runtime memory, shared by all pods.
    owned.extend(rt.helpers());
    let mut total = Memory::default();
    let mut count = 0;
    let mut by_program = ByProgram::new();
    for pid in owned.iter().filter(|p| !container_pids.contains(p)) {
        let Ok(memory) = host::memory_of(*pid) else { continue };
        total = total + memory;
        count += 1;
        let entry = by_program.entry(host::comm_of(*pid)).or_default();
        entry.0 += 1;
        entry.1 = entry.1 + memory;
    }
    Ok((total, count, by_program))
}
