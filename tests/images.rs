//! The local image store through the socket and the CLI: imports of OCI
//! layouts, OCI tarballs and docker-archives while the daemon runs and from
//! the import directory at start; list/status/remove as crictl uses them;
//! ImageFsInfo; layers with whiteouts and opaque dirs merged by a real
//! overlay mount; malicious and corrupt layers refused without leftovers;
//! layers shared between images, kept by leases, collected after.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::client::image_spec;
use common::images::{self, Compression, ImageDef, LayerTar, BUSYBOX, BUSYBOX_APP};
use common::{host, Cri, TestEnv};
use nidus::api::*;
use tokio_stream::StreamExt;

fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn import_ok(env: &TestEnv, path: &Path, name: Option<&str>) -> String {
    let out = env.image_import(path, name);
    assert!(out.status.success(), "import of {} failed: {}{}", path.display(), stdout_of(&out), stderr_of(&out));
    stdout_of(&out)
}

fn import_refused(env: &TestEnv, path: &Path) -> String {
    let out = env.image_import(path, None);
    assert!(!out.status.success(), "import of {} must fail: {}", path.display(), stdout_of(&out));
    stderr_of(&out)
}

/// Names in a store directory (layers, blobs), temp entries included.
fn entries(dir: &Path) -> BTreeSet<String> {
    host::names_in(dir).into_iter().collect()
}

fn layer_dirs(env: &TestEnv) -> BTreeSet<String> {
    entries(&env.root.join("images/layers"))
}

fn blobs(env: &TestEnv) -> BTreeSet<String> {
    entries(&env.root.join("images/blobs/sha256"))
}

/// Bytes allocated and inodes used under `dir`, hard links counted once
/// (like du), as nidus counts a writable layer.
fn du(dir: &Path) -> (u64, u64) {
    let usage = nidus::stats::disk::usage_of(dir).unwrap_or_default();
    (usage.bytes, usage.inodes)
}

/// The unpacked layer directories of an image, lowest first, from its verbose status.
async fn unpacked_layers(cri: &mut Cri, reference: &str) -> Vec<PathBuf> {
    let info = cri.image_info(reference).await;
    info["layers"]
        .as_array()
        .expect("layers in the verbose info")
        .iter()
        .map(|l| PathBuf::from(l["unpacked"].as_str().expect("every layer is unpacked")))
        .collect()
}

fn blob_bytes(layout: &Path) -> u64 {
    fs::read_dir(layout.join("blobs/sha256")).unwrap().flatten().map(|e| e.metadata().unwrap().len()).sum()
}

fn chain_id(diff_ids: &[String]) -> String {
    let mut chain = diff_ids[0].clone();
    for id in &diff_ids[1..] {
        chain = images::sha256(format!("{chain} {id}").as_bytes());
    }
    chain
}

fn getxattr(path: &Path, name: &str) -> Option<String> {
    let out = Command::new("python3")
        .args(["-c", "import os,sys\ntry: sys.stdout.write(os.getxattr(sys.argv[1], sys.argv[2], follow_symlinks=False).decode())\nexcept OSError: sys.exit(3)"])
        .arg(path)
        .arg(name)
        .output()
        .expect("python3 (installed by scripts/install-test-deps)");
    out.status.success().then(|| stdout_of(&out))
}

fn is_whiteout(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_char_device() && m.rdev() == 0)
}

