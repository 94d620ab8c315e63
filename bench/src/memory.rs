//! The memory phase: RSS and PSS (from `/proc/PID/smaps_rollup`) of each
//! daemon idle and with 10 and 100 pods of one `sleep` container each, and of
//! the processes the runtime runs per pod — every process in the runtime's
//! cgroups except the daemon and the containers' own (nidus: pause +
//! monitor, and the daemon's spare monitor shared by all; containerd: shim +
//! pause). Beside them, the working set (kubelet's measure: memory charged,
//! kernel included, less inactive file cache) of the runtime's whole cgroup
//! tree — daemon, its processes, the pods' cgroups — at 10 and 100 pods: what
//! each pod added costs the node, and so how many pods fit in a GiB.

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
/// A GiB in kB.
const GIB_KB: u64 = 1024 * 1024;
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
    /// Working set of the runtime's cgroup tree (daemon, its processes and
    /// the pods' cgroups) with 10 and 100 pods.
    pub working_set_kb_10: u64,
    pub working_set_kb_100: u64,
    /// What each pod from the 11th to the 100th added to that working set.
    pub working_set_kb_per_pod: u64,
    /// A GiB over `working_set_kb_per_pod`.
    pub pods_per_gib: u64,
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
        // A failure here still removes the pods started so far (below).
        let now = daemon(rt).and_then(|memory| {
            let working_set = rt
                .cgroup
                .working_set_kb()
                .with_context(|| format!("no memory controller in the harness cgroup {}", rt.cgroup_label()))?;
            Ok((memory, working_set))
        });
        let (memory, working_set) = match now {
            Ok(now) => now,
            Err(e) => {
                errors.push(format!("{e:#}"));
                break;
            }
        };
        let taken = (memory.rss_kb, memory.pss_kb, working_set);
        match count {
            10 => (figures.daemon_rss_kb_10, figures.daemon_pss_kb_10, figures.working_set_kb_10) = taken,
            _ => (figures.daemon_rss_kb_100, figures.daemon_pss_kb_100, figures.working_set_kb_100) = taken,
        }
        eprintln!(
            "  {}: {count} pods, daemon RSS {} kB, PSS {} kB; working set of its cgroups {working_set} kB",
            rt.name(),
            memory.rss_kb,
            memory.pss_kb
        );
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
    let added = (POD_COUNTS[1] - POD_COUNTS[0]) as u64;
    figures.working_set_kb_per_pod = figures.working_set_kb_100.saturating_sub(figures.working_set_kb_10) / added;
    figures.pods_per_gib = match figures.working_set_kb_per_pod {
        0 => 0,
        per_pod => GIB_KB / per_pod,
    };
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

pub type ByProgram = BTreeMap<String, (usize, Memory)>;

/// Sum of the memory of the runtime-owned processes, their count, and the
/// same by program name.
async fn per_pod_figures(rt: &Runtime, target: &Target, pods: &[SleepingPod]) -> Result<(Memory, usize, ByProgram)> {
    let container_pids = container_pids(rt, target, pods).await?;
    Ok(runtime_memory(rt, &container_pids, true))
}

/// The pids of the pods' containers (from their verbose status), each
/// checked to be inside the runtime's harness cgroup.
pub async fn container_pids(rt: &Runtime, target: &Target, pods: &[SleepingPod]) -> Result<Vec<i32>> {
    let mut container_pids = Vec::with_capacity(pods.len());
    for pod in pods {
        let info = target.cri.container_info(&pod.container_id).await?;
        let pid =
            info["pid"].as_i64().with_context(|| format!("no pid in the verbose status of {}", pod.container_id))?;
        container_pids.push(pid as i32);
    }
    let owned = rt.processes();
    for pid in &container_pids {
        if !owned.contains(pid) {
            bail!("container process {pid} of {} is outside the harness cgroup {}", rt.name(), rt.cgroup_label());
        }
    }
    Ok(container_pids)
}

/// The memory of every process the runtime runs besides the daemon and the
/// containers (`container_pids`), their count, and the same by program name;
/// `with_helpers`: the daemon's own helpers too (nidus's spare monitors).
pub fn runtime_memory(rt: &Runtime, container_pids: &[i32], with_helpers: bool) -> (Memory, usize, ByProgram) {
    let mut owned = rt.processes();
    // The daemon's spare monitors are runtime memory, shared by all pods.
    if with_helpers {
        owned.extend(rt.helpers());
    }
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
    (total, count, by_program)
}
