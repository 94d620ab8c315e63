//! What conformance runs and hostile-input probing found, each through the
//! real socket: Bidirectional mounts propagate back to the node; run_as_group
//! alone is refused; a Localhost seccomp profile that is a device, a FIFO or
//! too large is refused at once and leaves nothing; container logs never go
//! through a symbolic link; bad cpusets, checkpoint locations on kernel file
//! systems and ExecSync deadlines get the right codes; Stop and Remove are
//! idempotent for any id; errors never echo a huge input back.

mod common;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::{Duration, Instant};

use common::client::{container_config, resources, security};
use common::{host, Cri, TestEnv, Up};
use nidus::api::*;
use tonic::Code;

const SLEEPER: &[&str] = &["sleep", "1000"];

async fn tear_down(env: &TestEnv, cri: &mut Cri, pod_id: &str) {
    cri.stop_pod(pod_id).await.expect("StopPodSandbox");
    cri.remove_pod(pod_id).await.expect("RemovePodSandbox");
    env.assert_no_leftovers();
}

fn assert_refused(result: Result<String, tonic::Status>, code: Code, names: &[&str], what: &str) {
    let err = result.expect_err(what);
    assert_eq!(err.code(), code, "{what}: {err:?}");
    for name in names {
        assert!(err.message().contains(name), "{what}: the message {:?} must name {name}", err.message());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bidirectional_mounts_propagate_from_the_container_to_the_node() {
    let Up { env, mut cri, image, pod, pod_id } = TestEnv::new("bidir").up("bidir").await;
    let shared = env.base.join("shared");
    fs::create_dir_all(&shared).unwrap();
    host::run("mount", &["-t", "tmpfs", "-o", "size=1m", "nidus-bidir-test", &shared.to_string_lossy()]);
    host::run("mount", &["--make-shared", &shared.to_string_lossy()]);
    fs::create_dir_all(shared.join("inner")).unwrap();

    let mut config = container_config("bidir", &image, SLEEPER);
    security(&mut config).privileged = true;
    config.mounts = vec![Mount {
        container_path: "/shared".into(),
        host_path: shared.display().to_string(),
        propagation: MountPropagation::PropagationBidirectional as i32,
        ..Default::default()
    }];
    let id = cri.run_container(&pod_id, &pod, config).await;
    // Container → node: a mount made inside shows on the node.
    cri.exec_ok(&id, &["mount", "-t", "tmpfs", "-o", "size=1m", "from-container", "/shared/inner"]).await;
    cri.exec_ok(&id, &["sh", "-c", "echo made-inside > /shared/inner/file"]).await;
    assert_eq!(
        host::fstype_of_mount(&shared.join("inner")).as_deref(),
        Some("tmpfs"),
        "the container's mount reached the node"
    );
    assert_eq!(fs::read_to_string(shared.join("inner/file")).unwrap().trim(), "made-inside");
    // Node → container still works.
    let from_node = shared.join("from-node");
    fs::create_dir_all(&from_node).unwrap();
    host::run("mount", &["-t", "tmpfs", "-o", "size=1m", "from-node", &from_node.to_string_lossy()]);
    fs::write(from_node.join("hello"), "node").unwrap();
    assert_eq!(cri.exec_ok(&id, &["cat", "/shared/from-node/hello"]).await.trim(), "node");

    // A Bidirectional mount of a source that is not on a shared mount is refused, naming it.
    let private = env.base.join("private-src");
    fs::create_dir_all(&private).unwrap();
    host::run("mount", &["-t", "tmpfs", "-o", "size=1m", "nidus-private-test", &private.to_string_lossy()]);
    host::run("mount", &["--make-private", &private.to_string_lossy()]);
    let mut config = container_config("private", &image, SLEEPER);
    config.mounts = vec![Mount {
        container_path: "/p".into(),
        host_path: private.display().to_string(),
        propagation: MountPropagation::PropagationBidirectional as i32,
        ..Default::default()
    }];
    assert_refused(
        cri.create_container(&pod_id, &pod, config).await,
        Code::InvalidArgument,
        &["config.mounts", "not shared"],
        "Bidirectional from a private mount",
    );

    cri.stop_container(&id, 0).await.unwrap();
    cri.remove_container(&id).await.unwrap();
    // The test's own mounts go before the check that nidus left none.
    host::unmount_under(&shared);
    host::unmount_under(&private);
    tear_down(&env, &mut cri, &pod_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_as_group_needs_run_as_user() {
    let Up { env, mut cri, image, pod, pod_id } = TestEnv::new("rungroup").up("rungroup").await;
    let mut config = container_config("group-only", &image, SLEEPER);
    security(&mut config).run_as_group = Some(Int64Value { value: 1000 });
    assert_refused(
        cri.create_container(&pod_id, &pod, config).await,
        Code::InvalidArgument,
        &["run_as_group", "run_as_user"],
        "run_as_group alone",
    );
    // With run_as_user (or run_as_username) it is accepted.
    let mut config = container_config("group-and-user", &image, &["id"]);
    security(&mut config).run_as_group = Some(Int64Value { value: 1000 });
    security(&mut config).run_as_user = Some(Int64Value { value: 1000 });
    let id = cri.run_container(&pod_id, &pod, config).await;
    cri.wait_exited(&id, 10).await;
    cri.remove_container(&id).await.unwrap();
    tear_down(&env, &mut cri, &pod_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_localhost_profile_that_is_no_bounded_regular_file_is_refused_at_once() {
    let Up { env, mut cri, image, pod, pod_id } = TestEnv::new("seccompfile").up("seccompfile").await;
    let fifo = env.base.join("profile.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let large = env.base.join("large.json");
    fs::write(&large, vec![b' '; 2 << 20]).unwrap();
    let cases = [
        (Path::new("/dev/zero").to_path_buf(), "a character device"),
        (fifo, "a FIFO"),
        (env.base.clone(), "a directory"),
        (large, "over the limit of 1048576 bytes"),
    ];
    for (path, why) in cases {
        let mut config = container_config("profile", &image, SLEEPER);
        security(&mut config).seccomp = Some(SecurityProfile {
            profile_type: security_profile::ProfileType::Localhost as i32,
            localhost_ref: path.display().to_string(),
        });
        let started = Instant::now();
        let result = tokio::time::timeout(Duration::from_secs(10), cri.create_container(&pod_id, &pod, config))
            .await
            .unwrap_or_else(|_| panic!("CreateContainer with the profile {} blocked", path.display()));
        assert!(started.elapsed() < Duration::from_secs(5), "{why}: answered in {:?}", started.elapsed());
        assert_refused(result, Code::InvalidArgument, &["security_context.seccomp", why], why);
        assert_eq!(fs::read_dir(env.root.join("containers")).unwrap().count(), 0, "{why}: no container dir left");
    }
    assert_eq!(cri.version().await.expect("the daemon still answers").runtime_name, "nidus");
    tear_down(&env, &mut cri, &pod_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_logs_never_go_through_a_symbolic_link() {
    let mut env = TestEnv::new("loglinks");
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let outside = env.base.join("outside");
    fs::create_dir_all(&outside).unwrap();

    // 1. The pod's log directory is itself a symbolic link.
    let mut pod = env.pod("linkdir");
    let linked = env.base.join("logs-link");
    symlink(&outside, &linked).unwrap();
    pod.log_directory = linked.display().to_string();
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let mut config = container_config("c", &image, &["echo", "hello"]);
    config.log_path = "c/0.log".into();
    assert_refused(
        cri.create_container(&pod_id, &pod, config).await,
        Code::InvalidArgument,
        &["config.log_path", "symbolic link"],
        "a log directory that is a symlink",
    );
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();

    // 2. A subdirectory of it, and 3. the log file itself, are links.
    let pod = env.pod("linkinside");
    let log_dir = Path::new(&pod.log_directory).to_path_buf();
    fs::create_dir_all(log_dir.join("real")).unwrap();
    symlink(&outside, log_dir.join("sub")).unwrap();
    symlink(outside.join("planted.log"), log_dir.join("real/0.log")).unwrap();
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    for (log_path, what) in [("sub/0.log", "a linked subdirectory"), ("real/0.log", "a planted log file link")] {
        let mut config = container_config("c", &image, &["echo", "hello"]);
        config.log_path = log_path.into();
        assert_refused(
            cri.create_container(&pod_id, &pod, config).await,
            Code::InvalidArgument,
            &["config.log_path", "symbolic link"],
            what,
        );
    }
    // A plain log path still works, and its log is where kubelet reads it.
    let mut config = container_config("plain", &image, &["echo", "hello"]);
    config.log_path = "plain/0.log".into();
    let id = cri.run_container(&pod_id, &pod, config).await;
    cri.wait_exited(&id, 10).await;
    assert!(fs::read_to_string(log_dir.join("plain/0.log")).unwrap().contains("stdout F hello"));

    // 4. The log is rotated and a link planted in its place before the reopen.
    let runner = cri.run_container(&pod_id, &pod, {
        let mut c = container_config("runner", &image, &["sh", "-c", "while true; do echo tick; sleep 0.1; done"]);
        c.log_path = "runner/0.log".into();
        c
    });
    let runner = runner.await;
    cri.wait_for_line(&runner, "tick", 10).await;
    fs::rename(log_dir.join("runner/0.log"), log_dir.join("runner/0.log.1")).unwrap();
    symlink(outside.join("rotated.log"), log_dir.join("runner/0.log")).unwrap();
    let err = cri
        .runtime
        .reopen_container_log(ReopenContainerLogRequest { container_id: runner.clone() })
        .await
        .expect_err("a reopen through a planted link");
    assert!(err.message().contains("symbolic link") || err.message().contains("reopen"), "{err:?}");
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0, "nothing was written outside the log directory");
    cri.stop_container(&runner, 0).await.unwrap();
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_inputs_get_the_right_status_codes() {
    let Up { env, mut cri, image, pod, pod_id } = TestEnv::new("codes").up("codes").await;
    // A cpuset beyond the node's CPUs.
    let mut config = container_config("cpuset", &image, SLEEPER);
    resources(&mut config).cpuset_cpus = "0-1000".into();
    assert_refused(
        cri.create_container(&pod_id, &pod, config).await,
        Code::InvalidArgument,
        &["cpuset_cpus", "online"],
        "cpuset_cpus 0-1000",
    );
    let id = cri.run_container(&pod_id, &pod, container_config("sleeper", &image, SLEEPER)).await;
    // UpdateContainerResources refuses the same cpuset the same way.
    let update = LinuxContainerResources { cpuset_cpus: "0-1000".into(), ..Default::default() };
    let err = cri.update_resources(&id, update).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    // A checkpoint location on a kernel file system.
    for location in ["/sys/nidus-checkpoint.tar", "/proc/nidus-checkpoint.tar"] {
        let err = cri
            .runtime
            .checkpoint_container(CheckpointContainerRequest {
                container_id: id.clone(),
                location: location.into(),
                timeout: 30,
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{location}: {err:?}");
        assert!(err.message().contains("kernel file system"), "{location}: {err:?}");
    }
    // An ExecSync whose client deadline passes: always DeadlineExceeded.
    for round in 0..6 {
        let mut request = tonic::Request::new(ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["sleep".into(), "30".into()],
            timeout: 0,
        });
        request.set_timeout(Duration::from_millis(300 + 50 * round));
        let err = cri.runtime.exec_sync(request).await.unwrap_err();
        assert_eq!(err.code(), Code::DeadlineExceeded, "round {round}: {err:?}");
    }
    cri.stop_container(&id, 0).await.unwrap();
    cri.remove_container(&id).await.unwrap();
    tear_down(&env, &mut cri, &pod_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_and_remove_of_an_unknown_id_succeed_and_status_says_not_found() {
    let mut env = TestEnv::new("idempotent");
    let mut cri = env.start().await;
    let unknown = ["0f5c0fb4-9cbb-4f6a-8b4c-2a1f3c2d9e10", "deadbeef", &"a".repeat(64), "not an id at all"];
    for id in unknown {
        cri.stop_pod(id).await.unwrap_or_else(|e| panic!("StopPodSandbox {id:?}: {e:?}"));
        cri.remove_pod(id).await.unwrap_or_else(|e| panic!("RemovePodSandbox {id:?}: {e:?}"));
        cri.stop_container(id, 0).await.unwrap_or_else(|e| panic!("StopContainer {id:?}: {e:?}"));
        cri.remove_container(id).await.unwrap_or_else(|e| panic!("RemoveContainer {id:?}: {e:?}"));
    }
    for id in ["deadbeef", &"a".repeat(64)] {
        assert_eq!(cri.pod_status(id).await.unwrap_err().code(), Code::NotFound, "PodSandboxStatus {id}");
        assert_eq!(cri.container_status(id).await.unwrap_err().code(), Code::NotFound, "ContainerStatus {id}");
    }
    // An empty id is still a bad request.
    assert_eq!(cri.stop_pod("").await.unwrap_err().code(), Code::InvalidArgument);
    assert_eq!(cri.remove_container("").await.unwrap_err().code(), Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_quote_huge_inputs_shortened() {
    let mut env = TestEnv::new("hugeinput");
    let mut cri = env.start().await;
    let huge = "x".repeat(1 << 20);
    let err = cri.pod_status(&huge).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{:?}", &err.message()[..err.message().len().min(300)]);
    assert!(err.message().len() < 1024, "the message is {} bytes", err.message().len());
    assert!(err.message().contains("(1048576 bytes)"), "{}", err.message());
    let err = cri.image_status(&huge).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().len() < 1024, "the message is {} bytes", err.message().len());
    let mut pod = env.pod("huge");
    pod.hostname = huge.clone();
    let err = cri.run_pod(pod).await.unwrap_err();
    assert!(err.message().len() <= nidus::cri::MAX_STATUS_MESSAGE, "the message is {} bytes", err.message().len());
    env.assert_no_leftovers();
}

/// A registry on 127.0.0.1 in the test's namespace that accepts and never
/// answers; its port. The listener thread ends with the test process.
fn tarpit(env: &TestEnv) -> u16 {
    let netns = fs::File::open(format!("/run/netns/{}", env.netns)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        tx.send(listener.local_addr().unwrap().port()).unwrap();
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    rx.recv().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_deadline_is_always_deadline_exceeded_never_cancelled() {
    let mut env = TestEnv::new("deadlines");
    let mut cri = env.start().await;
    let port = tarpit(&env);
    let mut raw = common::raw_h2::RawClient::connect(&env.socket, None).await;
    for (round, millis) in [300u64, 600, 1000, 1500].iter().enumerate() {
        let deadline = Duration::from_millis(*millis);
        // A pull from a registry that never answers: always past the deadline.
        let mut pull = tonic::Request::new(PullImageRequest {
            image: Some(ImageSpec { image: format!("127.0.0.1:{port}/never:there"), ..Default::default() }),
            ..Default::default()
        });
        pull.set_timeout(deadline);
        let status = cri.images.pull_image(pull).await.expect_err("a pull from a registry that never answers");
        assert_eq!(status.code(), Code::DeadlineExceeded, "PullImage with a {millis} ms deadline: {status:?}");
        assert!(status.message().contains("grpc-timeout"), "{status:?}");
        // A call that may or may not finish in time: never Cancelled. Sent
        // by a client without a timer of its own (tonic's would answer its
        // own Cancelled when the daemon's answer comes late on a busy node).
        let run = RunPodSandboxRequest { config: Some(env.pod(&format!("maybe{round}"))), ..Default::default() };
        let timeout = format!("{}m", millis / 10);
        let answer: Result<RunPodSandboxResponse, _> = raw
            .call_with("/runtime.v1.RuntimeService/RunPodSandbox", &run, &[(b"grpc-timeout", timeout.as_bytes())])
            .await;
        if let Err((code, message)) = answer {
            assert_ne!(code, Code::Cancelled as u32, "RunPodSandbox with a {timeout} deadline: {message}");
        }
    }
    // What a call made for a client that left is undone; what it answered stays.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for pod in cri.list_pods(None).await {
        cri.stop_pod(&pod.id).await.unwrap();
        cri.remove_pod(&pod.id).await.unwrap();
    }
    env.assert_no_leftovers();
}
