//! runtime.v1alpha2 beside runtime.v1 on one socket: one scenario run through
//! both APIs gives the same results (Version alone names its API); RPCs only
//! runtime.v1 has are absent from v1alpha2; pods made through one API are seen
//! and removed through the other; the switch
//! `grpc.serve_v1alpha2 = false` takes v1alpha2 away and leaves v1 alone.

mod common;

use std::collections::HashMap;
use std::fmt::Debug;

use common::apis::CriApi;
use common::client::{container_config, parse_log, pod_config};
use common::v1alpha2::{self, api as a2, CriV1alpha2};
use common::TestEnv;
use nidus::api::*;
use tonic::Code;

/// What a scenario saw, step by step, without ids or times: equal for both APIs.
#[derive(Default)]
struct Transcript {
    lines: Vec<String>,
    /// Sandbox ids of this run and the names they are written as.
    ids: Vec<(String, String)>,
}

impl Transcript {
    fn see(&mut self, step: &str, what: impl Debug) {
        let mut line = format!("{step}: {what:?}");
        for (id, name) in &self.ids {
            line = line.replace(id.as_str(), &format!("<{name}>"));
        }
        self.lines.push(line);
    }

    /// Records an answer as ok, or as the error code and message.
    fn outcome<T>(&mut self, step: &str, result: Result<T, tonic::Status>) {
        match result {
            Ok(_) => self.see(step, "ok"),
            Err(status) => self.see(step, (status.code(), status.message().to_string())),
        }
    }
}

fn filter_by_id(id: &str) -> PodSandboxFilter {
    PodSandboxFilter { id: id.into(), ..Default::default() }
}

fn filter_by_state(state: PodSandboxState) -> PodSandboxFilter {
    PodSandboxFilter { state: Some(PodSandboxStateValue { state: state as i32 }), ..Default::default() }
}

fn filter_by_label(key: &str, value: &str) -> PodSandboxFilter {
    PodSandboxFilter { label_selector: HashMap::from([(key.into(), value.into())]), ..Default::default() }
}

async fn pod_names<C: CriApi>(cri: &mut C, filter: Option<PodSandboxFilter>) -> Vec<String> {
    let items = cri.list_pod_sandbox(ListPodSandboxRequest { filter }).await.expect("ListPodSandbox").items;
    let mut names: Vec<String> = items.into_iter().map(|p| p.metadata.unwrap_or_default().name).collect();
    names.sort();
    names
}

async fn pod_status<C: CriApi>(cri: &mut C, id: &str) -> PodSandboxStatus {
    let response = cri
        .pod_sandbox_status(PodSandboxStatusRequest { pod_sandbox_id: id.into(), verbose: false })
        .await
        .expect("PodSandboxStatus");
    response.status.expect("status")
}

