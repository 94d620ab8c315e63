//! The latency phases: N timed lifecycles per variant, one at a time and 8
//! at a time. The variants take turns (iteration by iteration, round by
//! round, the first one rotating) so the noise of a shared machine falls on
//! all of them alike.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::task::JoinSet;

use crate::cri::PodNetwork;
use crate::lifecycle::{timed_lifecycle, Step, Target};

/// One way of running the lifecycle: a runtime and a pod network.
#[derive(Clone)]
pub struct Variant {
    /// `nidus`, `containerd`, or `nidus_own_netns`.
    pub label: &'static str,
    pub target: Target,
    pub network: PodNetwork,
}

impl Variant {
    /// The label as it may appear in a pod (host) name.
    fn pod_prefix(&self) -> String {
        self.label.replace('_', "-")
    }
}

/// Samples of every step, per variant label.
#[derive(Debug, Default)]
pub struct Samples {
    pub by_variant: BTreeMap<&'static str, BTreeMap<Step, Vec<Duration>>>,
    pub errors: Vec<String>,
}

impl Samples {
    fn add(&mut self, label: &'static str, result: anyhow::Result<Vec<(Step, Duration)>>) {
        match result {
            Ok(times) => {
                let steps = self.by_variant.entry(label).or_default();
                for (step, duration) in times {
                    steps.entry(step).or_default().push(duration);
                }
            }
            Err(e) => {
                eprintln!("  {label}: iteration failed: {e:#}");
                self.errors.push(format!("{label}: {e:#}"));
            }
        }
    }

    pub fn of(&self, label: &str, step: Step) -> &[Duration] {
        self.by_variant.get(label).and_then(|s| s.get(&step)).map(Vec::as_slice).unwrap_or(&[])
    }
}

/// Untimed lifecycles first, so caches (image layers, binaries) are warm for both.
pub async fn warm_up(variants: &[Variant], count: usize) -> Vec<String> {
    let mut errors = Vec::new();
    for i in 0..count {
        for v in variants {
            if let Err(e) = timed_lifecycle(&v.target, &format!("warm-{}-{i}", v.pod_prefix()), v.network).await {
                errors.push(format!("{} warm-up: {e:#}", v.label));
            }
        }
    }
    errors
}

/// `n` lifecycles per variant, one at a time, variants interleaved.
pub async fn sequential(variants: &[Variant], n: usize) -> Samples {
    let mut samples = Samples::default();
    for i in 0..n {
        for k in 0..variants.len() {
            let v = &variants[(i + k) % variants.len()];
            let result = timed_lifecycle(&v.target, &format!("seq-{}-{i}", v.pod_prefix()), v.network).await;
            samples.add(v.label, result);
        }
        if (i + 1) % 10 == 0 || i + 1 == n {
            eprintln!("  sequential: {}/{n}", i + 1);
        }
    }
    samples
}

/// `n` lifecycles per variant, `concurrency` at a time: rounds of
/// `concurrency` started together, the variants taking turns round by round.
pub async fn concurrent(variants: &[Variant], n: usize, concurrency: usize) -> Samples {
    let mut samples = Samples::default();
    let rounds = n.div_ceil(concurrency.max(1));
    for round in 0..rounds {
        let batch = concurrency.min(n - round * concurrency);
        for k in 0..variants.len() {
            let v = variants[(round + k) % variants.len()].clone();
            let mut tasks = JoinSet::new();
            for j in 0..batch {
                let v = v.clone();
                let name = format!("conc-{}-{}", v.pod_prefix(), round * concurrency + j);
                tasks.spawn(async move { timed_lifecycle(&v.target, &name, v.network).await });
            }
            while let Some(joined) = tasks.join_next().await {
                let result = joined.unwrap_or_else(|e| Err(anyhow::anyhow!("task failed: {e}")));
                samples.add(v.label, result);
            }
        }
        eprintln!("  concurrency {concurrency}: round {}/{rounds}", round + 1);
    }
    samples
}
