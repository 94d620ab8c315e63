//! Persisted metadata: atomic writes (temp file, fsync, rename, fsync dir) so a
//! crash leaves the old record or the new one, never a torn one; JSON records;
//! private directories; and the leftovers of interrupted writes.
//!
//! Files in the volatile state directory (gone at reboot) are written with
//! `Durability::Volatile`: still atomic against a process crash (rename), but
//! not fsynced, since a power loss empties that directory anyway.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

const TMP_PREFIX: &str = ".tmp-";

#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("corrupt record {path}: {source}")]
    Corrupt { path: PathBuf, source: serde_json::Error },
    #[error("cannot {action} {}: {source}", .path.display())]
    Directory { action: &'static str, path: PathBuf, source: io::Error },
}

/// Whether a write must survive a power loss, or only a process crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// fsync the file and its directory: the record survives a power loss.
    Durable,
    /// Atomic rename only: for files that a reboot makes meaningless.
    Volatile,
}

/// Replaces `path` with `data` atomically and durably; the file gets `mode`.
pub(crate) fn write_atomic(path: &Path, data: &[u8], mode: u32) -> Result<(), StoreError> {
    write_atomic_with(path, data, mode, Durability::Durable)
}

/// Replaces `path` with `data` atomically; durably when asked.
pub(crate) fn write_atomic_with(path: &Path, data: &[u8], mode: u32, durability: Durability) -> Result<(), StoreError> {
    PreparedWrite::new(path, data, mode, durability)?.commit()
}

/// A write made in two halves, so the slow one can overlap other work: `new`
/// writes (and, when durable, fsyncs) a temp file beside `path`; `commit`
/// renames it into place (and fsyncs the directory). Until the commit,
/// `path` keeps its old content; dropped uncommitted, the temp file goes.
#[derive(Debug)]
pub(crate) struct PreparedWrite {
    path: PathBuf,
    tmp: PathBuf,
    durability: Durability,
    committed: bool,
}

impl PreparedWrite {
    pub(crate) fn new(path: &Path, data: &[u8], mode: u32, durability: Durability) -> Result<Self, StoreError> {
        let err = |source| StoreError::Write { path: path.to_path_buf(), source };
        let dir = path.parent().ok_or_else(|| err(io::ErrorKind::InvalidInput.into()))?;
        let name = path.file_name().ok_or_else(|| err(io::ErrorKind::InvalidInput.into()))?.to_string_lossy();
        let tmp = dir.join(format!("{TMP_PREFIX}{name}-{:016x}", rand::random::<u64>()));
        let prepared = Self { path: path.to_path_buf(), tmp, durability, committed: false };
        let created = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&prepared.tmp);
        // On error, dropping `prepared` removes the temp file.
        created.and_then(|file| prepared.fill(file, data)).map_err(err)?;
        Ok(prepared)
    }

    /// Like `new`, with `spare` as the temp file: an empty file made ahead
    /// beside `path` (see `container::spare_dirs`), so that no inode is
    /// allocated now (on ext4 the slow part of a small write). As `new`
    /// when there is no such empty file (used already, or never made). It
    /// is never truncated: ext4 writes a truncated file out when it is
    /// closed (its guard for files replaced by truncation), at once.
    pub(crate) fn into_spare(
        path: &Path,
        spare: &Path,
        data: &[u8],
        mode: u32,
        durability: Durability,
    ) -> Result<Self, StoreError> {
        let opened = OpenOptions::new().write(true).custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW).open(spare);
        let file = match opened.and_then(|file| Ok((file.metadata()?.len(), file))) {
            Ok((0, file)) => file,
            Ok(_) => return Self::new(path, data, mode, durability),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Self::new(path, data, mode, durability),
            Err(source) => return Err(StoreError::Write { path: path.to_path_buf(), source }),
        };
        let prepared = Self { path: path.to_path_buf(), tmp: spare.to_path_buf(), durability, committed: false };
        let filled = file.set_permissions(fs::Permissions::from_mode(mode)).and_then(|()| prepared.fill(file, data));
        filled.map_err(|source| StoreError::Write { path: path.to_path_buf(), source })?;
        Ok(prepared)
    }

    /// Writes `data` to the opened temp file (and fsyncs it when durable).
    fn fill(&self, mut file: File, data: &[u8]) -> io::Result<()> {
        file.write_all(data)?;
        if self.durability == Durability::Durable {
            file.sync_all()?;
        }
        Ok(())
    }

    /// A JSON record (mode 0600), as `write_json_with` would write it.
    pub(crate) fn json<T: Serialize>(path: &Path, value: &T, durability: Durability) -> Result<Self, StoreError> {
        Self::new(path, &to_json(path, value)?, 0o600, durability)
    }

    /// Puts the prepared content in place.
    pub(crate) fn commit(mut self) -> Result<(), StoreError> {
        let err = |source| StoreError::Write { path: self.path.clone(), source };
        fs::rename(&self.tmp, &self.path).map_err(err)?;
        self.committed = true;
        match (self.durability, self.path.parent()) {
            (Durability::Durable, Some(dir)) => sync_dir(dir).map_err(err),
            _ => Ok(()),
        }
    }
}

