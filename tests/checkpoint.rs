//! CheckpointContainer and restore through CreateContainer, with the real
//! CRIU (scripts/install-criu): the archive's mode and layout, a counter that
//! continues its count in a new sandbox, rootfs changes carried over, the
//! refusals (stopped container, bad locations, timeout) and a daemon killed
//! mid-checkpoint.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use common::client::{container_config, log_lines};
use common::{host, Cri, TestEnv};
use nidus::api::*;

const COUNTER: &str = "i=0; while true; do echo count $i; i=$((i+1)); sleep 0.2; done";
/// A thousand processes, then a counter: CRIU dumps each process, which takes seconds.
const MANY: &str =
    "for i in $(seq 1000); do sleep 1000 & done; echo ready; while true; do echo count $i; i=$((i+1)); sleep 0.2; done";

async fn checkpoint(cri: &mut Cri, id: &str, location: &Path, timeout: i64) -> Result<(), tonic::Status> {
    cri.runtime
        .checkpoint_container(CheckpointContainerRequest {
            container_id: id.into(),
            location: location.display().to_string(),
            timeout,
        })
        .await?;
    Ok(())
}

/// The counts the container printed so far.
async fn counts(cri: &mut Cri, id: &str) -> Vec<u64> {
    log_lines(&cri.logs(id).await, "stdout")
        .iter()
        .filter_map(|l| l.strip_prefix("count ").and_then(|n| n.trim().parse().ok()))
        .collect()
}

async fn wait_for_count(cri: &mut Cri, id: &str, at_least: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(&last) = counts(cri, id).await.last() {
            if last >= at_least {
                return last;
            }
        }
        assert!(Instant::now() < deadline, "container {id} did not count to {at_least}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The first count a (restored) container prints.
async fn first_count(cri: &mut Cri, id: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(&first) = counts(cri, id).await.first() {
            return first;
        }
        assert!(Instant::now() < deadline, "container {id} printed no count");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn tar_list(archive: &Path) -> Vec<String> {
    let out = std::process::Command::new("tar").arg("-tf").arg(archive).output().expect("tar");
    assert!(out.status.success(), "tar -tf {}: {}", archive.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect()
}

/// An OCI image layout like `buildah add … checkpoint.tar /` + the CRI-O
/// checkpoint annotation makes: one uncompressed layer holding the archive's
/// contents (the archive itself is that layer's tar).
fn write_checkpoint_image(dir: &Path, archive: &Path, name: &str) {
    use common::images::sha256;
    let blob = |data: &[u8]| {
        let digest = sha256(data);
        fs::write(dir.join("blobs/sha256").join(digest.trim_start_matches("sha256:")), data).unwrap();
        digest
    };
    fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
    fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let layer = fs::read(archive).unwrap();
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": common::images::host_arch(),
        "os": "linux",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": [sha256(&layer)]},
    }))
    .unwrap();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": blob(&config), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": blob(&layer), "size": layer.len()}],
        "annotations": {"io.kubernetes.cri-o.annotations.checkpoint.name": "counter"},
    }))
    .unwrap();
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": blob(&manifest),
            "size": manifest.len(),
            "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": "latest"},
        }],
    });
    fs::write(dir.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
}

