//! Test images, built at test time without network: busybox images made from
//! Debian's dynamic busybox (`/bin/busybox` and the libraries it links)
//! written as an OCI image layout and as a docker-archive, built once per
//! test process; and the pieces to craft other images (layer tars with
//! whiteouts, opaque dirs, devices, xattrs or malicious entries).
//! Everything here is independent of nidus's own image code.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use sha2::{Digest as _, Sha256};

/// The main test image: busybox with Cmd ["sh"].
pub const BUSYBOX: &str = "docker.io/library/busybox:latest";
/// A busybox variant with Entrypoint, Cmd, User, WorkingDir, StopSignal, Env and labels.
pub const BUSYBOX_APP: &str = "docker.io/library/busybox-app:latest";
/// busybox with the static `/bin/probe` helper (see [`busybox_probe`]).
pub const BUSYBOX_PROBE: &str = "docker.io/library/busybox-probe:latest";

/// Image config values of [`BUSYBOX_APP`], for container tests.
pub const APP_ENTRYPOINT: &[&str] = &["echo", "from-entrypoint"];
pub const APP_CMD: &[&str] = &["from-cmd"];
pub const APP_USER: &str = "app";
pub const APP_WORKDIR: &str = "/home/app";
pub const APP_STOP_SIGNAL: &str = "SIGUSR1";
pub const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Applets linked in /bin (those this busybox has).
const APPLETS: &[&str] = &[
    "sh",
    "ash",
    "ls",
    "cat",
    "echo",
    "sleep",
    "mkdir",
    "id",
    "env",
    "pwd",
    "true",
    "false",
    "ps",
    "top",
    "wc",
    "head",
    "tail",
    "dd",
    "grep",
    "stat",
    "hostname",
    "touch",
    "rm",
    "kill",
    "seq",
    "yes",
    "printf",
    "test",
    "[",
    "cp",
    "mv",
    "ln",
    "chmod",
    "chown",
    "date",
    "sed",
    "awk",
    "find",
    "xargs",
    "sort",
    "uniq",
    "tr",
    "cut",
    "tee",
    "uname",
    "readlink",
    "realpath",
    "basename",
    "dirname",
    "timeout",
    "whoami",
    "nproc",
    "free",
    "df",
    "du",
    "mount",
    "umount",
    "mknod",
    "mkfifo",
    "touch",
    "which",
    "nc",
    "ip",
    "ping",
    "wget",
    "nslookup",
    "sync",
    "usleep",
    "groups",
    "rmdir",
    "setsid",
    "md5sum",
    "sha256sum",
    "od",
    "xxd",
    "base64",
    "tar",
    "gzip",
];

const MTIME: u64 = 1_700_000_000;
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";

/// A built test image and where its archives are.
#[derive(Debug, Clone)]
pub struct TestImage {
    /// The name it is imported under.
    pub reference: String,
    /// OCI image layout directory.
    pub layout: PathBuf,
    /// docker-archive tarball (uncompressed layers).
    pub docker_archive: PathBuf,
    /// Tarball of the OCI layout.
    pub oci_archive: PathBuf,
    /// `sha256:<config digest>`.
    pub id: String,
    pub manifest_digest: String,
    pub diff_ids: Vec<String>,
}

/// Debian's busybox image (built once per test process).
pub fn busybox() -> &'static TestImage {
    static IMAGE: OnceLock<TestImage> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let def = ImageDef {
            name: Some(BUSYBOX.into()),
            layers: vec![
                (busybox_base_layer(), Compression::Gzip),
                (LayerTar::new().file("etc/nidus-image", 0o644, b"busybox\n").finish(), Compression::Gzip),
            ],
            config: serde_json::json!({
                "Env": [PATH_ENV],
                "Cmd": ["sh"],
                "WorkingDir": "/",
            }),
        };
        build_all("busybox", &def)
    })
}

