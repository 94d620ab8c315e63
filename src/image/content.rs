//! The content store: blobs (manifests, configs, compressed layers) kept by
//! their sha256 digest under `images/blobs/sha256/<hex>`. A blob is written to
//! a temp file, hashed on the way, checked against the digest it claims, made
//! durable and renamed into place, so a stored blob is always complete and true.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::digest::{Digest, HashingWriter};
use super::{temp, ImageError};
use crate::store;

/// Largest manifest, index or config this store reads into memory.
pub(crate) const MAX_JSON_BYTES: u64 = 8 << 20;

#[derive(Debug)]
pub(crate) struct ContentStore {
    dir: PathBuf,
}

/// What a blob must be when it is written.
#[derive(Debug, Clone, Default)]
pub(crate) struct Expected<'a> {
    pub(crate) digest: Option<&'a Digest>,
    pub(crate) size: Option<u64>,
}

impl ContentStore {
    /// The store in `dir` (`images/blobs`), created when missing.
    pub(crate) fn open(dir: &Path) -> Result<Self, ImageError> {
        let sha = dir.join("sha256");
        store::create_dir_all(&sha, 0o700).map_err(|e| ImageError::io(format!("creating {}", sha.display()), e))?;
        Ok(Self { dir: dir.to_path_buf() })
    }

    pub(crate) fn path(&self, digest: &Digest) -> PathBuf {
        self.dir.join("sha256").join(digest.hex())
    }

    pub(crate) fn contains(&self, digest: &Digest) -> bool {
        self.path(digest).is_file()
    }

    pub(crate) fn open_blob(&self, digest: &Digest) -> Result<File, ImageError> {
        File::open(self.path(digest)).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => ImageError::BlobMissing(digest.clone()),
            _ => ImageError::io(format!("opening blob {digest}"), e),
        })
    }

    pub(crate) fn size(&self, digest: &Digest) -> Result<u64, ImageError> {
        fs::metadata(self.path(digest))
            .map(|m| m.len())
            .map_err(|e| ImageError::io(format!("reading blob {digest}"), e))
    }

    /// A small blob (manifest, index, config) read whole.
    pub(crate) fn read_small(&self, digest: &Digest) -> Result<Vec<u8>, ImageError> {
        let mut data = Vec::new();
        self.open_blob(digest)?
            .take(MAX_JSON_BYTES + 1)
            .read_to_end(&mut data)
            .map_err(|e| ImageError::io(format!("reading blob {digest}"), e))?;
        if data.len() as u64 > MAX_JSON_BYTES {
            return Err(ImageError::BadContent(format!(
                "blob {digest} is larger than {MAX_JSON_BYTES} bytes, too large for a manifest or config"
            )));
        }
        Ok(data)
    }

    /// Stores what `source` yields and returns its digest and size; refuses
    /// (storing nothing) when it does not match `expected`. Content already
    /// stored under the digest is kept as it is.
    pub(crate) fn write(&self, source: &mut dyn Read, expected: Expected<'_>) -> Result<(Digest, u64), ImageError> {
        let mut blob = self.create()?;
        let limit = expected.size.map(|s| s + 1).unwrap_or(u64::MAX);
        io::copy(&mut source.take(limit), &mut blob).map_err(|e| ImageError::io("copying blob", e))?;
        blob.commit(expected)
    }

    /// A blob to be written piece by piece, then checked and published by
    /// [`BlobWriter::commit`] (once); dropped uncommitted, it leaves nothing.
    pub(crate) fn create(&self) -> Result<BlobWriter<'_>, ImageError> {
        let tmp = self.dir.join("sha256").join(temp::new_name());
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(|e| ImageError::io(format!("creating {}", tmp.display()), e))?;
        Ok(BlobWriter { store: self, tmp, writer: Some(HashingWriter::new(BufWriter::with_capacity(1 << 20, file))) })
    }

    /// Stores `data` (a manifest nidus wrote itself).
    pub(crate) fn write_bytes(&self, data: &[u8]) -> Result<Digest, ImageError> {
        let digest = Digest::of(data);
        self.write_known(data, &digest)?;
        Ok(digest)
    }

    /// Stores `data`, checked against `digest`, unless a blob of that
    /// digest is stored already.
    pub(crate) fn write_known(&self, data: &[u8], digest: &Digest) -> Result<(), ImageError> {
        if !self.contains(digest) {
            self.write(&mut &data[..], Expected { digest: Some(digest), size: Some(data.len() as u64) })?;
        }
        Ok(())
    }

    /// Every stored blob.
    pub(crate) fn list(&self) -> Result<Vec<Digest>, ImageError> {
        let dir = self.dir.join("sha256");
        let entries = fs::read_dir(&dir).map_err(|e| ImageError::io(format!("listing {}", dir.display()), e))?;
        Ok(entries.flatten().filter_map(|e| Digest::from_hex(&e.file_name().to_string_lossy()).ok()).collect())
    }

    /// Removes a blob; a missing one is not an error.
    pub(crate) fn remove(&self, digest: &Digest) -> Result<(), ImageError> {
        match fs::remove_file(self.path(digest)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(ImageError::io(format!("removing blob {digest}"), e)),
            _ => Ok(()),
        }
    }

    /// Removes temp files of writers that died.
    pub(crate) fn remove_stale_temps(&self) {
        let Ok(entries) = fs::read_dir(self.dir.join("sha256")) else { return };
        for entry in entries.flatten() {
            if temp::is_stale(&entry.file_name().to_string_lossy()) {
                let _ = fs::remove_file(entry.path());
            }
        }
    }

    /// Bytes (allocated) and inodes the blobs use.
    pub(crate) fn usage(&self) -> (u64, u64) {
        use std::os::unix::fs::MetadataExt;
        let Ok(entries) = fs::read_dir(self.dir.join("sha256")) else { return (0, 0) };
        entries
            .flatten()
            .filter_map(|e| e.metadata().ok())
            .fold((0, 2), |(bytes, inodes), m| (bytes + m.blocks() * 512, inodes + 1))
    }
}

