//! The systemd cgroup driver's cgroups: a pod's cgroup is a slice (kubelet's
//! `cgroup_parent`, expanded as systemd does, or nidus's own
//! `<default parent>-pod<id>.slice`), and the pause and every container
//! get a transient scope `nidus-<id>.scope` in it with `Delegate=yes`,
//! started around a process already there (the pause's launcher, the
//! container's monitor) so the scope's cgroup exists before anything joins
//! it. The limits go in as the scope's properties (systemd keeps them across
//! `daemon-reload`) and into the cgroup files (`Cgroups::apply`).
//!
//! Which driver is in use is decided once at start (`choose`).

use std::sync::Arc;

use oci_spec::runtime::LinuxResources;

use super::{CgroupError, CgroupPath, CgroupVersion};
use crate::systemd::{self, properties, slice, Scope, Systemd, SystemdError};

/// The prefix of every unit nidus starts.
const UNIT_PREFIX: &str = "nidus-";

/// The scopes of pods and containers, through systemd.
pub(crate) struct SystemdScopes {
    systemd: Systemd,
    unified: properties::Unified,
    /// The runtime the blocking callers' requests run on.
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for SystemdScopes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SystemdScopes").field("systemd", &self.systemd.version).finish()
    }
}

/// The driver the configuration asks for (`[cgroup] driver`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wanted {
    Auto,
    Cgroupfs,
    Systemd,
}

/// The driver chosen at start.
pub(crate) enum Choice {
    Cgroupfs,
    Systemd(Arc<SystemdScopes>),
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum DriverError {
    #[error("[cgroup] driver = \"systemd\", but PID 1 is not systemd (no /run/systemd/system)")]
    NotBooted,
    #[error("[cgroup] driver = \"systemd\", but systemd does not answer: {0}")]
    NoAnswer(SystemdError),
    #[error("[cgroup] driver = \"systemd\" needs cgroup_root = \"/\" (systemd places the slices), got {0:?}")]
    CgroupRoot(String),
    #[error("[cgroup] driver = \"systemd\": sandbox.default_cgroup_parent {0}")]
    DefaultParent(slice::BadSlice),
}

/// The driver for `wanted` (`auto`: systemd when PID 1 is systemd and
/// answers on the system bus, else cgroupfs; an explicit `systemd` that cannot be is an
/// error, never a quiet fallback).
pub(crate) async fn choose(
    wanted: Wanted,
    version: CgroupVersion,
    cgroup_root: &str,
    default_parent: &str,
) -> Result<Choice, DriverError> {
    let explicit = match wanted {
        Wanted::Cgroupfs => return Ok(Choice::Cgroupfs),
        Wanted::Systemd => true,
        Wanted::Auto => false,
    };
    if !systemd::booted() {
        return if explicit { Err(DriverError::NotBooted) } else { Ok(Choice::Cgroupfs) };
    }
    let fits = cgroup_root.trim_end_matches('/').is_empty();
    if !fits {
        if explicit {
            return Err(DriverError::CgroupRoot(cgroup_root.to_string()));
        }
        tracing::info!(cgroup_root, "cgroup driver: cgroupfs (systemd runs, but cgroup_root is not /)");
        return Ok(Choice::Cgroupfs);
    }
    slice::expand(&default_slice(default_parent, "0")).map_err(DriverError::DefaultParent)?;
    match Systemd::connect().await {
        Ok(systemd) => {
            let unified = match version {
                CgroupVersion::V2 => properties::Unified::V2,
                CgroupVersion::V1 => properties::Unified::V1,
            };
            tracing::info!(systemd = %systemd.version, "cgroup driver: systemd");
            let runtime = tokio::runtime::Handle::current();
            Ok(Choice::Systemd(Arc::new(SystemdScopes { systemd, unified, runtime })))
        }
        Err(e) if explicit => Err(DriverError::NoAnswer(e)),
        Err(e) => {
            tracing::warn!(error = %e, "cgroup driver: cgroupfs (systemd is PID 1 but does not answer)");
            Ok(Choice::Cgroupfs)
        }
    }
}

/// nidus's own slice for pod `id` when the client names no parent.
fn default_slice(default_parent: &str, id: &str) -> String {
    format!("{default_parent}-pod{id}.slice")
}

/// The unit a scope's cgroup path ends in.
pub(crate) fn unit_of(path: &CgroupPath) -> &str {
    path.as_str().rsplit('/').next().unwrap_or_default()
}

/// The id in a unit name nidus gave (`nidus-<id>.scope`).
pub(crate) fn id_of(unit: &str) -> Option<&str> {
    unit.strip_prefix(UNIT_PREFIX)?.strip_suffix(".scope")
}

impl SystemdScopes {
    /// The pod cgroup: the client's slice (checked and expanded), or
    /// nidus's own for this pod.
    pub(crate) fn pod_cgroup(
        &self,
        given: Option<&CgroupPath>,
        id: &str,
        default_parent: &str,
    ) -> Result<CgroupPath, slice::BadSlice> {
        let expanded = match given {
            Some(parent) => slice::parse_parent(parent.as_str())?,
            None => slice::expand(&default_slice(default_parent, id))?,
        };
        CgroupPath::parse(&expanded)
            .map_err(|_| slice::BadSlice { name: expanded, why: "the root slice cannot hold a pod" })
    }

