//! OCI hooks through the socket: `hooks.d` definitions from the configured
//! directories run at their lifecycle points, in the right namespaces, with
//! the container's state on stdin; matched by always, annotation, command
//! and bind mounts; picked up while the daemon runs, invalid ones skipped;
//! failing and slow hooks fail the create and leave nothing; poststop runs
//! for a container that exited while the daemon was down.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::client::container_config;
use common::{host, TestEnv, Up};
use nidus::api::*;

const PATH_ENV: &str = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";

/// The recording hook of `oci-hooks/test/`.
fn record_call() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("oci-hooks/test/record-call")
}

/// A `hooks.d` definition (schema 1.0.0).
fn definition(path: &Path, args: &[&str], when: serde_json::Value, stages: &[&str]) -> serde_json::Value {
    serde_json::json!({
        "version": "1.0.0",
        "hook": { "path": path, "args": args, "env": [PATH_ENV] },
        "when": when,
        "stages": stages,
    })
}

fn write_definition(dir: &Path, name: &str, definition: &serde_json::Value) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join(name), serde_json::to_vec_pretty(definition).unwrap()).unwrap();
}

/// A recording hook for `stage` into `records` (see `record_call`).
fn recording(records: &Path, stage: &str, when: serde_json::Value) -> serde_json::Value {
    let script = record_call();
    definition(&script, &["record-call", &records.display().to_string(), stage], when, &[stage])
}

/// An environment whose daemon reads hooks from `<base>/hooks-a` then
/// `<base>/hooks-b` (made by the test), with a records directory.
fn hooks_env(label: &str) -> (TestEnv, PathBuf, PathBuf, PathBuf) {
    let env = TestEnv::new(label);
    let (first, second, records) = (env.base.join("hooks-a"), env.base.join("hooks-b"), env.base.join("records"));
    fs::create_dir_all(&first).unwrap();
    fs::create_dir_all(&records).unwrap();
    let config = env.base.join("nidus.toml");
    fs::write(&config, format!("[hooks]\ndirs = [{:?}, {:?}]\n", first.display(), second.display())).unwrap();
    let env = env.with_args(&["--config", &config.display().to_string()]);
    (env, first, second, records)
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_default()
}

/// The container ids a stage's hook was called for, one per call.
fn calls(records: &Path, stage: &str) -> Vec<String> {
    read(&records.join(format!("{stage}.calls"))).lines().map(str::to_string).collect()
}

fn state(records: &Path, stage: &str) -> serde_json::Value {
    serde_json::from_str(&read(&records.join(format!("{stage}.state"))))
        .unwrap_or_else(|e| panic!("{stage}: the state on stdin is not JSON: {e}"))
}

