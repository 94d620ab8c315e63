//! Pod sandboxes through the socket: namespaces, files, sysctls, cgroup,
//! status, listing and filters, stop/remove idempotence, name conflicts, and
//! bad input answered with clear errors and no leftovers.

mod common;

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;

use common::client::{container_config, pod_config, with_namespaces};
use common::{host, TestEnv, Up};
use nidus::api::*;

#[tokio::test]
async fn a_pod_gets_its_own_namespaces_files_and_cgroup() {
    let mut env = TestEnv::new("ownns");
    let mut cri = env.start().await;
    let daemon = env.daemon_pid().unwrap();

    let mut config = pod_config("web");
    config.linux.as_mut().unwrap().sysctls =
        HashMap::from([("net.ipv4.ip_forward".into(), "1".into()), ("kernel.shmmni".into(), "1234".into())]);
    config.linux.as_mut().unwrap().cgroup_parent = "/kubepods/burstable/poduid-web".into();
    let before = nidus::clock::now_ns();
    let id = cri.run_pod(config).await.unwrap();

    let status = cri.pod_status(&id).await.unwrap();
    let s = status.status.as_ref().unwrap();
    assert_eq!(s.state(), PodSandboxState::SandboxReady);
    assert!(s.created_at >= before, "created_at {} < {before}", s.created_at);
    assert_eq!(s.metadata.as_ref().unwrap().name, "web");
    assert_eq!(s.labels.get("app").map(String::as_str), Some("web"));
    assert_eq!(s.annotations.get("note").map(String::as_str), Some("made by a test"));
    let ns = s.linux.as_ref().unwrap().namespaces.as_ref().unwrap().options.as_ref().unwrap();
    assert_eq!(ns.network(), NamespaceMode::Pod);

    let info = cri.pod_info(&id).await;
    let pause = info["pid"].as_i64().unwrap() as i32;
    assert!(host::process_running(pause));
    let cmdline = host::cmdline_once(pause, "nidus-pause-idle\0");
    // nidus-pause built the pod, then exec'd the tiny idle loop in place.
    assert_eq!(cmdline, "nidus-pause-idle\0", "the tiny idle loop holds pods: {cmdline:?}");
    for kind in ["net", "ipc", "uts", "pid"] {
        assert_ne!(
            host::namespace(pause, kind),
            host::namespace(daemon, kind),
            "{kind} namespace must be the pod's own"
        );
        assert_eq!(
            info["namespaces"][if kind == "net" { "network" } else { kind }],
            format!("/proc/{pause}/ns/{kind}")
        );
    }
    // pause is PID 1 of the pod's PID namespace.
    let nspid = fs::read_to_string(format!("/proc/{pause}/status")).unwrap();
    let nspid = nspid.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    assert!(nspid.trim_end().ends_with("\t1"), "{nspid}");

    // Hostname, loopback and sysctls inside the pod.
    assert_eq!(host::in_namespaces_of(pause, &["-u"], &["cat", "/proc/sys/kernel/hostname"]).trim(), "web");
    let lo = host::in_namespaces_of(pause, &["-n"], &["ip", "-o", "link", "show", "lo"]);
    assert!(lo.contains("UP"), "loopback: {lo}");
    assert_eq!(host::in_namespaces_of(pause, &["-n"], &["cat", "/proc/sys/net/ipv4/ip_forward"]).trim(), "1");
    assert_eq!(host::in_namespaces_of(daemon, &["-n"], &["cat", "/proc/sys/net/ipv4/ip_forward"]).trim(), "0");
    assert_eq!(host::in_namespaces_of(pause, &["-i"], &["cat", "/proc/sys/kernel/shmmni"]).trim(), "1234");

    // Files for containers.
    let resolv = fs::read_to_string(info["files"]["resolvConf"].as_str().unwrap()).unwrap();
    assert_eq!(resolv, "search default.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n");
    let hosts = fs::read_to_string(info["files"]["hosts"].as_str().unwrap()).unwrap();
    assert!(hosts.contains("127.0.0.1\tlocalhost"), "{hosts}");
    assert_eq!(fs::read_to_string(info["files"]["hostname"].as_str().unwrap()).unwrap(), "web\n");
    let shm = PathBuf::from(info["files"]["shm"].as_str().unwrap());
    assert_eq!(host::fstype_of_mount(&shm).as_deref(), Some("tmpfs"), "/dev/shm of the pod");

    // The pause process sits in the pod cgroup under the test's cgroup root.
    let memcg = host::cgroup_of(pause, "memory").or_else(|| host::cgroup_of(pause, "")).unwrap();
    assert!(
        memcg.ends_with(&format!("/{}/kubepods/burstable/poduid-web/{id}", env.cgroup_root)),
        "pause cgroup {memcg}"
    );
    // Pause holds only its stdio (on /dev/null) and no capabilities.
    let fds: Vec<_> = fs::read_dir(format!("/proc/{pause}/fd")).unwrap().flatten().collect();
    assert_eq!(fds.len(), 3, "pause fds: {fds:?}");
    for fd in fds {
        assert_eq!(fs::read_link(fd.path()).unwrap(), PathBuf::from("/dev/null"));
    }
    let proc_status = fs::read_to_string(format!("/proc/{pause}/status")).unwrap();
    assert!(proc_status.contains("CapEff:\t0000000000000000"), "{proc_status}");

    // Stop: NOTREADY, pause gone, shm released; twice is fine.
    cri.stop_pod(&id).await.unwrap();
    assert!(host::wait_gone(pause), "pause still running after StopPodSandbox");
    assert_eq!(cri.pod_state(&id).await, PodSandboxState::SandboxNotready);
    assert!(host::fstype_of_mount(&shm).is_none(), "shm still mounted after stop");
    cri.stop_pod(&id).await.unwrap();

    // Remove: gone from the list, status NotFound; twice is fine.
    cri.remove_pod(&id).await.unwrap();
    assert!(cri.list_pods(None).await.is_empty());
    assert_eq!(cri.pod_status(&id).await.unwrap_err().code(), tonic::Code::NotFound);
    cri.remove_pod(&id).await.unwrap();
    env.remove_kubelet_cgroups();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn node_namespaces_are_shared_with_the_node() {
    let mut env = TestEnv::new("nodens");
    let mut cri = env.start().await;
    let daemon = env.daemon_pid().unwrap();
    let config = with_namespaces(pod_config("hostnet"), NamespaceMode::Node, NamespaceMode::Node, NamespaceMode::Node);
    let id = cri.run_pod(config).await.unwrap();
    let info = cri.pod_info(&id).await;
    let pause = info["pid"].as_i64().unwrap() as i32;
    for kind in ["net", "ipc", "uts", "pid"] {
        assert_eq!(host::namespace(pause, kind), host::namespace(daemon, kind), "{kind} must be the node's");
    }
    assert!(info["files"]["shm"].is_null(), "host IPC uses the node's /dev/shm");
    let hosts = fs::read_to_string(info["files"]["hosts"].as_str().unwrap()).unwrap();
    assert_eq!(hosts, fs::read_to_string("/etc/hosts").unwrap(), "host network pods see the node's /etc/hosts");

    // CONTAINER pid namespace (kubelet's default for pods that do not share
    // one) with NODE network: pause still gets a new pid ns; net is shared.
    let config =
        with_namespaces(pod_config("mixed"), NamespaceMode::Node, NamespaceMode::Container, NamespaceMode::Pod);
    let mixed = cri.run_pod(config).await.unwrap();
    let mixed_pause = cri.pause_pid(&mixed).await;
    assert_eq!(host::namespace(mixed_pause, "net"), host::namespace(daemon, "net"));
    assert_ne!(host::namespace(mixed_pause, "pid"), host::namespace(daemon, "pid"));
    assert_ne!(host::namespace(mixed_pause, "ipc"), host::namespace(daemon, "ipc"));

    for id in [id, mixed] {
        cri.stop_pod(&id).await.unwrap();
        cri.remove_pod(&id).await.unwrap();
    }
    env.assert_no_leftovers();
}

#[tokio::test]
async fn listing_filters_by_id_prefix_state_and_labels() {
    let mut env = TestEnv::new("list");
    let mut cri = env.start().await;
    let mut ids = Vec::new();
    for (name, tier) in [("a", "front"), ("b", "front"), ("c", "back")] {
        let mut config = pod_config(name);
        config.labels.insert("tier".into(), tier.into());
        ids.push(cri.run_pod(config).await.unwrap());
    }
    cri.stop_pod(&ids[2]).await.unwrap();

    assert_eq!(cri.list_pods(None).await.len(), 3);
    let by_prefix = cri.list_pods(Some(PodSandboxFilter { id: ids[1][..13].to_string(), ..Default::default() })).await;
    assert_eq!(by_prefix.len(), 1);
    assert_eq!(by_prefix[0].id, ids[1]);
    let ready = cri
        .list_pods(Some(PodSandboxFilter {
            state: Some(PodSandboxStateValue { state: PodSandboxState::SandboxReady as i32 }),
            ..Default::default()
        }))
        .await;
    assert_eq!(ready.len(), 2);
    let front = cri
        .list_pods(Some(PodSandboxFilter {
            label_selector: HashMap::from([("tier".into(), "front".into())]),
            ..Default::default()
        }))
        .await;
    let mut front_ids: Vec<_> = front.iter().map(|p| p.id.clone()).collect();
    front_ids.sort();
    let mut want = vec![ids[0].clone(), ids[1].clone()];
    want.sort();
    assert_eq!(front_ids, want);

    // Status and stop accept a unique id prefix, as crictl sends.
    let status = cri.pod_status(&ids[0][..12]).await.unwrap();
    assert_eq!(status.status.unwrap().id, ids[0]);

    // The streaming list answers the same.
    let mut stream =
        cri.runtime.stream_pod_sandboxes(StreamPodSandboxesRequest { filter: None }).await.unwrap().into_inner();
    let mut streamed = 0;
    while let Some(chunk) = stream.message().await.unwrap() {
        streamed += chunk.pod_sandboxes.len();
    }
    assert_eq!(streamed, 3);

    for id in &ids {
        cri.remove_pod(id).await.unwrap();
    }
    env.assert_no_leftovers();
}

#[tokio::test]
async fn a_name_in_use_is_refused_until_the_pod_is_removed() {
    let mut env = TestEnv::new("names");
    let mut cri = env.start().await;
    let first = cri.run_pod(pod_config("dup")).await.unwrap();
    let err = cri.run_pod(pod_config("dup")).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::AlreadyExists, "{err:?}");
    assert!(err.message().contains(&first), "{}", err.message());

    // A new attempt is a different name; after removal the old name is free.
    let mut next = pod_config("dup");
    next.metadata.as_mut().unwrap().attempt = 1;
    let second = cri.run_pod(next).await.unwrap();
    cri.stop_pod(&first).await.unwrap();
    assert_eq!(cri.run_pod(pod_config("dup")).await.unwrap_err().code(), tonic::Code::AlreadyExists);
    cri.remove_pod(&first).await.unwrap();
    let third = cri.run_pod(pod_config("dup")).await.unwrap();
    for id in [second, third] {
        cri.remove_pod(&id).await.unwrap();
    }
    env.assert_no_leftovers();
}

