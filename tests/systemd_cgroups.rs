//! The systemd cgroup driver, seen from systemd's side.
//!
//! On any host: `[cgroup] driver = "systemd"` on a node whose PID 1 is not
//! systemd stops the daemon at start with a message naming it (on a systemd
//! node the same config serves, and RuntimeConfig says SYSTEMD).
//!
//! On a systemd node (the node lane, `make test-node`, runs these with
//! `--include-ignored` and one test at a time; elsewhere they are ignored,
//! never reported as passed): a pod with a kubelet-style slice parent gets
//! `nidus-<id>.scope` units for its pause and its container in that slice,
//! with `Delegate=yes`; the container's limits are in both the unit's
//! properties and the cgroup files, an update changes both, and a
//! `systemctl daemon-reload` leaves them; the container's scope holds the
//! container alone; OOM kills are reported though systemd removes an empty
//! scope's cgroup at once; a kill -9 and a restart of the daemon find the
//! pods again and stop a scope nobody owns; 200 pods created and removed
//! leave no unit behind.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::client::{container_config, resources};
use common::{host, TestEnv};
use nidus::api::{CgroupDriver, ContainerState, LinuxContainerResources, RuntimeConfigRequest};

/// One test at a time: a daemon stops the `nidus-*.scope` units it does
/// not know at start, which would be another test's.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A unit's property as `systemctl show` prints it.
fn unit_property(unit: &str, property: &str) -> String {
    host::run("systemctl", &["show", "--value", "-p", property, unit]).trim().to_string()
}

/// The loaded units matching `pattern`, inactive ones too.
fn units(pattern: &str) -> Vec<String> {
    host::run("systemctl", &["list-units", "--all", "--plain", "--no-legend", pattern])
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect()
}

/// Waits (up to 10 s) until no unit matches `pattern`; the ones left.
fn wait_no_units(pattern: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = units(pattern);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A kubelet-style pod slice of the test's own (its parents are implicit).
struct TestSlice {
    name: String,
}

impl TestSlice {
    fn new(label: &str) -> Self {
        Self { name: format!("kubepods-besteffort-pod{label}_{}.slice", std::process::id()) }
    }

    /// The slice's directory, as systemd expands the name.
    fn dir(&self) -> PathBuf {
        let stem = self.name.trim_end_matches(".slice");
        let mut dir = PathBuf::from("/sys/fs/cgroup");
        let mut prefix = String::new();
        for part in stem.split('-') {
            if !prefix.is_empty() {
                prefix.push('-');
            }
            prefix.push_str(part);
            dir.push(format!("{prefix}.slice"));
        }
        dir
    }
}

impl Drop for TestSlice {
    /// Plays kubelet: the pod's slice goes once the pod is gone.
    fn drop(&mut self) {
        let _ = Command::new("systemctl").args(["stop", &self.name]).status();
    }
}

/// The unified cgroup of `pid`, as a directory.
fn cgroup_dir_of(pid: i32) -> PathBuf {
    let path = host::cgroup_of(pid, "").unwrap_or_else(|| panic!("no cgroup v2 line for {pid}"));
    PathBuf::from("/sys/fs/cgroup").join(path.trim_start_matches('/'))
}

fn read(dir: &std::path::Path, file: &str) -> String {
    host::read_cgroup_file(dir, file)
}

#[tokio::test]
async fn an_explicit_systemd_driver_needs_systemd_as_pid_1() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut env = TestEnv::new("sdexplicit").with_systemd_driver();
    if std::path::Path::new("/run/systemd/system").is_dir() {
        let mut cri = env.start().await;
        let rc = cri.runtime.runtime_config(RuntimeConfigRequest {}).await.unwrap().into_inner();
        assert_eq!(rc.linux.unwrap().cgroup_driver(), CgroupDriver::Systemd);
        assert_eq!(cri.runtime_info().await["cgroupDriver"], "systemd");
        return;
    }
    let mut daemon = env
        .serve_command()
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run nidus serve");
    let status = host::wait_or_kill(&mut daemon, Duration::from_secs(20));
    assert!(status.is_some_and(|s| !s.success()), "the daemon must stop at start, not serve: {status:?}");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut daemon.stderr.take().expect("stderr"), &mut stderr).expect("read stderr");
    assert!(
        stderr.contains("driver = \"systemd\"") && stderr.contains("PID 1 is not systemd"),
        "the error names the setting and the reason: {stderr}"
    );
}

