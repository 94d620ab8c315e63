//! The pod checkpoint archive (CheckpointPod / RestorePod): an uncompressed
//! tar of `pod.json` (this format's name and version, the pod's config and
//! network facts, and each container's name, restart count, CRI config and
//! entry, in the order they are restored), then `containers/<n>-<name>.tar`,
//! each a container checkpoint archive as CheckpointContainer writes it
//! (`checkpointctl show` reads one once taken out). Written whole or not at
//! all through [`Location`]; read back with every entry checked against the
//! manifest before a byte of it is unpacked.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::api::{ContainerConfig, PodSandboxConfig};
use crate::bounded_file::{self, FinalLink};

use super::location::{Location, LocationError};

pub(crate) const MANIFEST: &str = "pod.json";
pub(crate) const CONTAINERS_DIR: &str = "containers";
/// What `pod.json` says it is.
pub(crate) const FORMAT: &str = "nidus-pod-checkpoint";
/// The newest version this nidus writes and reads.
pub(crate) const VERSION: u32 = 1;
/// Most bytes of `pod.json`.
pub(crate) const MAX_MANIFEST: u64 = 4 << 20;
/// Most containers of one pod archive.
pub(crate) const MAX_CONTAINERS: usize = 256;

#[derive(Debug, thiserror::Error)]
pub(crate) enum PodArchiveError {
    #[error(transparent)]
    Location(#[from] LocationError),
    #[error(transparent)]
    Read(#[from] bounded_file::BoundedReadError),
    #[error("{0}")]
    Invalid(String),
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
}

fn invalid(why: impl Into<String>) -> PodArchiveError {
    PodArchiveError::Invalid(why.into())
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> PodArchiveError {
    let what = what.into();
    move |source| PodArchiveError::Io { what, source }
}

/// `pod.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PodManifest {
    pub(crate) format: String,
    pub(crate) version: u32,
    /// RFC 3339.
    pub(crate) checkpointed_time: String,
    /// How consistent the containers' dumps are with each other (see
    /// docs/design.md): each container is frozen during its own dump.
    pub(crate) consistency: String,
    pub(crate) pod: PodFacts,
    pub(crate) containers: Vec<ContainerEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PodFacts {
    /// The sandbox's id on the node it was checkpointed on.
    pub(crate) id: String,
    /// The PodSandboxConfig kubelet created it with.
    pub(crate) config: PodSandboxConfig,
    pub(crate) runtime_handler: String,
    /// Its addresses then (a restored pod gets new ones from its network).
    pub(crate) ips: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ContainerEntry {
    pub(crate) name: String,
    /// Its restart count (the CRI metadata's attempt).
    pub(crate) attempt: u32,
    /// Its id on the node it was checkpointed on.
    pub(crate) id: String,
    /// Its entry in the archive: `containers/<n>-<name>.tar`.
    pub(crate) archive: String,
    /// The CRI config it was created with.
    pub(crate) config: ContainerConfig,
}

/// The archive entry of the `index`th container named `name`.
pub(crate) fn entry_name(index: usize, name: &str) -> String {
    format!("{CONTAINERS_DIR}/{index}-{name}.tar")
}

/// Writes the archive at `location`: the manifest, then each container
/// archive `(entry, file)`; nothing is at `location` unless all of it is.
pub(crate) fn write(
    location: &Location,
    manifest: &PodManifest,
    containers: &[(String, PathBuf)],
) -> Result<u64, PodArchiveError> {
    let pending = location.create_pending()?;
    let file = match pending.file.try_clone() {
        Ok(file) => file,
        Err(e) => {
            location.discard(pending);
            return Err(io_err("the pod archive")(e));
        }
    };
    let written = (|| -> Result<u64, PodArchiveError> {
        let mut builder = tar::Builder::new(file);
        let json = serde_json::to_vec_pretty(manifest).map_err(|e| invalid(format!("{MANIFEST}: {e}")))?;
        let mut header = tar::Header::new_gnu();
        header.set_size(json.len() as u64);
        header.set_mode(0o600);
        header.set_entry_type(tar::EntryType::Regular);
        builder.append_data(&mut header, MANIFEST, json.as_slice()).map_err(io_err(MANIFEST))?;
        for (entry, path) in containers {
            let mut file = File::open(path).map_err(io_err(format!("{}", path.display())))?;
            builder.append_file(entry, &mut file).map_err(io_err(entry.clone()))?;
        }
        let file = builder.into_inner().map_err(io_err("the pod archive"))?;
        Ok(file.metadata().map_err(io_err("the pod archive"))?.len())
    })();
    match written {
        Ok(bytes) => {
            location.commit(pending)?;
            Ok(bytes)
        }
        Err(e) => {
            location.discard(pending);
            Err(e)
        }
    }
}

/// Reads the archive at `path` (a regular file of at most `limit` bytes,
/// never through a final symbolic link): the manifest, checked, and each
/// container archive unpacked into `into` (made 0700), in manifest order.
/// Every entry must be the manifest, first, or a container archive it
/// names, each once.
pub(crate) fn read(path: &Path, limit: u64, into: &Path) -> Result<(PodManifest, Vec<PathBuf>), PodArchiveError> {
    let (file, _) = bounded_file::open_regular(path, limit, FinalLink::Refuse)?;
    let mut archive = tar::Archive::new(file);
    let mut entries = archive.entries().map_err(io_err("reading the archive"))?;
    let mut first =
        entries.next().ok_or_else(|| invalid("the archive is empty"))?.map_err(io_err("reading the archive"))?;
    let name = entry_path(&first)?;
    if name != MANIFEST {
        return Err(invalid(format!("its first entry is {}, not {MANIFEST}", crate::quote::quote(&name))));
    }
    if first.header().size().unwrap_or(u64::MAX) > MAX_MANIFEST {
        return Err(invalid(format!("{MANIFEST} is over {MAX_MANIFEST} bytes")));
    }
    let mut text = Vec::new();
    (&mut first).take(MAX_MANIFEST + 1).read_to_end(&mut text).map_err(io_err(MANIFEST))?;
    let manifest: PodManifest =
        serde_json::from_slice(&text).map_err(|e| invalid(format!("{MANIFEST} is not a pod checkpoint's: {e}")))?;
    check(&manifest)?;
    fs::create_dir_all(into).map_err(io_err(format!("creating {}", into.display())))?;
    let mut wanted: BTreeMap<&str, usize> =
        manifest.containers.iter().enumerate().map(|(i, c)| (c.archive.as_str(), i)).collect();
    let mut unpacked: Vec<Option<PathBuf>> = vec![None; manifest.containers.len()];
    for entry in entries {
        let mut entry = entry.map_err(io_err("reading the archive"))?;
        let name = entry_path(&entry)?;
        let Some(index) = wanted.remove(name.as_str()) else {
            return Err(invalid(format!(
                "entry {} is not one pod.json names (or comes twice)",
                crate::quote::quote(&name)
            )));
        };
        if entry.header().entry_type() != tar::EntryType::Regular {
            return Err(invalid(format!("entry {} is not a regular file", crate::quote::quote(&name))));
        }
        let target = into.join(format!("{index}.tar"));
        let mut out = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode_0600()
            .open(&target)
            .map_err(io_err(format!("creating {}", target.display())))?;
        let size = entry.header().size().map_err(io_err(format!("the size of {name}")))?;
        let copied = io::copy(&mut entry, &mut out).map_err(io_err(format!("unpacking {name}")))?;
        if copied != size {
            return Err(invalid(format!(
                "entry {} is cut short ({copied} of {size} bytes)",
                crate::quote::quote(&name)
            )));
        }
        unpacked[index] = Some(target);
    }
    if let Some(missing) = wanted.keys().next() {
        return Err(invalid(format!("entry {} that pod.json names is missing", crate::quote::quote(missing))));
    }
    Ok((manifest, unpacked.into_iter().flatten().collect()))
}

/// The manifest's own rules: this format, a version this nidus reads, and
/// container entries named as it writes them.
fn check(manifest: &PodManifest) -> Result<(), PodArchiveError> {
    if manifest.format != FORMAT {
        return Err(invalid(format!(
            "{MANIFEST} is of format {}, not {FORMAT}",
            crate::quote::quote(&manifest.format)
        )));
    }
    if manifest.version > VERSION {
        return Err(invalid(format!(
            "it is of format version {}, newer than this nidus reads ({VERSION})",
            manifest.version
        )));
    }
    if manifest.containers.is_empty() || manifest.containers.len() > MAX_CONTAINERS {
        return Err(invalid(format!(
            "it names {} containers (1 to {MAX_CONTAINERS} are allowed)",
            manifest.containers.len()
        )));
    }
    for (i, container) in manifest.containers.iter().enumerate() {
        if container.archive != entry_name(i, &container.name) || container.name.contains('/') {
            return Err(invalid(format!(
                "container {i}'s entry is {}, not {}",
                crate::quote::quote(&container.archive),
                crate::quote::quote(&entry_name(i, &container.name))
            )));
        }
    }
    Ok(())
}

/// An entry's path as text, refused unless it is plain (no `..`, not absolute).
fn entry_path<R: Read>(entry: &tar::Entry<R>) -> Result<String, PodArchiveError> {
    let path = entry.path().map_err(io_err("an entry's name"))?;
    let text = path.to_string_lossy().to_string();
    if path.is_absolute() || path.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
        return Err(invalid(format!("entry {} leads outside the archive", crate::quote::quote(&text))));
    }
    Ok(text)
}

trait Mode0600 {
    fn mode_0600(&mut self) -> &mut Self;
}

impl Mode0600 for fs::OpenOptions {
    fn mode_0600(&mut self) -> &mut Self {
        std::os::unix::fs::OpenOptionsExt::mode(self, 0o600)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(containers: &[&str]) -> PodManifest {
        PodManifest {
            format: FORMAT.into(),
            version: VERSION,
            checkpointed_time: "2026-11-28T00:00:00Z".into(),
            consistency: "per-container".into(),
            pod: PodFacts {
                id: "p".into(),
                config: PodSandboxConfig::default(),
                runtime_handler: String::new(),
                ips: vec![],
            },
            containers: containers
                .iter()
                .enumerate()
                .map(|(i, name)| ContainerEntry {
                    name: name.to_string(),
                    attempt: 0,
                    id: format!("c{i}"),
                    archive: entry_name(i, name),
                    config: ContainerConfig::default(),
                })
                .collect(),
        }
    }

    /// A tar of (name, bytes) entries, as a hand-made archive would be.
    fn tar_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, data) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o600);
            header.set_entry_type(tar::EntryType::Regular);
            // Written raw so that names the builder would refuse ("..") get in.
            let bytes = name.as_bytes();
            header.as_old_mut().name[..bytes.len()].copy_from_slice(bytes);
            header.set_cksum();
            builder.append(&header, *data).unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn read_bytes(bytes: &[u8]) -> Result<(PodManifest, Vec<PathBuf>), PodArchiveError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pod.tar");
        fs::write(&path, bytes).unwrap();
        read(&path, 1 << 30, &dir.path().join("out"))
    }

    #[test]
    fn an_archive_written_is_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        fs::write(&a, b"first").unwrap();
        fs::write(&b, b"second").unwrap();
        let location = Location::open(&dir.path().join("out/pod.tar")).unwrap();
        let m = manifest(&["web", "counter"]);
        write(&location, &m, &[(entry_name(0, "web"), a), (entry_name(1, "counter"), b)]).unwrap();
        let (back, files) = read(&dir.path().join("out/pod.tar"), 1 << 20, &dir.path().join("un")).unwrap();
        assert_eq!(back.containers.len(), 2);
        assert_eq!(fs::read(&files[0]).unwrap(), b"first");
        assert_eq!(fs::read(&files[1]).unwrap(), b"second");
    }