#[tokio::test]
async fn a_counter_is_checkpointed_while_running_and_restored_in_a_new_sandbox() {
    let mut env = TestEnv::new("ckpt");
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let pod = env.pod("counter");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let id = cri.run_container(&pod_id, &pod, container_config("counter", &image, &["sh", "-c", COUNTER])).await;
    cri.exec_ok(&id, &["sh", "-c", "echo kept > /data.txt && rm /etc/nidus-image"]).await;
    let before = wait_for_count(&mut cri, &id, 3).await;

    let archive = env.base.join("checkpoints/new-dir/counter.tar");
    let started = Instant::now();
    checkpoint(&mut cri, &id, &archive, 0).await.expect("CheckpointContainer");
    let took = started.elapsed();
    let meta = fs::metadata(&archive).expect("the archive exists");
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600, "archive mode");
    assert_eq!((meta.uid(), meta.gid()), (0, 0), "archive owner");
    assert_eq!(fs::metadata(archive.parent().unwrap()).unwrap().permissions().mode() & 0o7777, 0o700);
    let entries = tar_list(&archive);
    for wanted in [
        "config.dump",
        "spec.dump",
        "checkpoint/",
        "rootfs-diff.tar",
        "deleted.files",
        "container.log",
        "stats-dump",
        "dump.log",
    ] {
        assert!(
            entries
                .iter()
                .any(|e| e == wanted || e.starts_with(&format!("{wanted}/")) || e == wanted.trim_end_matches('/')),
            "{wanted} missing from {entries:?}"
        );
    }
    assert!(entries.iter().any(|e| e.starts_with("checkpoint/") && e.ends_with(".img")), "CRIU images in {entries:?}");
    let checkpointed_at = counts(&mut cri, &id).await.last().copied().unwrap();
    let original_ref = cri.status_of(&id).await.image_ref;
    assert_eq!(
        cri.status_of(&id).await.state(),
        ContainerState::ContainerRunning,
        "still running after the checkpoint"
    );
    wait_for_count(&mut cri, &id, checkpointed_at + 2).await;

    // Restore into a new sandbox: the count goes on from where it was.
    let pod2 = env.pod("restored");
    let pod2_id = cri.run_pod(pod2.clone()).await.unwrap();
    let started = Instant::now();
    let restored = cri
        .create_container(&pod2_id, &pod2, container_config("restored", &archive.display().to_string(), &[]))
        .await
        .expect("CreateContainer from the checkpoint archive");
    assert_eq!(cri.status_of(&restored).await.state(), ContainerState::ContainerCreated);
    cri.start_container(&restored).await.expect("StartContainer of the restored container");
    let restore_took = started.elapsed();
    assert_eq!(cri.status_of(&restored).await.state(), ContainerState::ContainerRunning);
    let first = first_count(&mut cri, &restored).await;
    assert!(
        first >= before && first <= checkpointed_at + 1,
        "restored count starts at {first}, checkpointed between {before} and {checkpointed_at}"
    );
    wait_for_count(&mut cri, &restored, first + 3).await;
    assert_eq!(cri.exec_ok(&restored, &["cat", "/data.txt"]).await, "kept\n", "a file written before the checkpoint");
    let gone = cri.exec(&restored, &["test", "-e", "/etc/nidus-image"], 10).await.unwrap();
    assert_ne!(gone.exit_code, 0, "a file deleted before the checkpoint stays deleted");
    assert_eq!(cri.exec_ok(&restored, &["cat", "/etc/hostname"]).await, "restored\n", "the new sandbox's files");
    assert_eq!(cri.exec_ok(&restored, &["hostname"]).await, "restored\n", "the new sandbox's UTS namespace");
    // In the new sandbox's namespaces and the new container's cgroup, with
    // only stdio open, its own PID namespace with the counter as its init.
    let init = cri.container_pid(&restored).await;
    let pause = cri.pause_pid(&pod2_id).await;
    for kind in ["net", "ipc", "uts"] {
        assert_eq!(host::namespace(init, kind), host::namespace(pause, kind), "{kind} is the new pod's");
    }
    let memcg = host::cgroup_of(init, "memory").or_else(|| host::cgroup_of(init, "")).unwrap();
    assert!(memcg.ends_with(&restored), "restored init in cgroup {memcg}");
    let fds = cri.exec_ok(&restored, &["ls", "/proc/1/fd"]).await;
    assert_eq!(fds.split_whitespace().collect::<Vec<_>>(), vec!["0", "1", "2"], "fds of the restored process");
    let cmdline = cri.exec_ok(&restored, &["cat", "/proc/1/cmdline"]).await;
    assert!(cmdline.contains("count"), "PID 1 is the counter: {cmdline:?}");

    // The same checkpoint as an OCI image (CRI-O's annotation) restores too.
    let layout = env.base.join("checkpoint-image");
    write_checkpoint_image(&layout, &archive, "localhost/checkpoint-counter:latest");
    let out = env.image_import(&layout, None);
    assert!(out.status.success(), "importing the checkpoint image: {}", String::from_utf8_lossy(&out.stderr));
    let pod3 = env.pod("from-image");
    let pod3_id = cri.run_pod(pod3.clone()).await.unwrap();
    let from_image = cri
        .run_container(&pod3_id, &pod3, container_config("from-image", "localhost/checkpoint-counter:latest", &[]))
        .await;
    let first_from_image = first_count(&mut cri, &from_image).await;
    assert!(
        first_from_image >= before && first_from_image <= checkpointed_at + 1,
        "count from the image starts at {first_from_image}"
    );
    assert_eq!(cri.exec_ok(&from_image, &["cat", "/data.txt"]).await, "kept\n");
    let image_status = cri.status_of(&from_image).await;
    assert_eq!(image_status.image_ref, original_ref, "runs the checkpointed container's image");
    cri.stop_container(&from_image, 0).await.unwrap();
    cri.remove_container(&from_image).await.unwrap();
    cri.stop_pod(&pod3_id).await.unwrap();
    cri.remove_pod(&pod3_id).await.unwrap();

    // An ordinary container from here on: a second checkpoint, stats, stop, remove.
    let second = env.base.join("checkpoints/second.tar");
    checkpoint(&mut cri, &restored, &second, 0).await.expect("a second checkpoint of the restored container");
    assert!(second.exists());
    cri.container_stats(&restored).await.expect("stats of the restored container");
    cri.stop_container(&restored, 5).await.unwrap();
    assert_eq!(cri.status_of(&restored).await.state(), ContainerState::ContainerExited);
    cri.remove_container(&restored).await.unwrap();
    cri.stop_container(&id, 5).await.unwrap();
    cri.remove_container(&id).await.unwrap();
    for pod in [&pod_id, &pod2_id] {
        cri.stop_pod(pod).await.unwrap();
        cri.remove_pod(pod).await.unwrap();
    }
    env.assert_no_leftovers();
    let dump = std::process::Command::new("tar").arg("-xOf").arg(&archive).arg("config.dump").output().unwrap();
    let dump: serde_json::Value = serde_json::from_slice(&dump.stdout).expect("config.dump is JSON");
    let image_id = cri.image(&image).await.unwrap().id;
    assert_eq!(dump["rootfsImageRef"], image_id.as_str(), "config.dump names the image");
    eprintln!(
        "checkpoint: {took:?} (criu dump {} ms, images {} bytes), archive {} bytes; restore (create + start): {restore_took:?}",
        dump["nidus"]["dumpMs"], dump["nidus"]["imagesBytes"], meta.len()
    );
}