#[tokio::test]
async fn cli_imports_show_at_once_and_status_reads_like_crictl() {
    let mut env = TestEnv::new("imgcli");
    let mut cri = env.start().await;
    assert!(cri.list_images(None).await.unwrap().is_empty());

    // An OCI layout, while the daemon runs: listed at once.
    let busybox = images::busybox();
    let started = Instant::now();
    let stdout = import_ok(&env, &busybox.layout, None);
    let import_time = started.elapsed();
    assert!(stdout.contains(&busybox.id) && stdout.contains(BUSYBOX), "{stdout}");
    assert!(stdout.contains("lists the imported images"), "{stdout}");
    let listed = cri.list_images(None).await.unwrap();
    assert_eq!(listed.len(), 1);
    let image = &listed[0];
    assert_eq!(image.id, busybox.id);
    assert_eq!(image.repo_tags, vec![BUSYBOX.to_string()]);
    assert_eq!(image.repo_digests, vec![format!("docker.io/library/busybox@{}", busybox.manifest_digest)]);
    assert_eq!(image.size, blob_bytes(&busybox.layout), "size = manifest + config + layer blobs");
    assert_eq!((image.uid, image.username.as_str()), (None, ""), "the image names no user");

    // Every way crictl users name an image.
    let short_id = &busybox.id["sha256:".len()..][..13];
    for reference in [
        "busybox",
        "busybox:latest",
        "docker.io/library/busybox",
        BUSYBOX,
        &busybox.id,
        short_id,
        &format!("busybox@{}", busybox.manifest_digest),
        &format!("docker.io/library/busybox:latest@{}", busybox.manifest_digest),
    ] {
        assert_eq!(cri.image(reference).await.map(|i| i.id), Some(busybox.id.clone()), "{reference}");
    }
    let info = cri.image_info("busybox").await;
    assert_eq!(info["imageSpec"]["config"]["Cmd"], serde_json::json!(["sh"]));
    assert_eq!(info["imageSpec"]["rootfs"]["diff_ids"], serde_json::json!(busybox.diff_ids));
    assert_eq!(info["chainID"], chain_id(&busybox.diff_ids));
    assert_eq!(info["manifestDigest"], busybox.manifest_digest);
    let layers = unpacked_layers(&mut cri, "busybox").await;
    assert!(layers[0].join("bin/busybox").is_file() && layers[1].join("etc/nidus-image").is_file());
    let unpacked: u64 = layers.iter().map(|l| du(l).0).sum();

    // A docker-archive of another image.
    let app = images::busybox_app();
    import_ok(&env, &app.docker_archive, None);
    let image = cri.image("busybox-app").await.expect("busybox-app listed");
    assert_eq!(image.id, app.id);
    assert_eq!(image.repo_tags, vec![BUSYBOX_APP.to_string()]);
    assert!(image.repo_digests.is_empty(), "a docker-archive has no registry manifest: {:?}", image.repo_digests);
    assert_eq!((image.uid, image.username.as_str()), (None, "app"));
    let info = cri.image_info(BUSYBOX_APP).await;
    assert_eq!(info["imageSpec"]["config"]["Entrypoint"], serde_json::json!(images::APP_ENTRYPOINT));
    assert_eq!(info["imageSpec"]["config"]["StopSignal"], images::APP_STOP_SIGNAL);

    // Lists, streams and filters.
    assert_eq!(cri.list_images(None).await.unwrap().len(), 2);
    let mut stream = cri.images.stream_images(StreamImagesRequest { filter: None }).await.unwrap().into_inner();
    let mut streamed = Vec::new();
    while let Some(chunk) = stream.next().await {
        streamed.extend(chunk.unwrap().images.into_iter().map(|i| i.id));
    }
    streamed.sort();
    let mut want = vec![busybox.id.clone(), app.id.clone()];
    want.sort();
    assert_eq!(streamed, want);
    let filtered = cri.list_images(Some("busybox-app")).await.unwrap();
    assert_eq!(filtered.iter().map(|i| i.id.clone()).collect::<Vec<_>>(), vec![app.id.clone()]);
    assert!(cri.list_images(Some("absent:1")).await.unwrap().is_empty());
    let bad = cri.list_images(Some("Not A Reference")).await.unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert!(bad.message().contains("filter.image.image"), "{}", bad.message());

    eprintln!(
        "busybox import: {:.0} ms (CLI process, 2 layers), unpacked size {} KiB",
        import_time.as_secs_f64() * 1000.0,
        unpacked / 1024
    );
}