/// The pod sandbox lifecycle, Version, Status, image calls and the answers to
/// bad input and to RPCs nidus does not serve yet, through one API.
async fn scenario<C: CriApi>(cri: &mut C, image: &str, logs: &std::path::Path) -> Vec<String> {
    let mut seen = Transcript::default();

    let version = cri.version(VersionRequest { version: "0.1.0".into() }).await.expect("Version");
    assert_eq!(version.runtime_api_version, cri.api_version(), "Version names the API it was asked through");
    assert_eq!(version.runtime_name, "nidus");
    seen.see("version", (&version.version, &version.runtime_name, &version.runtime_version));

    let status = cri.status(StatusRequest { verbose: true }).await.expect("Status");
    let conditions = status.status.expect("runtime status").conditions;
    assert!(conditions.iter().any(|c| c.r#type == "RuntimeReady" && c.status), "{conditions:?}");
    seen.see("status conditions", conditions);
    let info: serde_json::Value = serde_json::from_str(&status.info["config"]).expect("verbose info is JSON");
    assert_eq!(info["servedApis"], serde_json::json!(["runtime.v1", "runtime.v1alpha2"]));
    seen.see("status info", (status.info.keys().collect::<Vec<_>>(), &info["runtimeName"], &info["servedApis"]));

    // Two pods; web stays up, db is stopped.
    assert_eq!(pod_names(cri, None).await, Vec::<String>::new(), "the scenario starts with no pods");
    let mut db_config = pod_config("db");
    db_config.labels.insert("tier".into(), "back".into());
    let mut ids = HashMap::new();
    let mut web_config = pod_config("web");
    web_config.log_directory = logs.join("web").display().to_string();
    for (name, config) in [("web", web_config.clone()), ("db", db_config)] {
        let request = RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() };
        let id = cri.run_pod_sandbox(request).await.expect("RunPodSandbox").pod_sandbox_id;
        seen.ids.push((id.clone(), name.to_string()));
        ids.insert(name, id);
    }
    let (web, db) = (ids["web"].clone(), ids["db"].clone());

    let status = pod_status(cri, &web).await;
    assert_eq!(status.id, web);
    assert_eq!(status.state(), PodSandboxState::SandboxReady);
    assert_eq!(status.metadata.as_ref().map(|m| m.name.as_str()), Some("web"));
    assert!(status.created_at > 0);
    let namespaces = status.linux.as_ref().and_then(|l| l.namespaces.as_ref()).and_then(|n| n.options.clone());
    assert_eq!(namespaces.as_ref().map(|o| o.pid()), Some(NamespaceMode::Pod));
    seen.see(
        "web status",
        (&status.metadata, status.state, &status.network, namespaces, status.labels, status.annotations),
    );
    let verbose = cri
        .pod_sandbox_status(PodSandboxStatusRequest { pod_sandbox_id: web[..12].into(), verbose: true })
        .await
        .expect("PodSandboxStatus by id prefix, verbose");
    let info: serde_json::Value = serde_json::from_str(&verbose.info["info"]).expect("verbose info is JSON");
    assert!(info["pid"].as_i64().unwrap_or(0) > 0, "a pause pid: {info}");
    seen.see("web verbose", (&info["hostname"], &info["namespaces"]["network"].is_string(), &info["config"]["labels"]));

    seen.see("list", pod_names(cri, None).await);
    seen.see("list by id", pod_names(cri, Some(filter_by_id(&web))).await);
    seen.see("list by id prefix", pod_names(cri, Some(filter_by_id(&db[..13]))).await);
    seen.see("list by label", pod_names(cri, Some(filter_by_label("tier", "back"))).await);
    seen.see("list by unknown id", pod_names(cri, Some(filter_by_id("0123456789ab"))).await);

    containers(cri, &mut seen, &web, &web_config, image).await;

    cri.stop_pod_sandbox(StopPodSandboxRequest { pod_sandbox_id: db.clone() }).await.expect("StopPodSandbox");
    assert_eq!(pod_status(cri, &db).await.state(), PodSandboxState::SandboxNotready);
    seen.see("list ready", pod_names(cri, Some(filter_by_state(PodSandboxState::SandboxReady))).await);
    seen.see("list not ready", pod_names(cri, Some(filter_by_state(PodSandboxState::SandboxNotready))).await);
    let again = cri.stop_pod_sandbox(StopPodSandboxRequest { pod_sandbox_id: db.clone() }).await;
    seen.outcome("stop again", again);

    // Bad input: the same statuses and messages through either API.
    let no_config = RunPodSandboxRequest { config: None, runtime_handler: String::new() };
    seen.outcome("run without config", cri.run_pod_sandbox(no_config).await);
    let taken = RunPodSandboxRequest { config: Some(pod_config("web")), runtime_handler: String::new() };
    let taken = cri.run_pod_sandbox(taken).await;
    assert_eq!(taken.as_ref().map_err(|e| e.code()).err(), Some(Code::AlreadyExists));
    seen.outcome("run with a name in use", taken);
    let handler = RunPodSandboxRequest { config: Some(pod_config("rh")), runtime_handler: "kata".into() };
    seen.outcome("run with an unknown runtime handler", cri.run_pod_sandbox(handler).await);
    let mut nameless = pod_config("nameless");
    nameless.metadata.as_mut().expect("metadata").name.clear();
    let nameless = RunPodSandboxRequest { config: Some(nameless), runtime_handler: String::new() };
    seen.outcome("run without a name", cri.run_pod_sandbox(nameless).await);
    let empty_id = PodSandboxStatusRequest { pod_sandbox_id: String::new(), verbose: false };
    seen.outcome("status of an empty id", cri.pod_sandbox_status(empty_id).await);
    let unknown = PodSandboxStatusRequest { pod_sandbox_id: "0123456789ab".into(), verbose: false };
    let unknown = cri.pod_sandbox_status(unknown).await;
    assert_eq!(unknown.as_ref().map_err(|e| e.code()).err(), Some(Code::NotFound));
    seen.outcome("status of an unknown id", unknown);
    seen.outcome(
        "stop an unknown id",
        cri.stop_pod_sandbox(StopPodSandboxRequest { pod_sandbox_id: "0123".into() }).await,
    );
    let remove_unknown = RemovePodSandboxRequest { pod_sandbox_id: "0123456789ab".into() };
    seen.outcome("remove an unknown id", cri.remove_pod_sandbox(remove_unknown).await);
    let bad_chars = StopPodSandboxRequest { pod_sandbox_id: "../../etc".into() };
    seen.outcome("stop a path as id", cri.stop_pod_sandbox(bad_chars).await);

    not_yet_served(cri, &mut seen, &web).await;

    for id in [&web, &db] {
        let remove = RemovePodSandboxRequest { pod_sandbox_id: id.clone() };
        cri.remove_pod_sandbox(remove).await.expect("RemovePodSandbox");
    }
    seen.see("list after remove", pod_names(cri, None).await);
    let gone = cri.pod_sandbox_status(PodSandboxStatusRequest { pod_sandbox_id: web.clone(), verbose: false }).await;
    seen.outcome("status after remove", gone);
    seen.outcome("remove again", cri.remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: web }).await);
    seen.lines
}