/// The busybox variant with image-level Entrypoint/Cmd/User/WorkingDir/StopSignal;
/// it shares its base layer with [`busybox`].
pub fn busybox_app() -> &'static TestImage {
    static IMAGE: OnceLock<TestImage> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let def = ImageDef {
            name: Some(BUSYBOX_APP.into()),
            layers: vec![
                (busybox_base_layer(), Compression::Gzip),
                (
                    LayerTar::new()
                        .dir_owned("home/app/data", 0o750, 1000, 1000)
                        .file_owned("home/app/hello.txt", 0o640, 1000, 1000, b"hello from the image\n")
                        .finish(),
                    Compression::Zstd,
                ),
            ],
            config: serde_json::json!({
                "Env": [PATH_ENV, "IMAGE_VAR=from-image", "OVERRIDE_ME=image"],
                "Entrypoint": APP_ENTRYPOINT,
                "Cmd": APP_CMD,
                "User": APP_USER,
                "WorkingDir": APP_WORKDIR,
                "StopSignal": APP_STOP_SIGNAL,
                "Labels": {"org.nidus.test": "busybox-app"},
            }),
        };
        build_all("busybox-app", &def)
    })
}

/// An image for image volumes: two layers, the upper whiting out the
/// lower's `data/gone`, making `keep/opaque` opaque (its `old` hidden, `new`
/// shown), with a symbolic link out (`link` → /etc) and a device node.
pub fn volume_data() -> &'static TestImage {
    static IMAGE: OnceLock<TestImage> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let lower = LayerTar::new()
            .dir("data", 0o755)
            .file("data/a", 0o644, b"from the lower layer\n")
            .dir("data/gone", 0o755)
            .file("data/gone/x", 0o644, b"x\n")
            .dir("keep", 0o755)
            .dir("keep/opaque", 0o755)
            .file("keep/opaque/old", 0o644, b"old\n")
            .finish();
        let upper = LayerTar::new()
            .file("data/b", 0o644, b"from the upper layer\n")
            .whiteout("data/gone")
            .dir("keep/opaque", 0o755)
            .opaque("keep/opaque")
            .file("keep/opaque/new", 0o644, b"new\n")
            .symlink("link", "/etc")
            .device("node", tar::EntryType::Char, 1, 3)
            .finish();
        let def = ImageDef {
            name: Some("docker.io/library/volume-data:latest".into()),
            layers: vec![(lower, Compression::Gzip), (upper, Compression::Gzip)],
            config: serde_json::json!({"Env": [PATH_ENV]}),
        };
        build_all("volume-data", &def)
    })
}

/// A one-layer image (one file), for an image volume of a single layer.
pub fn volume_single() -> &'static TestImage {
    static IMAGE: OnceLock<TestImage> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let def = ImageDef {
            name: Some("docker.io/library/volume-single:latest".into()),
            layers: vec![(LayerTar::new().file("only/one", 0o644, b"one\n").finish(), Compression::Gzip)],
            config: serde_json::json!({"Env": [PATH_ENV]}),
        };
        build_all("volume-single", &def)
    })
}

/// The busybox image plus `/bin/probe`, a static helper (tests/programs/probe.c)
/// that makes one syscall or escape attempt and prints what happened.
pub fn busybox_probe() -> &'static TestImage {
    static IMAGE: OnceLock<TestImage> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let probe = fs::read(build_probe()).expect("reading the built probe");
        let def = ImageDef {
            name: Some(BUSYBOX_PROBE.into()),
            layers: vec![
                (busybox_base_layer(), Compression::Gzip),
                (LayerTar::new().file("bin/probe", 0o755, &probe).finish(), Compression::Gzip),
            ],
            config: serde_json::json!({
                "Env": [PATH_ENV],
                "Cmd": ["sh"],
                "WorkingDir": "/",
            }),
        };
        build_all("busybox-probe", &def)
    })
}

/// Compiles tests/programs/probe.c statically with the machine's C compiler.
fn build_probe() -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/probe.c");
    let out = images_dir().join("probe");
    let status = Command::new("cc")
        .args(["-static", "-O2", "-o"])
        .arg(&out)
        .arg(&source)
        .status()
        .unwrap_or_else(|e| panic!("running cc to build {}: {e} — install gcc and libc6-dev", source.display()));
    assert!(status.success(), "cc could not build {} statically (is libc6-dev installed?)", source.display());
    out
}