#[tokio::test]
async fn bad_input_gets_clear_errors_and_leaves_nothing_behind() {
    let mut env = TestEnv::new("badinput");
    let mut cri = env.start().await;

    type Edit = fn(&mut PodSandboxConfig);
    let cases: Vec<(&str, Edit, tonic::Code)> = vec![
        ("config.metadata", |c| c.metadata = None, tonic::Code::InvalidArgument),
        ("config.metadata.name", |c| c.metadata.as_mut().unwrap().name.clear(), tonic::Code::InvalidArgument),
        (
            "config.metadata.namespace",
            |c| c.metadata.as_mut().unwrap().namespace = "a/b".into(),
            tonic::Code::InvalidArgument,
        ),
        ("config.metadata.uid", |c| c.metadata.as_mut().unwrap().uid = "x".repeat(5000), tonic::Code::InvalidArgument),
        ("config.hostname", |c| c.hostname = "bad host".into(), tonic::Code::InvalidArgument),
        ("config.log_directory", |c| c.log_directory = "relative/logs".into(), tonic::Code::InvalidArgument),
        ("config.log_directory", |c| c.log_directory = "/var/log/../../etc".into(), tonic::Code::InvalidArgument),
        (
            "config.dns_config.servers[0]",
            |c| c.dns_config.as_mut().unwrap().servers = vec!["1.1.1.1\nnameserver 6.6.6.6".into()],
            tonic::Code::InvalidArgument,
        ),
        (
            "config.dns_config.searches[0]",
            |c| c.dns_config.as_mut().unwrap().searches = vec!["a b".into()],
            tonic::Code::InvalidArgument,
        ),
        (
            "config.port_mappings[0]",
            |c| c.port_mappings = vec![PortMapping { container_port: 70000, ..Default::default() }],
            tonic::Code::InvalidArgument,
        ),
        (
            "config.labels",
            |c| {
                c.labels.insert(String::new(), "v".into());
            },
            tonic::Code::InvalidArgument,
        ),
        (
            "config.annotations",
            |c| {
                c.annotations.insert("big".into(), "x".repeat(300 * 1024));
            },
            tonic::Code::InvalidArgument,
        ),
        (
            "config.linux.cgroup_parent",
            |c| c.linux.as_mut().unwrap().cgroup_parent = "/kubepods/../../escape".into(),
            tonic::Code::InvalidArgument,
        ),
        (
            "config.linux.sysctls",
            |c| {
                c.linux.as_mut().unwrap().sysctls.insert("kernel.panic".into(), "1".into());
            },
            tonic::Code::InvalidArgument,
        ),
        (
            "config.linux.sysctls",
            |c| {
                c.linux.as_mut().unwrap().sysctls.insert("net.ipv4.no_such_knob".into(), "1".into());
            },
            tonic::Code::InvalidArgument,
        ),
        (
            "config.linux.sysctls",
            |c| {
                c.linux.as_mut().unwrap().sysctls.insert("net.ipv4.ip_forward".into(), "1\n0".into());
            },
            tonic::Code::InvalidArgument,
        ),
        (
            "namespace_options.network",
            |c| {
                c.linux
                    .as_mut()
                    .unwrap()
                    .security_context
                    .as_mut()
                    .unwrap()
                    .namespace_options
                    .as_mut()
                    .unwrap()
                    .network = 42;
            },
            tonic::Code::InvalidArgument,
        ),
        (
            "namespace_options.pid",
            |c| {
                c.linux.as_mut().unwrap().security_context.as_mut().unwrap().namespace_options.as_mut().unwrap().pid =
                    NamespaceMode::Target as i32;
            },
            tonic::Code::InvalidArgument,
        ),
    ];
    for (field, edit, code) in cases {
        let mut config = pod_config("bad");
        edit(&mut config);
        let err = cri.run_pod(config).await.unwrap_err();
        assert_eq!(err.code(), code, "{field}: {err:?}");
        assert!(err.message().contains(field), "message {:?} must name {field}", err.message());
    }

    // Host-network pods cannot set net.* sysctls (they would change the node).
    let mut config = with_namespaces(pod_config("bad"), NamespaceMode::Node, NamespaceMode::Pod, NamespaceMode::Pod);
    config.linux.as_mut().unwrap().sysctls.insert("net.ipv4.ip_forward".into(), "1".into());
    let err = cri.run_pod(config).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("net.ipv4.ip_forward"), "{}", err.message());

    // Unknown runtime handler.
    let err = cri
        .runtime
        .run_pod_sandbox(RunPodSandboxRequest { config: Some(pod_config("bad")), runtime_handler: "kata".into() })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("runtime_handler"), "{}", err.message());

    // A failure after resources were made (the pause process cannot write this
    // sysctl value): everything made so far is undone and the name is free.
    let mut config = pod_config("late");
    config.linux.as_mut().unwrap().sysctls.insert("net.ipv4.ip_local_port_range".into(), "not numbers".into());
    let err = cri.run_pod(config).await.unwrap_err();
    assert!(err.message().contains("net.ipv4.ip_local_port_range"), "{err:?}");

    // Bad ids.
    for (id, code) in [
        ("", tonic::Code::InvalidArgument),
        ("../../etc", tonic::Code::InvalidArgument),
        ("abcdef12", tonic::Code::NotFound),
    ] {
        let err = cri.pod_status(id).await.unwrap_err();
        assert_eq!(err.code(), code, "PodSandboxStatus({id:?}): {err:?}");
        assert!(err.message().contains("pod_sandbox_id") || code == tonic::Code::NotFound, "{err:?}");
    }
    // Stopping or removing an unknown sandbox succeeds (it may be gone
    // already), whatever the id looks like; an empty id is still refused.
    for id in ["../../etc", "abcdef12"] {
        cri.stop_pod(id).await.unwrap_or_else(|e| panic!("StopPodSandbox({id:?}): {e:?}"));
        cri.remove_pod(id).await.unwrap_or_else(|e| panic!("RemovePodSandbox({id:?}): {e:?}"));
    }
    assert_eq!(cri.stop_pod("").await.unwrap_err().code(), tonic::Code::InvalidArgument);

    assert!(cri.list_pods(None).await.is_empty());
    env.assert_no_leftovers();
    // Nothing failed half-way: the daemon still works and the names are free.
    let id = cri.run_pod(pod_config("late")).await.unwrap();
    cri.remove_pod(&id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn concurrent_runs_work_and_one_name_wins_once() {
    let mut env = TestEnv::new("concurrent");
    let cri = env.start().await;
    let runtime = cri.runtime.clone();

    let mut tasks = Vec::new();
    for i in 0..16 {
        let mut rt = runtime.clone();
        // Pods 0-7 have distinct names; 8-15 all ask for the name "same".
        let name = if i < 8 { format!("pod{i}") } else { "same".to_string() };
        tasks.push(tokio::spawn(async move {
            rt.run_pod_sandbox(RunPodSandboxRequest { config: Some(pod_config(&name)), runtime_handler: String::new() })
                .await
                .map(|r| r.into_inner().pod_sandbox_id)
        }));
    }
    let mut ok = Vec::new();
    let mut conflicts = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(id) => ok.push(id),
            Err(e) if e.code() == tonic::Code::AlreadyExists => conflicts += 1,
            Err(e) => panic!("unexpected error: {e:?}"),
        }
    }
    assert_eq!(ok.len(), 9, "8 distinct pods + one winner of the shared name");
    assert_eq!(conflicts, 7);

    let mut cri = cri;
    let pods = cri.list_pods(None).await;
    assert_eq!(pods.len(), 9);
    assert!(pods.iter().all(|p| p.state() == PodSandboxState::SandboxReady));
    let mut tasks = Vec::new();
    for id in ok {
        let mut rt = runtime.clone();
        tasks.push(tokio::spawn(
            async move { rt.remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: id }).await },
        ));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert!(cri.list_pods(None).await.is_empty());
    env.assert_no_leftovers();
}

