//! The profiling mode (`BENCH_PROFILE=1`): nidus alone, N sequential
//! lifecycles after the warm-up, p50/p99 per step on stdout. It writes no
//! results and reports no ratios — it is for looking at nidus's own costs
//! (with `perf`, or `BENCH_NIDUS_LOG=nidus=debug`), not for comparing.

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

/// Runs the profiling mode; true when it ran without errors.
pub async fn run(options: &Options) -> Result<bool> {
    let lab = Lab::new()?;
    let image_dir = lab.places.dir.join("images");
    std::fs::create_dir_all(&image_dir)?;
    let busybox = images::busybox(&image_dir)?;
    let mut nidus = Runtime::start(Kind::Nidus, &lab.places).await?;
    nidus.import(&[&busybox]).await?;
    eprintln!("profile: nidus daemon pid {:?}", nidus.daemon_pid());
    let target = Target {
        cri: nidus.cri().clone(),
        logs: nidus.logs.clone(),
        image: busybox.reference,
        cgroup_prefix: nidus.cgroup_prefix(),
    };
    let variants = [Variant { label: NIDUS, target, network: PodNetwork::Node }];
    let mut errors = latency::warm_up(&variants, options.warm_up).await;
    let samples = latency::sequential(&variants, options.iterations).await;
    errors.extend(samples.errors.iter().cloned());
    errors.extend(leaks::check(&nidus).await.items.iter().map(|l| format!("leak: {l}")));

    let mut table =
        Table::new("nidus alone, sequential (profiling mode: no ratios)", &["step (ms)", "p50", "p99", "n"]);
    for step in Step::REPORTED.iter().copied().chain([Step::CreateAndStart]) {
        if let Some(f) = stats::figures(samples.of(NIDUS, step)) {
            table.row(vec![step.key().into(), format!("{:.2}", f.p50_ms), format!("{:.2}", f.p99_ms), f.n.to_string()]);
        }
    }
    print!("{}", table.to_text());
    drop(variants);
    nidus.shut_down();
    if let Err(e) = nidus.save_log(&std::path::Path::new(&options.results_dir).join("logs")) {
        eprintln!("warning: cannot keep nidus's log: {e:#}");
    }
    drop(nidus);
    errors.extend(lab.final_check());
    for e in &errors {
        eprintln!("error: {e}");
    }
    Ok(errors.is_empty())
}
