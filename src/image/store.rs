//! The image store as the daemon and `nidus image import` use it: lookups by
//! tag, digest or id; imports; removal; leases; garbage collection; usage.
//!
//! Several processes share one store. `store.lock` (exclusive, held briefly)
//! serialises changes to the index and the leases and GC's decisions. A pull
//! in flight leases what it stores (`pull_lease.rs`), so GC runs beside it
//! and keeps exactly that; `gc.lock` is held shared by every import and
//! container unpack in progress, and GC runs only when it gets it
//! exclusively (else it is deferred to the next one), so GC never deletes a
//! blob or layer that work in flight is about to reference.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use oci_spec::image::ImageConfiguration;

use super::content::{ContentStore, Expected, Tee};
use super::digest::{chain_id, Digest};
use super::gc::find_garbage;
use super::import::{self, Candidate};
use super::index::{add_image, find, ImageRecord, Index, IndexFile, SourceRecord};
use super::layers::LayerStore;
use super::lease::{validate_holder, Lease, Leases};
use super::pull_lease::PullLeases;
use super::reference::{Reference, ReferenceError};
use super::{Image, ImageConfig, ImageError, ImageLayer};
use crate::clock::now_ns;
use crate::linux::lock::{self, LockFile};
use crate::store;

const STORE_LOCK: &str = "store.lock";
const GC_LOCK: &str = "gc.lock";

#[derive(Debug)]
pub struct ImageStore {
    dir: PathBuf,
    content: ContentStore,
    layers: LayerStore,
    leases: Leases,
    /// Leases of pulls in flight.
    pulling: PullLeases,
    index: IndexFile,
}

/// Keeps what a pull stores from garbage collection until dropped.
#[derive(Debug)]
pub(crate) struct HeldForPull {
    store: Arc<ImageStore>,
    holder: String,
}

impl Drop for HeldForPull {
    fn drop(&mut self) {
        let released = self.store.lock().and_then(|_lock| self.store.pulling.remove(&self.holder));
        if let Err(e) = released {
            // Dropped at the next collection after this process ends.
            tracing::warn!(holder = %self.holder, error = %e, "cannot drop a pull's lease");
        }
    }
}

/// An image an import stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedImage {
    pub(crate) id: String,
    pub(crate) repo_tags: Vec<String>,
    pub(crate) layers: usize,
    /// Bytes the image's unpacked layers use on disk.
    pub(crate) unpacked_bytes: u64,
}

/// What the image store uses of its filesystem.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoreUsage {
    pub(crate) mountpoint: PathBuf,
    pub(crate) used_bytes: u64,
    pub(crate) inodes: u64,
}

/// What a garbage collection removed.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct GcReport {
    /// Another process was importing or unpacking: nothing was collected.
    pub(crate) deferred: bool,
    pub(crate) blobs: usize,
    pub(crate) layers: usize,
}

fn lock_error(e: lock::LockError) -> ImageError {
    ImageError::io("locking the image store", std::io::Error::other(e))
}

impl ImageStore {
    /// Opens (creating when missing) the store under `<root>/images`.
    pub fn open(root: &Path) -> Result<Self, ImageError> {
        let dir = root.join("images");
        store::create_dir_all(&dir, 0o700).map_err(|e| ImageError::io(format!("creating {}", dir.display()), e))?;
        let images = Self {
            content: ContentStore::open(&dir.join("blobs"))?,
            layers: LayerStore::open(&dir.join("layers"))?,
            leases: Leases::open(&dir.join("leases"))?,
            pulling: PullLeases::open(&dir.join("pulling"))?,
            index: IndexFile::new(&dir.join("index.json")),
            dir,
        };
        {
            // Index and leases are only written under this lock: what a
            // crash left half-written can go now.
            let _lock = images.lock()?;
            if !images.index.exists() {
                images.index.write(&Index::default())?;
            }
            store::remove_interrupted_writes(&images.dir);
            images.leases.remove_interrupted_writes();
            images.pulling.live()?;
        }
        Ok(images)
    }

    /// Opens the store for the daemon: imports what is new in `import_dir`
    /// (failures are logged, not fatal) and collects garbage left by crashes.
    pub(crate) fn open_and_import(root: &Path, import_dir: &Path) -> Result<Self, ImageError> {
        let images = Self::open(root)?;
        for (path, outcome) in images.import_directory(import_dir) {
            match outcome {
                Ok(imported) => {
                    for image in imported {
                        tracing::info!(source = %path.display(), image = %image.id, tags = ?image.repo_tags,
                            "imported from the import directory");
                    }
                }
                Err(e) => {
                    tracing::warn!(source = %path.display(), error = %e, "cannot import an archive of the import directory")
                }
            }
        }
        images.collect_garbage_logged();
        Ok(images)
    }

