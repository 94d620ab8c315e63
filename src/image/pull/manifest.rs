//! What a registry serves for a reference: an image index (manifest list),
//! resolved to this node's platform (one level: an index listing another
//! index for it is told apart from one without the platform), or an image
//! manifest (OCI or Docker schema 2), checked for what nidus can run.

use oci_spec::image::{ImageIndex, ImageManifest};

use super::super::import::{
    host_architecture, DOCKER_CONFIG, DOCKER_LIST, DOCKER_MANIFEST, LAYER_TYPES, OCI_CONFIG, OCI_INDEX, OCI_MANIFEST,
};
use super::super::Digest;

/// The media types a pull accepts, in the `Accept` header.
pub(crate) const ACCEPTED: &[&str] = &[OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST];

/// A fetched manifest or index.
pub(crate) enum Fetched {
    Index(Box<ImageIndex>),
    Manifest(Box<ImageManifest>),
}

/// One layer of a manifest.
#[derive(Debug, Clone)]
pub(crate) struct LayerDescriptor {
    pub(crate) digest: Digest,
    pub(crate) size: u64,
    pub(crate) media_type: String,
}

/// Reads `body` as what the registry says it is (`content_type`, else the
/// body's own `mediaType`).
pub(crate) fn parse(body: &[u8], content_type: Option<&str>) -> Result<Fetched, String> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let declared = value.get("mediaType").and_then(|m| m.as_str());
    let schema1 = [
        "application/vnd.docker.distribution.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v1+prettyjws",
    ];
    let media_type = declared.or(content_type).unwrap_or_default();
    if schema1.contains(&media_type) {
        return Err("Docker schema 1 manifests are not supported (deprecated; push the image again)".into());
    }
    match media_type {
        OCI_INDEX | DOCKER_LIST => index(body),
        OCI_MANIFEST | DOCKER_MANIFEST => manifest(body),
        // An OCI index or manifest need not name its media type: tell them by their fields.
        _ if declared.is_none() && value.get("manifests").is_some() => index(body),
        _ if declared.is_none() => manifest(body),
        other => Err(format!("unsupported manifest media type {other:?}")),
    }
}

fn index(body: &[u8]) -> Result<Fetched, String> {
    ImageIndex::from_reader(body).map(|i| Fetched::Index(Box::new(i))).map_err(|e| format!("invalid image index: {e}"))
}

fn manifest(body: &[u8]) -> Result<Fetched, String> {
    ImageManifest::from_reader(body)
        .map(|m| Fetched::Manifest(Box::new(m)))
        .map_err(|e| format!("invalid image manifest: {e}"))
}

/// The platform this node runs: `linux/<arch>[/<variant>]`.
pub(crate) fn node_platform() -> String {
    match node_variant() {
        Some(variant) => format!("linux/{}/{variant}", host_architecture()),
        None => format!("linux/{}", host_architecture()),
    }
}

fn node_variant() -> Option<&'static str> {
    match host_architecture() {
        "arm64" => Some("v8"),
        "arm" => Some("v7"),
        _ => None,
    }
}

/// What an index lists for this node.
#[derive(Debug, PartialEq)]
pub(crate) enum Choice {
    /// The image manifest for this node.
    Manifest(Digest),
    /// No manifest, but another index under this node's platform (which a
    /// pull does not follow: an index's entries are meant to be manifests).
    NestedIndex(Digest),
    None,
}

/// The manifest of `index` for this node: linux, this architecture, and
/// the variant when the index names one (arm64's `v8` also matches none).
pub(crate) fn choose(index: &ImageIndex) -> Choice {
    let mut nested = None;
    for d in index.manifests() {
        let Some(platform) = d.platform().as_ref() else { continue };
        let variant_ok = match (platform.variant().as_deref(), node_variant()) {
            (None | Some(""), _) => true,
            (Some(v), Some(node)) => v == node,
            (Some(_), None) => false,
        };
        let fits = platform.os().to_string() == "linux"
            && platform.architecture().to_string() == host_architecture()
            && variant_ok;
        let Some(digest) = fits.then(|| d.digest().to_string().parse::<Digest>().ok()).flatten() else { continue };
        match d.media_type().to_string().as_str() {
            OCI_MANIFEST | DOCKER_MANIFEST => return Choice::Manifest(digest),
            OCI_INDEX | DOCKER_LIST => nested = nested.or(Some(digest)),
            _ => {}
        }
    }
    nested.map_or(Choice::None, Choice::NestedIndex)
}

/// The platforms an index offers (for the error when none fits).
pub(crate) fn offered(index: &ImageIndex) -> Vec<String> {
    index
        .manifests()
        .iter()
        .filter_map(|d| d.platform().as_ref())
        .map(|p| match p.variant() {
            Some(v) if !v.is_empty() => format!("{}/{}/{v}", p.os(), p.architecture()),
            _ => format!("{}/{}", p.os(), p.architecture()),
        })
        .collect()
}

/// Config digest and size, and the layers, of an image manifest nidus can run.
pub(crate) fn image_parts(manifest: &ImageManifest) -> Result<((Digest, u64), Vec<LayerDescriptor>), String> {
    let config_type = manifest.config().media_type().to_string();
    if config_type != OCI_CONFIG && config_type != DOCKER_CONFIG {
        return Err(format!("the manifest is not a container image (config media type {config_type:?})"));
    }
    let config: Digest = manifest.config().digest().to_string().parse().map_err(|e| format!("config digest: {e}"))?;
    let mut layers = Vec::new();
    for layer in manifest.layers() {
        let media_type = layer.media_type().to_string();
        if !LAYER_TYPES.contains(&media_type.as_str()) {
            return Err(format!("unsupported layer media type {media_type:?}"));
        }
        let digest = layer.digest().to_string().parse().map_err(|e| format!("layer digest: {e}"))?;
        layers.push(LayerDescriptor { digest, size: layer.size(), media_type });
    }
    Ok(((config, manifest.config().size()), layers))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(entries: &[(&str, &str, &str)]) -> ImageIndex {
        let manifests: Vec<serde_json::Value> = entries
            .iter()
            .map(|(media_type, arch, seed)| {
                serde_json::json!({
                    "mediaType": media_type,
                    "digest": Digest::of(seed.as_bytes()).to_string(),
                    "size": 10,
                    "platform": {"architecture": arch, "os": "linux"},
                })
            })
            .collect();
        let body = serde_json::json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests});
        ImageIndex::from_reader(serde_json::to_vec(&body).unwrap().as_slice()).unwrap()
    }

    #[test]
    fn a_manifest_for_this_node_wins_over_a_nested_index_and_a_nested_index_is_told_apart() {
        let here = host_architecture();
        let d = |seed: &str| Digest::of(seed.as_bytes());
        let both =
            index(&[(OCI_INDEX, here, "nested"), (OCI_MANIFEST, "s390x", "other"), (DOCKER_MANIFEST, here, "m")]);
        assert_eq!(choose(&both), Choice::Manifest(d("m")));
        let nested = index(&[(OCI_MANIFEST, "s390x", "other"), (DOCKER_LIST, here, "nested")]);
        assert_eq!(choose(&nested), Choice::NestedIndex(d("nested")));
        let foreign = index(&[(OCI_MANIFEST, "s390x", "other")]);
        assert_eq!(choose(&foreign), Choice::None);
    }
}
