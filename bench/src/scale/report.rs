//! The scale step's tables (stdout and `latest.md`), its targets (issue 43),
//! checked as `report::Results::targets` checks the others, and the files
//! of a run of the step alone (`BENCH_ONLY=scale`: `scale-latest.json`,
//! `scale-latest.md`).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::{AtN, ScaleFigures};
use crate::report::TargetCheck;
use crate::table::Table;

fn ms(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into())
}

fn show_ratio(r: Option<f64>) -> String {
    r.map(|r| format!("{r:.3}")).unwrap_or_else(|| "-".into())
}

/// `text` cut to `max` characters.
fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// "N" or "N (of M)" when a runtime had fewer pods than asked.
fn pods(n: usize, had: usize) -> String {
    if had == n {
        n.to_string()
    } else {
        format!("{had} (of {n})")
    }
}

fn ratio_of<T>(at: &AtN<T>, key: &str) -> Option<f64> {
    at.ratios.get(key).copied().flatten()
}

impl ScaleFigures {
    /// The tables; `with_targets` adds the step's targets (the full run has
    /// them in its own targets table).
    pub fn tables(&self, with_targets: bool) -> Vec<Table> {
        let mut tables = Vec::new();
        let header = ["pods", "nidus p50", "nidus p99", "containerd p50", "containerd p99", "ratio p50", "ratio p99"];
        for (title, measure) in [
            ("scale: relist (ListPodSandbox, ListContainers, PodSandboxStatus, ContainerStatus), ms", &self.relist),
            ("scale: stats round (ListContainerStats, ListPodSandboxStats, ImageFsInfo), ms", &self.stats),
        ] {
            let mut table = Table::new(title, &header);
            // One note per call left out, with the first reason given.
            let mut notes = std::collections::BTreeMap::new();
            for at in measure {
                for (call, why) in &at.nidus.calls_left_out {
                    notes.entry(*call).or_insert_with(|| why.clone());
                }
                table.row(vec![
                    format!("{} / {}", pods(at.n, at.nidus.pods), pods(at.n, at.containerd.pods)),
                    ms(at.nidus.p50_ms),
                    ms(at.nidus.p99_ms),
                    ms(at.containerd.p50_ms),
                    ms(at.containerd.p99_ms),
                    show_ratio(ratio_of(at, "p50")),
                    show_ratio(ratio_of(at, "p99")),
                ]);
            }
            for (call, why) in notes {
                table.note(format!("{call} is left out of both runtimes' rounds: {}", shorten(&why, 200)));
            }
            tables.push(table);
        }
        let mut calls = Table::new("scale: each call's p50, ms", &["call @ pods", "nidus", "containerd", "ratio"]);
        for measure in [&self.relist, &self.stats] {
            for at in measure {
                for (call, n) in &at.nidus.calls_p50_ms {
                    let c = at.containerd.calls_p50_ms.get(call).copied();
                    calls.row(vec![
                        format!("{call} @{}", at.n),
                        format!("{n:.3}"),
                        c.map(|c| format!("{c:.3}")).unwrap_or_else(|| "-".into()),
                        show_ratio(c.and_then(|c| crate::stats::ratio(*n, c))),
                    ]);
                }
            }
        }
        tables.push(calls);

        let window = self.settings.idle_window_s;
        let mut idle = Table::new(
            format!("scale: idle, CPU seconds per minute of the runtime's processes ({window} s window)"),
            &["pods", "nidus", "containerd", "ratio", "nidus by program", "containerd by program"],
        );
        let by_program = |m: &std::collections::BTreeMap<String, f64>| {
            m.iter().filter(|(_, v)| **v > 0.0).map(|(k, v)| format!("{k} {v:.3}")).collect::<Vec<_>>().join(", ")
        };
        for at in &self.idle {
            idle.row(vec![
                at.n.to_string(),
                format!("{:.3}", at.nidus.cpu_s_per_min),
                format!("{:.3}", at.containerd.cpu_s_per_min),
                show_ratio(ratio_of(at, "cpu_s_per_min")),
                by_program(&at.nidus.cpu_s_per_min_by_program),
                by_program(&at.containerd.cpu_s_per_min_by_program),
            ]);
        }
        tables.push(idle);
        let mut memory = Table::new(
            "scale: memory, kB (per pod: pause + monitor against pause + shim, RSS / PSS)",
            &[
                "pods",
                "nidus daemon RSS / PSS",
                "containerd daemon RSS / PSS",
                "nidus per pod",
                "containerd per pod",
                "ratio per pod PSS",
                "working set nidus / containerd",
            ],
        );
        for at in &self.idle {
            let (n, c) = (&at.nidus, &at.containerd);
            memory.row(vec![
                at.n.to_string(),
                format!("{} / {}", n.daemon_rss_kb, n.daemon_pss_kb),
                format!("{} / {}", c.daemon_rss_kb, c.daemon_pss_kb),
                format!("{} / {}", n.per_pod_rss_kb, n.per_pod_pss_kb),
                format!("{} / {}", c.per_pod_rss_kb, c.per_pod_pss_kb),
                show_ratio(ratio_of(at, "per_pod_pss_kb")),
                format!(
                    "{} / {}",
                    n.working_set_kb.map(|v| v.to_string()).unwrap_or_else(|| "-".into()),
                    c.working_set_kb.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
                ),
            ]);
        }
        tables.push(memory);

        let mut restart = Table::new(
            "scale: restart, ms from the daemon's start to Status ready / to every container listed",
            &[
                "pods",
                "nidus clean",
                "nidus kill -9",
                "containerd clean",
                "containerd kill -9",
                "ratio clean",
                "ratio kill -9",
            ],
        );
        let times = |f: &Option<super::restart::RestartFigures>| match f {
            Some(f) => {
                format!("{:.1} / {:.1}{}", f.ready_ms, f.listed_ms, if f.pods_kept { "" } else { " (pods lost)" })
            }
            None => "-".into(),
        };
        for at in &self.restart {
            restart.row(vec![
                format!("{} / {}", pods(at.n, at.nidus.pods), pods(at.n, at.containerd.pods)),
                times(&at.nidus.clean),
                times(&at.nidus.kill_9),
                times(&at.containerd.clean),
                times(&at.containerd.kill_9),
                show_ratio(ratio_of(at, "clean_listed_ms")),
                show_ratio(ratio_of(at, "kill_9_listed_ms")),
            ]);
        }
        tables.push(restart);

        let c = self.settings.concurrency;
        let mut density = Table::new(
            format!("scale: density (concurrency {c}): started / failed / leaked, start and removal s"),
            &["pods", "nidus", "nidus start / remove", "containerd", "containerd start / remove", "ratio ms/pod"],
        );
        let mut stops = Vec::new();
        for at in &self.density {
            let counts =
                |d: &super::density::Density| format!("{} / {} / {}", d.started, d.failed + d.remove_failed, d.leaked);
            let secs = |d: &super::density::Density| format!("{:.1} / {:.1}", d.start_s, d.remove_s);
            density.row(vec![
                at.n.to_string(),
                counts(&at.nidus),
                secs(&at.nidus),
                counts(&at.containerd),
                secs(&at.containerd),
                show_ratio(ratio_of(at, "ms_per_pod")),
            ]);
            for (label, d) in [("nidus", &at.nidus), ("containerd", &at.containerd)] {
                if let Some(why) = &d.stopped_early {
                    stops.push(format!("{label} at {}: {why}", at.n));
                }
            }
        }
        for stop in stops {
            density.note(stop);
        }
        tables.push(density);

        if let Some(busy) = &self.busy {
            let hogs = format!("{} hogs", busy.hogs.hogs);
            let mut table = Table::new(
                format!(
                    "scale: busy node, p50 ms ({} lifecycles each, quiet and with one CPU hog per core)",
                    busy.iterations
                ),
                &[
                    "step",
                    "nidus quiet",
                    &format!("nidus {hogs}"),
                    "containerd quiet",
                    &format!("containerd {hogs}"),
                    "ratio quiet",
                    &format!("ratio {hogs}"),
                ],
            );
            for step in super::busy::STEPS {
                let key = step.key();
                let p50 = |m: &std::collections::BTreeMap<&'static str, crate::stats::StepFigures>| {
                    ms(m.get(key).map(|f| f.p50_ms))
                };
                table.row(vec![
                    key.to_string(),
                    p50(&busy.quiet.nidus),
                    p50(&busy.hogs.nidus),
                    p50(&busy.quiet.containerd),
                    p50(&busy.hogs.containerd),
                    show_ratio(busy.quiet.ratios.get(key).copied().flatten()),
                    show_ratio(busy.hogs.ratios.get(key).copied().flatten()),
                ]);
            }
            tables.push(table);
        }
        if with_targets {
            let mut table = Table::new("scale: targets", &["target", "measured", "met"]);
            for t in &self.targets {
                table.row(vec![t.target.clone(), t.measured.clone(), if t.met { "yes".into() } else { "NO".into() }]);
            }
            tables.push(table);
        }
        tables
    }

    fn heading(&self) -> String {
        let s = &self.settings;
        format!(
            "scale step: nidus {} vs containerd {}, pods {:?}, concurrency {}, {} rounds, idle window {} s, {} CPUs, {} MiB, pid_max {}",
            s.nidus_version, s.containerd_version, s.counts, s.concurrency, s.rounds, s.idle_window_s, s.cpus, s.mem_total_mib, s.pid_max
        )
    }

    pub fn to_text(&self, with_targets: bool) -> String {
        let mut out = format!("{}\n\n", self.heading());
        for table in self.tables(with_targets) {
            out.push_str(&table.to_text());
            out.push('\n');
        }
        out
    }

    pub fn to_markdown(&self, with_targets: bool) -> String {
        let mut out = format!("## {}\n\n", self.heading());
        for table in self.tables(with_targets) {
            out.push_str(&table.to_markdown());
            out.push('\n');
        }
        out
    }
}

