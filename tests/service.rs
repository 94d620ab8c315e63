//! nidus as a systemd service. On any host: a daemon started with
//! `NOTIFY_SOCKET` (a datagram socket of the test's own, as systemd's) tells
//! STATUS= lines while it starts, READY=1 once its CRI socket answers,
//! WATCHDOG=1 while it serves when `WATCHDOG_USEC` is set for it (and not
//! when it is set for another process), and STOPPING=1 at SIGTERM.
//!
//! On a systemd node with the Debian package installed (the node lane, `make
//! test-node`, runs these with `--include-ignored`; elsewhere they are
//! ignored, never reported as passed): the unit's settings, `systemctl
//! enable --now`, the CRI on the default socket, a pod that outlives
//! `systemctl restart`, a kill -9 of the daemon (Restart= brings it back) and
//! `systemctl stop`, an upgrade by reinstalling, and `apt purge`.

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::client::{container_config, pod_config, with_namespaces};
use common::{host, images, Cri, TestEnv};
use nidus::api::{ContainerState, NamespaceMode, PodSandboxState};

/// The test's end of `NOTIFY_SOCKET`.
struct NotifySocket {
    socket: UnixDatagram,
    /// Every datagram received so far, in order.
    received: Vec<String>,
}

impl NotifySocket {
    fn bind(path: &Path) -> Self {
        let socket = UnixDatagram::bind(path).expect("binding the notify socket");
        socket.set_read_timeout(Some(Duration::from_millis(100))).expect("read timeout");
        Self { socket, received: Vec::new() }
    }

