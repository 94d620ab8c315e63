//! The scale step (issue 43): what a kubelet asks of its runtime all day on
//! a full node, and how each cost grows with the number of pods. At each
//! pod count of `BENCH_SCALE`, nidus and containerd + runc each get that
//! many pods of one `sleep` container (started at `BENCH_CONCURRENCY`,
//! containerd's stopped early if the machine runs short of memory), and
//! both are measured side by side: the PLEG relist (`relist`), the stats
//! round of the summary API and the eviction manager (`stats_round`), both
//! timed round by round, the runtimes taking turns (`rounds`); the
//! idle cost in CPU and memory (`idle`), the restart of the daemon alone
//! with its pods on disk (`restart`), then the pods are removed and checked
//! for leaks (`density`). Once at the end, the core lifecycle with and
//! without one CPU hog per core (`busy`). Figures go to `latest.json`'s
//! `scale` and `latest.md` (`report`), with one SVG chart per measure
//! (`chart`).

mod busy;
mod chart;
mod density;
mod idle;
mod relist;
mod report;
mod restart;
mod rounds;
mod stats_round;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde::Serialize;

use crate::cgroups::CgroupTree;
use crate::cri::Cri;
use crate::lifecycle::{SleepingPod, Target};
use crate::options::ScaleOptions;
use crate::report::{TargetCheck, CONTAINERD, NIDUS};
use crate::runtime::{Runtime, Stop};
use crate::stats;

pub use report::write_alone;

/// Time given to both runtimes after their pods started, before anything is measured.
const SETTLE: Duration = Duration::from_secs(5);

/// One measure at one pod count, for both runtimes, with the ratios nidus/containerd.
#[derive(Debug, Clone, Serialize)]
pub struct AtN<T> {
    pub n: usize,
    pub nidus: T,
    pub containerd: T,
    pub ratios: BTreeMap<&'static str, Option<f64>>,
}

/// How the step was run.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Settings {
    pub counts: Vec<usize>,
    pub rounds: usize,
    pub idle_window_s: u64,
    pub busy_iterations: usize,
    pub floor_mib: u64,
    pub concurrency: usize,
    pub cpus: usize,
    pub mem_total_mib: u64,
    pub pid_max: u64,
    pub nidus_version: String,
    pub containerd_version: String,
}

/// Everything the scale step measured (`latest.json` → `scale`).
#[derive(Debug, Clone, Serialize, Default)]
pub struct ScaleFigures {
    pub settings: Settings,
    pub relist: Vec<AtN<rounds::Rounds>>,
    pub stats: Vec<AtN<rounds::Rounds>>,
    pub idle: Vec<AtN<idle::Idle>>,
    pub restart: Vec<AtN<restart::Restart>>,
    pub density: Vec<AtN<density::Density>>,
    pub busy: Option<busy::Busy>,
    pub targets: Vec<TargetCheck>,
    /// Failures of the step (failed calls, pods, restarts, leaks).
    pub errors: Vec<String>,
}

/// One runtime in the step: its pods at the current count.
struct Side<'a> {
    label: &'static str,
    rt: &'a mut Runtime,
    image: &'static str,
    pods: Vec<SleepingPod>,
}

impl Side<'_> {
    fn target(&self) -> Target {
        Target {
            cri: self.rt.cri().clone(),
            logs: self.rt.logs.clone(),
            image: self.image,
            cgroup_parent: self.rt.pod_cgroup_parent(),
        }
    }

    fn cri(&self) -> &Cri {
        self.rt.cri()
    }
}

/// Runs the step on `nidus` and `containerd` (both started, `image` imported
/// into both); a runtime that does not come back from a restart ends it with
/// an error (the figures so far are lost with it).
pub async fn run(
    nidus: &mut Runtime,
    containerd: &mut Runtime,
    image: &'static str,
    options: &ScaleOptions,
    concurrency: usize,
    lab_cgroup: &CgroupTree,
) -> Result<ScaleFigures> {
    let mut figures = ScaleFigures {
        settings: Settings {
            counts: options.counts.clone(),
            rounds: options.rounds,
            idle_window_s: options.idle_secs,
            busy_iterations: options.busy_iterations,
            floor_mib: options.floor_mib,
            concurrency,
            cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            mem_total_mib: density::meminfo_mib("MemTotal").unwrap_or(0),
            pid_max: density::pid_max().unwrap_or(0),
            nidus_version: nidus.version.clone(),
            containerd_version: containerd.version.clone(),
        },
        ..Default::default()
    };
    let mut sides = [
        Side { label: NIDUS, rt: nidus, image, pods: Vec::new() },
        Side { label: CONTAINERD, rt: containerd, image, pods: Vec::new() },
    ];
    for &n in &options.counts {
        let began = Instant::now();
        eprintln!("scale: {n} pods per runtime");
        let outcome = at_count(&mut sides, n, options, concurrency, &mut figures).await;
        // The pods go whatever happened, while both daemons still answer.
        let mut teardown = Vec::new();
        for side in sides.iter_mut() {
            if side.rt.is_up() {
                teardown.push(density::tear_down(side, concurrency, &mut figures.errors).await);
            }
        }
        if let [nidus, containerd] = &teardown[..] {
            if let Some(at) = figures.density.iter_mut().find(|d| d.n == n) {
                at.nidus.add_teardown(nidus);
                at.containerd.add_teardown(containerd);
            }
        }
        outcome?;
        eprintln!("scale: {n} pods done in {:.0} s", began.elapsed().as_secs_f64());
    }
    if options.busy_iterations > 0 {
        eprintln!("scale: busy node, {} lifecycles per runtime without and with hogs", options.busy_iterations);
        let targets = [(NIDUS, sides[0].target()), (CONTAINERD, sides[1].target())];
        match busy::run(&targets, options.busy_iterations, lab_cgroup).await {
            Ok((busy, errors)) => {
                figures.busy = Some(busy);
                figures.errors.extend(errors);
            }
            Err(e) => figures.errors.push(format!("scale busy: {e:#}")),
        }
    }
    figures.targets = report::targets(&figures);
    Ok(figures)
}