/// A directory for this process's built images; directories of earlier
/// test processes that are gone are removed.
fn images_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let tmp = std::env::temp_dir();
        if let Ok(entries) = fs::read_dir(&tmp) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if let Some(pid) = name.strip_prefix("nidus-test-images-").and_then(|p| p.parse::<u32>().ok()) {
                    if !Path::new(&format!("/proc/{pid}")).exists() {
                        let _ = fs::remove_dir_all(entry.path());
                    }
                }
            }
        }
        let dir = tmp.join(format!("nidus-test-images-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("test image directory");
        dir
    })
    .clone()
}

fn build_all(label: &str, def: &ImageDef) -> TestImage {
    let dir = images_dir().join(label);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("image dir");
    let layout = dir.join("oci");
    let built = write_oci_layout(&layout, def);
    let docker_archive = dir.join("docker-archive.tar");
    write_docker_archive(&docker_archive, def);
    let oci_archive = dir.join("oci.tar");
    tar_directory(&layout, &oci_archive);
    TestImage {
        reference: def.name.clone().unwrap_or_default(),
        layout,
        docker_archive,
        oci_archive,
        id: built.id,
        manifest_digest: built.manifest_digest,
        diff_ids: built.diff_ids,
    }
}

/// The base layer: busybox, its libraries, applet links, users and groups.
pub fn busybox_base_layer() -> Vec<u8> {
    let busybox = Path::new("/bin/busybox");
    let binary = fs::read(busybox).unwrap_or_else(|e| {
        panic!("reading /bin/busybox: {e} — install Debian's dynamic busybox (scripts/install-test-deps)")
    });
    let ldd = Command::new("ldd").arg(busybox).output().expect("running ldd");
    let ldd = String::from_utf8_lossy(&ldd.stdout).into_owned();
    assert!(
        !ldd.contains("not a dynamic executable"),
        "/bin/busybox is static (busybox-static); the tests need Debian's dynamic `busybox` package"
    );
    let available = Command::new(busybox).arg("--list").output().expect("busybox --list");
    let available = String::from_utf8_lossy(&available.stdout).into_owned();
    let available: Vec<&str> = available.lines().collect();

    let mut layer = LayerTar::new();
    for (dir, mode) in [
        ("bin", 0o755),
        ("sbin", 0o755),
        ("etc", 0o755),
        ("lib", 0o755),
        ("lib64", 0o755),
        ("usr", 0o755),
        ("usr/bin", 0o755),
        ("usr/sbin", 0o755),
        ("usr/local", 0o755),
        ("usr/local/bin", 0o755),
        ("root", 0o700),
        ("home", 0o755),
        ("proc", 0o555),
        ("sys", 0o555),
        ("dev", 0o755),
        ("run", 0o755),
        ("var", 0o755),
        ("var/run", 0o755),
        ("tmp", 0o1777),
        ("var/tmp", 0o1777),
    ] {
        layer.dir(dir, mode);
    }
    layer.dir_owned("home/app", 0o755, 1000, 1000);
    layer.file("bin/busybox", 0o755, &binary);
    let mut linked = std::collections::BTreeSet::new();
    for applet in APPLETS {
        if available.contains(applet) && linked.insert(*applet) {
            layer.symlink(&format!("bin/{applet}"), "busybox");
        }
    }
    // Libraries at the paths the dynamic linker looks them up at.
    let mut libs = BTreeMap::new();
    for line in ldd.lines() {
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next().filter(|p| p.starts_with('/')),
        };
        if let Some(path) = path.filter(|p| p.starts_with('/')) {
            libs.insert(path.trim_start_matches('/').to_string(), fs::read(path).expect("reading a library"));
        }
    }
    assert!(!libs.is_empty(), "ldd found no libraries for /bin/busybox:\n{ldd}");
    let mut dirs = std::collections::BTreeSet::new();
    for path in libs.keys() {
        let mut parent = Path::new(path).parent();
        while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
            dirs.insert(p.to_string_lossy().into_owned());
            parent = p.parent();
        }
    }
    for dir in dirs {
        if !["lib", "lib64", "usr", "usr/bin"].contains(&dir.as_str()) {
            layer.dir(&dir, 0o755);
        }
    }
    for (path, data) in &libs {
        layer.file(path, 0o755, data);
    }
    layer.file(
        "etc/passwd",
        0o644,
        b"root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    );
    layer.file("etc/group", 0o644, b"root:x:0:\napp:x:1000:\nextra:x:2000:app\nnogroup:x:65534:\n");
    layer.file("etc/hostname", 0o644, b"busybox\n");
    layer.finish()
}

