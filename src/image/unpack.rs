//! Extraction of one layer (a tar, plain or gzip/zstd compressed) into an
//! empty directory used as an overlayfs lower dir: OCI whiteouts become 0/0
//! character devices, opaque markers the `trusted.overlay.opaque=y` xattr;
//! ownership, modes, times, xattrs, hard links, symlinks and devices are kept.
//! Every path is resolved beneath the directory, so an entry that would land
//! outside it — `..`, absolute, or through a symlink — is refused.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::sys::stat::{FileStat, SFlag};
use tar::EntryType;

use super::digest::{Digest, HashingReader};
use super::layer_entry::EntryName;
use crate::linux::beneath::{ConfinedDir, ConfinedRoot, NodeKind};

const OPAQUE_XATTR: &str = "trusted.overlay.opaque";
const OVERLAY_XATTR_PREFIX: &str = "trusted.overlay.";
const PAX_XATTR_PREFIX: &str = "SCHILY.xattr.";
const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];
const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];

#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// The layer is malformed or tries to write where it must not.
    #[error("entry {entry:?}: {why}")]
    Refused { entry: String, why: String },
    /// Writing an entry failed.
    #[error("entry {entry:?}: {source}")]
    Write { entry: String, source: io::Error },
    /// The stream could not be read (truncated, corrupt compression or tar).
    #[error("reading the layer: {0}")]
    Read(io::Error),
}

/// How a layer's content is compressed, told by its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    pub(crate) fn sniff(head: &[u8]) -> Self {
        if head.starts_with(GZIP_MAGIC) {
            Self::Gzip
        } else if head.starts_with(ZSTD_MAGIC) {
            Self::Zstd
        } else {
            Self::None
        }
    }
}

/// The uncompressed stream of `source`, whatever its compression.
pub(crate) fn decompressed<'a>(source: impl Read + 'a) -> io::Result<Box<dyn Read + 'a>> {
    let mut buffered = BufReader::with_capacity(256 << 10, source);
    let compression = Compression::sniff(buffered.fill_buf()?);
    Ok(match compression {
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(buffered)),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(buffered)?),
        Compression::None => Box::new(buffered),
    })
}

/// Extracts the layer read from `source` into the empty directory `target`
/// and returns the digest of the uncompressed tar (the layer's diff id).
pub fn unpack(source: impl Read, target: &Path) -> Result<Digest, UnpackError> {
    let root = ConfinedRoot::open(target)
        .map_err(|e| UnpackError::Write { entry: target.display().to_string(), source: e })?;
    let mut tar_stream = HashingReader::new(decompressed(source).map_err(UnpackError::Read)?);
    let mut unpacker = Unpacker { root: &root, whiteouts: HashSet::new(), dir_times: Vec::new() };
    {
        let mut archive = tar::Archive::new(&mut tar_stream);
        for entry in archive.entries().map_err(UnpackError::Read)? {
            let mut entry = entry.map_err(UnpackError::Read)?;
            unpacker.entry(&mut entry)?;
        }
    }
    unpacker.set_dir_times()?;
    let (diff_id, _) = tar_stream.finish().map_err(UnpackError::Read)?;
    Ok(diff_id)
}

struct Unpacker<'a> {
    root: &'a ConfinedRoot,
    /// Whiteouts this layer made (a later entry of the same name replaces them).
    whiteouts: HashSet<PathBuf>,
    /// Directory mtimes, set last: adding children changes them.
    dir_times: Vec<(PathBuf, OsString, i64)>,
}

/// What a tar header says about an entry's metadata.
struct Meta {
    uid: u32,
    gid: u32,
    mode: u32,
    mtime: i64,
    xattrs: Vec<(String, Vec<u8>)>,
}

fn refused(entry: &str, why: impl std::fmt::Display) -> UnpackError {
    UnpackError::Refused { entry: entry.to_string(), why: why.to_string() }
}

/// Turns a failure to reach a parent directory into a clear refusal.
fn resolve_error(entry: &str, e: io::Error) -> UnpackError {
    match e.raw_os_error() {
        Some(libc::EXDEV) => refused(entry, "its path leads outside the layer through a symlink"),
        Some(libc::ELOOP) => refused(entry, "its path has too many levels of symlinks"),
        Some(libc::ENOTDIR) => refused(entry, "a component of its path is not a directory"),
        _ => UnpackError::Write { entry: entry.to_string(), source: e },
    }
}

fn is_dir(st: &FileStat) -> bool {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR
}