/// A container's life in pod `web`: create, start, list (with filters),
/// status, ExecSync, its log and ReopenContainerLog, stop, remove.
async fn containers<C: CriApi>(
    cri: &mut C,
    seen: &mut Transcript,
    pod: &str,
    pod_config: &PodSandboxConfig,
    image: &str,
) {
    let mut config = container_config("app", image, &["sh", "-c", "echo out; echo err >&2; exec sleep 1000"]);
    config.labels.insert("role".into(), "app".into());
    let create = CreateContainerRequest {
        pod_sandbox_id: pod.into(),
        config: Some(config),
        sandbox_config: Some(pod_config.clone()),
    };
    let app = cri.create_container(create).await.expect("CreateContainer").container_id;
    seen.ids.push((app.clone(), "app".into()));
    let created = cri.container_status(ContainerStatusRequest { container_id: app.clone(), verbose: false }).await;
    seen.see("created state", created.expect("ContainerStatus").status.expect("status").state());
    seen.outcome("StartContainer", cri.start_container(StartContainerRequest { container_id: app.clone() }).await);
    seen.outcome("start again", cri.start_container(StartContainerRequest { container_id: app.clone() }).await);

    let list = |filter: ContainerFilter| ListContainersRequest { filter: Some(filter) };
    let names = |r: Result<ListContainersResponse, tonic::Status>| {
        r.expect("ListContainers")
            .containers
            .into_iter()
            .map(|c| (c.id, c.metadata.map(|m| m.name), c.state))
            .collect::<Vec<_>>()
    };
    seen.see("containers", names(cri.list_containers(ListContainersRequest::default()).await));
    seen.see(
        "containers by id prefix",
        names(cri.list_containers(list(ContainerFilter { id: app[..12].into(), ..Default::default() })).await),
    );
    let running = ContainerStateValue { state: ContainerState::ContainerRunning as i32 };
    seen.see(
        "running containers",
        names(cri.list_containers(list(ContainerFilter { state: Some(running), ..Default::default() })).await),
    );
    seen.see(
        "containers of the pod",
        names(cri.list_containers(list(ContainerFilter { pod_sandbox_id: pod.into(), ..Default::default() })).await),
    );
    let by_label =
        ContainerFilter { label_selector: HashMap::from([("role".into(), "app".into())]), ..Default::default() };
    seen.see("containers by label", names(cri.list_containers(list(by_label)).await));

    let status = cri
        .container_status(ContainerStatusRequest { container_id: app.clone(), verbose: true })
        .await
        .expect("ContainerStatus");
    let s = status.status.expect("status");
    assert!(s.started_at > 0 && s.log_path.ends_with("app/0.log"));
    seen.see(
        "status",
        // Fields both APIs have (user, stop_signal and user_specified_image are v1 only).
        (s.state(), &s.metadata, s.image.as_ref().map(|i| &i.image), &s.image_ref, s.exit_code, &s.labels),
    );
    let info: serde_json::Value = serde_json::from_str(&status.info["info"]).expect("verbose info is JSON");
    assert!(info["pid"].as_i64().unwrap_or(0) > 0, "{info}");
    seen.see("status info", (&info["sandboxID"], &info["runtimeSpec"]["process"]["args"]));

    let exec = |cmd: &[&str], timeout| ExecSyncRequest {
        container_id: app.clone(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        timeout,
    };
    let out = cri.exec_sync(exec(&["sh", "-c", "echo hi; echo oops >&2; exit 4"], 5)).await.expect("ExecSync");
    seen.see(
        "ExecSync",
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            out.exit_code,
        ),
    );
    seen.outcome("ExecSync timeout", cri.exec_sync(exec(&["sleep", "10"], 1)).await);

    // The log file, without its timestamps.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let records = loop {
        let records = parse_log(&std::fs::read_to_string(&s.log_path).unwrap_or_default());
        if records.len() >= 2 || std::time::Instant::now() > deadline {
            break records;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let mut lines: Vec<_> = records.into_iter().map(|r| (r.stream, r.tag, r.content)).collect();
    lines.sort();
    seen.see("log", lines);
    seen.outcome(
        "ReopenContainerLog",
        cri.reopen_container_log(ReopenContainerLogRequest { container_id: app.clone() }).await,
    );

    seen.outcome(
        "StopContainer",
        cri.stop_container(StopContainerRequest { container_id: app.clone(), timeout: 0 }).await,
    );
    let stopped = cri.container_status(ContainerStatusRequest { container_id: app.clone(), verbose: false }).await;
    let stopped = stopped.expect("ContainerStatus").status.expect("status");
    seen.see("stopped", (stopped.state(), stopped.exit_code, &stopped.reason));
    seen.outcome("ExecSync when stopped", cri.exec_sync(exec(&["true"], 1)).await);
    seen.outcome("RemoveContainer", cri.remove_container(RemoveContainerRequest { container_id: app.clone() }).await);
    seen.outcome("remove again", cri.remove_container(RemoveContainerRequest { container_id: app.clone() }).await);
    seen.see("containers after remove", names(cri.list_containers(ListContainersRequest::default()).await));
}

/// Containers, exec, stats, runtime config updates and images: the calls a
/// kubelet makes, with ids and names that do not exist. Today most answer
/// Unimplemented naming themselves; whatever they answer, both APIs must agree.
async fn not_yet_served<C: CriApi>(cri: &mut C, seen: &mut Transcript, pod: &str) {
    let container = || "0123456789ab".to_string();
    let create = CreateContainerRequest {
        pod_sandbox_id: pod.into(),
        config: Some(ContainerConfig {
            metadata: Some(ContainerMetadata { name: "app".into(), attempt: 0 }),
            image: Some(ImageSpec { image: "nidus.invalid/none:1".into(), ..Default::default() }),
            command: vec!["/bin/true".into()],
            envs: vec![KeyValue { key: "GREETING".into(), value: b"hello".to_vec() }],
            ..Default::default()
        }),
        sandbox_config: Some(pod_config("web")),
    };
    seen.outcome("CreateContainer", cri.create_container(create).await);
    seen.outcome("StartContainer", cri.start_container(StartContainerRequest { container_id: container() }).await);
    let stop = StopContainerRequest { container_id: container(), timeout: 1 };
    seen.outcome("StopContainer", cri.stop_container(stop).await);
    seen.outcome("RemoveContainer", cri.remove_container(RemoveContainerRequest { container_id: container() }).await);
    seen.outcome("ListContainers", cri.list_containers(ListContainersRequest::default()).await);
    let status = ContainerStatusRequest { container_id: container(), verbose: true };
    seen.outcome("ContainerStatus", cri.container_status(status).await);
    let update = UpdateContainerResourcesRequest { container_id: container(), ..Default::default() };
    seen.outcome("UpdateContainerResources", cri.update_container_resources(update).await);
    let reopen = ReopenContainerLogRequest { container_id: container() };
    seen.outcome("ReopenContainerLog", cri.reopen_container_log(reopen).await);
    let exec_sync = ExecSyncRequest { container_id: container(), cmd: vec!["true".into()], timeout: 1 };
    seen.outcome("ExecSync", cri.exec_sync(exec_sync).await);
    let exec = ExecRequest { container_id: container(), cmd: vec!["sh".into()], stdout: true, ..Default::default() };
    seen.outcome("Exec", cri.exec(exec).await);
    let attach = AttachRequest { container_id: container(), stdout: true, ..Default::default() };
    seen.outcome("Attach", cri.attach(attach).await);
    let forward = PortForwardRequest { pod_sandbox_id: pod.into(), port: vec![80] };
    seen.outcome("PortForward", cri.port_forward(forward).await);
    let stats = ContainerStatsRequest { container_id: container() };
    seen.outcome("ContainerStats", cri.container_stats(stats).await);
    seen.outcome("ListContainerStats", cri.list_container_stats(ListContainerStatsRequest::default()).await);
    let pod_stats = PodSandboxStatsRequest { pod_sandbox_id: pod.into() };
    seen.outcome("PodSandboxStats", cri.pod_sandbox_stats(pod_stats).await);
    seen.outcome("ListPodSandboxStats", cri.list_pod_sandbox_stats(ListPodSandboxStatsRequest::default()).await);
    let cidr = UpdateRuntimeConfigRequest {
        runtime_config: Some(RuntimeConfig { network_config: Some(NetworkConfig { pod_cidr: "10.88.0.0/16".into() }) }),
    };
    seen.outcome("UpdateRuntimeConfig", cri.update_runtime_config(cidr).await);

    let image = || Some(ImageSpec { image: "nidus.invalid/none:1".into(), ..Default::default() });
    let images = cri.list_images(ListImagesRequest::default()).await;
    seen.see("ListImages", images.map(|r| r.images.len()).map_err(|e| (e.code(), e.message().to_string())));
    let status = cri.image_status(ImageStatusRequest { image: image(), verbose: false }).await;
    seen.see("ImageStatus", status.map(|r| r.image.is_some()).map_err(|e| (e.code(), e.message().to_string())));
    let pull = PullImageRequest { image: image(), auth: None, sandbox_config: Some(pod_config("web")) };
    seen.outcome("PullImage", cri.pull_image(pull).await);
    seen.outcome("RemoveImage", cri.remove_image(RemoveImageRequest { image: image() }).await);
    let fs_info = cri.image_fs_info(ImageFsInfoRequest {}).await;
    let mountpoints = fs_info
        .map(|r| r.image_filesystems.into_iter().map(|f| f.fs_id.unwrap_or_default().mountpoint).collect::<Vec<_>>());
    seen.see("ImageFsInfo", mountpoints.map_err(|e| (e.code(), e.message().to_string())));
}

#[tokio::test]
async fn both_apis_give_the_same_results() {
    let mut env = TestEnv::new("v1a2-same");
    let mut v1 = env.start().await;
    let mut v1alpha2 = CriV1alpha2::connect(&env.socket).await.expect("connect through runtime.v1alpha2");

    let image = env.import_busybox(&mut v1).await;
    let logs = env.base.join("logs");
    let through_v1 = scenario(&mut v1, &image, &logs.join("v1")).await;
    env.assert_no_leftovers();
    let through_v1alpha2 = scenario(&mut v1alpha2, &image, &logs.join("v1alpha2")).await;
    env.assert_no_leftovers();

    assert!(through_v1.len() > 40, "the scenario ran: {through_v1:#?}");
    for (step, (a, b)) in through_v1.iter().zip(&through_v1alpha2).enumerate() {
        assert_eq!(a, b, "step {step} differs between runtime.v1 (left) and runtime.v1alpha2 (right)");
    }
    assert_eq!(through_v1.len(), through_v1alpha2.len());

    let log = env.daemon_log();
    assert!(log.contains("serving CRI runtime.v1 and runtime.v1alpha2"), "{log}");
}

/// Calls `path` with a runtime.v1 request, whatever service the path names.
async fn call_path<Req: prost::Message + 'static, Resp: prost::Message + Default + 'static>(
    env: &TestEnv,
    path: &'static str,
    request: Req,
) -> Result<Resp, tonic::Status> {
    let channel = nidus::socket_client::socket_channel(&env.socket).await.expect("connect");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("channel ready");
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
    let codec = tonic_prost::ProstCodec::default();
    Ok(grpc.unary(tonic::Request::new(request), path, codec).await?.into_inner())
}

#[tokio::test]
async fn rpcs_only_v1_has_are_absent_from_v1alpha2() {
    let mut env = TestEnv::new("v1a2-only-v1");
    env.start().await;
    let config: RuntimeConfigResponse =
        call_path(&env, "/runtime.v1.RuntimeService/RuntimeConfig", RuntimeConfigRequest {}).await.unwrap();
    assert_eq!(config.linux.unwrap().cgroup_driver(), CgroupDriver::Cgroupfs);

    let absent = [
        "/runtime.v1alpha2.RuntimeService/RuntimeConfig",
        "/runtime.v1alpha2.RuntimeService/StreamPodSandboxes",
        "/runtime.v1alpha2.RuntimeService/CheckpointContainer",
        "/runtime.v1alpha2.RuntimeService/GetContainerEvents",
        "/runtime.v1alpha2.RuntimeService/ListMetricDescriptors",
        "/runtime.v1alpha2.RuntimeService/UpdatePodSandboxResources",
        "/runtime.v1alpha2.ImageService/StreamImages",
    ];
    for path in absent {
        let answer = call_path::<_, RuntimeConfigResponse>(&env, path, RuntimeConfigRequest {}).await;
        let status = answer.expect_err(path);
        assert_eq!(status.code(), Code::Unimplemented, "{path}: {status:?}");
        assert!(!status.message().contains("nidus"), "{path} reached nidus: {status:?}");
    }
    let present: VersionResponse =
        call_path(&env, "/runtime.v1alpha2.RuntimeService/Version", VersionRequest::default()).await.unwrap();
    assert_eq!(present.runtime_api_version, "v1alpha2");
}

#[tokio::test]
async fn a_pod_made_through_v1alpha2_is_seen_and_removed_through_v1() {
    let mut env = TestEnv::new("v1a2-to-v1");
    let mut v1 = env.start().await;
    let mut v1alpha2 = CriV1alpha2::connect(&env.socket).await.unwrap();

    let config = v1alpha2::pod_config("legacy");
    let request = a2::RunPodSandboxRequest { config: Some(config.clone()), runtime_handler: String::new() };
    let id = v1alpha2.runtime.run_pod_sandbox(request).await.unwrap().into_inner().pod_sandbox_id;

    // Every field the v1alpha2 client set, as runtime.v1 reports it.
    let status = v1.pod_status(&id).await.unwrap().status.unwrap();
    assert_eq!(status.state(), PodSandboxState::SandboxReady);
    let metadata = status.metadata.unwrap();
    let sent = config.metadata.as_ref().unwrap();
    assert_eq!(
        (metadata.name.as_str(), metadata.uid.as_str(), metadata.namespace.as_str(), metadata.attempt),
        (sent.name.as_str(), sent.uid.as_str(), sent.namespace.as_str(), sent.attempt)
    );
    assert_eq!(status.labels, config.labels);
    assert_eq!(status.annotations, config.annotations);
    let info = v1.pod_info(&id).await;
    assert_eq!(info["hostname"], "legacy-host");
    let recorded: PodSandboxConfig = serde_json::from_value(info["config"].clone()).unwrap();
    assert_eq!(recorded.log_directory, config.log_directory);
    assert_eq!(recorded.dns_config.as_ref().unwrap().searches, config.dns_config.as_ref().unwrap().searches);
    let linux = recorded.linux.unwrap();
    assert_eq!(linux.sysctls, config.linux.as_ref().unwrap().sysctls);
    let security = linux.security_context.unwrap();
    assert_eq!(security.seccomp_profile_path, "runtime/default", "the deprecated seccomp string arrives");
    let pause = info["pid"].as_i64().unwrap() as i32;
    let ip_forward = common::host::in_namespaces_of(pause, &["-n"], &["cat", "/proc/sys/net/ipv4/ip_forward"]);
    assert_eq!(ip_forward.trim(), "1", "the sysctl sent through v1alpha2 is applied");

    let listed =
        v1.list_pods(Some(PodSandboxFilter { label_selector: config.labels.clone(), ..Default::default() })).await;
    assert_eq!(listed.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(), [id.as_str()]);

    v1.stop_pod(&id).await.unwrap();
    let seen_by_v1alpha2 = a2::PodSandboxStatusRequest { pod_sandbox_id: id.clone(), verbose: false };
    let state = v1alpha2.runtime.pod_sandbox_status(seen_by_v1alpha2).await.unwrap().into_inner().status.unwrap().state;
    assert_eq!(state, a2::PodSandboxState::SandboxNotready as i32);
    v1.remove_pod(&id).await.unwrap();

    let listed = v1alpha2.runtime.list_pod_sandbox(a2::ListPodSandboxRequest { filter: None }).await.unwrap();
    assert!(listed.into_inner().items.is_empty());
    let gone = a2::PodSandboxStatusRequest { pod_sandbox_id: id, verbose: false };
    assert_eq!(v1alpha2.runtime.pod_sandbox_status(gone).await.unwrap_err().code(), Code::NotFound);
    env.assert_no_leftovers();
}

#[tokio::test]
async fn a_pod_made_through_v1_is_seen_and_removed_through_v1alpha2() {
    let mut env = TestEnv::new("v1-to-v1a2");
    let mut v1 = env.start().await;
    let mut v1alpha2 = CriV1alpha2::connect(&env.socket).await.unwrap();

    let id = v1.run_pod(pod_config("modern")).await.unwrap();

    let request = a2::PodSandboxStatusRequest { pod_sandbox_id: id.clone(), verbose: true };
    let response = v1alpha2.runtime.pod_sandbox_status(request).await.unwrap().into_inner();
    let status = response.status.unwrap();
    assert_eq!(status.id, id);
    assert_eq!(status.state, a2::PodSandboxState::SandboxReady as i32);
    let metadata = status.metadata.unwrap();
    assert_eq!((metadata.name.as_str(), metadata.namespace.as_str()), ("modern", "default"));
    assert_eq!(status.labels.get("app").map(String::as_str), Some("modern"));
    assert_eq!(status.annotations.get("note").map(String::as_str), Some("made by a test"));
    let options = status.linux.unwrap().namespaces.unwrap().options.unwrap();
    assert_eq!(options.network, a2::NamespaceMode::Pod as i32);
    let info: serde_json::Value = serde_json::from_str(&response.info["info"]).unwrap();
    assert_eq!(info["hostname"], "modern");

    let by_label = a2::PodSandboxFilter {
        label_selector: [("app".to_string(), "modern".to_string())].into(),
        ..Default::default()
    };
    let listed = v1alpha2.runtime.list_pod_sandbox(a2::ListPodSandboxRequest { filter: Some(by_label) }).await.unwrap();
    let listed = listed.into_inner().items;
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].id.as_str(), listed[0].state), (id.as_str(), a2::PodSandboxState::SandboxReady as i32));

    v1alpha2.runtime.stop_pod_sandbox(a2::StopPodSandboxRequest { pod_sandbox_id: id.clone() }).await.unwrap();
    assert_eq!(v1.pod_state(&id).await, PodSandboxState::SandboxNotready);
    v1alpha2.runtime.remove_pod_sandbox(a2::RemovePodSandboxRequest { pod_sandbox_id: id.clone() }).await.unwrap();
    assert!(v1.list_pods(None).await.is_empty());
    assert_eq!(v1.pod_status(&id).await.unwrap_err().code(), Code::NotFound);
    env.assert_no_leftovers();
}