/// How a layer blob is compressed: nidus's own kinds.
pub use nidus::image::unpack::Compression;

/// The OCI media type of a layer blob compressed so.
fn media_type(compression: Compression) -> &'static str {
    match compression {
        Compression::None => "application/vnd.oci.image.layer.v1.tar",
        Compression::Gzip => "application/vnd.oci.image.layer.v1.tar+gzip",
        Compression::Zstd => "application/vnd.oci.image.layer.v1.tar+zstd",
    }
}

/// `tar` compressed so (gzip with a zero mtime: the same bytes each time).
pub fn compress(compression: Compression, tar: &[u8]) -> Vec<u8> {
    match compression {
        Compression::None => tar.to_vec(),
        Compression::Gzip => {
            let mut encoder = flate2::GzBuilder::new().mtime(0).write(Vec::new(), flate2::Compression::fast());
            encoder.write_all(tar).expect("gzip");
            encoder.finish().expect("gzip")
        }
        Compression::Zstd => zstd::encode_all(tar, 3).expect("zstd"),
    }
}

/// What an image is made of: layer tars (lowest first) and the config's
/// `config` section.
#[derive(Debug, Clone)]
pub struct ImageDef {
    pub name: Option<String>,
    pub layers: Vec<(Vec<u8>, Compression)>,
    pub config: serde_json::Value,
}

/// Digests of a written image.
#[derive(Debug, Clone)]
pub struct Written {
    pub id: String,
    pub manifest_digest: String,
    pub diff_ids: Vec<String>,
    pub layer_digests: Vec<String>,
}

pub fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

fn config_json(def: &ImageDef, claimed_diff_ids: Option<&[String]>) -> (Vec<u8>, Vec<String>) {
    let diff_ids: Vec<String> = match claimed_diff_ids {
        Some(claimed) => claimed.to_vec(),
        None => def.layers.iter().map(|(tar, _)| sha256(tar)).collect(),
    };
    let config = serde_json::json!({
        "created": "2023-11-14T22:13:20Z",
        "architecture": host_arch(),
        "os": "linux",
        "config": def.config,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": def.layers.iter().map(|_| serde_json::json!({"created_by": "nidus test harness"})).collect::<Vec<_>>(),
    });
    (serde_json::to_vec(&config).expect("config JSON"), diff_ids)
}

pub fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn write_blob(layout: &Path, data: &[u8]) -> String {
    let digest = sha256(data);
    let path = layout.join("blobs/sha256").join(digest.trim_start_matches("sha256:"));
    fs::write(path, data).expect("writing a blob");
    digest
}

/// Writes `def` as an OCI image layout in `dir`.
pub fn write_oci_layout(dir: &Path, def: &ImageDef) -> Written {
    write_layout(dir, def, None)
}

/// Writes `def` as an OCI image layout whose config claims other diff ids
/// than its layers have.
pub fn write_oci_layout_claiming(dir: &Path, def: &ImageDef, diff_ids: &[String]) -> Written {
    write_layout(dir, def, Some(diff_ids))
}

