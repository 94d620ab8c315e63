//! CheckpointPod and RestorePod with the real CRIU and the built-in pod
//! network: a pod of a counter and a web server checkpointed into one
//! root-only archive, removed, and restored here and by a second nidus
//! standing for another node (the count goes on, the server answers on the
//! new address); what cannot be checkpointed and archives that are corrupt,
//! truncated, hand-edited or newer are refused, making nothing; a daemon
//! killed during either call leaves no archive and no pod, and both can be
//! made again.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::client::container_config;
use common::counter::{first_count, tar_list, wait_for_count, COUNTER, MANY};
use common::{Cri, TestEnv, Up};
use nidus::api::*;

/// A test environment with the built-in pod network on `cidr`.
fn networked(label: &str, cidr: &str) -> TestEnv {
    let env = TestEnv::new(label);
    let config = env.base.join("nidus.toml");
    fs::create_dir_all(env.base.join("net.d")).unwrap();
    fs::write(
        &config,
        format!(
            "[network]\ncni_conf_dir = \"{}\"\nbuiltin = \"auto\"\npod_cidr = \"{cidr}\"\nmasquerade = false\n",
            env.base.join("net.d").display()
        ),
    )
    .unwrap();
    env.with_args(&["--config", config.to_str().unwrap()])
}

const WEB: &str =
    "mkdir -p /tmp/www && echo hello-from-the-pod > /tmp/www/index.html && exec busybox httpd -f -p 8080 -h /tmp/www";

async fn checkpoint_pod(cri: &mut Cri, pod_id: &str, output: &Path) -> Result<(), tonic::Status> {
    cri.runtime
        .checkpoint_pod(CheckpointPodRequest {
            pod_sandbox_id: pod_id.into(),
            output_path: output.display().to_string(),
            ..Default::default()
        })
        .await?;
    Ok(())
}

/// RestorePod with the pod's config but its logs in `log_directory` (as a
/// kubelet gives a new pod).
async fn restore_pod(
    cri: &mut Cri,
    archive: &Path,
    pod: &PodSandboxConfig,
    log_directory: &Path,
) -> Result<RestorePodResponse, tonic::Status> {
    fs::create_dir_all(log_directory).unwrap();
    let mut config = pod.clone();
    config.log_directory = log_directory.display().to_string();
    Ok(cri
        .runtime
        .restore_pod(RestorePodRequest {
            checkpoint_path: archive.display().to_string(),
            config: Some(config),
            ..Default::default()
        })
        .await?
        .into_inner())
}

async fn pod_ip(cri: &mut Cri, id: &str) -> String {
    cri.pod_status(id).await.unwrap().status.unwrap().network.unwrap().ip
}

fn staging_left(env: &TestEnv) -> Vec<PathBuf> {
    fs::read_dir(env.root.join("pod-checkpoints")).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default()
}

async fn pods(cri: &mut Cri) -> Vec<String> {
    cri.list_pods(None).await.into_iter().map(|p| p.id).collect()
}

