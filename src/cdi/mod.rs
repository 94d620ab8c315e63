//! CDI (Container Device Interface) devices: the names a container asks for
//! (CRI `CDI_devices` and `cdi.k8s.io/*` annotations, `name`), the spec
//! files of the `[cdi] spec_dirs` (`spec`, `validate`, `registry`), their
//! resolution into edits (`resolve`) and those edits put into the container
//! (`apply`): device nodes and their device cgroup rules, mounts,
//! environment, additional groups and hooks, which run through nidus's OCI
//! hook stages like the `hooks.d` ones.

pub mod apply;
pub mod name;
pub mod registry;
pub mod resolve;
pub mod spec;
pub mod validate;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use name::{requested, Requested};
pub use registry::CdiRegistry;
pub use resolve::{CdiError, Resolved};

/// `[cdi]`: where CDI spec files are read.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CdiSettings {
    /// The directories read, in order: a later one's device overrides an
    /// earlier one's of the same name. Missing directories are skipped.
    pub spec_dirs: Vec<PathBuf>,
}

impl Default for CdiSettings {
    fn default() -> Self {
        Self { spec_dirs: vec![PathBuf::from("/etc/cdi"), PathBuf::from("/var/run/cdi")] }
    }
}

impl CdiSettings {
    pub fn validate(&self) -> Result<(), String> {
        match self.spec_dirs.iter().find(|d| !d.is_absolute() || crate::paths::has_dot_dot(d)) {
            Some(dir) => Err(format!("cdi.spec_dirs must hold absolute paths without '..', got {}", dir.display())),
            None => Ok(()),
        }
    }
}

impl CdiRegistry {
    /// Resolves what a container asks for against the spec files as they
    /// are now; None when it asks for nothing (no file is looked at).
    pub fn resolve(&self, requests: &[Requested]) -> Result<Option<Resolved>, CdiError> {
        if requests.is_empty() {
            return Ok(None);
        }
        resolve::resolve(&self.devices(), requests).map(Some)
    }
}
