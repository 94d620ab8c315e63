//! The record of a checkpoint under way, beside the container's record: it
//! is written before CRIU runs and the archive's temporary file can exist,
//! and removed once the archive is in place or discarded. A daemon killed
//! meanwhile leaves it, and the next start finishes that checkpoint's
//! business from it (see container::manager::checkpoint): CRIU's deadline,
//! and where its temporary archive is.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::store::{self, StoreError};

/// Its file, in the container's directory.
pub(crate) const FILE: &str = "checkpoint-in-progress.json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InProgress {
    /// The requested location.
    pub(crate) location: PathBuf,
    /// The archive's hidden temporary name beside it (used where the file
    /// system has no O_TMPFILE; see location::Location::temp_path).
    pub(crate) temp: PathBuf,
    /// When CRIU is to be stopped (nanoseconds since the epoch).
    pub(crate) criu_deadline_ns: i64,
}

impl InProgress {
    pub(crate) fn criu_deadline(&self) -> SystemTime {
        crate::clock::at_ns(self.criu_deadline_ns)
    }
}

/// Records a checkpoint under way in container directory `dir`, durably:
/// its temporary archive would outlive a power cut too.
pub(crate) fn record(dir: &Path, in_progress: &InProgress) -> Result<(), StoreError> {
    store::write_json_with(&dir.join(FILE), in_progress, store::Durability::Durable)
}

/// The checkpoint recorded in `dir`, if any.
pub(crate) fn read(dir: &Path) -> Result<Option<InProgress>, StoreError> {
    store::read_json(&dir.join(FILE))
}

/// Forgets the checkpoint recorded in `dir` (it ended, well or not).
pub(crate) fn clear(dir: &Path) {
    let _ = std::fs::remove_file(dir.join(FILE));
}
