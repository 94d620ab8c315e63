//! The daemon itself: Version, Status, RuntimeConfig, every RPC served, the
//! socket's permissions, the one-instance lock, a clean SIGTERM, and the
//! spare monitor it keeps.

mod common;

use common::{client::pod_config, host, TestEnv, Up};
use nidus::api::*;

#[tokio::test]
async fn version_status_and_runtime_config_answer() {
    let mut env = TestEnv::new("version");
    let mut cri = env.start().await;

    let v = cri.version().await.unwrap();
    assert_eq!(v.runtime_name, "nidus");
    assert_eq!(v.runtime_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(v.runtime_api_version, "v1");

    let status = cri.runtime.status(StatusRequest { verbose: true }).await.unwrap().into_inner();
    let conditions = status.status.unwrap().conditions;
    let runtime_ready = conditions.iter().find(|c| c.r#type == "RuntimeReady").unwrap();
    assert!(runtime_ready.status, "RuntimeReady: {runtime_ready:?}");
    let network_ready = conditions.iter().find(|c| c.r#type == "NetworkReady").unwrap();
    assert!(!network_ready.status);
    assert_eq!(network_ready.reason, "NetworkPluginNotReady");
    assert!(!network_ready.message.is_empty());
    let info: serde_json::Value = serde_json::from_str(status.info.get("config").unwrap()).unwrap();
    assert_eq!(info["runtimeName"], "nidus");
    assert!(["v1", "v2"].contains(&info["cgroupVersion"].as_str().unwrap()));
    assert_eq!(info["config"]["root"], env.root.to_str().unwrap());

    let rc = cri.runtime.runtime_config(RuntimeConfigRequest {}).await.unwrap().into_inner();
    assert_eq!(rc.linux.unwrap().cgroup_driver(), CgroupDriver::Cgroupfs);
}

#[tokio::test]
async fn every_rpc_is_served_and_empty_requests_name_the_missing_field() {
    let mut env = TestEnv::new("unimpl");
    let mut cri = env.start().await;
    let checks: Vec<(&str, tonic::Status)> = vec![
        ("pod_sandbox_id", cri.runtime.checkpoint_pod(CheckpointPodRequest::default()).await.unwrap_err()),
        ("checkpoint_path", cri.runtime.restore_pod(RestorePodRequest::default()).await.unwrap_err()),
    ];
    for (field, status) in checks {
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{field}: {status:?}");
        assert!(status.message().contains(field), "{field}: message {:?} does not name it", status.message());
    }
    // The streaming one opens.
    cri.runtime.get_container_events(GetEventsRequest {}).await.expect("GetContainerEvents");
}

#[tokio::test]
async fn every_failed_call_logs_one_warn_line_with_its_code_and_ids() {
    let mut env = TestEnv::new("callog");
    let mut cri = env.start().await;
    let mut old = common::v1alpha2::CriV1alpha2::connect(&env.socket).await.unwrap();
    cri.version().await.unwrap();
    let unknown = "abcdef0123";
    let failures = [
        ("ContainerStatus", cri.container_status(unknown).await.unwrap_err()),
        ("PodSandboxStatus", cri.pod_status(unknown).await.unwrap_err()),
        ("CreateContainer", cri.runtime.create_container(CreateContainerRequest::default()).await.unwrap_err()),
        ("StartContainer", cri.start_container("not-an-id").await.unwrap_err()),
    ];
    let old_api = old
        .runtime
        .container_status(common::v1alpha2::api::ContainerStatusRequest {
            container_id: unknown.into(),
            verbose: false,
        })
        .await
        .unwrap_err();
    let log = env.daemon_log();
    let lines = |call: &str| -> Vec<String> {
        log.lines()
            .filter(|l| l.contains("call failed") && l.contains(&format!("call={call} ")))
            .map(String::from)
            .collect()
    };
    for (call, status) in &failures {
        let found = lines(call);
        let v1: Vec<&String> =
            found.iter().filter(|l| l.contains("api=runtime.v1 ") || l.contains("api=runtime.v1}")).collect();
        assert_eq!(v1.len(), 1, "{call}: one line for its one failure: {found:#?}");
        assert!(v1[0].contains(" WARN "), "{}", v1[0]);
        assert!(v1[0].contains(&format!("code={:?}", status.code())), "{}", v1[0]);
        assert!(v1[0].contains("elapsed_us="), "{}", v1[0]);
    }
    assert!(lines("ContainerStatus")[0].contains(&format!("container_id={unknown}")), "the id is in the span");
    assert!(lines("PodSandboxStatus")[0].contains(&format!("pod_id={unknown}")), "the id is in the span");
    let v1alpha2: Vec<String> =
        lines("ContainerStatus").into_iter().filter(|l| l.contains("api=runtime.v1alpha2")).collect();
    assert_eq!(v1alpha2.len(), 1, "the old API's call too: {v1alpha2:#?}");
    assert!(v1alpha2[0].contains(&format!("code={:?}", old_api.code())));
    // A call that succeeds is no warning.
    assert!(!log.lines().any(|l| l.contains("call=Version") && l.contains(" WARN ")));
    assert!(log.lines().any(|l| l.contains("call=Version") && l.contains("call answered")));
}

#[tokio::test]
async fn socket_is_private_and_a_second_instance_is_refused() {
    let mut env = TestEnv::new("lock");
    let _cri = env.start().await;
    assert_eq!(host::mode_of(&env.socket), 0o660, "socket mode");
    assert_eq!(host::owner_of(&env.socket), 0, "socket owner");
    assert_eq!(host::mode_of(&env.state), 0o700, "socket directory mode");

    let second = env.serve_command().output().expect("run a second nidus serve");
    assert!(!second.status.success(), "a second instance on the same state dir must fail");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains("another nidus instance holds the lock"), "stderr: {stderr}");
    // The first instance still serves.
    let mut cri = common::Cri::connect(&env.socket).await.unwrap();
    cri.version().await.unwrap();
}

#[tokio::test]
async fn a_root_that_is_the_state_directory_by_another_path_is_refused() {
    let env = TestEnv::new("samedir");
    std::fs::create_dir_all(&env.state).unwrap();
    std::os::unix::fs::symlink(&env.state, &env.root).unwrap();

    let mut serve = env.serve_command().stderr(std::process::Stdio::piped()).spawn().expect("run nidus serve");
    let status = host::wait_or_kill(&mut serve, std::time::Duration::from_secs(10))
        .expect("nidus serve started on a root that is its state directory");
    assert!(!status.success(), "root and state in one directory must fail");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut serve.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("are the same directory"), "stderr: {stderr}");
    assert!(!env.socket.exists(), "nothing serves");
    assert!(!env.state.join("nidus.lock").exists(), "refused before anything is made");
}

#[tokio::test]
async fn sigterm_stops_serving_and_pods_keep_running() {
    let mut env = TestEnv::new("sigterm");
    let mut cri = env.start().await;
    let id = cri.run_pod(pod_config("web")).await.unwrap();
    let pause = cri.pause_pid(&id).await;

    assert_eq!(env.terminate_daemon(), Some(0), "clean exit on SIGTERM");
    assert!(!env.socket.exists(), "socket removed at shutdown");
    assert!(host::process_running(pause), "pause must outlive the daemon");

    let mut cri = env.start().await;
    assert_eq!(cri.pod_state(&id).await, PodSandboxState::SandboxReady);
    assert_eq!(cri.pause_pid(&id).await, pause);
    cri.remove_pod(&id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn the_pause_subcommand_of_nidus_works_as_the_pause_program() {
    let env_config = std::env::temp_dir().join(format!("nidus-pause-config-{}.toml", std::process::id()));
    std::fs::write(&env_config, format!("[sandbox]\npause_binary = \"{}\"\n", common::nidus_bin().display())).unwrap();
    let mut env = TestEnv::new("pausecmd").with_args(&["--config", env_config.to_str().unwrap()]);
    let mut cri = env.start().await;
    let id = cri.run_pod(pod_config("web")).await.unwrap();
    let pause = cri.pause_pid(&id).await;
    // `nidus pause` (run through <state>/bin/nidus, a read-only mount of the
    // configured file) built the pod, then exec'd the tiny idle loop from a
    // sealed memfd in place.
    let cmdline = host::cmdline_once(pause, "nidus-pause-idle\0");
    assert_eq!(cmdline, "nidus-pause-idle\0");
    let exe = std::fs::read_link(format!("/proc/{pause}/exe")).unwrap();
    assert!(exe.to_string_lossy().starts_with("/memfd:nidus-pause-idle"), "{exe:?}");
    let rss_kb: u64 = std::fs::read_to_string(format!("/proc/{pause}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(rss_kb < 200, "the idle pause holds {rss_kb} kB");
    assert_eq!(cri.pod_state(&id).await, PodSandboxState::SandboxReady);
    cri.remove_pod(&id).await.unwrap();
    assert!(host::wait_gone(pause));
    env.assert_no_leftovers();
    let _ = std::fs::remove_file(env_config);
}

#[tokio::test]
async fn a_spare_monitor_waits_in_the_idle_class_and_ends_with_the_daemon() {
    let mut env = TestEnv::new("spare");
    let mut cri = env.start().await;
    let daemon = env.daemon_pid().unwrap();
    let spare = a_new_spare(daemon, &[]).await.expect("a spare monitor waits in SCHED_IDLE");
    let spares = host::children_named(daemon, "nidus-monitor");
    assert_eq!(spares, vec![spare], "one spare monitor by default");
    assert_eq!(host::sched_policy(spare), Some(5), "a spare waits in SCHED_IDLE");
    // It has settled in a directory of its own: its identity and its socket.
    let spare_dir =
        settled_spare_dir(&env, spare).await.expect("the spare settles in a directory of its own, its socket bound");
    // It has forked the next container's init ahead: the first process of
    // a PID namespace of its own, waiting in the idle class too.
    let prepared = prepared_init_of(spare).await.expect("the spare forks an init ahead");
    assert!(idle_class_soon(prepared).await, "the prepared init waits in SCHED_IDLE");
    assert_ne!(host::namespace(prepared, "pid"), host::namespace(spare, "pid"), "a PID namespace of its own");
    assert_eq!(pid_in_own_namespace(prepared), Some(1), "the prepared init is its namespace's PID 1");

    // A container built by a spare runs in the normal class, its init the
    // one forked ahead; the spare's directory became the container's run
    // dir, socket and all.
    let image = env.import_busybox(&mut cri).await;
    let pod = env.pod("spare");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let id = cri.run_container(&pod_id, &pod, common::client::container_config("c", &image, &["sleep", "60"])).await;
    let pid = cri.container_pid(&id).await;
    assert_eq!(pid, prepared, "the init forked ahead runs the container");
    assert_eq!(host::sched_policy(pid), Some(0), "the container is SCHED_OTHER");
    assert!(!spare_dir.exists(), "the taken spare's directory was renamed");
    let run_dir = env.state.join("containers").join(&id);
    assert_eq!(monitor_pid_in(&run_dir), Some(spare), "the spare monitors the container from its run dir");
    // StartContainer spoke to the monitor through the socket it bound as a spare.
    assert_eq!(cri.status_of(&id).await.state, ContainerState::ContainerRunning as i32);
    cri.remove_pod(&pod_id).await.unwrap();

    a_new_spare(daemon, &[spare]).await.expect("a new spare replaces the one taken");
    let spares = host::children_named(daemon, "nidus-monitor");
    assert_eq!(spare_dirs(&env).len(), 1, "one spare's directory, for the one waiting spare");
    let mut prepared = Vec::new();
    for &spare in &spares {
        prepared.push(prepared_init_of(spare).await.expect("the new spare forks an init ahead"));
    }
    env.kill_daemon();
    for pid in spares.into_iter().chain(prepared) {
        assert!(host::wait_gone(pid), "spare monitor or prepared init {pid} outlived the daemon");
    }
    // What the killed daemon's spare left goes when the next daemon starts.
    let _cri = env.start().await;
    let daemon = env.daemon_pid().unwrap();
    let spare = a_new_spare(daemon, &[]).await.expect("a spare monitor after the restart");
    let dir = settled_spare_dir(&env, spare).await.expect("the new spare settles");
    assert_eq!(spare_dirs(&env), vec![dir], "only the new spare's directory is left");
    env.assert_no_leftovers();
}

#[tokio::test]
async fn a_spare_container_directory_becomes_the_containers_with_the_images_etc() {
    use common::images::{self, Compression, LayerTar};
    let mut env = TestEnv::new("spare-dir");
    let mut cri = env.start().await;
    // One waits, with the upper and work dirs and the pod files' mount points.
    let spare = one_spare_container_dir(&env).await.expect("a spare container directory is made");
    assert!(spare.join("work").is_dir() && spare.join("upper").is_dir());
    for name in ["hostname", "hosts", "resolv.conf"] {
        assert!(spare.join("upper/etc").join(name).is_file(), "mount point {name} made ahead");
    }
    // Two images over busybox's base layer: one whose /etc has an owner, a
    // mode, a time and an extended attribute of its own, one whose /etc is
    // a symbolic link.
    let import = |name: &str, top: Vec<u8>| {
        let def = images::ImageDef {
            name: Some(format!("docker.io/library/{name}:1")),
            layers: vec![(images::busybox_base_layer(), Compression::Gzip), (top, Compression::None)],
            config: serde_json::json!({ "Env": [images::PATH_ENV], "Cmd": ["sh"] }),
        };
        let dir = env.base.join(name);
        images::write_oci_layout(&dir, &def);
        let out = env.image_import(&dir, None);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    import(
        "own-etc",
        LayerTar::new().xattrs(&[("user.nidus-test", b"kept")]).dir_owned("etc", 0o750, 1000, 2000).finish(),
    );
    import(
        "linked-etc",
        LayerTar::new()
            .dir("real-etc", 0o755)
            .file("real-etc/from-image", 0o644, b"kept\n")
            .symlink("etc", "real-etc")
            .finish(),
    );

    let pod = env.pod("spare-dir");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let config = |name: &str, image: &str| common::client::container_config(name, image, &["sleep", "60"]);
    let id = cri.run_container(&pod_id, &pod, config("own", "own-etc:1")).await;
    assert!(!spare.exists(), "the spare was taken");
    // The record's two writes and config.json's went into the empty files made for them.
    let container_dir = env.root.join("containers").join(&id);
    let names: Vec<String> =
        std::fs::read_dir(&container_dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    assert!(names.contains(&"container.json".to_string()) && names.contains(&"config.json".to_string()), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with(".tmp-")), "no temp file left: {names:?}");
    let upper_etc = container_dir.join("upper/etc");
    let meta = std::fs::symlink_metadata(&upper_etc).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (meta.mode() & 0o7777, meta.uid(), meta.gid()),
        (0o750, 1000, 2000),
        "the image's /etc, as a copy-up gives it"
    );
    assert_eq!(xattr::get(&upper_etc, "user.nidus-test").unwrap(), Some(b"kept".to_vec()), "its xattrs too");
    let image_etc = cri.exec_ok(&id, &["stat", "-c", "%a %u %g %Y", "/etc"]).await;
    assert_eq!(image_etc, format!("750 1000 2000 {}\n", meta.mtime()));
    let hostname = cri.exec_ok(&id, &["hostname"]).await;
    assert_eq!(cri.exec_ok(&id, &["cat", "/etc/hostname"]).await, hostname, "the pod's file is mounted");

    // A replacement is made after the create; one whose /etc is a link
    // keeps the link, and the pod's files are mounted where it leads.
    let replacement = one_spare_container_dir(&env).await.expect("a replacement spare directory");
    let id = cri.run_container(&pod_id, &pod, config("linked", "linked-etc:1")).await;
    assert!(!replacement.exists(), "the replacement was taken");
    assert_eq!(cri.exec_ok(&id, &["readlink", "/etc"]).await, "real-etc\n");
    assert_eq!(cri.exec_ok(&id, &["cat", "/etc/from-image", "/etc/hostname"]).await, format!("kept\n{hostname}"));
    assert!(!env.root.join("containers").join(&id).join("upper/etc").exists(), "no upper /etc over the link");

    cri.remove_pod(&pod_id).await.unwrap();
    let left = one_spare_container_dir(&env).await.expect("a spare directory waits again");
    // A killed daemon's spare goes when the next daemon starts, which makes its own.
    env.kill_daemon();
    let _cri = env.start().await;
    let new = one_spare_container_dir(&env).await.expect("a spare directory after the restart");
    assert_ne!(new, left, "the killed daemon's spare was removed, a new one made");
    env.assert_no_leftovers();
}

/// The one spare container directory, once it is made and waits in the
/// pool: under its own name, not the hidden one it is made under.
async fn one_spare_container_dir(env: &TestEnv) -> Option<std::path::PathBuf> {
    let root = env.root.join("spare-containers");
    settled(|| match host::names_in(&root).as_slice() {
        [name] if !name.starts_with('.') => {
            let dir = root.join(name);
            assert!(dir.join("upper/etc/resolv.conf").exists(), "a spare under its own name is whole");
            Some(dir)
        }
        _ => None,
    })
    .await
}

/// The init a spare monitor forked ahead (its one nidus-monitor child), once forked.
async fn prepared_init_of(spare: i32) -> Option<i32> {
    settled(|| match host::children_named(spare, "nidus-monitor").as_slice() {
        [init] => Some(*init),
        _ => None,
    })
    .await
}

/// A process's pid in its own PID namespace (the last of `NSpid`).
fn pid_in_own_namespace(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// The directories in which spare monitors settle, sorted.
fn spare_dirs(env: &TestEnv) -> Vec<std::path::PathBuf> {
    let root = env.state.join("spare-monitors");
    host::names_in(&root).into_iter().map(|name| root.join(name)).collect()
}

/// The pid in a monitor directory's monitor.json.
fn monitor_pid_in(dir: &std::path::Path) -> Option<i32> {
    let text = std::fs::read_to_string(dir.join("monitor.json")).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    value.get("pid")?.as_i64().map(|pid| pid as i32)
}

/// The spare-monitor directory whose monitor.json names `spare`,
/// once the spare has settled there: it writes monitor.json first and binds
/// its socket after, so a directory that names it may not have it yet.
async fn settled_spare_dir(env: &TestEnv, spare: i32) -> Option<std::path::PathBuf> {
    settled(|| {
        spare_dirs(env).into_iter().find(|d| monitor_pid_in(d) == Some(spare) && d.join("monitor.sock").exists())
    })
    .await
}

/// Whether `pid` is in SCHED_IDLE, or gets there soon (a monitor forks its
/// prepared init, then moves it to the idle class).
async fn idle_class_soon(pid: i32) -> bool {
    settled(|| (host::sched_policy(pid) == Some(5)).then_some(())).await.is_some()
}

/// The nidus-monitor children of the daemon other than `except`, once one
/// waits in SCHED_IDLE (a spare that waits in the pool).
async fn a_new_spare(daemon: i32, except: &[i32]) -> Option<i32> {
    settled(|| {
        host::children_named(daemon, "nidus-monitor")
            .into_iter()
            .find(|pid| !except.contains(pid) && host::sched_policy(*pid) == Some(5))
    })
    .await
}

/// What `probe` finds, asked every 10 ms for up to 30 s: what spares do in
/// the background takes long on a loaded machine, since spare monitors and
/// their prepared inits wait in SCHED_IDLE (the wait ends once it finds).
async fn settled<T>(mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    for _ in 0..3000 {
        if let Some(found) = probe() {
            return Some(found);
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    None
}

#[tokio::test]
async fn a_taken_spare_monitor_is_replaced_whether_its_create_succeeds_or_fails() {
    use common::client::security;
    use common::probe::profile;
    use nidus::api::security_profile::ProfileType;
    let mut env = TestEnv::new("respare");
    let mut cri = env.start().await;
    let daemon = env.daemon_pid().unwrap();
    let first = a_new_spare(daemon, &[]).await.expect("a spare monitor at start");
    let image = env.import_busybox(&mut cri).await;
    let pod = env.pod("respare");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();

    // A create that fails once it has taken the spare (its Localhost profile
    // is missing): the spare is dismissed and another takes its place.
    let mut config = common::client::container_config("broken", &image, &["sleep", "60"]);
    security(&mut config).seccomp = Some(profile(ProfileType::Localhost, "/nonexistent/nidus-profile.json"));
    let refused = cri.create_container(&pod_id, &pod, config).await.expect_err("a missing profile fails the create");
    assert!(refused.message().contains("nidus-profile.json"), "{refused:?}");
    assert!(host::wait_gone(first), "the dismissed spare {first} ended");
    let second = a_new_spare(daemon, &[first]).await.expect("a new spare after a failed create");

    // A create that succeeds builds with the spare; another replaces it.
    let id = cri.run_container(&pod_id, &pod, common::client::container_config("c", &image, &["sleep", "60"])).await;
    let third = a_new_spare(daemon, &[first, second]).await.expect("a new spare after a create");
    assert!(host::sched_policy(second).is_some(), "the taken spare {second} monitors the container");
    assert_ne!(host::sched_policy(second), Some(5), "the taken spare left the idle class");
    assert_eq!(cri.status_of(&id).await.state, ContainerState::ContainerRunning as i32);
    assert_eq!(
        host::children_named(daemon, "nidus-monitor").into_iter().filter(|p| ![second, third].contains(p)).count(),
        0,
        "one spare waits, beside the container's monitor"
    );

    // A spare killed while it waits (the OOM killer, an operator) is not
    // taken: the next create starts a monitor of its own and succeeds, and
    // nothing of the dead spare is left.
    let third_dir = settled_spare_dir(&env, third).await.expect("the third spare settles");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(third), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(host::wait_gone(third), "the killed spare {third} ended");
    let id = cri.run_container(&pod_id, &pod, common::client::container_config("d", &image, &["sleep", "60"])).await;
    assert_eq!(cri.status_of(&id).await.state, ContainerState::ContainerRunning as i32);
    assert!(!third_dir.exists(), "the killed spare's directory {} is removed", third_dir.display());
    let fourth = a_new_spare(daemon, &[first, second, third]).await.expect("a new spare after the kill");
    let fourth_dir = settled_spare_dir(&env, fourth).await.expect("the new spare settles");
    assert_eq!(spare_dirs(&env), vec![fourth_dir], "only the waiting spare's directory is left");

    // A create that is never started (crictl create) gets its replacement too.
    let config = common::client::container_config("e", &image, &["sleep", "60"]);
    let id = cri.create_container(&pod_id, &pod, config).await.unwrap();
    let fifth = a_new_spare(daemon, &[first, second, third, fourth]).await.expect("a new spare after a create alone");
    assert_eq!(cri.status_of(&id).await.state, ContainerState::ContainerCreated as i32);
    assert_ne!(host::sched_policy(fourth), Some(5), "the spare {fourth} taken by the create left the idle class");
    assert!(host::process_running(fifth));
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn a_container_the_prepared_init_does_not_fit_or_missed_gets_an_init_of_its_own() {
    use common::client::security;
    let Up { env, mut cri, image, pod, pod_id } = TestEnv::new("unfit").up("unfit").await;
    let daemon = env.daemon_pid().unwrap();
    let pause = cri.pause_pid(&pod_id).await;

    // With a terminal, or in the pod's PID namespace, the init forked ahead
    // (PID 1 of a namespace of its own, stdio on pipes) cannot serve: the
    // monitor ends it and forks the container's init, which runs as asked.
    let mut tty = common::client::container_config("tty", &image, &["sleep", "60"]);
    tty.tty = true;
    let mut shared = common::client::container_config("shared", &image, &["sleep", "60"]);
    security(&mut shared).namespace_options.as_mut().unwrap().pid = NamespaceMode::Pod as i32;
    let mut taken = Vec::new();
    for (config, in_pods_namespace) in [(tty, false), (shared, true)] {
        let name = config.metadata.as_ref().unwrap().name.clone();
        let spare = a_new_spare(daemon, &taken).await.expect("a waiting spare");
        taken.push(spare);
        let prepared = prepared_init_of(spare).await.expect("the spare forks an init ahead");
        let id = cri.run_container(&pod_id, &pod, config).await;
        assert_eq!(cri.status_of(&id).await.state, ContainerState::ContainerRunning as i32, "{name}");
        let pid = cri.container_pid(&id).await;
        assert_ne!(pid, prepared, "{name}: an init of its own");
        assert!(host::wait_gone(prepared), "{name}: the unused prepared init {prepared} ended");
        let pods_namespace = host::namespace(pid, "pid") == host::namespace(pause, "pid");
        assert_eq!(pods_namespace, in_pods_namespace, "{name}: the PID namespace asked for");
    }
    // An init forked ahead that was killed while it waited (the OOM killer,
    // an operator) fails no create: the container gets an init of its own.
    let spare = a_new_spare(daemon, &taken).await.expect("a waiting spare");
    let prepared = prepared_init_of(spare).await.expect("the spare forks an init ahead");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(prepared), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(host::wait_gone(prepared), "the killed prepared init {prepared} ended");
    let id = cri.run_container(&pod_id, &pod, common::client::container_config("c", &image, &["sleep", "60"])).await;
    assert_eq!(cri.status_of(&id).await.state, ContainerState::ContainerRunning as i32);
    assert_ne!(cri.container_pid(&id).await, prepared, "an init of its own");
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}