    #[test]
    fn hostile_archives_are_refused() {
        let good = serde_json::to_vec(&manifest(&["c"])).unwrap();
        let mut newer = manifest(&["c"]);
        newer.version = VERSION + 1;
        let newer = serde_json::to_vec(&newer).unwrap();
        let mut escaping = manifest(&["c"]);
        escaping.containers[0].archive = "../../etc/c.tar".into();
        let escaping = serde_json::to_vec(&escaping).unwrap();
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("empty", Vec::new(), "empty"),
            ("not a tar", b"hello".repeat(200), ""),
            ("no manifest first", tar_of(&[("containers/0-c.tar", b"x"), ("pod.json", &good)]), "first entry"),
            ("garbage manifest", tar_of(&[("pod.json", b"{")]), "not a pod checkpoint's"),
            ("newer", tar_of(&[("pod.json", &newer), ("containers/0-c.tar", b"x")]), "newer"),
            ("escaping entry", tar_of(&[("pod.json", &good), ("../x", b"x")]), "leads outside"),
            ("manifest names an escape", tar_of(&[("pod.json", &escaping)]), "container 0's entry is"),
            ("unknown entry", tar_of(&[("pod.json", &good), ("containers/9-x.tar", b"x")]), "not one pod.json names"),
            (
                "twice",
                tar_of(&[("pod.json", &good), ("containers/0-c.tar", b"x"), ("containers/0-c.tar", b"y")]),
                "twice",
            ),
            ("missing", tar_of(&[("pod.json", &good)]), "is missing"),
        ];
        for (what, bytes, says) in cases {
            let err = read_bytes(&bytes).expect_err(what).to_string();
            assert!(err.contains(says), "{what}: {err}");
        }
        // Truncated: the container's bytes cut short.
        let whole = tar_of(&[("pod.json", &good), ("containers/0-c.tar", &[7u8; 4096])]);
        assert!(read_bytes(&whole[..whole.len() - 3000]).is_err(), "truncated");
        assert!(read_bytes(&whole).is_ok());
    }
}