/// The targets, at the pod counts this run had.
pub fn targets(f: &ScaleFigures) -> Vec<TargetCheck> {
    let mut checks = Vec::new();
    let mut at_most = |target: String, value: Option<f64>, limit: f64| {
        checks.push(TargetCheck {
            target: format!("{target} ≤ {limit}"),
            measured: value.map(|v| format!("{v:.4}")).unwrap_or_else(|| "not measured".into()),
            met: value.is_some_and(|v| v <= limit),
        });
    };
    // Not measured when any count lacks a ratio.
    let worst = |measure: &[AtN<super::rounds::Rounds>]| -> Option<f64> {
        let ratios: Option<Vec<f64>> = measure.iter().map(|at| ratio_of(at, "p50")).collect();
        ratios.filter(|r| !r.is_empty()).map(|r| r.into_iter().fold(f64::MIN, f64::max))
    };
    at_most("scale: relist p50 at every pod count, nidus/containerd (the worst)".into(), worst(&f.relist), 0.1);
    at_most("scale: stats round p50 at every pod count, nidus/containerd (the worst)".into(), worst(&f.stats), 0.2);
    // At 500 pods, or at the count nearest below it that ran.
    let idle = f.idle.iter().rfind(|at| at.n <= 500).or(f.idle.first());
    at_most(
        format!("scale: idle CPU per minute at {} pods, nidus/containerd", idle.map(|at| at.n).unwrap_or(500)),
        idle.and_then(|at| ratio_of(at, "cpu_s_per_min")),
        0.1,
    );
    let last = f.restart.last();
    let slowest = last.and_then(|at| {
        let clean = at.nidus.clean.as_ref()?.listed_ms;
        let kill = at.nidus.kill_9.as_ref()?.listed_ms;
        Some(clean.max(kill) / 1000.0)
    });
    at_most(
        format!(
            "scale: nidus restart to ready and all listed with {} pods, s (clean and kill -9)",
            last.map(|at| at.n).unwrap_or(0)
        ),
        slowest,
        1.0,
    );
    let per_pod: Vec<(usize, u64)> = f.idle.iter().map(|at| (at.n, at.nidus.per_pod_pss_kb)).collect();
    let spread = match (per_pod.first(), per_pod.len()) {
        (Some(&(_, first)), 2..) if first > 0 => {
            Some(per_pod.iter().map(|(_, v)| (*v as f64 / first as f64 - 1.0).abs()).fold(0.0, f64::max))
        }
        _ => None,
    };
    at_most(
        format!(
            "scale: nidus per-pod PSS from {} to {} pods, largest change from the first",
            per_pod.first().map(|p| p.0).unwrap_or(0),
            per_pod.last().map(|p| p.0).unwrap_or(0)
        ),
        spread,
        0.1,
    );
    if let Some(busy) = &f.busy {
        for key in ["pod_and_container", "create_and_start"] {
            at_most(
                format!("scale: busy node ({} hogs), {key} p50, nidus/containerd", busy.hogs.hogs),
                busy.hogs.ratios.get(key).copied().flatten(),
                0.1,
            );
        }
    }
    if let Some(at) = f.density.last() {
        let d = &at.nidus;
        checks.push(TargetCheck {
            target: format!("scale: nidus density, {} pods started and removed, 0 failures, 0 leaks", at.n),
            measured: format!("{} started, {} failed, {} leaked", d.started, d.failed + d.remove_failed, d.leaked),
            met: d.started == at.n && d.failed == 0 && d.remove_failed == 0 && d.leaked == 0,
        });
    }
    checks
}

/// The files of `BENCH_ONLY=scale`: `scale-latest.json`, `scale-latest.md`
/// and the charts, in `dir`; the JSON path.
pub fn write_alone(figures: &ScaleFigures, dir: &Path) -> Result<PathBuf> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let json = dir.join("scale-latest.json");
    fs::write(&json, serde_json::to_string_pretty(figures)?)?;
    let mut markdown = figures.to_markdown(true);
    for e in &figures.errors {
        markdown.push_str(&format!("- error: {e}\n"));
    }
    fs::write(dir.join("scale-latest.md"), markdown)?;
    super::chart::write_all(figures, dir)?;
    Ok(json)
}
