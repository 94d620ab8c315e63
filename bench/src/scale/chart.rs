//! One SVG chart per measure of the scale step, written into the results
//! directory (`scale-relist.svg`, `scale-stats.svg`, `scale-idle.svg`,
//! `scale-memory.svg`, `scale-restart.svg`, `scale-density.svg`,
//! `scale-busy.svg`): the measure against the pod count (a log axis) for
//! both runtimes — nidus blue, containerd orange, the second figure of each
//! (p99, kill -9, removal, daemon) dashed. Made with `plotters`' SVG backend
//! (text is left to the viewer's sans-serif font).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Result;
use plotters::prelude::*;

use super::ScaleFigures;

const SIZE: (u32, u32) = (760, 460);
const NIDUS_COLOR: RGBColor = RGBColor(31, 119, 180);
const CONTAINERD_COLOR: RGBColor = RGBColor(230, 120, 20);

/// One line of a chart.
struct Series {
    label: String,
    color: RGBColor,
    dashed: bool,
    points: Vec<(f64, f64)>,
}

impl Series {
    fn new(label: impl Into<String>, color: RGBColor, dashed: bool, points: Vec<(f64, f64)>) -> Self {
        Self { label: label.into(), color, dashed, points }
    }
}

/// A figure's name and how to read it (None: not measured).
type Figure<'a, T> = (&'a str, &'a dyn Fn(&T) -> Option<f64>);

/// Both runtimes' `solid` and `dashed` figures against the pod count.
fn pair<T>(
    at: &[super::AtN<T>],
    pods: impl Fn(&T) -> usize,
    solid: Figure<'_, T>,
    dashed: Figure<'_, T>,
) -> Vec<Series> {
    let mut series = Vec::new();
    for (name, color, is_nidus) in [("nidus", NIDUS_COLOR, true), ("containerd", CONTAINERD_COLOR, false)] {
        for (what, figure, is_dashed) in [(solid.0, solid.1, false), (dashed.0, dashed.1, true)] {
            let points = at
                .iter()
                .filter_map(|a| {
                    let t = if is_nidus { &a.nidus } else { &a.containerd };
                    Some((pods(t).max(1) as f64, figure(t)?))
                })
                .collect();
            series.push(Series::new(format!("{name} {what}"), color, is_dashed, points));
        }
    }
    series
}

/// Writes every chart that has points; the paths written.
pub fn write_all(f: &ScaleFigures, dir: &Path) -> Result<Vec<PathBuf>> {
    fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    let mut chart = |name: &str, title: &str, y_desc: &str, log_y: bool, series: Vec<Series>| -> Result<()> {
        if series.iter().all(|s| s.points.is_empty()) {
            return Ok(());
        }
        let path = dir.join(format!("scale-{name}.svg"));
        fs::write(&path, against_pods(title, y_desc, log_y, &series)?)?;
        written.push(path);
        Ok(())
    };
    let rounds_pods = |r: &super::rounds::Rounds| r.pods;
    chart(
        "relist",
        "Relist (kubelet PLEG, every second)",
        "ms per relist",
        true,
        pair(&f.relist, rounds_pods, ("p50", &|r| r.p50_ms), ("p99", &|r| r.p99_ms)),
    )?;
    chart(
        "stats",
        "Stats round (summary API, eviction, every 10 s)",
        "ms per round",
        true,
        pair(&f.stats, rounds_pods, ("p50", &|r| r.p50_ms), ("p99", &|r| r.p99_ms)),
    )?;
    let idle_pods = |i: &super::idle::Idle| i.pods;
    let mut idle = pair(&f.idle, idle_pods, ("CPU", &|i| Some(i.cpu_s_per_min)), ("", &|_| None));
    idle.retain(|s| !s.dashed);
    chart("idle", "Idle CPU of the runtime's processes", "CPU seconds per minute", false, idle)?;
    chart(
        "memory",
        "Memory: per pod (pause + monitor / pause + shim) and daemon",
        "PSS, kB",
        true,
        pair(
            &f.idle,
            idle_pods,
            ("per pod", &|i| Some(i.per_pod_pss_kb as f64).filter(|v| *v > 0.0)),
            ("daemon", &|i| Some(i.daemon_pss_kb as f64).filter(|v| *v > 0.0)),
        ),
    )?;
    chart(
        "restart",
        "Restart: daemon start to every container listed",
        "ms",
        true,
        pair(
            &f.restart,
            |r| r.pods,
            ("clean stop", &|r| r.clean.as_ref().map(|c| c.listed_ms)),
            ("kill -9", &|r| r.kill_9.as_ref().map(|c| c.listed_ms)),
        ),
    )?;
    chart(
        "density",
        "Density: start and removal, concurrency 8",
        "ms per pod",
        true,
        pair(
            &f.density,
            |d| d.started,
            ("start", &|d| Some(d.ms_per_pod).filter(|v| *v > 0.0)),
            ("removal", &|d| Some(d.teardown_ms_per_pod).filter(|v| *v > 0.0)),
        ),
    )?;
    if let Some(busy) = &f.busy {
        let mut series = Vec::new();
        for (name, color, is_nidus) in [("nidus", NIDUS_COLOR, true), ("containerd", CONTAINERD_COLOR, false)] {
            for (key, label, dashed) in
                [("pod_and_container", "pod + container", false), ("create_and_start", "create + start", true)]
            {
                let points = [&busy.quiet, &busy.hogs]
                    .iter()
                    .filter_map(|c| {
                        let steps = if is_nidus { &c.nidus } else { &c.containerd };
                        Some((c.hogs as f64, steps.get(key)?.p50_ms))
                    })
                    .collect();
                series.push(Series::new(format!("{name} {label}"), color, dashed, points));
            }
        }
        if series.iter().any(|s| !s.points.is_empty()) {
            let path = dir.join("scale-busy.svg");
            fs::write(&path, against_hogs(busy.hogs.hogs, &series)?)?;
            written.push(path);
        }
    }
    Ok(written)
}