#[tokio::test]
async fn checkpoints_are_refused_for_stopped_containers_and_bad_locations() {
    let mut env = TestEnv::new("ckptno");
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let pod = env.pod("refusals");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let id = cri.run_container(&pod_id, &pod, container_config("sleeper", &image, &["sleep", "1000"])).await;

    let relative = checkpoint(&mut cri, &id, Path::new("relative/ckpt.tar"), 0).await.unwrap_err();
    assert_eq!(relative.code(), tonic::Code::InvalidArgument, "{relative:?}");
    assert!(relative.message().contains("location"), "{relative:?}");
    let dotdot = checkpoint(&mut cri, &id, &env.base.join("a/../ckpt.tar"), 0).await.unwrap_err();
    assert_eq!(dotdot.code(), tonic::Code::InvalidArgument, "{dotdot:?}");

    // A symlink planted on the way, or at the location itself, is never followed.
    let elsewhere = env.base.join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, env.base.join("linked")).unwrap();
    let through = checkpoint(&mut cri, &id, &env.base.join("linked/ckpt.tar"), 0).await.unwrap_err();
    assert_eq!(through.code(), tonic::Code::InvalidArgument, "{through:?}");
    assert!(through.message().contains("symlink"), "{through:?}");
    let planted = env.base.join("planted.tar");
    std::os::unix::fs::symlink(elsewhere.join("victim.tar"), &planted).unwrap();
    let at = checkpoint(&mut cri, &id, &planted, 0).await.unwrap_err();
    assert_eq!(at.code(), tonic::Code::InvalidArgument, "{at:?}");
    assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing written through a symlink");

    let unknown = checkpoint(&mut cri, "0123456789ab", &env.base.join("x.tar"), 0).await.unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound, "{unknown:?}");

    // The operator CLI: the same calls on the socket.
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(common::nidus_bin())
            .args(args)
            .arg("--socket")
            .arg(&env.socket)
            .output()
            .expect("running nidus");
        assert!(out.status.success(), "nidus {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let by_cli = env.base.join("cli/sleeper.tar");
    cli(&["checkpoint", &id, by_cli.to_str().unwrap(), "--timeout", "60"]);
    assert_eq!(fs::metadata(&by_cli).unwrap().permissions().mode() & 0o777, 0o600);
    let restored = cli(&["restore", by_cli.to_str().unwrap(), "--pod", &pod_id, "--name", "sleeper-again"]);
    let status = cri.status_of(&restored).await;
    assert_eq!(status.state(), ContainerState::ContainerRunning);
    assert_eq!(status.metadata.unwrap().name, "sleeper-again");
    cri.stop_container(&restored, 0).await.unwrap();
    cri.remove_container(&restored).await.unwrap();

    cri.stop_container(&id, 5).await.unwrap();
    let stopped = checkpoint(&mut cri, &id, &env.base.join("stopped.tar"), 0).await.unwrap_err();
    assert_eq!(stopped.code(), tonic::Code::FailedPrecondition, "{stopped:?}");
    assert!(!env.base.join("stopped.tar").exists());
    cri.remove_container(&id).await.unwrap();
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn a_checkpoint_past_its_timeout_is_abandoned_and_the_container_keeps_running() {
    let mut env = TestEnv::new("ckptslow");
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let pod = env.pod("slow");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let id = cri.run_container(&pod_id, &pod, container_config("many", &image, &["sh", "-c", MANY])).await;
    cri.wait_for_line(&id, "ready", 60).await;
    let processes = |text: String| text.split_whitespace().count();
    let before = processes(cri.exec_ok(&id, &["sh", "-c", "echo /proc/[0-9]*"]).await);
    assert!(before > 1000, "{before} processes");
    let archive = env.base.join("slow/ckpt.tar");
    let started = Instant::now();
    let err = checkpoint(&mut cri, &id, &archive, 1).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(15), "the timeout was not honoured: {:?}", started.elapsed());
    assert!(!archive.exists(), "no archive after a timeout");
    let leftovers = host::names_in(archive.parent().unwrap());
    assert!(leftovers.is_empty(), "no temporary archive left: {leftovers:?}");
    assert_eq!(cri.status_of(&id).await.state(), ContainerState::ContainerRunning);
    // Nothing left stopped, traced or holding CRIU's parasite. The counting
    // loop's `sleep 0.2` may end between the glob and its read: cat goes on.
    let states = cri.exec_ok(&id, &["sh", "-c", "cat /proc/[0-9]*/status 2>/dev/null || true"]).await;
    let read = states.lines().filter(|l| l.starts_with("State:")).count();
    assert!(read >= before - 5, "the states of {read} processes read, of {before}");
    let tracers: Vec<&str> =
        states.lines().filter(|l| l.starts_with("TracerPid:") && l.split_whitespace().nth(1) != Some("0")).collect();
    assert!(tracers.is_empty(), "traced processes after the abandoned dump: {tracers:?}");
    let stopped: Vec<&str> = states
        .lines()
        .filter(|l| l.starts_with("State:") && (l.contains("(stopped)") || l.contains("(tracing stop)")))
        .collect();
    assert!(stopped.is_empty(), "stopped processes after the abandoned dump: {stopped:?}");
    let after = processes(cri.exec_ok(&id, &["sh", "-c", "echo /proc/[0-9]*"]).await);
    assert!(after >= before - 2, "processes lost by the abandoned dump: {before} before, {after} after");
    // Not frozen: it goes on counting.
    let last = counts(&mut cri, &id).await.last().copied().unwrap_or(0);
    wait_for_count(&mut cri, &id, last + 3).await;
    cri.stop_container(&id, 0).await.unwrap();
    cri.remove_container(&id).await.unwrap();
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn a_criu_too_old_for_the_kernel_is_named_with_the_version_needed() {
    let dir = std::env::temp_dir().join(format!("nidus-old-criu-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let fake = dir.join("criu");
    fs::write(&fake, "#!/bin/sh\necho 'Version: 3.17.1'\n").unwrap();
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();
    let config = dir.join("config.toml");
    fs::write(&config, format!("[checkpoint]\ncriu_binary = {:?}\n", fake.display().to_string())).unwrap();
    let mut env = TestEnv::new("ckptold").with_args(&["--config", config.to_str().unwrap()]);
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let pod = env.pod("old");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let id = cri.run_container(&pod_id, &pod, container_config("sleeper", &image, &["sleep", "1000"])).await;
    let err = checkpoint(&mut cri, &id, &env.base.join("old.tar"), 0).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("3.17.1") && err.message().contains("4.1"), "found and needed: {err:?}");
    assert!(!env.base.join("old.tar").exists());
    assert_eq!(cri.status_of(&id).await.state(), ContainerState::ContainerRunning);
    cri.stop_container(&id, 0).await.unwrap();
    cri.remove_container(&id).await.unwrap();
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
    let _ = fs::remove_dir_all(&dir);
}

/// The CRIU processes (found by their command line) working in `base`.
fn criu_working_in(base: &Path) -> Vec<i32> {
    let base = base.display().to_string();
    host::processes()
        .into_iter()
        .filter(|pid| {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            cmdline.contains("dump") && cmdline.contains(&base) && cmdline.contains("checkpoint-staging")
        })
        .collect()
}

// Two threads: the test watches the archive's directory while the request runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_while_checkpointing_leaves_the_container_running_and_no_partial_archive() {
    let mut env = TestEnv::new("ckptkill");
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let pod = env.pod("killed");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let id = cri.run_container(&pod_id, &pod, container_config("counter", &image, &["sh", "-c", COUNTER])).await;
    wait_for_count(&mut cri, &id, 1).await;
    // Two checkpoints undisturbed, to learn how long one takes here (the
    // first also finds CRIU and probes the kernel).
    let mut whole = Duration::ZERO;
    for name in ["first", "second"] {
        let started = Instant::now();
        checkpoint(&mut cri, &id, &env.base.join(name).join("ckpt.tar"), 0).await.expect("CheckpointContainer");
        whole = started.elapsed();
    }

    // Kills spread over that time, and one the moment anything appears
    // in the archive's directory (the archive being written, before).
    let moments: Vec<Option<Duration>> =
        [0.1, 0.3, 0.5, 0.7, 0.9, 1.1].iter().map(|f| Some(whole.mul_f64(*f))).chain([None]).collect();
    for (round, moment) in moments.iter().enumerate() {
        let dir = env.base.join(format!("killed-{round}"));
        let archive = dir.join("ckpt.tar");
        let (socket, target, location) = (env.socket.clone(), id.clone(), archive.clone());
        let request = tokio::spawn(async move {
            let mut cri = common::Cri::connect(&socket).await.expect("second connection");
            checkpoint(&mut cri, &target, &location, 0).await
        });
        match moment {
            Some(after) => tokio::time::sleep(*after).await,
            None => {
                let deadline = Instant::now() + whole * 10 + Duration::from_secs(10);
                while host::names_in(&dir).is_empty() && !request.is_finished() {
                    assert!(Instant::now() < deadline, "round {round}: nothing appeared in {}", dir.display());
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
        env.kill_daemon();
        let answered = request.await.unwrap().is_ok();
        let seen = host::names_in(&dir);

        // CRIU is not the daemon's to take down: it finishes its dump (and
        // resumes the container) on its own.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !criu_working_in(&env.base).is_empty() {
            assert!(Instant::now() < deadline, "round {round}: CRIU still runs 30 s after the kill");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        cri = env.start().await;
        eprintln!("round {round}: kill at {moment:?} of {whole:?}, answered {answered}, directory {seen:?}");
        let left = host::names_in(&dir);
        assert!(
            left.is_empty() || left == ["ckpt.tar"],
            "round {round}: only the archive may be beside the location, found {left:?}"
        );
        if answered {
            assert_eq!(left, ["ckpt.tar"], "round {round}: an answered checkpoint's archive");
        }
        if !left.is_empty() {
            // It is there only whole.
            assert_eq!(fs::metadata(&archive).unwrap().permissions().mode() & 0o7777, 0o600);
            let entries = tar_list(&archive);
            assert!(entries.iter().any(|e| e == "config.dump"), "round {round}: config.dump in {entries:?}");
            assert!(
                entries.iter().any(|e| e.starts_with("checkpoint/") && e.ends_with(".img")),
                "round {round}: CRIU images in {entries:?}"
            );
        }
        assert_eq!(cri.status_of(&id).await.state(), ContainerState::ContainerRunning, "round {round}");
        let last = counts(&mut cri, &id).await.last().copied().unwrap_or(0);
        wait_for_count(&mut cri, &id, last + 2).await;
    }

    // The restarted daemon checkpoints it as before, and it goes cleanly.
    let after = env.base.join("after/ckpt.tar");
    checkpoint(&mut cri, &id, &after, 0).await.expect("CheckpointContainer after the kills");
    assert!(tar_list(&after).iter().any(|e| e == "config.dump"));
    cri.stop_container(&id, 5).await.unwrap();
    cri.remove_container(&id).await.unwrap();
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn a_checkpoint_still_under_way_after_a_daemon_restart_is_not_run_twice() {
    let mut env = TestEnv::new("ckptorphan");
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let pod = env.pod("orphan");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let id = cri.run_container(&pod_id, &pod, container_config("many", &image, &["sh", "-c", MANY])).await;
    cri.wait_for_line(&id, "ready", 60).await;

    let (socket, target, location) = (env.socket.clone(), id.clone(), env.base.join("first/ckpt.tar"));
    let request = tokio::spawn(async move {
        let mut cri = common::Cri::connect(&socket).await.expect("second connection");
        checkpoint(&mut cri, &target, &location, 0).await
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while criu_working_in(&env.base).is_empty() {
        assert!(Instant::now() < deadline, "CRIU did not start");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    env.kill_daemon();
    assert!(request.await.unwrap().is_err(), "the killed daemon answered");
    cri = env.start().await;

    // The first daemon's CRIU still dumps: a second one on the same tree is refused.
    let busy_before = !criu_working_in(&env.base).is_empty();
    let second = checkpoint(&mut cri, &id, &env.base.join("second/ckpt.tar"), 0).await;
    let busy_after = !criu_working_in(&env.base).is_empty();
    eprintln!("CRIU running before the request {busy_before}, after {busy_after}: {second:?}");
    assert!(busy_before && busy_after, "the first CRIU ended before the test could ask; it must outlast a restart");
    let refused = second.expect_err("a second checkpoint while the first CRIU runs");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
    assert!(refused.message().contains("still under way"), "{refused:?}");
    assert!(!env.base.join("second").exists(), "nothing made for the refused checkpoint");

    // Once it has ended (it resumes the tree it froze), checkpoints work again.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !criu_working_in(&env.base).is_empty() {
        assert!(Instant::now() < deadline, "CRIU still runs after 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(cri.status_of(&id).await.state(), ContainerState::ContainerRunning);
    let last = counts(&mut cri, &id).await.last().copied().unwrap_or(0);
    wait_for_count(&mut cri, &id, last + 2).await;
    let third = env.base.join("third/ckpt.tar");
    checkpoint(&mut cri, &id, &third, 0).await.expect("a checkpoint once the first CRIU has ended");
    assert!(tar_list(&third).iter().any(|e| e == "config.dump"));
    cri.stop_container(&id, 0).await.unwrap();
    cri.remove_container(&id).await.unwrap();
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}