#[tokio::test]
async fn oci_tarballs_names_and_bad_arguments() {
    let mut env = TestEnv::new("imgtar");
    let mut cri = env.start().await;
    let busybox = images::busybox();

    // An OCI tarball, with an extra name.
    let stdout = import_ok(&env, &busybox.oci_archive, Some("localhost:5000/mine/bb:v1"));
    assert!(stdout.contains("localhost:5000/mine/bb:v1"), "{stdout}");
    let image = cri.image("localhost:5000/mine/bb:v1").await.expect("listed under the new name");
    assert_eq!(image.id, busybox.id);
    assert_eq!(image.repo_tags, vec![BUSYBOX.to_string(), "localhost:5000/mine/bb:v1".to_string()]);
    assert_eq!(
        image.repo_digests,
        vec![
            format!("docker.io/library/busybox@{}", busybox.manifest_digest),
            format!("localhost:5000/mine/bb@{}", busybox.manifest_digest),
        ]
    );

    // A gzip-compressed docker-archive (`docker save | gzip`).
    let app = images::busybox_app();
    let gz = env.base.join("app.tar.gz");
    fs::write(&gz, images::compress(Compression::Gzip, &fs::read(&app.docker_archive).unwrap())).unwrap();
    import_ok(&env, &gz, None);
    assert_eq!(cri.image(BUSYBOX_APP).await.map(|i| i.id), Some(app.id.clone()));

    // Bad arguments: clear errors, nothing changes.
    let out = env.image_import(&busybox.layout, Some("Not Valid"));
    assert!(!out.status.success());
    assert!(stderr_of(&out).contains("not a valid image reference"), "{}", stderr_of(&out));
    let err = import_refused(&env, &env.base.join("no-such-archive"));
    assert!(err.contains("no-such-archive"), "{err}");
    let not_an_image = env.base.join("not-an-image");
    fs::create_dir_all(&not_an_image).unwrap();
    let err = import_refused(&env, &not_an_image);
    assert!(err.contains("neither an OCI image layout"), "{err}");
    assert_eq!(cri.list_images(None).await.unwrap().len(), 2);
}

#[tokio::test]
async fn concurrent_imports_both_land() {
    let mut env = TestEnv::new("imgconc");
    let mut cri = env.start().await;
    let (busybox, app) = (images::busybox(), images::busybox_app());
    let command = |path: &Path| {
        let mut cmd = Command::new(common::nidus_bin());
        cmd.args(["image", "import"]).arg(path).arg("--root").arg(&env.root).arg("--socket").arg(&env.socket);
        cmd
    };
    let first = command(&busybox.docker_archive).spawn().unwrap();
    let second = command(&app.layout).spawn().unwrap();
    for child in [first, second] {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr_of(&out));
    }
    let mut ids: Vec<String> = cri.list_images(None).await.unwrap().into_iter().map(|i| i.id).collect();
    ids.sort();
    let mut want = vec![busybox.id.clone(), app.id.clone()];
    want.sort();
    assert_eq!(ids, want);
    // The shared base layer exists once: 3 distinct layers.
    assert_eq!(layer_dirs(&env).len(), 3, "{:?}", layer_dirs(&env));
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[tokio::test]
async fn the_import_directory_is_imported_at_start() {
    let mut env = TestEnv::new("imgdir");
    let (busybox, app) = (images::busybox(), images::busybox_app());
    let import = env.root.join("import");
    copy_tree(&busybox.layout, &import.join("busybox"));
    fs::copy(&app.docker_archive, import.join("app.tar")).unwrap();
    fs::write(import.join("garbage.tar"), b"not a tarball").unwrap();

    let mut cri = env.start().await;
    assert_eq!(cri.image("busybox").await.map(|i| i.id), Some(busybox.id.clone()));
    assert_eq!(cri.image("busybox-app").await.map(|i| i.id), Some(app.id.clone()));
    let log = env.daemon_log();
    assert!(log.contains("garbage.tar") && log.contains("cannot import"), "a bad archive is reported:\n{log}");

    // A restart does not import unchanged archives again…
    env.terminate_daemon();
    let mut cri = env.start().await;
    assert_eq!(env.daemon_log().matches("imported from the import directory").count(), 2);
    assert_eq!(cri.list_images(None).await.unwrap().len(), 2);
    // …but brings back an image removed meanwhile.
    cri.remove_image("busybox").await.unwrap();
    assert!(cri.image("busybox").await.is_none());
    env.terminate_daemon();
    let mut cri = env.start().await;
    assert_eq!(cri.image("busybox").await.map(|i| i.id), Some(busybox.id.clone()));
    assert_eq!(env.daemon_log().matches("imported from the import directory").count(), 3);
}

