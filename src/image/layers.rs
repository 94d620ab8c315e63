//! Unpacked layers, one directory per diff id under `images/layers/<hex>/`:
//! `fs/` is the overlayfs lower dir, `layer.json` records what unpacking
//! found. A layer is unpacked into a temp directory, checked against its diff
//! id, synced and renamed into place, so a layer directory that exists is complete.

use std::fs;
use std::io::{self, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::digest::Digest;
use super::{temp, unpack, ImageError};
use crate::linux::beneath::ConfinedRoot;
use crate::store;

const FS_DIR: &str = "fs";
const RECORD: &str = "layer.json";

/// What the store knows of an unpacked layer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct LayerRecord {
    pub(crate) diff_id: Digest,
    /// Bytes allocated on disk by the unpacked tree.
    pub(crate) used_bytes: u64,
    /// Inodes of the unpacked tree.
    pub(crate) inodes: u64,
    /// Wall time of the unpack, in nanoseconds since the epoch.
    pub(crate) unpacked_at_ns: i64,
}

#[derive(Debug)]
pub(crate) struct LayerStore {
    dir: PathBuf,
}

impl LayerStore {
    pub(crate) fn open(dir: &Path) -> Result<Self, ImageError> {
        store::create_dir_all(dir, 0o700).map_err(|e| ImageError::io(format!("creating {}", dir.display()), e))?;
        Ok(Self { dir: dir.to_path_buf() })
    }

    fn layer_dir(&self, diff_id: &Digest) -> PathBuf {
        self.dir.join(diff_id.hex())
    }

    /// The overlayfs lower dir of a layer.
    pub(crate) fn fs_path(&self, diff_id: &Digest) -> PathBuf {
        self.layer_dir(diff_id).join(FS_DIR)
    }

    /// The record of an unpacked layer; `None` when it is not unpacked.
    pub(crate) fn record(&self, diff_id: &Digest) -> Result<Option<LayerRecord>, ImageError> {
        let path = self.layer_dir(diff_id).join(RECORD);
        store::read_json(&path).map_err(|e| ImageError::io(format!("reading {}", path.display()), io::Error::other(e)))
    }

