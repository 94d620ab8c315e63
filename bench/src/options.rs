//! Run options from the environment: `BENCH_N` (iterations per step, default
//! 50), `BENCH_DENSITY` (density target, default 500), `BENCH_CONCURRENCY`
//! (default 8), `BENCH_WARMUP` (untimed lifecycles first, default 2) and
//! `BENCH_RESULTS` (output directory, default `bench-results`), `BENCH_PULL_N`
//! (pulls per runtime in the pull step, default 5), `BENCH_CHECKPOINT_N` (pod
//! checkpoints and restores in the checkpoint step, nidus alone, default 5);
//! the scale step's `BENCH_SCALE` (pod counts, default `10,110`; `0` skips
//! the step), `BENCH_SCALE_ROUNDS` (relist and stats rounds per count,
//! default 50), `BENCH_SCALE_IDLE` (seconds of the idle window, default 30),
//! `BENCH_SCALE_BUSY_N` (lifecycles per runtime with and without hogs,
//! default 20; 0 skips them) and `BENCH_SCALE_FLOOR_MIB` (no pod is added
//! while MemAvailable is below it, default 3072); `BENCH_ONLY=pull`,
//! `BENCH_ONLY=exec` or `BENCH_ONLY=scale` runs that step alone (the pull
//! step, the streaming exec round trip of `exec_stream`, or the scale step),
//! `BENCH_ONLY=drivers` the cgroup-driver step of a systemd node (`drivers`);
//! `BENCH_PROFILE=1` runs nidus alone (see `profile`). nidus's log
//! filter is `BENCH_NIDUS_LOG` (default `info`; `nidus=debug` shows the
//! timings of each create).

use anyhow::{bail, Context, Result};

#[derive(Debug, Clone)]
pub struct Options {
    pub iterations: usize,
    pub density: usize,
    pub concurrency: usize,
    pub warm_up: usize,
    pub results_dir: String,
    /// nidus alone, for profiling: no containerd, no ratios, no results file.
    pub profile: bool,
    /// Pulls per runtime in the pull step (`BENCH_PULL_N`, default 5; 0 skips it).
    pub pull_iterations: usize,
    /// `BENCH_ONLY`: one step alone, for both runtimes.
    pub only: Option<OnlyStep>,
    pub scale: ScaleOptions,
}

/// The scale step's settings.
#[derive(Debug, Clone)]
pub struct ScaleOptions {
    /// Pod counts, ascending (`BENCH_SCALE`); empty skips the step.
    pub counts: Vec<usize>,
    /// Relist and stats rounds per runtime at each count.
    pub rounds: usize,
    /// The idle window, in seconds.
    pub idle_secs: u64,
    /// Lifecycles per runtime without hogs and with them (0 skips both).
    pub busy_iterations: usize,
    /// No pod is started while the machine's MemAvailable is below this (MiB).
    pub floor_mib: u64,
}

/// The steps that can run alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnlyStep {
    /// The pull step.
    Pull,
    /// The streaming exec round trip.
    Exec,
    /// The scale step.
    Scale,
    /// The cgroup drivers on a systemd node (see `drivers`).
    Drivers,
}

impl Options {
    pub fn from_env() -> Result<Self> {
        let options = Self {
            iterations: number("BENCH_N", 50)?,
            density: number("BENCH_DENSITY", 500)?,
            concurrency: number("BENCH_CONCURRENCY", 8)?,
            warm_up: number("BENCH_WARMUP", 2)?,
            results_dir: std::env::var("BENCH_RESULTS").unwrap_or_else(|_| "bench-results".into()),
            profile: number("BENCH_PROFILE", 0)? != 0,
            pull_iterations: number("BENCH_PULL_N", 5)?,
            only: match std::env::var("BENCH_ONLY").unwrap_or_default().as_str() {
                "" => None,
                "pull" => Some(OnlyStep::Pull),
                "exec" => Some(OnlyStep::Exec),
                "scale" => Some(OnlyStep::Scale),
                "drivers" => Some(OnlyStep::Drivers),
                other => {
                    bail!("BENCH_ONLY={other:?}: the steps that run alone are `pull`, `exec`, `scale` and `drivers`")
                }
            },
            scale: ScaleOptions {
                counts: pod_counts(&std::env::var("BENCH_SCALE").unwrap_or_default())?,
                rounds: number("BENCH_SCALE_ROUNDS", 50)?,
                idle_secs: number("BENCH_SCALE_IDLE", 30)? as u64,
                busy_iterations: number("BENCH_SCALE_BUSY_N", 20)?,
                floor_mib: number("BENCH_SCALE_FLOOR_MIB", 3072)? as u64,
            },
        };
        if options.iterations == 0 || options.concurrency == 0 {
            bail!("BENCH_N and BENCH_CONCURRENCY must be at least 1");
        }
        if options.scale.rounds == 0 || options.scale.idle_secs == 0 {
            bail!("BENCH_SCALE_ROUNDS and BENCH_SCALE_IDLE must be at least 1");
        }
        if options.only == Some(OnlyStep::Scale) && options.scale.counts.is_empty() {
            bail!("BENCH_ONLY=scale with BENCH_SCALE=0: no pod count to run");
        }
        Ok(options)
    }
}

/// The pod counts of `BENCH_SCALE`: comma-separated, sorted and deduplicated;
/// unset or empty is the default (`10,110`, a run of a few minutes on two
/// cores), `0` none.
fn pod_counts(text: &str) -> Result<Vec<usize>> {
    let text = match text.trim() {
        "" => "10,110",
        "0" => return Ok(Vec::new()),
        other => other,
    };
    let mut counts = Vec::new();
    for part in text.split(',') {
        let count: usize =
            part.trim().parse().with_context(|| format!("BENCH_SCALE={text:?}: {part:?} is not a whole number"))?;
        if count == 0 {
            bail!("BENCH_SCALE={text:?}: a pod count must be at least 1 (`0` alone skips the step)");
        }
        counts.push(count);
    }
    counts.sort_unstable();
    counts.dedup();
    Ok(counts)
}

fn number(name: &str, default: usize) -> Result<usize> {
    match std::env::var(name) {
        Ok(text) if !text.trim().is_empty() => {
            text.trim().parse().with_context(|| format!("{name}={text:?} is not a whole number"))
        }
        _ => Ok(default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_pod_counts() {
        assert_eq!(pod_counts("").unwrap(), vec![10, 110]);
        assert_eq!(pod_counts(" 1000, 10,110,500,10 ").unwrap(), vec![10, 110, 500, 1000]);
        assert_eq!(pod_counts("0").unwrap(), Vec::<usize>::new());
        assert!(pod_counts("10,x").is_err());
        assert!(pod_counts("10,0").is_err());
    }
}