/// A blob being written: its bytes go to a temp file, hashed on the way.
pub(crate) struct BlobWriter<'a> {
    store: &'a ContentStore,
    tmp: PathBuf,
    /// `None` once committed.
    writer: Option<HashingWriter<BufWriter<File>>>,
}

impl Drop for BlobWriter<'_> {
    fn drop(&mut self) {
        // Committed or not, the temp file goes (a committed one was renamed).
        let _ = fs::remove_file(&self.tmp);
    }
}

fn committed() -> io::Error {
    io::Error::other("the blob is already committed")
}

impl io::Write for BlobWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.writer.as_mut().ok_or_else(committed)?.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.writer.as_mut().ok_or_else(committed)?.flush()
    }
}

impl BlobWriter<'_> {
    /// Checks what was written against `expected`, makes it durable and
    /// renames it into place (keeping a blob already stored under the digest).
    pub(crate) fn commit(&mut self, expected: Expected<'_>) -> Result<(Digest, u64), ImageError> {
        let writer = self.writer.take().ok_or_else(|| ImageError::io("committing a blob", committed()))?;
        let (buffered, digest, size) = writer.finish();
        if let Some(want) = expected.size {
            if want != size {
                let name = expected.digest.map(|d| d.to_string()).unwrap_or_else(|| "blob".into());
                return Err(ImageError::BadContent(format!(
                    "{name} has the wrong size: the descriptor says {want} bytes, the content has {}",
                    if size > want { format!("more than {want}") } else { size.to_string() }
                )));
            }
        }
        if let Some(want) = expected.digest {
            if *want != digest {
                return Err(ImageError::BadContent(format!(
                    "blob content does not match its digest: expected {want}, got {digest}"
                )));
            }
        }
        let file = buffered.into_inner().map_err(|e| ImageError::io("writing blob", e.into_error()))?;
        file.sync_all().map_err(|e| ImageError::io("syncing blob", e))?;
        let path = self.store.path(&digest);
        if !path.exists() {
            fs::rename(&self.tmp, &path).map_err(|e| ImageError::io(format!("storing blob {digest}"), e))?;
            let dir = self.store.dir.join("sha256");
            store::sync_dir(&dir).map_err(|e| ImageError::io("syncing the blob directory", e))?;
        }
        Ok((digest, size))
    }
}

/// Reads through to `inner` and writes everything read into a blob.
pub(crate) struct Tee<'b, 'a, R> {
    pub(crate) inner: R,
    pub(crate) blob: &'b mut BlobWriter<'a>,
}

impl<R: Read> Read for Tee<'_, '_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        io::Write::write_all(self.blob, &buf[..n])?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn stores_by_digest_and_verifies() {
        let scratch = tempdir();
        let dir = scratch.path();
        let store = ContentStore::open(dir).unwrap();
        let data = b"hello blob".to_vec();
        let digest = Digest::of(&data);
        let (got, size) =
            store.write(&mut &data[..], Expected { digest: Some(&digest), size: Some(data.len() as u64) }).unwrap();
        assert_eq!((got.clone(), size), (digest.clone(), data.len() as u64));
        assert_eq!(store.read_small(&digest).unwrap(), data);
        assert_eq!(store.list().unwrap(), vec![digest.clone()]);

        // Wrong digest, wrong size: refused, nothing stored, no temp left.
        let other = Digest::of(b"something else");
        let e = store.write(&mut &data[..], Expected { digest: Some(&other), size: None }).unwrap_err();
        assert!(e.to_string().contains("does not match its digest"), "{e}");
        let e = store.write(&mut &data[..], Expected { digest: Some(&digest), size: Some(3) }).unwrap_err();
        assert!(e.to_string().contains("wrong size"), "{e}");
        let e = store.write(&mut &data[..], Expected { digest: Some(&digest), size: Some(100) }).unwrap_err();
        assert!(e.to_string().contains("wrong size"), "{e}");
        assert!(!store.contains(&other));
        let names: Vec<_> = fs::read_dir(dir.join("sha256")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "{names:?}");

        store.remove(&digest).unwrap();
        store.remove(&digest).unwrap();
        assert!(matches!(store.open_blob(&digest), Err(ImageError::BlobMissing(_))));
        fs::remove_dir_all(dir).unwrap();
    }
}
