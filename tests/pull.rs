//! PullImage from a real registry (Debian's docker-registry on 127.0.0.1 in
//! the test's network namespace, images pushed with skopeo): by tag and by
//! digest, OCI and Docker schema 2 manifests, multi-platform indexes,
//! gzip/zstd/plain layers, layers shared between images fetched once,
//! corrupt blobs refused without leftovers, mirrors, auth, stalls,
//! concurrent pulls, a daemon killed mid-pull; the bounds on a pull (a
//! minimum rate, a deadline, callers that all left), garbage collection
//! beside pulls in flight, and the codes of permanent refusals. Tests of
//! bounds read the daemon's resident memory and descriptors before and after.

mod common;
mod registry;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::client::{container_config, image_spec};
use common::images::{self, Compression, ImageDef, LayerTar, Written};
use common::{Cri, TestEnv};
use nidus::api::*;
use registry::Registry;

/// A three-layer image: busybox (gzip), a zstd layer and a plain one.
fn app_def(marker: &str) -> ImageDef {
    ImageDef {
        name: None,
        layers: vec![
            (images::busybox_base_layer(), Compression::Gzip),
            (
                LayerTar::new().file("etc/zstd-layer", 0o644, format!("{marker}\n").as_bytes()).finish(),
                Compression::Zstd,
            ),
            (LayerTar::new().file("etc/plain-layer", 0o644, b"plain\n").finish(), Compression::None),
        ],
        config: serde_json::json!({"Env": ["PATH=/bin"], "Cmd": ["sh"]}),
    }
}

fn layout(env: &TestEnv, name: &str, def: &ImageDef) -> (PathBuf, Written) {
    let dir = env.base.join(format!("layout-{name}"));
    let written = images::write_oci_layout(&dir, def);
    (dir, written)
}

/// A test env with a registry on 127.0.0.1:5000 serving `app_def(marker)` as `test/app:v1`.
fn serving_app(label: &str, marker: &str) -> (TestEnv, Registry, Written) {
    let env = TestEnv::new(label);
    let registry = Registry::start(&env, "main", 5000, None);
    let (dir, app) = layout(&env, "app", &app_def(marker));
    registry.push(&dir, "test/app:v1", None, None);
    (env, registry, app)
}

/// A proxy on 127.0.0.1:5001 in front of the registry on 5000, slowing blobs to `rate` bytes/s.
fn throttled(env: &TestEnv, rate: usize) -> registry::proxy::Proxy {
    let behaviour = registry::proxy::Behaviour { throttle_bytes_per_sec: Some(rate), ..Default::default() };
    registry::proxy::Proxy::start(&env.netns, 5001, 5000, behaviour)
}

async fn pull(cri: &mut Cri, reference: &str, auth: Option<AuthConfig>) -> Result<String, tonic::Status> {
    let request = PullImageRequest { image: Some(image_spec(reference)), auth, sandbox_config: None };
    Ok(cri.images.pull_image(request).await?.into_inner().image_ref)
}

fn config_file(env: &TestEnv, toml_text: &str) -> String {
    let path = env.base.join("config.toml");
    fs::write(&path, toml_text).expect("config file");
    path.display().to_string()
}

/// Files left in the store's blob and layer directories.
fn store_files(env: &TestEnv) -> Vec<String> {
    let mut found = Vec::new();
    for dir in ["images/blobs/sha256", "images/layers"] {
        if let Ok(entries) = fs::read_dir(env.root.join(dir)) {
            found.extend(entries.flatten().map(|e| format!("{dir}/{}", e.file_name().to_string_lossy())));
        }
    }
    found.sort();
    found
}

/// Whether any file of `written` (its blobs, its unpacked layers) is in the store.
fn stored_any_of(env: &TestEnv, written: &Written) -> Vec<String> {
    let hexes: Vec<String> = [&written.id, &written.manifest_digest]
        .into_iter()
        .chain(&written.layer_digests)
        .chain(&written.diff_ids)
        .map(|d| d.trim_start_matches("sha256:").to_string())
        .collect();
    store_files(env).into_iter().filter(|f| hexes.iter().any(|h| f.ends_with(h.as_str()))).collect()
}

/// A one-layer image of its own (no layer shared with `app_def`'s).
fn small_def(marker: &str) -> ImageDef {
    ImageDef {
        name: None,
        layers: vec![(
            LayerTar::new().file(&format!("etc/{marker}"), 0o644, format!("{marker}\n").as_bytes()).finish(),
            Compression::Gzip,
        )],
        config: serde_json::json!({"Cmd": ["sh"]}),
    }
}

/// The daemon's resident memory and open descriptors.
#[derive(Debug, Clone, Copy)]
struct Footprint {
    rss_kb: u64,
    fds: usize,
}

/// The daemon's footprint once its descriptors have settled; printed with `label`.
async fn footprint(env: &TestEnv, label: &str) -> Footprint {
    let (fds, _) = env.settled_fds_and_processes().await;
    let pid = env.daemon_pid().expect("the daemon runs");
    let status = fs::read_to_string(format!("/proc/{pid}/status")).expect("the daemon's /proc status");
    let rss_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in the daemon's status");
    let found = Footprint { rss_kb, fds };
    eprintln!("{} {label}: rss {} kB, fds {}", env.name, found.rss_kb, found.fds);
    found
}

/// After a pull is over, the daemon holds no more descriptors than before it
/// and its memory grew by less than `rss_growth_kb`.
fn assert_footprint_back(before: Footprint, after: Footprint, rss_growth_kb: u64) {
    assert!(after.fds <= before.fds, "the daemon holds descriptors the pull left: {before:?} → {after:?}");
    assert!(
        after.rss_kb < before.rss_kb + rss_growth_kb,
        "the daemon's memory grew by more than {rss_growth_kb} kB: {before:?} → {after:?}"
    );
}