/// The limit files kubelet sets on its node-allocatable and QoS cgroups,
/// per cgroup version: (cgroup, file, value).
fn kubelet_limits() -> Vec<(&'static str, &'static str, &'static str)> {
    if host::unified() {
        vec![
            ("kubepods", "memory.max", "25325268992"),
            ("kubepods", "cpu.weight", "79"),
            ("kubepods/burstable", "cpu.weight", "7"),
            ("kubepods/besteffort", "cpu.weight", "1"),
        ]
    } else {
        vec![
            ("kubepods", "memory.limit_in_bytes", "25325268992"),
            ("kubepods", "cpu.shares", "2048"),
            ("kubepods/burstable", "cpu.shares", "1536"),
            ("kubepods/besteffort", "cpu.shares", "2"),
        ]
    }
}

/// kubelet's layout with `--cgroups-per-qos`: `kubepods` and its QoS
/// cgroups in every hierarchy but `devices` (kubelet skips it on v1), with
/// the node-allocatable limits set, and a `pod<uid>` cgroup per pod made
/// before RunPodSandbox. Returns the hierarchies kubelet wrote to.
fn make_kubelet_cgroups(env: &TestEnv, pods: &[&str]) -> Vec<PathBuf> {
    let kubelets: Vec<PathBuf> =
        env.cgroup_dirs().into_iter().filter(|d| !d.to_string_lossy().contains("/devices/")).collect();
    assert!(!kubelets.is_empty());
    for root in &kubelets {
        let levels = ["kubepods", "kubepods/burstable", "kubepods/besteffort"];
        for dir in levels.iter().chain(pods) {
            let dir = root.join(dir);
            fs::create_dir_all(&dir).unwrap();
            // A new v1 cpuset takes no task until it has cpus and mems (libcontainer copies the parent's);
            // on v2 the files exist only where the parent hands cpuset down, and an empty one inherits.
            for file in ["cpuset.cpus", "cpuset.mems"].into_iter().filter(|_| !host::unified()) {
                if let Ok(value) = fs::read_to_string(dir.parent().unwrap().join(file)) {
                    fs::write(dir.join(file), value.trim()).unwrap();
                }
            }
        }
        if host::unified() {
            // kubelet hands the controllers down to its QoS and pod cgroups.
            for dir in
                [root.clone(), root.join("kubepods"), root.join("kubepods/burstable"), root.join("kubepods/besteffort")]
            {
                for controller in ["cpu", "memory", "pids"] {
                    let _ = fs::write(dir.join("cgroup.subtree_control"), format!("+{controller}"));
                }
            }
        }
    }
    for (cgroup, file, value) in kubelet_limits() {
        let written = kubelets.iter().filter(|root| fs::write(root.join(cgroup).join(file), value).is_ok()).count();
        assert!(written > 0, "cannot set {cgroup}/{file} in any hierarchy");
    }
    kubelets
}