impl Unpacker<'_> {
    fn entry<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>) -> Result<(), UnpackError> {
        let raw = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw).into_owned();
        let kind = entry.header().entry_type();
        if matches!(kind, EntryType::XGlobalHeader | EntryType::XHeader) {
            return Ok(());
        }
        let meta = self.meta(entry, &shown)?;
        let (parent, name) = match EntryName::parse(&raw).map_err(|e| refused(&shown, e))? {
            EntryName::Root | EntryName::Ignored => return Ok(()),
            EntryName::Opaque { dir } => return self.opaque(&shown, &dir),
            EntryName::Whiteout { parent, name } => return self.whiteout(&shown, &parent, &name),
            EntryName::Path { parent, name } => (parent, name),
        };
        let dir = self.parent_dir(&shown, &parent)?;
        let at = Target { dir: &dir, name: &name, shown: &shown };
        let existing = dir.lstat(&name).map_err(|e| at.write_error(e))?;
        let replaced_whiteout = self.whiteouts.remove(&parent.join(&name));
        match kind {
            EntryType::Directory => {
                Self::directory(&at, existing.as_ref(), &meta, replaced_whiteout)?;
                self.dir_times.push((parent, name.clone(), meta.mtime));
                Ok(())
            }
            EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                Self::regular(&at, existing.as_ref(), &meta, entry)
            }
            EntryType::Symlink => {
                let target = entry.link_name_bytes().map(|t| t.into_owned()).unwrap_or_default();
                Self::symlink(&at, existing.as_ref(), &meta, &target)
            }
            EntryType::Link => {
                let target = entry.link_name_bytes().map(|t| t.into_owned()).unwrap_or_default();
                self.hard_link(&at, existing.as_ref(), &target)
            }
            EntryType::Char | EntryType::Block | EntryType::Fifo => {
                Self::device(&at, existing.as_ref(), &meta, kind, entry.header())
            }
            other => Err(refused(&shown, format!("unsupported tar entry type {other:?}"))),
        }
    }

    fn directory(
        at: &Target<'_>,
        existing: Option<&FileStat>,
        meta: &Meta,
        replaced_whiteout: bool,
    ) -> Result<(), UnpackError> {
        let write = |e| at.write_error(e);
        match existing {
            Some(st) if is_dir(st) => {}
            Some(_) => {
                at.dir.unlink(at.name).map_err(write)?;
                at.dir.mkdir(at.name, 0o700).map_err(write)?;
            }
            None => at.dir.mkdir(at.name, 0o700).map_err(write)?,
        }
        apply_meta(at, meta, true)?;
        if replaced_whiteout {
            // This layer's directory replaces one it whited out: nothing of
            // the lower layers shows through it.
            at.dir.set_xattr(at.name, OPAQUE_XATTR, b"y").map_err(write)?;
        }
        Ok(())
    }

    fn regular(
        at: &Target<'_>,
        existing: Option<&FileStat>,
        meta: &Meta,
        data: &mut impl Read,
    ) -> Result<(), UnpackError> {
        let write = |e| at.write_error(e);
        clear(at.dir, at.name, existing).map_err(write)?;
        let mut file = at.dir.create_file(at.name).map_err(write)?;
        io::copy(data, &mut file).map_err(UnpackError::Read)?;
        drop(file);
        apply_meta(at, meta, true)?;
        at.dir.set_mtime(at.name, meta.mtime).map_err(write)
    }

    fn symlink(at: &Target<'_>, existing: Option<&FileStat>, meta: &Meta, target: &[u8]) -> Result<(), UnpackError> {
        if target.is_empty() {
            return Err(refused(at.shown, "a symlink without a target"));
        }
        let write = |e| at.write_error(e);
        clear(at.dir, at.name, existing).map_err(write)?;
        at.dir.symlink(at.name, OsStr::from_bytes(target)).map_err(write)?;
        apply_meta(at, meta, false)?;
        at.dir.set_mtime(at.name, meta.mtime).map_err(write)
    }

    fn device(
        at: &Target<'_>,
        existing: Option<&FileStat>,
        meta: &Meta,
        kind: EntryType,
        header: &tar::Header,
    ) -> Result<(), UnpackError> {
        let node = match kind {
            EntryType::Char => NodeKind::Char,
            EntryType::Block => NodeKind::Block,
            _ => NodeKind::Fifo,
        };
        let number = |v: io::Result<Option<u32>>| -> Result<u64, UnpackError> {
            Ok(v.map_err(|e| refused(at.shown, format!("bad device number: {e}")))?.unwrap_or(0) as u64)
        };
        // A FIFO has no device number: GNU tar and Python's tarfile leave
        // the fields blank, which is no number at all.
        let (major, minor) = match node {
            NodeKind::Fifo => (0, 0),
            _ => (number(header.device_major())?, number(header.device_minor())?),
        };
        let write = |e| at.write_error(e);
        clear(at.dir, at.name, existing).map_err(write)?;
        at.dir.mknod(at.name, node, 0o600, major, minor).map_err(write)?;
        apply_meta(at, meta, true)?;
        at.dir.set_mtime(at.name, meta.mtime).map_err(write)
    }

    fn meta<R: Read>(&self, entry: &mut tar::Entry<'_, R>, shown: &str) -> Result<Meta, UnpackError> {
        let header = entry.header();
        let bad = |what: &str, e: io::Error| refused(shown, format!("bad {what} in the tar header: {e}"));
        let id = |v: u64, what: &str| u32::try_from(v).map_err(|_| refused(shown, format!("{what} {v} is too large")));
        let uid = id(header.uid().map_err(|e| bad("uid", e))?, "uid")?;
        let gid = id(header.gid().map_err(|e| bad("gid", e))?, "gid")?;
        let mode = header.mode().map_err(|e| bad("mode", e))? & 0o7777;
        let mut mtime = header.mtime().map_err(|e| bad("mtime", e))? as i64;
        let mut xattrs = Vec::new();
        if let Some(pax) = entry.pax_extensions().map_err(UnpackError::Read)? {
            for ext in pax {
                let ext = ext.map_err(UnpackError::Read)?;
                let Ok(key) = ext.key() else { continue };
                if let Some(name) = key.strip_prefix(PAX_XATTR_PREFIX) {
                    // overlayfs reads trusted.overlay.* of lower dirs; only
                    // nidus sets them, never a layer.
                    if !name.starts_with(OVERLAY_XATTR_PREFIX) {
                        xattrs.push((name.to_string(), ext.value_bytes().to_vec()));
                    }
                } else if key == "mtime" {
                    let value = ext.value().unwrap_or_default();
                    if let Ok(seconds) = value.split('.').next().unwrap_or_default().parse::<i64>() {
                        mtime = seconds;
                    }
                }
            }
        }
        Ok(Meta { uid, gid, mode, mtime, xattrs })
    }

    /// The parent directory of an entry, made (0755, root-owned) when the
    /// layer did not list it.
    fn parent_dir(&self, shown: &str, parent: &Path) -> Result<ConfinedDir, UnpackError> {
        match self.root.dir(parent) {
            Ok(dir) => return Ok(dir),
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(resolve_error(shown, e)),
            Err(_) => {}
        }
        let mut done = PathBuf::new();
        for component in parent.components() {
            let next = done.join(component);
            match self.root.dir(&next) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let dir = self.root.dir(&done).map_err(|e| resolve_error(shown, e))?;
                    dir.mkdir(component.as_os_str(), 0o755)
                        .map_err(|e| UnpackError::Write { entry: shown.to_string(), source: e })?;
                }
                Err(e) => return Err(resolve_error(shown, e)),
            }
            done = next;
        }
        self.root.dir(parent).map_err(|e| resolve_error(shown, e))
    }

    fn hard_link(&self, at: &Target<'_>, existing: Option<&FileStat>, target: &[u8]) -> Result<(), UnpackError> {
        let write = |e| at.write_error(e);
        let (target_parent, target_name) = EntryName::parse_link_target(target)
            .map_err(|e| refused(at.shown, format!("hard link target: {e}")))?
            .ok_or_else(|| refused(at.shown, "a hard link without a target in the layer"))?;
        let target_dir = self.root.dir(&target_parent).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => refused(at.shown, "the hard link target is not in this layer"),
            _ => resolve_error(at.shown, e),
        })?;
        let target_stat = target_dir
            .lstat(&target_name)
            .map_err(write)?
            .ok_or_else(|| refused(at.shown, "the hard link target is not in this layer"))?;
        if is_dir(&target_stat) {
            return Err(refused(at.shown, "a hard link to a directory"));
        }
        if let Some(st) = existing {
            if st.st_ino == target_stat.st_ino && st.st_dev == target_stat.st_dev {
                return Ok(());
            }
        }
        clear(at.dir, at.name, existing).map_err(write)?;
        at.dir.hard_link(at.name, &target_dir, &target_name).map_err(write)
    }

    fn whiteout(&mut self, shown: &str, parent: &Path, name: &OsStr) -> Result<(), UnpackError> {
        let dir = self.parent_dir(shown, parent)?;
        let write = |e| UnpackError::Write { entry: shown.to_string(), source: e };
        match dir.lstat(name).map_err(write)? {
            // This layer has its own entry of that name: it already hides the
            // lower one; a directory must also hide the lower one's content.
            Some(st) if is_dir(&st) => dir.set_xattr(name, OPAQUE_XATTR, b"y").map_err(write),
            Some(_) => Ok(()),
            None => {
                dir.mknod(name, NodeKind::Char, 0o600, 0, 0).map_err(write)?;
                self.whiteouts.insert(parent.join(name));
                Ok(())
            }
        }
    }

    fn opaque(&self, shown: &str, dir: &Path) -> Result<(), UnpackError> {
        let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
            return Err(refused(
                shown,
                "an opaque marker at the layer root (overlayfs cannot hide a whole lower layer)",
            ));
        };
        let parent_dir = self.parent_dir(shown, parent)?;
        let write = |e| UnpackError::Write { entry: shown.to_string(), source: e };
        match parent_dir.lstat(name).map_err(write)? {
            Some(st) if is_dir(&st) => {}
            Some(_) => return Err(refused(shown, "an opaque marker in something that is not a directory")),
            None => parent_dir.mkdir(name, 0o755).map_err(write)?,
        }
        parent_dir.set_xattr(name, OPAQUE_XATTR, b"y").map_err(write)
    }

    fn set_dir_times(&self) -> Result<(), UnpackError> {
        for (parent, name, mtime) in self.dir_times.iter().rev() {
            let shown = parent.join(name).display().to_string();
            // A later entry may have replaced the directory or a parent.
            let set = self.root.dir(parent).and_then(|dir| match dir.lstat(name)? {
                Some(st) if is_dir(&st) => dir.set_mtime(name, *mtime),
                _ => Ok(()),
            });
            match set {
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR)) => {}
                Err(e) => return Err(resolve_error(&shown, e)),
                Ok(()) => {}
            }
        }
        Ok(())
    }
}