/// The pulls in flight as Status verbose lists them.
async fn pulls_in_flight(cri: &mut Cri) -> Vec<serde_json::Value> {
    let status = cri.runtime.status(StatusRequest { verbose: true }).await.unwrap().into_inner();
    let info: serde_json::Value = serde_json::from_str(&status.info["config"]).unwrap();
    info["pulls"].as_array().cloned().unwrap_or_default()
}

/// Waits (20 s at most) until a pull of `name` is in flight with bytes arriving.
async fn wait_in_flight(cri: &mut Cri, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let pulls = pulls_in_flight(cri).await;
        if pulls.iter().any(|p| p["image"] == name && p["bytes"].as_u64().unwrap_or(0) > 0) {
            return;
        }
        assert!(Instant::now() < deadline, "no pull of {name} in flight: {pulls:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (`secs` at most) until `done` holds; panics with `what` otherwise.
async fn eventually(secs: u64, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "{what} (after {secs} s)");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn pull_by_tag_and_by_digest_runs_and_names_the_image_as_kubelet_expects() {
    let (mut env, registry, written) = serving_app("pull-tag", "tag");
    let mut cri = env.start().await;
    let name = format!("{}/test/app:v1", registry.host());

    // A loopback registry without TLS needs no configuration.
    let id = pull(&mut cri, &name, None).await.expect("pull by tag");
    assert_eq!(id, written.id);
    let image = cri.image(&name).await.expect("ImageStatus of the pulled image");
    assert_eq!(image.id, written.id);
    assert_eq!(image.repo_tags, vec![name.clone()]);
    let digest_ref = format!("{}/test/app@{}", registry.host(), written.manifest_digest);
    assert_eq!(image.repo_digests, vec![digest_ref.clone()]);
    assert!(cri.image(&digest_ref).await.is_some(), "ImageStatus by repo digest");
    assert!(cri.image(&written.id).await.is_some(), "ImageStatus by id");
    let listed = cri.list_images(None).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].repo_digests, vec![digest_ref.clone()]);
    for digest in &written.layer_digests {
        assert_eq!(registry.blob_gets(digest), 1, "layer {digest} fetched once");
    }

    // Pulled again: nothing downloaded again.
    assert_eq!(pull(&mut cri, &name, None).await.unwrap(), written.id);
    for digest in &written.layer_digests {
        assert_eq!(registry.blob_gets(digest), 1, "layer {digest} not fetched again");
    }

    // A container runs from it: every layer (gzip, zstd, plain) unpacked.
    let pod_config = env.pod("pulled");
    let pod = cri.run_pod(pod_config.clone()).await.unwrap();
    let config = container_config("c", &name, &["sh", "-c", "cat /etc/zstd-layer /etc/plain-layer"]);
    let container = cri.run_container(&pod, &pod_config, config).await;
    let status = cri.wait_exited(&container, 20).await;
    assert_eq!(status.exit_code, 0);
    let lines = common::client::log_lines(&cri.logs(&container).await, "stdout");
    assert_eq!(lines, vec!["tag".to_string(), "plain".to_string()]);
    cri.remove_container(&container).await.unwrap();
    cri.stop_pod(&pod).await.unwrap();
    cri.remove_pod(&pod).await.unwrap();

    // kubelet's image GC round trip: removed by id, pulled again by digest.
    cri.remove_image(&written.id).await.unwrap();
    assert!(cri.image(&name).await.is_none());
    assert_eq!(pull(&mut cri, &digest_ref, None).await.expect("pull by digest"), written.id);
    let image = cri.image(&digest_ref).await.expect("pulled by digest");
    assert!(image.repo_tags.is_empty(), "{:?}", image.repo_tags);
    assert_eq!(image.repo_digests, vec![digest_ref.clone()]);
    let fs_info = cri.images.image_fs_info(ImageFsInfoRequest {}).await.unwrap().into_inner();
    let used = fs_info.image_filesystems[0].used_bytes.as_ref().map(|u| u.value).unwrap_or_default();
    assert!(used > 1 << 20, "ImageFsInfo counts the pulled layers: {used}");

    // An absent tag is NotFound, naming the image.
    let missing = pull(&mut cri, &format!("{}/test/app:nope", registry.host()), None).await.unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound, "{missing:?}");
    assert!(missing.message().contains("test/app:nope"), "{}", missing.message());
    env.assert_no_leftovers();
}

#[tokio::test]
async fn docker_schema_2_and_a_multi_platform_index_resolved_to_this_node() {
    let mut env = TestEnv::new("pull-index");
    let registry = Registry::start(&env, "main", 5000, None);
    // Docker schema 2 (gzip layers only: schema 2 has no zstd).
    let docker_def = ImageDef {
        name: None,
        layers: vec![(LayerTar::new().file("etc/docker", 0o644, b"v2s2\n").finish(), Compression::Gzip)],
        config: serde_json::json!({"Cmd": ["sh"]}),
    };
    let (dir, docker) = layout(&env, "docker", &docker_def);
    registry.push(&dir, "test/docker:v1", Some("v2s2"), None);

    // An index listing this node's image and another platform's.
    let (dir, native) = layout(&env, "multi", &app_def("multi"));
    let index_digest = make_index(&dir, &native, &[("s390x", None), (images::host_arch(), None)]);
    registry.push(&dir, "test/multi:v1", None, None);
    // An index without this node's platform.
    let (dir, other) = layout(&env, "foreign", &app_def("foreign"));
    make_index(&dir, &other, &[("s390x", None), ("arm", Some("v5"))]);
    registry.push(&dir, "test/foreign:v1", None, None);

    let mut cri = env.start().await;
    let host = registry.host();
    assert_eq!(pull(&mut cri, &format!("{host}/test/docker:v1"), None).await.expect("schema 2"), docker.id);
    let image = cri.image(&format!("{host}/test/docker:v1")).await.unwrap();
    let info = cri.image_info(&format!("{host}/test/docker:v1")).await;
    assert_eq!(
        info["layers"][0]["mediaType"], "application/vnd.docker.image.rootfs.diff.tar.gzip",
        "pushed as Docker schema 2: {info}"
    );
    assert_eq!(image.repo_digests.len(), 1);

    let multi = format!("{host}/test/multi:v1");
    assert_eq!(pull(&mut cri, &multi, None).await.expect("index"), native.id);
    let image = cri.image(&multi).await.unwrap();
    // The repo digest is the index's: what the tag resolves to.
    assert_eq!(image.repo_digests, vec![format!("{host}/test/multi@{index_digest}")]);
    // By the index's digest and by the platform manifest's digest.
    cri.remove_image(&native.id).await.unwrap();
    assert_eq!(pull(&mut cri, &format!("{host}/test/multi@{index_digest}"), None).await.unwrap(), native.id);
    cri.remove_image(&native.id).await.unwrap();
    let by_manifest = format!("{host}/test/multi@{}", native.manifest_digest);
    assert_eq!(pull(&mut cri, &by_manifest, None).await.unwrap(), native.id);
    assert!(cri.image(&by_manifest).await.is_some());

    let refused = pull(&mut cri, &format!("{host}/test/foreign:v1"), None).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::NotFound, "{refused:?}");
    assert!(refused.message().contains("platform") && refused.message().contains("s390x"), "{}", refused.message());
    assert!(cri.image(&other.id).await.is_none());
}

