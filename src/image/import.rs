//! Reading image archives into the content store: an OCI image layout
//! directory, a tarball of one (`docker save` of docker ≥ 25 too), or a
//! docker-archive (`manifest.json` + config + layer tars), each possibly
//! gzip/zstd compressed. Every blob is verified against its digest on the way
//! in; what comes out is, per image, the manifest, config and layer blobs now stored.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use oci_spec::image::{Descriptor, ImageIndex, ImageManifest};
use serde::Deserialize;

use super::content::{ContentStore, Expected, MAX_JSON_BYTES};
use super::digest::Digest;
use super::unpack::{decompressed, Compression};
use super::ImageError;

pub(crate) const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub(crate) const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub(crate) const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub(crate) const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub(crate) const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub(crate) const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
const OCI_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
pub(crate) const LAYER_TYPES: &[&str] = &[
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.v1.tar+zstd",
    "application/vnd.oci.image.layer.nondistributable.v1.tar",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
    "application/vnd.docker.image.rootfs.diff.tar",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
];
/// The full name containerd and docker write into OCI layouts.
const NAME_ANNOTATION: &str = "io.containerd.image.name";
/// The OCI layout's name for a manifest: a full reference, or only a tag.
const REF_NAME_ANNOTATION: &str = "org.opencontainers.image.ref.name";
const MAX_LINK_HOPS: usize = 16;

/// One image of an archive, its blobs stored.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub(crate) manifest: Digest,
    pub(crate) manifest_size: u64,
    pub(crate) config: Digest,
    pub(crate) config_size: u64,
    pub(crate) layers: Vec<StoredLayer>,
    /// Names the archive gives the image (unparsed).
    pub(crate) names: Vec<String>,
    /// The manifest came with the archive (so `name@digest` means something
    /// to a registry); false for docker-archives, whose manifest nidus writes.
    pub(crate) registry_manifest: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct StoredLayer {
    pub(crate) digest: Digest,
    pub(crate) size: u64,
    pub(crate) media_type: String,
}

fn bad(why: impl Into<String>) -> ImageError {
    ImageError::BadContent(why.into())
}

/// Reads the archive at `path` into `content` and lists its images.
pub(crate) fn read_archive(path: &Path, content: &ContentStore) -> Result<Vec<Candidate>, ImageError> {
    let meta = std::fs::metadata(path).map_err(|e| ImageError::io(format!("reading {}", path.display()), e))?;
    let source = if meta.is_dir() {
        Source::Dir(path.to_path_buf())
    } else {
        let file = File::open(path).map_err(|e| ImageError::io(format!("opening {}", path.display()), e))?;
        Source::Tar(TarContents::read(file, content)?)
    };
    if let Some(index) = source.metadata("index.json")? {
        if let Some(layout) = source.metadata("oci-layout")? {
            let layout: serde_json::Value =
                serde_json::from_slice(&layout).map_err(|e| bad(format!("oci-layout is not JSON: {e}")))?;
            if layout["imageLayoutVersion"] != "1.0.0" {
                return Err(bad(format!("unsupported OCI layout version {}", layout["imageLayoutVersion"])));
            }
        }
        return read_oci(&source, &index, content);
    }
    if let Some(manifest) = source.metadata("manifest.json")? {
        return read_docker(&source, &manifest, content);
    }
    Err(bad(format!(
        "{} is neither an OCI image layout (index.json) nor a docker archive (manifest.json)",
        path.display()
    )))
}

/// Where the archive's files are.
enum Source {
    Dir(PathBuf),
    Tar(TarContents),
}

/// What streaming a tarball left: its small metadata files in memory, every
/// other file in the content store, and its links.
#[derive(Default)]
struct TarContents {
    metadata: HashMap<String, Vec<u8>>,
    stored: HashMap<String, (Digest, u64)>,
    links: HashMap<String, String>,
}

const METADATA_FILES: &[&str] = &["index.json", "oci-layout", "manifest.json", "repositories"];

