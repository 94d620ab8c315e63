//! The profiling mode (`BENCH_PROFILE=1`): nidus alone, N sequential
//! lifecycles after the warm-up, p50/p99 per step on stdout. It writes no
//! results and reports no ratios against containerd — it is for looking at
//! nidus's own costs (with `perf`, or `BENCH_NIDUS_LOG=nidus=debug`). With
//! `NIDUS_BIN_B` set, a second nidus build runs beside the first, the two
//! taking turns iteration by iteration, so a change is measured against the
//! same noise (this machine's speed drifts by tens of percent within minutes).

use anyhow::Result;

use crate::cri::PodNetwork;
use crate::images;
use crate::lab::Lab;
use crate::latency::{self, Variant};
use crate::leaks;
use crate::lifecycle::{Step, Target};
use crate::options::Options;
use crate::report::NIDUS;
use crate::runtime::{Kind, Runtime};
use crate::stats;
use crate::table::Table;

/// The label of the second build.
const NIDUS_B: &str = "nidus_b";

/// Runs the profiling mode; true when it ran without errors.
pub async fn run(options: &Options) -> Result<bool> {
    let lab = Lab::new()?;
    let image_dir = lab.places.dir.join("images");
    std::fs::create_dir_all(&image_dir)?;
    let busybox = images::busybox(&image_dir)?;
    let mut runtimes = vec![Runtime::start(Kind::Nidus, &lab.places).await?];
    if std::env::var_os("NIDUS_BIN_B").is_some() {
        runtimes.push(Runtime::start(Kind::NidusB, &lab.places).await?);
    }
    let mut variants = Vec::new();
    for (rt, label) in runtimes.iter_mut().zip([NIDUS, NIDUS_B]) {
        rt.import(&[&busybox]).await?;
        eprintln!("profile: {label} daemon pid {:?}", rt.daemon_pid());
        let target = Target {
            cri: rt.cri().clone(),
            logs: rt.logs.clone(),
            image: busybox.reference,
            cgroup_parent: rt.pod_cgroup_parent(),
        };
        variants.push(Variant { label, target, network: PodNetwork::Node });
    }
    let mut errors = latency::warm_up(&variants, options.warm_up).await;
    let samples = latency::sequential(&variants, options.iterations).await;
    errors.extend(samples.errors.iter().cloned());
    for rt in &runtimes {
        errors.extend(leaks::check(rt).await.items.iter().map(|l| format!("{} leak: {l}", rt.name())));
    }

    let labels: Vec<&'static str> = variants.iter().map(|v| v.label).collect();
    let mut header = vec!["step (ms)"];
    for label in &labels {
        header.extend([*label, "p99", "n"]);
    }
    let mut table = Table::new("sequential, profiling mode (p50, p99, n of each build)", &header);
    for step in Step::REPORTED.iter().copied().chain([Step::CreateAndStart]) {
        let mut row = vec![step.key().to_string()];
        for label in &labels {
            match stats::figures(samples.of(label, step)) {
                Some(f) => row.extend([format!("{:.2}", f.p50_ms), format!("{:.2}", f.p99_ms), f.n.to_string()]),
                None => row.extend(["-".to_string(), "-".to_string(), "0".to_string()]),
            }
        }
        table.row(row);
    }
    print!("{}", table.to_text());
    drop(variants);
    let log_dir = std::path::Path::new(&options.results_dir).join("logs");
    for mut rt in runtimes {
        rt.shut_down();
        if let Err(e) = rt.save_log(&log_dir) {
            eprintln!("warning: cannot keep the log of {}: {e:#}", rt.name());
        }
    }
    errors.extend(lab.final_check());
    for e in &errors {
        eprintln!("error: {e}");
    }
    Ok(errors.is_empty())
}