    /// The scope of the pause or container `id` in `pod_cgroup`.
    pub(crate) fn scope_path(pod_cgroup: &CgroupPath, id: &str) -> Result<CgroupPath, CgroupError> {
        pod_cgroup.join(&format!("{UNIT_PREFIX}{id}.scope"))
    }

    /// Starts scope `path` around process `pid`, limited to `resources`,
    /// and returns once the process is in it.
    pub(crate) async fn start(
        &self,
        path: &CgroupPath,
        pid: i32,
        description: String,
        resources: &LinuxResources,
    ) -> Result<(), CgroupError> {
        let slice = path.parent().map(|p| unit_of(&p).to_string()).unwrap_or_else(|| "-.slice".into());
        let scope = Scope {
            unit: unit_of(path),
            slice: &slice,
            description,
            pid: pid as u32,
            properties: properties::from_resources(resources, self.unified),
        };
        let began = std::time::Instant::now();
        self.systemd.start_scope(scope).await.map_err(|e| systemd_error(path, e))?;
        tracing::debug!(unit = unit_of(path), elapsed_us = began.elapsed().as_micros() as u64, "scope started");
        Ok(())
    }

    /// `start` from a blocking thread.
    pub(crate) fn start_blocking(
        &self,
        path: &CgroupPath,
        pid: i32,
        description: String,
        resources: &LinuxResources,
    ) -> Result<(), CgroupError> {
        self.runtime.block_on(self.start(path, pid, description, resources))
    }

    /// Sets the unit properties of `resources` on scope or slice `path`.
    pub(crate) async fn update(&self, path: &CgroupPath, resources: &LinuxResources) -> Result<(), CgroupError> {
        let props = properties::from_resources(resources, self.unified);
        self.systemd.set_properties(unit_of(path), &props).await.map_err(|e| systemd_error(path, e))
    }

    /// `update` from a blocking thread.
    pub(crate) fn update_blocking(&self, path: &CgroupPath, resources: &LinuxResources) -> Result<(), CgroupError> {
        self.runtime.block_on(self.update(path, resources))
    }

    /// Stops the unit of `path` (a scope whose processes are gone, or a
    /// slice of nidus's own); one not loaded is stopped already.
    pub(crate) fn stop_blocking(&self, path: &CgroupPath) -> Result<(), CgroupError> {
        self.runtime.block_on(self.systemd.stop(unit_of(path))).map_err(|e| systemd_error(path, e))
    }

    /// Kills and stops every loaded `nidus-*.scope` whose pod or container
    /// is not `known`: what a daemon killed mid-create or mid-removal left.
    /// Failures are logged: the start goes on.
    pub(crate) async fn stop_leftovers(&self, known: impl Fn(&str) -> bool) {
        let pattern = format!("{UNIT_PREFIX}*.scope");
        let units = match self.systemd.units(&pattern).await {
            Ok(units) => units,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the scopes nidus left");
                return;
            }
        };
        for unit in units.iter().filter(|u| id_of(u).is_some_and(|id| !known(id))) {
            let stopped = match self.systemd.kill(unit, libc::SIGKILL).await {
                Ok(()) => self.systemd.stop(unit).await,
                Err(e) if e.is_no_such_unit() => Ok(()),
                Err(e) => Err(e),
            };
            match stopped {
                Ok(()) => tracing::info!(unit = %unit, "stopped a scope no pod or container owns"),
                Err(e) => tracing::warn!(unit = %unit, error = %e, "cannot stop a scope no pod or container owns"),
            }
        }
    }

    pub(crate) fn version(&self) -> &str {
        &self.systemd.version
    }
}

fn systemd_error(path: &CgroupPath, source: SystemdError) -> CgroupError {
    CgroupError::Systemd { path: path.to_string(), source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_ids_follow_the_scope_path() {
        let pod = CgroupPath::parse("kubepods.slice/kubepods-pod1.slice").unwrap();
        let scope = SystemdScopes::scope_path(&pod, "abc").unwrap();
        assert_eq!(scope.as_str(), "kubepods.slice/kubepods-pod1.slice/nidus-abc.scope");
        assert_eq!(unit_of(&scope), "nidus-abc.scope");
        assert_eq!(id_of("nidus-abc.scope"), Some("abc"));
        assert_eq!(id_of("other-abc.scope"), None);
        assert_eq!(default_slice("nidus", "abc"), "nidus-podabc.slice");
    }
}