    /// Unpacks the layer blob at `blob` unless the layer is there already,
    /// verifying that its uncompressed content has the digest `diff_id`.
    pub(crate) fn unpack(
        &self,
        blob: &Path,
        blob_digest: &Digest,
        diff_id: &Digest,
    ) -> Result<LayerRecord, ImageError> {
        if let Some(record) = self.record(diff_id)? {
            return Ok(record);
        }
        let mut file = fs::File::open(blob).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => ImageError::BlobMissing(blob_digest.clone()),
            _ => ImageError::io(format!("opening the blob for layer {diff_id}"), e),
        })?;
        self.unpack_stream(&mut file, blob_digest, diff_id, |_| Ok(()))
    }

    /// Unpacks a layer from its blob as `source` yields it, verifying the
    /// diff id. `complete` runs once the layer's tar has ended and before
    /// the layer is published: it reads what is left of `source` and checks
    /// the blob (a failure there publishes nothing). A layer already
    /// unpacked is not unpacked again; `complete` still runs.
    pub(crate) fn unpack_stream<R: io::Read>(
        &self,
        source: &mut R,
        blob_digest: &Digest,
        diff_id: &Digest,
        complete: impl FnOnce(&mut R) -> Result<(), ImageError>,
    ) -> Result<LayerRecord, ImageError> {
        if let Some(record) = self.record(diff_id)? {
            complete(source)?;
            return Ok(record);
        }
        let started = std::time::Instant::now();
        let work = self.dir.join(temp::new_name());
        let result = self.unpack_into(&work, source, blob_digest, diff_id, complete);
        if result.is_err() || work.exists() {
            let _ = store::remove_tree(&work);
        }
        let record = result?;
        tracing::debug!(%diff_id, blob = %blob_digest, used_bytes = record.used_bytes, inodes = record.inodes,
            ms = started.elapsed().as_millis() as u64, "layer unpacked");
        Ok(record)
    }

    fn unpack_into<R: io::Read>(
        &self,
        work: &Path,
        source: &mut R,
        blob_digest: &Digest,
        diff_id: &Digest,
        complete: impl FnOnce(&mut R) -> Result<(), ImageError>,
    ) -> Result<LayerRecord, ImageError> {
        let io_err = |what: &str, e| ImageError::io(format!("{what} for layer {diff_id}"), e);
        store::create_dir_new(work, 0o700).map_err(|e| io_err("creating a work directory", e))?;
        let fs_dir = work.join(FS_DIR);
        store::create_dir_new(&fs_dir, 0o755).map_err(|e| io_err("creating a work directory", e))?;
        let found = unpack::unpack(BufReader::with_capacity(1 << 20, &mut *source), &fs_dir)
            .map_err(|e| ImageError::BadLayer { layer: blob_digest.clone(), why: e.to_string() })?;
        complete(source)?;
        if found != *diff_id {
            return Err(ImageError::BadLayer {
                layer: blob_digest.clone(),
                why: format!("its uncompressed content has digest {found}, but the image config says {diff_id}"),
            });
        }
        let (used_bytes, inodes) = tree_usage(&fs_dir);
        let record =
            LayerRecord { diff_id: diff_id.clone(), used_bytes, inodes, unpacked_at_ns: crate::clock::now_ns() };
        store::write_json(&work.join(RECORD), &record)
            .map_err(|e| io_err("writing the record", io::Error::other(e)))?;
        // Everything of the layer reaches the disk before its name does.
        ConfinedRoot::open(work)
            .and_then(|r| r.root_dir())
            .and_then(|d| d.sync_filesystem())
            .map_err(|e| io_err("syncing", e))?;
        let target = self.layer_dir(diff_id);
        match fs::rename(work, &target) {
            Ok(()) => {}
            // Another process unpacked the same layer meanwhile: keep theirs.
            Err(_) if target.join(RECORD).is_file() => {
                return self
                    .record(diff_id)?
                    .ok_or_else(|| io_err("reading the record", io::ErrorKind::NotFound.into()))
            }
            Err(e) => return Err(io_err("renaming the unpacked layer into place", e)),
        }
        store::sync_dir(&self.dir).map_err(|e| io_err("syncing the layer directory", e))?;
        Ok(record)
    }

    /// Diff ids of every unpacked layer.
    pub(crate) fn list(&self) -> Result<Vec<Digest>, ImageError> {
        let entries =
            fs::read_dir(&self.dir).map_err(|e| ImageError::io(format!("listing {}", self.dir.display()), e))?;
        Ok(entries.flatten().filter_map(|e| Digest::from_hex(&e.file_name().to_string_lossy()).ok()).collect())
    }

    /// Takes a layer out of the store at once (a rename) and returns the
    /// directory to delete at leisure.
    pub(crate) fn detach(&self, diff_id: &Digest) -> Result<Option<PathBuf>, ImageError> {
        let doomed = self.dir.join(temp::new_name());
        match fs::rename(self.layer_dir(diff_id), &doomed) {
            Ok(()) => Ok(Some(doomed)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ImageError::io(format!("removing layer {diff_id}"), e)),
        }
    }

    /// Removes work directories of processes that died mid-unpack or mid-removal.
    pub(crate) fn remove_stale_temps(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else { return };
        for entry in entries.flatten() {
            if temp::is_stale(&entry.file_name().to_string_lossy()) {
                let _ = store::remove_tree(&entry.path());
            }
        }
    }

    /// Bytes and inodes every unpacked layer uses (from their records).
    pub(crate) fn usage(&self) -> (u64, u64) {
        let mut total = (0, 1);
        for diff_id in self.list().unwrap_or_default() {
            if let Ok(Some(record)) = self.record(&diff_id) {
                // The record, the layer directory and its fs directory.
                total.0 += record.used_bytes + 3 * 4096;
                total.1 += record.inodes + 2;
            }
        }
        total
    }
}

/// Bytes allocated and inodes used by a tree (hard links counted once).
fn tree_usage(root: &Path) -> (u64, u64) {
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![root.to_path_buf()];
    let (mut bytes, mut inodes) = (0, 0);
    while let Some(path) = stack.pop() {
        let Ok(meta) = fs::symlink_metadata(&path) else { continue };
        if !seen.insert((meta.dev(), meta.ino())) {
            continue;
        }
        bytes += meta.blocks() * 512;
        inodes += 1;
        if meta.is_dir() {
            if let Ok(entries) = fs::read_dir(&path) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        }
    }
    (bytes, inodes)
}
