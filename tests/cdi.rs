//! CDI devices through the socket: spec files in the test's own directories
//! (`[cdi] spec_dirs`) give a container the device nodes (made in its /dev,
//! allowed in its device cgroup), environment, bind mounts, additional
//! groups and hooks they describe, asked for by the CRI `CDI_devices` field
//! or `cdi.k8s.io/*` annotations; unknown, ambiguous and unusable devices are
//! refused naming them, leaving nothing; a broken spec file never spoils
//! its neighbours; changes count without a restart; hostile spec files
//! (huge, FIFOs, links out of the directory, YAML bombs, device paths
//! outside /dev) are refused with a clear error.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::client::{container_config, security};
use common::{host, TestEnv, Up};
use nidus::api::*;

const PATH_ENV: &str = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";

/// The recording hook of `oci-hooks/test/` (see tests/hooks.rs).
fn record_call() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("oci-hooks/test/record-call")
}

/// A test environment whose daemon reads CDI specs from `<base>/cdi-a`,
/// then `<base>/cdi-b` (made here), with no `hooks.d` directory.
struct Dirs {
    first: PathBuf,
    second: PathBuf,
}

fn cdi_env(label: &str) -> (TestEnv, Dirs) {
    let env = TestEnv::new(label);
    let dirs = Dirs { first: env.base.join("cdi-a"), second: env.base.join("cdi-b") };
    fs::create_dir_all(&dirs.first).unwrap();
    fs::create_dir_all(&dirs.second).unwrap();
    let mut config = fs::read_to_string(env.default_config()).unwrap();
    config.push_str(&format!(
        "[hooks]\ndirs = []\n[cdi]\nspec_dirs = [{:?}, {:?}]\n",
        dirs.first.display(),
        dirs.second.display()
    ));
    let path = env.base.join("nidus.toml");
    fs::write(&path, config).unwrap();
    let env = env.with_args(&["--config", &path.display().to_string()]);
    (env, dirs)
}

fn write_spec(dir: &Path, name: &str, spec: &serde_json::Value) {
    fs::write(dir.join(name), serde_json::to_vec_pretty(spec).unwrap()).unwrap();
}

/// A small valid spec: `kind` with one device `name` setting `VAR=value`.
fn env_spec(kind: &str, name: &str, var: &str, value: &str) -> serde_json::Value {
    serde_json::json!({
        "cdiVersion": "0.5.0",
        "kind": kind,
        "devices": [{ "name": name, "containerEdits": { "env": [format!("{var}={value}")] } }],
    })
}

fn with_devices(mut config: ContainerConfig, names: &[&str]) -> ContainerConfig {
    config.cdi_devices = names.iter().map(|n| CdiDevice { name: n.to_string() }).collect();
    config
}

/// The environment of a container's workload (PID 1 of its namespace).
async fn workload_env(cri: &mut common::Cri, id: &str) -> Vec<String> {
    let text = cri.exec_ok(id, &["sh", "-c", "tr '\\0' '\\n' < /proc/1/environ"]).await;
    text.lines().map(str::to_string).collect()
}

/// What a refused CreateContainer must have left: the same containers,
/// directories, mounts and pod cgroups as before it.
struct Before {
    containers: Vec<String>,
    cgroups: Vec<(PathBuf, Vec<String>)>,
    dirs: Vec<PathBuf>,
    mounts: Vec<PathBuf>,
}

async fn before(cri: &mut common::Cri, env: &TestEnv, pod_id: &str) -> Before {
    let pod_cgroup = cri.pod_info(pod_id).await["cgroups"]["pod"].as_str().unwrap().to_string();
    let mut containers: Vec<String> = cri.list_containers(None).await.into_iter().map(|c| c.id).collect();
    containers.sort();
    let mut dirs = env.leftover_sandbox_dirs();
    dirs.sort();
    Before { containers, cgroups: env.pod_child_cgroups(&pod_cgroup), dirs, mounts: env.leftover_mounts() }
}

impl Before {
    async fn assert_same(&self, cri: &mut common::Cri, env: &TestEnv, pod_id: &str, what: &str) {
        let now = before(cri, env, pod_id).await;
        assert_eq!(now.containers, self.containers, "{what}: a container was left");
        assert_eq!(now.cgroups, self.cgroups, "{what}: a cgroup was left");
        assert_eq!(now.dirs, self.dirs, "{what}: a directory was left");
        assert_eq!(now.mounts, self.mounts, "{what}: a mount was left");
    }
}

