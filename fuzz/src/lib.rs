//! What the fuzz targets share: a scratch directory per target process, the
//! check that a run wrote nothing beside the directory it was given, and a
//! helper that repairs tar header checksums so mutated archives get past the
//! tar reader's first check.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// With `NIDUS_FUZZ_DEBUG` set, prints what a run came to (for checking
/// that seeds reach what they are meant to).
pub fn debug(what: impl FnOnce() -> String) {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("NIDUS_FUZZ_DEBUG").is_some()) {
        eprintln!("{}", what());
    }
}

/// A fresh, empty directory `<base>/<name>` for one run, where `<base>` is
/// `$NIDUS_FUZZ_TMP` (default: /dev/shm, else the temp dir) plus
/// `nidus-fuzz-<pid>`: tmpfs keeps the fsyncs of the image store cheap.
pub fn fresh_dir(name: &str) -> PathBuf {
    let base = base_dir();
    let dir = base.join(name);
    if fs::symlink_metadata(&dir).is_ok() {
        remove_tree(&dir);
    }
    fs::create_dir(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    dir
}

/// This process's scratch base; made on first use.
pub fn base_dir() -> PathBuf {
    let root = std::env::var_os("NIDUS_FUZZ_TMP").map(PathBuf::from).unwrap_or_else(|| {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        }
    });
    let base = root.join(format!("nidus-fuzz-{}", std::process::id()));
    fs::create_dir_all(&base).unwrap_or_else(|e| panic!("creating {}: {e}", base.display()));
    base
}

/// Removes a tree a run left (whatever modes its entries got).
pub fn remove_tree(dir: &Path) {
    if let Err(e) = fs::remove_dir_all(dir) {
        panic!("removing {}: {e}", dir.display());
    }
}

/// The names in a directory.
pub fn names(dir: &Path) -> BTreeSet<OsString> {
    fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").file_name())
        .collect()
}

/// Owner, mode and times of a path (not following a final symlink): what a
/// write through an escaping symlink would change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: (i64, i64),
    ino: u64,
}

pub fn stamp(path: &Path) -> Stamp {
    let m = fs::symlink_metadata(path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display()));
    Stamp { mode: m.mode(), uid: m.uid(), gid: m.gid(), mtime: (m.mtime(), m.mtime_nsec()), ino: m.ino() }
}

/// A picture of a run directory and of the base above it, taken before a run
/// that may write only inside `inside` (a child of `run`); `check` asserts
/// that nothing else in `run`, `run` itself, or the base changed.
pub struct Outside {
    run: PathBuf,
    run_names: BTreeSet<OsString>,
    stamps: Vec<(PathBuf, Stamp)>,
    base_names: BTreeSet<OsString>,
}

impl Outside {
    pub fn snapshot(run: &Path, inside: &Path) -> Self {
        let base = run.parent().expect("a run directory has a parent");
        let mut stamps = vec![(run.to_path_buf(), stamp(run)), (base.to_path_buf(), stamp(base))];
        for name in names(run) {
            let path = run.join(&name);
            if path != inside {
                stamps.push((path.clone(), stamp(&path)));
            }
        }
        Outside { run: run.to_path_buf(), run_names: names(run), stamps, base_names: names(base) }
    }

    pub fn check(&self) {
        let base = self.run.parent().expect("a run directory has a parent");
        assert_eq!(names(&self.run), self.run_names, "an entry appeared or vanished beside the target directory");
        assert_eq!(names(base), self.base_names, "an entry appeared or vanished above the run directory");
        for (path, before) in &self.stamps {
            assert_eq!(&stamp(path), before, "{} changed", path.display());
        }
    }
}

/// Gives every tar header of a plain (uncompressed) archive its correct
/// checksum, walking header and data blocks as a tar reader would; stops at
/// the first size it cannot read.
pub fn fix_tar_checksums(data: &mut [u8]) {
    let mut at = 0;
    while at + 512 <= data.len() {
        let header = &mut data[at..at + 512];
        if header.iter().all(|b| *b == 0) {
            at += 512;
            continue;
        }
        header[148..156].fill(b' ');
        let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
        let field = format!("{sum:06o}\0 ");
        header[148..156].copy_from_slice(field.as_bytes());
        let Some(size) = tar_size(&header[124..136]) else { return };
        let blocks = size.div_ceil(512);
        at = match blocks.checked_mul(512).and_then(|n| n.checked_add(at as u64 + 512)) {
            Some(next) if next <= data.len() as u64 => next as usize,
            _ => return,
        };
    }
}

/// A header's size field: octal, or base-256 when its first bit is set.
fn tar_size(field: &[u8]) -> Option<u64> {
    if field[0] & 0x80 != 0 {
        let mut value = u64::from(field[0] & 0x7f);
        for b in &field[1..] {
            value = value.checked_mul(256)?.checked_add(u64::from(*b))?;
        }
        return Some(value);
    }
    let text = std::str::from_utf8(field).ok()?;
    let text = text.trim_matches(|c: char| c == ' ' || c == '\0');
    if text.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(text, 8).ok()
}

/// How a layer-like input is turned into the bytes the target reads: the
/// first input byte chooses.
pub enum Shape {
    /// The rest, as it is.
    Raw,
    /// The rest, tar checksums repaired.
    Tar,
    /// The rest, tar checksums repaired, then gzip-compressed.
    TarGzip,
    /// The rest, tar checksums repaired, then zstd-compressed.
    TarZstd,
}

/// Splits off the shape byte and makes the bytes to read.
pub fn shaped(data: &[u8], compression: bool) -> Option<Vec<u8>> {
    let (&first, rest) = data.split_first()?;
    let shape = match first % if compression { 4 } else { 2 } {
        0 => Shape::Raw,
        1 => Shape::Tar,
        2 => Shape::TarGzip,
        _ => Shape::TarZstd,
    };
    let mut bytes = rest.to_vec();
    if !matches!(shape, Shape::Raw) {
        fix_tar_checksums(&mut bytes);
    }
    Some(match shape {
        Shape::Raw | Shape::Tar => bytes,
        Shape::TarGzip => {
            use std::io::Write;
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(&bytes).expect("compressing into memory");
            gz.finish().expect("compressing into memory")
        }
        Shape::TarZstd => zstd::encode_all(&bytes[..], 1).expect("compressing into memory"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repaired_checksums_read_back() {
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_path("a/b").unwrap();
        header.set_size(3);
        header.set_cksum();
        builder.append(&header, &b"xyz"[..]).unwrap();
        let mut bytes = builder.into_inner().unwrap();
        bytes[0] = b'c';
        fix_tar_checksums(&mut bytes);
        let mut archive = tar::Archive::new(&bytes[..]);
        let entry = archive.entries().unwrap().next().unwrap().unwrap();
        assert_eq!(entry.path().unwrap(), Path::new("c/b"));
    }
}
