//! Timed rounds of CRI calls (a relist, a stats round), the two runtimes
//! taking turns round by round (the first one rotating) so the noise of a
//! shared machine falls on both alike; p50/p99 of the round and the p50 of
//! each call in it. A call one runtime cannot answer at all (containerd's
//! ListPodSandboxStats here: see `stats_round`) is left out of both
//! runtimes' round times, and said so, so the two stay comparable.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;

use super::{relist, stats_round, AtN, Side};
use crate::stats::{self, percentile};

/// Which round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Relist,
    Stats,
}

/// One runtime's rounds at one pod count.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Rounds {
    /// Pods the runtime had.
    pub pods: usize,
    /// Of the round: the calls both runtimes answered every time.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// Rounds that succeeded.
    pub rounds: usize,
    /// The p50 of each call of the round (answered calls).
    pub calls_p50_ms: BTreeMap<&'static str, f64>,
    /// Calls this runtime failed: how often, and the first error.
    pub call_errors: BTreeMap<&'static str, (usize, String)>,
    /// Calls left out of both runtimes' round times, and why.
    pub calls_left_out: BTreeMap<&'static str, String>,
    /// Rounds that failed as a whole (a list short of the pods, a relist call failed).
    pub failed: usize,
    pub first_error: Option<String>,
}

/// The calls of one round: how long each took, or why it failed.
pub type Calls = Vec<(&'static str, std::result::Result<Duration, String>)>;

/// One runtime's raw rounds.
#[derive(Default)]
pub struct Samples {
    pods: usize,
    rounds: Vec<Calls>,
    failed: usize,
    first_error: Option<String>,
}

/// `rounds` rounds per runtime; (nidus, containerd).
pub async fn measure(sides: &[Side<'_>; 2], rounds: usize, which: Which) -> (Samples, Samples) {
    let mut samples = [Samples::default(), Samples::default()];
    for (into, side) in samples.iter_mut().zip(sides) {
        into.pods = side.pods.len();
    }
    for i in 0..rounds {
        for k in 0..2 {
            let s = (i + k) % 2;
            let side = &sides[s];
            let result: Result<Calls> = match which {
                Which::Relist => relist::round(side.cri(), &side.pods, i).await,
                Which::Stats => stats_round::round(side.cri(), &side.pods).await,
            };
            let into = &mut samples[s];
            match result {
                Ok(calls) => into.rounds.push(calls),
                Err(e) => {
                    into.failed += 1;
                    into.first_error.get_or_insert_with(|| format!("{e:#}"));
                }
            }
        }
    }
    let [nidus, containerd] = samples;
    (nidus, containerd)
}

/// Times a call for a round.
pub async fn timed<T>(
    call: impl std::future::Future<Output = Result<T>>,
) -> (std::result::Result<Duration, String>, Option<T>) {
    let began = Instant::now();
    match call.await {
        Ok(answer) => (Ok(began.elapsed()), Some(answer)),
        Err(e) => (Err(format!("{e:#}")), None),
    }
}

pub fn at_n(n: usize, (nidus, containerd): (Samples, Samples)) -> AtN<Rounds> {
    let both = [&nidus, &containerd];
    let all: BTreeSet<&'static str> =
        both.iter().flat_map(|s| s.rounds.iter().flat_map(|r| r.iter().map(|(call, _)| *call))).collect();
    let answered =
        |call: &str| both.iter().all(|s| s.rounds.iter().all(|r| r.iter().any(|(c, took)| *c == call && took.is_ok())));
    let common: BTreeSet<&'static str> = all.iter().copied().filter(|c| answered(c)).collect();
    let mut left_out = BTreeMap::new();
    for (label, s) in [("nidus", &nidus), ("containerd", &containerd)] {
        for (call, took) in s.rounds.iter().flatten() {
            if let Err(e) = took {
                left_out.entry(*call).or_insert_with(|| format!("{label} failed it: {e}"));
            }
        }
    }
    let summary = |s: &Samples| {
        let totals: Vec<Duration> = s
            .rounds
            .iter()
            .map(|r| r.iter().filter(|(c, _)| common.contains(c)).filter_map(|(_, took)| took.as_ref().ok()).sum())
            .collect();
        let mut calls: BTreeMap<&'static str, Vec<Duration>> = BTreeMap::new();
        let mut call_errors: BTreeMap<&'static str, (usize, String)> = BTreeMap::new();
        for (call, took) in s.rounds.iter().flatten() {
            match took {
                Ok(d) => calls.entry(*call).or_default().push(*d),
                Err(e) => call_errors.entry(*call).or_insert_with(|| (0, e.clone())).0 += 1,
            }
        }
        let figures = stats::figures(&totals);
        Rounds {
            pods: s.pods,
            p50_ms: figures.map(|f| f.p50_ms),
            p99_ms: figures.map(|f| f.p99_ms),
            rounds: totals.len(),
            calls_p50_ms: calls
                .iter()
                .filter_map(|(call, d)| Some((*call, stats::round3(percentile(d, 50.0)?.as_secs_f64() * 1000.0))))
                .collect(),
            call_errors,
            calls_left_out: left_out.clone(),
            failed: s.failed,
            first_error: s.first_error.clone(),
        }
    };
    let (nidus, containerd) = (summary(&nidus), summary(&containerd));
    let ratio = |a: Option<f64>, b: Option<f64>| stats::ratio(a?, b?);
    let ratios = BTreeMap::from([
        ("p50", ratio(nidus.p50_ms, containerd.p50_ms)),
        ("p99", ratio(nidus.p99_ms, containerd.p99_ms)),
    ]);
    AtN { n, nidus, containerd, ratios }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> std::result::Result<Duration, String> {
        Ok(Duration::from_millis(v))
    }

    #[test]
    fn a_call_one_runtime_fails_is_left_out_of_both() {
        let nidus = Samples {
            pods: 2,
            rounds: vec![vec![("A", ms(1)), ("B", ms(10))], vec![("A", ms(3)), ("B", ms(30))]],
            ..Default::default()
        };
        let containerd = Samples {
            pods: 2,
            rounds: vec![vec![("A", ms(20)), ("B", Err("no cgroup".into()))], vec![("A", ms(40)), ("B", ms(5))]],
            ..Default::default()
        };
        let at = at_n(2, (nidus, containerd));
        // Only A counts in the round times; B's p50 is still shown for each.
        assert_eq!((at.nidus.p50_ms, at.nidus.p99_ms), (Some(1.0), Some(3.0)));
        assert_eq!((at.containerd.p50_ms, at.containerd.p99_ms), (Some(20.0), Some(40.0)));
        assert_eq!(at.ratios["p50"], Some(0.05));
        assert_eq!(at.nidus.calls_p50_ms["B"], 10.0);
        assert_eq!(at.containerd.calls_p50_ms["B"], 5.0);
        assert_eq!(at.containerd.call_errors["B"], (1, "no cgroup".to_string()));
        assert!(at.nidus.call_errors.is_empty());
        assert_eq!(at.nidus.calls_left_out["B"], "containerd failed it: no cgroup");
    }

    #[test]
    fn every_call_answered_counts_whole() {
        let answered = |a, b| Samples { pods: 1, rounds: vec![vec![("A", ms(a)), ("B", ms(b))]], ..Default::default() };
        let at = at_n(1, (answered(1, 2), answered(10, 20)));
        assert_eq!(at.nidus.p50_ms, Some(3.0));
        assert_eq!(at.containerd.p50_ms, Some(30.0));
        assert_eq!(at.ratios["p50"], Some(0.1));
        assert!(at.nidus.calls_left_out.is_empty());
    }
}
