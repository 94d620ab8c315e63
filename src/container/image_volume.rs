//! Image volumes (KEP-4639): an image mounted read-only into a container,
//! whole or one of its paths (`image_sub_path`). This part is the daemon's:
//! looking a sub path up through the image's layers as the overlay will
//! show them (whiteouts and opaque directories included), one component at
//! a time and never through a symbolic link, so a path that is missing,
//! escapes the image or names a device is refused before anything is made.
//! The container's init mounts the layers (`monitor::init`).

use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

use crate::linux::beneath::{ConfinedDir, ConfinedRoot};

/// What a sub path names in the merged image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    Directory,
    File,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum SubPathError {
    #[error("{} must be a relative path of plain names (no '..', '.' or leading '/')", crate::quote::quote(.0))]
    NotPlain(String),
    #[error("{} does not exist in the image", crate::quote::quote(.0))]
    Missing(String),
    #[error("{} goes through a symbolic link in the image ({}), which could lead out of it", crate::quote::quote(.path), crate::quote::quote(.link))]
    Symlink { path: String, link: String },
    #[error("{} names neither a directory nor a regular file in the image", crate::quote::quote(.0))]
    Special(String),
    #[error("{} goes through {}, which is no directory in the image", crate::quote::quote(.path), crate::quote::quote(.at))]
    NotADirectory { path: String, at: String },
    #[error("cannot read the image's layers: {0}")]
    Io(String),
}

/// Looks `sub_path` up in the image whose unpacked layers are `layers`
/// (lowest first).
pub(crate) fn find(layers: &[PathBuf], sub_path: &str) -> Result<Found, SubPathError> {
    let names = plain_names(sub_path)?;
    let io = |e: std::io::Error| SubPathError::Io(e.to_string());
    // The directories that make up the merged one at the current depth, topmost first.
    let mut merged: Vec<ConfinedDir> = Vec::new();
    for layer in layers.iter().rev() {
        let root = ConfinedRoot::open(layer).map_err(io)?;
        merged.push(root.root_dir().map_err(io)?);
    }
    for (depth, name) in names.iter().enumerate() {
        let last = depth + 1 == names.len();
        let here = names[..=depth].iter().map(|n| n.to_string_lossy()).collect::<Vec<_>>().join("/");
        let mut next = Vec::new();
        let mut found = None;
        for dir in &merged {
            let Some(stat) = dir.lstat(name).map_err(io)? else {
                if dir.is_overlay_opaque() {
                    break;
                }
                continue;
            };
            let kind = stat.st_mode & libc::S_IFMT;
            // An overlay whiteout (0/0 character device): nothing below shows.
            if kind == libc::S_IFCHR && stat.st_rdev == 0 {
                break;
            }
            match kind {
                libc::S_IFDIR => {
                    found.get_or_insert(Found::Directory);
                    let sub = dir.subdir(name).map_err(io)?;
                    let opaque = sub.is_overlay_opaque();
                    next.push(sub);
                    if opaque {
                        break;
                    }
                }
                // A non-directory above hides every layer below it.
                _ if found.is_some() => break,
                libc::S_IFLNK => return Err(SubPathError::Symlink { path: sub_path.into(), link: here }),
                libc::S_IFREG if last => return Ok(Found::File),
                libc::S_IFREG => return Err(SubPathError::NotADirectory { path: sub_path.into(), at: here }),
                _ => return Err(SubPathError::Special(sub_path.into())),
            }
            if dir.is_overlay_opaque() {
                break;
            }
        }
        match found {
            None => return Err(SubPathError::Missing(sub_path.into())),
            Some(kind) if last => return Ok(kind),
            Some(_) => merged = next,
        }
    }
    Ok(Found::Directory)
}

fn plain_names(sub_path: &str) -> Result<Vec<&OsStr>, SubPathError> {
    let path = Path::new(sub_path);
    let names: Vec<&OsStr> = path
        .components()
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(SubPathError::NotPlain(sub_path.into())),
        })
        .collect::<Result<_, _>>()?;
    if names.is_empty() || sub_path.len() > 4096 || sub_path.contains('\0') {
        return Err(SubPathError::NotPlain(sub_path.into()));
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// Two layers: the lower has etc/passwd, lib/a and links; the upper
    /// adds etc/hosts. (Whiteouts and opaque directories need root to make:
    /// tests/image_volumes.rs has them, in a real image.)
    fn layers() -> (tempfile::TempDir, Vec<PathBuf>) {
        let tmp = tempfile::tempdir().unwrap();
        let (lower, upper) = (tmp.path().join("lower"), tmp.path().join("upper"));
        for dir in ["etc", "lib"] {
            std::fs::create_dir_all(lower.join(dir)).unwrap();
        }
        std::fs::write(lower.join("etc/passwd"), "root:x:0:0::/:/bin/sh\n").unwrap();
        std::fs::write(lower.join("lib/a"), "").unwrap();
        symlink("/etc", lower.join("escape")).unwrap();
        symlink("../../..", lower.join("lib/up")).unwrap();
        std::fs::create_dir_all(upper.join("etc")).unwrap();
        std::fs::write(upper.join("etc/hosts"), "").unwrap();
        std::fs::write(upper.join("lib"), "a file over the lower's directory").unwrap();
        (tmp, vec![lower, upper])
    }

    #[test]
    fn sub_paths_are_found_as_the_overlay_shows_them() {
        let (_tmp, layers) = layers();
        assert_eq!(find(&layers, "etc"), Ok(Found::Directory));
        assert_eq!(find(&layers, "etc/passwd"), Ok(Found::File), "from the lower layer, through the merged dir");
        assert_eq!(find(&layers, "etc/hosts"), Ok(Found::File));
        assert_eq!(find(&layers, "lib"), Ok(Found::File), "the upper's file hides the lower's directory");
        assert!(matches!(find(&layers, "lib/a"), Err(SubPathError::NotADirectory { .. })));
        assert!(matches!(find(&layers, "not-existing"), Err(SubPathError::Missing(_))));
        assert!(matches!(find(&layers, "escape"), Err(SubPathError::Symlink { .. })));
        assert!(matches!(find(&layers, "escape/passwd"), Err(SubPathError::Symlink { .. })));
        assert!(matches!(find(&layers, "etc/passwd/x"), Err(SubPathError::NotADirectory { .. })));
        for bad in ["../etc", "/etc", "etc/../lib", "./etc", ""] {
            assert!(matches!(find(&layers, bad), Err(SubPathError::NotPlain(_))), "{bad:?}");
        }
    }
}