/// The y range of `series`: from 0 (linear) or a little below the least
/// (log), with room above the highest for the legend.
fn y_range(series: &[Series], log: bool) -> (f64, f64) {
    let values = || series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).filter(|v| v.is_finite());
    let max = values().fold(f64::MIN, f64::max);
    let min = values().filter(|v| *v > 0.0).fold(f64::MAX, f64::min);
    match log {
        true if min <= max && min > 0.0 => {
            let (low, high) = (min / 1.5, max * 1.5);
            // Half the span again above: room for the legend.
            (low, high * (high / low).powf(0.5))
        }
        true => (0.01, 1.0),
        false if max > 0.0 => (0.0, max * 1.5),
        false => (0.0, 1.0),
    }
}

fn y_label(v: f64) -> String {
    match v.abs() {
        a if a >= 100.0 || a == 0.0 => format!("{v:.0}"),
        a if a >= 1.0 => format!("{v:.1}"),
        a if a >= 0.01 => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    }
}

/// Draws `series` into a chart whose x and y are the given ranges (the
/// coordinate types differ with the scale, hence a macro).
macro_rules! draw {
    ($svg:expr, $title:expr, $x_desc:expr, $y_desc:expr, $x:expr, $x_labels:expr, $y:expr, $series:expr) => {{
        let root = SVGBackend::with_string($svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption($title, ("sans-serif", 18))
            .margin(14)
            .x_label_area_size(42)
            .y_label_area_size(70)
            .build_cartesian_2d($x, $y)?;
        chart
            .configure_mesh()
            .x_desc($x_desc)
            .y_desc($y_desc)
            .x_labels($x_labels)
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| y_label(*v))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        for s in $series {
            if s.points.is_empty() {
                continue;
            }
            let color = s.color;
            let style = ShapeStyle { color: color.to_rgba(), filled: false, stroke_width: 2 };
            let drawn = match s.dashed {
                true => chart.draw_series(DashedLineSeries::new(s.points.clone(), 7, 5, style))?,
                false => chart.draw_series(LineSeries::new(s.points.clone(), style))?,
            };
            let dashed = s.dashed;
            drawn.label(s.label.as_str()).legend(move |(x, y)| {
                let style = ShapeStyle { color: color.to_rgba(), filled: false, stroke_width: 2 };
                match dashed {
                    true => PathElement::new(vec![(x, y), (x + 8, y)], style),
                    false => PathElement::new(vec![(x, y), (x + 20, y)], style),
                }
            });
            chart.draw_series(s.points.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .draw()?;
        root.present()?;
    }};
}

/// A chart of `series` against the pod count (log x; log or linear y).
fn against_pods(title: &str, y_desc: &str, log_y: bool, series: &[Series]) -> Result<String> {
    let xs = || series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (x_min, x_max) = (xs().fold(f64::MAX, f64::min), xs().fold(f64::MIN, f64::max));
    let x = (x_min / 1.3)..(x_max * 1.3);
    let (y_min, y_max) = y_range(series, log_y);
    let mut svg = String::new();
    match log_y {
        true => draw!(&mut svg, title, "pods", y_desc, x.log_scale(), 10, (y_min..y_max).log_scale(), series),
        false => draw!(&mut svg, title, "pods", y_desc, x.log_scale(), 10, y_min..y_max, series),
    }
    Ok(svg)
}

/// The busy chart: p50 against the number of CPU hogs (0 and one per core).
fn against_hogs(hogs: usize, series: &[Series]) -> Result<String> {
    let (y_min, y_max) = y_range(series, true);
    let x = -0.25..(hogs as f64 + 0.25);
    let mut svg = String::new();
    draw!(
        &mut svg,
        "Busy node: pod + container and create + start, p50",
        "CPU hogs (busy loops at normal priority)",
        "ms",
        x,
        hogs + 1,
        (y_min..y_max).log_scale(),
        series
    );
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_is_svg_with_its_labels() {
        let series = vec![
            Series::new("nidus p50", NIDUS_COLOR, false, vec![(10.0, 0.3), (110.0, 0.5)]),
            Series::new("containerd p50", CONTAINERD_COLOR, true, vec![(10.0, 4.0), (110.0, 20.0)]),
        ];
        let svg = against_pods("Relist", "ms", true, &series).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        for text in ["Relist", "nidus p50", "containerd p50", "pods"] {
            assert!(svg.contains(text), "no {text:?} in the chart");
        }
        let linear = against_pods("Idle", "s", false, &series[..1]).unwrap();
        assert!(linear.contains("Idle"));
        assert_eq!(y_range(&[], true), (0.01, 1.0));
    }
}
