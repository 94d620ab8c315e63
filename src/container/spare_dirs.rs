//! Spare container directories: `<root>/spare-containers/<random id>`, each
//! already holding what a container's directory starts with — the empty
//! `upper` and `work` directories of its root filesystem, and in `upper`
//! the mount points every container gets (`etc/hostname`, `etc/hosts`,
//! `etc/resolv.conf`), as the overlay's copy-up of /etc would otherwise
//! make them while the container's init builds. CreateContainer renames a
//! spare to the container's directory (and writes its records and its
//! config.json into the empty files made for them); a replacement is made
//! in the background after the create, with the replacement monitor
//! (`Containers::refill_spares_later`). So these inodes are made off
//! CreateContainer's path: on ext4 each new inode costs a search of the
//! inode bitmap, and without a journal a long one (inodes deleted in the
//! last minutes are skipped), a sizeable part of a create here.
//!
//! The mount points' `etc` then takes the owner, mode, times and extended
//! attributes of the image's /etc (`fit_to_image`), as a copy-up gives
//! them; where the image's /etc is no directory (a symbolic link, say) it
//! is removed, and the image's /etc shows through.

use std::fs::{self, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::ids;
use crate::store;

/// The mount points made ahead, below `upper/etc`: the pod's files, which
/// every container mounts (from the pod or from kubelet's own mounts).
const MOUNT_POINTS: [&str; 3] = ["hostname", "hosts", "resolv.conf"];

/// Empty files made ahead for CreateContainer's writes in the directory
/// (`store::PreparedWrite::into_spare`), so that they allocate no inode:
/// the first record, the durable record once created, and config.json.
/// Named as temp files: one never used goes with the directory.
pub(crate) const FIRST_RECORD: &str = ".tmp-container.json-first";
pub(crate) const CREATED_RECORD: &str = ".tmp-container.json-created";
pub(crate) const SPEC: &str = ".tmp-config.json-first";
const SPARE_FILES: [&str; 3] = [FIRST_RECORD, CREATED_RECORD, SPEC];

pub(crate) struct SpareDirs {
    /// On the file system of the containers' directories they are renamed to.
    root: PathBuf,
    /// How many to keep (0: each container's directory is made on demand).
    size: usize,
    spares: Mutex<Vec<PathBuf>>,
}

impl Drop for SpareDirs {
    /// The spares go with the pool.
    fn drop(&mut self) {
        for dir in self.spares().drain(..) {
            let _ = store::remove_tree(&dir);
        }
    }
}

impl SpareDirs {
    /// A pool whose spares are made under `root`. What an earlier daemon
    /// left there goes (spares are not carried over: they are cheap).
    pub(crate) fn new(root: PathBuf, size: usize) -> Arc<Self> {
        if let Err(e) = store::remove_tree(&root) {
            tracing::warn!(dir = %root.display(), error = %e, "cannot remove earlier spare container directories");
        }
        Arc::new(Self { root, size, spares: Mutex::new(Vec::new()) })
    }

    fn spares(&self) -> MutexGuard<'_, Vec<PathBuf>> {
        self.spares.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many spares wait now.
    pub(crate) fn idle(&self) -> usize {
        self.spares().len()
    }

    /// Makes `dest` (which must not exist) a new container directory: a
    /// spare renamed when one waits, else made here. The caller has spares
    /// refilled (see `Containers::refill_spares_later`).
    pub(crate) fn take(&self, dest: &Path) -> io::Result<()> {
        let spare = self.spares().pop();
        if let Some(spare) = spare {
            match rename_new(&spare, dest) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    tracing::warn!(dir = %spare.display(), error = %e, "a spare container directory could not be taken");
                    let _ = store::remove_tree(&spare);
                    if e.kind() == io::ErrorKind::AlreadyExists {
                        return Err(e);
                    }
                }
            }
        }
        make(dest)
    }

    /// Whether all the spares wait.
    pub(crate) fn full(&self) -> bool {
        self.idle() >= self.size
    }

    /// Makes spares in the background until `size` wait.
    pub(crate) fn refill(self: &Arc<Self>) {
        if self.full() {
            return;
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.fill());
    }

    /// Makes spares here until `size` wait. Each is made under a hidden
    /// name and renamed to its own as it joins the pool (under the pool's
    /// lock): a directory under its own name is whole and can be taken.
    fn fill(&self) {
        while !self.full() {
            let id = ids::new_id();
            let making = self.root.join(format!(".making-{id}"));
            let made = store::create_dir_all(&self.root, 0o700).and_then(|()| make(&making));
            if let Err(e) = made {
                // `make` removed what it had made.
                tracing::warn!(dir = %making.display(), error = %e, "cannot make a spare container directory");
                return;
            }
            let mut spares = self.spares();
            if spares.len() >= self.size {
                // Another refill got there first.
                drop(spares);
                let _ = store::remove_tree(&making);
                return;
            }
            let dir = self.root.join(id);
            if let Err(e) = rename_new(&making, &dir) {
                drop(spares);
                tracing::warn!(dir = %making.display(), error = %e, "cannot name a spare container directory");
                let _ = store::remove_tree(&making);
                return;
            }
            spares.push(dir);
        }
    }
}

