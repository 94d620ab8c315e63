//! The images both runtimes run, built on this machine without network:
//! busybox from Debian's dynamic busybox (`scripts/busybox-image`, the same
//! builder `make run` uses) as an OCI layout and an OCI archive, and the
//! sandbox image containerd needs: the static pause program of
//! `bench/pause/pause.c` packed into an OCI archive.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

use crate::host;

pub const BUSYBOX: &str = "docker.io/library/busybox:latest";
pub const PAUSE: &str = "localhost/nidus-bench/pause:1";

const PAUSE_SOURCE: &str = include_str!("../pause/pause.c");
const BUSYBOX_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/busybox-image");

/// An image as an OCI layout directory and as an OCI archive of it.
#[derive(Debug, Clone)]
pub struct Image {
    pub reference: &'static str,
    pub layout: Option<PathBuf>,
    pub archive: PathBuf,
}

/// Busybox from the machine's dynamic busybox.
pub fn busybox(dir: &Path) -> Result<Image> {
    let layout = dir.join("busybox");
    host::run(BUSYBOX_SCRIPT, &[&layout.display().to_string()]).context("building the busybox image")?;
    let archive = dir.join("busybox.tar");
    let mut builder = tar::Builder::new(fs::File::create(&archive)?);
    builder.mode(tar::HeaderMode::Deterministic);
    builder.append_dir_all(".", &layout).context("archiving the busybox layout")?;
    builder.into_inner()?;
    Ok(Image { reference: BUSYBOX, layout: Some(layout), archive })
}

/// The pause image: a static program compiled here, alone in one layer.
pub fn pause(dir: &Path) -> Result<Image> {
    let source = dir.join("pause.c");
    let binary = dir.join("pause");
    fs::write(&source, PAUSE_SOURCE)?;
    let (src, bin) = (source.display().to_string(), binary.display().to_string());
    host::run("gcc", &["-static", "-Os", "-s", "-o", &bin, &src])
        .context("compiling the pause program (gcc -static)")?;
    let mut layer = tar::Builder::new(Vec::new());
    let data = fs::read(&binary)?;
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(0o755);
    header.set_size(data.len() as u64);
    header.set_mtime(1_700_000_000);
    layer.append_data(&mut header, "pause", &data[..])?;
    let layer = layer.into_inner()?;
    let config = serde_json::json!({
        "architecture": oci_arch(),
        "os": "linux",
        "config": {"Entrypoint": ["/pause"]},
        "rootfs": {"type": "layers", "diff_ids": [sha256(&layer)]},
    });
    let archive = dir.join("pause.tar");
    write_oci_archive(&archive, PAUSE, &layer, &serde_json::to_vec(&config)?)?;
    Ok(Image { reference: PAUSE, layout: None, archive })
}

/// An OCI archive of one image with one uncompressed layer.
fn write_oci_archive(path: &Path, name: &str, layer: &[u8], config: &[u8]) -> Result<()> {
    let mut blobs: Vec<(String, Vec<u8>)> = Vec::new();
    let mut add = |data: Vec<u8>| {
        let digest = sha256(&data);
        let descriptor = serde_json::json!({"digest": digest, "size": data.len()});
        blobs.push((digest, data));
        descriptor
    };
    let layer_desc = add(layer.to_vec());
    let config_desc = add(config.to_vec());
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": with_media_type(config_desc, "application/vnd.oci.image.config.v1+json"),
        "layers": [with_media_type(layer_desc, "application/vnd.oci.image.layer.v1.tar")],
    });
    let mut manifest_desc =
        with_media_type(add(serde_json::to_vec(&manifest)?), "application/vnd.oci.image.manifest.v1+json");
    manifest_desc["annotations"] = serde_json::json!({"io.containerd.image.name": name});
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [manifest_desc]});

    let mut archive = tar::Builder::new(fs::File::create(path)?);
    let mut file = |name: &str, data: &[u8]| -> Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o644);
        header.set_size(data.len() as u64);
        header.set_mtime(1_700_000_000);
        archive.append_data(&mut header, name, data)?;
        Ok(())
    };
    file("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    file("index.json", &serde_json::to_vec(&index)?)?;
    for (digest, data) in &blobs {
        file(&format!("blobs/sha256/{}", digest.trim_start_matches("sha256:")), data)?;
    }
    archive.into_inner()?;
    Ok(())
}

fn with_media_type(mut descriptor: serde_json::Value, media_type: &str) -> serde_json::Value {
    descriptor["mediaType"] = media_type.into();
    descriptor
}

pub(crate) fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

pub(crate) fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Fails unless the script that builds the busybox image is where this
/// harness was built from.
pub fn check_sources() -> Result<()> {
    if !Path::new(BUSYBOX_SCRIPT).is_file() {
        bail!("{BUSYBOX_SCRIPT} is missing: run the harness from the nidus repository it was built in");
    }
    Ok(())
}
