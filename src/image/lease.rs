//! Leases: records (`images/leases/<holder>.json`) that a holder — a
//! container — uses some unpacked layers, so garbage collection keeps them
//! even when their image is removed, and across daemon restarts. (Pulls in
//! flight keep blobs and layers with the same records in a directory of
//! their own: `pull_lease.rs`.) They are
//! written atomically but not fsynced: a lease matters only while its
//! container can run, and a power loss ends every container. A lease that a
//! power loss tore is dropped when the store opens.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::digest::Digest;
use super::ImageError;
use crate::linux::process::ProcessIdentity;
use crate::store;

const MAX_HOLDER: usize = 128;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Lease {
    pub(crate) holder: String,
    /// Images the holder leased layers of.
    pub(crate) images: Vec<String>,
    pub(crate) diff_ids: Vec<Digest>,
    /// Blobs kept too (a pull's, until its image is in the index).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) blobs: Vec<Digest>,
    /// Images the holder mounts as volumes: they cannot be removed while it does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) mounted: Vec<String>,
    /// The process whose work the lease lasts for (a pull's), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) process: Option<ProcessIdentity>,
    pub(crate) created_at_ns: i64,
}

#[derive(Debug)]
pub(crate) struct Leases {
    dir: PathBuf,
}

/// A holder names a file: letters, digits, `_`, `-`, `.`; not hidden.
pub(crate) fn validate_holder(holder: &str) -> Result<(), ImageError> {
    let ok = !holder.is_empty()
        && holder.len() <= MAX_HOLDER
        && !holder.starts_with('.')
        && holder.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(ImageError::InvalidHolder(holder.to_string()))
    }
}

impl Leases {
    pub(crate) fn open(dir: &Path) -> Result<Self, ImageError> {
        store::create_dir_all(dir, 0o700).map_err(|e| ImageError::io(format!("creating {}", dir.display()), e))?;
        Ok(Self { dir: dir.to_path_buf() })
    }

    fn path(&self, holder: &str) -> PathBuf {
        self.dir.join(format!("{holder}.json"))
    }

    /// Removes what interrupted writes left, and leases a power loss tore
    /// (unreadable JSON: no container they protected survived it); the
    /// caller holds the store lock (under which every lease is written).
    pub(crate) fn remove_interrupted_writes(&self) {
        store::remove_interrupted_writes(&self.dir);
        let Ok(entries) = fs::read_dir(&self.dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "json")
                && matches!(store::read_json::<Lease>(&path), Err(store::StoreError::Corrupt { .. }))
            {
                tracing::warn!(lease = %path.display(), "dropping a lease torn by a power loss");
                let _ = fs::remove_file(&path);
            }
        }
    }

    pub(crate) fn get(&self, holder: &str) -> Result<Option<Lease>, ImageError> {
        let path = self.path(holder);
        store::read_json(&path).map_err(|e| ImageError::io(format!("reading {}", path.display()), io::Error::other(e)))
    }

    /// Records a lease (atomically, not fsynced); the caller holds the store lock.
    pub(crate) fn put(&self, lease: &Lease) -> Result<(), ImageError> {
        let path = self.path(&lease.holder);
        store::write_json_with(&path, lease, store::Durability::Volatile)
            .map_err(|e| ImageError::io(format!("writing {}", path.display()), io::Error::other(e)))
    }

    /// Drops a lease; true when there was one. The caller holds the store lock.
    pub(crate) fn remove(&self, holder: &str) -> Result<bool, ImageError> {
        let path = self.path(holder);
        match fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(ImageError::io(format!("removing {}", path.display()), e)),
        }
    }

    /// Every lease. A lease that cannot be read is an error: garbage
    /// collection must not guess what it protects.
    pub(crate) fn all(&self) -> Result<Vec<Lease>, ImageError> {
        let mut leases = Vec::new();
        for holder in self.holders()? {
            if let Some(lease) = self.get(&holder)? {
                leases.push(lease);
            }
        }
        leases.sort_by(|a, b| a.holder.cmp(&b.holder));
        Ok(leases)
    }

    /// How many leases there are, from the directory alone (none is read).
    pub(crate) fn count(&self) -> Result<usize, ImageError> {
        Ok(self.holders()?.len())
    }

    /// The holders with a lease file, in directory order.
    fn holders(&self) -> Result<Vec<String>, ImageError> {
        let entries =
            fs::read_dir(&self.dir).map_err(|e| ImageError::io(format!("listing {}", self.dir.display()), e))?;
        Ok(entries
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                let holder = name.strip_suffix(".json")?;
                validate_holder(holder).is_ok().then(|| holder.to_string())
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_are_safe_file_names() {
        for good in ["abc", "0123456789abcdef", "import-12-x", "a.b_c"] {
            validate_holder(good).unwrap();
        }
        for bad in ["", ".hidden", "a/b", "../x", "a b", &"x".repeat(129)] {
            assert!(validate_holder(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_torn_lease_is_dropped_and_a_whole_one_kept() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        let leases = Leases::open(&dir).unwrap();
        let lease = Lease {
            mounted: Vec::new(),
            holder: "kept".into(),
            images: vec!["sha256:x".into()],
            diff_ids: Vec::new(),
            blobs: Vec::new(),
            process: None,
            created_at_ns: 1,
        };
        leases.put(&lease).unwrap();
        fs::write(dir.join("torn.json"), b"").unwrap();
        leases.remove_interrupted_writes();
        assert_eq!(leases.all().unwrap(), vec![lease]);
        assert_eq!(leases.count().unwrap(), 1);
        assert!(!dir.join("torn.json").exists());
        store::remove_tree(&dir).unwrap();
    }
}