/// Turns the layout's index.json into one whose single entry is a nested
/// image index listing the layout's manifest under each platform; returns
/// the nested index's digest.
fn make_index(dir: &Path, written: &Written, platforms: &[(&str, Option<&str>)]) -> String {
    let manifest_size =
        fs::metadata(dir.join("blobs/sha256").join(written.manifest_digest.trim_start_matches("sha256:")))
            .unwrap()
            .len();
    let manifests: Vec<serde_json::Value> = platforms
        .iter()
        .map(|(arch, variant)| {
            let mut platform = serde_json::json!({"architecture": arch, "os": "linux"});
            if let Some(v) = variant {
                platform["variant"] = serde_json::json!(v);
            }
            serde_json::json!({
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": written.manifest_digest,
                "size": manifest_size,
                "platform": platform,
            })
        })
        .collect();
    let nested = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests,
    }))
    .unwrap();
    let digest = images::sha256(&nested);
    fs::write(dir.join("blobs/sha256").join(digest.trim_start_matches("sha256:")), &nested).unwrap();
    let top = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.index.v1+json", "digest": digest, "size": nested.len()}],
    });
    fs::write(dir.join("index.json"), serde_json::to_vec(&top).unwrap()).unwrap();
    digest
}

#[tokio::test]
async fn a_shared_layer_is_fetched_once_and_a_corrupt_blob_leaves_nothing() {
    let mut env = TestEnv::new("pull-shared");
    let registry = Registry::start(&env, "main", 5000, None);
    let (dir, first) = layout(&env, "first", &app_def("first"));
    registry.push(&dir, "test/first:v1", None, None);
    let (dir, second) = layout(&env, "second", &app_def("second"));
    registry.push(&dir, "test/second:v1", None, None);
    assert_eq!(first.layer_digests[0], second.layer_digests[0], "the busybox layer is shared");

    let mut cri = env.start().await;
    let host = registry.host();
    pull(&mut cri, &format!("{host}/test/first:v1"), None).await.unwrap();
    pull(&mut cri, &format!("{host}/test/second:v1"), None).await.unwrap();
    assert_eq!(registry.blob_gets(&first.layer_digests[0]), 1, "the shared layer is downloaded once");
    assert_eq!(registry.blob_gets(&second.layer_digests[1]), 1);
    cri.remove_image(&first.id).await.unwrap();
    cri.remove_image(&second.id).await.unwrap();
    assert!(store_files(&env).is_empty(), "{:?}", store_files(&env));

    // A layer blob corrupted in the registry's storage: refused, nothing kept.
    let (dir, bad) = layout(&env, "bad", &app_def("bad"));
    registry.push(&dir, "test/bad:v1", None, None);
    let hex = bad.layer_digests[1].trim_start_matches("sha256:");
    let data = registry.dir.join("data/docker/registry/v2/blobs/sha256").join(&hex[..2]).join(hex).join("data");
    let mut bytes = fs::read(&data).expect("the blob in the registry's storage");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    fs::write(&data, bytes).unwrap();
    let refused = pull(&mut cri, &format!("{host}/test/bad:v1"), None).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::DataLoss, "{refused:?}");
    assert!(refused.message().contains("test/bad:v1"), "{}", refused.message());
    assert!(cri.list_images(None).await.unwrap().is_empty());
    assert!(store_files(&env).is_empty(), "a failed pull leaves nothing: {:?}", store_files(&env));
}