/// Restored containers' ids by name.
fn restored(response: &RestorePodResponse) -> Vec<(String, String)> {
    response.restored_containers.iter().map(|c| (c.name.clone(), c.container_id.clone())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_moves_through_one_archive_here_and_to_another_node() {
    let Up { env, mut cri, image, pod, pod_id } = networked("podckpt", "10.94.0.0/24").up("mover").await;
    let counter = cri.run_container(&pod_id, &pod, container_config("counter", &image, &["sh", "-c", COUNTER])).await;
    cri.run_container(&pod_id, &pod, container_config("web", &image, &["sh", "-c", WEB])).await;
    let first_ip = pod_ip(&mut cri, &pod_id).await;
    assert_eq!(env.fetch_from_node(&first_ip, 8080).await.trim(), "hello-from-the-pod");
    let seen = wait_for_count(&mut cri, &counter, 3).await;

    let archive = env.base.join("archives/pod.tar");
    checkpoint_pod(&mut cri, &pod_id, &archive).await.expect("CheckpointPod");
    assert_eq!(fs::metadata(&archive).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(fs::metadata(archive.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(tar_list(&archive), vec!["pod.json", "containers/0-counter.tar", "containers/1-web.tar"]);
    // Each container's archive is the one CheckpointContainer writes.
    let unpacked = env.base.join("unpacked");
    fs::create_dir_all(&unpacked).unwrap();
    common::host::run("tar", &["-xf", archive.to_str().unwrap(), "-C", unpacked.to_str().unwrap()]);
    let inner = tar_list(&unpacked.join("containers/0-counter.tar"));
    assert!(
        inner.iter().any(|e| e == "config.dump") && inner.iter().any(|e| e.starts_with("checkpoint/")),
        "{inner:?}"
    );
    let manifest: serde_json::Value = serde_json::from_slice(&fs::read(unpacked.join("pod.json")).unwrap()).unwrap();
    assert_eq!(manifest["version"], 1);
    assert_eq!(manifest["pod"]["config"]["metadata"]["name"], "mover");
    assert_eq!(manifest["pod"]["ips"][0], first_ip.as_str());
    assert!(manifest["consistency"].as_str().unwrap().contains("per-container"));
    // The pod still runs: a checkpoint leaves it as it was.
    assert!(wait_for_count(&mut cri, &counter, seen + 2).await > seen);
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();

    // Restored here: new ids, the count goes on, the server answers at the new address.
    let response = restore_pod(&mut cri, &archive, &pod, &env.base.join("logs-here")).await.expect("RestorePod");
    assert_ne!(response.pod_sandbox_id, pod_id);
    let names: Vec<String> = restored(&response).into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["counter", "web"]);
    let new_counter = &response.restored_containers[0].container_id;
    assert_ne!(new_counter, &counter);
    assert!(first_count(&mut cri, new_counter).await > seen, "the count goes on from where it was");
    let ip = pod_ip(&mut cri, &response.pod_sandbox_id).await;
    assert!(ip.starts_with("10.94.0."), "{ip}");
    assert_eq!(env.fetch_from_node(&ip, 8080).await.trim(), "hello-from-the-pod");
    assert_eq!(
        cri.status_of(&response.restored_containers[1].container_id).await.state(),
        ContainerState::ContainerRunning
    );
    cri.stop_pod(&response.pod_sandbox_id).await.unwrap();
    cri.remove_pod(&response.pod_sandbox_id).await.unwrap();

    // Restored by another node: its own root, state, network namespace and pod CIDR.
    let mut other = networked("podckpt2", "10.93.0.0/24");
    let mut there = other.start().await;
    other.import_busybox(&mut there).await;
    let response =
        restore_pod(&mut there, &archive, &pod, &other.base.join("logs-there")).await.expect("RestorePod there");
    let ip = pod_ip(&mut there, &response.pod_sandbox_id).await;
    assert!(ip.starts_with("10.93.0."), "{ip}");
    assert_eq!(other.fetch_from_node(&ip, 8080).await.trim(), "hello-from-the-pod");
    assert!(first_count(&mut there, &response.restored_containers[0].container_id).await > seen);
    there.stop_pod(&response.pod_sandbox_id).await.unwrap();
    there.remove_pod(&response.pod_sandbox_id).await.unwrap();
    assert!(staging_left(&env).is_empty() && staging_left(&other).is_empty());
    other.assert_no_leftovers();
    env.assert_no_leftovers();
}

/// A tar of (name, bytes), written raw so that any name gets in.
fn tar_of(entries: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, data) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o600);
        header.set_entry_type(tar::EntryType::Regular);
        header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        header.set_cksum();
        builder.append(&header, data.as_slice()).unwrap();
    }
    builder.into_inner().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_be_checkpointed_or_restored_is_refused_and_nothing_is_made() {
    let Up { env, mut cri, image, pod, pod_id } = TestEnv::new("podckptbad").up("some").await;
    let counter = cri.run_container(&pod_id, &pod, container_config("counter", &image, &["sh", "-c", COUNTER])).await;
    let out = env.base.join("out/pod.tar");
    let code = |r: Result<(), tonic::Status>| r.map_err(|s| (s.code(), s.message().to_string())).unwrap_err();

    let (c, m) = code(checkpoint_pod(&mut cri, &pod_id, Path::new("relative/pod.tar")).await);
    assert!(c == tonic::Code::InvalidArgument && m.contains("output_path"), "{m}");
    let (c, _) = code(checkpoint_pod(&mut cri, "0123456789abcdef", &out).await);
    assert_eq!(c, tonic::Code::NotFound);
    let other_pod = env.pod("other");
    let other_id = cri.run_pod(other_pod.clone()).await.unwrap();
    let stranger = cri.run_container(&other_id, &other_pod, container_config("s", &image, &["sleep", "1000"])).await;
    let asked = cri
        .runtime
        .checkpoint_pod(CheckpointPodRequest {
            pod_sandbox_id: pod_id.clone(),
            output_path: out.display().to_string(),
            container_ids: vec![stranger.clone()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(asked.code() == tonic::Code::InvalidArgument && asked.message().contains("container_ids[0]"), "{asked:?}");
    // A container that has ended, and a pod on the node's network.
    let ended = cri.run_container(&pod_id, &pod, container_config("ended", &image, &["true"])).await;
    cri.wait_exited(&ended, 10).await;
    let (c, m) = code(checkpoint_pod(&mut cri, &pod_id, &out).await);
    assert!(c == tonic::Code::FailedPrecondition && m.contains("exited"), "{m}");
    cri.remove_container(&ended).await.unwrap();
    let mut host_pod = env.pod("host");
    host_pod.linux.as_mut().unwrap().security_context.as_mut().unwrap().namespace_options.as_mut().unwrap().network =
        NamespaceMode::Node as i32;
    let host_id = cri.run_pod(host_pod.clone()).await.unwrap();
    cri.run_container(&host_id, &host_pod, container_config("h", &image, &["sleep", "1000"])).await;
    let (c, m) = code(checkpoint_pod(&mut cri, &host_id, &out).await);
    assert!(c == tonic::Code::FailedPrecondition && m.contains("node's network"), "{m}");
    assert!(!out.exists(), "no archive after a refusal");
    assert!(staging_left(&env).is_empty());

    // Archives that are not what a checkpoint wrote.
    let good = env.base.join("good.tar");
    checkpoint_pod(&mut cri, &pod_id, &good).await.expect("CheckpointPod");
    let bytes = fs::read(&good).unwrap();
    let manifest: serde_json::Value = {
        let unpacked = env.base.join("good");
        fs::create_dir_all(&unpacked).unwrap();
        common::host::run("tar", &["-xf", good.to_str().unwrap(), "-C", unpacked.to_str().unwrap()]);
        serde_json::from_slice(&fs::read(unpacked.join("pod.json")).unwrap()).unwrap()
    };
    let container_tar = {
        let unpacked = env.base.join("good/containers/0-counter.tar");
        fs::read(unpacked).unwrap()
    };
    let mut newer = manifest.clone();
    newer["version"] = serde_json::json!(2);
    let mut escaping = manifest.clone();
    escaping["containers"][0]["archive"] = serde_json::json!("../../../etc/passwd");
    let json = |v: &serde_json::Value| serde_json::to_vec(v).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("corrupt", vec![0x5a; 8192], ""),
        ("truncated", bytes[..bytes.len() / 2].to_vec(), ""),
        ("newer", tar_of(&[("pod.json", json(&newer)), ("containers/0-counter.tar", container_tar.clone())]), "newer"),
        ("escaping entry", tar_of(&[("pod.json", json(&manifest)), ("../../x.tar", container_tar.clone())]), "outside"),
        ("manifest pointing out", tar_of(&[("pod.json", json(&escaping))]), "entry is"),
        (
            "an extra entry",
            {
                let mut entries =
                    vec![("pod.json", json(&manifest)), ("containers/0-counter.tar", container_tar.clone())];
                entries.push(("containers/9-evil.tar", b"x".to_vec()));
                tar_of(&entries)
            },
            "not one pod.json names",
        ),
    ];
    let before = pods(&mut cri).await;
    for (what, content, says) in cases {
        let path = env.base.join(format!("{}.tar", what.replace(' ', "-")));
        fs::write(&path, content).unwrap();
        let err = restore_pod(&mut cri, &path, &pod, &env.base.join("logs")).await.expect_err(what);
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{what}: {err:?}");
        assert!(err.message().contains("checkpoint_path") && err.message().contains(says), "{what}: {err:?}");
        assert_eq!(pods(&mut cri).await, before, "{what}: no pod made");
        assert!(staging_left(&env).is_empty(), "{what}: nothing unpacked left");
    }
    let err = restore_pod(&mut cri, &env.base.join("missing.tar"), &pod, &env.base.join("logs")).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    let _ = counter;
    for id in [&pod_id, &other_id, &host_id] {
        cri.stop_pod(id).await.unwrap();
        cri.remove_pod(id).await.unwrap();
    }
    env.assert_no_leftovers();
}

/// Waits until `ready` holds, up to 60 s.
async fn until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(Instant::now() < deadline, "{what} within 60 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_during_either_call_leaves_no_archive_and_no_pod() {
    let Up { mut env, mut cri, image, pod, pod_id } = TestEnv::new("podckptkill").up("slow").await;
    let many = cri.run_container(&pod_id, &pod, container_config("many", &image, &["sh", "-c", MANY])).await;
    cri.wait_for_line(&many, "ready", 60).await;
    let archive = env.base.join("out/pod.tar");

    // Killed while CRIU dumps the thousand processes.
    let mut caller = cri.clone();
    let (pod_for, archive_for) = (pod_id.clone(), archive.clone());
    let call = tokio::spawn(async move { checkpoint_pod(&mut caller, &pod_for, &archive_for).await });
    until("the pod checkpoint's staging", || !staging_left(&env).is_empty()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.kill_daemon();
    let _ = call.await;
    let mut cri = env.start().await;
    assert!(!archive.exists(), "no half archive");
    assert!(staging_left(&env).is_empty(), "the staging went at start");
    assert_eq!(cri.status_of(&many).await.state(), ContainerState::ContainerRunning);
    // Again, once the orphaned CRIU has ended.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match checkpoint_pod(&mut cri, &pod_id, &archive).await {
            Ok(()) => break,
            Err(s) if s.code() == tonic::Code::FailedPrecondition && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            Err(s) => panic!("the retried CheckpointPod: {s:?}"),
        }
    }
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();

    // Killed while CRIU restores them: the pod made goes at the next start.
    let mut caller = cri.clone();
    let (archive_for, pod_for, logs) = (archive.clone(), pod.clone(), env.base.join("logs-1"));
    let call = tokio::spawn(async move { restore_pod(&mut caller, &archive_for, &pod_for, &logs).await });
    let deadline = Instant::now() + Duration::from_secs(60);
    while pods(&mut cri).await.is_empty() {
        assert!(Instant::now() < deadline, "RestorePod made no pod within 60 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.kill_daemon();
    let _ = call.await;
    let mut cri = env.start().await;
    assert!(pods(&mut cri).await.is_empty(), "no half pod after the restart");
    assert!(cri.list_containers(None).await.is_empty());
    assert!(staging_left(&env).is_empty());
    let response =
        restore_pod(&mut cri, &archive, &pod, &env.base.join("logs-2")).await.expect("the retried RestorePod");
    let restored = &response.restored_containers[0].container_id;
    assert_eq!(cri.status_of(restored).await.state(), ContainerState::ContainerRunning);
    cri.stop_pod(&response.pod_sandbox_id).await.unwrap();
    cri.remove_pod(&response.pod_sandbox_id).await.unwrap();
    env.assert_no_leftovers();
}
