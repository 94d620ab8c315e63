//! The escape battery through the socket: from a default container (no
//! seccomp profile, kubelet's default) every classic way out fails — mount
//! and umount, /proc/sys and /proc/sysrq-trigger, the masked /proc files,
//! writing /sys, device nodes, an inherited descriptor, a cwd outside the
//! root, sethostname on the node's UTS namespace, raw sockets without
//! NET_RAW, the pause's root — and a process that may ptrace (CAP_SYS_PTRACE
//! in a shared-PID pod) still cannot overwrite the runtime binary through
//! /proc/PID/exe of a created container's init. A privileged container gets
//! what Kubernetes says it gets.

mod common;

use common::client::{container_config, log_lines, security, with_namespaces};
use common::probe::{expect_errno, expect_errno_in, expect_ok, probe};
use common::{images, TestEnv};
use nidus::api::*;

const EPERM: i32 = 1;
const EACCES: i32 = 13;
const EROFS: i32 = 30;
const ETXTBSY: i32 = 26;

fn sleeper(name: &str, image: &str) -> ContainerConfig {
    container_config(name, image, &["sleep", "3600"])
}

fn in_pod_pid_namespace(mut config: ContainerConfig) -> ContainerConfig {
    security(&mut config).namespace_options.as_mut().unwrap().pid = NamespaceMode::Pod as i32;
    config
}

#[tokio::test]
async fn a_default_container_cannot_get_out() {
    default_container_battery("escape", None).await;
}

#[tokio::test]
async fn a_default_container_of_a_user_namespaced_pod_cannot_get_out() {
    default_container_battery("escapeuserns", Some(800_000)).await;
}

/// A pod config, in a user namespace mapping 65,536 IDs to `userns` when given.
fn battery_pod(env: &TestEnv, userns: Option<u32>) -> PodSandboxConfig {
    let mut pod = env.pod("escape");
    if let Some(host) = userns {
        let ids = vec![IdMapping { host_id: host, container_id: 0, length: 65536 }];
        let options =
            pod.linux.as_mut().unwrap().security_context.as_mut().unwrap().namespace_options.as_mut().unwrap();
        options.userns_options = Some(UserNamespace { mode: NamespaceMode::Pod as i32, uids: ids.clone(), gids: ids });
    }
    pod
}

