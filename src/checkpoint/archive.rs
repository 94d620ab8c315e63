//! The checkpoint archive's layout (the one `checkpointctl` and CRI-O use):
//! `config.dump` (who the container was, and what nidus needs to restore it),
//! `spec.dump` (its OCI spec), `checkpoint/` (CRIU's images), `dump.log` and
//! `stats-dump` (CRIU's log and timings), `rootfs-diff.tar`, `deleted.files`
//! and `container.log`; writing it from a staging directory and unpacking it.

use crate::bounded_file::{self, FinalLink};
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

pub(crate) const CONFIG_DUMP: &str = "config.dump";
pub(crate) const SPEC_DUMP: &str = "spec.dump";
pub(crate) const IMAGES_DIR: &str = "checkpoint";
pub(crate) const ROOTFS_DIFF: &str = "rootfs-diff.tar";
pub(crate) const DELETED_FILES: &str = "deleted.files";
pub(crate) const CONTAINER_LOG: &str = "container.log";
pub(crate) const DUMP_LOG: &str = "dump.log";
pub(crate) const STATS_DUMP: &str = "stats-dump";

/// The archive's entries, in the order they are written.
pub(crate) const ENTRIES: &[&str] =
    &[CONFIG_DUMP, SPEC_DUMP, IMAGES_DIR, DUMP_LOG, STATS_DUMP, ROOTFS_DIFF, DELETED_FILES, CONTAINER_LOG];

/// `config.dump`: the fields checkpointctl shows (its names), and under
/// `nidus` what a restore needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigDump {
    pub id: String,
    pub(crate) name: String,
    /// The image as CreateContainer named it.
    pub(crate) rootfs_image: String,
    /// The image id (`sha256:…`).
    pub(crate) rootfs_image_ref: String,
    pub(crate) rootfs_image_name: String,
    #[serde(rename = "runtime")]
    pub(crate) oci_runtime: String,
    /// RFC 3339.
    pub(crate) created_time: String,
    #[serde(rename = "checkpointedTime")]
    pub(crate) checkpointed_at: String,
    pub(crate) nidus: RestoreFacts,
}

/// What restore needs besides CRIU's images.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RestoreFacts {
    /// The container's CRI config at create.
    pub(crate) config: crate::api::ContainerConfig,
    /// CRIU's names of the pipes behind the init's stdout and stderr
    /// (`pipe:[INODE]`): handed new pipes at restore (`--inherit-fd`).
    pub(crate) stdout_pipe: String,
    pub(crate) stderr_pipe: String,
    /// Destination → `--external` key of every bind mount (the pod's files,
    /// /dev/shm, volumes), re-bound from the new sandbox's sources.
    pub(crate) external_mounts: BTreeMap<String, String>,
    /// The CRIU version that dumped.
    pub(crate) criu_version: String,
    /// How long the dump took and how big its images are.
    pub(crate) dump_ms: u64,
    pub(crate) images_bytes: u64,
}

/// Writes the staging directory's entries as a tar to `out`.
pub(crate) fn write(staging: &Path, out: &mut fs::File) -> io::Result<()> {
    let mut builder = tar::Builder::new(io::BufWriter::new(out));
    builder.follow_symlinks(false);
    for name in ENTRIES {
        let path = staging.join(name);
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => builder.append_dir_all(name, &path)?,
            Ok(_) => builder.append_path_with_name(&path, name)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    builder.into_inner()?.flush()
}

/// Unpacks an archive into `dest` (entries cannot escape it).
/// `archive` must be a regular file of at most `limit` bytes (opened without
/// blocking: a FIFO or device is refused, never waited on).
pub fn unpack(archive: &Path, dest: &Path, limit: u64) -> io::Result<()> {
    let (file, _) = bounded_file::open_regular(archive, limit, FinalLink::Follow).map_err(io::Error::other)?;
    let mut archive = tar::Archive::new(io::BufReader::new(file));
    archive.set_preserve_permissions(true);
    archive.unpack(dest)
}

/// Largest `config.dump` read.
pub(crate) const MAX_CONFIG_DUMP: u64 = 16 << 20;

/// Reads `config.dump` out of an archive (a regular file of at most `limit`
/// bytes) without unpacking the rest.
pub fn read_config_dump(path: &Path, limit: u64) -> Result<ConfigDump, String> {
    use std::io::Read;
    let (file, _) = bounded_file::open_regular(path, limit, FinalLink::Follow).map_err(|e| e.to_string())?;
    let mut tar = tar::Archive::new(io::BufReader::new(file));
    for entry in tar.entries().map_err(|e| e.to_string())? {
        let entry = entry.map_err(|e| e.to_string())?;
        if entry.path().map(|p| p == Path::new(CONFIG_DUMP)).unwrap_or(false) {
            let mut text = Vec::new();
            entry.take(MAX_CONFIG_DUMP).read_to_end(&mut text).map_err(|e| e.to_string())?;
            return serde_json::from_slice(&text).map_err(|e| format!("{CONFIG_DUMP} is not nidus's: {e}"));
        }
    }
    Err(format!("no {CONFIG_DUMP} in it: not a checkpoint archive"))
}

/// Bytes under a directory.
pub(crate) fn size_of(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => size_of(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Seconds since the epoch as RFC 3339 UTC (`2024-03-04T12:20:30Z`).
pub(crate) fn rfc3339(unix_secs: i64) -> String {
    let days = unix_secs.div_euclid(86_400);
    let secs = unix_secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs % 3600 / 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_709_554_830), "2024-03-04T12:20:30Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }
}