    fn lock(&self) -> Result<LockFile, ImageError> {
        lock::wait(&self.dir.join(STORE_LOCK), false).map_err(lock_error)
    }

    /// Held while blobs and layers are being added by an import or a
    /// container's unpack: garbage collection waits until then. (A pull
    /// leases what it stores instead: [`hold_for_pull`](Self::hold_for_pull).)
    pub(crate) fn work_in_flight(&self) -> Result<LockFile, ImageError> {
        lock::wait(&self.dir.join(GC_LOCK), true).map_err(lock_error)
    }

    /// Changes the index under the store lock.
    fn update_index<T>(&self, change: impl FnOnce(&mut Index) -> Result<T, ImageError>) -> Result<T, ImageError> {
        let _lock = self.lock()?;
        let mut index = (*self.index.current()?).clone();
        let out = change(&mut index)?;
        self.index.write(&index)?;
        Ok(out)
    }

    pub fn list(&self) -> Result<Vec<Image>, ImageError> {
        Ok(self.index.current()?.images.iter().map(ImageRecord::to_image).collect())
    }

    /// The image a tag, digest reference, image id or unique id prefix names.
    pub fn resolve(&self, reference: &str) -> Result<Image, ImageError> {
        let index = self.index.current()?;
        find(&index, reference).map(ImageRecord::to_image)
    }

