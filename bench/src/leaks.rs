//! The leak check after a phase: nothing of any pod may be left — not in the
//! runtime's CRI lists, nor as a process in its cgroups, a mount below its
//! directories, a cgroup below its own, or a per-pod state entry. The pod
//! cgroups named by `cgroup_parent` are kubelet's (it makes and removes
//! them): the harness removes those it finds empty, as kubelet would, and
//! counts them apart.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::host;
use crate::runtime::Runtime;

/// How long processes may take to go after the last pod was removed
/// (containerd's shims exit on their own after the task is deleted).
const GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, Default, Clone)]
pub struct LeakReport {
    /// One line per leaked thing.
    pub items: Vec<String>,
    /// Pods whose empty pod cgroup (kubelet's `cgroup_parent`) the harness removed.
    pub pod_cgroups_removed: usize,
}

pub async fn check(rt: &Runtime) -> LeakReport {
    let mut report = LeakReport::default();
    let cri = rt.cri();
    match cri.list_pods().await {
        Ok(pods) => report.items.extend(pods.iter().map(|p| format!("pod {} still listed", p.id))),
        Err(e) => report.items.push(format!("ListPodSandbox failed: {e:#}")),
    }
    match cri.list_containers().await {
        Ok(list) => report.items.extend(list.iter().map(|c| format!("container {} still listed", c.id))),
        Err(e) => report.items.push(format!("ListContainers failed: {e:#}")),
    }
    let deadline = Instant::now() + GRACE;
    while !rt.processes().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if let Err(e) = rt.collect_garbage() {
        report.items.push(format!("garbage collection failed: {e:#}"));
    }
    for pid in rt.processes() {
        report.items.push(format!("process {pid} ({}) still running", host::comm_of(pid)));
    }
    for mount in rt.mounts() {
        report.items.push(format!("mount {} left", mount.display()));
    }
    report.pod_cgroups_removed = remove_empty_pod_cgroups(rt);
    for cgroup in rt.cgroups() {
        report.items.push(format!("cgroup {} left", cgroup.display()));
    }
    for entry in rt.new_state_entries() {
        report.items.push(format!("state {} left", entry.display()));
    }
    report
}

/// Removes the empty `pod<uid>` cgroups (one level below where the runtime
/// nests pod cgroups) in every hierarchy; returns for how many pods. With the
/// systemd driver these are the pod slices, which systemd removes when the
/// harness stops them (as kubelet does) — those with no cgroup below them.
fn remove_empty_pod_cgroups(rt: &Runtime) -> usize {
    if rt.kind.is_systemd() {
        return stop_empty_pod_slices(rt);
    }
    let mut removed = BTreeSet::new();
    for parent in rt.pod_cgroup_parents() {
        let children: Vec<PathBuf> = host::entries(&parent)
            .into_iter()
            .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("pod")))
            .collect();
        for dir in children {
            if fs::remove_dir(&dir).is_ok() {
                removed.insert(dir.file_name().map(|n| n.to_os_string()));
            }
        }
    }
    removed.len()
}

/// Stops the pod slices below the runtime's slice that hold no cgroup (a
/// scope left there is a leak the check reports); returns how many.
fn stop_empty_pod_slices(rt: &Runtime) -> usize {
    let mut stopped = 0;
    for parent in rt.pod_cgroup_parents() {
        for dir in host::entries(&parent) {
            let Some(name) = dir.file_name().map(|n| n.to_string_lossy().into_owned()) else { continue };
            let empty = host::entries(&dir).iter().all(|e| !e.is_dir());
            if dir.is_dir() && name.ends_with(".slice") && empty && host::run("systemctl", &["stop", &name]).is_ok() {
                stopped += 1;
            }
        }
    }
    stopped
}