/// Asks for `names`; the create must fail with `code` and a message holding every `parts`.
async fn refused(
    cri: &mut common::Cri,
    up: (&str, &PodSandboxConfig, &str),
    config: ContainerConfig,
    code: tonic::Code,
    parts: &[&str],
) -> String {
    let (pod_id, pod, what) = up;
    let err = cri.create_container(pod_id, pod, config).await.expect_err(what);
    assert_eq!(err.code(), code, "{what}: {}", err.message());
    for part in parts {
        assert!(err.message().contains(part), "{what}: {part:?} missing from: {}", err.message());
    }
    err.message().to_string()
}

#[tokio::test]
async fn a_fake_vendor_device_gives_its_node_environment_mount_group_and_hook() {
    let (env, dirs) = cdi_env("cdidevice");
    let records = env.base.join("records");
    let library = env.base.join("vendor-lib");
    fs::create_dir_all(&records).unwrap();
    fs::create_dir_all(&library).unwrap();
    fs::write(library.join("lib.txt"), "fake vendor library\n").unwrap();
    let hook = serde_json::json!({
        "hookName": "createContainer",
        "path": record_call(),
        "args": ["record-call", records, "createContainer"],
        "env": [PATH_ENV],
    });
    write_spec(
        &dirs.first,
        "fake.json",
        &serde_json::json!({
            "cdiVersion": "0.7.0",
            "kind": "fake.example/dev",
            "containerEdits": { "env": ["FAKE_VENDOR=1"] },
            "devices": [
                {
                    "name": "0",
                    "containerEdits": {
                        "deviceNodes": [
                            // /dev/null's type and numbers (1:3), taken from the host node.
                            { "path": "/dev/fakevendor/null0", "hostPath": "/dev/null", "permissions": "rw" },
                            // Not among the devices every container may open (1:11).
                            { "path": "/dev/fakevendor/kmsg0", "hostPath": "/dev/kmsg" },
                        ],
                        "env": ["FAKE_DEVICE=0"],
                        "mounts": [{
                            "hostPath": library,
                            "containerPath": "/opt/fakevendor",
                            "options": ["ro", "nosuid", "nodev", "bind"],
                        }],
                        "additionalGids": [4321],
                        "hooks": [hook],
                    },
                },
                {
                    "name": "1",
                    "containerEdits": {
                        "env": ["FAKE_DEVICE=1"],
                        "deviceNodes": [{
                            "path": "/dev/fakevendor/zero1", "type": "c", "major": 1, "minor": 5,
                            "fileMode": 0o640, "uid": 1234, "gid": 5678,
                        }],
                    },
                },
            ],
        }),
    );
    let Up { env, mut cri, image, pod, pod_id } = env.up("cdi").await;

    // Device 0 by the field, device 1 by a device plugin's annotation.
    let mut config = with_devices(container_config("gpu", &image, &["sleep", "1000"]), &["fake.example/dev=0"]);
    config.annotations.insert("cdi.k8s.io/fake-plugin_dev1".into(), "fake.example/dev=1".into());
    let id = cri.create_container(&pod_id, &pod, config).await.expect("CreateContainer with CDI devices");
    let init = cri.container_pid(&id).await;
    // The createContainer hook ran once, in the container's namespaces, before the start.
    assert_eq!(fs::read_to_string(records.join("createContainer.calls")).unwrap(), format!("{id}\n"));
    for line in fs::read_to_string(records.join("createContainer.ns")).unwrap().lines() {
        let (kind, link) = line.split_once(' ').unwrap();
        assert_eq!(link, host::namespace(init, kind), "createContainer hook: {kind} namespace");
    }
    let state: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(records.join("createContainer.state")).unwrap()).unwrap();
    assert_eq!((state["id"].as_str(), state["status"].as_str()), (Some(id.as_str()), Some("creating")));
    cri.start_container(&id).await.unwrap();

    let nodes = cri
        .exec_ok(
            &id,
            &[
                "stat",
                "-c",
                "%n %F %t:%T %a %u:%g",
                "/dev/fakevendor/null0",
                "/dev/fakevendor/kmsg0",
                "/dev/fakevendor/zero1",
            ],
        )
        .await;
    assert_eq!(
        nodes.lines().collect::<Vec<_>>(),
        [
            "/dev/fakevendor/null0 character special file 1:3 666 0:0",
            "/dev/fakevendor/kmsg0 character special file 1:b 644 0:0",
            "/dev/fakevendor/zero1 character special file 1:5 640 1234:5678",
        ]
    );
    // The device cgroup lets the container use its devices (kmsg's 1:11 is
    // no default; opened for writing, nothing written), a node made by hand
    // of the same numbers too.
    let open = "exec 3>/dev/fakevendor/kmsg0 && echo opened; echo x > /dev/fakevendor/null0 && head -c 3 /dev/fakevendor/zero1 | wc -c";
    assert_eq!(cri.exec_ok(&id, &["sh", "-c", open]).await, "opened\n3\n");
    let by_hand = "mknod /tmp/kmsg c 1 11 && exec 3>/tmp/kmsg && echo opened";
    assert_eq!(cri.exec_ok(&id, &["sh", "-c", by_hand]).await, "opened\n");
    // Environment: the spec's once, the later device's value for a name both set.
    let environment = workload_env(&mut cri, &id).await;
    assert!(environment.contains(&"FAKE_VENDOR=1".to_string()), "{environment:?}");
    assert!(environment.contains(&"FAKE_DEVICE=1".to_string()), "{environment:?}");
    assert!(!environment.contains(&"FAKE_DEVICE=0".to_string()), "{environment:?}");
    // The bind mount, read-only as asked.
    assert_eq!(cri.exec_ok(&id, &["cat", "/opt/fakevendor/lib.txt"]).await, "fake vendor library\n");
    let write = cri.exec(&id, &["touch", "/opt/fakevendor/new"], 10).await.unwrap();
    assert_ne!(write.exit_code, 0, "the CDI mount is read-only");
    assert!(!library.join("new").exists());
    // The additional group, for the workload and in the status.
    let groups = cri.exec_ok(&id, &["grep", "^Groups:", "/proc/1/status"]).await;
    assert!(groups.split_whitespace().any(|g| g == "4321"), "{groups}");
    let status = cri.status_of(&id).await;
    let supplemental = status.user.and_then(|u| u.linux).map(|l| l.supplemental_groups).unwrap_or_default();
    assert!(supplemental.contains(&4321), "{supplemental:?}");

    // A container without the device may not open a node of its numbers.
    let plain = cri.run_container(&pod_id, &pod, container_config("plain", &image, &["sleep", "1000"])).await;
    let denied = cri.exec(&plain, &["sh", "-c", by_hand], 10).await.unwrap();
    assert_ne!(denied.exit_code, 0);
    assert!(String::from_utf8_lossy(&denied.stderr).contains("Operation not permitted"), "{denied:?}");
    assert!(!cri.exec_ok(&plain, &["ls", "/dev"]).await.contains("fakevendor"));

    // A node without an owner of its own belongs to a non-root user (as the
    // reference implementation has it), who may then open it.
    let mut user = with_devices(container_config("user", &image, &["sleep", "1000"]), &["fake.example/dev=0"]);
    security(&mut user).run_as_user = Some(Int64Value { value: 1000 });
    security(&mut user).run_as_group = Some(Int64Value { value: 2000 });
    let user = cri.run_container(&pod_id, &pod, user).await;
    let owners = cri.exec_ok(&user, &["stat", "-c", "%u:%g", "/dev/fakevendor/kmsg0"]).await;
    assert_eq!(owners, "1000:2000\n");
    assert_eq!(cri.exec_ok(&user, &["sh", "-c", "exec 3>/dev/fakevendor/kmsg0 && echo opened"]).await, "opened\n");
    assert_eq!(fs::read_to_string(records.join("createContainer.calls")).unwrap().lines().count(), 2);

    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
    assert_eq!(fs::read_to_string(library.join("lib.txt")).unwrap(), "fake vendor library\n");
}