#[tokio::test]
async fn remove_by_id_tag_and_digest_is_idempotent_and_pull_answers_present_images() {
    let mut env = TestEnv::new("imgrm");
    let mut cri = env.start().await;
    let busybox = images::busybox();
    let empty_store = (layer_dirs(&env), blobs(&env));

    let by_id_prefix = busybox.id["sha256:".len()..][..12].to_string();
    let by_digest = format!("docker.io/library/busybox@{}", busybox.manifest_digest);
    for reference in ["busybox", by_id_prefix.as_str(), busybox.id.as_str(), by_digest.as_str()] {
        env.import_busybox(&mut cri).await;
        cri.remove_image(reference).await.unwrap_or_else(|e| panic!("rmi {reference}: {e}"));
        assert!(cri.image("busybox").await.is_none(), "removed by {reference}");
        assert!(cri.list_images(None).await.unwrap().is_empty());
        // Its layers and blobs are collected.
        assert_eq!((layer_dirs(&env), blobs(&env)), empty_store, "after rmi {reference}");
        // Removing again succeeds.
        cri.remove_image(reference).await.unwrap();
    }

    // ImageStatus of an absent image: no image, no error (kubelet pulls then).
    let status = cri.image_status("busybox").await.unwrap();
    assert!(status.image.is_none() && status.info.is_empty());
    // PullImage of an absent image asks its registry (unreachable here: the
    // test's network namespace has loopback only) and names the image; a
    // present image named by digest needs no registry.
    let pull = |reference: &str| PullImageRequest { image: Some(image_spec(reference)), ..Default::default() };
    let err = cri.images.pull_image(pull("busybox")).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert!(err.message().contains("docker.io/library/busybox:latest"), "{}", err.message());
    env.import_busybox(&mut cri).await;
    let pulled = cri.images.pull_image(pull(&by_digest)).await.unwrap().into_inner();
    assert_eq!(pulled.image_ref, busybox.id);

    // Bad input names the field.
    for (request, field) in [
        (RemoveImageRequest { image: Some(image_spec("Not A Ref")) }, "image.image"),
        (RemoveImageRequest { image: Some(image_spec("")) }, "image.image"),
        (RemoveImageRequest { image: None }, "image"),
        (RemoveImageRequest { image: Some(image_spec("sha256:xyz")) }, "image.image"),
    ] {
        let err = cri.images.remove_image(request).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().starts_with(field), "{}", err.message());
    }
    let err = cri.image_status("busybox@sha256:1234").await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("image.image"), "{}", err.message());
    assert!(cri.image("busybox").await.is_some(), "bad requests removed nothing");
}