/// A new container directory at `dir`: `upper` (with the mount points)
/// and `work`. Half-made, it is removed.
fn make(dir: &Path) -> io::Result<()> {
    store::create_dir_new(dir, 0o700)?;
    let made = (|| {
        let upper = dir.join("upper");
        store::create_dir_new(&upper, 0o755)?;
        store::create_dir_new(&dir.join("work"), 0o755)?;
        let etc = upper.join("etc");
        store::create_dir_new(&etc, 0o755)?;
        for name in MOUNT_POINTS {
            OpenOptions::new().write(true).create_new(true).mode(0o644).open(etc.join(name))?;
        }
        for name in SPARE_FILES {
            OpenOptions::new().write(true).create_new(true).mode(0o600).open(dir.join(name))?;
        }
        Ok(())
    })();
    if made.is_err() {
        let _ = store::remove_tree(dir);
    }
    made
}

/// rename(2) that fails when `to` exists (an empty directory would be replaced).
fn rename_new(from: &Path, to: &Path) -> io::Result<()> {
    nix::fcntl::renameat2(
        nix::fcntl::AT_FDCWD,
        from,
        nix::fcntl::AT_FDCWD,
        to,
        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
    )
    .map_err(io::Error::from)
}

/// What the image has at /etc (its top-most layer that has it), for the
/// mount points' `etc` in the upper directory.
pub(crate) enum ImageEtc {
    /// A directory (in a layer, at this path): the upper `etc` takes its
    /// owner, mode, times and extended attributes.
    Directory(PathBuf, Metadata),
    /// Nothing (or a whiteout): the upper `etc` stays as made (root, 0755).
    Missing,
    /// Anything else: the upper `etc` goes, so that it shows through.
    Other,
}

/// Gives `upper/etc` what the image's /etc has (see `ImageEtc`), as the
/// overlay's copy-up of /etc would.
pub(crate) fn fit_to_image(upper: &Path, image_etc: &ImageEtc) -> io::Result<()> {
    let etc = upper.join("etc");
    match image_etc {
        ImageEtc::Missing => Ok(()),
        ImageEtc::Other => remove_mount_points(upper),
        ImageEtc::Directory(image_etc, meta) => {
            copy_xattrs(image_etc, &etc)?;
            std::os::unix::fs::lchown(&etc, Some(meta.uid()), Some(meta.gid()))?;
            fs::set_permissions(&etc, fs::Permissions::from_mode(meta.mode() & 0o7777))?;
            let time = |seconds: i64, nanos: i64| nix::sys::time::TimeSpec::new(seconds, nanos);
            nix::sys::stat::utimensat(
                nix::fcntl::AT_FDCWD,
                &etc,
                &time(meta.atime(), meta.atime_nsec()),
                &time(meta.mtime(), meta.mtime_nsec()),
                nix::sys::stat::UtimensatFlags::NoFollowSymlink,
            )
            .map_err(io::Error::from)
        }
    }
}

/// Copies the extended attributes of `from` to `to`, as the overlay's
/// copy-up does: all but the overlay's own (`trusted.overlay.*`,
/// `user.overlay.*`), and none the file system of `to` does not support.
fn copy_xattrs(from: &Path, to: &Path) -> io::Result<()> {
    for name in xattr::list(from)? {
        let text = name.to_string_lossy();
        if text.starts_with("trusted.overlay.") || text.starts_with("user.overlay.") {
            continue;
        }
        let Some(value) = xattr::get(from, &name)? else { continue };
        match xattr::set(to, &name, &value) {
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
            other => other?,
        }
    }
    Ok(())
}

