//! Run options from the environment: `BENCH_N` (iterations per step, default
//! 50), `BENCH_DENSITY` (density target, default 500), `BENCH_CONCURRENCY`
//! (default 8), `BENCH_WARMUP` (untimed lifecycles first, default 2) and
//! `BENCH_RESULTS` (output directory, default `bench-results`), `BENCH_PULL_N`
//! (pulls per runtime in the pull step, default 5), `BENCH_CHECKPOINT_N` (pod
//! checkpoints and restores in the checkpoint step, nidus alone, default 5); `BENCH_ONLY=pull` or
//! `BENCH_ONLY=exec` runs that step alone (the pull step, or the streaming
//! exec round trip of `exec_stream`); `BENCH_PROFILE=1` runs nidus alone
//! (see `profile`). nidus's log
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
}

/// The steps that can run alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnlyStep {
    /// The pull step.
    Pull,
    /// The streaming exec round trip.
    Exec,
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
                other => bail!("BENCH_ONLY={other:?}: the steps that run alone are `pull` and `exec`"),
            },
        };
        if options.iterations == 0 || options.concurrency == 0 {
            bail!("BENCH_N and BENCH_CONCURRENCY must be at least 1");
        }
        Ok(options)
    }
}

fn number(name: &str, default: usize) -> Result<usize> {
    match std::env::var(name) {
        Ok(text) if !text.trim().is_empty() => {
            text.trim().parse().with_context(|| format!("{name}={text:?} is not a whole number"))
        }
        _ => Ok(default),
    }
}