#[tokio::test]
async fn image_fs_info_reports_real_changing_usage() {
    let mut env = TestEnv::new("imgfs");
    let mut cri = env.start().await;
    let containers_dir = env.root.join("containers");
    let usage = |response: ImageFsInfoResponse| {
        let containers = response.container_filesystems.first().expect("the containers' filesystem");
        assert_eq!(PathBuf::from(&containers.fs_id.as_ref().unwrap().mountpoint), containers_dir);
        let fs = response.image_filesystems.into_iter().next().expect("one image filesystem");
        assert!(fs.timestamp > 0);
        (fs.fs_id.unwrap().mountpoint, fs.used_bytes.unwrap().value, fs.inodes_used.unwrap().value)
    };
    let (mountpoint, bytes0, inodes0) =
        usage(cri.images.image_fs_info(ImageFsInfoRequest {}).await.unwrap().into_inner());
    assert_eq!(PathBuf::from(&mountpoint), env.root.join("images"));

    env.import_busybox(&mut cri).await;
    let (_, bytes1, inodes1) = usage(cri.images.image_fs_info(ImageFsInfoRequest {}).await.unwrap().into_inner());
    let (du_bytes, du_inodes) = du(&env.root.join("images"));
    assert!(bytes1 > bytes0 + 1_000_000, "usage grows by the unpacked busybox: {bytes0} -> {bytes1}");
    assert!(inodes1 > inodes0 + 50, "inodes grow: {inodes0} -> {inodes1}");
    let near = |a: u64, b: u64, slack: u64| a.abs_diff(b) <= slack;
    assert!(near(bytes1, du_bytes, du_bytes / 20 + 65536), "reported {bytes1} bytes, du says {du_bytes}");
    assert!(near(inodes1, du_inodes, 16), "reported {inodes1} inodes, du says {du_inodes}");

    cri.remove_image("busybox").await.unwrap();
    let (_, bytes2, inodes2) = usage(cri.images.image_fs_info(ImageFsInfoRequest {}).await.unwrap().into_inner());
    assert_eq!((bytes2, inodes2), (bytes0, inodes0), "usage falls back after rmi");
}

/// A read-only overlay mount, unmounted when dropped.
struct Overlay {
    target: PathBuf,
}

impl Overlay {
    fn mount(lowest_first: &[PathBuf], target: &Path) -> Self {
        fs::create_dir_all(target).unwrap();
        let lower: Vec<String> = lowest_first.iter().rev().map(|p| p.display().to_string()).collect();
        nix::mount::mount(
            Some("overlay"),
            target,
            Some("overlay"),
            nix::mount::MsFlags::MS_RDONLY,
            Some(format!("lowerdir={}", lower.join(":")).as_str()),
        )
        .expect("mounting an overlay of the unpacked layers");
        Self { target: target.to_path_buf() }
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.target, nix::mount::MntFlags::MNT_DETACH);
    }
}

