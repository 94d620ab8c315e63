//! nidus-bench: runs nidus and, as the reference, containerd + runc side by
//! side on this machine, drives both through the same CRI client, and
//! reports latency, memory, density and how costs grow with the number of
//! pods (the scale step) with nidus/containerd ratios
//! (`bench-results/latest.json`, `latest.md`, SVG charts, tables on stdout).
//! `BENCH_N` (iterations, default 50), `BENCH_DENSITY` (pods, default 500)
//! and `BENCH_SCALE` (pod counts, default `10,110`) size the run (see
//! `options`, and docs/benchmarks.md).

mod cgroups;
mod cri;
mod density;
mod drivers;
mod exec_stream;
mod host;
mod images;
mod install;
mod lab;
mod latency;
mod leaks;
mod lifecycle;
mod memory;
mod netns;
mod options;
mod pod_checkpoint;
mod pods;
mod profile;
mod pull;
mod report;
mod runtime;
mod scale;
mod stats;
mod table;

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use tokio::signal::unix::{signal, SignalKind};

use crate::cri::PodNetwork;
use crate::lab::Lab;
use crate::latency::Variant;
use crate::lifecycle::Target;
use crate::options::{OnlyStep, Options};
use crate::report::{
    Meta, Results, RuntimeFigures, CONTAINERD, CONTAINERD_CNI, CONTAINERD_CNI_HOSTPORT, CONTAINERD_CRUN, NIDUS,
    NIDUS_BUILTIN, NIDUS_BUILTIN_HOSTPORT, NIDUS_CNI, NIDUS_EVENTS, NIDUS_OWN_NETNS, NIDUS_USERNS,
};
use crate::runtime::{Kind, Runtime};

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("nidus-bench: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        let mut terminate = signal(SignalKind::terminate()).context("SIGTERM handler")?;
        tokio::select! {
            result = run() => result,
            _ = tokio::signal::ctrl_c() => bail!("interrupted (SIGINT); cleaned up"),
            _ = terminate.recv() => bail!("terminated (SIGTERM); cleaned up"),
        }
    });
    // Everything the run made was dropped (and cleaned up) with its future.
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("nidus-bench: finished with errors (see above)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("nidus-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The whole benchmark; true when it ran without errors (targets aside).
async fn run() -> Result<bool> {
    if !nix::unistd::geteuid().is_root() {
        bail!("the benchmark needs root (namespaces, mounts, cgroups)");
    }
    let options = Options::from_env()?;
    install::ensure_packages(options.only)?;
    images::check_sources()?;
    runtime::nidus_binary()?;
    if options.profile {
        return profile::run(&options).await;
    }
    if options.only == Some(OnlyStep::Drivers) {
        return drivers::run(&options).await;
    }

    let lab = Lab::new()?;
    eprintln!("nidus-bench: working in {} (cgroup {})", lab.places.dir.display(), lab.places.cgroup.relative);
    let image_dir = lab.places.dir.join("images");
    std::fs::create_dir_all(&image_dir)?;
    let busybox = images::busybox(&image_dir)?;
    let pause = images::pause(&image_dir)?;

    eprintln!("starting nidus and containerd");
    let mut nidus = Runtime::start(Kind::Nidus, &lab.places).await?;
    let mut containerd = Runtime::start(Kind::Containerd, &lab.places).await?;
    nidus.import(&[&busybox]).await?;
    containerd.import(&[&pause, &busybox]).await?;
    if options.only == Some(OnlyStep::Pull) {
        let figures = pull::run(&nidus, &containerd, &lab.places.dir, options.pull_iterations.max(1)).await?;
        print!("{}", pull::table(&figures).to_text());
        let dir = Path::new(&options.results_dir);
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("pull-latest.json"), serde_json::to_string_pretty(&figures)?)?;
        nidus.shut_down();
        containerd.shut_down();
        drop((nidus, containerd));
        let errors = lab.final_check();
        errors.iter().for_each(|e| eprintln!("error: {e}"));
        return Ok(errors.is_empty());
    }
    if options.only == Some(OnlyStep::Scale) {
        let outcome = scale::run(
            &mut nidus,
            &mut containerd,
            busybox.reference,
            &options.scale,
            options.concurrency,
            &lab.places.cgroup,
        )
        .await;
        let dir = Path::new(&options.results_dir);
        let mut errors = Vec::new();
        match outcome {
            Ok(figures) => {
                print!("{}", figures.to_text(true));
                errors.extend(figures.errors.iter().cloned());
                match scale::write_alone(&figures, dir) {
                    Ok(json) => eprintln!("results: {} (scale-latest.md and scale-*.svg beside it)", json.display()),
                    Err(e) => errors.push(format!("writing the scale results: {e:#}")),
                }
            }
            Err(e) => errors.push(format!("scale step: {e:#}")),
        }
        nidus.shut_down();
        containerd.shut_down();
        for rt in [&nidus, &containerd] {
            if let Err(e) = rt.save_log(&dir.join("logs")) {
                eprintln!("warning: cannot keep the log of {}: {e:#}", rt.name());
            }
        }
        drop((nidus, containerd));
        errors.extend(lab.final_check());
        errors.iter().for_each(|e| eprintln!("error: {e}"));
        return Ok(errors.is_empty());
    }
    // The networked variants (bridge CNI for both runtimes, nidus's built-in
    // network) and the second reference, containerd + crun.
    eprintln!(
        "starting nidus (bridge CNI), nidus (built-in network), containerd (bridge CNI), containerd + crun, \
         nidus (an events subscriber)"
    );
    let mut others = Vec::new();
    for kind in [Kind::NidusCni, Kind::NidusBuiltin, Kind::ContainerdCni, Kind::ContainerdCrun, Kind::NidusEvents] {
        let mut rt = Runtime::start(kind, &lab.places).await?;
        if kind.is_nidus() {
            rt.import(&[&busybox]).await?;
        } else {
            rt.import(&[&pause, &busybox]).await?;
        }
        others.push(rt);
    }
    let mut nidus_figures = RuntimeFigures::default();
    let mut containerd_figures = RuntimeFigures::default();
    for (rt, figures) in [(&nidus, &mut nidus_figures), (&containerd, &mut containerd_figures)] {
        let idle = memory::daemon(rt)?;
        (figures.memory.daemon_rss_kb_idle, figures.memory.daemon_pss_kb_idle) = (idle.rss_kb, idle.pss_kb);
    }

    let target = |rt: &Runtime| Target {
        cri: rt.cri().clone(),
        logs: rt.logs.clone(),
        image: busybox.reference,
        cgroup_parent: rt.pod_cgroup_parent(),
    };
    let (mut nidus_target, mut containerd_target) = (target(&nidus), target(&containerd));
    let other_targets: Vec<Target> = others.iter().map(target).collect();
    for (rt, t) in [(&nidus, &nidus_target), (&containerd, &containerd_target)] {
        check_nesting(rt, t).await?;
    }

    if options.only == Some(OnlyStep::Exec) {
        let (text, errors) =
            exec_stream::compare([(&nidus, &nidus_target), (&containerd, &containerd_target)], options.iterations)
                .await;
        print!("{text}");
        drop((nidus_target, containerd_target, other_targets));
        nidus.shut_down();
        containerd.shut_down();
        for rt in &mut others {
            rt.shut_down();
        }
        drop((nidus, containerd, others));
        let errors: Vec<String> = errors.into_iter().chain(lab.final_check()).collect();
        errors.iter().for_each(|e| eprintln!("error: {e}"));
        return Ok(errors.is_empty());
    }

    let mut variants = vec![
        Variant { label: NIDUS, target: nidus_target.clone(), network: PodNetwork::Node },
        Variant { label: CONTAINERD, target: containerd_target.clone(), network: PodNetwork::Node },
        Variant { label: NIDUS_OWN_NETNS, target: nidus_target.clone(), network: PodNetwork::Own },
        Variant { label: NIDUS_CNI, target: other_targets[0].clone(), network: PodNetwork::Own },
        Variant { label: NIDUS_BUILTIN, target: other_targets[1].clone(), network: PodNetwork::Own },
        Variant { label: CONTAINERD_CNI, target: other_targets[2].clone(), network: PodNetwork::Own },
        Variant { label: CONTAINERD_CRUN, target: other_targets[3].clone(), network: PodNetwork::Node },
        Variant {
            label: NIDUS_BUILTIN_HOSTPORT,
            target: other_targets[1].clone(),
            network: PodNetwork::OwnWithHostPort,
        },
        Variant {
            label: CONTAINERD_CNI_HOSTPORT,
            target: other_targets[2].clone(),
            network: PodNetwork::OwnWithHostPort,
        },
        Variant { label: NIDUS_USERNS, target: nidus_target.clone(), network: PodNetwork::OwnUserns },
        Variant { label: NIDUS_EVENTS, target: other_targets[4].clone(), network: PodNetwork::Node },
    ];
    // The events variant's daemon has one subscriber reading for the whole run.
    let (subscriber, events_read) = others[4].cri().drain_events().await?;
    // A reference this host cannot run (Debian's crun refuses hybrid cgroups)
    // is left out with its reason, not failed at every iteration.
    let mut crun_unavailable = None;
    if let Some(crun) = variants.iter().find(|v| v.label == CONTAINERD_CRUN) {
        if let Err(e) = lifecycle::timed_lifecycle(&crun.target, "probe-containerd-crun", crun.network).await {
            eprintln!("containerd + crun left out: it cannot run a pod on this host: {e:#}");
            crun_unavailable = Some(format!("{e:#}"));
            variants.retain(|v| v.label != CONTAINERD_CRUN);
        }
    }
    let mut errors = Vec::new();
    eprintln!("warm-up: {} lifecycle(s) per variant", options.warm_up);
    errors.extend(latency::warm_up(&variants, options.warm_up).await);
    eprintln!("latency: {} lifecycles per variant, one at a time", options.iterations);
    let sequential = latency::sequential(&variants, options.iterations).await;
    eprintln!("latency: {} lifecycles per runtime, {} at a time", options.iterations, options.concurrency);
    let concurrent = latency::concurrent(&variants[..2], options.iterations, options.concurrency).await;
    errors.extend(sequential.errors.iter().chain(&concurrent.errors).cloned());
    eprintln!("streaming exec: {} round trips per runtime", options.iterations);
    let (exec_text, exec_errors) =
        exec_stream::compare([(&nidus, &nidus_target), (&containerd, &containerd_target)], options.iterations).await;
    eprint!("{exec_text}");
    errors.extend(exec_errors);
    for rt in [&nidus, &containerd].into_iter().chain(others.iter()) {
        let leaks = leaks::check(rt).await;
        errors.extend(leaks.items.iter().map(|l| format!("{} after the latency phases: {l}", rt.name())));
    }
    subscriber.abort();
    eprintln!("events: the subscriber read {} events", events_read.load(std::sync::atomic::Ordering::Relaxed));
    drop(other_targets);
    for rt in &mut others {
        rt.shut_down();
    }

    eprintln!("memory: daemons with {:?} pods", memory::POD_COUNTS);
    for (rt, t, figures) in
        [(&nidus, &nidus_target, &mut nidus_figures), (&containerd, &containerd_target, &mut containerd_figures)]
    {
        if let Err(e) = memory::measure(rt, t, options.concurrency, &mut figures.memory).await {
            errors.push(format!("{e:#}"));
        }
        let leaks = leaks::check(rt).await;
        errors.extend(leaks.items.iter().map(|l| format!("{} after the memory phase: {l}", rt.name())));
    }

    eprintln!("density: up to {} pods, {} at a time", options.density, options.concurrency);
    for (rt, t, figures) in
        [(&nidus, &nidus_target, &mut nidus_figures), (&containerd, &containerd_target, &mut containerd_figures)]
    {
        figures.density = density::run(rt, t, options.density, options.concurrency).await;
    }

    let mut scale_figures = None;
    if !options.scale.counts.is_empty() {
        eprintln!("scale: {:?} pods per runtime, {} at a time", options.scale.counts, options.concurrency);
        match scale::run(
            &mut nidus,
            &mut containerd,
            busybox.reference,
            &options.scale,
            options.concurrency,
            &lab.places.cgroup,
        )
        .await
        {
            Ok(figures) => {
                errors.extend(figures.errors.iter().cloned());
                scale_figures = Some(figures);
            }
            Err(e) => errors.push(format!("scale step: {e:#}")),
        }
        if !(nidus.is_up() && containerd.is_up()) {
            errors.push(
                "a daemon did not come back from the scale step's restarts; the steps after it are skipped".into(),
            );
            drop((nidus_target, containerd_target, variants));
            nidus.shut_down();
            containerd.shut_down();
            drop((nidus, containerd, others));
            errors.extend(lab.final_check());
            errors.iter().for_each(|e| eprintln!("error: {e}"));
            return Ok(false);
        }
        // The restarts gave both daemons new clients.
        (nidus_target, containerd_target) = (target(&nidus), target(&containerd));
    }

    let mut pull_figures = None;
    if options.pull_iterations > 0 {
        eprintln!("pull: {} cold pulls per runtime from a local registry", options.pull_iterations);
        match pull::run(&nidus, &containerd, &lab.places.dir, options.pull_iterations).await {
            Ok(figures) => pull_figures = Some(figures),
            Err(e) => errors.push(format!("pull step: {e:#}")),
        }
    }

    // BENCH_CHECKPOINT_N (default 5) pod checkpoints and restores, nidus alone.
    let checkpoints = std::env::var("BENCH_CHECKPOINT_N").ok().and_then(|n| n.parse().ok()).unwrap_or(5);
    let mut checkpoint_figures = None;
    if checkpoints > 0 {
        eprintln!("checkpoint: {checkpoints} pod checkpoints and restores (nidus)");
        match pod_checkpoint::run(&nidus_target, &lab.places.dir, checkpoints).await {
            Ok(figures) => checkpoint_figures = Some(figures),
            Err(e) => errors.push(format!("checkpoint step: {e:#}")),
        }
    }

    let meta = Meta {
        date: host::run("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]).map(|s| s.trim().to_string()).unwrap_or_default(),
        kernel: host::run("uname", &["-r"]).map(|s| s.trim().to_string()).unwrap_or_default(),
        cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        iterations: options.iterations,
        concurrency: options.concurrency,
        warm_up: options.warm_up,
        density_requested: options.density,
        nidus_version: nidus.version.clone(),
        containerd_version: containerd.version.clone(),
        runc_version: host::run("runc", &["--version"])
            .ok()
            .and_then(|s| s.lines().next().map(|l| l.trim_start_matches("runc version ").to_string()))
            .unwrap_or_default(),
        crun_version: host::run("crun", &["--version"])
            .ok()
            .and_then(|s| s.lines().next().map(|l| l.trim_start_matches("crun version ").to_string()))
            .map(|version| match &crun_unavailable {
                Some(_) => format!("{version}, which cannot run pods on this host"),
                None => version,
            })
            .unwrap_or_default(),
        nidus_commit: host::run("git", &["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "--short", "HEAD"])
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
    };

    drop((nidus_target, containerd_target, variants));
    nidus.shut_down();
    containerd.shut_down();
    let log_dir = Path::new(&options.results_dir).join("logs");
    for rt in [&nidus, &containerd].into_iter().chain(others.iter()) {
        if let Err(e) = rt.save_log(&log_dir) {
            eprintln!("warning: cannot keep the log of {}: {e:#}", rt.name());
        }
    }
    drop((nidus, containerd, others));
    errors.extend(lab.final_check());

    let results = Results {
        meta,
        sequential,
        concurrent,
        nidus: nidus_figures,
        containerd: containerd_figures,
        errors: errors.clone(),
        pull: pull_figures,
        checkpoint: checkpoint_figures,
        scale: scale_figures,
    };
    print!("{}", results.to_text());
    print!("\n{exec_text}");
    let written = results.write(Path::new(&options.results_dir))?;
    eprintln!("results: {} (and latest.md beside it)", written.display());
    if let Some(figures) = &results.scale {
        let charts = scale::charts(figures, Path::new(&options.results_dir))?;
        eprintln!("charts: {}", charts.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "));
    }
    Ok(errors.is_empty())
}

/// Starts one sleeping pod and checks its pause and container processes are
/// inside the runtime's harness cgroup in every hierarchy (runc nests a
/// relative cgroupsPath below its own cgroup; this proves it did), and so is
/// every other process of the runtime. With the systemd driver: the pause
/// and the container in scopes below the runtime's slice (its shims and
/// spare monitors stay in the harness's cgroup).
async fn check_nesting(rt: &Runtime, target: &Target) -> Result<()> {
    let pod = lifecycle::start_sleeping_pod(target, &format!("nesting-{}", rt.name())).await?;
    let checked = async {
        let pause =
            target.cri.pod_info(&pod.pod_id).await?["pid"].as_i64().context("no pause pid in the pod status")?;
        let container = target.cri.container_info(&pod.container_id).await?["pid"]
            .as_i64()
            .context("no pid in the container status")?;
        rt.check_contained(pause as i32, "the sandbox process")?;
        rt.check_contained(container as i32, "the container process")?;
        if !rt.kind.is_systemd() {
            for pid in rt.processes() {
                rt.check_contained(pid, "a runtime process")?;
            }
        }
        Ok::<_, anyhow::Error>(())
    }
    .await;
    lifecycle::remove_pod(target, &pod.pod_id).await?;
    checked
}
