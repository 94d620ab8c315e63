//! Containers: CRI ContainerConfig + image → OCI spec, the per-container
//! monitor that builds and watches each one, their lifecycle and status, and
//! ExecSync. The image store is reached through `ImageSource`.

pub mod cdi_edits;
pub mod command;
pub mod confinement;
pub mod exec;
pub mod exec_stream;
pub mod image_source;
pub mod image_volume;
pub mod manager;
pub mod monitor_pool;
pub mod record;
pub mod security;
pub mod signal;
pub mod spare_dirs;
pub mod spec;
pub mod user;

use std::path::PathBuf;

pub use manager::{ContainerCreate, ContainerError, ContainerState, ContainerView, Containers, PidMode};

/// An image as containers need it.
#[derive(Debug, Clone, Default)]
pub struct SourceImage {
    /// `sha256:` config digest.
    pub id: String,
    /// A name to show (first repo tag, else the id).
    pub name: String,
    /// A pinned reference (first repo digest, else the id).
    pub reference: String,
    pub defaults: spec::ImageDefaults,
    /// The image config's User.
    pub user: String,
    /// The image config's StopSignal.
    pub stop_signal: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ImageSourceError {
    #[error("image {} not found", crate::quote::quote(.0))]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Failed(String),
}

/// Where containers get images and their layers from.
pub trait ImageSource: Send + Sync {
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