/// For a container in a user namespace: the upper directory and what was
/// made in it ahead get, as owners, the node's IDs their own IDs map to (so
/// the container's root owns its root directory, as the image's root owns
/// it in the image). The work directory stays the node's root's (only the
/// overlay, mounted by it, uses it).
pub(crate) fn give_to_user_namespace(upper: &Path, maps: &crate::linux::userns::IdMaps) -> io::Result<()> {
    let mut entries = vec![upper.to_path_buf()];
    let etc = upper.join("etc");
    if fs::symlink_metadata(&etc).is_ok_and(|m| m.is_dir()) {
        entries.push(etc.clone());
        entries.extend(MOUNT_POINTS.iter().map(|name| etc.join(name)));
    }
    for entry in entries {
        let meta = match fs::symlink_metadata(&entry) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let unmapped =
            || io::Error::new(io::ErrorKind::InvalidInput, format!("{}: its owner is not mapped", entry.display()));
        let uid = maps.uids.to_host(meta.uid()).ok_or_else(unmapped)?;
        let gid = maps.gids.to_host(meta.gid()).ok_or_else(unmapped)?;
        std::os::unix::fs::lchown(&entry, Some(uid), Some(gid))?;
    }
    Ok(())
}

/// Removes the mount points made ahead (a container restored from a
/// checkpoint gets its upper directory from the checkpoint).
pub(crate) fn remove_mount_points(upper: &Path) -> io::Result<()> {
    store::remove_tree(&upper.join("etc"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn a_made_directory_holds_upper_work_and_the_mount_points() {
        let scratch = scratch();
        let base = scratch.path();
        let dir = base.join("c");
        make(&dir).unwrap();
        assert!(dir.join("work").is_dir());
        for name in SPARE_FILES {
            assert_eq!(fs::metadata(dir.join(name)).unwrap().len(), 0, "{name}");
        }
        for name in MOUNT_POINTS {
            let meta = fs::symlink_metadata(dir.join("upper/etc").join(name)).unwrap();
            assert!(meta.is_file() && meta.len() == 0, "{name}");
        }
        // An existing directory is never replaced.
        assert_eq!(make(&dir).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn a_spare_is_renamed_to_the_container_directory_and_never_over_one() {
        let scratch = scratch();
        let base = scratch.path();
        let pool = SpareDirs::new(base.join("spares"), 1);
        pool.fill();
        assert_eq!(pool.idle(), 1);
        pool.take(&base.join("c1")).unwrap();
        assert_eq!(pool.idle(), 0);
        assert!(base.join("c1/upper/etc/hosts").is_file());
        assert_eq!(fs::read_dir(base.join("spares")).unwrap().count(), 0, "the spare was moved, not copied");
        // None left: made in place.
        pool.take(&base.join("c2")).unwrap();
        assert!(base.join("c2/upper/etc/resolv.conf").is_file());
        // An empty directory in the way is an error, and the spare goes.
        pool.fill();
        fs::create_dir(base.join("c3")).unwrap();
        assert_eq!(pool.take(&base.join("c3")).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read_dir(base.join("spares")).unwrap().count(), 0);
        drop(pool);
        fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn the_mount_points_etc_takes_the_images_etc_or_goes() {
        let scratch = scratch();
        let base = scratch.path();
        let image_etc = base.join("layer/etc");
        fs::create_dir_all(&image_etc).unwrap();
        xattr::set(&image_etc, "user.nidus-test", b"kept").unwrap();
        xattr::set(&image_etc, "trusted.overlay.opaque", b"y").unwrap();
        fs::set_permissions(&image_etc, fs::Permissions::from_mode(0o750)).unwrap();
        std::os::unix::fs::lchown(&image_etc, Some(1000), Some(2000)).unwrap();
        let when = nix::sys::time::TimeSpec::new(1_000_000_000, 5);
        nix::sys::stat::utimensat(
            nix::fcntl::AT_FDCWD,
            &image_etc,
            &when,
            &when,
            nix::sys::stat::UtimensatFlags::NoFollowSymlink,
        )
        .unwrap();
        let dir = base.join("c");
        make(&dir).unwrap();
        let upper = dir.join("upper");
        let found = ImageEtc::Directory(image_etc.clone(), fs::symlink_metadata(&image_etc).unwrap());
        fit_to_image(&upper, &found).unwrap();
        let meta = fs::symlink_metadata(upper.join("etc")).unwrap();
        assert_eq!((meta.mode() & 0o7777, meta.uid(), meta.gid()), (0o750, 1000, 2000));
        assert_eq!((meta.mtime(), meta.mtime_nsec()), (1_000_000_000, 5));
        assert_eq!(xattr::get(upper.join("etc"), "user.nidus-test").unwrap(), Some(b"kept".to_vec()));
        assert_eq!(xattr::get(upper.join("etc"), "trusted.overlay.opaque").unwrap(), None, "never the overlay's own");
        fit_to_image(&upper, &ImageEtc::Missing).unwrap();
        assert!(upper.join("etc/hostname").is_file());
        fit_to_image(&upper, &ImageEtc::Other).unwrap();
        assert!(!upper.join("etc").exists());
        fs::remove_dir_all(base).unwrap();
    }
}
