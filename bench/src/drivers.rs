//! The cgroup-driver step (`BENCH_ONLY=drivers`), on a node whose PID 1 is
//! systemd (`make bench-node` runs it in the node lane's VM): the core
//! lifecycle of nidus with its cgroupfs driver and with its systemd driver (a
//! transient scope per pause and container, made over D-Bus), and of
//! containerd + runc with `SystemdCgroup = true`, the three taking turns; p50
//! and p99 of each step one at a time, pod + container `BENCH_CONCURRENCY`
//! at a time, the ratios systemd/cgroupfs (nidus) and nidus/containerd (both
//! with systemd), and the target: a pod + container with the systemd driver
//! within 1.5× of cgroupfs. Results: `drivers-latest.json` and
//! `drivers-latest.md` in the results directory.

use std::path::Path;

use anyhow::{bail, Result};
use serde_json::json;

use crate::cri::PodNetwork;
use crate::images;
use crate::lab::Lab;
use crate::latency::{self, Samples, Variant};
use crate::leaks;
use crate::lifecycle::{Step, Target};
use crate::options::Options;
use crate::runtime::{Kind, Runtime};
use crate::stats;
use crate::table::Table;

const NIDUS_CGROUPFS: &str = "nidus_cgroupfs";
const NIDUS_SYSTEMD: &str = "nidus_systemd";
const CONTAINERD_SYSTEMD: &str = "containerd_systemd";

/// The runtimes of the step, by label.
const RUNTIMES: [(&str, Kind); 3] =
    [(NIDUS_CGROUPFS, Kind::Nidus), (NIDUS_SYSTEMD, Kind::NidusSystemd), (CONTAINERD_SYSTEMD, Kind::ContainerdSystemd)];

/// The target: nidus's pod + container with systemd, against cgroupfs (p50).
const TARGET_RATIO: f64 = 1.5;

/// The steps of the concurrent table.
const CONCURRENT_STEPS: [Step; 4] =
    [Step::RunPodSandbox, Step::CreateAndStart, Step::PodAndContainer, Step::RemovePodSandbox];

/// Runs the step; true when it ran without errors (the target aside).
pub async fn run(options: &Options) -> Result<bool> {
    if !Path::new("/run/systemd/system").is_dir() {
        bail!(
            "BENCH_ONLY=drivers needs systemd as PID 1 (no /run/systemd/system here); \
             `make bench-node` runs it in a VM that boots one"
        );
    }
    let lab = Lab::new()?;
    let slices = Slices;
    let image_dir = lab.places.dir.join("images");
    std::fs::create_dir_all(&image_dir)?;
    let busybox = images::busybox(&image_dir)?;
    let pause = images::pause(&image_dir)?;

    let mut runtimes = Vec::new();
    for (label, kind) in RUNTIMES {
        eprintln!("starting {}", kind.name());
        let mut rt = Runtime::start(kind, &lab.places).await?;
        match kind.is_nidus() {
            true => rt.import(&[&busybox]).await?,
            false => rt.import(&[&pause, &busybox]).await?,
        }
        runtimes.push((label, rt));
    }
    let mut variants = Vec::new();
    for (label, rt) in &runtimes {
        let target = Target {
            cri: rt.cri().clone(),
            logs: rt.logs.clone(),
            image: busybox.reference,
            cgroup_parent: rt.pod_cgroup_parent(),
        };
        crate::check_nesting(rt, &target).await?;
        variants.push(Variant { label, target, network: PodNetwork::Node });
    }

    let mut errors = latency::warm_up(&variants, options.warm_up).await;
    eprintln!("sequential: {} lifecycles per runtime", options.iterations);
    let sequential = latency::sequential(&variants, options.iterations).await;
    eprintln!("concurrent: {} lifecycles per runtime, {} at a time", options.iterations, options.concurrency);
    let concurrent = latency::concurrent(&variants, options.iterations, options.concurrency).await;
    errors.extend(sequential.errors.iter().cloned());
    errors.extend(concurrent.errors.iter().cloned());
    for (_, rt) in &runtimes {
        errors.extend(leaks::check(rt).await.items.iter().map(|l| format!("{} leak: {l}", rt.name())));
    }
    drop(variants);

    let versions: Vec<(String, String)> = runtimes.iter().map(|(l, rt)| (l.to_string(), rt.version.clone())).collect();
    let report = Report::new(&sequential, &concurrent, options);
    print!("{}", report.text());
    let dir = Path::new(&options.results_dir);
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("drivers-latest.md"), report.markdown())?;
    std::fs::write(dir.join("drivers-latest.json"), serde_json::to_string_pretty(&report.json(&versions))?)?;
    eprintln!("results: {}", dir.join("drivers-latest.json").display());

    for (_, mut rt) in runtimes {
        rt.shut_down();
        if let Err(e) = rt.save_log(&dir.join("logs")) {
            eprintln!("warning: cannot keep the log of {}: {e:#}", rt.name());
        }
    }
    drop(slices);
    errors.extend(lab.final_check());
    for e in &errors {
        eprintln!("error: {e}");
    }
    Ok(errors.is_empty())
}