/// One pod count: start, measure, restart (the pods are removed by the caller).
async fn at_count(
    sides: &mut [Side<'_>; 2],
    n: usize,
    options: &ScaleOptions,
    concurrency: usize,
    figures: &mut ScaleFigures,
) -> Result<()> {
    let mut started = Vec::new();
    for side in sides.iter_mut() {
        let d = density::start(side, n, concurrency, options.floor_mib).await;
        figures.errors.extend(d.errors.iter().map(|e| format!("scale {n} {}: {e}", side.label)));
        started.push(d);
    }
    let [nidus_d, containerd_d] =
        <[density::Density; 2]>::try_from(started).map_err(|_| anyhow::anyhow!("two sides"))?;
    let ratios = BTreeMap::from([("ms_per_pod", stats::ratio(nidus_d.ms_per_pod, containerd_d.ms_per_pod))]);
    figures.density.push(AtN { n, nidus: nidus_d, containerd: containerd_d, ratios });
    tokio::time::sleep(SETTLE).await;

    eprintln!("  relist and stats rounds: {} per runtime", options.rounds);
    let relist = rounds::measure(sides, options.rounds, rounds::Which::Relist).await;
    let stats_rounds = rounds::measure(sides, options.rounds, rounds::Which::Stats).await;
    let (relist, stats_rounds) = (rounds::at_n(n, relist), rounds::at_n(n, stats_rounds));
    for (at, what) in [(&relist, "relist"), (&stats_rounds, "stats round")] {
        for (label, r) in [(NIDUS, &at.nidus), (CONTAINERD, &at.containerd)] {
            if let Some(e) = &r.first_error {
                figures.errors.push(format!("scale {n} {label} {what}: {} rounds failed, first: {e}", r.failed));
            }
        }
        // A call containerd cannot answer is noted with the figures (see
        // `stats_round`); one nidus cannot answer is an error.
        for (call, (count, e)) in &at.nidus.call_errors {
            figures.errors.push(format!("scale {n} nidus {what}: {call} failed {count} times, first: {e}"));
        }
    }
    figures.relist.push(relist);
    figures.stats.push(stats_rounds);

    eprintln!("  idle: {} s", options.idle_secs);
    match idle::measure(sides, Duration::from_secs(options.idle_secs)).await {
        Ok(at) => figures.idle.push(idle::at_n(n, at)),
        Err(e) => figures.errors.push(format!("scale {n} idle: {e:#}")),
    }

    let mut restarts = [restart::Restart::default(), restart::Restart::default()];
    for stop in [Stop::Clean, Stop::Kill] {
        for (side, into) in sides.iter_mut().zip(restarts.iter_mut()) {
            eprintln!("  restart of {} ({}) with {} pods", side.label, stop.key(), side.pods.len());
            into.pods = side.pods.len();
            match restart::measure(side, stop).await {
                Ok((times, problems)) => {
                    figures.errors.extend(problems.iter().map(|p| format!("scale {n} {} restart: {p}", side.label)));
                    into.set(stop, times);
                }
                Err(e) => {
                    let message = format!("scale {n} {} restart ({}): {e:#}", side.label, stop.key());
                    if !side.rt.is_up() {
                        bail!("{message}");
                    }
                    figures.errors.push(message);
                }
            }
        }
    }
    let [nidus_r, containerd_r] = restarts;
    figures.restart.push(restart::at_n(n, nidus_r, containerd_r));
    Ok(())
}

/// Writes the charts of `figures` into `dir` (`scale-<measure>.svg`); the paths written.
pub fn charts(figures: &ScaleFigures, dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    chart::write_all(figures, dir)
}
