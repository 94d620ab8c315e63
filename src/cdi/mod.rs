//! CDI (Container Device Interface) devices: the names a container asks for
//! (CRI `CDI_devices` and `cdi.k8s.io/*` annotations, `name`), the spec
//! files of the `[cdi] spec_dirs` (`spec`, `validate`, `registry`), their
//! resolution into edits (`resolve`): device nodes and their device cgroup
//! rules, mounts, environment, additional groups and hooks, which run
//! through nidus's OCI hook stages like the `hooks.d` ones. The container
//! side puts the edits into the container (`container::cdi_edits`).

pub(crate) mod name;
pub(crate) mod registry;
pub(crate) mod resolve;
pub(crate) mod spec;
pub(crate) mod validate;

pub(crate) use name::{requested, Requested};
pub(crate) use registry::CdiRegistry;
pub(crate) use resolve::{CdiError, Resolved};

/// The mounts the runtime makes before any other, which no CDI mount replaces.
pub(crate) const RUNTIME_MOUNTS: &[&str] =
    &["/proc", "/dev", "/dev/pts", "/dev/mqueue", "/sys", "/sys/fs/cgroup", "/dev/shm"];

impl CdiRegistry {
    /// Resolves what a container asks for against the spec files as they
    /// are now; None when it asks for nothing (no file is looked at).
    pub(crate) fn resolve(&self, requests: &[Requested]) -> Result<Option<Resolved>, CdiError> {
        if requests.is_empty() {
            return Ok(None);
        }
        resolve::resolve(&self.devices(), requests).map(Some)
    }
}