#[tokio::test]
async fn mirrors_are_tried_in_order_with_rewrites_and_fall_back_to_the_registry() {
    let env = TestEnv::new("pull-mirror");
    let upstream = Registry::start(&env, "upstream", 5000, None);
    let mirror = Registry::start(&env, "mirror", 5001, None);
    let (dir, app) = layout(&env, "app", &app_def("mirrored"));
    upstream.push(&dir, "test/app:v1", None, None);
    // The mirror holds it under another repository (rewritten) and as a public image.
    mirror.push(&dir, "mirrored/app:v1", None, None);
    mirror.push(&dir, "pause:3.9", None, None);
    let (dir, only_upstream) = layout(&env, "upstream-only", &app_def("upstream-only"));
    upstream.push(&dir, "test/other:v1", None, None);
    let config = config_file(
        &env,
        r#"
[registry.hosts."127.0.0.1:5000"]
mirrors = [{ url = "http://127.0.0.1:5001", rewrite = [{ from = "test/app", to = "mirrored/app" }] }]

[registry.hosts."*"]
mirrors = [{ url = "http://127.0.0.1:5001" }]
mirrors_only = true
"#,
    );
    let mut env = env.with_args(&["--config", &config]);
    let mut cri = env.start().await;

    // The mirror has it: the registry itself is not asked.
    assert_eq!(pull(&mut cri, "127.0.0.1:5000/test/app:v1", None).await.unwrap(), app.id);
    assert_eq!(upstream.manifest_gets(), 0, "the upstream was asked although the mirror has the image");
    assert_eq!(mirror.blob_gets(&app.layer_digests[0]), 1);
    let image = cri.image("127.0.0.1:5000/test/app:v1").await.unwrap();
    assert_eq!(image.repo_tags, vec!["127.0.0.1:5000/test/app:v1".to_string()], "named as asked, not as mirrored");

    // The mirror lacks it: the registry serves it.
    assert_eq!(pull(&mut cri, "127.0.0.1:5000/test/other:v1", None).await.unwrap(), only_upstream.id);
    assert!(upstream.manifest_gets() >= 1);

    // The mirror serves the manifest but lacks a layer: that layer alone
    // comes from the registry.
    let manifests_before = upstream.manifest_gets();
    let (dir, partial) = layout(&env, "partial", &app_def("partial"));
    upstream.push(&dir, "test/partial:v1", None, None);
    mirror.push(&dir, "test/partial:v1", None, None);
    // (Its other layers are the busybox and plain layers already stored.)
    let lost = &partial.layer_digests[1];
    let hex = lost.strip_prefix("sha256:").unwrap();
    fs::remove_dir_all(mirror.dir.join("data/docker/registry/v2/blobs/sha256").join(&hex[..2]).join(hex)).unwrap();
    assert_eq!(pull(&mut cri, "127.0.0.1:5000/test/partial:v1", None).await.unwrap(), partial.id);
    assert_eq!(upstream.manifest_gets(), manifests_before, "the manifest came from the mirror");
    assert_eq!(upstream.blob_gets(lost), 1, "the lost layer came from the registry");
    assert!(env.daemon_log().contains("blob fetched from a later endpoint"), "the fallback is logged");

    // Every other registry (no network here at all) comes from the one local mirror.
    assert_eq!(pull(&mut cri, "registry.k8s.io/pause:3.9", None).await.expect("through the mirror"), app.id);
    let image = cri.image("registry.k8s.io/pause:3.9").await.unwrap();
    assert!(image.repo_digests.contains(&format!("registry.k8s.io/pause@{}", app.manifest_digest)));
    let missing = pull(&mut cri, "busybox:1.36", None).await.unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound, "{missing:?}");
    assert!(missing.message().contains("docker.io/library/busybox:1.36"), "{}", missing.message());
}

fn basic(username: &str, password: &str) -> Option<AuthConfig> {
    Some(AuthConfig { username: username.into(), password: password.into(), ..Default::default() })
}

#[tokio::test]
async fn basic_and_bearer_auth_with_right_and_wrong_credentials_never_logged() {
    let mut env = TestEnv::new("pull-auth");
    let htpasswd = env.base.join("htpasswd");
    let hash = bcrypt::hash("s3cret-pw", 5).unwrap();
    fs::write(&htpasswd, format!("tester:{hash}\n")).unwrap();
    let locked = Registry::start(&env, "locked", 5000, Some(&htpasswd));
    let (dir, app) = layout(&env, "app", &app_def("auth"));
    locked.push(&dir, "test/app:v1", None, Some("tester:s3cret-pw"));
    let open = Registry::start(&env, "open", 5001, None);
    open.push(&dir, "test/app:v1", None, None);
    let token = "tok-0123456789";
    let behaviour = registry::proxy::Behaviour {
        bearer: Some(("alice".into(), "wonder-pw".into(), token.into())),
        ..Default::default()
    };
    let _proxy = registry::proxy::Proxy::start(&env.netns, 5002, 5001, behaviour);
    let mut cri = env.start().await;

    let name = "127.0.0.1:5000/test/app:v1";
    let denied = pull(&mut cri, name, None).await.unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");
    let wrong = pull(&mut cri, name, basic("tester", "wrong-pw")).await.unwrap_err();
    assert_eq!(wrong.code(), tonic::Code::PermissionDenied, "{wrong:?}");
    assert!(!wrong.message().contains("wrong-pw"));
    assert_eq!(pull(&mut cri, name, basic("tester", "s3cret-pw")).await.expect("basic auth"), app.id);
    cri.remove_image(&app.id).await.unwrap();
    use base64::Engine;
    let auth = base64::engine::general_purpose::STANDARD.encode("tester:s3cret-pw");
    let with_auth_field = Some(AuthConfig { auth, ..Default::default() });
    assert_eq!(pull(&mut cri, name, with_auth_field).await.expect("auth field"), app.id);
    cri.remove_image(&app.id).await.unwrap();

    // The bearer flow: challenge, token from the realm with basic auth, retry.
    let name = "127.0.0.1:5002/test/app:v1";
    let denied = pull(&mut cri, name, basic("alice", "bad-pw")).await.unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");
    assert_eq!(pull(&mut cri, name, basic("alice", "wonder-pw")).await.expect("bearer"), app.id);
    cri.remove_image(&app.id).await.unwrap();
    let registry_token = Some(AuthConfig { registry_token: token.into(), ..Default::default() });
    assert_eq!(pull(&mut cri, name, registry_token).await.expect("registry token"), app.id);
    cri.remove_image(&app.id).await.unwrap();
    let identity_token = Some(AuthConfig { identity_token: "wonder-pw".into(), ..Default::default() });
    assert_eq!(pull(&mut cri, name, identity_token).await.expect("identity (refresh) token"), app.id);
    cri.remove_image(&app.id).await.unwrap();
    let bad_identity = Some(AuthConfig { identity_token: "bad-pw".into(), ..Default::default() });
    let denied = pull(&mut cri, name, bad_identity).await.unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");

    let log = env.daemon_log();
    for secret in ["s3cret-pw", "wrong-pw", "wonder-pw", "bad-pw", token] {
        assert!(!log.contains(secret), "{secret} in the daemon log");
    }
}