/// Every classic way out, from a default container (in a pod with a user
/// namespace of its own when `userns` maps it).
async fn default_container_battery(label: &str, userns: Option<u32>) {
    let mut env = TestEnv::new(label);
    let mut cri = env.start().await;
    let image = env.import_image(&mut cri, images::busybox_probe()).await;
    let pod = battery_pod(&env, userns);
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    // kubelet names the default masks of procMount Default (an empty list
    // in a user namespace means Unmasked).
    let kubelets = |mut config: ContainerConfig| {
        if userns.is_some() {
            let sc = security(&mut config);
            sc.masked_paths = nidus::container::spec::DEFAULT_MASKED_PATHS.iter().map(|p| p.to_string()).collect();
            sc.readonly_paths = nidus::container::spec::DEFAULT_READONLY_PATHS.iter().map(|p| p.to_string()).collect();
        }
        config
    };
    let mut config = kubelets(sleeper("victim", &image));
    config.working_dir = "/etc".into();
    let c = cri.run_container(&pod_id, &pod, config).await;
    assert_eq!(cri.container_info(&c).await["security"]["seccomp"]["profile"], "Unconfined", "kubelet's default");

    // Mounts.
    expect_errno(&mut cri, &c, &["mount-tmpfs", "/tmp"], EPERM).await;
    expect_errno(&mut cri, &c, &["umount", "/etc/hostname"], EPERM).await;
    expect_errno(&mut cri, &c, &["unshare-mount"], EPERM).await;
    // /proc: sysctls and sysrq are read-only, the kernel's secrets masked
    // (in a user namespace, the node's root's files are not even writable
    // to the pod's root).
    let read_only: &[i32] = if userns.is_some() { &[EROFS, EACCES] } else { &[EROFS] };
    expect_errno_in(&mut cri, &c, &["open-write", "/proc/sys/kernel/domainname"], read_only).await;
    if std::path::Path::new("/proc/sysrq-trigger").exists() {
        expect_errno_in(&mut cri, &c, &["open-write", "/proc/sysrq-trigger"], read_only).await;
    } else {
        eprintln!("note: this kernel has no /proc/sysrq-trigger (CONFIG_MAGIC_SYSRQ off); /proc/sys stands in");
    }
    let masked = ["/proc/kcore", "/proc/keys", "/proc/timer_list"];
    for path in masked {
        if !std::path::Path::new(path).exists() {
            eprintln!("note: this kernel has no {path}");
            continue;
        }
        let host_bytes = std::fs::read(path).map(|b| b.len()).unwrap_or(0);
        let p = expect_ok(&mut cri, &c, &["read", path]).await;
        assert_eq!(p.line(), "ok 0 bytes", "{path} is masked (the node's has {host_bytes} bytes)");
    }
    // /sys is read-only.
    expect_errno_in(&mut cri, &c, &["open-write", "/sys/kernel/profiling"], read_only).await;
    // Device nodes can be made (CAP_MKNOD, as in containerd) but not opened;
    // in a user namespace the kernel refuses even to make them.
    for (node, kind, major, minor) in [("/tmp/kmsg", "c", "1", "11"), ("/tmp/loop0", "b", "7", "0")] {
        let p = probe(&mut cri, &c, &["mknod-open", node, kind, major, minor]).await;
        match userns {
            None => assert!(p.line().starts_with("mknod ok, open errno=1 "), "{node}: {p:?}"),
            Some(_) => assert!(p.line().starts_with("mknod errno=1 "), "{node}: {p:?}"),
        }
    }
    let out = cri.exec_ok(&c, &["sh", "-c", "echo x > /dev/null && head -c 4 /dev/urandom | wc -c"]).await;
    assert_eq!(out.trim(), "4", "the default devices work");
    // Each with its exact mode (no umask) and numbers, owned by root; the /dev links.
    let nodes = "/dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/tty";
    let out = cri
        .exec_ok(
            &c,
            &["sh", "-c", &format!("stat -c '%n %F %a %u:%g %t:%T' {nodes}; readlink /dev/fd; readlink /dev/ptmx")],
        )
        .await;
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "/dev/null character special file 666 0:0 1:3",
            "/dev/zero character special file 666 0:0 1:5",
            "/dev/full character special file 666 0:0 1:7",
            "/dev/random character special file 666 0:0 1:8",
            "/dev/urandom character special file 666 0:0 1:9",
            "/dev/tty character special file 666 0:0 5:0",
            "/proc/self/fd",
            "pts/ptmx",
        ]
    );
    // Only stdin, stdout and stderr, in the container's process and in an exec.
    let fds = expect_ok(&mut cri, &c, &["fds"]).await;
    let names: Vec<&str> = fds.line().split_whitespace().skip(1).map(|f| f.split('=').next().unwrap()).collect();
    assert_eq!(names, ["0", "1", "2"], "ExecSync: {}", fds.line());
    let listed = cri.exec_ok(&c, &["ls", "/proc/1/fd"]).await;
    assert_eq!(listed.split_whitespace().collect::<Vec<_>>(), ["0", "1", "2"]);
    // The working directory is inside the root.
    assert_eq!(cri.exec_ok(&c, &["readlink", "/proc/self/cwd"]).await, "/etc\n");
    assert_eq!(cri.exec_ok(&c, &["readlink", "/proc/1/cwd"]).await, "/etc\n");
    assert_eq!(cri.exec_ok(&c, &["cat", "/proc/1/cwd/hostname"]).await, "escape\n");
    // Nothing of the node through the pause (PID 1 of the pod's shared PID namespace).
    let neighbour =
        cri.run_container(&pod_id, &pod, kubelets(in_pod_pid_namespace(sleeper("neighbour", &image)))).await;
    assert!(cri.exec_ok(&neighbour, &["cat", "/proc/1/cmdline"]).await.contains("nidus-pause"));
    expect_errno(&mut cri, &neighbour, &["ls", "/proc/1/root/"], EACCES).await;
    expect_errno(&mut cri, &neighbour, &["read", "/proc/1/environ"], EACCES).await;
    // Raw sockets: NET_RAW is a default capability; without it they are refused.
    expect_ok(&mut cri, &c, &["raw-socket"]).await;
    let mut no_raw = kubelets(sleeper("no-raw", &image));
    security(&mut no_raw).capabilities =
        Some(Capability { drop_capabilities: vec!["NET_RAW".into()], ..Default::default() });
    let no_raw = cri.run_container(&pod_id, &pod, no_raw).await;
    expect_errno(&mut cri, &no_raw, &["raw-socket"], EPERM).await;

    // The container's own process sees only its stdio too.
    let own = cri.run_container(&pod_id, &pod, kubelets(container_config("fds", &image, &["/bin/probe", "fds"]))).await;
    assert_eq!(cri.wait_exited(&own, 20).await.exit_code, 0);
    let line = log_lines(&cri.logs(&own).await, "stdout").join("\n");
    let names: Vec<&str> = line.split_whitespace().skip(1).map(|f| f.split('=').next().unwrap()).collect();
    assert_eq!(names, ["0", "1", "2"], "the init: {line}");

    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn sethostname_on_the_nodes_uts_namespace_is_refused() {
    let mut env = TestEnv::new("escapeuts");
    let mut cri = env.start().await;
    let image = env.import_image(&mut cri, images::busybox_probe()).await;
    // hostNetwork: the pod shares the node's network and UTS namespaces.
    let pod = with_namespaces(env.pod("hostnet"), NamespaceMode::Node, NamespaceMode::Pod, NamespaceMode::Pod);
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let c = cri.run_container(&pod_id, &pod, sleeper("app", &image)).await;
    let init = cri.container_pid(&c).await;
    assert_eq!(
        common::host::namespace(init, "uts"),
        common::host::namespace(std::process::id() as i32, "uts"),
        "the node's UTS namespace"
    );
    let before = nix::unistd::gethostname().unwrap();
    // The probe sets the name it already has: refused, and nothing could change anyway.
    expect_errno(&mut cri, &c, &["sethostname-same"], EPERM).await;
    assert_eq!(nix::unistd::gethostname().unwrap(), before);
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

/// One line of `probe exe-attack`.
#[derive(Debug)]
struct ExeAttempt {
    pid: i32,
    cmd: String,
    exe: String,
    read_errno: i32,
    read_only: i32,
    write_errno: i32,
}

fn parse_attempts(out: &str) -> Vec<ExeAttempt> {
    let field = |line: &str, key: &str| -> String {
        let start = line.find(&format!("{key}=")).map(|i| i + key.len() + 1).unwrap_or(line.len());
        let rest = &line[start..];
        if let Some(inner) = rest.strip_prefix('[') {
            inner.split(']').next().unwrap_or("").to_string()
        } else {
            rest.split_whitespace().next().unwrap_or("").to_string()
        }
    };
    out.lines()
        .filter(|l| l.starts_with("pid="))
        .map(|l| ExeAttempt {
            pid: field(l, "pid").parse().unwrap(),
            cmd: field(l, "cmd"),
            exe: field(l, "exe"),
            read_errno: field(l, "read_errno").parse().unwrap(),
            read_only: field(l, "read_only").parse().unwrap(),
            write_errno: field(l, "write_errno").parse().unwrap(),
        })
        .collect()
}

#[tokio::test]
async fn the_runtime_binary_cannot_be_overwritten_through_proc_exe() {
    let mut env = TestEnv::new("escapeexe");
    let mut cri = env.start().await;
    let image = env.import_image(&mut cri, images::busybox_probe()).await;
    let pod = env.pod("shared");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let monitor_binary = common::nidus_bin().with_file_name("nidus-monitor");
    let binary_before = std::fs::metadata(&monitor_binary).unwrap().modified().unwrap();

    // A process that may ptrace others of the pod (CAP_SYS_PTRACE), and a
    // container created but not started: its init is still a fork of the monitor.
    let mut attacker = in_pod_pid_namespace(sleeper("attacker", &image));
    security(&mut attacker).capabilities =
        Some(Capability { add_capabilities: vec!["SYS_PTRACE".into()], ..Default::default() });
    let attacker = cri.run_container(&pod_id, &pod, attacker).await;
    let victim = cri.create_container(&pod_id, &pod, in_pod_pid_namespace(sleeper("victim", &image))).await.unwrap();

    let out = probe(&mut cri, &attacker, &["exe-attack", "nidus"]).await.stdout;
    let attempts = parse_attempts(&out);
    let init = attempts.iter().find(|a| a.cmd.contains("nidus-monitor run")).unwrap_or_else(|| panic!("{out}"));
    let pause = attempts.iter().find(|a| a.cmd.contains("nidus-pause-idle")).unwrap_or_else(|| panic!("{out}"));
    assert_eq!(pause.pid, 1);
    assert_eq!(init.read_errno, 0, "CAP_SYS_PTRACE reaches /proc/{}/exe: {init:?}", init.pid);
    assert_eq!(init.read_only, 1, "the helper runs from a read-only mount: {init:?}");
    assert!([EROFS, ETXTBSY].contains(&init.write_errno), "not writable: {init:?}");
    // The pause's steady state runs from a sealed memfd: nothing on disk, and
    // the file being executed cannot be opened for writing.
    assert_eq!(pause.read_errno, 0, "CAP_SYS_PTRACE reaches /proc/1/exe: {pause:?}");
    assert!(pause.exe.starts_with("/memfd:nidus-pause-idle"), "{pause:?}");
    assert_eq!(pause.write_errno, ETXTBSY, "not writable: {pause:?}");
    for a in [init, pause] {
        assert!(!a.exe.contains("target/"), "the node's path of the binary is not shown: {a:?}");
    }
    // The created init holds nothing of the monitor's, nor any file of a
    // host mount: only pipes (stdin too).
    let fds = expect_ok(&mut cri, &attacker, &["fds-of", &init.pid.to_string()]).await;
    for fd in fds.line().split_whitespace().skip(1) {
        let target = fd.split_once('=').map(|(_, t)| t).unwrap_or("");
        assert!(target.starts_with("pipe:"), "init fd {fd} in {}", fds.line());
    }
    // The pause's root is an empty directory of its own.
    assert_eq!(expect_ok(&mut cri, &attacker, &["ls", "/proc/1/root/"]).await.line(), "ok");

    // Without CAP_SYS_PTRACE none of it is reachable.
    let plain = cri.run_container(&pod_id, &pod, in_pod_pid_namespace(sleeper("plain", &image))).await;
    let out = probe(&mut cri, &plain, &["exe-attack", "nidus"]).await.stdout;
    let attempts = parse_attempts(&out);
    assert!(attempts.len() >= 2, "{out}");
    for a in &attempts {
        assert_eq!((a.read_errno, a.write_errno), (EACCES, EACCES), "{a:?}");
    }

    // The victim starts and runs as usual; the binary on the node is untouched.
    cri.start_container(&victim).await.unwrap();
    assert_eq!(cri.exec_ok(&victim, &["echo", "fine"]).await, "fine\n");
    assert_eq!(std::fs::metadata(&monitor_binary).unwrap().modified().unwrap(), binary_before);

    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn a_privileged_container_gets_what_kubernetes_gives_it() {
    let mut env = TestEnv::new("escapepriv");
    let mut cri = env.start().await;
    let image = env.import_image(&mut cri, images::busybox_probe()).await;
    let pod = env.pod("privileged");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let mut config = sleeper("privileged", &image);
    security(&mut config).privileged = true;
    let c = cri.run_container(&pod_id, &pod, config).await;

    expect_ok(&mut cri, &c, &["mount-tmpfs", "/tmp"]).await;
    expect_ok(&mut cri, &c, &["umount", "/tmp"]).await;
    // Writable /sys and /proc/sys (opened only: nothing is written to the node).
    expect_ok(&mut cri, &c, &["open-write", "/sys/kernel/profiling"]).await;
    expect_ok(&mut cri, &c, &["open-write", "/proc/sys/kernel/domainname"]).await;
    // Nothing masked.
    let timer_list = expect_ok(&mut cri, &c, &["read", "/proc/timer_list"]).await;
    assert_ne!(timer_list.line(), "ok 0 bytes");
    // Every device: made and opened.
    expect_ok(&mut cri, &c, &["mknod-open", "/tmp/kmsg", "c", "1", "11"]).await;
    assert!(cri.exec_ok(&c, &["ls", "/dev"]).await.lines().any(|d| d == "kmsg"), "the node's devices");
    expect_ok(&mut cri, &c, &["raw-socket"]).await;
    // The pod's own UTS namespace: its hostname may be set.
    expect_ok(&mut cri, &c, &["sethostname-same"]).await;
    expect_ok(&mut cri, &c, &["unshare-mount"]).await;
    let status = cri.exec_ok(&c, &["cat", "/proc/self/status"]).await;
    assert!(status.contains("Seccomp:\t0"), "privileged runs unconfined");
    let cap_eff = status.lines().find_map(|l| l.strip_prefix("CapEff:\t")).unwrap();
    assert_ne!(cap_eff, "00000000a80425fb", "more than the default set");

    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}