/// The slices the systemd-driven runtimes' pods go below, stopped (with
/// whatever is left in them) when the step ends, however it ends.
struct Slices;

impl Drop for Slices {
    fn drop(&mut self) {
        for kind in [Kind::NidusSystemd, Kind::ContainerdSystemd] {
            let unit = format!("{}.slice", kind.systemd_slice());
            if let Err(e) = crate::host::run("systemctl", &["stop", &unit]) {
                eprintln!("warning: cannot stop {unit}: {e:#}");
            }
        }
    }
}

/// The step's figures: p50/p99 per label and step, and the ratios.
struct Report {
    sequential: Table,
    concurrent: Table,
    figures: serde_json::Value,
    target: Option<f64>,
}

impl Report {
    fn new(sequential: &Samples, concurrent: &Samples, options: &Options) -> Self {
        let labels: Vec<&str> = RUNTIMES.iter().map(|(l, _)| *l).collect();
        let p50 = |samples: &Samples, label: &str, step: Step| stats::figures(samples.of(label, step));
        let ratio = |samples: &Samples, a: &str, b: &str, step: Step| {
            stats::ratio(p50(samples, a, step)?.p50_ms, p50(samples, b, step)?.p50_ms)
        };
        let cell = |value: Option<f64>| value.map_or("-".to_string(), |v| format!("{v:.2}"));
        let mut header = vec!["step (p50 ms)"];
        header.extend(labels.iter().copied());
        header.extend(["systemd/cgroupfs (nidus)", "nidus/containerd (systemd)"]);
        let mut tables = Vec::new();
        let mut figures = serde_json::Map::new();
        for (samples, title, steps, key) in [
            (
                sequential,
                format!("cgroup drivers, one at a time (n = {} each)", options.iterations),
                Step::REPORTED.iter().copied().chain([Step::CreateAndStart]).collect::<Vec<_>>(),
                "sequential",
            ),
            (
                concurrent,
                format!("cgroup drivers, {} at a time (n = {} each)", options.concurrency, options.iterations),
                CONCURRENT_STEPS.to_vec(),
                "concurrent",
            ),
        ] {
            let mut table = Table::new(title, &header);
            let mut by_step = serde_json::Map::new();
            for step in steps {
                let mut row = vec![step.key().to_string()];
                let mut of_step = serde_json::Map::new();
                for label in &labels {
                    let f = p50(samples, label, step);
                    row.push(f.map_or("-".to_string(), |f| format!("{:.2} (p99 {:.2})", f.p50_ms, f.p99_ms)));
                    of_step.insert(label.to_string(), json!(f));
                }
                let own = ratio(samples, NIDUS_SYSTEMD, NIDUS_CGROUPFS, step);
                let against = ratio(samples, NIDUS_SYSTEMD, CONTAINERD_SYSTEMD, step);
                row.extend([cell(own), cell(against)]);
                of_step.insert("ratio_systemd_cgroupfs".into(), json!(own));
                of_step.insert("ratio_nidus_containerd_systemd".into(), json!(against));
                by_step.insert(step.key().to_string(), serde_json::Value::Object(of_step));
                table.row(row);
            }
            figures.insert(key.to_string(), serde_json::Value::Object(by_step));
            tables.push(table);
        }
        let target = ratio(sequential, NIDUS_SYSTEMD, NIDUS_CGROUPFS, Step::PodAndContainer);
        let verdict = match target {
            Some(r) if r <= TARGET_RATIO => format!("met ({r:.2})"),
            Some(r) => format!("MISSED ({r:.2})"),
            None => "not measured".to_string(),
        };
        tables[0].note(format!(
            "target: nidus's pod + container with the systemd driver within {TARGET_RATIO}x of cgroupfs (p50): {verdict}"
        ));
        let concurrent = tables.pop().unwrap_or_else(|| Table::new("", &[]));
        let sequential = tables.pop().unwrap_or_else(|| Table::new("", &[]));
        Self { sequential, concurrent, figures: serde_json::Value::Object(figures), target }
    }

    fn text(&self) -> String {
        format!("{}\n{}", self.sequential.to_text(), self.concurrent.to_text())
    }

    fn markdown(&self) -> String {
        format!("{}\n{}", self.sequential.to_markdown(), self.concurrent.to_markdown())
    }

    fn json(&self, versions: &[(String, String)]) -> serde_json::Value {
        json!({
            "step": "drivers",
            "versions": versions.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
            "target": { "ratio_max": TARGET_RATIO, "pod_and_container_ratio": self.target,
                        "met": self.target.is_some_and(|r| r <= TARGET_RATIO) },
            "figures": self.figures,
        })
    }
}