    /// Receives datagrams for up to `limit`, until `done` holds for what was
    /// received; whether it did.
    fn receive_until(&mut self, limit: Duration, done: impl Fn(&[String]) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        let mut buf = vec![0u8; 4096];
        loop {
            if done(&self.received) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            if let Ok(n) = self.socket.recv(&mut buf) {
                self.received.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
    }

    /// How many datagrams carry the line `line`.
    fn count(&self, line: &str) -> usize {
        count(&self.received, line)
    }
}

fn count(received: &[String], line: &str) -> usize {
    received.iter().filter(|d| d.lines().any(|l| l == line)).count()
}

/// A daemon environment whose daemon gets `NOTIFY_SOCKET` (and `env`).
fn notified_env(label: &str, env: &[(&str, &str)]) -> (TestEnv, NotifySocket) {
    let mut test_env = TestEnv::new(label);
    let path = test_env.base.join("notify.sock");
    let socket = NotifySocket::bind(&path);
    test_env = test_env.with_env("NOTIFY_SOCKET", &path.display().to_string());
    for (name, value) in env {
        test_env = test_env.with_env(name, value);
    }
    (test_env, socket)
}

#[tokio::test]
async fn the_service_manager_hears_ready_once_the_socket_answers_and_stopping_at_sigterm() {
    let (mut env, mut notify) = notified_env("notify", &[]);
    let mut cri = env.start().await;
    assert!(
        notify.receive_until(Duration::from_secs(10), |r| count(r, "READY=1") > 0),
        "no READY=1 within 10 s of the socket answering; received {:?}; log:\n{}",
        notify.received,
        env.daemon_log()
    );
    let ready_at = notify.received.iter().position(|d| d.lines().any(|l| l == "READY=1")).unwrap_or(0);
    let ready = notify.received[ready_at].clone();
    assert!(
        ready.contains("STATUS=serving CRI runtime.v1") && ready.contains(&env.socket.display().to_string()),
        "READY=1 comes with a STATUS= naming the APIs and the socket: {ready:?}"
    );
    let before: Vec<&String> = notify.received[..ready_at].iter().collect();
    assert!(
        before.iter().any(|d| d.starts_with("STATUS=starting: reloading pods and containers")),
        "STATUS= lines tell the start's steps before READY=1: {before:?}"
    );
    assert!(before.iter().all(|d| !d.contains("READY=1")), "READY=1 is sent once");
    cri.version().await.expect("the socket answers once READY=1 is sent");

    assert_eq!(env.terminate_daemon(), Some(0), "a clean exit at SIGTERM");
    assert!(
        notify.receive_until(Duration::from_secs(5), |r| count(r, "STOPPING=1") > 0),
        "no STOPPING=1 at SIGTERM; received {:?}",
        notify.received
    );
    assert_eq!(notify.count("READY=1"), 1, "READY=1 once: {:?}", notify.received);
    assert_eq!(notify.count("WATCHDOG=1"), 0, "no watchdog pings without WATCHDOG_USEC: {:?}", notify.received);
}

#[tokio::test]
async fn the_watchdog_is_pinged_at_half_its_timeout_while_the_socket_answers() {
    // 0.6 s: a ping every 0.3 s.
    let (mut env, mut notify) = notified_env("watchdog", &[("WATCHDOG_USEC", "600000")]);
    let _cri = env.start().await;
    let started = Instant::now();
    assert!(
        notify.receive_until(Duration::from_secs(10), |r| count(r, "WATCHDOG=1") >= 4),
        "fewer than 4 watchdog pings within 10 s; received {:?}; log:\n{}",
        notify.received,
        env.daemon_log()
    );
    assert!(started.elapsed() >= Duration::from_millis(600), "pings every half timeout, not faster");
    let first_ping = notify.received.iter().position(|d| d.lines().any(|l| l == "WATCHDOG=1")).unwrap_or(0);
    let ready_at = notify.received.iter().position(|d| d.lines().any(|l| l == "READY=1"));
    assert!(ready_at.is_some_and(|r| r < first_ping), "READY=1 before the first ping: {:?}", notify.received);
    assert_eq!(env.terminate_daemon(), Some(0));
}

#[tokio::test]
async fn a_watchdog_meant_for_another_process_is_not_pinged() {
    // WATCHDOG_PID names PID 1: the timeout is not this daemon's.
    let (mut env, mut notify) = notified_env("watchdog-pid", &[("WATCHDOG_USEC", "200000"), ("WATCHDOG_PID", "1")]);
    let _cri = env.start().await;
    assert!(
        notify.receive_until(Duration::from_secs(10), |r| count(r, "READY=1") > 0),
        "no READY=1; received {:?}",
        notify.received
    );
    notify.receive_until(Duration::from_millis(1500), |_| false);
    assert_eq!(notify.count("WATCHDOG=1"), 0, "pinged another process's watchdog: {:?}", notify.received);
    assert_eq!(env.terminate_daemon(), Some(0));
}

// --- on a systemd node with the package installed (the node lane) ---------------

const UNIT: &str = "nidus.service";
const SOCKET: &str = "/run/nidus/nidus.sock";

/// Runs a command; its exit success and stdout+stderr.
fn sh(program: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(program)
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Runs a command that must succeed; its output.
fn must(program: &str, args: &[&str]) -> String {
    let (ok, out) = sh(program, args);
    assert!(ok, "{program} {args:?} failed:\n{out}\n{}", journal());
    out
}

/// The unit's last journal lines, for failure messages.
fn journal() -> String {
    let (_, out) = sh("journalctl", &["-u", UNIT, "-n", "40", "--no-pager", "-o", "short-monotonic"]);
    format!("journal of {UNIT}:\n{out}")
}

/// `systemctl show -p NAME` of the unit.
fn property(name: &str) -> String {
    must("systemctl", &["show", UNIT, "-p", name, "--value"]).trim().to_string()
}

fn main_pid() -> i32 {
    property("MainPID").parse().unwrap_or(0)
}

/// Waits until the unit is active with a main process other than `not`
/// and its socket answers; the client and the main pid.
async fn wait_serving(not: i32, limit: Duration) -> (Cri, i32) {
    let deadline = Instant::now() + limit;
    loop {
        let pid = main_pid();
        if pid != 0 && pid != not && property("ActiveState") == "active" {
            if let Ok(mut cri) = Cri::connect(Path::new(SOCKET)).await {
                if cri.version().await.is_ok() {
                    return (cri, pid);
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "{UNIT} not serving within {limit:?} (MainPID {pid}, {})\n{}",
            property("ActiveState"),
            journal()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The pod and its container are as they were: READY and RUNNING, the
/// same processes.
async fn assert_found(cri: &mut Cri, pod: &str, container: &str, pause: i32, init: i32, when: &str) {
    assert_eq!(cri.pod_state(pod).await, PodSandboxState::SandboxReady, "the pod is READY {when}");
    assert_eq!(cri.status_of(container).await.state(), ContainerState::ContainerRunning, "the container runs {when}");
    assert_eq!(cri.pause_pid(pod).await, pause, "the same pause {when}");
    assert_eq!(cri.container_pid(container).await, init, "the same container process {when}");
    assert!(host::process_running(pause) && host::process_running(init), "the pod's processes run {when}");
}

/// The .deb the lane installed (`NIDUS_TEST_DEB`, set by scripts/node-runner).
fn the_deb() -> String {
    let deb = std::env::var("NIDUS_TEST_DEB").unwrap_or_default();
    assert!(
        !deb.is_empty() && Path::new(&deb).is_file(),
        "NIDUS_TEST_DEB names no .deb ({deb:?}): the node lane sets it to the nidus package it installed \
         (make test-node)"
    );
    deb
}

#[tokio::test]
#[ignore = "needs a systemd node with the nidus package installed: runs in the node lane (make test-node)"]
async fn the_package_runs_nidus_as_a_systemd_service_that_pods_outlive() {
    host::require_root();
    assert!(Path::new("/run/systemd/system").is_dir(), "this host was not booted with systemd");
    let (_, status) = sh("dpkg-query", &["-W", "-f=${Status}", "nidus"]);
    assert_eq!(status, "install ok installed", "the nidus package is not installed");
    let deb = the_deb();

    // Installed, enabled, started; the unit's settings.
    must("systemctl", &["enable", "--now", UNIT]);
    assert_eq!(must("systemctl", &["is-enabled", UNIT]).trim(), "enabled");
    let (mut cri, pid) = wait_serving(0, Duration::from_secs(120)).await;
    assert_eq!(must("systemctl", &["is-active", UNIT]).trim(), "active");
    for (name, want) in [
        ("Type", "notify"),
        ("NotifyAccess", "main"),
        ("Delegate", "yes"),
        ("KillMode", "process"),
        ("OOMScoreAdjust", "-999"),
        ("LimitNOFILE", "1048576"),
        ("TasksMax", "infinity"),
        ("Restart", "always"),
        ("FragmentPath", "/lib/systemd/system/nidus.service"),
        ("UnitFileState", "enabled"),
    ] {
        assert_eq!(property(name), want, "{UNIT}'s {name}");
    }
    let adj = std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).unwrap_or_default();
    assert_eq!(adj.trim(), "-999", "the daemon's oom_score_adj");
    assert!(property("StatusText").starts_with("serving CRI"), "STATUS=: {}", property("StatusText"));
    let version = cri.version().await.expect("Version");
    assert_eq!(version.runtime_name, "nidus");
    let status = cri.runtime.status(nidus::api::StatusRequest::default()).await.expect("Status").into_inner();
    let conditions = status.status.map(|s| s.conditions).unwrap_or_default();
    assert!(
        conditions.iter().any(|c| c.r#type == "RuntimeReady" && c.status),
        "Status says RuntimeReady: {conditions:?}"
    );
    assert!(Path::new("/etc/nidus/config.toml").is_file(), "the default config is installed");

    // A pod (host network: the node has no network for pods) and a container.
    let image = images::busybox();
    must("nidus", &["image", "import", &image.layout.display().to_string()]);
    let pod_config = with_namespaces(pod_config("svc"), NamespaceMode::Node, NamespaceMode::Pod, NamespaceMode::Pod);
    let pod = cri.run_pod(pod_config.clone()).await.expect("RunPodSandbox");
    let container =
        cri.run_container(&pod, &pod_config, container_config("sleeper", &image.reference, &["sleep", "3600"])).await;
    let pause = cri.pause_pid(&pod).await;
    let init = cri.container_pid(&container).await;
    let unit_cgroup = property("ControlGroup");
    for (what, process) in [("pause", pause), ("container", init)] {
        let cgroup = std::fs::read_to_string(format!("/proc/{process}/cgroup")).unwrap_or_default();
        assert!(!cgroup.contains(&unit_cgroup), "the {what} lives outside {unit_cgroup}: {cgroup}");
    }

    // systemctl restart: a new daemon finds the pod.
    must("systemctl", &["restart", UNIT]);
    let (mut cri, pid) = wait_serving(pid, Duration::from_secs(120)).await;
    assert_found(&mut cri, &pod, &container, pause, init, "after systemctl restart").await;

    // kill -9 of the daemon: Restart= brings it back, and it finds the pod.
    let restarts: u32 = property("NRestarts").parse().unwrap_or(0);
    host::signal(pid, libc::SIGKILL);
    let (mut cri, pid) = wait_serving(pid, Duration::from_secs(120)).await;
    assert!(property("NRestarts").parse::<u32>().unwrap_or(0) > restarts, "systemd restarted the daemon");
    assert_found(&mut cri, &pod, &container, pause, init, "after kill -9 of the daemon").await;

    // systemctl stop: a clean exit; the pod keeps running.
    must("systemctl", &["stop", UNIT]);
    assert_eq!(property("ActiveState"), "inactive", "{}", journal());
    assert_eq!(property("Result"), "success", "a clean stop\n{}", journal());
    assert_eq!(property("ExecMainStatus"), "0", "exit status 0\n{}", journal());
    assert!(!host::process_running(pid), "the daemon ended");
    assert!(!Path::new(SOCKET).exists(), "the daemon removed its socket");
    assert!(host::process_running(pause) && host::process_running(init), "the pod outlives systemctl stop");
    // Nothing of nidus lingers in the unit's cgroup (spare monitors end with the daemon).
    let procs = Path::new("/sys/fs/cgroup").join(unit_cgroup.trim_start_matches('/')).join("cgroup.procs");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let left = std::fs::read_to_string(&procs).unwrap_or_default();
        if left.trim().is_empty() {
            break;
        }
        let named: Vec<String> =
            left.lines().map(|p| format!("{p} {}", host::cmdline(p.parse().unwrap_or(0)))).collect();
        assert!(Instant::now() < deadline, "left in {unit_cgroup} after systemctl stop: {named:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // An upgrade by reinstalling the package: the unit runs again, the pod is found.
    must("apt-get", &["install", "-y", "--reinstall", &deb]);
    let (mut cri, _) = wait_serving(pid, Duration::from_secs(120)).await;
    assert_found(&mut cri, &pod, &container, pause, init, "after reinstalling the package").await;

    // The pod goes; apt purge removes the package's files, its unit and /etc/nidus.
    cri.stop_container(&container, 10).await.expect("StopContainer");
    cri.remove_container(&container).await.expect("RemoveContainer");
    cri.stop_pod(&pod).await.expect("StopPodSandbox");
    cri.remove_pod(&pod).await.expect("RemovePodSandbox");
    assert!(host::wait_gone(pause) && host::wait_gone(init), "the pod's processes end with it");
    drop(cri);
    let pid = main_pid();
    must("apt-get", &["purge", "-y", "nidus"]);
    let (_, status) = sh("dpkg-query", &["-W", "-f=${Status}", "nidus"]);
    assert!(!status.contains("installed"), "purged: {status}");
    assert!(host::wait_gone(pid), "the daemon stopped when the package was removed");
    for gone in ["/lib/systemd/system/nidus.service", "/usr/bin/nidus", "/usr/lib/nidus", "/etc/nidus"] {
        assert!(!Path::new(gone).exists(), "{gone} is left after apt purge");
    }
    assert_eq!(property("LoadState"), "not-found", "systemd no longer knows {UNIT}");
    // Images and records stay (docs/design.md): the operator removes them.
    assert!(Path::new("/var/lib/nidus/images").is_dir(), "/var/lib/nidus is kept by purge");

    // `apt install ./nidus_*.deb` on the purged node: enabled and serving again.
    must("apt-get", &["install", "-y", &deb]);
    assert_eq!(must("systemctl", &["is-enabled", UNIT]).trim(), "enabled");
    let (mut cri, _) = wait_serving(0, Duration::from_secs(120)).await;
    assert!(cri.image(&image.reference).await.is_some(), "the image kept in /var/lib/nidus is listed again");
    cri.remove_image(&image.reference).await.expect("RemoveImage");
    drop(cri);
    must("apt-get", &["purge", "-y", "nidus"]);
    let _ = std::fs::remove_dir_all("/var/lib/nidus");
    let _ = std::fs::remove_dir_all("/run/nidus");
    let _ = std::fs::remove_dir_all(&pod_config.log_directory);
}
