//! Pods with a user namespace of their own (`hostUsers: false`) through the
//! socket: the mapping inside, the node's view of the container's root,
//! idmapped image layers shared between pods of different mappings,
//! idmapped volumes, exec, restart of the daemon, procMount Unmasked, and
//! what is refused.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;

use common::client::{container_config, security};
use common::{host, TestEnv, Up};
use nidus::api::*;

/// One mapping of `length` IDs from container ID 0 to `host`.
fn mapping(host: u32) -> Vec<IdMapping> {
    vec![IdMapping { host_id: host, container_id: 0, length: 65536 }]
}

/// A pod config whose user namespace maps uids to `uids` and gids to `gids`.
fn userns_pod(env: &TestEnv, name: &str, uids: u32, gids: u32) -> PodSandboxConfig {
    let mut pod = env.pod(name);
    let options = pod.linux.as_mut().unwrap().security_context.as_mut().unwrap().namespace_options.as_mut().unwrap();
    options.userns_options =
        Some(UserNamespace { mode: NamespaceMode::Pod as i32, uids: mapping(uids), gids: mapping(gids) });
    pod
}

/// The same user namespace, as kubelet names it for each container.
fn in_pod_userns(mut config: ContainerConfig, uids: u32, gids: u32) -> ContainerConfig {
    security(&mut config).namespace_options.get_or_insert_with(Default::default).userns_options =
        Some(UserNamespace { mode: NamespaceMode::Pod as i32, uids: mapping(uids), gids: mapping(gids) });
    config
}