fn write_layout(dir: &Path, def: &ImageDef, claimed_diff_ids: Option<&[String]>) -> Written {
    fs::create_dir_all(dir.join("blobs/sha256")).expect("layout dirs");
    fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).expect("oci-layout");
    let (config, diff_ids) = config_json(def, claimed_diff_ids);
    let config_digest = write_blob(dir, &config);
    let mut layers = Vec::new();
    let mut layer_digests = Vec::new();
    for (tar, compression) in &def.layers {
        let blob = compress(*compression, tar);
        let digest = write_blob(dir, &blob);
        layers.push(serde_json::json!({"mediaType": media_type(*compression), "digest": digest, "size": blob.len()}));
        layer_digests.push(digest);
    }
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": config.len()},
        "layers": layers,
    }))
    .expect("manifest JSON");
    let manifest_digest = write_blob(dir, &manifest);
    let mut descriptor = serde_json::json!({
        "mediaType": OCI_MANIFEST,
        "digest": manifest_digest,
        "size": manifest.len(),
        "platform": {"architecture": host_arch(), "os": "linux"},
    });
    if let Some(name) = &def.name {
        descriptor["annotations"] = serde_json::json!({
            "io.containerd.image.name": name,
            "org.opencontainers.image.ref.name": name.rsplit_once(':').map(|(_, tag)| tag).unwrap_or("latest"),
        });
    }
    let index = serde_json::json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [descriptor]});
    fs::write(dir.join("index.json"), serde_json::to_vec(&index).expect("index JSON")).expect("index.json");
    Written { id: config_digest, manifest_digest, diff_ids, layer_digests }
}

/// Writes `def` as a docker-archive (`docker save` format, uncompressed layers).
pub fn write_docker_archive(path: &Path, def: &ImageDef) -> Written {
    let (config, diff_ids) = config_json(def, None);
    let config_digest = sha256(&config);
    let mut archive = LayerTar::new();
    let config_name = format!("{}.json", config_digest.trim_start_matches("sha256:"));
    archive.file(&config_name, 0o644, &config);
    let mut layer_paths = Vec::new();
    for (tar, _) in &def.layers {
        let dir = sha256(tar).trim_start_matches("sha256:").to_string();
        archive.dir(&dir, 0o755);
        archive.file(&format!("{dir}/layer.tar"), 0o644, tar);
        layer_paths.push(format!("{dir}/layer.tar"));
    }
    // docker writes familiar names: "busybox:latest".
    let repo_tags: Vec<String> = def
        .name
        .iter()
        .map(|n| n.strip_prefix("docker.io/library/").or_else(|| n.strip_prefix("docker.io/")).unwrap_or(n).to_string())
        .collect();
    let manifest = serde_json::json!([{"Config": config_name, "RepoTags": repo_tags, "Layers": layer_paths}]);
    archive.file("manifest.json", 0o644, &serde_json::to_vec(&manifest).expect("manifest.json"));
    fs::write(path, archive.finish()).expect("writing the docker archive");
    Written { id: config_digest, manifest_digest: String::new(), diff_ids, layer_digests: Vec::new() }
}

/// Tars the files of `dir` (an OCI layout) into `out`.
pub fn tar_directory(dir: &Path, out: &Path) {
    let mut builder = tar::Builder::new(Vec::new());
    builder.mode(tar::HeaderMode::Deterministic);
    builder.append_dir_all(".", dir).expect("tar of the layout");
    fs::write(out, builder.into_inner().expect("tar")).expect("writing the layout tarball");
}

/// A layer tar built entry by entry.
pub struct LayerTar {
    builder: tar::Builder<Vec<u8>>,
}

impl Default for LayerTar {
    fn default() -> Self {
        Self::new()
    }
}

impl LayerTar {
    pub fn new() -> Self {
        Self { builder: tar::Builder::new(Vec::new()) }
    }

    fn header(kind: tar::EntryType, mode: u32, uid: u64, gid: u64) -> tar::Header {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_uid(uid);
        header.set_gid(gid);
        header.set_mtime(MTIME);
        header.set_size(0);
        header
    }

    pub fn dir(&mut self, path: &str, mode: u32) -> &mut Self {
        self.dir_owned(path, mode, 0, 0)
    }