#[tokio::test]
async fn a_stalled_download_is_cancelled_naming_image_and_layer() {
    let (env, _registry, app) = serving_app("pull-stall", "stall");
    let behaviour = registry::proxy::Behaviour { stall_blobs: true, ..Default::default() };
    let proxy = registry::proxy::Proxy::start(&env.netns, 5001, 5000, behaviour);
    let config = config_file(&env, "[registry]\nstall_timeout_secs = 2\n");
    let mut env = env.with_args(&["--config", &config]);
    let mut cri = env.start().await;

    let started = std::time::Instant::now();
    let stalled = pull(&mut cri, "127.0.0.1:5001/test/app:v1", None).await.unwrap_err();
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "{:?}", started.elapsed());
    assert_eq!(stalled.code(), tonic::Code::DeadlineExceeded, "{stalled:?}");
    assert!(stalled.message().contains("127.0.0.1:5001/test/app:v1"), "{}", stalled.message());
    assert!(app.layer_digests.iter().any(|d| stalled.message().contains(d.as_str())), "{}", stalled.message());
    assert!(cri.list_images(None).await.unwrap().is_empty());
    assert!(store_files(&env).is_empty(), "{:?}", store_files(&env));

    // Nothing is stuck: the same pull works once the registry recovers.
    proxy.set(|b| b.stall_blobs = false);
    assert_eq!(pull(&mut cri, "127.0.0.1:5001/test/app:v1", None).await.unwrap(), app.id);
}

#[tokio::test]
async fn ten_concurrent_pulls_download_each_layer_once() {
    let (mut env, registry, app) = serving_app("pull-many", "many");
    // Slowed so that the pulls overlap.
    let _proxy = throttled(&env, 4 << 20);
    let cri = env.start().await;
    let mut pulls = Vec::new();
    for _ in 0..10 {
        let mut cri = cri.clone();
        pulls.push(tokio::spawn(async move { pull(&mut cri, "127.0.0.1:5001/test/app:v1", None).await }));
    }
    for p in pulls {
        assert_eq!(p.await.unwrap().expect("every caller answered"), app.id);
    }
    for digest in &app.layer_digests {
        assert_eq!(registry.blob_gets(digest), 1, "layer {digest}: one download for ten pulls");
    }
}

#[tokio::test]
async fn a_daemon_killed_mid_pull_restarts_consistent_and_the_pull_can_be_retried() {
    let (env, _registry, app) = serving_app("pull-kill", "kill");
    let proxy = throttled(&env, 256 << 10);
    let mut env = env;
    let mut cri = env.start().await;
    let name = "127.0.0.1:5001/test/app:v1";
    let mut background = cri.clone();
    let pulling = tokio::spawn(async move { pull(&mut background, name, None).await });

    // The pull is listed in flight (Status verbose) with bytes arriving.
    wait_in_flight(&mut cri, name).await;
    env.kill_daemon();
    assert!(pulling.await.unwrap().is_err());

    let mut cri = env.start().await;
    assert!(cri.list_images(None).await.unwrap().is_empty(), "a half pull is no image");
    assert!(store_files(&env).is_empty(), "leftovers of the killed pull: {:?}", store_files(&env));
    proxy.set(|b| b.throttle_bytes_per_sec = None);
    assert_eq!(pull(&mut cri, name, None).await.expect("retried"), app.id);
    assert!(cri.image(name).await.is_some());
}

#[tokio::test]
async fn the_cli_pulls_with_progress_lines_and_lists_pulls_in_flight() {
    let (env, _registry, app) = serving_app("pull-cli", "cli");
    let _proxy = throttled(&env, 512 << 10);
    let config = config_file(&env, "[registry]\nprogress_interval_secs = 1\n");
    let mut env = env.with_args(&["--config", &config]);
    let mut cri = env.start().await;
    let socket = env.socket.display().to_string();

    let name = "127.0.0.1:5001/test/app:v1";
    let pull_socket = socket.clone();
    let pulling = tokio::task::spawn_blocking(move || {
        std::process::Command::new(common::nidus_bin())
            .args(["image", "pull", "--socket", &pull_socket, name])
            .output()
            .unwrap()
    });
    // `nidus image pulls` lists it while it runs.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let out = std::process::Command::new(common::nidus_bin())
            .args(["image", "pulls", "--socket", &socket])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
        if text.contains(name) && text.contains("Downloading") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never listed in flight: {text}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let out = pulling.await.unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains(&format!("pulled {name} {}", app.id)), "{stdout}");
    // Not a terminal: plain progress lines.
    assert!(stderr.lines().any(|l| l.starts_with(name) && l.contains("/3 layers")), "{stderr}");
    assert!(cri.image(name).await.is_some());
    let out =
        std::process::Command::new(common::nidus_bin()).args(["image", "pulls", "--socket", &socket]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no pull in flight");
    // The daemon logged the pull's progress at its interval, and its end.
    let log = env.daemon_log();
    assert!(log.lines().any(|l| l.contains("pull progress") && l.contains("layers_done")), "{log}");
    assert!(log.contains("image pulled"), "{log}");
}

