//! Arbitrary bytes as CRI requests (protobuf), through the CRI edge as the
//! runtime service takes them: validation, then — for what passes — the
//! sandbox and container the managers would record, their CRI messages
//! (list items, status, verbose info), the OCI resources and runtime spec,
//! and the JSON the records and spec are persisted as.
//!
//! The first byte chooses the request; the rest is its encoding. Checked
//! besides "no panic": records and the spec read back from their JSON as
//! they were written, and a sandbox or container is selected by a filter
//! made of its own id prefix and labels.

#![no_main]

use std::path::{Path, PathBuf};

use libfuzzer_sys::fuzz_target;
use prost::Message;

use nidus::api;
use nidus::container::spec::{self, ImageDefaults, PidNamespace, PodFacts, SpecInput};
use nidus::container::user::{self, UserRequest};
use nidus::capabilities as caps;
use nidus::container::{ContainerCreate, PidMode};
use nidus::resources;
use nidus::fuzzing;
use nidus::pod::SandboxView;

const SANDBOX_ID: &str = "5a4d0b0c1e2f3a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3";
const CONTAINER_ID: &str = "c0ffee00112233445566778899aabbccddeeff00112233445566778899aabbcc";

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else { return };
    match selector % 7 {
        0 => run_pod_sandbox(body),
        1 => create_container(body),
        2 => update_container_resources(body),
        3 => update_pod_sandbox_resources(body),
        4 => exec_sync(body),
        5 => checkpoint_container(body),
        _ => stop_and_remove(body),
    }
});

/// The record JSON of `value` reads back as the same record.
fn round_trips<T: serde::Serialize + serde::de::DeserializeOwned>(what: &str, value: &T) {
    let json = serde_json::to_value(value).unwrap_or_else(|e| panic!("{what} cannot be written as JSON: {e}"));
    let text = serde_json::to_vec(&json).expect("a JSON value is always written");
    let back: T = serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{what} does not read back: {e}"));
    let again = serde_json::to_value(&back).expect("it was written once");
    assert_eq!(json, again, "{what} changed through its JSON");
}

fn run_pod_sandbox(body: &[u8]) {
    let Ok(request) = api::RunPodSandboxRequest::decode(body) else { return };
    let spec = fuzzing::validate_sandbox(request.config, &request.runtime_handler);
    nidus_fuzz::debug(|| format!("sandbox: {:?}", spec.as_ref().map(|s| &s.name_key)));
    let Ok(spec) = spec else { return };
    let Ok(view) = fuzzing::sandbox_view(SANDBOX_ID, &spec) else { return };
    sandbox_side(&view);
}

/// What the runtime does with a sandbox that RunPodSandbox accepted.
fn sandbox_side(view: &SandboxView) {
    let own = api::PodSandboxFilter {
        id: SANDBOX_ID[..12].to_string(),
        state: Some(api::PodSandboxStateValue { state: api::PodSandboxState::SandboxReady as i32 }),
        label_selector: view.record.config.labels.clone(),
    };
    let (item, status, info, selected) = fuzzing::sandbox_messages(view, &own);
    assert!(selected, "a sandbox's own id prefix, state and labels do not select it");
    assert_eq!(item.id, SANDBOX_ID);
    assert_eq!(status.labels, view.record.config.labels);
    for json in info.values() {
        serde_json::from_str::<serde_json::Value>(json).expect("verbose info is JSON");
    }
    round_trips("the sandbox record", &view.record);
    let pod = view.record.pod_resources();
    let total = resources::pod_total(&pod.resources, &pod.overhead);
    let _ = resources::to_oci(&total, 0);
}

/// The sandbox a CreateContainer names: its `sandbox_config` when that passes
/// RunPodSandbox's checks, else a plain one.
fn sandbox_for(request: &api::CreateContainerRequest) -> Option<SandboxView> {
    if let Some(spec) = request.sandbox_config.clone().and_then(|c| fuzzing::validate_sandbox(Some(c), "").ok()) {
        if let Ok(view) = fuzzing::sandbox_view(SANDBOX_ID, &spec) {
            return Some(view);
        }
    }
    let plain = api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: "pod".into(),
            uid: "uid".into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        ..Default::default()
    };
    let spec = fuzzing::validate_sandbox(Some(plain), "").expect("a plain sandbox is valid");
    Some(fuzzing::sandbox_view(SANDBOX_ID, &spec).expect("a plain sandbox has a view"))
}

fn create_container(body: &[u8]) {
    let Ok(request) = api::CreateContainerRequest::decode(body) else { return };
    let _ = fuzzing::validate_id("pod_sandbox_id", &request.pod_sandbox_id);
    let Some(sandbox) = sandbox_for(&request) else { return };
    let create = fuzzing::validate_container(request, sandbox);
    nidus_fuzz::debug(|| {
        format!("container: {:?}", create.as_ref().map(|c| (&c.name_key, &c.sandbox.record.name_key)))
    });
    let Ok(create) = create else { return };
    let Ok(view) = fuzzing::container_view(CONTAINER_ID, &create) else { return };
    let own = api::ContainerFilter {
        id: CONTAINER_ID[..12].to_string(),
        state: Some(api::ContainerStateValue { state: api::ContainerState::ContainerRunning as i32 }),
        pod_sandbox_id: SANDBOX_ID[..12].to_string(),
        label_selector: view.record.config.labels.clone(),
    };
    let (item, status, info, selected) = fuzzing::container_messages(&view, &own);
    assert!(selected, "a container's own id prefix, state, sandbox and labels do not select it");
    assert_eq!(item.id, CONTAINER_ID);
    assert_eq!(status.labels, view.record.config.labels);
    for json in info.values() {
        serde_json::from_str::<serde_json::Value>(json).expect("verbose info is JSON");
    }
    round_trips("the container record", &view.record);
    runtime_spec(&create);
}

