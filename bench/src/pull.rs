//! The pull step: one local registry's content (Debian's `docker-registry`,
//! one process on 127.0.0.1:5000 in each runtime's network namespace, both
//! serving the same storage directory) and an image the harness makes
//! (`PULL_LAYERS` gzip layers, over 100 MB compressed); each runtime pulls
//! it `iterations` times from a cold store (image removed and its content
//! collected before each pull). Reports p50s, their ratio and the disk's own
//! write rate (the physical bound of unpacking).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::host;
use crate::images::{oci_arch, sha256};
use crate::runtime::Runtime;

pub const REGISTRY_PORT: u16 = 5000;
const REPOSITORY: &str = "nidus-bench/pull";
const PULL_LAYERS: usize = 6;
/// Uncompressed bytes per layer; three quarters incompressible.
const LAYER_BYTES: usize = 24 << 20;

/// What the pull step measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PullFigures {
    pub layers: usize,
    /// Compressed bytes of the layers.
    pub image_bytes: u64,
    pub nidus_ms: Vec<f64>,
    pub containerd_ms: Vec<f64>,
    pub nidus_p50_ms: f64,
    pub containerd_p50_ms: f64,
    /// containerd's p50 over nidus's (the target is ≥ 2).
    pub speedup: f64,
    /// MB/s of a 256 MiB write + fdatasync in the harness's directory.
    pub disk_write_mb_per_s: f64,
}

/// The image reference both runtimes pull.
pub fn reference() -> String {
    format!("127.0.0.1:{REGISTRY_PORT}/{REPOSITORY}:v1")
}

/// A registry process in one runtime's network namespace; killed when dropped.
struct Registry {
    child: Child,
}

impl Registry {
    fn start(runtime: &Runtime, config: &Path, log: &Path) -> Result<Self> {
        let out = fs::File::create(log)?;
        let child = Command::new("nsenter")
            .arg(format!("--net={}", runtime.netns.path().display()))
            .args(["--", "docker-registry", "serve"])
            .arg(config)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting docker-registry")?;
        let registry = Self { child };
        let probe = format!("echo > /dev/tcp/127.0.0.1/{REGISTRY_PORT}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let up = Command::new("nsenter")
                .arg(format!("--net={}", runtime.netns.path().display()))
                .args(["--", "bash", "-c", &probe])
                .stderr(Stdio::null())
                .status()?;
            if up.success() {
                return Ok(registry);
            }
            if Instant::now() > deadline {
                bail!("docker-registry in {} did not listen within 20 s", runtime.name());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), nix::sys::signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// Runs the pull step.
pub async fn run(nidus: &Runtime, containerd: &Runtime, dir: &Path, iterations: usize) -> Result<PullFigures> {
    let dir = dir.join("pull");
    fs::create_dir_all(&dir)?;
    eprintln!("pull: making a {PULL_LAYERS}-layer image");
    let (layout, image_bytes) = write_image(&dir.join("layout"))?;
    let storage = dir.join("registry");
    fs::create_dir_all(&storage)?;
    let config = dir.join("registry.yml");
    fs::write(
        &config,
        format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{REGISTRY_PORT}\n",
            storage.display()
        ),
    )?;
    let for_nidus = Registry::start(nidus, &config, &dir.join("registry-nidus.log"))?;
    let push = Command::new("nsenter")
        .arg(format!("--net={}", nidus.netns.path().display()))
        .args(["--", "skopeo", "copy", "--quiet", "--dest-tls-verify=false", "--preserve-digests"])
        .arg(format!("oci:{}", layout.display()))
        .arg(format!("docker://{}", reference()))
        .output()
        .context("running skopeo")?;
    if !push.status.success() {
        bail!("skopeo copy failed: {}", String::from_utf8_lossy(&push.stderr));
    }
    let for_containerd = Registry::start(containerd, &config, &dir.join("registry-containerd.log"))?;
    let disk = disk_write_rate(&dir)?;

    let mut figures = PullFigures { layers: PULL_LAYERS, image_bytes, disk_write_mb_per_s: disk, ..Default::default() };
    for i in 0..iterations {
        for (rt, samples) in [(nidus, &mut figures.nidus_ms), (containerd, &mut figures.containerd_ms)] {
            let started = Instant::now();
            rt.cri().pull_image(&reference()).await.with_context(|| format!("{} pull {}", rt.name(), i + 1))?;
            samples.push(started.elapsed().as_secs_f64() * 1000.0);
            // A cold store for the next pull.
            rt.cri().remove_image(&reference()).await?;
            rt.collect_garbage()?;
        }
    }
    drop((for_nidus, for_containerd));
    figures.nidus_p50_ms = p50(&figures.nidus_ms);
    figures.containerd_p50_ms = p50(&figures.containerd_ms);
    figures.speedup = figures.containerd_p50_ms / figures.nidus_p50_ms.max(f64::MIN_POSITIVE);
    let _ = fs::remove_dir_all(&dir);
    Ok(figures)
}

fn p50(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

/// MB/s of writing 256 MiB and syncing it, in `dir`.
fn disk_write_rate(dir: &Path) -> Result<f64> {
    let path = dir.join("disk-rate");
    let chunk = vec![0x5au8; 1 << 20];
    let started = Instant::now();
    let mut file = fs::File::create(&path)?;
    for _ in 0..256 {
        file.write_all(&chunk)?;
    }
    file.sync_data()?;
    let secs = started.elapsed().as_secs_f64();
    fs::remove_file(&path)?;
    Ok(256.0 * 1.048_576 / secs)
}

fn write_blob(layout: &Path, data: &[u8]) -> Result<String> {
    let digest = sha256(data);
    fs::write(layout.join("blobs/sha256").join(&digest[7..]), data)?;
    Ok(digest)
}

/// One layer: a few files, three quarters pseudo-random bytes (seeded by
/// the layer's index), a quarter text.
fn layer_tar(index: usize) -> Result<Vec<u8>> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ (index as u64 + 1);
    let mut builder = tar::Builder::new(Vec::new());
    let files = 4;
    for f in 0..files {
        let mut data = Vec::with_capacity(LAYER_BYTES / files);
        while data.len() < LAYER_BYTES / files * 3 / 4 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            data.extend_from_slice(&state.to_le_bytes());
        }
        while data.len() < LAYER_BYTES / files {
            data.extend_from_slice(b"nidus-bench pull layer text, compressible. ");
        }
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o644);
        header.set_size(data.len() as u64);
        header.set_mtime(1_700_000_000);
        header.set_uid(0);
        header.set_gid(0);
        builder.append_data(&mut header, format!("layer{index}/file{f}"), &data[..])?;
    }
    Ok(builder.into_inner()?)
}

