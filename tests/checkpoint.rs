//! CheckpointContainer and restore through CreateContainer, with the real
//! CRIU (scripts/install-criu): the archive's mode and layout, a counter that
//! continues its count in a new sandbox, rootfs changes carried over, the
//! refusals (stopped container, bad locations, timeout), and a daemon killed
//! mid-checkpoint, while CRIU dumps, while CRIU restores, or leaving a
//! checkpoint's debris behind: nothing stays seized or half-written, and
//! both calls can be made again.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use common::client::container_config;
use common::counter::{counts, first_count, tar_list, wait_for_count, COUNTER, MANY};
use common::{host, Cri, TestEnv, Up};
use nidus::api::*;

/// A pod running MANY, ready: what the tests of slow CRIU runs start from.
/// The environment comes first, to drop last (see `Up`).
struct ManyRunning {
    env: TestEnv,
    cri: Cri,
    pod_id: String,
    id: String,
}

async fn many_running(env: TestEnv, pod_name: &str) -> ManyRunning {
    let Up { env, mut cri, image, pod, pod_id } = env.up(pod_name).await;
    let id = cri.run_container(&pod_id, &pod, container_config("many", &image, &["sh", "-c", MANY])).await;
    cri.wait_for_line(&id, "ready", 60).await;
    ManyRunning { env, cri, pod_id, id }
}

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
    let Up { env, mut cri, image, pod, pod_id } = TestEnv::new("ckpt").up("counter").await;
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
    let Up { env, mut cri, image, pod, pod_id } = TestEnv::new("ckptno").up("refusals").await;
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
    let ManyRunning { env, mut cri, pod_id, id } = many_running(TestEnv::new("ckptslow"), "slow").await;
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
    let Up { env, mut cri, image, pod, pod_id } =
        TestEnv::new("ckptold").with_args(&["--config", config.to_str().unwrap()]).up("old").await;
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

/// The running CRIU processes (by program and command line) doing `action`
/// (`dump`, `restore`) on files in `base`.
fn criu_working_in(base: &Path, action: &str) -> Vec<i32> {
    let base = base.display().to_string();
    host::processes()
        .into_iter()
        .filter(|&pid| {
            let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let cmdline = host::cmdline(pid);
            comm.trim() == "criu"
                && cmdline.split(' ').nth(1) == Some(action)
                && cmdline.contains(&base)
                && host::process_running(pid)
        })
        .collect()
}

/// Whether `ancestor` is `pid`'s parent, or its parent's, and so on.
fn descends_from(pid: i32, ancestor: i32) -> bool {
    let mut pid = pid;
    for _ in 0..64 {
        match host::stat_field(pid, 4).and_then(|p| p.parse::<i32>().ok()) {
            Some(parent) if parent == ancestor => return true,
            Some(parent) if parent > 1 => pid = parent,
            _ => return false,
        }
    }
    false
}

/// The CRIU doing `action` for this test's daemon (its child or grandchild), once one runs.
async fn criu_of_daemon(env: &TestEnv, action: &str, request: &tokio::task::JoinHandle<impl Send>) -> i32 {
    let daemon = env.daemon_pid().expect("the daemon runs");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(&criu) = criu_working_in(&env.base, action).iter().find(|&&p| descends_from(p, daemon)) {
            return criu;
        }
        assert!(!request.is_finished(), "the request ended before its CRIU {action} was seen");
        assert!(Instant::now() < deadline, "no CRIU {action} of the daemon within 60 s");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The processes of the container whose init is `init` (its cgroup's).
fn container_processes(init: i32) -> Vec<i32> {
    let dir = host::cgroup_dir(init, "memory");
    host::read_cgroup_file(&dir, "cgroup.procs").lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// `/proc/PID/status` field `key` (`State`, `TracerPid`), or None once the process is gone.
fn status_field(pid: i32, key: &str) -> Option<String> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':').map(|v| v.trim().to_string()))
}

/// The processes among `pids` that are traced, stopped or in a tracing stop.
fn seized(pids: &[i32]) -> Vec<String> {
    pids.iter()
        .filter_map(|&pid| {
            let (state, tracer) = (status_field(pid, "State")?, status_field(pid, "TracerPid")?);
            (tracer != "0" || state.starts_with('t') || state.starts_with('T'))
                .then(|| format!("{pid}: State {state}, TracerPid {tracer}"))
        })
        .collect()
}