#[tokio::test]
async fn whiteouts_opaque_dirs_and_metadata_give_the_right_merged_tree() {
    let mut env = TestEnv::new("imgwh");
    let mut cri = env.start().await;
    let long_name = format!("meta/{}", "n".repeat(150));
    let lowest = LayerTar::new()
        .dir("a", 0o755)
        .file("a/keep", 0o644, b"keep")
        .file("a/gone", 0o644, b"gone")
        .dir("b", 0o755)
        .file("b/old1", 0o644, b"1")
        .file("b/old2", 0o644, b"2")
        .file("c", 0o644, b"c")
        .dir("d", 0o755)
        .file("d/x", 0o644, b"x")
        .dir("f", 0o755)
        .file("f/1", 0o644, b"1")
        .dir("meta", 0o755)
        .file("meta/setuid", 0o4755, b"#!/bin/sh\n")
        .file_owned("meta/owned", 0o640, 1000, 2000, b"owned")
        .symlink("meta/link", "owned")
        .hardlink("meta/hard", "meta/owned")
        .device("meta/fifo", tar::EntryType::Fifo, 0, 0)
        .device("meta/null", tar::EntryType::Char, 1, 3)
        .xattrs(&[("user.nidus", b"hello")])
        .file("meta/xattr", 0o644, b"x")
        .dir("meta/sub", 0o755)
        .symlink("meta/inside", "sub")
        .file("meta/inside/through", 0o644, b"written through an in-layer symlink")
        .file(&long_name, 0o644, b"long")
        .file("implicit/parents/file", 0o600, b"no dir entries before me")
        .finish();
    let middle = LayerTar::new()
        .whiteout("a/gone")
        .opaque("b")
        .file("b/new", 0o644, b"new")
        .whiteout("c")
        .whiteout("d")
        .dir("d", 0o755)
        .file("d/y", 0o644, b"y")
        .file("e", 0o644, b"e")
        .finish();
    let top = LayerTar::new().whiteout("e").opaque("f").file("a/late", 0o644, b"late").finish();
    let def = ImageDef {
        name: Some("localhost/whiteouts:1".into()),
        layers: vec![(lowest, Compression::Gzip), (middle, Compression::Zstd), (top, Compression::None)],
        config: serde_json::json!({"Cmd": ["sh"]}),
    };
    let layout = env.base.join("whiteouts");
    images::write_oci_layout(&layout, &def);
    import_ok(&env, &layout, None);
    let layers = unpacked_layers(&mut cri, "localhost/whiteouts:1").await;
    assert_eq!(layers.len(), 3);

    // Overlay markers in the unpacked layers.
    assert!(is_whiteout(&layers[1].join("a/gone")), "whiteout of a/gone is a 0/0 char device");
    assert!(is_whiteout(&layers[1].join("c")));
    assert!(is_whiteout(&layers[2].join("e")));
    assert_eq!(getxattr(&layers[1].join("b"), "trusted.overlay.opaque").as_deref(), Some("y"));
    assert_eq!(getxattr(&layers[1].join("d"), "trusted.overlay.opaque").as_deref(), Some("y"), "re-made dir");
    assert_eq!(getxattr(&layers[2].join("f"), "trusted.overlay.opaque").as_deref(), Some("y"));
    assert_eq!(getxattr(&layers[0].join("a"), "trusted.overlay.opaque"), None);

    // The merged tree, as a container sees it.
    let merged = env.base.join("merged");
    let overlay = Overlay::mount(&layers, &merged);
    assert_eq!(host::names_in(&merged.join("a")), vec!["keep", "late"]);
    assert_eq!(host::names_in(&merged.join("b")), vec!["new"]);
    assert!(!merged.join("c").exists() && !merged.join("e").exists());
    assert_eq!(host::names_in(&merged.join("d")), vec!["y"]);
    assert!(merged.join("f").is_dir() && host::names_in(&merged.join("f")).is_empty());
    assert_eq!(fs::read_to_string(merged.join("a/keep")).unwrap(), "keep");

    let meta = |p: &str| fs::symlink_metadata(merged.join(p)).unwrap();
    assert_eq!(meta("meta/setuid").mode() & 0o7777, 0o4755);
    assert_eq!(
        (meta("meta/owned").uid(), meta("meta/owned").gid(), meta("meta/owned").mode() & 0o7777),
        (1000, 2000, 0o640)
    );
    assert_eq!(meta("meta/owned").mtime(), 1_700_000_000);
    assert_eq!(fs::read_link(merged.join("meta/link")).unwrap(), PathBuf::from("owned"));
    let owned = fs::symlink_metadata(layers[0].join("meta/owned")).unwrap();
    let hard = fs::symlink_metadata(layers[0].join("meta/hard")).unwrap();
    assert_eq!((hard.ino(), owned.nlink()), (owned.ino(), 2), "hard link shares the inode");
    assert!(meta("meta/fifo").file_type().is_fifo());
    assert!(meta("meta/null").file_type().is_char_device());
    assert_eq!(meta("meta/null").rdev(), nix::sys::stat::makedev(1, 3));
    assert_eq!(getxattr(&merged.join("meta/xattr"), "user.nidus").as_deref(), Some("hello"));
    assert_eq!(fs::read_to_string(merged.join("meta/sub/through")).unwrap(), "written through an in-layer symlink");
    assert_eq!(fs::read_to_string(merged.join(&long_name)).unwrap(), "long");
    assert_eq!(fs::read_to_string(merged.join("implicit/parents/file")).unwrap(), "no dir entries before me");
    assert_eq!(meta("implicit").mode() & 0o7777, 0o755);
    drop(overlay);
    assert!(env.leftover_mounts().is_empty());
}

