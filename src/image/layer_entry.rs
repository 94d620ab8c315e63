//! What the name of a layer tar entry means: a path inside the layer (checked:
//! relative, no `..`), an OCI whiteout `.wh.NAME` hiding NAME of the layers
//! below, an opaque-directory marker `.wh..wh..opq`, or other `.wh..wh.`
//! metadata that is skipped. Pure logic; unpack.rs acts on it.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

const WHITEOUT_PREFIX: &[u8] = b".wh.";
const META_PREFIX: &[u8] = b".wh..wh.";
const OPAQUE: &[u8] = b".wh..wh..opq";

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EntryName {
    /// The layer root itself (`./`).
    Root,
    /// An entry `name` in the directory `parent` (relative to the layer root).
    Path { parent: PathBuf, name: OsString },
    /// Hide `name` of the lower layers in `parent`.
    Whiteout { parent: PathBuf, name: OsString },
    /// Hide everything the lower layers have in `dir`.
    Opaque { dir: PathBuf },
    /// Other whiteout metadata (aufs `.wh..wh.plnk`, …), not part of the tree.
    Ignored,
}

/// Why an entry name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NameError {
    #[error("absolute paths are not allowed in a layer")]
    Absolute,
    #[error("'..' leads outside the layer")]
    DotDot,
    #[error("a whiteout must name the entry it hides")]
    EmptyWhiteout,
}

impl EntryName {
    /// Reads a raw tar entry name.
    pub(crate) fn parse(raw: &[u8]) -> Result<Self, NameError> {
        let mut components = split(raw)?;
        let Some(last) = components.pop() else { return Ok(Self::Root) };
        let parent: PathBuf = components.iter().map(|c| OsStr::from_bytes(c)).collect();
        if last == OPAQUE {
            return Ok(Self::Opaque { dir: parent });
        }
        if last.starts_with(META_PREFIX) {
            return Ok(Self::Ignored);
        }
        if let Some(hidden) = last.strip_prefix(WHITEOUT_PREFIX) {
            if hidden.is_empty() || hidden == b"." || hidden == b".." {
                return Err(NameError::EmptyWhiteout);
            }
            return Ok(Self::Whiteout { parent, name: OsStr::from_bytes(hidden).to_os_string() });
        }
        Ok(Self::Path { parent, name: OsStr::from_bytes(last).to_os_string() })
    }

    /// Reads the target of a hard link: a plain path inside the layer.
    pub(crate) fn parse_link_target(raw: &[u8]) -> Result<Option<(PathBuf, OsString)>, NameError> {
        let mut components = split(raw)?;
        let Some(last) = components.pop() else { return Ok(None) };
        let parent: PathBuf = components.iter().map(|c| OsStr::from_bytes(c)).collect();
        Ok(Some((parent, OsStr::from_bytes(last).to_os_string())))
    }
}

/// The components of a relative path, without empty and `.` ones.
fn split(raw: &[u8]) -> Result<Vec<&[u8]>, NameError> {
    if raw.first() == Some(&b'/') {
        return Err(NameError::Absolute);
    }
    let mut out = Vec::new();
    for component in raw.split(|b| *b == b'/') {
        match component {
            b"" | b"." => {}
            b".." => return Err(NameError::DotDot),
            c => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(parent: &str, name: &str) -> EntryName {
        EntryName::Path { parent: parent.into(), name: name.into() }
    }

    #[test]
    fn plain_paths_are_normalised() {
        assert_eq!(EntryName::parse(b"etc/passwd").unwrap(), path("etc", "passwd"));
        assert_eq!(EntryName::parse(b"./etc//passwd").unwrap(), path("etc", "passwd"));
        assert_eq!(EntryName::parse(b"bin/").unwrap(), path("", "bin"));
        assert_eq!(EntryName::parse(b"./").unwrap(), EntryName::Root);
        assert_eq!(EntryName::parse(b".").unwrap(), EntryName::Root);
        assert_eq!(EntryName::parse(b"a/.wh.x/b").unwrap(), path("a/.wh.x", "b"));
    }

    #[test]
    fn whiteouts_and_opaque_markers() {
        assert_eq!(
            EntryName::parse(b"etc/.wh.hosts").unwrap(),
            EntryName::Whiteout { parent: "etc".into(), name: "hosts".into() }
        );
        assert_eq!(
            EntryName::parse(b".wh.tmp").unwrap(),
            EntryName::Whiteout { parent: "".into(), name: "tmp".into() }
        );
        assert_eq!(EntryName::parse(b"var/lib/.wh..wh..opq").unwrap(), EntryName::Opaque { dir: "var/lib".into() });
        assert_eq!(EntryName::parse(b".wh..wh..opq").unwrap(), EntryName::Opaque { dir: "".into() });
        assert_eq!(EntryName::parse(b".wh..wh.plnk/123").unwrap(), path(".wh..wh.plnk", "123"));
        assert_eq!(EntryName::parse(b"x/.wh..wh.plnk").unwrap(), EntryName::Ignored);
        assert_eq!(EntryName::parse(b"x/.wh.").unwrap_err(), NameError::EmptyWhiteout);
        assert_eq!(EntryName::parse(b"x/.wh...").unwrap_err(), NameError::EmptyWhiteout);
    }

    #[test]
    fn escapes_are_refused() {
        assert_eq!(EntryName::parse(b"../etc/passwd").unwrap_err(), NameError::DotDot);
        assert_eq!(EntryName::parse(b"a/../../b").unwrap_err(), NameError::DotDot);
        assert_eq!(EntryName::parse(b"a/..").unwrap_err(), NameError::DotDot);
        assert_eq!(EntryName::parse(b"/etc/passwd").unwrap_err(), NameError::Absolute);
        assert_eq!(EntryName::parse_link_target(b"/etc/shadow").unwrap_err(), NameError::Absolute);
        assert_eq!(EntryName::parse_link_target(b"../../etc/shadow").unwrap_err(), NameError::DotDot);
        assert_eq!(EntryName::parse_link_target(b"bin/sh").unwrap(), Some(("bin".into(), "sh".into())));
    }
}