#[tokio::test]
#[ignore = "needs systemd as PID 1 (node lane)"]
async fn pods_and_containers_get_scopes_in_the_kubelet_slice_with_their_limits_kept_across_reloads() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let slice = TestSlice::new("scopes");
    let mut env = TestEnv::new("sdscopes").with_systemd_driver();
    let mut cri = env.start().await;
    let rc = cri.runtime.runtime_config(RuntimeConfigRequest {}).await.unwrap().into_inner();
    assert_eq!(rc.linux.unwrap().cgroup_driver(), CgroupDriver::Systemd);
    let image = env.import_busybox(&mut cri).await;

    // A cgroupfs path is not a slice: refused, naming the field.
    let mut bad = env.pod("bad");
    bad.linux.as_mut().unwrap().cgroup_parent = "/kubepods/besteffort/pod1".into();
    let refused = cri.run_pod(bad).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("config.linux.cgroup_parent"), "{}", refused.message());

    let mut pod = env.pod("scoped");
    pod.linux.as_mut().unwrap().cgroup_parent = slice.name.clone();
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let pause_unit = format!("nidus-{pod_id}.scope");
    assert_eq!(unit_property(&pause_unit, "ActiveState"), "active");
    assert_eq!(unit_property(&pause_unit, "Slice"), slice.name);
    assert_eq!(unit_property(&pause_unit, "Delegate"), "yes");
    let pause = cri.pause_pid(&pod_id).await;
    assert_eq!(cgroup_dir_of(pause), slice.dir().join(&pause_unit), "the pause is in its scope");
    let status = host::run("systemctl", &["status", "--no-pager", &pause_unit]);
    assert!(status.contains(&slice.name) || status.contains(&pause_unit), "{status}");

    let mut config = container_config("app", &image, &["sleep", "1000"]);
    let r = resources(&mut config);
    r.memory_limit_in_bytes = 64 << 20;
    (r.cpu_quota, r.cpu_period) = (50_000, 100_000);
    let id = cri.run_container(&pod_id, &pod, config).await;
    let unit = format!("nidus-{id}.scope");
    let init = cri.container_pid(&id).await;
    let dir = cgroup_dir_of(init);
    assert_eq!(dir, slice.dir().join(&unit), "the container is in its own scope");
    assert_eq!(unit_property(&unit, "Delegate"), "yes");
    assert_eq!(read(&dir, "cgroup.procs"), init.to_string(), "its scope holds the container alone (the monitor left)");
    assert_eq!(unit_property(&unit, "MemoryMax"), (64u64 << 20).to_string());
    assert_eq!(read(&dir, "memory.max"), (64u64 << 20).to_string());
    assert_eq!(read(&dir, "cpu.max"), "50000 100000");
    assert_eq!(unit_property(&unit, "TasksMax"), "infinity", "no pids limit asked: none set");
    // An exec joins the container's scope (what it leaves running is there).
    cri.exec_ok(&id, &["sh", "-c", "sleep 300 >/dev/null 2>&1 &"]).await;
    assert_eq!(read(&dir, "cgroup.procs").lines().count(), 2, "the init and the exec's sleep");

    // An update goes to the unit and to the files; a reload keeps it.
    let update = LinuxContainerResources {
        memory_limit_in_bytes: 128 << 20,
        cpu_quota: 50_000,
        cpu_period: 100_000,
        ..Default::default()
    };
    cri.update_resources(&id, update).await.unwrap();
    assert_eq!(unit_property(&unit, "MemoryMax"), (128u64 << 20).to_string());
    assert_eq!(read(&dir, "memory.max"), (128u64 << 20).to_string());
    host::run("systemctl", &["daemon-reload"]);
    assert_eq!(read(&dir, "memory.max"), (128u64 << 20).to_string(), "daemon-reload kept the limit");
    assert_eq!(read(&dir, "cpu.max"), "50000 100000", "daemon-reload kept the quota");
    assert_eq!(cri.status_of(&id).await.state(), ContainerState::ContainerRunning);

    cri.stop_container(&id, 0).await.unwrap();
    cri.remove_container(&id).await.unwrap();
    assert_eq!(wait_no_units(&unit), Vec::<String>::new(), "the container's scope is gone");
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    assert_eq!(wait_no_units(&pause_unit), Vec::<String>::new(), "the pod's scope is gone");
}

