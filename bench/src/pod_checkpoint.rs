//! The checkpoint step (nidus alone: containerd has no pod checkpoint): a
//! pod of two containers (a counter and busybox httpd) in a network
//! namespace of its own; per iteration, CheckpointContainer of the counter,
//! CheckpointPod of the pod, the pod removed, RestorePod of the archive, the
//! restored pod removed. Needs CRIU (scripts/install-criu); without it the
//! step is left out with the reason.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::cri::{as_kubelet_for, container_config, pod_config, PodNetwork};
use crate::lifecycle::Target;

const COUNTER: &[&str] = &["sh", "-c", "i=0; while true; do echo $i > /tmp/count; i=$((i+1)); sleep 0.2; done"];
const WEB: &[&str] =
    &["sh", "-c", "mkdir -p /tmp/www && echo hi > /tmp/www/index.html && exec busybox httpd -f -p 8080 -h /tmp/www"];

#[derive(Debug, Clone, Default, Serialize)]
pub struct CheckpointFigures {
    pub checkpoint_container_ms: Vec<f64>,
    pub checkpoint_pod_ms: Vec<f64>,
    pub restore_pod_ms: Vec<f64>,
    /// Bytes of the last pod archive.
    pub pod_archive_bytes: u64,
}

pub async fn run(target: &Target, dir: &Path, iterations: usize) -> Result<CheckpointFigures> {
    if !["/usr/local/sbin/criu", "/usr/sbin/criu", "/usr/bin/criu"].iter().any(|p| Path::new(p).exists()) {
        bail!("no criu binary (scripts/install-criu builds one)");
    }
    let mut figures = CheckpointFigures::default();
    for i in 0..iterations {
        let name = format!("ckpt-{i}");
        let logs = target.logs.join(&name);
        std::fs::create_dir_all(&logs)?;
        let pod = pod_config(&name, &logs, PodNetwork::Own, &target.cgroup_parent);
        let pod_id = target.cri.run_pod(&pod).await?;
        let one = as_kubelet_for(&pod, container_config("counter", target.image, COUNTER));
        let counter = target.cri.create_container(&pod_id, &pod, &one).await?;
        target.cri.start_container(&counter).await?;
        let two = as_kubelet_for(&pod, container_config("web", target.image, WEB));
        let web = target.cri.create_container(&pod_id, &pod, &two).await?;
        target.cri.start_container(&web).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;

        let container_archive = dir.join(format!("{name}-counter.tar"));
        let t = Instant::now();
        target.cri.checkpoint_container(&counter, &container_archive).await?;
        figures.checkpoint_container_ms.push(ms(t.elapsed()));
        let pod_archive = dir.join(format!("{name}-pod.tar"));
        let t = Instant::now();
        target.cri.checkpoint_pod(&pod_id, &pod_archive).await?;
        figures.checkpoint_pod_ms.push(ms(t.elapsed()));
        figures.pod_archive_bytes = std::fs::metadata(&pod_archive).context("the pod archive")?.len();
        target.cri.stop_pod(&pod_id).await?;
        target.cri.remove_pod(&pod_id).await?;

        let t = Instant::now();
        let restored = target.cri.restore_pod(&pod_archive, &pod).await?;
        figures.restore_pod_ms.push(ms(t.elapsed()));
        target.cri.stop_pod(&restored.pod_sandbox_id).await?;
        target.cri.remove_pod(&restored.pod_sandbox_id).await?;
        for archive in [&container_archive, &pod_archive] {
            std::fs::remove_file(archive)?;
        }
    }
    Ok(figures)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn p50(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(0.0)
}

pub fn table(f: &CheckpointFigures) -> crate::table::Table {
    let mut table = crate::table::Table::new(
        format!(
            "checkpoint (nidus, CRIU): a pod of a counter and httpd, pod archive {:.1} MB",
            f.pod_archive_bytes as f64 / 1e6
        ),
        &["call", "p50 (ms)", "n"],
    );
    for (call, samples) in [
        ("CheckpointContainer (the counter)", &f.checkpoint_container_ms),
        ("CheckpointPod (both)", &f.checkpoint_pod_ms),
        ("RestorePod (both, started)", &f.restore_pod_ms),
    ] {
        table.row(vec![call.into(), format!("{:.0}", p50(samples)), samples.len().to_string()]);
    }
    table
}
