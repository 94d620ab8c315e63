//! Restore through CreateContainer: an image that names a checkpoint archive
//! (an absolute path to its `.tar`, or an image in the store whose manifest
//! carries CRI-O's checkpoint annotation and whose layer holds the archive's
//! contents) makes the container from the checkpoint —
//! the checkpointed CRI config in the new sandbox, the original image's
//! layers plus the archived rootfs changes, and the processes from CRIU's
//! images (restored by the monitor, see monitor::restore).

use std::path::{Path, PathBuf};

use oci_spec::runtime::Spec;

use crate::api::ImageSpec;
use crate::checkpoint::archive::{self, ConfigDump};
use crate::checkpoint::{rootfs_diff, CheckpointError, Criu};
use crate::monitor::plan::RestorePlan;
use crate::pod::SandboxView;
use crate::store;
use crate::undo::Undo;

use super::{io_err, ContainerCreate, ContainerError, Containers, PidMode};
use crate::container::record::ContainerPaths;

/// The manifest annotation that marks an image as a checkpoint (CRI-O's).
pub(crate) const CHECKPOINT_ANNOTATION: &str = "io.kubernetes.cri-o.annotations.checkpoint.name";

/// Where a checkpoint's contents are.
#[derive(Debug, Clone)]
pub(crate) enum RestoreContents {
    /// An archive file, unpacked beside the container at create.
    Archive(PathBuf),
    /// A checkpoint image's unpacked layer (leased for the container).
    Unpacked(PathBuf),
}

/// A checkpoint CreateContainer restores from.
#[derive(Debug, Clone)]
pub(crate) struct RestoreSource {
    pub(crate) contents: RestoreContents,
    pub(crate) dump: ConfigDump,
}

fn bad_archive(path: &Path, why: impl std::fmt::Display) -> ContainerError {
    CheckpointError::Archive { path: path.to_path_buf(), why: why.to_string() }.into()
}

