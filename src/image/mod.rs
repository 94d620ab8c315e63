//! The local image store under `<root>/images/`: content-addressed blobs,
//! layers unpacked once per diff id for overlayfs, an index of images and
//! their names, durable leases of containers on layers, leases of pulls in
//! flight, and garbage collection.
//! Imports read OCI image layouts and OCI / docker-archive tarballs.

pub mod cli;
pub(crate) mod content;
pub(crate) mod digest;
mod gc;
mod import;
mod index;
mod layer_entry;
pub(crate) mod layers;
mod lease;
pub mod pull;
mod pull_lease;
pub(crate) mod reference;
mod store;
mod temp;
pub mod unpack;

use std::collections::HashMap;
use std::io;

use serde::{Deserialize, Serialize};

pub use digest::Digest;
pub use reference::Reference;
pub use store::ImageStore;
pub(crate) use store::ImportedImage;

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("image {} not found", crate::quote::quote(.0))]
    NotFound(String),
    #[error("{0}")]
    InvalidReference(#[from] reference::ReferenceError),
    #[error("{} matches more than one image id; give more of it", crate::quote::quote(.0))]
    Ambiguous(String),
    #[error("lease holder {} is invalid: use 1 to 128 letters, digits, '_', '-' or '.', not starting with '.'", crate::quote::quote(.0))]
    InvalidHolder(String),
    /// Blobs, manifests or configs that are malformed or do not match their digests.
    #[error("{0}")]
    BadContent(String),
    /// A layer that is malformed, does not match its diff id, or would write outside itself.
    #[error("layer {layer} refused: {why}")]
    BadLayer { layer: Digest, why: String },
    #[error("blob {0} is not in the image store (was its image removed?)")]
    BlobMissing(Digest),
    #[error("image {image} is mounted as a volume by container {container}; remove the container first")]
    MountedBy { image: String, container: String },
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
}

impl ImageError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io { context: context.into(), source }
    }
}

/// An image in the store.
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    /// `sha256:<config digest>`.
    pub id: String,
    pub repo_tags: Vec<String>,
    pub repo_digests: Vec<String>,
    /// Bytes of its manifest, config and (compressed) layer blobs.
    pub(crate) size: u64,
    pub(crate) config: ImageConfig,
    /// Digest of the manifest.
    pub(crate) manifest_digest: String,
    /// Its layers, lowest first.
    pub(crate) layers: Vec<ImageLayer>,
}

/// One layer of an image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ImageLayer {
    /// Digest of the blob (compressed as stored).
    pub(crate) digest: Digest,
    /// Digest of the uncompressed tar.
    pub(crate) diff_id: Digest,
    pub(crate) size: u64,
    pub(crate) media_type: String,
}

/// What the image config says about running the image; empty where it says nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ImageConfig {
    pub(crate) user: String,
    pub(crate) env: Vec<String>,
    pub(crate) entrypoint: Vec<String>,
    pub(crate) cmd: Vec<String>,
    pub(crate) working_dir: String,
    pub(crate) stop_signal: String,
    pub(crate) labels: HashMap<String, String>,
    pub(crate) volumes: Vec<String>,
}

/// Who the image runs as, as CRI's Image message reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ImageUser {
    /// The config names no user (root).
    Unset,
    Uid(i64),
    Name(String),
}

impl ImageConfig {
    /// The user part of `User` (`name`, `uid`, `name:group`, `uid:gid`).
    pub(crate) fn image_user(&self) -> ImageUser {
        let user = self.user.split(':').next().unwrap_or_default();
        if user.is_empty() {
            ImageUser::Unset
        } else if let Ok(uid) = user.parse::<i64>() {
            ImageUser::Uid(uid)
        } else {
            ImageUser::Name(user.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_user_reads_name_or_uid() {
        let user = |u: &str| ImageConfig { user: u.into(), ..Default::default() }.image_user();
        assert_eq!(user(""), ImageUser::Unset);
        assert_eq!(user("1000"), ImageUser::Uid(1000));
        assert_eq!(user("1000:2000"), ImageUser::Uid(1000));
        assert_eq!(user("app"), ImageUser::Name("app".into()));
        assert_eq!(user("app:extra"), ImageUser::Name("app".into()));
        assert_eq!(user(":2000"), ImageUser::Unset);
    }
}
