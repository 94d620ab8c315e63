//! A busy node: the core lifecycle (`lifecycle::timed_lifecycle`; reported:
//! pod + container and create + start) of both runtimes, taking turns,
//! first on a quiet machine and then with one CPU hog per core — a shell
//! busy loop at normal priority in the harness's cgroup (below it if the
//! hierarchy refuses processes there), killed by pid at the end, also when
//! the measure fails or is interrupted.

use std::collections::BTreeMap;
use std::fs;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use nix::sys::signal::Signal;
use serde::Serialize;

use crate::cgroups::CgroupTree;
use crate::cri::PodNetwork;
use crate::host;
use crate::lifecycle::{timed_lifecycle, Step, Target};
use crate::stats::{figures, ratio, StepFigures};

/// The steps reported, in table order.
pub const STEPS: [Step; 5] =
    [Step::PodAndContainer, Step::CreateAndStart, Step::RunPodSandbox, Step::CreateContainer, Step::StartContainer];

/// Both runtimes under one condition.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Condition {
    /// CPU hogs running.
    pub hogs: usize,
    pub nidus: BTreeMap<&'static str, StepFigures>,
    pub containerd: BTreeMap<&'static str, StepFigures>,
    /// nidus/containerd of each step's p50.
    pub ratios: BTreeMap<&'static str, Option<f64>>,
}

/// `latest.json` → `scale.busy`.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Busy {
    pub iterations: usize,
    pub quiet: Condition,
    pub hogs: Condition,
}

/// `iterations` lifecycles per runtime without hogs, then with one per
/// core; `targets` are (label, target) of nidus then containerd. The
/// figures, and the failed lifecycles.
pub async fn run(
    targets: &[(&'static str, Target); 2],
    iterations: usize,
    cgroup: &CgroupTree,
) -> Result<(Busy, Vec<String>)> {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut errors = Vec::new();
    let quiet = condition(targets, iterations, 0, "quiet", &mut errors).await;
    let hogs = Hogs::start(cgroup, cores)?;
    eprintln!("  {cores} hogs running: pids {:?}", hogs.pids());
    let loaded = condition(targets, iterations, cores, "hogs", &mut errors).await;
    drop(hogs);
    Ok((Busy { iterations, quiet, hogs: loaded }, errors))
}

async fn condition(
    targets: &[(&'static str, Target); 2],
    iterations: usize,
    hogs: usize,
    name: &str,
    errors: &mut Vec<String>,
) -> Condition {
    let mut samples: [BTreeMap<Step, Vec<Duration>>; 2] = Default::default();
    // One untimed lifecycle each first.
    for i in 0..=iterations {
        for k in 0..2 {
            let s = (i + k) % 2;
            let (label, target) = &targets[s];
            let pod = format!("busy-{name}-{}-{i}", label.replace('_', "-"));
            match timed_lifecycle(target, &pod, PodNetwork::Node).await {
                Ok(times) if i > 0 => {
                    for (step, took) in times {
                        samples[s].entry(step).or_default().push(took);
                    }
                }
                Ok(_) => {}
                Err(e) => errors.push(format!("scale busy ({name}) {label}: {e:#}")),
            }
        }
    }
    let summary = |s: &BTreeMap<Step, Vec<Duration>>| -> BTreeMap<&'static str, StepFigures> {
        STEPS.iter().filter_map(|step| Some((step.key(), figures(s.get(step)?)?))).collect()
    };
    let (nidus, containerd) = (summary(&samples[0]), summary(&samples[1]));
    let ratios = STEPS
        .iter()
        .map(|step| {
            let key = step.key();
            (key, nidus.get(key).zip(containerd.get(key)).and_then(|(a, b)| ratio(a.p50_ms, b.p50_ms)))
        })
        .collect();
    Condition { hogs, nidus, containerd, ratios }
}

/// CPU hogs; killed (by pid) and reaped when dropped.
struct Hogs {
    children: Vec<Child>,
}

impl Hogs {
    /// Starts `count` busy loops and moves them into `cgroup` in every
    /// hierarchy (or into its child `hogs` where it cannot hold processes).
    fn start(cgroup: &CgroupTree, count: usize) -> Result<Self> {
        let mut hogs = Hogs { children: Vec::new() };
        let mut place = cgroup.clone();
        for _ in 0..count {
            let child = Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting a CPU hog")?;
            let pid = child.id();
            hogs.children.push(child);
            if join(&place, pid).is_err() {
                place = match cgroup.descendants().iter().any(|d| d.ends_with("hogs")) {
                    true => CgroupTree {
                        relative: format!("{}/hogs", cgroup.relative),
                        dirs: cgroup.dirs.iter().map(|d| d.join("hogs")).collect(),
                    },
                    false => cgroup.child("hogs")?,
                };
                join(&place, pid).with_context(|| format!("moving the CPU hog {pid} into {}", place.relative))?;
            }
        }
        Ok(hogs)
    }

    fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }
}

fn join(cgroup: &CgroupTree, pid: u32) -> Result<()> {
    for procs in cgroup.procs_files() {
        fs::write(&procs, pid.to_string()).with_context(|| format!("writing {}", procs.display()))?;
    }
    Ok(())
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for child in &mut self.children {
            host::signal(child.id() as i32, Signal::SIGKILL);
            let _ = child.wait();
        }
    }
}