#[tokio::test]
async fn unknown_ambiguous_and_unusable_devices_are_refused_and_broken_specs_spoil_nothing() {
    let (env, dirs) = cdi_env("cdirefuse");
    write_spec(&dirs.first, "good.json", &env_spec("fake.example/dev", "0", "FAKE", "good"));
    fs::write(dirs.first.join("broken.yaml"), "cdiVersion: [0.3.0\nkind: {{\n").unwrap();
    let mut invalid = env_spec("fake.example/bad", "x", "A", "1");
    invalid["cdiVersion"] = "9.9.9".into();
    write_spec(&dirs.first, "invalid.json", &invalid);
    fs::write(dirs.first.join("README.txt"), "not a spec: only .json and .yaml count").unwrap();
    let Up { env, mut cri, image, pod, pod_id } = env.up("refuse").await;
    let log = env.daemon_log();
    for file in ["broken.yaml", "invalid.json"] {
        assert!(log.lines().any(|l| l.contains("skipping") && l.contains(file)), "{file} is logged at start:\n{log}");
    }
    let kept = cri.run_container(&pod_id, &pod, container_config("kept", &image, &["sleep", "1000"])).await;
    let was = before(&mut cri, &env, &pod_id).await;
    let at = (pod_id.as_str(), &pod, "");
    let config = |names: &[&str]| with_devices(container_config("app", &image, &["sleep", "1000"]), names);

    // An unknown name, naming it and the file that could not be read.
    let message = refused(
        &mut cri,
        (at.0, at.1, "unknown"),
        config(&["fake.example/dev=0", "fake.example/dev=9"]),
        tonic::Code::InvalidArgument,
        &["config.CDI_devices[1]: unknown CDI device \"fake.example/dev=9\"", "broken.yaml", "invalid YAML"],
    )
    .await;
    assert!(!message.contains("dev=0\""), "only the unknown one is named: {message}");
    // Names that are not fully qualified, in the field or an annotation.
    refused(
        &mut cri,
        (at.0, at.1, "unqualified"),
        config(&["gpu0"]),
        tonic::Code::InvalidArgument,
        &["config.CDI_devices[0]", "\"gpu0\" is not a fully-qualified CDI device name"],
    )
    .await;
    let mut annotated = config(&[]);
    annotated.annotations.insert("cdi.k8s.io/plugin".into(), "fake.example/dev=0,nvidia.com/gpu".into());
    refused(
        &mut cri,
        (at.0, at.1, "bad annotation"),
        annotated,
        tonic::Code::InvalidArgument,
        &["config.annotations[\"cdi.k8s.io/plugin\"]", "\"nvidia.com/gpu\""],
    )
    .await;
    // A device of an invalid spec file: the file and why.
    refused(
        &mut cri,
        (at.0, at.1, "invalid spec"),
        config(&["fake.example/bad=x"]),
        tonic::Code::InvalidArgument,
        &["CDI device \"fake.example/bad=x\" is in an invalid spec file", "invalid.json", "cdiVersion \"9.9.9\""],
    )
    .await;
    was.assert_same(&mut cri, &env, &pod_id, "the refused creates").await;

    // The good spec beside the broken ones works.
    let good = cri.run_container(&pod_id, &pod, config(&["fake.example/dev=0"])).await;
    assert!(workload_env(&mut cri, &good).await.contains(&"FAKE=good".to_string()));
    cri.stop_container(&good, 0).await.unwrap();
    cri.remove_container(&good).await.unwrap();

    // A second file of the same directory defining it makes it ambiguous...
    write_spec(&dirs.first, "dup.json", &env_spec("fake.example/dev", "0", "FAKE", "dup"));
    refused(
        &mut cri,
        (at.0, at.1, "ambiguous"),
        config(&["fake.example/dev=0"]),
        tonic::Code::InvalidArgument,
        &["ambiguous CDI device \"fake.example/dev=0\"", "good.json", "dup.json"],
    )
    .await;
    // ... until a later directory defines it: that one wins, read while the daemon runs.
    write_spec(&dirs.second, "override.yaml", &env_spec("fake.example/dev", "0", "FAKE", "override"));
    write_spec(&dirs.second, "new.json", &env_spec("new.example/thing", "a.1", "NEW", "yes"));
    let both = cri.run_container(&pod_id, &pod, config(&["fake.example/dev=0", "new.example/thing=a.1"])).await;
    let environment = workload_env(&mut cri, &both).await;
    assert!(environment.contains(&"FAKE=override".to_string()), "{environment:?}");
    assert!(environment.contains(&"NEW=yes".to_string()), "{environment:?}");
    cri.stop_container(&both, 0).await.unwrap();
    cri.remove_container(&both).await.unwrap();
    // Gone again, and the first directory's conflict is back.
    fs::remove_file(dirs.second.join("override.yaml")).unwrap();
    fs::remove_file(dirs.first.join("dup.json")).unwrap();
    let again = cri.run_container(&pod_id, &pod, config(&["fake.example/dev=0"])).await;
    assert!(workload_env(&mut cri, &again).await.contains(&"FAKE=good".to_string()));
    cri.stop_container(&again, 0).await.unwrap();
    cri.remove_container(&again).await.unwrap();

    // What the node lacks: a host device that is not there.
    write_spec(
        &dirs.first,
        "missing.json",
        &serde_json::json!({
            "cdiVersion": "0.5.0", "kind": "fake.example/missing",
            "devices": [{ "name": "0", "containerEdits": { "deviceNodes": [{ "path": "/dev/fake-missing", "hostPath": "/dev/nidus-test-no-such-device" }] } }],
        }),
    );
    refused(
        &mut cri,
        (at.0, at.1, "missing host device"),
        config(&["fake.example/missing=0"]),
        tonic::Code::FailedPrecondition,
        &["config.CDI_devices[0]: CDI device \"fake.example/missing=0\"", "/dev/nidus-test-no-such-device"],
    )
    .await;
    // What nidus does not do: moving a host interface in.
    write_spec(
        &dirs.first,
        "net.json",
        &serde_json::json!({
            "cdiVersion": "1.1.0", "kind": "fake.example/net",
            "devices": [{ "name": "0", "containerEdits": { "netDevices": [{ "hostInterfaceName": "eth9", "name": "net0" }] } }],
        }),
    );
    refused(
        &mut cri,
        (at.0, at.1, "net device"),
        config(&["fake.example/net=0"]),
        tonic::Code::InvalidArgument,
        &["fake.example/net=0", "netDevices", "not supported"],
    )
    .await;
    was.assert_same(&mut cri, &env, &pod_id, "the refused creates").await;

    assert_eq!(cri.list_containers(None).await.into_iter().map(|c| c.id).collect::<Vec<_>>(), [kept]);
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

/// The most resident memory the daemon ever had (VmHWM), in KiB.
fn daemon_peak_rss_kib(env: &TestEnv) -> u64 {
    let status = fs::read_to_string(format!("/proc/{}/status", env.daemon_pid().unwrap())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

#[tokio::test]
async fn hostile_spec_files_are_refused_with_a_clear_error_and_leave_nothing() {
    let (env, dirs) = cdi_env("cdihostile");
    write_spec(&dirs.first, "good.json", &env_spec("fake.example/dev", "0", "FAKE", "good"));
    let outside = env.base.join("outside");
    fs::create_dir_all(&outside).unwrap();
    let Up { env, mut cri, image, pod, pod_id } = env.up("hostile").await;
    let kept = cri.run_container(&pod_id, &pod, container_config("kept", &image, &["sleep", "1000"])).await;
    let was = before(&mut cri, &env, &pod_id).await;
    let config = |names: &[&str]| with_devices(container_config("app", &image, &["sleep", "1000"]), names);
    let rss_before = daemon_peak_rss_kib(&env);

    // Each hostile file in turn beside the good one: its device is refused,
    // naming the file and what is wrong with it; the good one still works.
    let huge = {
        let mut text = serde_json::to_string(&env_spec("hostile.example/huge", "0", "A", "1")).unwrap();
        text.push_str(&" ".repeat(2 << 20));
        text
    };
    let mut bomb = String::from("cdiVersion: 0.6.0\nkind: hostile.example/bomb\nannotations:\n  l0: &l0 \"lol\"\n");
    for level in 1..10 {
        bomb.push_str(&format!("  l{level}: &l{level} [{}]\n", vec![format!("*l{}", level - 1); 9].join(", ")));
    }
    bomb.push_str("devices: [{name: \"0\", containerEdits: {env: [A=1]}}]\n");
    let big = "x".repeat(512 << 10);
    let mut wide =
        format!("cdiVersion: 0.5.0\nkind: hostile.example/wide\ndevices:\n  - name: \"0\"\n    containerEdits:\n      env:\n        - &big \"A={big}\"\n");
    for _ in 0..200 {
        wide.push_str("        - *big\n");
    }
    let node = |path: &str, host_path: &str| {
        serde_json::json!({
            "cdiVersion": "0.5.0", "kind": "hostile.example/node",
            "devices": [{ "name": "0", "containerEdits": { "deviceNodes": [{ "path": path, "hostPath": host_path, "type": "c", "major": 1, "minor": 3 }] } }],
        })
    };
    write_spec(&outside, "spec.json", &env_spec("hostile.example/outside", "0", "A", "1"));
    type Make = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, &str, Make, Vec<&str>)> = vec![
        (
            "huge.json",
            "hostile.example/huge=0",
            Box::new(move |p| fs::write(p, &huge).unwrap()),
            vec!["unknown CDI device", "huge.json", "over the limit of 1048576 bytes"],
        ),
        (
            "fifo.json",
            "hostile.example/fifo=0",
            Box::new(|p| nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap()),
            vec!["unknown CDI device", "fifo.json\" is a FIFO, not a regular file"],
        ),
        (
            "link.json",
            "hostile.example/outside=0",
            Box::new({
                let target = outside.join("spec.json");
                move |p| std::os::unix::fs::symlink(&target, p).unwrap()
            }),
            vec!["unknown CDI device", "link.json\" leads outside"],
        ),
        (
            "bomb.yaml",
            "hostile.example/bomb=0",
            Box::new(move |p| fs::write(p, &bomb).unwrap()),
            vec!["unknown CDI device", "bomb.yaml", "is invalid YAML"],
        ),
        (
            "wide.yaml",
            "hostile.example/wide=0",
            Box::new(move |p| fs::write(p, &wide).unwrap()),
            vec!["unknown CDI device", "wide.yaml", "is invalid YAML: budget breached"],
        ),
        (
            "node-path.json",
            "hostile.example/node=0",
            Box::new(move |p| {
                write_spec(p.parent().unwrap(), "node-path.json", &node("/dev/../etc/evil", "/dev/null"))
            }),
            vec!["is in an invalid spec file", "node-path.json", "deviceNodes[0].path \"/dev/../etc/evil\""],
        ),
        (
            "node-etc.json",
            "hostile.example/node=0",
            Box::new(move |p| write_spec(p.parent().unwrap(), "node-etc.json", &node("/etc/evil", "/dev/null"))),
            vec!["is in an invalid spec file", "node-etc.json", "\"/etc/evil\" is not below /dev"],
        ),
        (
            "node-host.json",
            "hostile.example/node=0",
            Box::new(move |p| write_spec(p.parent().unwrap(), "node-host.json", &node("/dev/evil", "/etc/passwd"))),
            vec!["is in an invalid spec file", "node-host.json", "hostPath \"/etc/passwd\" is not below /dev"],
        ),
    ];
    for (file, device, make, parts) in cases {
        let path = dirs.first.join(file);
        make(&path);
        let began = std::time::Instant::now();
        let mut parts = parts;
        parts.push("config.CDI_devices[0]: ");
        let message =
            refused(&mut cri, (&pod_id, &pod, file), config(&[device]), tonic::Code::InvalidArgument, &parts).await;
        eprintln!("{file}: {message}");
        assert!(began.elapsed() < std::time::Duration::from_secs(10), "{file}: refused at once");
        was.assert_same(&mut cri, &env, &pod_id, file).await;
        assert!(!Path::new("/etc/evil").exists());
        let good = cri.run_container(&pod_id, &pod, config(&["fake.example/dev=0"])).await;
        assert!(workload_env(&mut cri, &good).await.contains(&"FAKE=good".to_string()), "{file} beside");
        cri.stop_container(&good, 0).await.unwrap();
        cri.remove_container(&good).await.unwrap();
        fs::remove_file(&path).unwrap();
    }
    let rss_after = daemon_peak_rss_kib(&env);
    eprintln!("daemon peak RSS {rss_before} KiB before the hostile files, {rss_after} KiB after");
    assert!(
        rss_after < rss_before + (16 << 10),
        "hostile spec files took the daemon from {rss_before} to {rss_after} KiB"
    );
    assert!(fs::read_to_string(outside.join("spec.json")).unwrap().contains("hostile.example/outside"));

    assert_eq!(cri.list_containers(None).await.into_iter().map(|c| c.id).collect::<Vec<_>>(), [kept]);
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}