impl Drop for PreparedWrite {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// fsyncs a directory so a rename or unlink in it is durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), StoreError> {
    write_json_with(path, value, Durability::Durable)
}

/// `write_json_with` through a spare temp file (see `PreparedWrite::into_spare`).
pub(crate) fn write_json_into_spare<T: Serialize>(
    path: &Path,
    spare: &Path,
    value: &T,
    durability: Durability,
) -> Result<(), StoreError> {
    PreparedWrite::into_spare(path, spare, &to_json(path, value)?, 0o600, durability)?.commit()
}

pub(crate) fn write_json_with<T: Serialize>(path: &Path, value: &T, durability: Durability) -> Result<(), StoreError> {
    write_atomic_with(path, &to_json(path, value)?, 0o600, durability)
}

fn to_json<T: Serialize>(path: &Path, value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec_pretty(value)
        .map_err(|e| StoreError::Write { path: path.to_path_buf(), source: io::Error::other(e) })
}

/// Reads a JSON record; `Ok(None)` when the file does not exist.
pub(crate) fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, StoreError> {
    match fs::read(path) {
        Ok(data) => serde_json::from_slice(&data)
            .map(Some)
            .map_err(|source| StoreError::Corrupt { path: path.to_path_buf(), source }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StoreError::Read { path: path.to_path_buf(), source }),
    }
}

/// Reads a JSON file that must exist (a missing one is a read error). The
/// file is read whole and parsed from memory, several times faster than
/// parsing through a reader (oci-spec's `Spec::load` does): the monitor
/// reads the container's spec this way on CreateContainer's path.
pub(crate) fn read_existing_json<T: DeserializeOwned>(path: &Path) -> Result<T, StoreError> {
    read_json(path)?
        .ok_or_else(|| StoreError::Read { path: path.to_path_buf(), source: io::ErrorKind::NotFound.into() })
}

/// True when both paths name the same file or directory (also through a
/// symbolic link or a bind mount).
pub(crate) fn same_file(a: &Path, b: &Path) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let (a, b) = (fs::metadata(a)?, fs::metadata(b)?);
    Ok((a.dev(), a.ino()) == (b.dev(), b.ino()))
}

/// Creates `path` and missing parents; directories created here get `mode`.
/// An existing directory keeps its mode.
pub(crate) fn create_dir_all(path: &Path, mode: u32) -> io::Result<()> {
    fs::DirBuilder::new().recursive(true).mode(mode).create(path)
}

/// Creates `path` (one level) with `mode`, failing if it exists.
pub(crate) fn create_dir_new(path: &Path, mode: u32) -> io::Result<()> {
    fs::DirBuilder::new().mode(mode).create(path)
}