/// The user IDs of `pid` as the node sees them (real, effective, saved, fs).
fn host_uids(pid: i32) -> String {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap().split_whitespace().collect::<Vec<_>>().join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_user_namespace_maps_its_containers_root_to_unprivileged_ids() {
    let env = TestEnv::new("userns");
    let (uids, gids) = (200_000, 300_000);
    let pod = userns_pod(&env, "mapped", uids, gids);
    let Up { mut env, mut cri, image, pod, pod_id } = env.up_with(pod).await;
    let status = cri.runtime.status(StatusRequest { verbose: false }).await.unwrap().into_inner();
    let features = status.runtime_handlers[0].features.unwrap();
    assert!(features.user_namespaces, "Status advertises user namespaces");
    let status = cri.pod_status(&pod_id).await.unwrap().status.unwrap();
    let userns = status.linux.unwrap().namespaces.unwrap().options.unwrap().userns_options.unwrap();
    assert_eq!(userns.mode(), NamespaceMode::Pod);
    assert_eq!((userns.uids, userns.gids), (mapping(uids), mapping(gids)));
    let pause = cri.pause_pid(&pod_id).await;
    assert_ne!(host::namespace(pause, "user"), host::namespace(std::process::id() as i32, "user"));

    // A volume idmapped through the pod's namespace and one that is not.
    let (mapped_dir, plain_dir) = (env.base.join("mapped-vol"), env.base.join("plain-vol"));
    fs::create_dir_all(&mapped_dir).unwrap();
    fs::create_dir_all(&plain_dir).unwrap();
    fs::set_permissions(&plain_dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let script = "cat /proc/self/uid_map /proc/self/gid_map; id; touch /mapped/by-root /plain/by-root; \
                  ls -ln /etc/hostname; stat -c '%u:%g' / /dev /dev/null; echo built; exec sleep 1000";
    let mut config = in_pod_userns(container_config("app", &image, &["sh", "-c", script]), uids, gids);
    config.mounts = vec![
        Mount {
            container_path: "/mapped".into(),
            host_path: mapped_dir.display().to_string(),
            uid_mappings: mapping(uids),
            gid_mappings: mapping(gids),
            ..Default::default()
        },
        Mount { container_path: "/plain".into(), host_path: plain_dir.display().to_string(), ..Default::default() },
    ];
    let app = cri.run_container(&pod_id, &pod, config).await;
    cri.wait_for_line(&app, "built", 20).await;
    let out = common::client::log_lines(&cri.logs(&app).await, "stdout").join("\n");
    assert!(out.contains(&format!("0 {uids} 65536")) || out.contains(&format!("0     {uids}")), "{out}");
    let uid_map = out.lines().next().unwrap().split_whitespace().collect::<Vec<_>>();
    assert_eq!(uid_map, ["0", &uids.to_string(), "65536"], "{out}");
    let gid_map = out.lines().nth(1).unwrap().split_whitespace().collect::<Vec<_>>();
    assert_eq!(gid_map, ["0", &gids.to_string(), "65536"], "{out}");
    assert!(out.contains("uid=0(root) gid=0(root)"), "{out}");
    // Its files, its root directory, /dev and its nodes are its root's.
    assert!(
        out.contains("0        0") || out.lines().any(|l| l.contains("/etc/hostname") && l.contains(" 0 ")),
        "{out}"
    );
    assert!(out.contains("0:0\n0:0\n0:0"), "/, /dev and /dev/null owned by the pod's root: {out}");

    // Its root is an unprivileged ID on the node.
    let pid = cri.container_pid(&app).await;
    assert_eq!(host_uids(pid), format!("{uids} {uids} {uids} {uids}"));
    assert_eq!(
        host::namespace(pid, "user"),
        host::namespace(pause, "user"),
        "the container is in its pod's user namespace"
    );
    // Through the idmapped volume its root writes as the node's root; elsewhere, as its mapped ID.
    let mapped_file = fs::metadata(mapped_dir.join("by-root")).unwrap();
    assert_eq!((mapped_file.uid(), mapped_file.gid()), (0, 0));
    let plain_file = fs::metadata(plain_dir.join("by-root")).unwrap();
    assert_eq!((plain_file.uid(), plain_file.gid()), (uids, gids));

    // Exec runs there too, as the container's root.
    assert_eq!(cri.exec_ok(&app, &["id", "-u"]).await.trim(), "0");
    let exec_map = cri.exec_ok(&app, &["cat", "/proc/self/uid_map"]).await;
    assert_eq!(exec_map.split_whitespace().collect::<Vec<_>>(), ["0", &uids.to_string(), "65536"]);

    // A daemon restart finds the pod and the container as they were.
    env.kill_daemon();
    let mut cri = env.start().await;
    assert_eq!(cri.status_of(&app).await.state(), ContainerState::ContainerRunning);
    assert_eq!(cri.exec_ok(&app, &["id", "-u"]).await.trim(), "0");

    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_of_different_mappings_share_the_image_layers_unchanged() {
    let mut env = TestEnv::new("usernsshare");
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let mut seen = Vec::new();
    for (name, ids) in [("first", 400_000), ("second", 500_000)] {
        let pod = userns_pod(&env, name, ids, ids);
        let pod_id = cri.run_pod(pod.clone()).await.unwrap();
        let config = in_pod_userns(container_config("app", &image, &["sleep", "1000"]), ids, ids);
        let app = cri.run_container(&pod_id, &pod, config).await;
        let stat = cri.exec_ok(&app, &["stat", "-c", "%i %u %g", "/bin/busybox"]).await;
        let pid = cri.container_pid(&app).await;
        // The node's view of the same file, through the container's root.
        let outside = fs::metadata(format!("/proc/{pid}/root/bin/busybox")).unwrap();
        seen.push((stat.trim().to_string(), outside.ino(), outside.uid()));
    }
    let (first, second) = (&seen[0], &seen[1]);
    assert_eq!(first.0, second.0, "the same inode, owned by root inside, in both pods");
    assert!(first.0.ends_with(" 0 0"), "{first:?}");
    assert_eq!(first.1, second.1, "the same file on the node");
    assert_eq!((first.2, second.2), (400_000, 500_000), "each pod's mapping shows through the same file");
    // The layer on disk stays the node's root's.
    let layers = env.root.join("images").join("layers");
    let owners: Vec<u32> = fs::read_dir(&layers)
        .unwrap()
        .flatten()
        .filter_map(|l| fs::metadata(l.path().join("fs/bin/busybox")).ok())
        .map(|m| m.uid())
        .collect();
    assert!(!owners.is_empty() && owners.iter().all(|uid| *uid == 0), "{owners:?}");
    for pod in cri.list_pods(None).await {
        cri.stop_pod(&pod.id).await.unwrap();
        cri.remove_pod(&pod.id).await.unwrap();
    }
    env.assert_no_leftovers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_user_namespace_cannot_be_is_refused_naming_the_field() {
    let mut env = TestEnv::new("usernsbad");
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let refused = |uids: Vec<IdMapping>, gids: Vec<IdMapping>, mode: NamespaceMode| {
        let mut pod = env.pod("bad");
        let options =
            pod.linux.as_mut().unwrap().security_context.as_mut().unwrap().namespace_options.as_mut().unwrap();
        options.userns_options = Some(UserNamespace { mode: mode as i32, uids, gids });
        pod
    };
    let two = vec![
        IdMapping { host_id: 100_000, container_id: 0, length: 65536 },
        IdMapping { host_id: 300_000, container_id: 65536, length: 65536 },
    ];
    let cases = [
        ("two mappings", refused(two.clone(), mapping(100_000), NamespaceMode::Pod), "uids"),
        ("none", refused(Vec::new(), Vec::new(), NamespaceMode::Pod), "uids"),
        (
            "container ID 0 unmapped",
            refused(vec![IdMapping { host_id: 100_000, container_id: 1, length: 10 }], mapping(1), NamespaceMode::Pod),
            "container ID 0",
        ),
        (
            "the node's root",
            refused(
                vec![IdMapping { host_id: 0, container_id: 0, length: 65536 }],
                mapping(100_000),
                NamespaceMode::Pod,
            ),
            "node's root",
        ),
        (
            "past the last ID",
            refused(
                vec![IdMapping { host_id: u32::MAX - 10, container_id: 0, length: 65536 }],
                mapping(1),
                NamespaceMode::Pod,
            ),
            "largest ID",
        ),
        ("CONTAINER", refused(mapping(100_000), mapping(100_000), NamespaceMode::Container), "mode"),
        ("TARGET", refused(Vec::new(), Vec::new(), NamespaceMode::Target), "mode"),
    ];
    for (what, pod, mentions) in cases {
        let err = cri.run_pod(pod).await.expect_err(what);
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{what}: {err:?}");
        assert!(err.message().contains("userns_options"), "{what}: {err:?}");
        assert!(err.message().contains(mentions), "{what}: {err:?}");
    }
    // NODE is the node's namespace, as without the option.
    let node = refused(Vec::new(), Vec::new(), NamespaceMode::Node);
    let node_pod = cri.run_pod(node).await.expect("mode NODE");
    // A container cannot ask for a user namespace its pod has not.
    let plain = env.pod("plain");
    let plain_id = cri.run_pod(plain.clone()).await.unwrap();
    let asks = in_pod_userns(container_config("app", &image, &["true"]), 100_000, 100_000);
    let err = cri.create_container(&plain_id, &plain, asks).await.expect_err("a user namespace the pod has not");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    let mut idmapped = container_config("vol", &image, &["true"]);
    idmapped.mounts = vec![Mount {
        container_path: "/v".into(),
        host_path: env.base.display().to_string(),
        uid_mappings: mapping(100_000),
        gid_mappings: mapping(100_000),
        ..Default::default()
    }];
    let err = cri.create_container(&plain_id, &plain, idmapped).await.expect_err("idmaps without a user namespace");
    assert!(err.message().contains("mounts[0]"), "{err:?}");
    // In a pod with one, other mappings than its own are refused.
    let pod = userns_pod(&env, "mapped", 100_000, 100_000);
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let other = in_pod_userns(container_config("app", &image, &["true"]), 700_000, 700_000);
    let err = cri.create_container(&pod_id, &pod, other).await.expect_err("other mappings");
    assert!(err.message().contains("differ"), "{err:?}");
    for id in [node_pod, plain_id, pod_id] {
        cri.stop_pod(&id).await.unwrap();
        cri.remove_pod(&id).await.unwrap();
    }
    env.assert_no_leftovers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proc_mount_unmasked_leaves_proc_unmasked_in_a_user_namespace_only() {
    let env = TestEnv::new("usernsproc");
    let pod = userns_pod(&env, "unmasked", 600_000, 600_000);
    let Up { env, mut cri, image, pod, pod_id } = env.up_with(pod).await;
    // kubelet's procMount Unmasked: both lists empty.
    let unmasked = in_pod_userns(container_config("unmasked", &image, &["sleep", "1000"]), 600_000, 600_000);
    let unmasked = cri.run_container(&pod_id, &pod, unmasked).await;
    let mounts = cri.exec_ok(&unmasked, &["cat", "/proc/self/mountinfo"]).await;
    assert!(!mounts.contains(" /proc/keys ") && !mounts.contains(" /proc/sys "), "{mounts}");
    // Default: kubelet names the lists.
    let mut masked = in_pod_userns(container_config("masked", &image, &["sleep", "1000"]), 600_000, 600_000);
    security(&mut masked).masked_paths = vec!["/proc/keys".into()];
    security(&mut masked).readonly_paths = vec!["/proc/sys".into()];
    let masked = cri.run_container(&pod_id, &pod, masked).await;
    let mounts = cri.exec_ok(&masked, &["cat", "/proc/self/mountinfo"]).await;
    assert!(mounts.contains(" /proc/keys ") && mounts.contains(" /proc/sys "), "{mounts}");
    // An ordinary pod's container with empty lists keeps the default masks.
    let plain = env.pod("plain");
    let plain_id = cri.run_pod(plain.clone()).await.unwrap();
    let ordinary = cri.run_container(&plain_id, &plain, container_config("app", &image, &["sleep", "1000"])).await;
    let mounts = cri.exec_ok(&ordinary, &["cat", "/proc/self/mountinfo"]).await;
    assert!(mounts.contains(" /proc/keys ") && mounts.contains(" /proc/sys "), "{mounts}");
    for id in [pod_id, plain_id] {
        cri.stop_pod(&id).await.unwrap();
        cri.remove_pod(&id).await.unwrap();
    }
    env.assert_no_leftovers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_serves_a_user_namespaced_pod() {
    let env = TestEnv::new("usernsrpc");
    let (uids, gids) = (900_000, 900_000);
    let mut pod = userns_pod(&env, "rpc", uids, gids);
    // Namespaced sysctls are the pod's root's to set.
    pod.linux.as_mut().unwrap().sysctls = std::collections::HashMap::from([
        ("net.ipv4.ip_local_port_range".into(), "40000 50000".into()),
        ("kernel.shmmni".into(), "1234".into()),
    ]);
    let Up { env, mut cri, image, pod, pod_id } = env.up_with(pod).await;
    let script = "echo hello; exec sleep 1000";
    let mut config = in_pod_userns(container_config("app", &image, &["sh", "-c", script]), uids, gids);
    config.stdin = true;
    let app = cri.run_container(&pod_id, &pod, config).await;
    cri.wait_for_line(&app, "hello", 20).await;
    assert_eq!(
        cri.exec_ok(&app, &["cat", "/proc/sys/net/ipv4/ip_local_port_range"])
            .await
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["40000", "50000"]
    );
    assert_eq!(cri.exec_ok(&app, &["cat", "/proc/sys/kernel/shmmni"]).await.trim(), "1234");

    // Stats and a resize.
    let stats = cri.container_stats(&app).await.unwrap();
    assert!(stats.memory.unwrap().working_set_bytes.unwrap().value > 0);
    let limit = 64 << 20;
    cri.update_resources(&app, LinuxContainerResources { memory_limit_in_bytes: limit, ..Default::default() })
        .await
        .expect("UpdateContainerResources");
    let status = cri.status_of(&app).await;
    assert_eq!(status.resources.unwrap().linux.unwrap().memory_limit_in_bytes, limit);
    // The log reopened.
    cri.runtime.reopen_container_log(ReopenContainerLogRequest { container_id: app.clone() }).await.unwrap();
    // Attach, Exec and PortForward URLs are served.
    for url in [
        cri.runtime
            .attach(AttachRequest { container_id: app.clone(), stdin: true, stdout: true, ..Default::default() })
            .await
            .unwrap()
            .into_inner()
            .url,
        cri.runtime
            .exec(ExecRequest {
                container_id: app.clone(),
                cmd: vec!["true".into()],
                stdout: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .url,
        cri.runtime
            .port_forward(PortForwardRequest { pod_sandbox_id: pod_id.clone(), port: vec![80] })
            .await
            .unwrap()
            .into_inner()
            .url,
    ] {
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    }
    // A checkpoint is refused whole, clearly.
    let location = env.base.join("checkpoint.tar");
    let err = cri
        .runtime
        .checkpoint_container(CheckpointContainerRequest {
            container_id: app.clone(),
            location: location.display().to_string(),
            timeout: 30,
        })
        .await
        .expect_err("a checkpoint of a user-namespaced container");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("user namespace"), "{err:?}");
    assert!(!location.exists(), "no half archive");

    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_namespaced_pods_leave_nothing_after_churn_or_a_crash_mid_create() {
    let mut env = TestEnv::new("usernschurn");
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    // 200 pods, each with a container, made and removed, 4 at a time.
    let mut workers = Vec::new();
    for w in 0..4u32 {
        let mut cri = cri.clone();
        let (image, pods) = (
            image.clone(),
            (0..50)
                .map(|i| userns_pod(&env, &format!("churn-{w}-{i}"), 1_000_000 + w * 65536, 1_000_000 + w * 65536))
                .collect::<Vec<_>>(),
        );
        workers.push(tokio::spawn(async move {
            for pod in pods {
                let ids = 1_000_000 + w * 65536;
                let pod_id = cri.run_pod(pod.clone()).await.expect("RunPodSandbox");
                let config = in_pod_userns(container_config("app", &image, &["sleep", "1000"]), ids, ids);
                cri.run_container(&pod_id, &pod, config).await;
                cri.stop_pod(&pod_id).await.expect("StopPodSandbox");
                cri.remove_pod(&pod_id).await.expect("RemovePodSandbox");
            }
        }));
    }
    for worker in workers {
        worker.await.unwrap();
    }
    env.assert_no_leftovers_after("200 user-namespaced pods");
    // A daemon killed while it makes such pods: nothing is left once the
    // next one has started and what it lists is removed.
    for delay in [5u64, 15, 30, 60] {
        let socket = env.socket.clone();
        let pod = userns_pod(&env, &format!("crash-{delay}"), 2_000_000, 2_000_000);
        let image = image.clone();
        let task = tokio::spawn(async move {
            let mut cri = common::Cri::connect(&socket).await.unwrap();
            let pod_id = cri.run_pod(pod.clone()).await?;
            let config = in_pod_userns(container_config("app", &image, &["sleep", "1000"]), 2_000_000, 2_000_000);
            cri.create_container(&pod_id, &pod, config).await
        });
        tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
        env.kill_daemon();
        let _ = task.await;
        let mut cri = env.start().await;
        for c in cri.list_containers(None).await {
            cri.remove_container(&c.id).await.unwrap();
        }
        for p in cri.list_pods(None).await {
            cri.stop_pod(&p.id).await.unwrap();
            cri.remove_pod(&p.id).await.unwrap();
        }
        env.assert_no_leftovers_after(&format!("a kill {delay} ms into a user-namespaced create"));
    }
}
