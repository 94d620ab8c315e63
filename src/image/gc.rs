//! What garbage collection deletes: blobs that neither an image nor a lease
//! (a pull's in flight) references, and unpacked layers that neither an
//! image nor a lease uses. Pure logic; the store
//! applies it under its locks.

use std::collections::HashSet;

use super::digest::Digest;
use super::index::Index;
use super::lease::Lease;

/// Blobs and layers (diff ids) to delete.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Garbage {
    pub(crate) blobs: Vec<Digest>,
    pub(crate) layers: Vec<Digest>,
}

/// Of the `blobs` and `layers` present, those nothing uses.
pub(crate) fn find_garbage(index: &Index, leases: &[Lease], blobs: &[Digest], layers: &[Digest]) -> Garbage {
    let mut used_blobs = HashSet::new();
    let mut used_layers = HashSet::new();
    for image in &index.images {
        used_blobs.insert(&image.id);
        used_blobs.insert(&image.manifest_digest);
        for layer in &image.layers {
            used_blobs.insert(&layer.digest);
            used_layers.insert(&layer.diff_id);
        }
    }
    used_layers.extend(leases.iter().flat_map(|l| &l.diff_ids));
    used_blobs.extend(leases.iter().flat_map(|l| &l.blobs));
    Garbage {
        blobs: blobs.iter().filter(|b| !used_blobs.contains(b)).cloned().collect(),
        layers: layers.iter().filter(|l| !used_layers.contains(l)).cloned().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::index::ImageRecord;
    use crate::image::{ImageConfig, ImageLayer};

    fn d(s: &str) -> Digest {
        Digest::of(s.as_bytes())
    }

    fn image(name: &str, layers: &[&str]) -> ImageRecord {
        ImageRecord {
            id: d(&format!("{name}-config")),
            manifest_digest: d(&format!("{name}-manifest")),
            manifest_size: 1,
            config_size: 1,
            repo_tags: vec![format!("docker.io/library/{name}:latest")],
            repo_digests: Vec::new(),
            layers: layers
                .iter()
                .map(|l| ImageLayer {
                    digest: d(&format!("{l}-blob")),
                    diff_id: d(l),
                    size: 1,
                    media_type: "application/vnd.oci.image.layer.v1.tar".into(),
                })
                .collect(),
            config: ImageConfig::default(),
            created: None,
            imported_at_ns: 0,
        }
    }

    #[test]
    fn keeps_what_images_and_leases_use() {
        let index = Index { images: vec![image("a", &["base", "a-top"])], ..Default::default() };
        let lease = Lease {
            mounted: Vec::new(),
            holder: "c1".into(),
            images: vec!["removed".into()],
            diff_ids: vec![d("base"), d("removed-top")],
            blobs: Vec::new(),
            process: None,
            created_at_ns: 0,
        };
        let blobs = vec![
            d("a-config"),
            d("a-manifest"),
            d("base-blob"),
            d("a-top-blob"),
            d("removed-config"),
            d("removed-top-blob"),
        ];
        let layers = vec![d("base"), d("a-top"), d("removed-top"), d("orphan")];
        let garbage = find_garbage(&index, std::slice::from_ref(&lease), &blobs, &layers);
        assert_eq!(garbage.blobs, vec![d("removed-config"), d("removed-top-blob")]);
        assert_eq!(garbage.layers, vec![d("orphan")]);
        // Without the lease the removed image's layer goes too.
        let garbage = find_garbage(&index, &[], &blobs, &layers);
        assert_eq!(garbage.layers, vec![d("removed-top"), d("orphan")]);
        // Without images, everything not leased goes.
        let garbage = find_garbage(&Index::default(), &[lease], &blobs, &layers);
        assert_eq!(garbage.blobs.len(), blobs.len());
        assert_eq!(garbage.layers, vec![d("a-top"), d("orphan")]);
        // A pull in flight keeps the blobs it leased as well.
        let pulling = Lease {
            mounted: Vec::new(),
            holder: "pull-1-0".into(),
            images: Vec::new(),
            diff_ids: vec![d("a-top")],
            blobs: vec![d("a-config"), d("a-top-blob")],
            process: None,
            created_at_ns: 0,
        };
        let garbage = find_garbage(&Index::default(), &[pulling], &blobs, &layers);
        assert!(!garbage.blobs.contains(&d("a-config")) && !garbage.blobs.contains(&d("a-top-blob")));
        assert_eq!(garbage.blobs.len(), blobs.len() - 2);
        assert_eq!(garbage.layers, vec![d("base"), d("removed-top"), d("orphan")]);
    }
}