#[tokio::test]
async fn a_tls_registry_is_reached_with_the_configured_ca_and_client_certificate() {
    let env = TestEnv::new("pull-tls");
    let plain = Registry::start(&env, "plain", 5000, None);
    let (dir, app) = layout(&env, "app", &app_def("tls"));
    plain.push(&dir, "test/app:v1", None, None);
    let certs = env.base.join("certs");
    registry::make_certificates(&certs);
    let _tls = Registry::start_tls(&env, "tls", 5443, &plain, &certs);
    // The same TLS registry as a mirror of two names: once without the
    // client certificate it requires, once without the CA that signed it.
    let config = config_file(
        &env,
        &format!(
            r#"
[registry.hosts."127.0.0.1:5443"]
ca_certs = ["{c}/ca.pem"]
client_cert = "{c}/client.pem"
client_key = "{c}/client.key"

[registry.hosts."tls-without-client-cert.test"]
mirrors = [{{ url = "https://127.0.0.1:5443", ca_certs = ["{c}/ca.pem"] }}]
mirrors_only = true

[registry.hosts."tls-without-ca.test"]
mirrors = [{{ url = "https://127.0.0.1:5443", client_cert = "{c}/client.pem", client_key = "{c}/client.key" }}]
mirrors_only = true
"#,
            c = certs.display()
        ),
    );
    let mut env = env.with_args(&["--config", &config]);
    let mut cri = env.start().await;
    assert_eq!(pull(&mut cri, "127.0.0.1:5443/test/app:v1", None).await.expect("over TLS"), app.id);
    for refused in ["tls-without-client-cert.test/test/app:v1", "tls-without-ca.test/test/app:v1"] {
        let e = pull(&mut cri, refused, None).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable, "{refused}: {e:?}");
    }
}

#[tokio::test]
async fn a_caller_that_gives_up_leaves_no_half_pull_and_no_stuck_lock() {
    let (env, registry, app) = serving_app("pull-deadline", "deadline");
    let _proxy = throttled(&env, 512 << 10);
    let mut env = env;
    let mut cri = env.start().await;
    let name = "127.0.0.1:5001/test/app:v1";

    let mut request = tonic::Request::new(PullImageRequest { image: Some(image_spec(name)), ..Default::default() });
    request.set_timeout(std::time::Duration::from_millis(500));
    let gave_up = cri.images.pull_image(request).await.unwrap_err();
    assert!(matches!(gave_up.code(), tonic::Code::DeadlineExceeded | tonic::Code::Cancelled), "{gave_up:?}");
    // The pull goes on to its end in the daemon; a new caller joins it.
    assert_eq!(pull(&mut cri, name, None).await.expect("joined or finished"), app.id);
    for digest in &app.layer_digests {
        assert_eq!(registry.blob_gets(digest), 1, "layer {digest}: one download");
    }
    // Nothing stuck: the image can be removed, collected and pulled again.
    cri.remove_image(&app.id).await.unwrap();
    assert!(store_files(&env).is_empty(), "{:?}", store_files(&env));
    assert_eq!(pull(&mut cri, name, None).await.unwrap(), app.id);
}

#[tokio::test]
async fn a_connection_lost_mid_layer_resumes_or_else_starts_again() {
    let (mut env, registry, app) = serving_app("pull-retry", "retry");
    let behaviour = registry::proxy::Behaviour { cut_blobs: 1, ..Default::default() };
    let proxy = registry::proxy::Proxy::start(&env.netns, 5001, 5000, behaviour);
    let mut cri = env.start().await;
    let name = "127.0.0.1:5001/test/app:v1";
    let busybox = &app.layer_digests[0];

    // The busybox layer (the only one above 64 KiB) is cut halfway: the
    // download resumes with a range request for the rest.
    assert_eq!(pull(&mut cri, name, None).await.expect("pulled, resumed"), app.id);
    assert_eq!(registry.blob_gets(busybox), 2);
    assert_eq!(registry.partial_blob_gets(busybox), 1, "the second request asked for the rest only");
    assert!(env.daemon_log().contains("layer download resumed"), "{}", env.daemon_log());

    // A registry that answers a range request whole: the download starts again.
    cri.remove_image(&app.id).await.unwrap();
    assert!(store_files(&env).is_empty(), "{:?}", store_files(&env));
    proxy.set(|b| {
        b.cut_blobs = 1;
        b.ignore_range = true;
    });
    assert_eq!(pull(&mut cri, name, None).await.expect("pulled on the second try"), app.id);
    // Cut, asked for the rest (answered whole, so refused), fetched again.
    assert_eq!(registry.blob_gets(busybox), 5);
    assert_eq!(registry.partial_blob_gets(busybox), 1);
    assert!(env.daemon_log().contains("cannot resume a download"), "{}", env.daemon_log());
    assert!(env.daemon_log().contains("trying again"), "{}", env.daemon_log());
}

