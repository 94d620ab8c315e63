//! `[cdi]`: the directories of the CDI spec files (`cdi/` reads them).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `[cdi]`: where CDI spec files are read.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct CdiSettings {
    /// The directories read, in order: a later one's device overrides an
    /// earlier one's of the same name. Missing directories are skipped.
    pub(crate) spec_dirs: Vec<PathBuf>,
}

impl Default for CdiSettings {
    fn default() -> Self {
        Self { spec_dirs: vec![PathBuf::from("/etc/cdi"), PathBuf::from("/var/run/cdi")] }
    }
}

impl CdiSettings {
    pub(crate) fn validate(&self) -> Result<(), String> {
        match self.spec_dirs.iter().find(|d| !d.is_absolute() || crate::paths::has_dot_dot(d)) {
            Some(dir) => Err(format!("cdi.spec_dirs must hold absolute paths without '..', got {}", dir.display())),
            None => Ok(()),
        }
    }
}