/// Writes the image as an OCI layout; returns it and the layers' compressed size.
fn write_image(layout: &Path) -> Result<(PathBuf, u64)> {
    fs::create_dir_all(layout.join("blobs/sha256"))?;
    fs::write(layout.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    let mut layers = Vec::new();
    let mut diff_ids = Vec::new();
    let mut total = 0u64;
    for i in 0..PULL_LAYERS {
        let tar = layer_tar(i)?;
        diff_ids.push(sha256(&tar));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar)?;
        let blob = gz.finish()?;
        total += blob.len() as u64;
        let digest = write_blob(layout, &blob)?;
        layers.push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digest, "size": blob.len(),
        }));
    }
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": oci_arch(), "os": "linux",
        "config": {"Cmd": ["/bin/true"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))?;
    let config_digest = write_blob(layout, &config)?;
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
        "layers": layers,
    }))?;
    let manifest_digest = write_blob(layout, &manifest)?;
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest, "size": manifest.len(),
    }]});
    fs::write(layout.join("index.json"), serde_json::to_vec(&index)?)?;
    host::run("sync", &[])?;
    Ok((layout.to_path_buf(), total))
}

/// The step's table.
pub fn table(f: &PullFigures) -> crate::table::Table {
    let mb = f.image_bytes as f64 / 1e6;
    let mut table = crate::table::Table::new(
        format!("pull: {} layers, {mb:.0} MB compressed, cold store, local registry", f.layers),
        &["runtime", "p50 (ms)", "n", "MB/s at p50"],
    );
    for (name, p50, n) in
        [("nidus", f.nidus_p50_ms, f.nidus_ms.len()), ("containerd", f.containerd_p50_ms, f.containerd_ms.len())]
    {
        let rate = if p50 > 0.0 { mb / (p50 / 1000.0) } else { 0.0 };
        table.row(vec![name.into(), format!("{p50:.0}"), n.to_string(), format!("{rate:.0}")]);
    }
    table.row(vec!["containerd / nidus".into(), format!("{:.2}x", f.speedup), String::new(), String::new()]);
    table.row(vec![
        "disk write (256 MiB + fdatasync)".into(),
        String::new(),
        String::new(),
        format!("{:.0}", f.disk_write_mb_per_s),
    ]);
    table
}