#[tokio::test]
async fn a_trickling_registry_fails_the_pull_within_its_window_while_gc_removes_a_removed_image() {
    let (env, registry, app) = serving_app("pull-trickle", "trickle");
    let (dir, gone) = layout(&env, "gone", &small_def("gone"));
    registry.push(&dir, "test/gone:v1", None, None);
    // Half of each layer above 64 KiB at once, then a byte a second: never
    // silent for the stall timeout, far below the minimum rate.
    let behaviour = registry::proxy::Behaviour { trickle_blobs: Some(Duration::from_secs(1)), ..Default::default() };
    let proxy = registry::proxy::Proxy::start(&env.netns, 5001, 5000, behaviour);
    let config =
        config_file(&env, "[registry]\nstall_timeout_secs = 3\nmin_bytes_per_sec = 1024\nmin_rate_window_secs = 4\n");
    let mut env = env.with_args(&["--config", &config]);
    let mut cri = env.start().await;
    assert_eq!(pull(&mut cri, "127.0.0.1:5000/test/gone:v1", None).await.unwrap(), gone.id);
    let before = footprint(&env, "before the trickling pull").await;

    // Two callers: the second joins the first's pull, and both get its end.
    let name = "127.0.0.1:5001/test/app:v1";
    let started = Instant::now();
    let callers: Vec<_> = (0..2)
        .map(|_| {
            let mut cri = cri.clone();
            tokio::spawn(async move { pull(&mut cri, name, None).await })
        })
        .collect();
    wait_in_flight(&mut cri, name).await;
    // Garbage collection is not held off by the pull in flight: the removed
    // image's blobs and layers are gone when RemoveImage answers.
    cri.remove_image(&gone.id).await.unwrap();
    assert_eq!(stored_any_of(&env, &gone), Vec::<String>::new(), "the removed image's files are still there");
    footprint(&env, "while trickling").await;

    for caller in callers {
        let answer = tokio::time::timeout(Duration::from_secs(90), caller)
            .await
            .expect("the trickling pull still runs after 90 s")
            .unwrap();
        let failed = answer.expect_err("a pull slower than the minimum rate fails");
        eprintln!("{} failed after {:?}: {failed:?}", env.name, started.elapsed());
        assert_eq!(failed.code(), tonic::Code::DeadlineExceeded, "{failed:?}");
        let message = failed.message();
        assert!(message.contains(name) && message.contains(&app.layer_digests[0]), "{message}");
        assert!(message.contains("min_bytes_per_sec"), "{message}");
    }
    // The window is 4 s: generously bounded on a loaded machine.
    assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
    assert!(store_files(&env).is_empty(), "the failed pull left {:?}", store_files(&env));
    eventually(10, "the trickling download's connection is still open", || proxy.blobs_sending() == 0).await;
    let after = footprint(&env, "after the trickling pull").await;
    assert_footprint_back(before, after, 32 << 10);
}

#[tokio::test]
async fn a_pull_past_its_deadline_fails_and_leaves_nothing() {
    let (env, _registry, app) = serving_app("pull-deadline-total", "deadline");
    // Well above the minimum rate, but the layers need far longer than the deadline.
    let proxy = throttled(&env, 32 << 10);
    let config = config_file(&env, "[registry]\npull_deadline_secs = 3\n");
    let mut env = env.with_args(&["--config", &config]);
    let mut cri = env.start().await;
    let before = footprint(&env, "before the pull").await;

    let name = "127.0.0.1:5001/test/app:v1";
    let started = Instant::now();
    let failed = pull(&mut cri, name, None).await.expect_err("the pull ends at its deadline");
    eprintln!("{} failed after {:?}: {failed:?}", env.name, started.elapsed());
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    assert_eq!(failed.code(), tonic::Code::DeadlineExceeded, "{failed:?}");
    assert!(failed.message().contains(name) && failed.message().contains("pull_deadline_secs"), "{}", failed.message());
    assert!(store_files(&env).is_empty(), "the expired pull left {:?}", store_files(&env));
    eventually(10, "the expired pull's connection is still open", || proxy.blobs_sending() == 0).await;
    let after = footprint(&env, "after the pull").await;
    assert_footprint_back(before, after, 32 << 10);

    // Without the throttle it fits its deadline.
    proxy.set(|b| b.throttle_bytes_per_sec = None);
    assert_eq!(pull(&mut cri, name, None).await.expect("a pull within its deadline"), app.id);
}