/// What kubelet set is still there, with its values.
fn assert_kubelet_cgroups_intact(kubelets: &[PathBuf], pods: &[&str], after: &str) {
    for root in kubelets {
        for dir in ["kubepods", "kubepods/burstable", "kubepods/besteffort"].iter().chain(pods) {
            assert!(root.join(dir).is_dir(), "kubelet's cgroup {} is gone after {after}", root.join(dir).display());
        }
    }
    for (cgroup, file, value) in kubelet_limits() {
        for root in kubelets {
            let path = root.join(cgroup).join(file);
            if let Ok(now) = fs::read_to_string(&path) {
                assert_eq!(now.trim(), value, "{} changed after {after}", path.display());
            }
        }
    }
}

/// Two pods, one per QoS class, each with a container, under kubelet's
/// cgroups; removed (after a kill -9 of the daemon in between when
/// `crash`), they leave kubelet's cgroups and limits as they were.
async fn kubelet_cgroups_outlive_the_last_pod(label: &str, crash: bool) {
    let mut env = TestEnv::new(label);
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let pods = ["kubepods/burstable/poda", "kubepods/besteffort/podb"];
    let kubelets = make_kubelet_cgroups(&env, &pods);
    let mut ids = Vec::new();
    for (name, parent) in ["a", "b"].iter().zip(pods) {
        let mut config = pod_config(name);
        config.linux.as_mut().unwrap().cgroup_parent = format!("/{parent}");
        let id = cri.run_pod(config.clone()).await.unwrap();
        let container = cri.run_container(&id, &config, container_config("app", &image, &["sleep", "1000"])).await;
        ids.push((id, container));
    }
    // nidus made the pod cgroups where kubelet had not (devices, on v1).
    let dirs = env.cgroup_dirs();
    assert!(dirs.iter().all(|d| d.join(pods[0]).is_dir()));
    if crash {
        env.kill_daemon();
        cri = env.start().await;
    }
    for (pod, container) in &ids {
        cri.stop_container(container, 0).await.unwrap();
        cri.remove_container(container).await.unwrap();
        cri.stop_pod(pod).await.unwrap();
        cri.remove_pod(pod).await.unwrap();
    }
    assert_kubelet_cgroups_intact(&kubelets, &pods, "the last pod of each QoS class left");
    // A restart after that (its start-up pruning) takes nothing of kubelet's either.
    env.kill_daemon();
    let mut cri = env.start().await;
    assert!(cri.list_pods(None).await.is_empty());
    assert_kubelet_cgroups_intact(&kubelets, &pods, "a restart with no pods");
    env.remove_kubelet_cgroups();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn kubelets_qos_cgroups_and_their_limits_outlive_the_last_pod() {
    kubelet_cgroups_outlive_the_last_pod("kubeletcg", false).await;
}

#[tokio::test]
async fn kubelets_qos_cgroups_outlive_the_last_pod_across_a_daemon_kill() {
    kubelet_cgroups_outlive_the_last_pod("kubeletcg9", true).await;
}

#[tokio::test]
async fn a_default_parent_is_removed_where_nidus_made_it_and_kept_where_it_was() {
    let mut env = TestEnv::new("ownparent");
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    // Nothing there first: the default parent `nidus` is made and goes with the last pod.
    let config = pod_config("a");
    let id = cri.run_pod(config.clone()).await.unwrap();
    let dirs = env.cgroup_dirs();
    assert!(dirs.iter().all(|d| d.join("nidus").join(&id).is_dir()));
    cri.run_container(&id, &config, container_config("app", &image, &["sleep", "1000"])).await;
    cri.stop_pod(&id).await.unwrap();
    cri.remove_pod(&id).await.unwrap();
    env.assert_no_leftovers();

    // An operator made `nidus` in one hierarchy: it stays there, and goes
    // from the others, where nidus made it.
    let operators = &dirs[0];
    fs::create_dir(operators.join("nidus")).unwrap();
    let id = cri.run_pod(config.clone()).await.unwrap();
    env.kill_daemon();
    let mut cri = env.start().await;
    cri.stop_pod(&id).await.unwrap();
    cri.remove_pod(&id).await.unwrap();
    assert!(operators.join("nidus").is_dir(), "the operator's {} went", operators.join("nidus").display());
    for other in &dirs[1..] {
        assert!(!other.join("nidus").exists(), "{} is left", other.join("nidus").display());
    }
    fs::remove_dir(operators.join("nidus")).unwrap();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn a_given_cgroup_parent_stays_and_nothing_of_nidus_is_left_below_it() {
    let mut env = TestEnv::new("parents");
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let mut pods = Vec::new();
    for name in ["a", "b"] {
        let mut config = pod_config(name);
        config.linux.as_mut().unwrap().cgroup_parent = format!("/kubepods/burstable/pod{name}");
        let id = cri.run_pod(config.clone()).await.unwrap();
        pods.push((id, config));
    }
    let dirs = env.cgroup_dirs();
    let exists = |rel: &str| dirs.iter().all(|d| d.join(rel).is_dir());
    assert!(exists("kubepods/burstable/poda") && exists("kubepods/burstable/podb"));

    // A container goes: its pod's cgroup stays (the pause is in it).
    let (a, a_config) = &pods[0];
    let container = cri.run_container(a, a_config, container_config("app", &image, &["sleep", "1000"])).await;
    cri.remove_container(&container).await.unwrap();
    assert!(exists(&format!("kubepods/burstable/poda/{a}")), "pod a's sandbox cgroup went with its container");
    // Removed, a pod leaves its cgroup_parent empty: that and the parents
    // above it are the client's (kubelet's), even where nidus made them.
    cri.stop_pod(a).await.unwrap();
    cri.remove_pod(a).await.unwrap();
    assert!(exists("kubepods/burstable/poda"), "pod a's cgroup_parent went");
    assert!(dirs
        .iter()
        .all(|d| host::names_in(&d.join("kubepods/burstable/poda")).iter().all(|n| !n.contains(a.as_str()))));
    let (b, _) = &pods[1];
    cri.stop_pod(b).await.unwrap();
    cri.remove_pod(b).await.unwrap();
    assert!(exists("kubepods/burstable/podb"));
    env.remove_kubelet_cgroups();
    env.assert_no_leftovers();
}

/// The harness's leftover check (`TestEnv::up`, `checking_leftovers`) is
/// real: what a test leaves — a pod it did not remove, a mount, a cgroup, a
/// network namespace — fails it, each named, and is cleaned up all the same;
/// a test that cleaned up after itself passes.
#[tokio::test]
async fn the_harness_fails_a_test_that_leaves_anything_and_names_it() {
    // Cleaned up: the drop passes (spare monitors and their inits end with
    // the daemon, and are no leftovers).
    let Up { env, mut cri, pod_id, .. } = TestEnv::new("leftnone").up("clean").await;
    cri.remove_pod(&pod_id).await.unwrap();
    drop(cri);
    drop(env);

    // Left: the pod, a mount, a cgroup and a network namespace.
    let Up { env, mut cri, pod_id, .. } = TestEnv::new("leftall").up("left").await;
    let pause = cri.pause_pid(&pod_id).await;
    let mount = env.root.join("left-mount");
    fs::create_dir_all(&mount).unwrap();
    host::run("mount", &["-t", "tmpfs", "-o", "size=1m", "nidus-left-test", &mount.to_string_lossy()]);
    let cgroup = env.cgroup_dirs()[0].join("left-cgroup");
    fs::create_dir(&cgroup).unwrap();
    let netns = format!("{}-left", env.name);
    host::run("ip", &["netns", "add", &netns]);
    let (base, name, sandbox_dir) = (env.base.clone(), env.name.clone(), env.root.join("sandboxes").join(&pod_id));
    drop(cri);
    let failure = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(env)))
        .expect_err("dropping an environment with leftovers fails the test");
    let message = failure.downcast_ref::<String>().cloned().unwrap_or_default();
    let lines: Vec<&str> = message.lines().map(str::trim).collect();
    assert!(lines.iter().any(|l| l.starts_with(&format!("process {pause}: "))), "the pause is named in:\n{message}");
    for named in [
        format!("mount {}", mount.display()),
        format!("cgroup {}", cgroup.display()),
        format!("network namespace {netns}"),
        format!("file {}", sandbox_dir.display()),
    ] {
        assert!(lines.contains(&named.as_str()), "{named:?} is named in:\n{message}");
    }
    let pod_cgroup = |l: &&str| l.starts_with("cgroup ") && l.ends_with(&format!("/{pod_id}"));
    assert!(lines.iter().any(pod_cgroup), "the pod's cgroup is named in:\n{message}");
    // And all of it is gone.
    assert!(host::wait_gone(pause), "the pause was ended");
    assert_eq!(host::mounts_under(&base), Vec::<PathBuf>::new());
    assert!(!cgroup.exists(), "the cgroup was removed");
    assert_eq!(host::named_netns(&name), Vec::<String>::new());
    assert!(!base.exists(), "the test's directory was removed");
}
