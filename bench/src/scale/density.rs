//! Density at one pod count: the time to start the pods (one `sleep`
//! container each, `concurrency` at a time) and to remove them, the
//! failures, and the leak check after. No pod is started while the machine's
//! MemAvailable is below the floor or its tasks near `pid_max`: the count
//! stops there, and where and why is recorded (containerd's shims stop it
//! long before nidus on a small machine).

use std::fs;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::task::JoinSet;

use super::Side;
use crate::leaks;
use crate::lifecycle::{start_sleeping_pod, Target};
use crate::pods;
use crate::stats::round3;

/// Tasks (threads) of the whole machine at which no more pods are started, as a share of `pid_max`.
const TASKS_SHARE: f64 = 0.75;

/// One runtime's density at one pod count.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Density {
    pub requested: usize,
    pub started: usize,
    pub failed: usize,
    /// Where and why starting stopped short of `requested`.
    pub stopped_early: Option<String>,
    pub start_s: f64,
    pub ms_per_pod: f64,
    pub remove_s: f64,
    pub teardown_ms_per_pod: f64,
    pub remove_failed: usize,
    pub leaked: usize,
    /// The first leaks, one line each.
    pub leaks: Vec<String>,
    /// The first errors.
    #[serde(skip)]
    pub errors: Vec<String>,
}

/// What removing the pods gave.
pub struct Teardown {
    elapsed: Duration,
    removed: usize,
    failed: usize,
    leaks: Vec<String>,
}

impl Density {
    pub fn add_teardown(&mut self, t: &Teardown) {
        self.remove_s = round3(t.elapsed.as_secs_f64());
        self.teardown_ms_per_pod = round3(t.elapsed.as_secs_f64() * 1000.0 / t.removed.max(1) as f64);
        self.remove_failed = t.failed;
        self.leaked = t.leaks.len();
        self.leaks = t.leaks.iter().take(10).cloned().collect();
    }
}

/// Starts `n` pods into `side.pods`, `concurrency` in flight, while the machine has room.
pub async fn start(side: &mut Side<'_>, n: usize, concurrency: usize, floor_mib: u64) -> Density {
    let target = side.target();
    let began = Instant::now();
    let mut names = pods::names(&format!("scale-{}-{n}", side.rt.name()), 0, n).into_iter();
    let mut tasks = JoinSet::new();
    let mut figures = Density { requested: n, ..Default::default() };
    loop {
        while tasks.len() < concurrency.max(1) && figures.stopped_early.is_none() {
            if let Some(reason) = no_room(floor_mib) {
                let at = side.pods.len() + tasks.len();
                eprintln!("  {}: stopped at {at} of {n} pods: {reason}", side.rt.name());
                figures.stopped_early = Some(format!("stopped at {at} of {n} pods: {reason}"));
                break;
            }
            let Some(name) = names.next() else { break };
            let target: Target = target.clone();
            tasks.spawn(async move { start_sleeping_pod(&target, &name).await });
        }
        let Some(joined) = tasks.join_next().await else { break };
        match joined.map_err(anyhow::Error::from).and_then(|r| r) {
            Ok(pod) => side.pods.push(pod),
            Err(e) => {
                figures.failed += 1;
                if figures.errors.len() < 5 {
                    figures.errors.push(format!("{e:#}"));
                }
            }
        }
    }
    let elapsed = began.elapsed();
    figures.started = side.pods.len();
    figures.start_s = round3(elapsed.as_secs_f64());
    figures.ms_per_pod = round3(elapsed.as_secs_f64() * 1000.0 / figures.started.max(1) as f64);
    eprintln!(
        "  {}: {} of {n} pods started in {:.1} s ({} failed)",
        side.rt.name(),
        figures.started,
        elapsed.as_secs_f64(),
        figures.failed
    );
    figures
}

/// Removes the side's pods and checks the runtime for leaks; errors go to `errors`.
pub async fn tear_down(side: &mut Side<'_>, concurrency: usize, errors: &mut Vec<String>) -> Teardown {
    let target = side.target();
    let (elapsed, removal_errors) = pods::remove_many(&target, &side.pods, concurrency).await;
    let removed = side.pods.len();
    side.pods.clear();
    let report = leaks::check(side.rt).await;
    errors.extend(removal_errors.iter().take(5).map(|e| format!("scale {} teardown: {e}", side.label)));
    errors.extend(report.items.iter().take(10).map(|l| format!("scale {} leak: {l}", side.label)));
    Teardown { elapsed, removed, failed: removal_errors.len(), leaks: report.items }
}

/// Why no more pods should start now, if so.
fn no_room(floor_mib: u64) -> Option<String> {
    if let Some(available) = meminfo_mib("MemAvailable") {
        if available < floor_mib {
            return Some(format!("MemAvailable {available} MiB is under the floor of {floor_mib} MiB"));
        }
    }
    if let (Some(tasks), Some(max)) = (tasks(), pid_max()) {
        if tasks as f64 > max as f64 * TASKS_SHARE {
            return Some(format!("{tasks} tasks on the machine, over {:.0} % of pid_max {max}", TASKS_SHARE * 100.0));
        }
    }
    None
}

/// A `/proc/meminfo` figure in MiB.
pub fn meminfo_mib(key: &str) -> Option<u64> {
    let text = fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo(&text, key).map(|kb| kb / 1024)
}

fn parse_meminfo(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.trim().strip_suffix("kB")?.trim().parse().ok())
}

pub fn pid_max() -> Option<u64> {
    fs::read_to_string("/proc/sys/kernel/pid_max").ok()?.trim().parse().ok()
}

/// Tasks (threads) on the machine: the total of `/proc/loadavg`'s fourth field.
fn tasks() -> Option<u64> {
    let text = fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().nth(3)?.split_once('/')?.1.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_fields() {
        let text = "MemTotal:       24576000 kB\nMemFree:  100 kB\nMemAvailable:   3145728 kB\n";
        assert_eq!(parse_meminfo(text, "MemAvailable"), Some(3145728));
        assert_eq!(parse_meminfo(text, "MemTotal"), Some(24576000));
        assert_eq!(parse_meminfo(text, "Mem"), None);
    }
}