impl TarContents {
    fn read(file: File, content: &ContentStore) -> Result<Self, ImageError> {
        let read_err = |e: io::Error| bad(format!("cannot read the archive: {e}"));
        let mut archive = tar::Archive::new(decompressed(file).map_err(read_err)?);
        let mut found = TarContents::default();
        for entry in archive.entries().map_err(read_err)? {
            let mut entry = entry.map_err(read_err)?;
            let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            let Some(path) = normalise(&raw) else {
                return Err(bad(format!("archive entry {raw:?} leaves the archive")));
            };
            match entry.header().entry_type() {
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    if METADATA_FILES.contains(&path.as_str()) {
                        let mut data = Vec::new();
                        (&mut entry).take(MAX_JSON_BYTES + 1).read_to_end(&mut data).map_err(read_err)?;
                        if data.len() as u64 > MAX_JSON_BYTES {
                            return Err(bad(format!("{path} is larger than {MAX_JSON_BYTES} bytes")));
                        }
                        found.metadata.insert(path, data);
                        continue;
                    }
                    let claimed = path.strip_prefix("blobs/sha256/").map(Digest::from_hex).transpose();
                    let claimed = claimed.map_err(|e| bad(format!("archive entry {path}: {e}")))?;
                    let expected = Expected { digest: claimed.as_ref(), size: None };
                    let stored = content
                        .write(&mut entry, expected)
                        .map_err(|e| with_context(e, &format!("archive entry {path}")))?;
                    found.stored.insert(path, stored);
                }
                tar::EntryType::Symlink | tar::EntryType::Link => {
                    let target = entry.link_name_bytes().map(|t| String::from_utf8_lossy(&t).into_owned());
                    let target = target.unwrap_or_default();
                    let base = if entry.header().entry_type() == tar::EntryType::Symlink {
                        Path::new(&path).parent().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default()
                    } else {
                        String::new()
                    };
                    if let Some(resolved) = normalise(&format!("{base}/{target}")) {
                        found.links.insert(path, resolved);
                    }
                }
                _ => {}
            }
        }
        Ok(found)
    }

    fn lookup(&self, path: &str) -> Option<&(Digest, u64)> {
        let mut path = path.to_string();
        for _ in 0..MAX_LINK_HOPS {
            if let Some(found) = self.stored.get(&path) {
                return Some(found);
            }
            path = self.links.get(&path)?.clone();
        }
        None
    }
}

fn with_context(e: ImageError, context: &str) -> ImageError {
    match e {
        ImageError::BadContent(why) => bad(format!("{context}: {why}")),
        other => other,
    }
}

