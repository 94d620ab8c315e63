//! Disk space and inodes a directory tree takes (a container's writable
//! layer): allocated blocks, each inode counted once however many links it has.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::Serialize;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DiskUsage {
    pub bytes: u64,
    pub inodes: u64,
}

/// What `dir` and everything below it use; None when `dir` is missing.
/// Does not cross into other filesystems (mounts below `dir`).
pub fn usage_of(dir: &Path) -> Option<DiskUsage> {
    let meta = fs::symlink_metadata(dir).ok()?;
    let mut seen = HashSet::new();
    let mut usage = DiskUsage::default();
    add(dir, meta.dev(), &meta, &mut seen, &mut usage);
    Some(usage)
}

fn add(path: &Path, dev: u64, meta: &fs::Metadata, seen: &mut HashSet<u64>, usage: &mut DiskUsage) {
    if meta.dev() != dev || !seen.insert(meta.ino()) {
        return;
    }
    usage.inodes += 1;
    usage.bytes += meta.blocks() * 512;
    if meta.is_dir() {
        let Ok(entries) = fs::read_dir(path) else { return };
        for entry in entries.flatten() {
            if let Ok(child) = entry.metadata() {
                add(&entry.path(), dev, &child, seen, usage);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_files_and_hard_links_once() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("sub")).unwrap();
        fs::write(dir.join("sub/a"), vec![7u8; 10_000]).unwrap();
        fs::hard_link(dir.join("sub/a"), dir.join("b")).unwrap();
        let usage = usage_of(&dir).unwrap();
        assert_eq!(usage.inodes, 3, "dir, sub, and one file with two names");
        assert!(usage.bytes >= 10_000);
        fs::remove_dir_all(&dir).unwrap();
        assert!(usage_of(&dir).is_none());
    }
}