impl Containers {
    /// When the request's image is a checkpoint archive: the request as the
    /// checkpointed container's (its command, env, mounts, security) with
    /// this request's name, labels, annotations and log path, and the source.
    /// A checkpoint image's layer is leased for container `id` (released
    /// with the container's other leases, or by `undo`).
    pub(super) async fn restore_request<'s>(
        &'s self,
        request: &ContainerCreate,
        id: &str,
        undo: &Undo<'s>,
    ) -> Result<Option<(ContainerCreate, RestoreSource)>, ContainerError> {
        let image = request.config.image.as_ref().map(|i| i.image.clone()).unwrap_or_default();
        let contents = if image.starts_with('/') {
            let path = PathBuf::from(&image);
            if crate::paths::has_dot_dot(&path) {
                return Err(ContainerError::Invalid(format!("config.image.image: {image:?} must not contain '..'")));
            }
            if !path.is_file() {
                return Err(ContainerError::NotFound(format!("checkpoint archive {image}")));
            }
            RestoreContents::Archive(path)
        } else {
            match self.images.annotations(&image) {
                Ok(annotations) if annotations.contains_key(CHECKPOINT_ANNOTATION) => {}
                // Not a checkpoint (or no such image: the ordinary path says so).
                _ => return Ok(None),
            }
            let (images, holder, reference) = (self.images.clone(), id.to_string(), image.clone());
            let checkpoint_image = self.images.resolve(&image)?;
            let (releasing, leaseholder) = (self.images.clone(), id.to_string());
            undo.push_async("checkpoint image lease", move || super::create::release_lease(releasing, leaseholder));
            let layers = tokio::task::spawn_blocking(move || images.lease_layers(&holder, &checkpoint_image.id))
                .await
                .map_err(|e| ContainerError::Build(e.to_string()))??;
            match layers.as_slice() {
                [only] => RestoreContents::Unpacked(only.clone()),
                _ => {
                    return Err(ContainerError::Invalid(format!(
                        "config.image.image: checkpoint image {reference} must have exactly one layer, it has {}",
                        layers.len()
                    )))
                }
            }
        };
        let reading = contents.clone();
        let limit = self.config.limits.checkpoint_archive_bytes;
        let dump = tokio::task::spawn_blocking(move || match &reading {
            RestoreContents::Archive(path) => archive::read_config_dump(path, limit).map_err(|e| bad_archive(path, e)),
            RestoreContents::Unpacked(dir) => {
                let path = dir.join(archive::CONFIG_DUMP);
                let text =
                    crate::bounded_file::read(&path, archive::MAX_CONFIG_DUMP, crate::bounded_file::FinalLink::Refuse)
                        .map_err(|e| bad_archive(&path, e))?;
                serde_json::from_slice(&text).map_err(|e| bad_archive(&path, format!("not nidus's: {e}")))
            }
        })
        .await
        .map_err(|e| ContainerError::Build(e.to_string()))??;
        if let Err(e) = self.images.resolve(&dump.rootfs_image_ref) {
            return Err(ContainerError::Precondition(format!(
                "the checkpoint's image {} ({}) is not in the image store ({e}); pull it before restoring",
                dump.rootfs_image_name, dump.rootfs_image_ref
            )));
        }
        let mut config = dump.nidus.config.clone();
        config.metadata = request.config.metadata.clone();
        config.image = Some(ImageSpec { image: dump.rootfs_image_ref.clone(), ..Default::default() });
        config.log_path = request.config.log_path.clone();
        config.labels = request.config.labels.clone();
        config.annotations.extend(request.config.annotations.clone());
        let restored = ContainerCreate {
            sandbox: request.sandbox.clone(),
            config,
            name_key: request.name_key.clone(),
            pid: PidMode::Own,
        };
        Ok(Some((restored, RestoreSource { contents, dump })))
    }

    /// Unpacks the archive beside the container, applies its rootfs changes
    /// to the new upper dir, and says how the monitor restores the init.
    pub(super) async fn prepare_restore(
        &self,
        source: &RestoreSource,
        spec: &Spec,
        sandbox: &SandboxView,
        paths: &ContainerPaths,
    ) -> Result<RestorePlan, ContainerError> {
        let criu = Criu::find(self.config.checkpoint.criu_binary.as_deref(), &self.reaper)
            .await
            .map_err(|e| ContainerError::Precondition(e.to_string()))?;
        let work_dir = paths.dir.join("restore");
        store::create_dir_new(&work_dir, 0o700).map_err(io_err(format!("cannot create {}", work_dir.display())))?;
        let (contents, dest, upper) = (source.contents.clone(), work_dir.clone(), paths.upper());
        let limit = self.config.limits.checkpoint_archive_bytes;
        let unpacked = tokio::task::spawn_blocking(move || -> Result<PathBuf, ContainerError> {
            let unpacked = match contents {
                RestoreContents::Archive(path) => {
                    archive::unpack(&path, &dest, limit).map_err(|e| bad_archive(&path, e))?;
                    dest
                }
                RestoreContents::Unpacked(dir) => dir,
            };
            let deleted = std::fs::read(unpacked.join(archive::DELETED_FILES)).unwrap_or_else(|_| b"[]".to_vec());
            let deleted = rootfs_diff::parse_deleted(&deleted).map_err(|e| bad_archive(&unpacked, e))?;
            let diff = unpacked.join(archive::ROOTFS_DIFF);
            if diff.exists() {
                rootfs_diff::apply(&diff, &deleted, &upper)
                    .map_err(io_err("applying the checkpoint's rootfs changes"))?;
            }
            Ok(unpacked)
        })
        .await
        .map_err(|e| ContainerError::Build(e.to_string()))??;

        let pause = sandbox.pause.as_ref().map(|p| p.pid).ok_or_else(|| {
            ContainerError::Precondition(format!("sandbox {} has no pause process", sandbox.record.id))
        })?;
        let own = sandbox.record.namespaces;
        let mut join_ns = Vec::new();
        if own.uts {
            join_ns.push(("uts".to_string(), PathBuf::from(format!("/proc/{pause}/ns/uts"))));
        }
        if own.ipc {
            join_ns.push(("ipc".to_string(), PathBuf::from(format!("/proc/{pause}/ns/ipc"))));
        }
        let mounts = spec.mounts().clone().unwrap_or_default();
        let mut external_mounts = Vec::new();
        for (dest, key) in &source.dump.nidus.external_mounts {
            let m = mounts.iter().find(|m| m.destination() == Path::new(dest)).ok_or_else(|| {
                ContainerError::Invalid(format!("the checkpointed container had a mount at {dest}, this one has none"))
            })?;
            external_mounts.push((key.clone(), m.source().clone().unwrap_or_default()));
        }
        Ok(RestorePlan {
            criu: criu.path,
            images: unpacked.join(archive::IMAGES_DIR),
            work_dir,
            stdout_pipe: source.dump.nidus.stdout_pipe.clone(),
            stderr_pipe: source.dump.nidus.stderr_pipe.clone(),
            net_ns: PathBuf::from(format!("/proc/{pause}/ns/net")),
            join_ns,
            external_mounts,
        })
    }
}