/// Waits up to 10 s until no process of the container is traced or stopped
/// (a tracer's end detaches its tracees at once; a SIGCONT takes a moment);
/// returns those that still are.
async fn settled_unseized(init: i32) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = seized(&container_processes(init));
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The freezer state of the container whose init is `init`, when frozen
/// (v1: `freezer.state` not THAWED; v2: `cgroup.freeze` 1).
fn frozen(init: i32) -> Option<String> {
    let (dir, file, thawed) = if host::unified() {
        (host::cgroup_dir(init, ""), "cgroup.freeze", "0")
    } else {
        host::cgroup_of(init, "freezer")?;
        (host::cgroup_dir(init, "freezer"), "freezer.state", "THAWED")
    };
    let state = fs::read_to_string(dir.join(file)).ok()?;
    (state.trim() != thawed).then(|| format!("{}: {}", dir.join(file).display(), state.trim()))
}

/// The container's processes all there, none traced, stopped or frozen.
async fn assert_running_free(init: i32, at_least: usize, what: &str) {
    let seized = settled_unseized(init).await;
    assert!(seized.is_empty(), "{what}: processes traced or stopped: {seized:?}");
    assert_eq!(frozen(init), None, "{what}: the container's cgroup is frozen");
    let processes = container_processes(init).len();
    assert!(processes >= at_least, "{what}: {processes} processes, at least {at_least} expected");
}