#[tokio::test]
#[ignore = "needs systemd as PID 1 (node lane)"]
async fn an_oom_kill_is_reported_though_systemd_removes_the_empty_scope() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let slice = TestSlice::new("oom");
    let mut env = TestEnv::new("sdoom").with_systemd_driver();
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let mut pod = env.pod("oom");
    pod.linux.as_mut().unwrap().cgroup_parent = slice.name.clone();
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let mut hog = container_config("hog", &image, &["dd", "if=/dev/zero", "of=/dev/null", "bs=200M", "count=1"]);
    let r = resources(&mut hog);
    r.memory_limit_in_bytes = 64 << 20;
    r.memory_swap_limit_in_bytes = 64 << 20;
    let id = cri.run_container(&pod_id, &pod, hog).await;
    let status = cri.wait_exited(&id, 60).await;
    assert_eq!((status.reason.as_str(), status.exit_code), ("OOMKilled", 137), "{status:?}");
    assert_eq!(wait_no_units(&format!("nidus-{id}.scope")), Vec::<String>::new());
    cri.remove_pod(&pod_id).await.unwrap();
}

#[tokio::test]
#[ignore = "needs systemd as PID 1 (node lane)"]
async fn a_restarted_daemon_finds_its_scopes_and_stops_the_ones_nobody_owns() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let slice = TestSlice::new("restart");
    let mut env = TestEnv::new("sdrestart").with_systemd_driver();
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let mut pod = env.pod("kept");
    pod.linux.as_mut().unwrap().cgroup_parent = slice.name.clone();
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let id = cri.run_container(&pod_id, &pod, container_config("app", &image, &["sleep", "1000"])).await;
    let init = cri.container_pid(&id).await;

    // A scope named like nidus's that no pod or container owns.
    let orphan_id = "f".repeat(64);
    let orphan_unit = format!("nidus-{orphan_id}.scope");
    let mut orphan = Command::new("systemd-run")
        .args(["--scope", "--unit", &orphan_unit, "--slice", &slice.name, "sleep", "1000"])
        .spawn()
        .expect("systemd-run");
    let deadline = Instant::now() + Duration::from_secs(10);
    while unit_property(&orphan_unit, "ActiveState") != "active" {
        assert!(Instant::now() < deadline, "the orphan scope did not start");
        std::thread::sleep(Duration::from_millis(50));
    }

    env.kill_daemon();
    assert!(host::process_running(init), "the container outlives the daemon");
    let mut cri = env.start().await;
    assert_eq!(cri.status_of(&id).await.state(), ContainerState::ContainerRunning);
    assert_eq!(unit_property(&format!("nidus-{id}.scope"), "ActiveState"), "active", "its scope is found again");
    assert_eq!(wait_no_units(&orphan_unit), Vec::<String>::new(), "the scope nobody owns is stopped");
    let _ = host::wait_or_kill(&mut orphan, Duration::from_secs(10));

    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    assert_eq!(wait_no_units(&format!("nidus-{pod_id}.scope")), Vec::<String>::new());
}

#[tokio::test]
#[ignore = "needs systemd as PID 1 (node lane)"]
async fn two_hundred_pods_created_and_removed_leave_no_unit_behind() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut env = TestEnv::new("sd200").with_systemd_driver();
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let before = units("nidus-*");
    let began = Instant::now();
    for n in 0..200 {
        // Half in a kubelet-style slice of their own, half in nidus's.
        let slice = (n % 2 == 0).then(|| TestSlice::new(&format!("many{n}")));
        let mut pod = env.pod(&format!("p{n}"));
        if let Some(slice) = &slice {
            pod.linux.as_mut().unwrap().cgroup_parent = slice.name.clone();
        }
        let pod_id = cri.run_pod(pod.clone()).await.unwrap();
        if n % 4 < 2 {
            cri.run_container(&pod_id, &pod, container_config("c", &image, &["sleep", "1000"])).await;
        }
        cri.stop_pod(&pod_id).await.unwrap();
        cri.remove_pod(&pod_id).await.unwrap();
    }
    eprintln!("200 pods (100 with a container) made and removed in {:?}", began.elapsed());
    assert_eq!(wait_no_units("nidus-*"), before, "no nidus unit is left behind");
}
