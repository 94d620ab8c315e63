//! The image index (`images/index.json`): every image with its names, blobs
//! and config, and the import-dir sources already imported. It is replaced
//! atomically under the store lock by whichever process changes it (the
//! daemon or `nidus image import`); readers keep the version they parsed and
//! re-read only when the file was replaced, which a `stat` tells.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::digest::Digest;
use super::{Image, ImageConfig, ImageError, ImageLayer};
use crate::store;

const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Index {
    pub version: u32,
    pub images: Vec<ImageRecord>,
    /// Archives of the import directory already imported, by path.
    #[serde(default)]
    pub sources: BTreeMap<String, SourceRecord>,
}

impl Default for Index {
    fn default() -> Self {
        Self { version: FORMAT_VERSION, images: Vec::new(), sources: BTreeMap::new() }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ImageRecord {
    /// The config digest: the image id.
    pub id: Digest,
    pub manifest_digest: Digest,
    pub manifest_size: u64,
    pub config_size: u64,
    pub repo_tags: Vec<String>,
    pub repo_digests: Vec<String>,
    pub layers: Vec<ImageLayer>,
    pub config: ImageConfig,
    #[serde(default)]
    pub created: Option<String>,
    pub imported_at_ns: i64,
}

impl ImageRecord {
    pub fn size(&self) -> u64 {
        self.manifest_size + self.config_size + self.layers.iter().map(|l| l.size).sum::<u64>()
    }

    pub fn to_image(&self) -> Image {
        Image {
            id: self.id.to_string(),
            repo_tags: self.repo_tags.clone(),
            repo_digests: self.repo_digests.clone(),
            size: self.size(),
            config: self.config.clone(),
            manifest_digest: self.manifest_digest.to_string(),
            layers: self.layers.clone(),
        }
    }
}

/// An archive imported from the import directory, as it was then.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SourceRecord {
    pub size: u64,
    pub mtime_ns: i64,
    pub images: Vec<Digest>,
}

/// The index file and the last version this process parsed.
#[derive(Debug)]
pub struct IndexFile {
    path: PathBuf,
    cached: Mutex<Option<Cached>>,
}

#[derive(Debug)]
struct Cached {
    /// Held open so its inode cannot be reused by a later version: a
    /// different inode at the path then always means a new version.
    _file: File,
    dev: u64,
    ino: u64,
    index: Arc<Index>,
}

impl IndexFile {
    pub fn new(path: &Path) -> Self {
        Self { path: path.to_path_buf(), cached: Mutex::new(None) }
    }

    pub fn exists(&self) -> bool {
        self.path.is_file()
    }

    /// The index as it is on disk now; cheap (one `stat`) when unchanged.
    pub fn current(&self) -> Result<Arc<Index>, ImageError> {
        let meta =
            std::fs::metadata(&self.path).map_err(|e| ImageError::io(format!("reading {}", self.path.display()), e))?;
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cached.as_ref() {
            if c.dev == meta.dev() && c.ino == meta.ino() {
                return Ok(c.index.clone());
            }
        }
        let fresh = self.read()?;
        let index = fresh.index.clone();
        *cached = Some(fresh);
        Ok(index)
    }

    fn read(&self) -> Result<Cached, ImageError> {
        let err = |e| ImageError::io(format!("reading {}", self.path.display()), e);
        let mut file = File::open(&self.path).map_err(err)?;
        let meta = file.metadata().map_err(err)?;
        let mut data = Vec::new();
        file.read_to_end(&mut data).map_err(err)?;
        let index: Index = serde_json::from_slice(&data)
            .map_err(|e| ImageError::BadContent(format!("image index {} is corrupt: {e}", self.path.display())))?;
        if index.version != FORMAT_VERSION {
            return Err(ImageError::BadContent(format!(
                "image index {} has format version {}, this nidus reads {FORMAT_VERSION}",
                self.path.display(),
                index.version
            )));
        }
        Ok(Cached { _file: file, dev: meta.dev(), ino: meta.ino(), index: Arc::new(index) })
    }

    /// Replaces the index on disk; the caller holds the store lock.
    pub fn write(&self, index: &Index) -> Result<(), ImageError> {
        let data =
            serde_json::to_vec_pretty(index).map_err(|e| ImageError::io("encoding the index", io::Error::other(e)))?;
        store::write_atomic(&self.path, &data, 0o600)
            .map_err(|e| ImageError::io(format!("writing {}", self.path.display()), io::Error::other(e)))
    }
}
