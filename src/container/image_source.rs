//! The image store as the containers' `ImageSource`: what an image says about
//! running it (entrypoint, cmd, env, working dir, user, stop signal) and its
//! layers, leased per container.

use std::path::PathBuf;

use super::spec::ImageDefaults;
use super::{ImageSource, ImageSourceError, SourceImage};
use crate::image::{ImageError, ImageStore};

impl ImageSource for ImageStore {
    fn resolve(&self, reference: &str) -> Result<SourceImage, ImageSourceError> {
        let image = ImageStore::resolve(self, reference).map_err(source_error)?;
        let config = &image.config;
        Ok(SourceImage {
            name: image.repo_tags.first().cloned().unwrap_or_else(|| image.id.clone()),
            reference: image.repo_digests.first().cloned().unwrap_or_else(|| image.id.clone()),
            defaults: ImageDefaults {
                entrypoint: config.entrypoint.clone(),
                cmd: config.cmd.clone(),
                env: config.env.clone(),
                working_dir: config.working_dir.clone(),
            },
            user: config.user.clone(),
            stop_signal: config.stop_signal.clone(),
            id: image.id,
        })
    }

    fn lease_layers(&self, holder: &str, image_id: &str) -> Result<Vec<PathBuf>, ImageSourceError> {
        let image = ImageStore::resolve(self, image_id).map_err(source_error)?;
        ImageStore::lease_layers(self, holder, &image).map_err(source_error)
    }

    fn lease_volume(&self, holder: &str, image_id: &str) -> Result<Vec<PathBuf>, ImageSourceError> {
        let image = ImageStore::resolve(self, image_id).map_err(source_error)?;
        ImageStore::lease_volume(self, holder, &image).map_err(source_error)
    }

    fn release(&self, holder: &str) -> Result<(), ImageSourceError> {
        ImageStore::release(self, holder).map_err(source_error)
    }

    fn lease_holders(&self) -> Result<Vec<String>, ImageSourceError> {
        ImageStore::lease_holders(self).map_err(source_error)
    }

    fn annotations(&self, reference: &str) -> Result<std::collections::HashMap<String, String>, ImageSourceError> {
        let image = ImageStore::resolve(self, reference).map_err(source_error)?;
        ImageStore::manifest_annotations(self, &image).map_err(source_error)
    }
}

fn source_error(e: ImageError) -> ImageSourceError {
    match e {
        ImageError::NotFound(reference) => ImageSourceError::NotFound(reference),
        ImageError::InvalidReference(_) | ImageError::Ambiguous(_) | ImageError::InvalidHolder(_) => {
            ImageSourceError::Invalid(e.to_string())
        }
        ImageError::BadContent(_)
        | ImageError::BadLayer { .. }
        | ImageError::BlobMissing(_)
        | ImageError::MountedBy { .. }
        | ImageError::Io { .. } => ImageSourceError::Failed(e.to_string()),
    }
}
