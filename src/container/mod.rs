//! Containers: CRI ContainerConfig + image → OCI spec, the per-container
//! monitor that builds and watches each one, their lifecycle and status, and
//! ExecSync. The image store is reached through `ImageSource`.

pub(crate) mod cdi_edits;
pub(crate) mod command;
pub(crate) mod confinement;
pub(crate) mod exec;
pub(crate) mod exec_stream;
pub(crate) mod image_source;
pub(crate) mod image_volume;
pub(crate) mod manager;
pub(crate) mod monitor_pool;
pub(crate) mod record;
pub(crate) mod security;
pub(crate) mod signal;
pub(crate) mod spare_dirs;
pub mod spec;
pub mod user;

use std::path::PathBuf;

pub use manager::{ContainerCreate, PidMode};
pub(crate) use manager::{ContainerError, ContainerState, ContainerView, Containers};

/// An image as containers need it.
#[derive(Debug, Clone, Default)]
pub(crate) struct SourceImage {
    /// `sha256:` config digest.
    pub(crate) id: String,
    /// A name to show (first repo tag, else the id).
    pub(crate) name: String,
    /// A pinned reference (first repo digest, else the id).
    pub(crate) reference: String,
    pub(crate) defaults: spec::ImageDefaults,
    /// The image config's User.
    pub(crate) user: String,
    /// The image config's StopSignal.
    pub(crate) stop_signal: String,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ImageSourceError {
    #[error("image {} not found", crate::quote::quote(.0))]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Failed(String),
}

/// Where containers get images and their layers from.
pub(crate) trait ImageSource: Send + Sync {
    fn resolve(&self, reference: &str) -> Result<SourceImage, ImageSourceError>;
    /// The unpacked layer directories of `image_id`, lowest first, kept for `holder`.
    fn lease_layers(&self, holder: &str, image_id: &str) -> Result<Vec<PathBuf>, ImageSourceError>;
    /// The same for an image `holder` mounts as a volume (which then cannot
    /// be removed while leased).
    fn lease_volume(&self, holder: &str, image_id: &str) -> Result<Vec<PathBuf>, ImageSourceError>;
    /// Drops `holder`'s lease (idempotent).
    fn release(&self, holder: &str) -> Result<(), ImageSourceError>;
    /// Who holds leases now.
    fn lease_holders(&self) -> Result<Vec<String>, ImageSourceError>;
    /// The image's manifest annotations (a checkpoint image carries
    /// `io.kubernetes.cri-o.annotations.checkpoint.name`).
    fn annotations(&self, _reference: &str) -> Result<std::collections::HashMap<String, String>, ImageSourceError> {
        Ok(Default::default())
    }
}