/// A relative archive path without `.`/empty components; `None` if it has `..`
/// or goes above the archive root.
fn normalise(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for component in path.split('/') {
        match component {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    Some(parts.join("/"))
}

impl Source {
    fn metadata(&self, name: &str) -> Result<Option<Vec<u8>>, ImageError> {
        match self {
            Source::Tar(t) => Ok(t.metadata.get(name).cloned()),
            Source::Dir(dir) => {
                let path = dir.join(name);
                match std::fs::File::open(&path) {
                    Ok(f) => {
                        let mut data = Vec::new();
                        f.take(MAX_JSON_BYTES + 1)
                            .read_to_end(&mut data)
                            .map_err(|e| ImageError::io(format!("reading {}", path.display()), e))?;
                        if data.len() as u64 > MAX_JSON_BYTES {
                            return Err(bad(format!("{} is larger than {MAX_JSON_BYTES} bytes", path.display())));
                        }
                        Ok(Some(data))
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(ImageError::io(format!("reading {}", path.display()), e)),
                }
            }
        }
    }

    /// Makes sure the blob a descriptor names is stored, verified.
    fn descriptor_blob(&self, content: &ContentStore, descriptor: &Descriptor) -> Result<Digest, ImageError> {
        let digest: Digest = descriptor.digest().to_string().parse().map_err(|e| bad(format!("descriptor: {e}")))?;
        let size = descriptor.size();
        if content.contains(&digest) {
            let stored = content.size(&digest)?;
            if stored != size {
                return Err(bad(format!("blob {digest} has {stored} bytes, but its descriptor says {size}")));
            }
            return Ok(digest);
        }
        match self {
            Source::Tar(_) => Err(bad(format!("the archive lacks blob {digest}"))),
            Source::Dir(dir) => {
                let path = dir.join("blobs/sha256").join(digest.hex());
                let mut file = File::open(&path).map_err(|e| match e.kind() {
                    io::ErrorKind::NotFound => bad(format!("the layout lacks blob {digest} ({})", path.display())),
                    _ => ImageError::io(format!("opening {}", path.display()), e),
                })?;
                content.write(&mut file, Expected { digest: Some(&digest), size: Some(size) })?;
                Ok(digest)
            }
        }
    }

    /// Stores the file at `path` (a docker-archive member) and returns its digest and size.
    fn file_blob(&self, content: &ContentStore, path: &str) -> Result<(Digest, u64), ImageError> {
        let relative = Path::new(path);
        if relative.is_absolute() || relative.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(bad(format!("manifest.json names {path:?}, which is outside the archive")));
        }
        match self {
            Source::Tar(t) => {
                let key = normalise(path).unwrap_or_default();
                t.lookup(&key).cloned().ok_or_else(|| bad(format!("the archive lacks {path}")))
            }
            Source::Dir(dir) => {
                let full = dir.join(relative);
                let mut file =
                    File::open(&full).map_err(|e| ImageError::io(format!("opening {}", full.display()), e))?;
                content.write(&mut file, Expected::default())
            }
        }
    }
}

fn parse_json<T: serde::de::DeserializeOwned>(what: &str, data: &[u8]) -> Result<T, ImageError> {
    serde_json::from_slice(data).map_err(|e| bad(format!("{what} is not valid: {e}")))
}

/// The architecture name images use for this machine (Go's GOARCH).
pub(crate) fn host_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

fn platform_matches(descriptor: &Descriptor) -> bool {
    descriptor
        .platform()
        .as_ref()
        .is_none_or(|p| p.os().to_string() == "linux" && p.architecture().to_string() == host_architecture())
}

fn names_of(descriptor: &Descriptor) -> Vec<String> {
    let Some(annotations) = descriptor.annotations() else { return Vec::new() };
    if let Some(name) = annotations.get(NAME_ANNOTATION) {
        return vec![name.clone()];
    }
    match annotations.get(REF_NAME_ANNOTATION) {
        // A bare tag ("latest") names no repository; only `--name` can.
        Some(name) if name.contains(['/', ':']) => vec![name.clone()],
        Some(name) => {
            tracing::info!(ref_name = name.as_str(), "OCI ref.name is only a tag; give the image a name with --name");
            Vec::new()
        }
        None => Vec::new(),
    }
}

fn read_oci(source: &Source, index: &[u8], content: &ContentStore) -> Result<Vec<Candidate>, ImageError> {
    let index: ImageIndex = ImageIndex::from_reader(index).map_err(|e| bad(format!("index.json is not valid: {e}")))?;
    let mut images = Vec::new();
    for descriptor in index.manifests() {
        if !platform_matches(descriptor) {
            continue;
        }
        let names = names_of(descriptor);
        match descriptor.media_type().to_string().as_str() {
            OCI_MANIFEST | DOCKER_MANIFEST => {
                images.extend(read_manifest(source, content, descriptor, names)?);
            }
            OCI_INDEX | DOCKER_LIST => {
                let digest = source.descriptor_blob(content, descriptor)?;
                let nested = ImageIndex::from_reader(&content.read_small(&digest)?[..])
                    .map_err(|e| bad(format!("image index {digest} is not valid: {e}")))?;
                let chosen = nested.manifests().iter().find(|d| {
                    platform_matches(d)
                        && [OCI_MANIFEST, DOCKER_MANIFEST].contains(&d.media_type().to_string().as_str())
                });
                match chosen {
                    Some(manifest) => images.extend(read_manifest(source, content, manifest, names)?),
                    None => {
                        return Err(bad(format!("image index {digest} has no image for linux/{}", host_architecture())))
                    }
                }
            }
            other => tracing::info!(media_type = other, "skipping an index entry that is not an image"),
        }
    }
    if images.is_empty() {
        return Err(bad(format!("index.json lists no image for linux/{}", host_architecture())));
    }
    Ok(images)
}

fn read_manifest(
    source: &Source,
    content: &ContentStore,
    descriptor: &Descriptor,
    names: Vec<String>,
) -> Result<Option<Candidate>, ImageError> {
    let manifest_digest = source.descriptor_blob(content, descriptor)?;
    let manifest = ImageManifest::from_reader(&content.read_small(&manifest_digest)?[..])
        .map_err(|e| bad(format!("manifest {manifest_digest} is not valid: {e}")))?;
    let config_type = manifest.config().media_type().to_string();
    if config_type != OCI_CONFIG && config_type != DOCKER_CONFIG {
        tracing::info!(manifest = %manifest_digest, config_type, "skipping a manifest that is not a container image");
        return Ok(None);
    }
    let config = source.descriptor_blob(content, manifest.config())?;
    let mut layers = Vec::new();
    for layer in manifest.layers() {
        let media_type = layer.media_type().to_string();
        if !LAYER_TYPES.contains(&media_type.as_str()) {
            return Err(bad(format!("manifest {manifest_digest}: unsupported layer media type {media_type}")));
        }
        let digest = source.descriptor_blob(content, layer)?;
        layers.push(StoredLayer { digest, size: layer.size(), media_type });
    }
    Ok(Some(Candidate {
        manifest: manifest_digest,
        manifest_size: descriptor.size(),
        config: config.clone(),
        config_size: manifest.config().size(),
        layers,
        names,
        registry_manifest: true,
    }))
}

/// One image of a docker-archive's manifest.json.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerArchiveEntry {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

fn read_docker(source: &Source, manifest: &[u8], content: &ContentStore) -> Result<Vec<Candidate>, ImageError> {
    let entries: Vec<DockerArchiveEntry> = parse_json("manifest.json", manifest)?;
    if entries.is_empty() {
        return Err(bad("manifest.json lists no image"));
    }
    let mut images = Vec::new();
    for entry in entries {
        let (config, config_size) = source.file_blob(content, &entry.config)?;
        let mut layers = Vec::new();
        for path in &entry.layers {
            let (digest, size) = source.file_blob(content, path)?;
            let mut head = [0u8; 4];
            let n = content
                .open_blob(&digest)?
                .read(&mut head)
                .map_err(|e| ImageError::io(format!("reading blob {digest}"), e))?;
            let media_type = match Compression::sniff(&head[..n]) {
                Compression::None => OCI_LAYER.to_string(),
                Compression::Gzip => format!("{OCI_LAYER}+gzip"),
                Compression::Zstd => format!("{OCI_LAYER}+zstd"),
            };
            layers.push(StoredLayer { digest, size, media_type });
        }
        // A docker-archive has no manifest; write the OCI one a registry would hold.
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": { "mediaType": OCI_CONFIG, "digest": config.to_string(), "size": config_size },
            "layers": layers.iter().map(|l| serde_json::json!({
                "mediaType": l.media_type, "digest": l.digest.to_string(), "size": l.size,
            })).collect::<Vec<_>>(),
        });
        let manifest_bytes = serde_json::to_vec(&manifest).map_err(|e| bad(e.to_string()))?;
        let manifest_digest = content.write_bytes(&manifest_bytes)?;
        images.push(Candidate {
            manifest: manifest_digest,
            manifest_size: manifest_bytes.len() as u64,
            config,
            config_size,
            layers,
            names: entry.repo_tags.unwrap_or_default(),
            registry_manifest: false,
        });
    }
    Ok(images)
}

#[cfg(test)]
mod tests {
    use super::normalise;

    #[test]
    fn archive_paths_stay_inside() {
        assert_eq!(normalise("./blobs//sha256/ab").as_deref(), Some("blobs/sha256/ab"));
        assert_eq!(normalise("abc/../def/layer.tar").as_deref(), Some("def/layer.tar"));
        assert_eq!(normalise("../x"), None);
        assert_eq!(normalise("a/../../x"), None);
    }
}
