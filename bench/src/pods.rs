//! Many sleeping pods at once: starting them `concurrency` at a time (a
//! sliding window) and tearing them down the same way.

use std::time::{Duration, Instant};

use anyhow::Result;
use tokio::task::JoinSet;

use crate::lifecycle::{remove_pod, start_sleeping_pod, SleepingPod, Target};

/// What starting a batch of pods gave.
#[derive(Debug, Default)]
pub struct Started {
    pub pods: Vec<SleepingPod>,
    pub errors: Vec<String>,
    pub elapsed: Duration,
}

/// Starts the pods named `names`, `concurrency` in flight at a time.
pub async fn start_many(target: &Target, names: Vec<String>, concurrency: usize) -> Started {
    let began = Instant::now();
    let mut started = Started::default();
    let mut tasks = JoinSet::new();
    let mut names = names.into_iter();
    loop {
        while tasks.len() < concurrency.max(1) {
            let Some(name) = names.next() else { break };
            let target = target.clone();
            tasks.spawn(async move { start_sleeping_pod(&target, &name).await });
        }
        let Some(joined) = tasks.join_next().await else { break };
        match joined.map_err(anyhow::Error::from).and_then(|r| r) {
            Ok(pod) => started.pods.push(pod),
            Err(e) => started.errors.push(format!("{e:#}")),
        }
    }
    started.elapsed = began.elapsed();
    started
}

/// Stops and removes `pods`, `concurrency` at a time; returns the time it
/// took and the errors.
pub async fn remove_many(target: &Target, pods: &[SleepingPod], concurrency: usize) -> (Duration, Vec<String>) {
    let began = Instant::now();
    let mut errors = Vec::new();
    let mut tasks = JoinSet::new();
    let mut ids = pods.iter().map(|p| p.pod_id.clone());
    loop {
        while tasks.len() < concurrency.max(1) {
            let Some(id) = ids.next() else { break };
            let target = target.clone();
            tasks.spawn(
                async move { remove_pod(&target, &id).await.map_err(|e| e.context(format!("removing pod {id}"))) },
            );
        }
        let Some(joined) = tasks.join_next().await else { break };
        if let Err(e) = joined.map_err(anyhow::Error::from).and_then(|r: Result<()>| r) {
            errors.push(format!("{e:#}"));
        }
    }
    (began.elapsed(), errors)
}

/// Pod names `<prefix>-<first>` … `<prefix>-<first + count - 1>`.
pub fn names(prefix: &str, first: usize, count: usize) -> Vec<String> {
    (first..first + count).map(|i| format!("{prefix}-{i}")).collect()
}
