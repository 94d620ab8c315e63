//! A counter container and what a checkpoint test reads of it: the counts
//! it printed, waits for them, and an archive's entries.

use std::path::Path;
use std::time::{Duration, Instant};

use super::client::log_lines;
use super::Cri;

/// Prints `count N` every 0.2 s, from 0.
pub const COUNTER: &str = "i=0; while true; do echo count $i; i=$((i+1)); sleep 0.2; done";

/// A thousand processes, then a counter: CRIU dumps each process, which takes seconds.
pub const MANY: &str =
    "for i in $(seq 1000); do sleep 1000 & done; echo ready; while true; do echo count $i; i=$((i+1)); sleep 0.2; done";

/// The counts the container printed so far.
pub async fn counts(cri: &mut Cri, id: &str) -> Vec<u64> {
    log_lines(&cri.logs(id).await, "stdout")
        .iter()
        .filter_map(|l| l.strip_prefix("count ").and_then(|n| n.trim().parse().ok()))
        .collect()
}

pub async fn wait_for_count(cri: &mut Cri, id: &str, at_least: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(&last) = counts(cri, id).await.last() {
            if last >= at_least {
                return last;
            }
        }
        assert!(Instant::now() < deadline, "container {id} did not count to {at_least}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The first count a (restored) container prints.
pub async fn first_count(cri: &mut Cri, id: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(&first) = counts(cri, id).await.first() {
            return first;
        }
        assert!(Instant::now() < deadline, "container {id} printed no count");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn tar_list(archive: &Path) -> Vec<String> {
    let out = std::process::Command::new("tar").arg("-tf").arg(archive).output().expect("tar");
    assert!(out.status.success(), "tar -tf {}: {}", archive.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect()
}