/// Removes a directory tree; a missing tree is not an error.
pub(crate) fn remove_tree(path: &Path) -> io::Result<()> {
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Names of the subdirectories of `dir` (empty when `dir` does not exist),
/// after removing the temp files of writes a crash interrupted.
pub(crate) fn list_records(dir: &Path) -> io::Result<Vec<String>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type()?.is_dir() && !name.starts_with('.') {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Where one kind of object keeps its records: a durable directory per id
/// below `base`, with the record in it, and a volatile one below `run_base`.
#[derive(Debug, Clone)]
pub(crate) struct RecordDirs {
    pub(crate) base: PathBuf,
    pub(crate) run_base: PathBuf,
}

impl RecordDirs {
    /// `<root>/<kind>` and `<state>/<kind>`.
    pub(crate) fn new(root: &Path, state: &Path, kind: &str) -> Self {
        Self { base: root.join(kind), run_base: state.join(kind) }
    }

    /// Makes both directories (0700) where missing and lists the ids with a
    /// durable directory, sorted, once the leftovers of interrupted writes
    /// in each id's two directories are gone: what a start reloads.
    pub(crate) fn open(&self) -> Result<Vec<String>, StoreError> {
        for dir in [&self.base, &self.run_base] {
            create_dir_all(dir, 0o700).map_err(|source| StoreError::Directory {
                action: "create",
                path: dir.clone(),
                source,
            })?;
        }
        let ids = list_records(&self.base).map_err(|source| StoreError::Directory {
            action: "list",
            path: self.base.clone(),
            source,
        })?;
        for id in &ids {
            remove_interrupted_writes(&self.base.join(id));
            remove_interrupted_writes(&self.run_base.join(id));
        }
        Ok(ids)
    }

    /// The ids with a volatile directory but none in `ids` (those `open`
    /// listed): what an object left behind that is no longer there.
    pub(crate) fn orphaned_run_dirs(&self, ids: &[String]) -> Vec<String> {
        list_records(&self.run_base).unwrap_or_default().into_iter().filter(|id| !ids.contains(id)).collect()
    }
}

/// Removes the temp files an interrupted `write_atomic` left in `dir`.
pub(crate) fn remove_interrupted_writes(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(TMP_PREFIX) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn tempdir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn same_file_sees_through_symbolic_links() {
        let scratch = tempdir();
        let dir = scratch.path();
        let (a, b, link) = (dir.join("a"), dir.join("b"), dir.join("link-to-a"));
        create_dir_all(&a, 0o700).unwrap();
        create_dir_all(&b, 0o700).unwrap();
        std::os::unix::fs::symlink(&a, &link).unwrap();
        assert!(same_file(&a, &link).unwrap());
        assert!(same_file(&a, &a).unwrap());
        assert!(!same_file(&a, &b).unwrap());
        assert!(same_file(&a, &dir.join("missing")).is_err());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let scratch = tempdir();
        let dir = scratch.path();
        let path = dir.join("record.json");
        write_json(&path, &serde_json::json!({"a": 1})).unwrap();
        write_json(&path, &serde_json::json!({"a": 2})).unwrap();
        let v: serde_json::Value = read_json(&path).unwrap().unwrap();
        assert_eq!(v["a"], 2);
        let names: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1);
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        remove_tree(dir).unwrap();
    }

    #[test]
    fn a_prepared_write_changes_nothing_until_committed() {
        let scratch = tempdir();
        let dir = scratch.path();
        let path = dir.join("record.json");
        write_json(&path, &serde_json::json!({"a": 1})).unwrap();
        let prepared = PreparedWrite::json(&path, &serde_json::json!({"a": 2}), Durability::Durable).unwrap();
        let v: serde_json::Value = read_json(&path).unwrap().unwrap();
        assert_eq!(v["a"], 1, "the old record stays until the commit");
        prepared.commit().unwrap();
        let v: serde_json::Value = read_json(&path).unwrap().unwrap();
        assert_eq!(v["a"], 2);
        drop(PreparedWrite::json(&path, &serde_json::json!({"a": 3}), Durability::Durable).unwrap());
        let v: serde_json::Value = read_json(&path).unwrap().unwrap();
        assert_eq!(v["a"], 2, "a dropped write changes nothing");
        let names: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "no temp file is left: {names:?}");
        remove_tree(dir).unwrap();
    }

    #[test]
    fn a_write_into_a_spare_uses_its_inode_and_without_one_makes_its_own() {
        use std::os::unix::fs::MetadataExt;
        let scratch = tempdir();
        let dir = scratch.path();
        let (path, spare) = (dir.join("record.json"), dir.join(".tmp-spare"));
        OpenOptions::new().write(true).create_new(true).mode(0o644).open(&spare).unwrap();
        let inode = fs::metadata(&spare).unwrap().ino();
        write_json_into_spare(&path, &spare, &serde_json::json!({"a": 1}), Durability::Durable).unwrap();
        let meta = fs::metadata(&path).unwrap();
        assert_eq!(meta.ino(), inode, "the spare became the record");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert!(!spare.exists());
        // Used up: a temp file of its own, and still nothing left beside.
        write_json_into_spare(&path, &spare, &serde_json::json!({"a": 2}), Durability::Volatile).unwrap();
        // One that is not empty is never written into (nor truncated).
        fs::write(&spare, b"other").unwrap();
        write_json_into_spare(&path, &spare, &serde_json::json!({"a": 3}), Durability::Volatile).unwrap();
        assert_eq!(fs::read(&spare).unwrap(), b"other");
        fs::remove_file(&spare).unwrap();
        let v: serde_json::Value = read_json(&path).unwrap().unwrap();
        assert_eq!(v["a"], 3);
        assert_eq!(fs::read_dir(dir).unwrap().count(), 1);
        remove_tree(dir).unwrap();
    }

    #[test]
    fn missing_is_none_and_torn_is_an_error() {
        let scratch = tempdir();
        let dir = scratch.path();
        let missing: Option<serde_json::Value> = read_json(&dir.join("nope")).unwrap();
        assert!(missing.is_none());
        fs::write(dir.join("torn"), b"{\"a\": ").unwrap();
        assert!(matches!(read_json::<serde_json::Value>(&dir.join("torn")), Err(StoreError::Corrupt { .. })));
        fs::write(dir.join(".tmp-x-1"), b"partial").unwrap();
        remove_interrupted_writes(dir);
        assert!(!dir.join(".tmp-x-1").exists());
        remove_tree(dir).unwrap();
    }

    #[test]
    fn an_existing_json_file_must_be_there_and_whole() {
        let scratch = tempdir();
        let dir = scratch.path();
        match read_existing_json::<serde_json::Value>(&dir.join("nope")) {
            Err(StoreError::Read { path, source }) => {
                assert_eq!(path, dir.join("nope"));
                assert_eq!(source.kind(), io::ErrorKind::NotFound);
            }
            other => panic!("a missing file must be a read error, got {other:?}"),
        }
        fs::write(dir.join("torn"), b"{\"a\": ").unwrap();
        assert!(matches!(read_existing_json::<serde_json::Value>(&dir.join("torn")), Err(StoreError::Corrupt { .. })));
        fs::write(dir.join("whole"), b"{\"a\": [1, 2]}").unwrap();
        let whole: serde_json::Value = read_existing_json(&dir.join("whole")).unwrap();
        assert_eq!(whole, serde_json::json!({"a": [1, 2]}));
        remove_tree(dir).unwrap();
    }

    #[test]
    fn record_dirs_open_as_a_start_reloads_them() {
        let scratch = tempdir();
        let dirs = RecordDirs::new(&scratch.path().join("root"), &scratch.path().join("state"), "things");
        assert_eq!(dirs.open().unwrap(), Vec::<String>::new(), "both made, empty");
        for dir in [&dirs.base, &dirs.run_base] {
            assert_eq!(fs::metadata(dir).unwrap().permissions().mode() & 0o777, 0o700);
        }
        for id in ["b", "a"] {
            create_dir_all(&dirs.base.join(id), 0o700).unwrap();
            create_dir_all(&dirs.run_base.join(id), 0o700).unwrap();
            fs::write(dirs.base.join(id).join(".tmp-record.json-1"), b"torn").unwrap();
            fs::write(dirs.run_base.join(id).join(".tmp-pid.json-1"), b"torn").unwrap();
            fs::write(dirs.base.join(id).join("record.json"), b"{}").unwrap();
        }
        create_dir_all(&dirs.run_base.join("gone"), 0o700).unwrap();
        let ids = dirs.open().unwrap();
        assert_eq!(ids, vec!["a".to_string(), "b".to_string()]);
        for id in &ids {
            let left: Vec<_> = fs::read_dir(dirs.base.join(id)).unwrap().flatten().map(|e| e.file_name()).collect();
            assert_eq!(left, vec![std::ffi::OsString::from("record.json")], "interrupted writes removed");
            assert_eq!(fs::read_dir(dirs.run_base.join(id)).unwrap().count(), 0);
        }
        assert_eq!(dirs.orphaned_run_dirs(&ids), vec!["gone".to_string()]);

        // A base that cannot be made names itself.
        let blocked = RecordDirs::new(
            &scratch.path().join("root").join("things").join("a").join("record.json"),
            &scratch.path().join("state"),
            "x",
        );
        let e = blocked.open().unwrap_err();
        assert!(matches!(e, StoreError::Directory { action: "create", .. }), "{e:?}");
        assert!(e.to_string().starts_with(&format!("cannot create {}", blocked.base.display())), "{e}");
    }
}