/// Where an entry goes: its parent directory and name.
struct Target<'a> {
    dir: &'a ConfinedDir,
    name: &'a OsStr,
    shown: &'a str,
}

impl Target<'_> {
    fn write_error(&self, source: io::Error) -> UnpackError {
        UnpackError::Write { entry: self.shown.to_string(), source }
    }
}

/// Removes what stands where a non-directory entry goes.
fn clear(dir: &ConfinedDir, name: &OsStr, existing: Option<&FileStat>) -> io::Result<()> {
    match existing {
        Some(st) if is_dir(st) => dir.remove_tree(name),
        Some(_) => dir.unlink(name),
        None => Ok(()),
    }
}

/// Owner, mode (not for symlinks) and xattrs of a new entry.
fn apply_meta(at: &Target<'_>, meta: &Meta, has_mode: bool) -> Result<(), UnpackError> {
    let write = |e| at.write_error(e);
    // Owner first: chown clears set-id bits and file capabilities.
    at.dir.chown(at.name, meta.uid, meta.gid).map_err(write)?;
    if has_mode {
        at.dir.chmod(at.name, meta.mode).map_err(write)?;
    }
    for (key, value) in &meta.xattrs {
        if let Err(e) = at.dir.set_xattr(at.name, key, value) {
            match e.raw_os_error() {
                // The filesystem or entry type cannot hold this attribute
                // (e.g. user.* on a symlink): the entry is still usable.
                Some(libc::ENOTSUP) | Some(libc::EPERM) => {
                    tracing::warn!(entry = at.shown, xattr = key.as_str(), error = %e, "xattr not kept")
                }
                _ => return Err(write(e)),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory, removed when dropped.
    struct Scratch(tempfile::TempDir);

    impl Scratch {
        fn new() -> Self {
            let scratch = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(scratch.path().join("layer")).unwrap();
            Scratch(scratch)
        }
    }

    /// A ustar header of the running user (so the test needs no root).
    fn header(path: &str, kind: EntryType, size: u64) -> tar::Header {
        let mut header = tar::Header::new_ustar();
        header.set_path(path).unwrap();
        header.set_entry_type(kind);
        header.set_mode(0o644);
        header.set_uid(nix::unistd::getuid().as_raw().into());
        header.set_gid(nix::unistd::getgid().as_raw().into());
        header.set_mtime(1_700_000_000);
        header.set_size(size);
        header
    }

    // Found by the fuzz seeds (fuzz/, layer_unpack): GNU tar and Python's
    // tarfile write a FIFO's device fields blank, and such a layer was refused
    // ("bad device number: numeric field was not a number").
    #[test]
    fn a_fifo_without_device_numbers_is_unpacked() {
        let mut fifo = header("run/fifo", EntryType::Fifo, 0);
        let ustar = fifo.as_ustar_mut().unwrap();
        ustar.dev_major = [0; 8];
        ustar.dev_minor = [0; 8];
        fifo.set_cksum();
        let mut builder = tar::Builder::new(Vec::new());
        builder.append(&fifo, io::empty()).unwrap();
        let mut file = header("run/file", EntryType::Regular, 2);
        file.set_cksum();
        builder.append(&file, &b"ok"[..]).unwrap();
        let layer = builder.into_inner().unwrap();

        let scratch = Scratch::new();
        let target = scratch.0.path().join("layer");
        unpack(&layer[..], &target).unwrap();
        let meta = std::fs::symlink_metadata(target.join("run/fifo")).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_fifo(&meta.file_type()));
        assert_eq!(std::fs::read(target.join("run/file")).unwrap(), b"ok");
    }
}
