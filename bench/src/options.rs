//! Run options from the environment: `BENCH_N` (iterations per step, default
//! 50), `BENCH_DENSITY` (density target, default 500), `BENCH_CONCURRENCY`
//! (default 8), `BENCH_WARMUP` (untimed lifecycles first, default 2) and
//! `BENCH_RESULTS` (output directory, default `bench-results`), `BENCH_PULL_N`
//! (pulls per runtime in the pull step, default 5) and `BENCH_ONLY=pull` (that step alone);
//! `BENCH_PROFILE=1` runs nidus alone (see `profile`); `BENCH_EXEC_ONLY=1`
//! runs only the streaming exec round trip (see `exec_stream`). nidus's log
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
    /// Only the streaming exec round trip, for both runtimes.
    pub exec_only: bool,
    /// Pulls per runtime in the pull step (`BENCH_PULL_N`, default 5; 0 skips it).
    pub pull_iterations: usize,
    /// `BENCH_ONLY=pull`: the pull step alone.
    pub only_pull: bool,
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
            exec_only: number("BENCH_EXEC_ONLY", 0)? != 0,
            pull_iterations: number("BENCH_PULL_N", 5)?,
            only_pull: match std::env::var("BENCH_ONLY").unwrap_or_default().as_str() {
                "" => false,
                "pull" => true,
                other => bail!("BENCH_ONLY={other:?}: the only step that runs alone is `pull`"),
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