#[tokio::test]
async fn a_pull_whose_callers_all_left_is_cancelled_after_the_grace_period() {
    let (env, registry, app) = serving_app("pull-abandoned", "abandoned");
    let (dir, warm) = layout(&env, "warm", &small_def("warm"));
    registry.push(&dir, "test/warm:v1", None, None);
    // Slow but well above the minimum rate: the pull would take minutes.
    let proxy = throttled(&env, 8 << 10);
    let config = config_file(&env, "[registry]\nabandoned_pull_grace_secs = 3\n");
    let mut env = env.with_args(&["--config", &config]);
    let mut cri = env.start().await;
    // A first pull warms up what the daemon keeps for every pull.
    assert_eq!(pull(&mut cri, "127.0.0.1:5000/test/warm:v1", None).await.unwrap(), warm.id);
    let before = footprint(&env, "before the abandoned pull").await;

    let name = "127.0.0.1:5001/test/app:v1";
    let mut request = tonic::Request::new(PullImageRequest { image: Some(image_spec(name)), ..Default::default() });
    request.set_timeout(Duration::from_secs(2));
    let gave_up = cri.images.pull_image(request).await.unwrap_err();
    assert!(matches!(gave_up.code(), tonic::Code::DeadlineExceeded | tonic::Code::Cancelled), "{gave_up:?}");
    let left_at = Instant::now();
    assert!(proxy.blobs_sending() > 0, "the layer download goes on for its grace period");
    let during = footprint(&env, "within the grace period").await;
    assert!(during.fds > before.fds, "the download's connection is open: {before:?} → {during:?}");

    // No caller came back: the pull is cancelled, its connections closed.
    let mut listed = true;
    while listed {
        listed = pulls_in_flight(&mut cri).await.iter().any(|p| p["image"] == name);
        assert!(left_at.elapsed() < Duration::from_secs(30), "the abandoned pull still runs after 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eventually(10, "the abandoned pull's connection is still open", || proxy.blobs_sending() == 0).await;
    eprintln!("{} cancelled {:?} after its caller left", env.name, left_at.elapsed());
    assert!(env.daemon_log().contains("pull cancelled"), "{}", env.daemon_log());
    assert_eq!(stored_any_of(&env, &app), Vec::<String>::new(), "the cancelled pull left files");
    let after = footprint(&env, "after the grace period").await;
    assert_footprint_back(before, after, 32 << 10);

    // A new caller starts a new pull (it does not join the cancelled one).
    let gets = registry.blob_gets(&app.layer_digests[0]);
    proxy.set(|b| b.throttle_bytes_per_sec = None);
    assert_eq!(pull(&mut cri, name, None).await.expect("pulled anew"), app.id);
    assert_eq!(registry.blob_gets(&app.layer_digests[0]), gets + 1);
}

#[tokio::test]
async fn gc_beside_a_slow_pull_keeps_what_it_holds_and_removes_what_a_failed_pull_left() {
    let (env, registry, app) = serving_app("pull-gc", "gc");
    let (dir, bad) = layout(&env, "bad", &small_def("bad"));
    registry.push(&dir, "test/bad:v1", None, None);
    // The bad image's layer is corrupted in the registry's storage.
    let hex = bad.layer_digests[0].trim_start_matches("sha256:");
    let data = registry.dir.join("data/docker/registry/v2/blobs/sha256").join(&hex[..2]).join(hex).join("data");
    let mut bytes = fs::read(&data).expect("the blob in the registry's storage");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    fs::write(&data, bytes).unwrap();
    let _proxy = throttled(&env, 128 << 10);
    let mut env = env;
    let mut cri = env.start().await;
    let before = footprint(&env, "before the pulls").await;

    let name = "127.0.0.1:5001/test/app:v1";
    let mut background = cri.clone();
    let slow = tokio::spawn(async move { pull(&mut background, name, None).await });
    wait_in_flight(&mut cri, name).await;
    // A failed pull beside it: its garbage collection runs at once and
    // takes what it stored, and nothing the slow pull holds.
    let refused = pull(&mut cri, "127.0.0.1:5000/test/bad:v1", None).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::DataLoss, "{refused:?}");
    assert_eq!(stored_any_of(&env, &bad), Vec::<String>::new(), "the failed pull's files are still there");
    assert!(!slow.is_finished(), "the slow pull ended before the failed one was collected");

    // The slow pull is whole: every layer stored and unpacked, and it runs.
    assert_eq!(slow.await.unwrap().expect("the slow pull"), app.id);
    let stored = store_files(&env);
    for digest in app.layer_digests.iter().chain(&app.diff_ids) {
        assert!(stored.iter().any(|f| f.ends_with(digest.trim_start_matches("sha256:"))), "{digest} missing");
    }
    let pod_config = env.pod("kept");
    let pod = cri.run_pod(pod_config.clone()).await.unwrap();
    let config = container_config("c", name, &["sh", "-c", "cat /etc/zstd-layer /etc/plain-layer"]);
    let container = cri.run_container(&pod, &pod_config, config).await;
    assert_eq!(cri.wait_exited(&container, 20).await.exit_code, 0);
    cri.remove_container(&container).await.unwrap();
    cri.stop_pod(&pod).await.unwrap();
    cri.remove_pod(&pod).await.unwrap();
    cri.remove_image(&app.id).await.unwrap();
    assert!(store_files(&env).is_empty(), "{:?}", store_files(&env));
    let after = footprint(&env, "after the pulls").await;
    assert_footprint_back(before, after, 32 << 10);
    env.assert_no_leftovers();
}

#[tokio::test]
async fn answers_over_their_caps_and_a_nested_index_are_refused_as_permanent() {
    let (env, _registry, app) = serving_app("pull-refused", "refused");
    let nested_digest = images::sha256(b"a nested index");
    let top_index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "digest": nested_digest,
            "size": 100,
            "platform": {"architecture": images::host_arch(), "os": "linux"},
        }],
    });
    let canned = |path: &str, content_type: &str, body: Vec<u8>| registry::proxy::Canned {
        path: path.into(),
        content_type: content_type.into(),
        body,
    };
    let oci_manifest = "application/vnd.oci.image.manifest.v1+json";
    let behaviour = registry::proxy::Behaviour {
        canned: vec![
            canned("/v2/test/huge/manifests/", oci_manifest, vec![b' '; 5 << 20]),
            canned(
                "/v2/test/nested/manifests/",
                "application/vnd.oci.image.index.v1+json",
                serde_json::to_vec(&top_index).unwrap(),
            ),
        ],
        ..Default::default()
    };
    let _plain = registry::proxy::Proxy::start(&env.netns, 5001, 5000, behaviour);
    // A token service whose answer is 10 MB.
    let behaviour = registry::proxy::Behaviour {
        bearer: Some(("alice".into(), "wonder-pw".into(), "tok".into())),
        canned: vec![canned("/token", "application/json", vec![b' '; 10_000_000])],
        ..Default::default()
    };
    let _tokens = registry::proxy::Proxy::start(&env.netns, 5002, 5000, behaviour);
    let mut env = env;
    let mut cri = env.start().await;
    assert_eq!(pull(&mut cri, "127.0.0.1:5000/test/app:v1", None).await.unwrap(), app.id);
    let before = footprint(&env, "before the refusals").await;

    let huge = pull(&mut cri, "127.0.0.1:5001/test/huge:v1", None).await.unwrap_err();
    assert_eq!(huge.code(), tonic::Code::FailedPrecondition, "{huge:?}");
    assert!(huge.message().contains("test/huge:v1") && huge.message().contains("4194304 bytes"), "{}", huge.message());

    let token = pull(&mut cri, "127.0.0.1:5002/test/app:v1", basic("alice", "wonder-pw")).await.unwrap_err();
    assert_eq!(token.code(), tonic::Code::FailedPrecondition, "{token:?}");
    assert!(token.message().contains("token") && token.message().contains("1048576 bytes"), "{}", token.message());

    let nested = pull(&mut cri, "127.0.0.1:5001/test/nested:v1", None).await.unwrap_err();
    assert_eq!(nested.code(), tonic::Code::FailedPrecondition, "{nested:?}");
    let message = nested.message();
    assert!(message.contains(&nested_digest) && message.contains("index"), "{message}");
    assert!(!message.contains("it offers"), "{message}");

    for refused in [&huge, &token, &nested] {
        eprintln!("{} refused: {:?}: {}", env.name, refused.code(), refused.message());
    }
    assert_eq!(cri.list_images(None).await.unwrap().len(), 1);
    let after = footprint(&env, "after the refusals").await;
    assert_footprint_back(before, after, 32 << 10);
}
