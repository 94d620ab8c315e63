//! The results: `latest.json` in the layout of issue 7 (per runtime `steps`,
//! `memory`, `density`; `ratios` nidus/containerd), the same figures as
//! Markdown and as text tables on stdout, and the targets nidus must reach.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::density::DensityFigures;
use crate::latency::Samples;
use crate::lifecycle::Step;
use crate::memory::MemoryFigures;
use crate::stats::{figures, ratio, StepFigures};
use crate::table::Table;

pub const NIDUS: &str = "nidus";
pub const CONTAINERD: &str = "containerd";
pub const NIDUS_OWN_NETNS: &str = "nidus_own_netns";
/// nidus and containerd + runc with the same bridge CNI configuration.
pub const NIDUS_CNI: &str = "nidus_cni";
pub const CONTAINERD_CNI: &str = "containerd_cni";
/// nidus with its built-in pod network.
pub const NIDUS_BUILTIN: &str = "nidus_builtin";
/// containerd + crun, host-network pods (the second reference).
pub const CONTAINERD_CRUN: &str = "containerd_crun";
/// Pods with one host port: nidus's built-in network (kernel DNAT) and
/// containerd's bridge CNI with portmap.
pub const NIDUS_BUILTIN_HOSTPORT: &str = "nidus_builtin_hostport";
/// nidus, pods with a user namespace of their own (and a network namespace).
pub const NIDUS_USERNS: &str = "nidus_userns";
pub const CONTAINERD_CNI_HOSTPORT: &str = "containerd_cni_hostport";
/// nidus with one GetContainerEvents subscriber reading all along.
pub const NIDUS_EVENTS: &str = "nidus_events";

/// The networked and second-reference comparisons: (key, nidus variant,
/// reference variant, target ratio of the pod + container p50 if any).
const NETWORK_RATIOS: [(&str, &str, &str, Option<f64>); 7] = [
    ("cni_nidus_vs_containerd_cni", NIDUS_CNI, CONTAINERD_CNI, Some(0.1)),
    ("builtin_nidus_vs_containerd_cni", NIDUS_BUILTIN, CONTAINERD_CNI, Some(0.05)),
    ("nidus_vs_containerd_crun", NIDUS, CONTAINERD_CRUN, None),
    ("nidus_builtin_vs_nidus_cni", NIDUS_BUILTIN, NIDUS_CNI, None),
    ("hostport_nidus_builtin_vs_containerd_cni", NIDUS_BUILTIN_HOSTPORT, CONTAINERD_CNI_HOSTPORT, None),
    ("userns_nidus_vs_nidus_own_netns", NIDUS_USERNS, NIDUS_OWN_NETNS, Some(1.3)),
    ("events_subscriber_nidus_vs_nidus", NIDUS_EVENTS, NIDUS, Some(1.1)),
];

/// The steps shown for the networked variants.
const NETWORK_STEPS: [Step; 5] =
    [Step::RunPodSandbox, Step::PodAndContainer, Step::CreateAndStart, Step::StopPodSandbox, Step::RemovePodSandbox];

/// Facts about the run.
#[derive(Debug, Clone, Serialize)]
pub struct Meta {
    pub date: String,
    pub kernel: String,
    pub cpus: usize,
    pub iterations: usize,
    pub concurrency: usize,
    pub warm_up: usize,
    pub density_requested: usize,
    pub nidus_version: String,
    pub containerd_version: String,
    pub runc_version: String,
    pub crun_version: String,
    pub nidus_commit: String,
}

/// Everything measured for one runtime.
#[derive(Debug, Default)]
pub struct RuntimeFigures {
    pub memory: MemoryFigures,
    pub density: DensityFigures,
}

pub struct Results {
    pub meta: Meta,
    pub sequential: Samples,
    pub concurrent: Samples,
    pub nidus: RuntimeFigures,
    pub containerd: RuntimeFigures,
    /// Failures outside the figures (latency iterations, the final check).
    pub errors: Vec<String>,
    /// The pull step, when it ran.
    pub pull: Option<crate::pull::PullFigures>,
    /// The checkpoint step (nidus alone), when it ran.
    pub checkpoint: Option<crate::pod_checkpoint::CheckpointFigures>,
    /// The scale step, when it ran.
    pub scale: Option<crate::scale::ScaleFigures>,
}

