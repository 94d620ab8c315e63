//! A container's changes to its image: its overlay upper directory as
//! `rootfs-diff.tar` (what it added or changed) plus `deleted.files` (the
//! whiteouts: image paths it removed), and applying both to a new upper
//! directory at restore.

use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use crate::linux::rootfs::{create_in_root, open_in_root};

/// Writes `upper`'s contents (except whiteouts) as a tar at `out`; returns
/// the deleted paths ("/etc/motd"), sorted.
pub(crate) fn write(upper: &Path, out: &Path) -> io::Result<Vec<String>> {
    let mut builder = tar::Builder::new(io::BufWriter::new(fs::File::create(out)?));
    builder.follow_symlinks(false);
    let mut deleted = Vec::new();
    add_dir(&mut builder, upper, Path::new(""), &mut deleted)?;
    builder.into_inner()?.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    deleted.sort();
    Ok(deleted)
}

fn add_dir(
    builder: &mut tar::Builder<io::BufWriter<fs::File>>,
    upper: &Path,
    rel: &Path,
    deleted: &mut Vec<String>,
) -> io::Result<()> {
    let mut entries: Vec<fs::DirEntry> = fs::read_dir(upper.join(rel))?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = rel.join(entry.file_name());
        let meta = entry.metadata()?;
        if meta.file_type().is_char_device() && meta.rdev() == 0 {
            deleted.push(format!("/{}", name.display()));
            continue;
        }
        builder.append_path_with_name(entry.path(), &name)?;
        if meta.is_dir() {
            add_dir(builder, upper, &name, deleted)?;
        }
    }
    Ok(())
}

/// Parses `deleted.files` (a JSON list of absolute paths) and checks each
/// stays inside the root.
pub(crate) fn parse_deleted(json: &[u8]) -> Result<Vec<PathBuf>, String> {
    let list: Vec<String> = serde_json::from_slice(json).map_err(|e| format!("deleted.files: {e}"))?;
    list.iter()
        .map(|p| {
            let path = Path::new(p);
            let plain = path.is_absolute()
                && path.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
                && path.components().count() > 1;
            if plain {
                Ok(path.to_path_buf())
            } else {
                Err(format!("deleted.files: {p:?} is not a plain absolute path"))
            }
        })
        .collect()
}

/// Unpacks `diff` into the (new, empty) `upper` and whites out `deleted`,
/// every path resolved inside `upper` (a symlink in the diff cannot lead out).
pub(crate) fn apply(diff: &Path, deleted: &[PathBuf], upper: &Path) -> io::Result<()> {
    let mut archive = tar::Archive::new(io::BufReader::new(fs::File::open(diff)?));
    archive.set_preserve_permissions(true);
    archive.set_preserve_ownerships(true);
    archive.set_preserve_mtime(true);
    archive.set_overwrite(true);
    archive.unpack(upper)?;
    let root = fs::File::open(upper)?;
    use std::os::fd::AsRawFd;
    for path in deleted {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else { continue };
        create_in_root(root.as_raw_fd(), parent, true)?;
        let dir = open_in_root(root.as_raw_fd(), parent, libc::O_DIRECTORY | libc::O_RDONLY, 0)?;
        let _ = nix::unistd::unlinkat(&dir, name, nix::unistd::UnlinkatFlags::NoRemoveDir);
        nix::sys::stat::mknodat(
            &dir,
            name,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::empty(),
            nix::sys::stat::makedev(0, 0),
        )
        .map_err(io::Error::from)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deleted_files_must_stay_inside_the_root() {
        assert_eq!(parse_deleted(br#"["/etc/motd","/a/b"]"#).unwrap().len(), 2);
        for bad in [r#"["../x"]"#, r#"["/a/../../x"]"#, r#"["/"]"#, r#"["rel"]"#, "{}"] {
            assert!(parse_deleted(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