#[tokio::test]
async fn malicious_and_corrupt_layers_are_refused_and_leave_nothing() {
    let mut env = TestEnv::new("imgevil");
    let mut cri = env.start().await;
    let escape = std::env::temp_dir().join(format!("nidus-escape-{}-{}", std::process::id(), rand::random::<u32>()));
    let escape_rel = escape.to_str().unwrap().trim_start_matches('/').to_string();
    let passwd_before = fs::read("/etc/passwd").unwrap();
    let empty_store = (layer_dirs(&env), blobs(&env));

    let good = LayerTar::new().dir("ok", 0o755).file("ok/file", 0o644, b"fine").finish();
    let reg = tar::EntryType::Regular;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("dot-dot", LayerTar::new().raw(b"../escape", reg, b"", b"x").finish(), "'..' leads outside the layer"),
        (
            "absolute",
            LayerTar::new().raw(format!("{}/pwned", escape.display()).as_bytes(), reg, b"", b"x").finish(),
            "absolute paths are not allowed",
        ),
        (
            "symlink-to-root",
            LayerTar::new().symlink("evil", "/").raw(format!("evil/{escape_rel}").as_bytes(), reg, b"", b"x").finish(),
            "outside the layer through a symlink",
        ),
        (
            "symlink-up",
            LayerTar::new().symlink("up", "../..").raw(b"up/pwned", reg, b"", b"x").finish(),
            "outside the layer through a symlink",
        ),
        (
            "symlink-dir-entry",
            LayerTar::new()
                .symlink("tmpdir", "/tmp")
                .raw(
                    format!("tmpdir/{}/", escape.file_name().unwrap().to_str().unwrap()).as_bytes(),
                    tar::EntryType::Directory,
                    b"",
                    b"",
                )
                .finish(),
            "outside the layer through a symlink",
        ),
        (
            "hardlink-dot-dot",
            LayerTar::new().raw(b"hl", tar::EntryType::Link, b"../../etc/passwd", b"").finish(),
            "'..' leads outside the layer",
        ),
        (
            "hardlink-absolute",
            LayerTar::new().raw(b"hl", tar::EntryType::Link, b"/etc/passwd", b"").finish(),
            "absolute paths are not allowed",
        ),
        (
            "hardlink-through-symlink",
            LayerTar::new().symlink("root", "/").raw(b"hl", tar::EntryType::Link, b"root/etc/passwd", b"").finish(),
            "outside the layer through a symlink",
        ),
    ];
    for (label, evil, reason) in cases {
        let def = ImageDef {
            name: Some(format!("localhost/evil-{label}:1")),
            layers: vec![(good.clone(), Compression::Gzip), (evil, Compression::Gzip)],
            config: serde_json::json!({}),
        };
        let layout = env.base.join(format!("evil-{label}"));
        images::write_oci_layout(&layout, &def);
        let err = import_refused(&env, &layout);
        assert!(err.contains("refused") && err.contains(reason), "{label}: {err}");
        assert!(cri.list_images(None).await.unwrap().is_empty(), "{label}");
        assert_eq!((layer_dirs(&env), blobs(&env)), empty_store, "{label}: nothing left behind");
        assert!(!escape.exists(), "{label} wrote outside the layer");
    }
    assert_eq!(fs::read("/etc/passwd").unwrap(), passwd_before);

    // A layer blob that does not match its digest.
    let def = ImageDef {
        name: Some("localhost/tampered:1".into()),
        layers: vec![(good.clone(), Compression::None)],
        config: serde_json::json!({}),
    };
    let layout = env.base.join("tampered");
    let written = images::write_oci_layout(&layout, &def);
    let blob = layout.join("blobs/sha256").join(written.layer_digests[0].trim_start_matches("sha256:"));
    let mut data = fs::read(&blob).unwrap();
    data[600] ^= 0xff;
    fs::write(&blob, data).unwrap();
    let err = import_refused(&env, &layout);
    assert!(err.contains("does not match its digest"), "{err}");
    assert_eq!((layer_dirs(&env), blobs(&env)), empty_store, "tampered: nothing left behind");

    // A config whose diff id does not match the layer's content.
    let layout = env.base.join("wrong-diff-id");
    images::write_oci_layout_claiming(&layout, &def, &[images::sha256(b"something else")]);
    let err = import_refused(&env, &layout);
    assert!(err.contains("uncompressed content has digest"), "{err}");
    assert_eq!((layer_dirs(&env), blobs(&env)), empty_store, "wrong diff id: nothing left behind");
    assert!(cri.list_images(None).await.unwrap().is_empty());
}