/// One target of the issue and whether this run met it.
#[derive(Debug, Clone, Serialize)]
pub struct TargetCheck {
    pub target: String,
    pub measured: String,
    pub met: bool,
}

impl Results {
    fn steps(samples: &Samples, label: &str, with_create_and_start: bool) -> BTreeMap<&'static str, StepFigures> {
        let mut steps: Vec<Step> = Step::REPORTED.to_vec();
        if with_create_and_start {
            steps.push(Step::CreateAndStart);
        }
        steps.into_iter().filter_map(|s| figures(samples.of(label, s)).map(|f| (s.key(), f))).collect()
    }

    fn p50(samples: &Samples, label: &str, step: Step) -> Option<f64> {
        figures(samples.of(label, step)).map(|f| f.p50_ms)
    }

    fn step_ratio(samples: &Samples, step: Step) -> Option<f64> {
        Self::variant_ratio(samples, NIDUS, CONTAINERD, step)
    }

    fn variant_ratio(samples: &Samples, a: &str, b: &str, step: Step) -> Option<f64> {
        ratio(Self::p50(samples, a, step)?, Self::p50(samples, b, step)?)
    }

    /// The networked variants' steps and the ratios between them.
    fn network_json(&self) -> Value {
        let variants: Map<String, Value> = [
            NIDUS_CNI,
            NIDUS_BUILTIN,
            CONTAINERD_CNI,
            CONTAINERD_CRUN,
            NIDUS_BUILTIN_HOSTPORT,
            CONTAINERD_CNI_HOSTPORT,
        ]
        .iter()
        .map(|label| (label.to_string(), json!({"steps": Self::steps(&self.sequential, label, true)})))
        .collect();
        let ratios: Map<String, Value> = NETWORK_RATIOS
            .iter()
            .map(|(key, a, b, _)| {
                let by_step: Map<String, Value> = NETWORK_STEPS
                    .iter()
                    .map(|s| (s.key().to_string(), json!(Self::variant_ratio(&self.sequential, a, b, *s))))
                    .collect();
                (key.to_string(), Value::Object(by_step))
            })
            .collect();
        json!({"variants": variants, "ratios": ratios})
    }

    fn memory_pairs(&self) -> Vec<(&'static str, u64, u64)> {
        let (n, c) = (&self.nidus.memory, &self.containerd.memory);
        vec![
            ("daemon_rss_kb_idle", n.daemon_rss_kb_idle, c.daemon_rss_kb_idle),
            ("daemon_rss_kb_10", n.daemon_rss_kb_10, c.daemon_rss_kb_10),
            ("daemon_rss_kb_100", n.daemon_rss_kb_100, c.daemon_rss_kb_100),
            ("per_pod_rss_kb", n.per_pod_rss_kb, c.per_pod_rss_kb),
            ("per_pod_pss_kb", n.per_pod_pss_kb, c.per_pod_pss_kb),
            ("working_set_kb_10", n.working_set_kb_10, c.working_set_kb_10),
            ("working_set_kb_100", n.working_set_kb_100, c.working_set_kb_100),
            ("working_set_kb_per_pod", n.working_set_kb_per_pod, c.working_set_kb_per_pod),
            ("pods_per_gib", n.pods_per_gib, c.pods_per_gib),
        ]
    }

    fn memory_pss_pairs(&self) -> Vec<(&'static str, u64, u64)> {
        let (n, c) = (&self.nidus.memory, &self.containerd.memory);
        vec![
            ("daemon_pss_kb_idle", n.daemon_pss_kb_idle, c.daemon_pss_kb_idle),
            ("daemon_pss_kb_10", n.daemon_pss_kb_10, c.daemon_pss_kb_10),
            ("daemon_pss_kb_100", n.daemon_pss_kb_100, c.daemon_pss_kb_100),
        ]
    }

    /// nidus/containerd of each step p50 and each memory figure.
    fn ratios(&self) -> BTreeMap<&'static str, Option<f64>> {
        let mut ratios: BTreeMap<&'static str, Option<f64>> =
            Step::REPORTED.iter().map(|s| (s.key(), Self::step_ratio(&self.sequential, *s))).collect();
        for (key, n, c) in self.memory_pairs() {
            ratios.insert(key, ratio(n as f64, c as f64));
        }
        ratios
    }

    pub fn targets(&self) -> Vec<TargetCheck> {
        let mut checks = Vec::new();
        let mut at_most = |target: &str, value: Option<f64>, limit: f64| {
            checks.push(TargetCheck {
                target: format!("{target} ≤ {limit}"),
                measured: value.map(|v| format!("{v:.4}")).unwrap_or_else(|| "not measured".into()),
                met: value.is_some_and(|v| v <= limit),
            });
        };
        at_most(
            "pod_and_container p50, nidus/containerd",
            Self::step_ratio(&self.sequential, Step::PodAndContainer),
            0.1,
        );
        at_most(
            "create_container + start_container p50, nidus/containerd",
            Self::step_ratio(&self.sequential, Step::CreateAndStart),
            0.1,
        );
        at_most(
            "stop_container (TERM-exiting) p50, nidus/containerd",
            Self::step_ratio(&self.sequential, Step::StopContainer),
            0.1,
        );
        let ratios = self.ratios();
        at_most("per_pod_rss_kb, nidus/containerd", ratios["per_pod_rss_kb"], 0.1);
        at_most("daemon_rss_kb_100, nidus/containerd", ratios["daemon_rss_kb_100"], 0.25);
        for (key, a, b, target) in NETWORK_RATIOS {
            if let Some(limit) = target {
                at_most(
                    &format!("pod_and_container p50, {key} ({a}/{b})"),
                    Self::variant_ratio(&self.sequential, a, b, Step::PodAndContainer),
                    limit,
                );
            }
        }
        let d = &self.nidus.density;
        checks.push(TargetCheck {
            target: format!("nidus density: {} pods started and removed, 0 failures, 0 leaks", d.requested),
            measured: format!("{} started, {} failed, {} leaked", d.started, d.failed, d.leaked),
            met: d.started == d.requested && d.failed == 0 && d.leaked == 0,
        });
        checks.extend(self.scale.iter().flat_map(|s| s.targets.iter().cloned()));
        checks
    }

    pub fn to_json(&self) -> Value {
        let runtime = |label: &str, figures: &RuntimeFigures, version: &str| {
            let mut object = Map::new();
            object.insert("steps".into(), json!(Self::steps(&self.sequential, label, false)));
            object.insert("memory".into(), json!(figures.memory));
            object.insert("density".into(), json!(figures.density));
            object.insert("version".into(), json!(version));
            object.insert(
                "create_and_start".into(),
                json!(crate::stats::figures(self.sequential.of(label, Step::CreateAndStart))),
            );
            object.insert(
                "concurrent".into(),
                json!({"concurrency": self.meta.concurrency, "steps": Self::steps(&self.concurrent, label, true)}),
            );
            object
        };
        let mut nidus = runtime(NIDUS, &self.nidus, &self.meta.nidus_version);
        nidus.insert("own_netns".into(), json!({"steps": Self::steps(&self.sequential, NIDUS_OWN_NETNS, true)}));
        let containerd = runtime(CONTAINERD, &self.containerd, &self.meta.containerd_version);
        let mut ratios: Map<String, Value> =
            self.ratios().into_iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        ratios.insert("create_and_start".into(), json!(Self::step_ratio(&self.sequential, Step::CreateAndStart)));
        let concurrent_ratios: Map<String, Value> = Step::REPORTED
            .iter()
            .chain([Step::CreateAndStart].iter())
            .map(|s| (s.key().to_string(), json!(Self::step_ratio(&self.concurrent, *s))))
            .collect();
        json!({
            "nidus": nidus,
            "containerd": containerd,
            "ratios": ratios,
            "ratios_concurrent": concurrent_ratios,
            "network": self.network_json(),
            "targets": self.targets(),
            "meta": self.meta,
            "errors": self.errors,
            "pull": self.pull,
            "scale": self.scale,
        })
    }

    pub fn tables(&self) -> Vec<Table> {
        let ms = |v: Option<StepFigures>, p99: bool| {
            v.map(|f| format!("{:.2}", if p99 { f.p99_ms } else { f.p50_ms })).unwrap_or_else(|| "-".into())
        };
        let show_ratio = |r: Option<f64>| r.map(|r| format!("{r:.3}")).unwrap_or_else(|| "-".into());
        let c = self.meta.concurrency;
        let mut steps = Step::REPORTED.to_vec();
        steps.push(Step::CreateAndStart);
        let mut tables = Vec::new();
        for label in [NIDUS, CONTAINERD] {
            let with_ratio = label == NIDUS;
            let p50 = format!("p50 @{c}");
            let p99 = format!("p99 @{c}");
            let ratio50 = format!("ratio @{c}");
            let mut header = vec!["step (ms)", "p50", "p99", "n", p50.as_str(), p99.as_str()];
            if with_ratio {
                header.extend(["ratio p50", ratio50.as_str()]);
            }
            let mut table = Table::new(format!("{label}: latency, sequential and at concurrency {c}"), &header);
            for step in &steps {
                let seq = figures(self.sequential.of(label, *step));
                let conc = figures(self.concurrent.of(label, *step));
                let mut row = vec![
                    step.key().to_string(),
                    ms(seq, false),
                    ms(seq, true),
                    seq.map(|f| f.n.to_string()).unwrap_or_else(|| "0".into()),
                    ms(conc, false),
                    ms(conc, true),
                ];
                if with_ratio {
                    row.push(show_ratio(Self::step_ratio(&self.sequential, *step)));
                    row.push(show_ratio(Self::step_ratio(&self.concurrent, *step)));
                }
                table.row(row);
            }
            tables.push(table);
        }
        let mut own = Table::new(
            "nidus: pods with their own (empty) network namespace, sequential",
            &["step (ms)", "p50", "p99", "n"],
        );
        for step in [Step::RunPodSandbox, Step::PodAndContainer, Step::StopPodSandbox, Step::RemovePodSandbox] {
            let f = figures(self.sequential.of(NIDUS_OWN_NETNS, step));
            own.row(vec![step.key().into(), ms(f, false), ms(f, true), f.map(|f| f.n.to_string()).unwrap_or_default()]);
        }
        tables.push(own);

        let mut header = vec!["step p50 (ms)"];
        header.extend([
            NIDUS_CNI,
            CONTAINERD_CNI,
            NIDUS_BUILTIN,
            NIDUS,
            CONTAINERD_CRUN,
            NIDUS_BUILTIN_HOSTPORT,
            CONTAINERD_CNI_HOSTPORT,
        ]);
        let mut network = Table::new("pod networks (bridge CNI, built-in) and containerd + crun, sequential", &header);
        for step in NETWORK_STEPS {
            let mut row = vec![step.key().to_string()];
            for label in [
                NIDUS_CNI,
                CONTAINERD_CNI,
                NIDUS_BUILTIN,
                NIDUS,
                CONTAINERD_CRUN,
                NIDUS_BUILTIN_HOSTPORT,
                CONTAINERD_CNI_HOSTPORT,
            ] {
                row.push(ms(figures(self.sequential.of(label, step)), false));
            }
            network.row(row);
        }
        tables.push(network);
        let mut header = vec!["ratio of p50".to_string()];
        header.extend(NETWORK_STEPS.iter().map(|s| s.key().to_string()));
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        let mut network_ratios = Table::new("pod network and crun ratios", &header);
        for (key, a, b, _) in NETWORK_RATIOS {
            let mut row = vec![key.to_string()];
            row.extend(NETWORK_STEPS.iter().map(|s| show_ratio(Self::variant_ratio(&self.sequential, a, b, *s))));
            network_ratios.row(row);
        }
        tables.push(network_ratios);

        let mut memory = Table::new("memory (kB; pods_per_gib: pods)", &["figure", NIDUS, CONTAINERD, "ratio"]);
        for (key, n, c) in self.memory_pairs().into_iter().chain(self.memory_pss_pairs()) {
            memory.row(vec![key.into(), n.to_string(), c.to_string(), show_ratio(ratio(n as f64, c as f64))]);
        }
        let (pn, pc) = (self.nidus.memory.processes_per_pod, self.containerd.memory.processes_per_pod);
        memory.row(vec!["runtime processes per pod".into(), format!("{pn:.2}"), format!("{pc:.2}"), "".into()]);
        for (label, figures) in [(NIDUS, &self.nidus), (CONTAINERD, &self.containerd)] {
            for (program, m) in &figures.memory.per_pod_by_program {
                memory.row(vec![
                    format!("  {label} per pod: {program} ×{:.2}", m.processes_per_pod),
                    if label == NIDUS { format!("{} / {}", m.rss_kb, m.pss_kb) } else { String::new() },
                    if label == CONTAINERD { format!("{} / {}", m.rss_kb, m.pss_kb) } else { String::new() },
                    "RSS / PSS".into(),
                ]);
            }
        }
        tables.push(memory);

        let mut density = Table::new(format!("density (concurrency {c})"), &["figure", NIDUS, CONTAINERD]);
        let (n, d) = (&self.nidus.density, &self.containerd.density);
        for (key, a, b) in [
            ("requested", n.requested.to_string(), d.requested.to_string()),
            ("started", n.started.to_string(), d.started.to_string()),
            ("failed", n.failed.to_string(), d.failed.to_string()),
            ("leaked", n.leaked.to_string(), d.leaked.to_string()),
            ("ms_per_pod", format!("{:.2}", n.ms_per_pod), format!("{:.2}", d.ms_per_pod)),
            ("teardown_ms_per_pod", format!("{:.2}", n.teardown_ms_per_pod), format!("{:.2}", d.teardown_ms_per_pod)),
            (
                "empty pod cgroups left for kubelet",
                n.pod_cgroups_left_for_kubelet.to_string(),
                d.pod_cgroups_left_for_kubelet.to_string(),
            ),
        ] {
            density.row(vec![key.into(), a, b]);
        }
        tables.push(density);
        tables.extend(self.scale.iter().flat_map(|s| s.tables(false)));

        let mut targets = Table::new("targets", &["target", "measured", "met"]);
        for t in self.targets() {
            targets.row(vec![t.target, t.measured, if t.met { "yes".into() } else { "NO".into() }]);
        }
        tables.push(targets);
        tables.extend(self.pull.as_ref().map(crate::pull::table));
        tables.extend(self.checkpoint.as_ref().map(crate::pod_checkpoint::table));
        tables
    }

    fn heading(&self) -> String {
        let m = &self.meta;
        format!(
            "nidus {} vs containerd {} + runc {} (and + crun {}) — {}, kernel {}, {} CPUs; N={} (after {} warm-up), concurrency {}, density {}",
            m.nidus_version,
            m.containerd_version,
            m.runc_version,
            m.crun_version,
            m.date,
            m.kernel,
            m.cpus,
            m.iterations,
            m.warm_up,
            m.concurrency,
            m.density_requested
        )
    }

    pub fn to_text(&self) -> String {
        let mut out = format!("{}\n\n", self.heading());
        for table in self.tables() {
            out.push_str(&table.to_text());
            out.push('\n');
        }
        for e in &self.errors {
            out.push_str(&format!("error: {e}\n"));
        }
        out
    }

    pub fn to_markdown(&self) -> String {
        let mut out = format!("## nidus-bench\n\n{}\n\n", self.heading());
        for table in self.tables() {
            out.push_str(&table.to_markdown());
            out.push('\n');
        }
        for e in &self.errors {
            out.push_str(&format!("- error: {e}\n"));
        }
        out
    }

    /// Writes `<dir>/<stamp>.json|.md` and `latest.json|.md`; returns the JSON path.
    pub fn write(&self, dir: &Path) -> Result<PathBuf> {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let json = serde_json::to_string_pretty(&self.to_json())?;
        let markdown = self.to_markdown();
        let stamp: String = self.meta.date.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
        for name in [stamp.as_str(), "latest"] {
            fs::write(dir.join(format!("{name}.json")), &json)?;
            fs::write(dir.join(format!("{name}.md")), &markdown)?;
        }
        Ok(dir.join("latest.json"))
    }
}
