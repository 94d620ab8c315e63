//! The density phase: as many pods (one `sleep` container each) as start, up
//! to the requested count, `concurrency` at a time; then all torn down and
//! the leak check.

use serde::Serialize;

use crate::leaks;
use crate::lifecycle::Target;
use crate::pods;
use crate::runtime::Runtime;

/// `latest.json` → `<runtime>.density` (the first five fields), plus detail.
#[derive(Debug, Clone, Serialize, Default)]
pub struct DensityFigures {
    pub requested: usize,
    pub started: usize,
    pub failed: usize,
    pub leaked: usize,
    pub ms_per_pod: f64,
    pub teardown_ms_per_pod: f64,
    /// Pods whose empty (kubelet) pod cgroup the harness removed after the teardown.
    pub pod_cgroups_left_for_kubelet: usize,
    /// The first errors, if any.
    pub errors: Vec<String>,
    /// What leaked, one line each.
    pub leaks: Vec<String>,
}

pub async fn run(rt: &Runtime, target: &Target, requested: usize, concurrency: usize) -> DensityFigures {
    let started =
        pods::start_many(target, pods::names(&format!("dense-{}", rt.name()), 0, requested), concurrency).await;
    eprintln!(
        "  {}: {} of {requested} pods started in {:.1} s ({} failed)",
        rt.name(),
        started.pods.len(),
        started.elapsed.as_secs_f64(),
        started.errors.len()
    );
    let (teardown, removal_errors) = pods::remove_many(target, &started.pods, concurrency).await;
    let report = leaks::check(rt).await;
    let count = started.pods.len().max(1) as f64;
    let mut errors = started.errors.clone();
    errors.extend(removal_errors);
    errors.truncate(5);
    DensityFigures {
        requested,
        started: started.pods.len(),
        failed: started.errors.len(),
        leaked: report.items.len(),
        ms_per_pod: crate::stats::round3(started.elapsed.as_secs_f64() * 1000.0 / count),
        teardown_ms_per_pod: crate::stats::round3(teardown.as_secs_f64() * 1000.0 / count),
        pod_cgroups_left_for_kubelet: report.pod_cgroups_removed,
        errors,
        leaks: report.items,
    }
}