// Two threads: the test watches the archive's directory while the request runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_while_checkpointing_leaves_the_container_running_and_no_partial_archive() {
    let Up { mut env, mut cri, image, pod, pod_id } = TestEnv::new("ckptkill").up("killed").await;
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
        while !criu_working_in(&env.base, "dump").is_empty() {
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
        let status = cri.status_of(&id).await;
        assert_eq!(status.state(), ContainerState::ContainerRunning, "round {round}: {status:?}");
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
    let ManyRunning { mut env, pod_id, id, .. } = many_running(TestEnv::new("ckptorphan"), "orphan").await;

    let (socket, target, location) = (env.socket.clone(), id.clone(), env.base.join("first/ckpt.tar"));
    let request = tokio::spawn(async move {
        let mut cri = common::Cri::connect(&socket).await.expect("second connection");
        checkpoint(&mut cri, &target, &location, 0).await
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while criu_working_in(&env.base, "dump").is_empty() {
        assert!(Instant::now() < deadline, "CRIU did not start");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    env.kill_daemon();
    assert!(request.await.unwrap().is_err(), "the killed daemon answered");
    let mut cri = env.start().await;

    // The first daemon's CRIU still dumps: a second one on the same tree is refused.
    let busy_before = !criu_working_in(&env.base, "dump").is_empty();
    let second = checkpoint(&mut cri, &id, &env.base.join("second/ckpt.tar"), 0).await;
    let busy_after = !criu_working_in(&env.base, "dump").is_empty();
    eprintln!("CRIU running before the request {busy_before}, after {busy_after}: {second:?}");
    assert!(busy_before && busy_after, "the first CRIU ended before the test could ask; it must outlast a restart");
    let refused = second.expect_err("a second checkpoint while the first CRIU runs");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
    assert!(refused.message().contains("still under way"), "{refused:?}");
    assert!(!env.base.join("second").exists(), "nothing made for the refused checkpoint");

    // Once it has ended (it resumes the tree it froze), checkpoints work again.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !criu_working_in(&env.base, "dump").is_empty() {
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

// Two threads: the test watches CRIU while the request runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_while_criu_dumps_leaves_nothing_seized_or_half_written_and_the_checkpoint_is_retried() {
    let ManyRunning { mut env, mut cri, pod_id, id } = many_running(TestEnv::new("ckptcriu"), "dumped").await;
    let init = cri.container_pid(&id).await;
    let before = container_processes(init).len();
    assert!(before > 1000, "{before} processes");

    let location = env.base.join("checkpoints/many.tar");
    let container_dir = env.root.join("containers").join(&id);
    let images = container_dir.join("checkpoint-staging/checkpoint");
    // Killed while CRIU seizes the processes, then again while it dumps
    // them one by one (a parasite in each), each time followed by a restart.
    for moment in ["seizing", "dumping"] {
        let (socket, target, at) = (env.socket.clone(), id.clone(), location.clone());
        let request = tokio::spawn(async move {
            let mut cri = common::Cri::connect(&socket).await.expect("second connection");
            checkpoint(&mut cri, &target, &at, 0).await
        });
        let criu = criu_of_daemon(&env, "dump", &request).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        let (mut traced, mut dumped) = (0, 0);
        while traced == 0 || (moment == "dumping" && dumped < 100) {
            assert!(Instant::now() < deadline && host::process_running(criu), "{moment}: CRIU {criu} ended first");
            let pids = container_processes(init);
            traced = pids.iter().filter(|&&p| status_field(p, "TracerPid") == Some(criu.to_string())).count();
            dumped = host::names_in(&images).iter().filter(|n| n.starts_with("core-")).count();
        }
        env.kill_daemon();
        let answered = request.await.unwrap();
        assert!(answered.is_err(), "{moment}: the killed daemon answered: {answered:?}");
        eprintln!("{moment}: killed while CRIU {criu} traced {traced} of {before} processes, {dumped} dumped");

        cri = env.start().await;
        // CRIU, which cannot be stopped half-way without harm, finishes its
        // dump (resuming the container), watched by the restarted daemon;
        // nothing of it is left then: no process, images or records.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !criu_working_in(&env.base, "dump").is_empty() {
            assert!(Instant::now() < deadline, "{moment}: CRIU still runs 60 s after the restart");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let debris = loop {
            let debris: Vec<String> =
                host::names_in(&container_dir).into_iter().filter(|n| n.starts_with("checkpoint-")).collect();
            if debris.is_empty() || Instant::now() > deadline {
                break debris;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(debris.is_empty(), "{moment}: the interrupted dump's images and records stay: {debris:?}");
        let beside = host::names_in(location.parent().unwrap());
        assert!(beside.is_empty(), "{moment}: nothing at or beside the location: {beside:?}");
        let status = cri.status_of(&id).await;
        assert_eq!(status.state(), ContainerState::ContainerRunning, "{moment}: {status:?}");
        assert_eq!(cri.container_pid(&id).await, init, "{moment}: the same init");
        assert_running_free(init, before - 2, moment).await;
        let last = counts(&mut cri, &id).await.last().copied().unwrap_or(0);
        wait_for_count(&mut cri, &id, last + 3).await;
    }

    // The same call again, to the same location: it works, and the archive restores.
    checkpoint(&mut cri, &id, &location, 0).await.expect("the checkpoint retried");
    assert_eq!(host::names_in(location.parent().unwrap()), ["many.tar"]);
    let entries = tar_list(&location);
    assert!(entries.iter().any(|e| e == "config.dump"), "config.dump in {entries:?}");
    assert_running_free(init, before - 2, "after the retried dump").await;
    let checkpointed_at = counts(&mut cri, &id).await.last().copied().unwrap_or(0);
    cri.stop_container(&id, 0).await.unwrap();
    cri.remove_container(&id).await.unwrap();
    let pod2 = env.pod("restored");
    let pod2_id = cri.run_pod(pod2.clone()).await.unwrap();
    let restored =
        cri.run_container(&pod2_id, &pod2, container_config("restored", &location.display().to_string(), &[])).await;
    let first = first_count(&mut cri, &restored).await;
    assert!(first <= checkpointed_at + 1, "restored count starts at {first}, checkpointed at {checkpointed_at}");
    wait_for_count(&mut cri, &restored, first + 2).await;
    assert_running_free(cri.container_pid(&restored).await, before - 2, "the restored container").await;
    cri.stop_container(&restored, 0).await.unwrap();
    cri.remove_container(&restored).await.unwrap();
    for pod in [&pod_id, &pod2_id] {
        cri.stop_pod(pod).await.unwrap();
        cri.remove_pod(pod).await.unwrap();
    }
    env.assert_no_leftovers();
}

/// The processes in this test's cgroups running `sleep 1000` (MANY's).
fn sleepers(env: &TestEnv) -> usize {
    env.cgroup_processes().into_iter().filter(|&p| host::cmdline(p) == "sleep 1000").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_while_criu_restores_leaves_nothing_behind_and_the_restore_is_retried() {
    let ManyRunning { mut env, mut cri, pod_id, id } = many_running(TestEnv::new("rstcriu"), "original").await;
    let archive = env.base.join("checkpoints/many.tar");
    checkpoint(&mut cri, &id, &archive, 0).await.expect("CheckpointContainer");
    let checkpointed_at = counts(&mut cri, &id).await.last().copied().unwrap_or(0);
    cri.stop_container(&id, 0).await.unwrap();
    cri.remove_container(&id).await.unwrap();
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    assert_eq!(sleepers(&env), 0);

    // CreateContainer from the archive: the monitor's CRIU restores the
    // processes. Killed early in the restore, then once all are forked.
    let pod2 = env.pod("restored");
    let pod2_id = cri.run_pod(pod2.clone()).await.unwrap();
    let config = container_config("restored", &archive.display().to_string(), &[]);
    for back in [50, 1000] {
        let (socket, sandbox, pod_config, request_config) =
            (env.socket.clone(), pod2_id.clone(), pod2.clone(), config.clone());
        let request = tokio::spawn(async move {
            let mut cri = common::Cri::connect(&socket).await.expect("second connection");
            cri.create_container(&sandbox, &pod_config, request_config).await
        });
        let criu = criu_of_daemon(&env, "restore", &request).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while env.cgroup_processes().len() < back && host::process_running(criu) {
            assert!(Instant::now() < deadline, "CRIU {criu} restores nothing");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let restoring = env.cgroup_processes().len();
        env.kill_daemon();
        let answered = request.await.unwrap();
        assert!(answered.is_err(), "the killed daemon answered: {answered:?}");
        let what = format!("killed while CRIU {criu} restored ({restoring} processes in the test's cgroups)");
        eprintln!("{what}");

        cri = env.start().await;
        let criu_left = criu_working_in(&env.base, "restore");
        assert!(criu_left.is_empty(), "{what}: CRIU still runs after the restart: {criu_left:?}");
        let listed = cri.list_containers(None).await;
        match listed.as_slice() {
            // Undone: nothing of it runs or stays on disk.
            [] => {
                assert_eq!(sleepers(&env), 0, "{what}: processes of the interrupted restore are left");
                let pause = cri.pause_pid(&pod2_id).await;
                let others: Vec<String> = env
                    .cgroup_processes()
                    .into_iter()
                    .filter(|&p| p != pause)
                    .map(|p| format!("{p}: {}", host::cmdline(p)))
                    .collect();
                assert!(others.is_empty(), "{what}: processes beside the pod's pause: {others:?}");
                let dirs = env.leftover_sandbox_dirs();
                let containers: Vec<_> = dirs.iter().filter(|d| d.parent().unwrap().ends_with("containers")).collect();
                assert!(containers.is_empty(), "{what}: directories of the interrupted restore: {containers:?}");
            }
            // Or, had it ended before the restart, created: the call was not
            // lost (and it goes, for the next round).
            [one] => {
                assert_eq!(one.state(), ContainerState::ContainerCreated, "{what}: {one:?}");
                cri.remove_container(&one.id).await.unwrap();
            }
            more => panic!("{what}: one restore asked for, {} containers listed", more.len()),
        }
    }
    let restored = cri.create_container(&pod2_id, &pod2, config).await.expect("the restore retried, same name");
    assert_eq!(cri.status_of(&restored).await.state(), ContainerState::ContainerCreated);

    // Created, not started, across another crash: StartContainer resumes it then.
    env.kill_daemon();
    let mut cri = env.start().await;
    assert_eq!(cri.status_of(&restored).await.state(), ContainerState::ContainerCreated);
    cri.start_container(&restored).await.expect("StartContainer after the restart");
    assert_eq!(cri.status_of(&restored).await.state(), ContainerState::ContainerRunning);
    let first = first_count(&mut cri, &restored).await;
    assert!(first <= checkpointed_at + 1, "restored count starts at {first}, checkpointed at {checkpointed_at}");
    wait_for_count(&mut cri, &restored, first + 3).await;
    assert_running_free(cri.container_pid(&restored).await, 1000, "the restored container").await;
    assert!(criu_working_in(&env.base, "restore").is_empty());
    cri.stop_container(&restored, 0).await.unwrap();
    cri.remove_container(&restored).await.unwrap();
    cri.stop_pod(&pod2_id).await.unwrap();
    cri.remove_pod(&pod2_id).await.unwrap();
    env.assert_no_leftovers();
}

/// A process this test started, killed (and reaped) when the test ends, also on failure.
struct Stray(std::process::Child);

impl Drop for Stray {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A process the daemon started for this test, killed when the test ends
/// (also on failure) if it still runs.
struct StrayPid {
    pid: i32,
    start_time: Option<String>,
}

impl StrayPid {
    fn new(pid: i32) -> Self {
        Self { pid, start_time: host::stat_field(pid, 22) }
    }
}

impl Drop for StrayPid {
    fn drop(&mut self) {
        if self.start_time.is_some() && host::stat_field(self.pid, 22) == self.start_time {
            host::signal(self.pid, libc::SIGKILL);
        }
    }
}

/// `checkpoint-criu.json` as the daemon writes it, for process `pid`.
fn criu_record(pid: i32) -> serde_json::Value {
    let start_time: u64 = host::stat_field(pid, 22).unwrap().parse().unwrap();
    let boot_id = fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap().trim().to_string();
    serde_json::json!({"pid": pid, "start_time": start_time, "boot_id": boot_id})
}

/// Nanoseconds since the epoch, `secs` from now.
fn epoch_ns_in(secs: i64) -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64;
    now + secs * 1_000_000_000
}

/// The names in the container's directory that a checkpoint makes.
fn checkpoint_debris(container_dir: &Path) -> Vec<String> {
    host::names_in(container_dir).into_iter().filter(|n| n.starts_with("checkpoint-")).collect()
}

/// A stand-in for a CRIU an earlier daemon left (`fake`, a copy of sleep
/// named criu), leading its process group, and a helper it forked left
/// stopped in that group (as CRIU's start-up leaves one when CRIU is killed).
fn stand_in_criu(fake: &Path) -> (Stray, Stray) {
    use std::os::unix::process::CommandExt;
    let criu = Stray(std::process::Command::new(fake).arg("1000").process_group(0).spawn().expect("criu"));
    let leader = criu.0.id() as i32;
    let helper = Stray(std::process::Command::new(fake).arg("1000").process_group(leader).spawn().expect("its helper"));
    host::signal(helper.0.id() as i32, libc::SIGSTOP);
    (criu, helper)
}

#[tokio::test]
async fn what_a_crash_left_of_a_checkpoint_is_cleaned_up_at_restart() {
    use std::os::unix::process::ExitStatusExt;
    let Up { mut env, mut cri, image, pod, pod_id } = TestEnv::new("ckptdebris").up("debris").await;
    let mut ids = Vec::new();
    for name in ["past-deadline", "criu-gone"] {
        ids.push(cri.run_container(&pod_id, &pod, container_config(name, &image, &["sleep", "1000"])).await);
    }
    env.kill_daemon();

    // The disk as a daemon killed mid-checkpoint leaves it (fault
    // injection), for two containers: CRIU's images, the archive's
    // temporary file under its hidden name (as on a file system without
    // O_TMPFILE), and CRIU, with the helper it left, stood in for: the
    // first's still running past its deadline, the second's gone (killed),
    // its helper not.
    let fake = env.base.join("fake/criu");
    fs::create_dir_all(fake.parent().unwrap()).unwrap();
    fs::copy("/bin/sleep", &fake).unwrap();
    let dir = env.base.join("checkpoints");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(".other.tar.tmp-0123456789abcdef"), b"someone else's").unwrap();
    let mut stand_ins = Vec::new();
    for (n, id) in ids.iter().enumerate() {
        let container_dir = env.root.join("containers").join(id);
        let (mut criu, helper) = stand_in_criu(&fake);
        let leader = criu.0.id() as i32;
        fs::write(container_dir.join("checkpoint-criu.json"), criu_record(leader).to_string()).unwrap();
        if n == 1 {
            let _ = criu.0.kill();
            let _ = criu.0.wait();
        }
        fs::create_dir_all(container_dir.join("checkpoint-staging/checkpoint")).unwrap();
        fs::write(container_dir.join("checkpoint-staging/checkpoint/pages-1.img"), b"memory").unwrap();
        let (location, temp) = (dir.join(format!("{n}.tar")), dir.join(format!(".{n}.tar.tmp-0123456789abcdef")));
        fs::write(&temp, b"half an archive").unwrap();
        let record = serde_json::json!({"location": location, "temp": temp, "criuDeadlineNs": epoch_ns_in(-1)});
        fs::write(container_dir.join("checkpoint-in-progress.json"), record.to_string()).unwrap();
        stand_ins.push((criu, helper));
    }

    let mut cri = env.start().await;
    let ended = host::wait_or_kill(&mut stand_ins[0].0 .0, Duration::from_secs(10));
    assert_eq!(ended.and_then(|s| s.signal()), Some(libc::SIGTERM), "CRIU past its deadline is stopped");
    for (n, (_, helper)) in stand_ins.iter_mut().enumerate() {
        let ended = host::wait_or_kill(&mut helper.0, Duration::from_secs(10));
        assert_eq!(ended.and_then(|s| s.signal()), Some(libc::SIGKILL), "{n}: what CRIU left is ended");
    }
    // The daemon removes what a checkpoint left once its CRIU and helpers
    // are gone, just after their end: a moment's wait.
    let deadline = Instant::now() + Duration::from_secs(10);
    for id in &ids {
        let container_dir = env.root.join("containers").join(id);
        while !checkpoint_debris(&container_dir).is_empty() {
            let debris = checkpoint_debris(&container_dir);
            assert!(Instant::now() < deadline, "the interrupted checkpoint's images and records stay: {debris:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(cri.status_of(id).await.state(), ContainerState::ContainerRunning);
    }
    assert_eq!(host::names_in(&dir), [".other.tar.tmp-0123456789abcdef"], "only the recorded temporary files go");
    let location = dir.join("0.tar");
    checkpoint(&mut cri, &ids[0], &location, 0).await.expect("a checkpoint to the same location");
    assert!(tar_list(&location).iter().any(|e| e == "config.dump"));
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

// Two threads: the test watches the container's directory while the request runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_deadline_outlives_a_daemon_crash() {
    // A CRIU that never ends its dump.
    let env = TestEnv::new("ckptdeadline");
    let fake = env.base.join("fake/criu");
    fs::create_dir_all(fake.parent().unwrap()).unwrap();
    fs::write(&fake, "#!/bin/sh\n[ \"$1\" = --version ] && exec echo 'Version: 4.1.1'\nexec sleep 1000\n").unwrap();
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();
    let config = env.base.join("config.toml");
    fs::write(&config, format!("[checkpoint]\ncriu_binary = {:?}\n", fake.display().to_string())).unwrap();
    let Up { mut env, mut cri, image, pod, pod_id } =
        env.with_args(&["--config", config.to_str().unwrap()]).up("deadline").await;
    let id = cri.run_container(&pod_id, &pod, container_config("sleeper", &image, &["sleep", "1000"])).await;
    let container_dir = env.root.join("containers").join(&id);

    let location = env.base.join("checkpoints/ckpt.tar");
    let (socket, target, at) = (env.socket.clone(), id.clone(), location.clone());
    let started = Instant::now();
    let request = tokio::spawn(async move {
        let mut cri = common::Cri::connect(&socket).await.expect("second connection");
        checkpoint(&mut cri, &target, &at, 4).await
    });
    let recorded = container_dir.join("checkpoint-criu.json");
    let deadline = Instant::now() + Duration::from_secs(20);
    let criu = loop {
        let record = fs::read(&recorded).ok().and_then(|r| serde_json::from_slice::<serde_json::Value>(&r).ok());
        if let Some(pid) = record.and_then(|r| r["pid"].as_i64()) {
            break pid as i32;
        }
        assert!(!request.is_finished() && Instant::now() < deadline, "CRIU did not start");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let _stray = StrayPid::new(criu);
    env.kill_daemon();
    assert!(request.await.unwrap().is_err(), "the killed daemon answered");
    assert!(host::process_running(criu), "the CRIU outlives the daemon");

    // The restarted daemon stops it when the request's 4 s are up, as the
    // killed one would have, and then nothing of the checkpoint is left.
    let mut cri = env.start().await;
    while host::process_running(criu) {
        if started.elapsed() > Duration::from_secs(20) {
            panic!("CRIU {criu} still runs {:?} after a checkpoint of 4 s began", started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ended = started.elapsed();
    assert!(ended >= Duration::from_secs(4), "CRIU was stopped before its deadline, after {ended:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !checkpoint_debris(&container_dir).is_empty() {
        assert!(Instant::now() < deadline, "left: {:?}", checkpoint_debris(&container_dir));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(host::names_in(location.parent().unwrap()).is_empty(), "nothing at or beside the location");
    assert_eq!(cri.status_of(&id).await.state(), ContainerState::ContainerRunning);
    cri.stop_container(&id, 0).await.unwrap();
    cri.remove_container(&id).await.unwrap();
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}