/// The OCI spec of a validated container, made as CreateContainer makes it
/// (an image without defaults or users, the pod's namespaces joined).
fn runtime_spec(create: &ContainerCreate) {
    let config = &create.config;
    let sandbox = &create.sandbox;
    let sc = config.linux.as_ref().and_then(|l| l.security_context.clone()).unwrap_or_default();
    let c = sc.capabilities.clone().unwrap_or_default();
    let Ok(capabilities) = caps::container_set(sc.privileged, &c.add_capabilities, &c.drop_capabilities) else {
        return;
    };
    let request = UserRequest {
        run_as_user: sc.run_as_user.as_ref().map(|v| v.value),
        run_as_group: sc.run_as_group.as_ref().map(|v| v.value),
        run_as_username: sc.run_as_username.clone(),
        image_user: String::new(),
        supplemental_groups: sc.supplemental_groups.clone(),
        strict_groups: sc.supplemental_groups_policy == api::SupplementalGroupsPolicy::Strict as i32,
    };
    let root_entry = user::parse_passwd("root:x:0:0:root:/root:/bin/sh\n");
    let Ok(user) = user::resolve(&request, &root_entry, &user::parse_group("root:x:0:\n")) else { return };
    let pod = PodFacts::of(&sandbox, 1);
    let pid = match &create.pid {
        PidMode::Own => PidNamespace::Own,
        PidMode::Node => PidNamespace::Node,
        PidMode::Pod => pod.pid_ns.clone().map(PidNamespace::Join).unwrap_or(PidNamespace::Node),
        PidMode::Target(_) => PidNamespace::Join(PathBuf::from("/proc/3/ns/pid")),
    };
    let image = ImageDefaults::default();
    let Ok(spec) = spec::build(&SpecInput {
        container_id: CONTAINER_ID,
        config,
        pod: &pod,
        pid,
        image: &image,
        image_name: "fuzz",
        user: &user,
        capabilities: &capabilities,
        rootfs: Path::new("/nonexistent/nidus-fuzz/rootfs"),
        cgroups_path: "/nidus/fuzz",
        oom_score_adj: config.linux.as_ref().and_then(|l| l.resources.as_ref()).map(|r| r.oom_score_adj as i32),
        devices: &[],
        image_volumes: &[],
        rlimits: &[],
        pids_limit: 1024,
    }) else {
        nidus_fuzz::debug(|| "spec: not built".into());
        return;
    };
    nidus_fuzz::debug(|| "spec: built".into());
    // The monitor reads config.json back into a Spec.
    let json = serde_json::to_vec(&spec).expect("a spec is always written");
    if let Err(e) = serde_json::from_slice::<oci_spec::runtime::Spec>(&json) {
        panic!("the spec of a valid container does not read back: {e}");
    }
}

fn update_container_resources(body: &[u8]) {
    let Ok(request) = api::UpdateContainerResourcesRequest::decode(body) else { return };
    let _ = fuzzing::validate_id("container_id", &request.container_id);
    let Some(linux) = request.linux else { return };
    if fuzzing::validate_resources("linux", Some(&linux)).is_ok() {
        let oci = resources::to_oci(&linux, 0);
        serde_json::to_vec(&oci).expect("OCI resources are always written");
    }
}

fn update_pod_sandbox_resources(body: &[u8]) {
    let Ok(request) = api::UpdatePodSandboxResourcesRequest::decode(body) else { return };
    let _ = fuzzing::validate_id("pod_sandbox_id", &request.pod_sandbox_id);
    if fuzzing::validate_resources("overhead", request.overhead.as_ref()).is_err()
        || fuzzing::validate_resources("resources", request.resources.as_ref()).is_err()
    {
        return;
    }
    let total = resources::pod_total(&request.resources.unwrap_or_default(), &request.overhead.unwrap_or_default());
    let _ = resources::to_oci(&total, 4096);
}

fn exec_sync(body: &[u8]) {
    let Ok(request) = api::ExecSyncRequest::decode(body) else { return };
    let _ = fuzzing::validate_id("container_id", &request.container_id);
}

fn checkpoint_container(body: &[u8]) {
    let Ok(request) = api::CheckpointContainerRequest::decode(body) else { return };
    let _ = fuzzing::validate_id("container_id", &request.container_id);
    if let Ok(path) = nidus::checkpoint::location::check(&request.location) {
        assert!(path.is_absolute(), "an accepted location is absolute");
        assert!(
            path.components().all(|c| matches!(c, std::path::Component::RootDir | std::path::Component::Normal(_))),
            "an accepted location has only plain components"
        );
    }
}

fn stop_and_remove(body: &[u8]) {
    let Ok(request) = api::StopContainerRequest::decode(body) else { return };
    if let Ok(Some(id)) = fuzzing::validate_id_to_end("container_id", &request.container_id) {
        assert!(fuzzing::validate_id("container_id", id).is_ok(), "an id to end is an id");
    }
}