    /// Like [`resolve`](Self::resolve), with `None` for an absent image.
    pub(crate) fn find(&self, reference: &str) -> Result<Option<Image>, ImageError> {
        match self.resolve(reference) {
            Ok(image) => Ok(Some(image)),
            Err(ImageError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Removes the image `reference` names, with all its names (idempotent:
    /// `None` when there was none), then collects what nothing uses any more.
    pub(crate) fn remove(&self, reference: &str) -> Result<Option<Image>, ImageError> {
        let removed = self.update_index(|index| {
            let id = match find(index, reference) {
                Ok(record) => record.id.clone(),
                Err(ImageError::NotFound(_)) => return Ok(None),
                Err(e) => return Err(e),
            };
            // An image a container mounts as a volume stays (as containerd's).
            let id_text = id.to_string();
            if let Some(lease) = self.leases.all()?.into_iter().find(|l| l.mounted.contains(&id_text)) {
                return Err(ImageError::MountedBy { image: id_text, container: lease.holder });
            }
            let position = index.images.iter().position(|i| i.id == id);
            Ok(position.map(|p| index.images.remove(p).to_image()))
        })?;
        if let Some(image) = &removed {
            tracing::info!(image = %image.id, tags = ?image.repo_tags, "image removed");
            self.collect_garbage_logged();
        }
        Ok(removed)
    }

    /// Imports every image of the archive at `path` (OCI layout directory,
    /// OCI or docker-archive tarball); `name` tags the image (the archive
    /// must then hold exactly one). Layers are unpacked and verified here.
    pub fn import(&self, path: &Path, name: Option<&str>) -> Result<Vec<ImportedImage>, ImageError> {
        let name = name.map(Reference::parse).transpose()?;
        if let Some(name) = &name {
            if name.digest.is_some() {
                return Err(ReferenceError {
                    reference: name.to_string(),
                    why: "a name to give an image is a tag reference, without @digest".into(),
                }
                .into());
            }
        }
        let started = Instant::now();
        let result = self.import_locked(path, name.as_ref());
        // Blobs and layers of a failed import (or of images whose tags moved) go now.
        self.collect_garbage_logged();
        let imported = result?;
        for image in &imported {
            tracing::info!(image = %image.id, tags = ?image.repo_tags, layers = image.layers,
                unpacked_bytes = image.unpacked_bytes, ms = started.elapsed().as_millis() as u64,
                source = %path.display(), "image imported");
        }
        Ok(imported)
    }

    fn import_locked(&self, path: &Path, name: Option<&Reference>) -> Result<Vec<ImportedImage>, ImageError> {
        let _in_flight = self.work_in_flight()?;
        let candidates = import::read_archive(path, &self.content)?;
        if name.is_some() && candidates.len() != 1 {
            return Err(ImageError::BadContent(format!(
                "{} holds {} images; a name can be given to exactly one",
                path.display(),
                candidates.len()
            )));
        }
        let mut records = Vec::new();
        let mut report = Vec::new();
        for candidate in candidates {
            let (record, unpacked_bytes) = self.prepare(candidate, name)?;
            report.push(ImportedImage {
                id: record.id.to_string(),
                repo_tags: record.repo_tags.clone(),
                layers: record.layers.len(),
                unpacked_bytes,
            });
            records.push(record);
        }
        self.update_index(|index| {
            for record in records {
                add_image(index, record);
            }
            Ok(())
        })?;
        Ok(report)
    }

    /// Reads a candidate's config, unpacks its layers and makes its record.
    fn prepare(&self, candidate: Candidate, name: Option<&Reference>) -> Result<(ImageRecord, u64), ImageError> {
        let config_bytes = self.content.read_small(&candidate.config)?;
        let (config, diff_ids) =
            checked_config(&config_bytes, &candidate.config, &candidate.manifest, candidate.layers.len())?;
        let mut layers = Vec::new();
        let mut unpacked_bytes = 0;
        for (layer, diff_id) in candidate.layers.iter().zip(diff_ids) {
            let record = self.layers.unpack(&self.content.path(&layer.digest), &layer.digest, &diff_id)?;
            unpacked_bytes += record.used_bytes;
            layers.push(ImageLayer {
                digest: layer.digest.clone(),
                diff_id,
                size: layer.size,
                media_type: layer.media_type.clone(),
            });
        }
        let mut names: Vec<Reference> = Vec::new();
        for raw in &candidate.names {
            match Reference::parse(raw) {
                Ok(r) => names.push(r),
                Err(e) => tracing::warn!(error = %e, "ignoring an image name the archive gives"),
            }
        }
        names.extend(name.cloned());
        let mut repo_tags: Vec<String> = names.iter().filter_map(Reference::tagged).collect();
        repo_tags.dedup();
        let mut repo_digests: Vec<String> = if candidate.registry_manifest {
            names.iter().map(|n| n.with_digest(&candidate.manifest)).collect()
        } else {
            Vec::new()
        };
        repo_digests.sort();
        repo_digests.dedup();
        let record = ImageRecord {
            id: candidate.config,
            manifest_digest: candidate.manifest,
            manifest_size: candidate.manifest_size,
            config_size: candidate.config_size,
            repo_tags,
            repo_digests,
            layers,
            config: image_config(&config),
            created: config.created().clone(),
            imported_at_ns: now_ns(),
        };
        Ok((record, unpacked_bytes))
    }

    /// Imports the archives in `dir` that are new or changed since they were
    /// imported last (or whose images were removed since): the import
    /// directory scanned at start. Each archive's outcome is returned.
    pub(crate) fn import_directory(&self, dir: &Path) -> Vec<(PathBuf, Result<Vec<ImportedImage>, ImageError>)> {
        let mut paths: Vec<PathBuf> = match std::fs::read_dir(dir) {
            Ok(entries) => entries
                .flatten()
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .map(|e| e.path())
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return vec![(dir.to_path_buf(), Err(ImageError::io(format!("listing {}", dir.display()), e)))],
        };
        paths.sort();
        let mut outcomes = Vec::new();
        for path in paths {
            let key = path.to_string_lossy().into_owned();
            let (size, mtime_ns) = fingerprint(&path);
            let unchanged = self.index.current().ok().is_some_and(|index| {
                index.sources.get(&key).is_some_and(|s| {
                    s.size == size
                        && s.mtime_ns == mtime_ns
                        && s.images.iter().all(|id| index.images.iter().any(|i| i.id == *id))
                })
            });
            if unchanged {
                tracing::debug!(source = %path.display(), "already imported");
                continue;
            }
            let outcome = self.import(&path, None).and_then(|imported| {
                let images = imported.iter().filter_map(|i| i.id.parse().ok()).collect();
                self.update_index(|index| {
                    index.sources.insert(key, SourceRecord { size, mtime_ns, images });
                    Ok(())
                })?;
                Ok(imported)
            });
            outcomes.push((path, outcome));
        }
        outcomes
    }

    /// Unpacks what is missing of `image` and returns its layer directories,
    /// lowest first, for overlayfs. Records a durable lease for `holder` (a
    /// container id) so they are never deleted while leased — even if the
    /// image is removed meanwhile, and across restarts.
    pub(crate) fn lease_layers(&self, holder: &str, image: &Image) -> Result<Vec<PathBuf>, ImageError> {
        self.lease_layers_for(holder, image, false)
    }

    /// `lease_layers` for an image `holder` mounts as a volume: the image
    /// then cannot be removed until the lease goes.
    pub(crate) fn lease_volume(&self, holder: &str, image: &Image) -> Result<Vec<PathBuf>, ImageError> {
        self.lease_layers_for(holder, image, true)
    }

    fn lease_layers_for(&self, holder: &str, image: &Image, mounted: bool) -> Result<Vec<PathBuf>, ImageError> {
        validate_holder(holder)?;
        let _in_flight = self.work_in_flight()?;
        let previous = {
            let _lock = self.lock()?;
            let previous = self.leases.get(holder)?;
            let mut lease = previous.clone().unwrap_or_else(|| Lease {
                holder: holder.to_string(),
                images: Vec::new(),
                diff_ids: Vec::new(),
                blobs: Vec::new(),
                mounted: Vec::new(),
                process: None,
                created_at_ns: now_ns(),
            });
            if !lease.images.contains(&image.id) {
                lease.images.push(image.id.clone());
            }
            if mounted && !lease.mounted.contains(&image.id) {
                lease.mounted.push(image.id.clone());
            }
            for layer in &image.layers {
                if !lease.diff_ids.contains(&layer.diff_id) {
                    lease.diff_ids.push(layer.diff_id.clone());
                }
            }
            self.leases.put(&lease)?;
            previous
        };
        let unpacked = image.layers.iter().try_for_each(|layer| {
            self.layers.unpack(&self.content.path(&layer.digest), &layer.digest, &layer.diff_id).map(drop)
        });
        if let Err(e) = unpacked {
            // Leave the leases as they were.
            let _lock = self.lock()?;
            match previous {
                Some(previous) => self.leases.put(&previous)?,
                None => drop(self.leases.remove(holder)?),
            }
            return Err(e);
        }
        tracing::debug!(container_id = holder, image = %image.id, layers = image.layers.len(), "layers leased");
        Ok(image.layers.iter().map(|l| self.layers.fs_path(&l.diff_id)).collect())
    }

    /// Drops `holder`'s lease (idempotent) and deletes the layers no image and
    /// no lease uses any more. Garbage collection reads every lease, so it
    /// runs only when this lease held a layer no image in the index uses
    /// (its image was removed meanwhile): otherwise the release frees nothing.
    pub(crate) fn release(&self, holder: &str) -> Result<(), ImageError> {
        validate_holder(holder)?;
        let may_free = {
            let _lock = self.lock()?;
            let held = self.leases.get(holder);
            if !self.leases.remove(holder)? {
                return Ok(());
            }
            match held {
                // An unreadable index is the collection's to report.
                Ok(Some(lease)) => self
                    .index
                    .current()
                    .map_or(true, |index| lease.diff_ids.iter().any(|layer| !index.uses_layer(layer))),
                // Unreadable: what it held is unknown.
                _ => true,
            }
        };
        tracing::debug!(container_id = holder, may_free, "lease released");
        if may_free {
            self.collect_garbage_logged();
        }
        Ok(())
    }

    /// Keeps `blobs` and the layers `diff_ids` from garbage collection until
    /// the answer is dropped: a pull holds it from before it stores its
    /// first blob until its image is in the index.
    pub(crate) fn hold_for_pull(
        self: &Arc<Self>,
        blobs: Vec<Digest>,
        diff_ids: Vec<Digest>,
    ) -> Result<HeldForPull, ImageError> {
        let holder = {
            let _lock = self.lock()?;
            self.pulling.put(blobs, diff_ids)?
        };
        Ok(HeldForPull { store: self.clone(), holder })
    }

    pub(crate) fn has_blob(&self, digest: &Digest) -> bool {
        self.content.contains(digest)
    }

    /// Stores a manifest or config a pull fetched, verified against `digest`.
    pub(crate) fn store_fetched(&self, data: &[u8], digest: &Digest) -> Result<(), ImageError> {
        self.content.write_known(data, digest)
    }

    /// Stores a layer blob of `size` bytes as `source` yields it, unpacking
    /// it on the way unless its layer `diff_id` is unpacked already. The blob
    /// is checked against `digest` and the layer against `diff_id` before
    /// either is published; on failure neither is left behind.
    pub(crate) fn store_layer(
        &self,
        source: &mut dyn std::io::Read,
        digest: &Digest,
        size: u64,
        diff_id: &Digest,
    ) -> Result<(), ImageError> {
        let mut blob = self.content.create()?;
        let mut tee = Tee { inner: std::io::Read::take(source, size + 1), blob: &mut blob };
        self.layers.unpack_stream(&mut tee, digest, diff_id, |tee| {
            std::io::copy(tee, &mut std::io::sink())
                .map_err(|e| ImageError::BadLayer { layer: digest.clone(), why: format!("reading the blob: {e}") })?;
            tee.blob.commit(Expected { digest: Some(digest), size: Some(size) }).map(|_| ())
        })?;
        Ok(())
    }

    /// Adds a pulled image under `name`, its repo digest `name@repo_digest`
    /// (the digest the registry serves it by: the index's for a multi-platform image).
    pub(crate) fn add_pulled(
        &self,
        candidate: Candidate,
        name: &Reference,
        repo_digest: &Digest,
    ) -> Result<Image, ImageError> {
        let (mut record, _) = self.prepare(candidate, Some(name))?;
        record.repo_digests = vec![name.with_digest(repo_digest)];
        let image = record.to_image();
        self.update_index(|index| {
            add_image(index, record);
            Ok(())
        })?;
        // The index may have merged names of an image with the same id.
        Ok(self.resolve(&image.id).unwrap_or(image))
    }

    /// Holders of leases (containers, to reconcile with those that exist).
    pub(crate) fn lease_holders(&self) -> Result<Vec<String>, ImageError> {
        Ok(self.leases.all()?.into_iter().map(|l| l.holder).collect())
    }

    /// Deletes blobs no image and no pull in flight references and layers no
    /// image and no lease uses, and the leftovers of processes that died
    /// mid-work.
    pub(crate) fn collect_garbage(&self) -> Result<GcReport, ImageError> {
        let Some(_exclusive) = lock::try_exclusive(&self.dir.join(GC_LOCK)).map_err(lock_error)? else {
            tracing::debug!("garbage collection deferred: an import or a container's unpack is in progress");
            return Ok(GcReport { deferred: true, ..Default::default() });
        };
        let mut report = GcReport::default();
        let mut doomed = Vec::new();
        {
            let _lock = self.lock()?;
            let index = self.index.current()?;
            let mut leases = self.leases.all()?;
            leases.extend(self.pulling.live()?);
            let garbage = find_garbage(&index, &leases, &self.content.list()?, &self.layers.list()?);
            for blob in &garbage.blobs {
                self.content.remove(blob)?;
                report.blobs += 1;
            }
            for diff_id in &garbage.layers {
                if let Some(dir) = self.layers.detach(diff_id)? {
                    doomed.push(dir);
                    report.layers += 1;
                }
            }
            self.content.remove_stale_temps();
            self.layers.remove_stale_temps();
        }
        for dir in doomed {
            if let Err(e) = store::remove_tree(&dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot delete a collected layer; it goes at the next collection");
            }
        }
        if report.blobs + report.layers > 0 {
            tracing::info!(blobs = report.blobs, layers = report.layers, "image garbage collected");
        }
        Ok(report)
    }

    pub(crate) fn collect_garbage_logged(&self) {
        if let Err(e) = self.collect_garbage() {
            tracing::warn!(error = %e, "image garbage collection failed; it is retried at the next one");
        }
    }

    /// Bytes and inodes the store uses on its filesystem.
    pub(crate) fn usage(&self) -> StoreUsage {
        let (layer_bytes, layer_inodes) = self.layers.usage();
        let (blob_bytes, blob_inodes) = self.content.usage();
        let leases = self.leases.count().map(|n| n as u64).unwrap_or_default();
        // The store's own directories (`pulling/` among them), index, lock files and leases.
        let own_inodes = 9 + leases;
        StoreUsage {
            mountpoint: self.dir.clone(),
            used_bytes: layer_bytes + blob_bytes + own_inodes * 4096,
            inodes: layer_inodes + blob_inodes + own_inodes,
        }
    }

    /// The annotations of `image`'s manifest (CRI-O marks checkpoint images so).
    pub fn manifest_annotations(&self, image: &Image) -> Result<std::collections::HashMap<String, String>, ImageError> {
        let digest: Digest = image
            .manifest_digest
            .parse()
            .map_err(|e: super::digest::DigestError| ImageError::BadContent(e.to_string()))?;
        let manifest: serde_json::Value = serde_json::from_slice(&self.content.read_small(&digest)?)
            .map_err(|e| ImageError::BadContent(format!("manifest {digest}: {e}")))?;
        Ok(manifest
            .get("annotations")
            .and_then(|a| a.as_object())
            .map(|a| a.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
            .unwrap_or_default())
    }

    /// Where a layer is unpacked, if it is.
    pub(crate) fn unpacked_path(&self, diff_id: &Digest) -> Option<PathBuf> {
        self.layers.record(diff_id).ok().flatten().map(|_| self.layers.fs_path(diff_id))
    }

    /// The verbose `info` of ImageStatus: the image config as the image has
    /// it, chain id, manifest and layers (with where each is unpacked).
    pub fn verbose_info(&self, image: &Image) -> serde_json::Value {
        let image_spec = image
            .id
            .parse::<Digest>()
            .ok()
            .and_then(|d| self.content.read_small(&d).ok())
            .and_then(|data| serde_json::from_slice::<serde_json::Value>(&data).ok());
        let diff_ids: Vec<Digest> = image.layers.iter().map(|l| l.diff_id.clone()).collect();
        serde_json::json!({
            "id": image.id,
            "repoTags": image.repo_tags,
            "repoDigests": image.repo_digests,
            "manifestDigest": image.manifest_digest,
            "chainID": chain_id(&diff_ids).map(|d| d.to_string()),
            "size": image.size,
            "imageSpec": image_spec,
            "layers": image.layers.iter().map(|l| serde_json::json!({
                "digest": l.digest.to_string(),
                "diffID": l.diff_id.to_string(),
                "size": l.size,
                "mediaType": l.media_type,
                "unpacked": self.unpacked_path(&l.diff_id),
            })).collect::<Vec<_>>(),
        })
    }
}

fn image_config(config: &ImageConfiguration) -> ImageConfig {
    let Some(c) = config.config() else { return ImageConfig::default() };
    ImageConfig {
        user: c.user().clone().unwrap_or_default(),
        env: c.env().clone().unwrap_or_default(),
        entrypoint: c.entrypoint().clone().unwrap_or_default(),
        cmd: c.cmd().clone().unwrap_or_default(),
        working_dir: c.working_dir().clone().unwrap_or_default(),
        stop_signal: c.stop_signal().clone().unwrap_or_default(),
        labels: c.labels().clone().unwrap_or_default(),
        volumes: c.volumes().clone().unwrap_or_default(),
    }
}

/// Size and mtime of an archive (for a layout directory, of its index).
fn fingerprint(path: &Path) -> (u64, i64) {
    use std::os::unix::fs::MetadataExt;
    let meta = ["index.json", "manifest.json"]
        .iter()
        .find_map(|name| std::fs::metadata(path.join(name)).ok())
        .or_else(|| std::fs::metadata(path).ok());
    meta.map(|m| (m.size(), m.mtime() * 1_000_000_000 + m.mtime_nsec())).unwrap_or_default()
}

/// An image config and its layers' diff ids, checked: its rootfs is of
/// type "layers", with as many diff ids as its manifest `manifest` has
/// `layers`. A pull checks this before it downloads the layers, and
/// `prepare` again before it unpacks them.
pub(super) fn checked_config(
    bytes: &[u8],
    config_digest: &Digest,
    manifest: &Digest,
    layers: usize,
) -> Result<(ImageConfiguration, Vec<Digest>), ImageError> {
    let config = ImageConfiguration::from_reader(bytes)
        .map_err(|e| ImageError::BadContent(format!("image config {config_digest} is not valid: {e}")))?;
    if config.rootfs().typ() != "layers" {
        return Err(ImageError::BadContent(format!(
            "image config {config_digest}: rootfs type {:?} is not \"layers\"",
            config.rootfs().typ()
        )));
    }
    let diff_ids = config
        .rootfs()
        .diff_ids()
        .iter()
        .map(|d| d.parse::<Digest>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ImageError::BadContent(format!("image config {config_digest}: diff id {e}")))?;
    if diff_ids.len() != layers {
        return Err(ImageError::BadContent(format!(
            "image config {config_digest} lists {} layers (diff ids), its manifest {manifest} lists {layers}",
            diff_ids.len()
        )));
    }
    Ok((config, diff_ids))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_is_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<ImageStore>();
    }
}
