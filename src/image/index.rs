//! The image index (`images/index.json`): every image with its names, blobs
//! and config, and the import-dir sources already imported; finding an image
//! in it by tag, digest or id, and adding an import to it. It is replaced
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
use super::reference::{Reference, ReferenceError};
use super::{Image, ImageConfig, ImageError, ImageLayer};
use crate::ids::{self, Resolved};
use crate::store;

const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Index {
    pub(crate) version: u32,
    pub(crate) images: Vec<ImageRecord>,
    /// Archives of the import directory already imported, by path.
    #[serde(default)]
    pub(crate) sources: BTreeMap<String, SourceRecord>,
}

impl Index {
    /// True when an image in the index has the unpacked layer `diff_id`.
    pub(crate) fn uses_layer(&self, diff_id: &Digest) -> bool {
        self.images.iter().any(|image| image.layers.iter().any(|layer| &layer.diff_id == diff_id))
    }
}

impl Default for Index {
    fn default() -> Self {
        Self { version: FORMAT_VERSION, images: Vec::new(), sources: BTreeMap::new() }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct ImageRecord {
    /// The config digest: the image id.
    pub(crate) id: Digest,
    pub(crate) manifest_digest: Digest,
    pub(crate) manifest_size: u64,
    pub(crate) config_size: u64,
    pub(crate) repo_tags: Vec<String>,
    pub(crate) repo_digests: Vec<String>,
    pub(crate) layers: Vec<ImageLayer>,
    pub(crate) config: ImageConfig,
    #[serde(default)]
    pub(crate) created: Option<String>,
    pub(crate) imported_at_ns: i64,
}

impl ImageRecord {
    pub(crate) fn size(&self) -> u64 {
        self.manifest_size + self.config_size + self.layers.iter().map(|l| l.size).sum::<u64>()
    }

    pub(crate) fn to_image(&self) -> Image {
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
pub(crate) struct SourceRecord {
    pub(crate) size: u64,
    pub(crate) mtime_ns: i64,
    pub(crate) images: Vec<Digest>,
}

/// The index file and the last version this process parsed.
#[derive(Debug)]
pub(crate) struct IndexFile {
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
    pub(crate) fn new(path: &Path) -> Self {
        Self { path: path.to_path_buf(), cached: Mutex::new(None) }
    }

    pub(crate) fn exists(&self) -> bool {
        self.path.is_file()
    }

    /// The index as it is on disk now; cheap (one `stat`) when unchanged.
    pub(crate) fn current(&self) -> Result<Arc<Index>, ImageError> {
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
    pub(crate) fn write(&self, index: &Index) -> Result<(), ImageError> {
        let data =
            serde_json::to_vec_pretty(index).map_err(|e| ImageError::io("encoding the index", io::Error::other(e)))?;
        store::write_atomic(&self.path, &data, 0o600)
            .map_err(|e| ImageError::io(format!("writing {}", self.path.display()), io::Error::other(e)))
    }
}

/// The image `reference` names in `index`: `sha256:<hex>` (id or id prefix),
/// a tag or digest reference, or a bare id prefix.
pub(crate) fn find<'a>(index: &'a Index, reference: &str) -> Result<&'a ImageRecord, ImageError> {
    let invalid =
        |why: &str| ImageError::InvalidReference(ReferenceError { reference: reference.into(), why: why.into() });
    if reference.is_empty() {
        return Err(invalid("it is empty"));
    }
    let is_hex =
        |s: &str| !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if let Some(hex) = reference.strip_prefix("sha256:") {
        if !is_hex(hex) {
            return Err(invalid("an image id is \"sha256:\" and up to 64 lowercase hexadecimal digits"));
        }
        return by_id_prefix(index, hex, reference);
    }
    let parsed = match Reference::parse(reference) {
        Ok(parsed) => parsed,
        Err(_) if is_hex(reference) => return by_id_prefix(index, reference, reference),
        Err(e) => return Err(e.into()),
    };
    let found = match (parsed.digested(), parsed.tagged()) {
        (Some(digested), _) => index.images.iter().find(|i| i.repo_digests.contains(&digested)),
        (None, Some(tagged)) => index.images.iter().find(|i| i.repo_tags.contains(&tagged)),
        (None, None) => None,
    };
    match found {
        Some(record) => Ok(record),
        None if is_hex(reference) => by_id_prefix(index, reference, reference),
        None => Err(ImageError::NotFound(reference.to_string())),
    }
}

fn by_id_prefix<'a>(index: &'a Index, hex: &str, reference: &str) -> Result<&'a ImageRecord, ImageError> {
    match ids::resolve(hex, index.images.iter().map(|i| i.id.hex())) {
        Resolved::One(id) => {
            index.images.iter().find(|i| i.id.hex() == id).ok_or_else(|| ImageError::NotFound(reference.to_string()))
        }
        Resolved::None => Err(ImageError::NotFound(reference.to_string())),
        Resolved::Ambiguous => Err(ImageError::Ambiguous(reference.to_string())),
    }
}

/// Adds an imported image: its names move to it from other images (an image
/// left without any name is dropped, as containerd does), and an image with
/// the same id gains the new names.
pub(crate) fn add_image(index: &mut Index, mut new: ImageRecord) {
    let mut orphaned = Vec::new();
    for other in index.images.iter_mut().filter(|i| i.id != new.id) {
        let had_tags = !other.repo_tags.is_empty();
        other.repo_tags.retain(|t| !new.repo_tags.contains(t));
        other.repo_digests.retain(|d| !new.repo_digests.contains(d));
        if had_tags && other.repo_tags.is_empty() {
            orphaned.push(other.id.clone());
        }
    }
    index.images.retain(|i| !orphaned.contains(&i.id));
    if let Some(existing) = index.images.iter_mut().find(|i| i.id == new.id) {
        let manifest = format!("@{}", new.manifest_digest);
        let mut tags = existing.repo_tags.clone();
        tags.extend(new.repo_tags.iter().filter(|t| !existing.repo_tags.contains(t)).cloned());
        let mut digests: Vec<String> =
            existing.repo_digests.iter().filter(|d| d.ends_with(&manifest)).cloned().collect();
        digests.extend(new.repo_digests.iter().filter(|d| !digests.contains(d)).cloned().collect::<Vec<_>>());
        new.repo_tags = tags;
        new.repo_digests = digests;
        *existing = new;
    } else {
        index.images.push(new);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(config: &[u8], tags: &[&str]) -> ImageRecord {
        ImageRecord {
            id: Digest::of(config),
            manifest_digest: Digest::of(&[config, b"-manifest"].concat()),
            manifest_size: 10,
            config_size: 20,
            repo_tags: tags.iter().map(|t| t.to_string()).collect(),
            repo_digests: Vec::new(),
            layers: Vec::new(),
            config: ImageConfig::default(),
            created: None,
            imported_at_ns: 0,
        }
    }

    #[test]
    fn finds_by_tag_id_and_prefix() {
        let mut index = Index::default();
        add_image(&mut index, record(b"a", &["docker.io/library/busybox:latest"]));
        add_image(&mut index, record(b"b", &["localhost:5000/x:v1"]));
        let a = Digest::of(b"a");
        assert_eq!(find(&index, "busybox").unwrap().id, a);
        assert_eq!(find(&index, "docker.io/library/busybox:latest").unwrap().id, a);
        assert_eq!(find(&index, &a.to_string()).unwrap().id, a);
        assert_eq!(find(&index, &a.hex()[..12]).unwrap().id, a);
        assert_eq!(find(&index, &format!("sha256:{}", &a.hex()[..5])).unwrap().id, a);
        assert_eq!(find(&index, "localhost:5000/x:v1").unwrap().id, Digest::of(b"b"));
        assert!(matches!(find(&index, "busybox:1.36"), Err(ImageError::NotFound(_))));
        assert!(matches!(find(&index, "sha256:"), Err(ImageError::InvalidReference(_))));
        assert!(matches!(find(&index, "Not A Ref"), Err(ImageError::InvalidReference(_))));
        assert!(matches!(find(&index, ""), Err(ImageError::InvalidReference(_))));
    }

    #[test]
    fn tags_move_and_untagged_images_go() {
        let mut index = Index::default();
        add_image(&mut index, record(b"old", &["docker.io/library/app:1"]));
        add_image(&mut index, record(b"keep", &["docker.io/library/app:2", "docker.io/library/app:3"]));
        add_image(&mut index, record(b"new", &["docker.io/library/app:1", "docker.io/library/app:2"]));
        let ids: Vec<_> = index.images.iter().map(|i| i.id.clone()).collect();
        assert_eq!(ids, vec![Digest::of(b"keep"), Digest::of(b"new")]);
        assert_eq!(index.images[0].repo_tags, vec!["docker.io/library/app:3"]);
        // Same image again with another name: one record, both names.
        add_image(&mut index, record(b"new", &["localhost/app:x"]));
        assert_eq!(index.images.len(), 2);
        assert_eq!(
            index.images[1].repo_tags,
            vec!["docker.io/library/app:1", "docker.io/library/app:2", "localhost/app:x"]
        );
        // An image imported without a name stays.
        add_image(&mut index, record(b"anonymous", &[]));
        add_image(&mut index, record(b"other", &["localhost/y:1"]));
        assert!(index.images.iter().any(|i| i.id == Digest::of(b"anonymous")));
    }

    #[test]
    fn ambiguous_prefixes_are_refused() {
        let mut index = Index::default();
        // Find two configs whose ids share a first hex digit.
        let first = Digest::of(b"0");
        let mut n = 1u32;
        let second = loop {
            let d = Digest::of(n.to_string().as_bytes());
            if d.hex().as_bytes()[0] == first.hex().as_bytes()[0] {
                break n;
            }
            n += 1;
        };
        add_image(&mut index, record(b"0", &[]));
        add_image(&mut index, record(second.to_string().as_bytes(), &[]));
        let prefix = format!("sha256:{}", &first.hex()[..1]);
        assert!(matches!(find(&index, &prefix), Err(ImageError::Ambiguous(_))));
    }
}
