//! Checkpoints: CRIU dump and restore (`criu`), the archive's location and
//! its root-only, all-or-nothing writing (`location`), the record of a
//! checkpoint under way that a restarted daemon cleans up after
//! (`in_progress`), the archive's layout and metadata (`archive`), the
//! container's rootfs changes (`rootfs_diff`), the pod archive of CheckpointPod
//! and RestorePod (`pod_archive`), and the operator CLI (`cli`).
//! The lifecycle side is in container::manager::{checkpoint, restore} and
//! monitor::restore.

pub mod archive;
pub mod cli;
pub(crate) mod criu;
pub(crate) mod in_progress;
pub mod location;
pub(crate) mod pod_archive;
pub(crate) mod rootfs_diff;

pub(crate) use criu::{Criu, CriuError};
pub(crate) use location::{Location, LocationError};

#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckpointError {
    #[error(transparent)]
    Criu(#[from] CriuError),
    #[error(transparent)]
    Location(#[from] LocationError),
    #[error("checkpoint archive {path}: {why}")]
    Archive { path: std::path::PathBuf, why: String },
}