/// The layer record's unpack time, to tell whether a layer was unpacked again.
fn unpacked_at(layer_fs: &Path) -> i64 {
    let record: serde_json::Value =
        serde_json::from_slice(&fs::read(layer_fs.parent().unwrap().join("layer.json")).unwrap()).unwrap();
    record["unpacked_at_ns"].as_i64().unwrap()
}

#[tokio::test]
async fn shared_layers_unpack_once_and_leases_keep_them_until_released() {
    let mut env = TestEnv::new("imglease");
    let mut cri = env.start().await;
    env.import_busybox(&mut cri).await;
    let busybox_layers = unpacked_layers(&mut cri, BUSYBOX).await;
    let base_unpacked_at = unpacked_at(&busybox_layers[0]);
    env.import_image(&mut cri, images::busybox_app()).await;
    let app_layers = unpacked_layers(&mut cri, BUSYBOX_APP).await;
    assert_eq!(app_layers[0], busybox_layers[0], "the shared base layer is one directory");
    assert_eq!(unpacked_at(&app_layers[0]), base_unpacked_at, "and was not unpacked again");
    assert_eq!(layer_dirs(&env).len(), 3);

    // A container leases the image's layers.
    let pod = env.pod("lease");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let container =
        cri.run_container(&pod_id, &pod, common::client::container_config("c", BUSYBOX_APP, &["sleep", "1000"])).await;
    let leased = app_layers.clone();
    let app_id = images::busybox_app().id.clone();

    // Removing the image keeps the leased layers; its blobs go.
    cri.remove_image(BUSYBOX_APP).await.unwrap();
    assert!(cri.image(BUSYBOX_APP).await.is_none());
    assert!(leased.iter().all(|l| l.join("etc/passwd").exists() || l.join("home/app/hello.txt").exists()));
    assert!(!blobs(&env).iter().any(|b| app_id.ends_with(b.as_str())), "the removed image's config blob is collected");
    assert_eq!(cri.exec_ok(&container, &["cat", "/home/app/hello.txt"]).await, "hello from the image\n");

    // A crash and restart (which collects garbage) keeps them too.
    env.kill_daemon();
    let mut cri = env.start().await;
    assert!(leased.iter().all(|l| l.is_dir()));
    cri.remove_image(BUSYBOX).await.unwrap();
    assert!(leased.iter().all(|l| l.is_dir()), "the base layer is still leased");
    assert!(!busybox_layers[1].exists(), "busybox's own top layer is collected");

    // Removing the container releases the lease: everything goes.
    cri.remove_container(&container).await.unwrap();
    assert!(leased.iter().all(|l| !l.exists()));
    assert!(layer_dirs(&env).is_empty(), "{:?}", layer_dirs(&env));
    assert!(blobs(&env).is_empty(), "{:?}", blobs(&env));
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}