/// The namespaces a hook recorded, as `kind link` lines.
fn recorded_namespaces(text: &str) -> Vec<(String, String)> {
    text.lines().filter_map(|l| l.split_once(' ')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn assert_namespaces_of(recorded: &str, pid: i32, what: &str) {
    let recorded = recorded_namespaces(recorded);
    assert_eq!(recorded.len(), 5, "{what}: {recorded:?}");
    for (kind, link) in recorded {
        assert_eq!(link, host::namespace(pid, kind.as_str()), "{what}: {kind} namespace");
    }
}

/// Removes the pod; nothing of it may be left.
async fn down(cri: &mut common::Cri, env: &TestEnv, pod_id: &str) {
    cri.stop_pod(pod_id).await.unwrap();
    cri.remove_pod(pod_id).await.unwrap();
    env.assert_no_leftovers();
}

async fn wait_for(what: &str, secs: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn every_stage_runs_once_at_its_point_in_its_namespaces_with_the_state() {
    let (env, hooks, _, records) = hooks_env("hookstages");
    let always = serde_json::json!({ "always": true });
    for stage in ["prestart", "createRuntime", "createContainer", "poststart", "poststop"] {
        write_definition(&hooks, &format!("10-{stage}.json"), &recording(&records, stage, always.clone()));
    }
    // startContainer's path resolves in the container: the image's shell,
    // recording in the container's /tmp.
    let in_container = "cat > /tmp/start.state; for ns in mnt net pid ipc uts; do echo \"$ns $(readlink /proc/self/ns/$ns)\"; done > /tmp/start.ns; echo called >> /tmp/start.calls";
    write_definition(
        &hooks,
        "20-start.json",
        &definition(Path::new("/bin/sh"), &["sh", "-c", in_container], always.clone(), &["startContainer"]),
    );
    let Up { env, mut cri, image, pod, pod_id } = env.up("hooks").await;
    let pause = cri.pause_pid(&pod_id).await;
    let daemon = env.daemon_pid().unwrap();

    // The workload copies what startContainer left: it ran before the execve.
    let mut config =
        container_config("app", &image, &["sh", "-c", "cp /tmp/start.calls /tmp/seen-at-exec; exec sleep 1000"]);
    config.annotations.insert("example.com/owner".into(), "hooks-test".into());
    let id = cri.create_container(&pod_id, &pod, config).await.unwrap();
    let init = cri.container_pid(&id).await;
    assert_eq!(read(&records.join("order")), "prestart\ncreateRuntime\ncreateContainer\n", "stages run at create");
    for stage in ["prestart", "createRuntime", "createContainer"] {
        assert_eq!(calls(&records, stage), [id.as_str()], "{stage} runs once");
        let state = state(&records, stage);
        assert_eq!(state["ociVersion"], "1.2.0");
        assert_eq!(state["id"], id.as_str());
        assert_eq!(state["status"], "creating", "{stage}");
        assert_eq!(state["pid"], init, "{stage}: the init's PID as the host sees it");
        assert_eq!(state["annotations"]["example.com/owner"], "hooks-test");
        assert_eq!(state["annotations"]["io.kubernetes.cri.sandbox-id"], pod_id.as_str());
        assert_eq!(read(&records.join(format!("{stage}.bundle"))), "present\n", "{stage}: the bundle is there");
    }
    // prestart and createRuntime: the runtime's namespaces (the daemon's);
    // createContainer: the container's, whose network is the pause's.
    for stage in ["prestart", "createRuntime"] {
        assert_namespaces_of(&read(&records.join(format!("{stage}.ns"))), daemon, stage);
    }
    assert_namespaces_of(&read(&records.join("createContainer.ns")), init, "createContainer");
    assert_eq!(host::namespace(init, "net"), host::namespace(pause, "net"));
    assert_ne!(host::namespace(init, "mnt"), host::namespace(daemon, "mnt"));
    assert!(calls(&records, "poststart").is_empty(), "no poststart before StartContainer");

    cri.start_container(&id).await.unwrap();
    assert_eq!(calls(&records, "poststart"), [id.as_str()], "poststart runs once, before StartContainer returns");
    let poststart = state(&records, "poststart");
    assert_eq!(poststart["status"], "running");
    assert_eq!(poststart["pid"], init);
    assert_namespaces_of(&read(&records.join("poststart.ns")), daemon, "poststart");
    let seen = cri
        .exec_ok(&id, &["sh", "-c", "while [ ! -s /tmp/seen-at-exec ]; do sleep 0.05; done; cat /tmp/seen-at-exec"])
        .await;
    assert_eq!(seen, "called\n", "startContainer ran once, before the workload's execve");
    let start_state: serde_json::Value = serde_json::from_str(&cri.exec_ok(&id, &["cat", "/tmp/start.state"]).await)
        .expect("startContainer's state is JSON");
    assert_eq!(start_state["status"], "created");
    assert_eq!(start_state["id"], id.as_str());
    assert_eq!(start_state["pid"], init);
    assert_namespaces_of(&cri.exec_ok(&id, &["cat", "/tmp/start.ns"]).await, init, "startContainer");
    assert!(calls(&records, "poststop").is_empty());

    cri.stop_container(&id, 0).await.unwrap();
    assert_eq!(calls(&records, "poststop"), [id.as_str()], "poststop runs once the container has exited");
    assert_eq!(state(&records, "poststop")["status"], "stopped");
    assert_eq!(read(&records.join("poststop.bundle")), "present\n", "poststop runs before the resources go");
    assert_namespaces_of(&read(&records.join("poststop.ns")), daemon, "poststop");
    cri.remove_container(&id).await.unwrap();
    assert_eq!(calls(&records, "poststop").len(), 1, "poststop runs once only");
    for stage in ["prestart", "createRuntime", "createContainer", "poststart"] {
        assert_eq!(calls(&records, stage).len(), 1, "{stage} ran once only");
    }

    // In the pod's PID namespace (an init forked into it at create), the
    // runtime's hooks still run in the runtime's; createContainer in the pod's.
    let mut shared = container_config("shared", &image, &["sleep", "1000"]);
    common::client::security(&mut shared).namespace_options.as_mut().unwrap().pid = NamespaceMode::Pod as i32;
    let shared = cri.create_container(&pod_id, &pod, shared).await.unwrap();
    assert_eq!(calls(&records, "prestart"), [id.as_str(), shared.as_str()]);
    assert_namespaces_of(&read(&records.join("prestart.ns")), daemon, "prestart in a shared PID namespace");
    let shared_init = cri.container_pid(&shared).await;
    assert_namespaces_of(&read(&records.join("createContainer.ns")), shared_init, "createContainer (shared PID)");
    assert_eq!(host::namespace(shared_init, "pid"), host::namespace(pause, "pid"));
    down(&mut cri, &env, &pod_id).await;
}

#[tokio::test]
async fn hooks_match_by_annotation_command_and_bind_mounts_and_follow_the_directories() {
    let (env, first, second, records) = hooks_env("hookmatch");
    let by_annotation = records.join("annotation");
    let by_command = records.join("command");
    let by_mounts = records.join("mounts");
    let added = records.join("added");
    for dir in [&by_annotation, &by_command, &by_mounts, &added] {
        fs::create_dir_all(dir).unwrap();
    }
    write_definition(
        &first,
        "10-annotation.json",
        &recording(
            &by_annotation,
            "prestart",
            serde_json::json!({ "annotations": { "^example\\.com/gpu$": "^(yes|true)$" } }),
        ),
    );
    write_definition(
        &first,
        "20-command.json",
        &recording(&by_command, "prestart", serde_json::json!({ "commands": ["(^|/)top$"] })),
    );
    write_definition(
        &first,
        "30-mounts.json",
        &recording(&by_mounts, "prestart", serde_json::json!({ "hasBindMounts": true })),
    );
    // Overridden by the second directory's file of the same name.
    write_definition(&first, "40-override.json", &recording(&added, "prestart", serde_json::json!({ "always": true })));
    write_definition(
        &second,
        "40-override.json",
        &recording(&added, "prestart", serde_json::json!({ "annotations": { "never": "never" } })),
    );
    fs::write(
        first.join("50-invalid.json"),
        r#"{"version":"1.0.0","hook":{"path":"relative/hook"},"stages":["prestart"]}"#,
    )
    .unwrap();
    let Up { env, mut cri, image, pod, pod_id } = env.up("matching").await;

    let plain =
        cri.create_container(&pod_id, &pod, container_config("plain", &image, &["sleep", "1000"])).await.unwrap();
    let mut gpu = container_config("gpu", &image, &["sleep", "1000"]);
    gpu.annotations.insert("example.com/gpu".into(), "yes".into());
    let gpu = cri.create_container(&pod_id, &pod, gpu).await.unwrap();
    let mut no_gpu = container_config("nogpu", &image, &["sleep", "1000"]);
    no_gpu.annotations.insert("example.com/gpu".into(), "no".into());
    let no_gpu = cri.create_container(&pod_id, &pod, no_gpu).await.unwrap();
    let top = cri.create_container(&pod_id, &pod, container_config("top", &image, &["/bin/top", "-b"])).await.unwrap();
    let volume = env.base.join("volume");
    fs::create_dir_all(&volume).unwrap();
    let mut mounted = container_config("mounted", &image, &["sleep", "1000"]);
    mounted.mounts.push(Mount {
        container_path: "/data".into(),
        host_path: volume.display().to_string(),
        ..Default::default()
    });
    let mounted = cri.create_container(&pod_id, &pod, mounted).await.unwrap();

    assert_eq!(calls(&by_annotation, "prestart"), [gpu.as_str()], "annotation key and value both match");
    assert_eq!(calls(&by_command, "prestart"), [top.as_str()], "the command path matches");
    assert_eq!(calls(&by_mounts, "prestart"), [mounted.as_str()], "bind mounts asked for");
    assert!(calls(&added, "prestart").is_empty(), "the later directory's file overrides");
    assert!(![&plain, &no_gpu].iter().any(|id| read(&records.join("annotation/prestart.calls")).contains(id.as_str())));
    let log = env.daemon_log();
    assert!(
        log.lines().any(|l| l.contains("skipping an invalid OCI hook definition") && l.contains("50-invalid.json")),
        "the invalid definition is logged:\n{log}"
    );

    // A definition added while the daemon runs applies to the next container.
    write_definition(
        &second,
        "60-added.json",
        &recording(&added, "createRuntime", serde_json::json!({ "always": true })),
    );
    let next = cri.create_container(&pod_id, &pod, container_config("next", &image, &["sleep", "1000"])).await.unwrap();
    assert_eq!(calls(&added, "createRuntime"), [next.as_str()]);
    // And one changed in place, too.
    write_definition(
        &second,
        "60-added.json",
        &recording(&added, "createRuntime", serde_json::json!({ "annotations": { "never": "never" } })),
    );
    cri.create_container(&pod_id, &pod, container_config("after", &image, &["sleep", "1000"])).await.unwrap();
    assert_eq!(calls(&added, "createRuntime"), [next]);
    down(&mut cri, &env, &pod_id).await;
}

#[tokio::test]
async fn a_failing_or_slow_hook_fails_the_create_and_leaves_nothing() {
    let (env, hooks, _, records) = hooks_env("hookfail");
    // Shell hooks for the containers annotated `fail: VALUE`.
    let shell = |script: &str, value: &str, stage: &str| {
        let when = serde_json::json!({ "annotations": { "^fail$": value } });
        definition(Path::new("/bin/sh"), &["sh", "-c", script], when, &[stage])
    };
    let failing = shell("echo 'no device for this container' >&2; exit 3", "createContainer", "createContainer");
    write_definition(&hooks, "10-fail.json", &failing);
    let pid_file = records.join("slow.pid");
    let mut slow = shell(&format!("echo $$ > {}; exec sleep 30", pid_file.display()), "slow", "prestart");
    slow["hook"]["timeout"] = 1.into();
    write_definition(&hooks, "20-slow.json", &slow);
    // Resolved in the container at StartContainer: the image's shell.
    let refusing = shell("echo 'start refused' >&2; exit 4", "start", "startContainer");
    write_definition(&hooks, "30-refuse-start.json", &refusing);
    // Whatever a failed create's hooks did gets its poststop to undo.
    write_definition(
        &hooks,
        "40-poststop.json",
        &recording(&records, "poststop", serde_json::json!({ "annotations": { "^fail$": "." } })),
    );
    let Up { env, mut cri, image, pod, pod_id } = env.up("failing").await;
    // A container first: the pod's cgroup made ahead is taken.
    let kept = cri.run_container(&pod_id, &pod, container_config("kept", &image, &["sleep", "1000"])).await;
    let pod_cgroup = cri.pod_info(&pod_id).await["cgroups"]["pod"].as_str().unwrap().to_string();
    let before = (
        env.pod_child_cgroups(&pod_cgroup),
        env.leftover_mounts(),
        env.leftover_sandbox_dirs(),
        env.cgroup_processes().len(),
    );

    let mut config = container_config("broken", &image, &["sleep", "1000"]);
    config.annotations.insert("fail".into(), "createContainer".into());
    let err = cri.create_container(&pod_id, &pod, config).await.unwrap_err();
    let message = err.message();
    assert!(
        message.contains("createContainer hook /bin/sh failed (exit status 3)")
            && message.contains("no device for this container"),
        "the error names the hook and its output: {message}"
    );

    let mut config = container_config("slow", &image, &["sleep", "1000"]);
    config.annotations.insert("fail".into(), "slow".into());
    let began = Instant::now();
    let err = cri.create_container(&pod_id, &pod, config).await.unwrap_err();
    assert!(
        err.message().contains("prestart hook /bin/sh did not finish within 1 s and was killed"),
        "{}",
        err.message()
    );
    assert!(began.elapsed() < Duration::from_secs(10), "killed at its timeout, not later");
    let slow_pid: i32 = read(&pid_file).trim().parse().expect("the slow hook ran");
    assert!(host::wait_gone(slow_pid), "the slow hook is killed");
    assert_eq!(calls(&records, "poststop").len(), 2, "poststop ran for both failed creates");
    assert_eq!(state(&records, "poststop")["status"], "stopped");

    // A failing startContainer hook fails the start; the workload never runs.
    let mut config = container_config("refused", &image, &["sh", "-c", "echo ran; sleep 1000"]);
    config.annotations.insert("fail".into(), "start".into());
    let refused = cri.create_container(&pod_id, &pod, config).await.unwrap();
    let err = cri.start_container(&refused).await.unwrap_err();
    assert!(
        err.message().contains("startContainer hook /bin/sh failed (exit status 4): start refused"),
        "{}",
        err.message()
    );
    let status = cri.status_of(&refused).await;
    assert_eq!(status.state(), ContainerState::ContainerExited);
    assert!(common::client::log_lines(&cri.logs(&refused).await, "stdout").is_empty(), "the workload never ran");
    cri.remove_container(&refused).await.unwrap();
    assert_eq!(calls(&records, "poststop")[2], refused, "poststop ran once for the container that failed to start");
    assert_eq!(calls(&records, "poststop").len(), 3);

    let containers = cri.list_containers(None).await;
    assert_eq!(containers.iter().map(|c| c.id.clone()).collect::<Vec<_>>(), [kept.as_str()], "no container is left");
    wait_for("the failed creates' processes to go", 5, || env.cgroup_processes().len() == before.3).await;
    let after = (env.pod_child_cgroups(&pod_cgroup), env.leftover_mounts(), env.leftover_sandbox_dirs(), before.3);
    assert_eq!(after, before, "no cgroup, mount or directory is left");
    down(&mut cri, &env, &pod_id).await;
}

#[tokio::test]
async fn poststop_runs_at_the_next_start_for_a_container_that_exited_while_the_daemon_was_down() {
    let (env, hooks, _, records) = hooks_env("hookdown");
    write_definition(
        &hooks,
        "10-poststop.json",
        &recording(&records, "poststop", serde_json::json!({ "always": true })),
    );
    let Up { mut env, mut cri, image, pod, pod_id } = env.up("down").await;
    let id = cri.run_container(&pod_id, &pod, container_config("app", &image, &["sleep", "1000"])).await;
    let init = cri.container_pid(&id).await;

    env.kill_daemon();
    host::signal(init, libc::SIGKILL);
    assert!(host::wait_gone(init));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(calls(&records, "poststop").is_empty(), "nobody ran poststop while the daemon was down");

    let mut cri = env.start().await;
    assert_eq!(calls(&records, "poststop"), [id.as_str()], "poststop ran at the next start");
    assert_eq!(state(&records, "poststop")["status"], "stopped");
    assert_eq!(read(&records.join("poststop.bundle")), "present\n");
    assert_eq!(cri.status_of(&id).await.state(), ContainerState::ContainerExited);
    drop(cri);
    // Once only, also across another restart.
    env.kill_daemon();
    let mut cri = env.start().await;
    cri.remove_container(&id).await.unwrap();
    assert_eq!(calls(&records, "poststop").len(), 1);
    down(&mut cri, &env, &pod_id).await;
}

#[tokio::test]
async fn a_restored_container_runs_the_runtime_hooks_before_it_resumes_and_poststart_and_poststop() {
    let (env, hooks, _, records) = hooks_env("hookrestore");
    let always = serde_json::json!({ "always": true });
    for stage in ["prestart", "createContainer", "poststart", "poststop"] {
        write_definition(&hooks, &format!("10-{stage}.json"), &recording(&records, stage, always.clone()));
    }
    let Up { env, mut cri, image, pod, pod_id } = env.up("restore").await;
    let loop_forever = "while true; do sleep 0.2; done";
    let id = cri.run_container(&pod_id, &pod, container_config("loop", &image, &["sh", "-c", loop_forever])).await;
    let archive = env.base.join("loop.tar");
    cri.runtime
        .checkpoint_container(CheckpointContainerRequest {
            container_id: id.clone(),
            location: archive.display().to_string(),
            timeout: 0,
        })
        .await
        .expect("CheckpointContainer");
    cri.stop_container(&id, 0).await.unwrap();
    cri.remove_container(&id).await.unwrap();
    assert_eq!(calls(&records, "poststop"), [id.as_str()]);

    let restored =
        cri.create_container(&pod_id, &pod, container_config("restored", &archive.display().to_string(), &[])).await;
    let restored = restored.expect("CreateContainer from the checkpoint");
    let init = cri.container_pid(&restored).await;
    assert_eq!(calls(&records, "prestart"), [id.as_str(), restored.as_str()], "prestart for the restored container");
    let state = state(&records, "prestart");
    assert_eq!((state["status"].as_str(), state["pid"].as_i64()), (Some("creating"), Some(init as i64)));
    assert_eq!(read(&records.join("prestart.pidstate")), "T\n", "the restored tree is still stopped");
    assert_eq!(calls(&records, "createContainer"), [id.as_str()], "no init builds a restored container");
    cri.start_container(&restored).await.unwrap();
    assert_eq!(calls(&records, "poststart"), [id.as_str(), restored.as_str()]);
    cri.stop_container(&restored, 0).await.unwrap();
    assert_eq!(calls(&records, "poststop"), [id.as_str(), restored.as_str()]);
    cri.remove_container(&restored).await.unwrap();
    down(&mut cri, &env, &pod_id).await;
}