#[tokio::test]
async fn v1alpha2_can_be_switched_off() {
    let env = TestEnv::new("v1a2-off");
    let config = env.base.join("config.toml");
    std::fs::write(&config, "[grpc]\nserve_v1alpha2 = false\n").unwrap();
    let mut env = env.with_args(&["--config", config.to_str().unwrap()]);
    let mut v1 = env.start().await;
    let mut v1alpha2 = CriV1alpha2::connect(&env.socket).await.unwrap();

    // No such service: gRPC answers Unimplemented before any nidus code runs.
    let refused = v1alpha2.runtime.version(a2::VersionRequest::default()).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unimplemented, "{refused:?}");
    assert!(!refused.message().contains("nidus"), "{refused:?}");
    let refused = v1alpha2.images.list_images(a2::ListImagesRequest::default()).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unimplemented, "{refused:?}");
    let request =
        a2::RunPodSandboxRequest { config: Some(v1alpha2::pod_config("off")), runtime_handler: String::new() };
    let refused = v1alpha2.runtime.run_pod_sandbox(request).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unimplemented, "{refused:?}");
    assert!(v1.list_pods(None).await.is_empty(), "a refused call makes nothing");

    assert_eq!(v1.version().await.unwrap().runtime_api_version, "v1");
    let id = v1.run_pod(pod_config("on")).await.unwrap();
    v1.remove_pod(&id).await.unwrap();
    env.assert_no_leftovers();

    let status = v1.runtime.status(StatusRequest { verbose: true }).await.unwrap().into_inner();
    let info: serde_json::Value = serde_json::from_str(&status.info["config"]).unwrap();
    assert_eq!(info["servedApis"], serde_json::json!(["runtime.v1"]));
    assert_eq!(info["config"]["grpc"]["serve_v1alpha2"], false);
    let log = env.daemon_log();
    assert!(log.contains("serving CRI runtime.v1") && !log.contains("serving CRI runtime.v1 and"), "{log}");
    assert!(log.contains("runtime.v1alpha2 is switched off"), "{log}");
}