    pub fn dir_owned(&mut self, path: &str, mode: u32, uid: u64, gid: u64) -> &mut Self {
        let mut header = Self::header(tar::EntryType::Directory, mode, uid, gid);
        self.builder.append_data(&mut header, format!("{path}/"), &[][..]).expect("dir entry");
        self
    }

    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) -> &mut Self {
        self.file_owned(path, mode, 0, 0, data)
    }

    pub fn file_owned(&mut self, path: &str, mode: u32, uid: u64, gid: u64, data: &[u8]) -> &mut Self {
        let mut header = Self::header(tar::EntryType::Regular, mode, uid, gid);
        header.set_size(data.len() as u64);
        self.builder.append_data(&mut header, path, data).expect("file entry");
        self
    }

    pub fn symlink(&mut self, path: &str, target: &str) -> &mut Self {
        let mut header = Self::header(tar::EntryType::Symlink, 0o777, 0, 0);
        self.builder.append_link(&mut header, path, target).expect("symlink entry");
        self
    }

    pub fn hardlink(&mut self, path: &str, target: &str) -> &mut Self {
        let mut header = Self::header(tar::EntryType::Link, 0o644, 0, 0);
        self.builder.append_link(&mut header, path, target).expect("hard link entry");
        self
    }

    pub fn device(&mut self, path: &str, kind: tar::EntryType, major: u32, minor: u32) -> &mut Self {
        let mut header = Self::header(kind, 0o666, 0, 0);
        header.set_device_major(major).expect("major");
        header.set_device_minor(minor).expect("minor");
        self.builder.append_data(&mut header, path, &[][..]).expect("device entry");
        self
    }

    /// An OCI whiteout hiding `path` of the lower layers.
    pub fn whiteout(&mut self, path: &str) -> &mut Self {
        let (parent, name) = path.rsplit_once('/').map(|(p, n)| (format!("{p}/"), n)).unwrap_or((String::new(), path));
        self.file(&format!("{parent}.wh.{name}"), 0o644, b"")
    }

    /// An OCI opaque marker: `dir` hides everything of the lower layers.
    pub fn opaque(&mut self, dir: &str) -> &mut Self {
        self.file(&format!("{dir}/.wh..wh..opq"), 0o644, b"")
    }

    /// PAX extended attributes (`SCHILY.xattr.*`) for the next entry.
    pub fn xattrs(&mut self, xattrs: &[(&str, &[u8])]) -> &mut Self {
        let mut records = Vec::new();
        for (key, value) in xattrs {
            let body = [format!(" SCHILY.xattr.{key}=").as_bytes(), value, b"\n"].concat();
            // The length counts itself.
            let mut len = body.len() + 1;
            while len.to_string().len() + body.len() != len {
                len = len.to_string().len() + body.len();
            }
            records.extend_from_slice(len.to_string().as_bytes());
            records.extend_from_slice(&body);
        }
        let mut header = Self::header(tar::EntryType::XHeader, 0o644, 0, 0);
        header.set_size(records.len() as u64);
        self.builder.append_data(&mut header, "PaxHeaders/entry", &records[..]).expect("pax entry");
        self
    }

    /// An entry with exactly this name and link name, bypassing the tar
    /// crate's path checks (for malicious layers).
    pub fn raw(&mut self, name: &[u8], kind: tar::EntryType, link: &[u8], data: &[u8]) -> &mut Self {
        let mut header = tar::Header::new_old();
        {
            let old = header.as_old_mut();
            old.name[..name.len()].copy_from_slice(name);
            old.linkname[..link.len()].copy_from_slice(link);
        }
        header.set_entry_type(kind);
        header.set_mode(0o644);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(MTIME);
        header.set_size(data.len() as u64);
        header.set_cksum();
        self.builder.append(&header, data).expect("raw entry");
        self
    }

    pub fn finish(&mut self) -> Vec<u8> {
        let builder = std::mem::replace(&mut self.builder, tar::Builder::new(Vec::new()));
        builder.into_inner().expect("finishing a layer tar")
    }
}
