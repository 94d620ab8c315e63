//! Resources through the socket, on cgroup v1 (this host) and v2 (the VM
//! lane): limits in the container's cgroup files, the OOM killer's victims
//! reported as OOMKilled (also while the daemon was down), pids and cpu limits
//! enforced, live updates of containers and pods, stats and metrics that
//! follow real use, and cgroups that cannot be removed at once.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::client::{container_config, resources};
use common::{host, TestEnv, Up};
use nidus::api::*;

fn mib(n: i64) -> i64 {
    n << 20
}

/// A daemon whose config gives every container a pids limit.
fn env_with_pids_limit(label: &str, limit: u32) -> TestEnv {
    let env = TestEnv::new(label);
    let config = env.base.join("nidus.toml");
    fs::write(&config, format!("[container]\npids_limit = {limit}\n")).unwrap();
    env.with_args(&["--config", config.to_str().unwrap()])
}

/// The hugepage sizes of this node, spelled as kubelet does (2MB, 1GB).
fn node_hugepage_sizes() -> Vec<String> {
    let mut sizes: Vec<String> = fs::read_dir("/sys/kernel/mm/hugepages")
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let kib: u64 =
                        e.file_name().to_str()?.strip_prefix("hugepages-")?.strip_suffix("kB")?.parse().ok()?;
                    Some(if kib >= 1 << 20 { format!("{}GB", kib >> 20) } else { format!("{}MB", kib >> 10) })
                })
                .collect()
        })
        .unwrap_or_default();
    sizes.sort();
    sizes
}

fn assert_invalid(status: tonic::Status, field: &str) {
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains(field), "message {:?} does not name {field}", status.message());
}

#[tokio::test]
async fn limits_are_in_the_container_cgroup_files() {
    let v2 = host::unified();
    let Up { env, mut cri, image, pod, pod_id } = env_with_pids_limit("reslimits", 32).up("limits").await;

    let mut config = container_config("limited", &image, &["sleep", "1000"]);
    let asked = LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 20_000,
        cpu_shares: 512,
        memory_limit_in_bytes: mib(64),
        memory_swap_limit_in_bytes: mib(64),
        cpuset_cpus: "0".into(),
        cpuset_mems: "0".into(),
        oom_score_adj: 100,
        // As kubelet sends them: every size the node has, 0 unless asked for.
        hugepage_limits: node_hugepage_sizes()
            .into_iter()
            .map(|page_size| HugepageLimit { page_size, limit: 0 })
            .collect(),
        unified: if v2 { [("memory.high".to_string(), mib(60).to_string())].into() } else { Default::default() },
    };
    *resources(&mut config) = asked.clone();
    let id = cri.run_container(&pod_id, &pod, config).await;
    let init = cri.container_pid(&id).await;
    let info = cri.container_info(&id).await;

    if v2 {
        let dir = host::cgroup_dir(init, "");
        assert_eq!(host::read_cgroup_file(&dir, "cpu.max"), "20000 100000");
        // runc ≥ 1.3.2's shares → weight mapping (libcgroups): 512 → 59, 1024 → 100.
        assert_eq!(host::read_cgroup_file(&dir, "cpu.weight"), "59");
        assert_eq!(host::read_cgroup_file(&dir, "memory.max"), mib(64).to_string());
        assert_eq!(host::read_cgroup_file(&dir, "memory.swap.max"), "0", "swap == memory: no swap");
        assert_eq!(host::read_cgroup_file(&dir, "memory.high"), mib(60).to_string(), "unified key");
        assert_eq!(host::read_cgroup_file(&dir, "cpuset.cpus"), "0");
        assert_eq!(host::read_cgroup_file(&dir, "pids.max"), "32");
        if host::read_cgroup_file(&dir, "cgroup.controllers").contains("hugetlb") {
            for size in node_hugepage_sizes() {
                assert_eq!(host::read_cgroup_file(&dir, &format!("hugetlb.{size}.max")), "0");
            }
        }
    } else {
        let cpu = host::cgroup_dir(init, "cpu");
        assert_eq!(host::read_cgroup_file(&cpu, "cpu.cfs_quota_us"), "20000");
        assert_eq!(host::read_cgroup_file(&cpu, "cpu.cfs_period_us"), "100000");
        assert_eq!(host::read_cgroup_file(&cpu, "cpu.shares"), "512");
        let memory = host::cgroup_dir(init, "memory");
        assert_eq!(host::read_cgroup_file(&memory, "memory.limit_in_bytes"), mib(64).to_string());
        if memory.join("memory.memsw.limit_in_bytes").exists() {
            assert_eq!(host::read_cgroup_file(&memory, "memory.memsw.limit_in_bytes"), mib(64).to_string());
        }
        assert_eq!(host::read_cgroup_file(&host::cgroup_dir(init, "cpuset"), "cpuset.cpus"), "0");
        assert_eq!(host::read_cgroup_file(&host::cgroup_dir(init, "pids"), "pids.max"), "32");
    }
    // Its init was forked ahead, outside any container's cgroup, and wrote
    // itself into its cgroup before entering its cgroup namespace.
    assert_eq!(info["cgroupJoin"], "procs", "the prepared init joins by cgroup.procs: {info}");
    // A container whose init is forked when it is built (with a terminal,
    // it does not fit the one forked ahead) is born in its cgroup on v2.
    let mut tty = container_config("tty", &image, &["sleep", "1000"]);
    tty.tty = true;
    let tty = cri.run_container(&pod_id, &pod, tty).await;
    let join = &cri.container_info(&tty).await["cgroupJoin"];
    assert_eq!(join, if v2 { "clone3" } else { "procs" }, "v1 has no clone3 into a cgroup");
    cri.stop_container(&tty, 0).await.unwrap();
    cri.remove_container(&tty).await.unwrap();
    assert_eq!(fs::read_to_string(format!("/proc/{init}/oom_score_adj")).unwrap().trim(), "100");
    let in_force = cri.status_of(&id).await.resources.expect("resources").linux.expect("linux");
    assert_eq!(in_force, asked, "ContainerStatus.resources reports what is in force");
    let spec = &info["runtimeSpec"]["linux"]["resources"];
    assert_eq!(spec["memory"]["limit"], mib(64));
    assert_eq!(spec["pids"]["limit"], 32);

    // What the node cannot enforce, or CRI forbids, is refused naming the field.
    let refused = |change: fn(&mut LinuxContainerResources)| {
        let mut c = container_config("refused", &image, &["sleep", "1"]);
        change(resources(&mut c));
        c
    };
    let err = cri.create_container(&pod_id, &pod, refused(|r| r.cpu_quota = 5)).await.unwrap_err();
    assert_invalid(err, "config.linux.resources.cpu_quota");
    let err = cri
        .create_container(
            &pod_id,
            &pod,
            refused(|r| r.hugepage_limits = vec![HugepageLimit { page_size: "3MB".into(), limit: 1 }]),
        )
        .await
        .unwrap_err();
    assert_invalid(err, "config.linux.resources.hugepage_limits");
    let err = cri
        .create_container(&pod_id, &pod, refused(|r| r.unified = [("cgroup.procs".into(), "1".into())].into()))
        .await
        .unwrap_err();
    assert_invalid(err, "config.linux.resources.unified");
    let err = cri
        .create_container(&pod_id, &pod, refused(|r| r.unified = [("memory.high".into(), "max".into())].into()))
        .await;
    if v2 {
        let refused_id = err.expect("raw v2 keys work on cgroup v2");
        cri.remove_container(&refused_id).await.unwrap();
    } else {
        let err = err.unwrap_err();
        assert_invalid(err.clone(), "config.linux.resources.unified");
        assert!(err.message().contains("cgroup v1"), "{err:?}");
    }
    assert_eq!(cri.list_containers(None).await.len(), 1, "refused creates leave nothing");

    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn every_container_has_a_cgroup_named_for_it_and_a_pod_leaves_no_cgroup_behind() {
    let mut env = TestEnv::new("rescgnames");
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    let sleeper = |name: &str| container_config(name, &image, &["sleep", "1000"]);

    // The pod's first container (on v1 its cgroup was made ahead, while the
    // pod's caller went on) and a second one: each in a cgroup of its own,
    // named for it, beside the sandbox's in the pod's cgroup, in every hierarchy.
    let pod = env.pod("names");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let first = cri.run_container(&pod_id, &pod, sleeper("first")).await;
    let second = cri.run_container(&pod_id, &pod, sleeper("second")).await;
    let inits = [cri.container_pid(&first).await, cri.container_pid(&second).await];
    let pod_cgroup = cri.pod_info(&pod_id).await["cgroups"]["pod"].as_str().unwrap().to_string();
    let mut expected = vec![pod_id.clone(), first.clone(), second.clone()];
    expected.sort();
    for (pod_dir, children) in env.pod_child_cgroups(&pod_cgroup) {
        assert_eq!(children, expected, "the pod's cgroup {} holds these only", pod_dir.display());
        for (id, init) in [&first, &second].into_iter().zip(inits) {
            let procs = host::read_cgroup_file(&pod_dir.join(id), "cgroup.procs");
            assert_eq!(procs, init.to_string(), "{}: its container's init alone", pod_dir.join(id).display());
        }
    }

    // A first container with a device of its own gets its own rules.
    let devices_pod = env.pod("devices");
    let devices_pod_id = cri.run_pod(devices_pod.clone()).await.unwrap();
    let mut config = sleeper("device");
    config.devices = vec![Device {
        container_path: "/dev/extra/null".into(),
        host_path: "/dev/null".into(),
        permissions: "rw".into(),
    }];
    let with_device = cri.run_container(&devices_pod_id, &devices_pod, config).await;
    let out = cri.exec_ok(&with_device, &["sh", "-c", "echo x > /dev/extra/null && echo written"]).await;
    assert_eq!(out, "written\n");

    // A pod that never ran a container, stopped and removed at once.
    let empty_pod_id = cri.run_pod(env.pod("empty")).await.unwrap();
    for id in [&empty_pod_id, &devices_pod_id, &pod_id] {
        cri.stop_pod(id).await.unwrap();
        cri.remove_pod(id).await.unwrap();
    }
    env.assert_no_leftovers();
}

/// `dd` reading 200 MB into one buffer: the allocation the OOM killer stops.
const HOG: &[&str] = &["dd", "if=/dev/zero", "of=/dev/null", "bs=200M", "count=1"];

fn limited(config: &mut ContainerConfig, memory: i64) {
    let r = resources(config);
    r.memory_limit_in_bytes = memory;
    r.memory_swap_limit_in_bytes = memory;
}

#[tokio::test]
async fn a_container_over_its_memory_limit_is_oom_killed_even_while_the_daemon_is_down() {
    let Up { mut env, mut cri, image, pod, pod_id } = TestEnv::new("resoom").up("oom").await;

    let mut hog = container_config("hog", &image, HOG);
    limited(&mut hog, mib(64));
    let id = cri.run_container(&pod_id, &pod, hog).await;
    let status = cri.wait_exited(&id, 60).await;
    assert_eq!((status.reason.as_str(), status.exit_code), ("OOMKilled", 137), "{status:?}");

    // Within its limit, the same allocation completes.
    let mut roomy = container_config("roomy", &image, HOG);
    limited(&mut roomy, mib(400));
    let id = cri.run_container(&pod_id, &pod, roomy).await;
    let status = cri.wait_exited(&id, 60).await;
    assert_eq!((status.reason.as_str(), status.exit_code), ("Completed", 0), "{status:?}");

    // The monitor records it with nobody listening.
    let mut late = container_config("late", &image, &["sh", "-c", &format!("sleep 2; exec {}", HOG.join(" "))]);
    limited(&mut late, mib(64));
    let id = cri.run_container(&pod_id, &pod, late).await;
    let init = cri.container_pid(&id).await;
    env.kill_daemon();
    let deadline = Instant::now() + Duration::from_secs(60);
    while host::process_running(init) {
        assert!(Instant::now() < deadline, "the hog is still alive");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut cri = env.start().await;
    let status = cri.status_of(&id).await;
    assert_eq!((status.reason.as_str(), status.exit_code), ("OOMKilled", 137), "{status:?}");

    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn a_pids_limit_stops_forks_and_a_cpu_quota_throttles() {
    let Up { env, mut cri, image, pod, pod_id } = env_with_pids_limit("respids", 6).up("pids").await;

    let id = cri.run_container(&pod_id, &pod, container_config("forker", &image, &["sleep", "1000"])).await;
    let init = cri.container_pid(&id).await;
    let out = cri
        .exec(&id, &["sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 30 >/dev/null 2>&1 & done; echo looped"], 20)
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("fork"), "forks beyond the limit fail: {stderr:?}");
    let pids = host::cgroup_dir(init, "pids");
    let current: u64 = host::read_cgroup_file(&pids, "pids.current").parse().unwrap();
    assert!(current <= 6, "pids.current {current} is within the limit");
    let events = pids.join("pids.events");
    if events.exists() {
        assert!(host::cgroup_keyed(&pids, "pids.events")["max"] > 0, "the limit was hit");
    }

    // 10% of a cpu for a busy loop: the kernel throttles it.
    let mut spin = container_config("spin", &image, &["sh", "-c", "while :; do :; done"]);
    let r = resources(&mut spin);
    (r.cpu_quota, r.cpu_period) = (10_000, 100_000);
    let id = cri.run_container(&pod_id, &pod, spin).await;
    let init = cri.container_pid(&id).await;
    let cpu = host::cgroup_dir(init, "cpu");
    cri.container_stats(&id).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let throttled = host::cgroup_keyed(&cpu, "cpu.stat")["nr_throttled"];
    assert!(throttled > 0, "nr_throttled grows for a busy container under its quota");
    let cores = cri.container_stats(&id).await.unwrap().cpu.unwrap().usage_nano_cores.expect("a rate").value;
    assert!(cores < 250_000_000, "a 0.1 cpu quota keeps it near 0.1 cores, not {cores}");

    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn update_container_resources_changes_a_running_container() {
    let v2 = host::unified();
    let Up { mut env, mut cri, image, pod, pod_id } = TestEnv::new("resupdate").up("update").await;
    let mut config = container_config("app", &image, &["sleep", "1000"]);
    *resources(&mut config) = LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 20_000,
        cpu_shares: 512,
        memory_limit_in_bytes: mib(64),
        memory_swap_limit_in_bytes: mib(64),
        ..Default::default()
    };
    let id = cri.run_container(&pod_id, &pod, config).await;
    let init = cri.container_pid(&id).await;

    let resized = LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 50_000,
        cpu_shares: 1024,
        memory_limit_in_bytes: mib(128),
        memory_swap_limit_in_bytes: mib(128),
        ..Default::default()
    };
    cri.update_resources(&id, resized.clone()).await.unwrap();
    if v2 {
        let dir = host::cgroup_dir(init, "");
        assert_eq!(host::read_cgroup_file(&dir, "memory.max"), mib(128).to_string());
        assert_eq!(host::read_cgroup_file(&dir, "cpu.max"), "50000 100000");
        assert_eq!(host::read_cgroup_file(&dir, "cpu.weight"), "100");
    } else {
        let memory = host::cgroup_dir(init, "memory");
        assert_eq!(host::read_cgroup_file(&memory, "memory.limit_in_bytes"), mib(128).to_string());
        let cpu = host::cgroup_dir(init, "cpu");
        assert_eq!(host::read_cgroup_file(&cpu, "cpu.cfs_quota_us"), "50000");
        assert_eq!(host::read_cgroup_file(&cpu, "cpu.shares"), "1024");
    }
    let status = cri.status_of(&id).await;
    assert_eq!(status.state(), ContainerState::ContainerRunning, "updated in place");
    assert_eq!(status.resources.unwrap().linux.unwrap(), resized);
    assert_eq!(cri.container_info(&id).await["runtimeSpec"]["linux"]["resources"]["memory"]["limit"], mib(128));

    // Shrinking back works too.
    let mut smaller = resized.clone();
    (smaller.memory_limit_in_bytes, smaller.memory_swap_limit_in_bytes, smaller.cpu_quota) = (mib(48), mib(48), 30_000);
    cri.update_resources(&id, smaller.clone()).await.unwrap();
    let memory = host::cgroup_dir(init, "memory");
    let file = if v2 { "memory.max" } else { "memory.limit_in_bytes" };
    assert_eq!(host::read_cgroup_file(&memory, file), mib(48).to_string());

    // Bad requests name their field and change nothing.
    let err = cri.update_resources(&id, LinuxContainerResources { cpu_period: 5, ..smaller.clone() }).await;
    assert_invalid(err.unwrap_err(), "linux.cpu_period");
    let with_unified =
        LinuxContainerResources { unified: [("memory.high".into(), "max".into())].into(), ..smaller.clone() };
    let result = cri.update_resources(&id, with_unified).await;
    if v2 {
        result.expect("raw v2 keys update on cgroup v2");
    } else {
        assert_invalid(result.unwrap_err(), "linux.unified");
    }
    let missing = UpdateContainerResourcesRequest { container_id: id.clone(), ..Default::default() };
    assert_invalid(cri.runtime.update_container_resources(missing).await.unwrap_err(), "linux");
    let unknown = cri.update_resources("0123456789ab", smaller.clone()).await.unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
    assert_eq!(host::read_cgroup_file(&memory, file), mib(48).to_string());

    // What is in force survives a daemon restart.
    env.kill_daemon();
    let mut cri = env.start().await;
    assert_eq!(cri.status_of(&id).await.resources.unwrap().linux.unwrap().memory_limit_in_bytes, mib(48));

    cri.stop_container(&id, 0).await.unwrap();
    let exited = cri.update_resources(&id, smaller).await.unwrap_err();
    assert_eq!(exited.code(), tonic::Code::FailedPrecondition, "{exited:?}");
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

/// Cumulative cpu time of one process, in nanoseconds (utime + stime ticks).
fn process_cpu_ns(pid: i32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<u64> =
        stat.rsplit_once(')').unwrap().1.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect();
    // utime and stime are fields 14 and 15; fields[0] is field 3.
    (fields[11] + fields[12]) * 10_000_000
}

#[tokio::test]
async fn container_stats_follow_cpu_memory_and_disk_use() {
    let Up { env, mut cri, image, pod, pod_id } = TestEnv::new("resstats").up("stats").await;

    let mut spin = container_config("spin", &image, &["sh", "-c", "while :; do :; done"]);
    spin.labels.insert("role".into(), "spinner".into());
    let spin = cri.run_container(&pod_id, &pod, spin).await;
    let spin_pid = cri.container_pid(&spin).await;
    // Once told to, `dd` fills a 40 MB buffer and holds it, blocked on a pipe
    // nobody reads.
    let script =
        "while [ ! -e /tmp/go ]; do sleep 0.1; done; dd if=/dev/zero bs=40M count=1 2>/dev/null | sleep 100000";
    let holder = cri.run_container(&pod_id, &pod, container_config("holder", &image, &["sh", "-c", script])).await;

    // The kernel's own count of the spinner's cpu time (/proc/PID/stat,
    // independent of cgroups) brackets each reading: the daemon read the
    // cgroup somewhere between the /proc reads just before and just after
    // its call, however long the call took on a loaded machine.
    let own_before0 = process_cpu_ns(spin_pid);
    let first = cri.container_stats(&spin).await.unwrap();
    let own_after0 = process_cpu_ns(spin_pid);
    assert_eq!(first.attributes.as_ref().unwrap().id, spin);
    let cpu0 = first.cpu.unwrap();
    assert!(cpu0.usage_nano_cores.is_none(), "no rate from a first reading (kubelet computes its own)");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let own_before1 = process_cpu_ns(spin_pid);
    let cpu1 = cri.container_stats(&spin).await.unwrap().cpu.unwrap();
    let own_after1 = process_cpu_ns(spin_pid);
    let used = cpu1.usage_core_nano_seconds.unwrap().value - cpu0.usage_core_nano_seconds.unwrap().value;
    // /proc counts whole 10 ms ticks: one tick of slack at each end.
    const TICK: u64 = 10_000_000;
    let (least, most) = ((own_before1 - own_after0).saturating_sub(2 * TICK), own_after1 - own_before0 + 2 * TICK);
    eprintln!("cgroup cpu time between the readings {used} ns; /proc says {least}..={most}");
    assert!(used >= least && used <= most, "cgroup cpu time {used} ns is outside {least}..={most} from /proc");
    assert!(used > 100_000_000, "cpu time grows for a busy container: {used} ns");
    // The rate is that cpu time over the readings' own timestamps.
    let cores = cpu1.usage_nano_cores.expect("a rate from the second reading").value;
    let elapsed = (cpu1.timestamp - cpu0.timestamp) as u64;
    let expected = used as u128 * 1_000_000_000 / elapsed as u128;
    eprintln!("usage_nano_cores {cores}; {used} ns over {elapsed} ns is {expected}");
    assert!(cores.abs_diff(expected as u64) <= 1_000, "{cores} vs {expected} from the readings");
    assert!(cores < 1_150_000_000, "a spinning shell uses up to one core: {cores}");

    // The working set grows with an allocation.
    let ws = |s: &ContainerStats| s.memory.as_ref().unwrap().working_set_bytes.as_ref().unwrap().value;
    let before = cri.container_stats(&holder).await.unwrap();
    cri.exec_ok(&holder, &["touch", "/tmp/go"]).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let after = loop {
        let now = cri.container_stats(&holder).await.unwrap();
        // Both grow while dd fills its buffer: wait for both.
        let rss = now.memory.as_ref().unwrap().rss_bytes.as_ref().unwrap().value;
        if ws(&now) >= ws(&before) + 30_000_000 && rss >= 30_000_000 {
            break now;
        }
        assert!(Instant::now() < deadline, "working set {} → {}: the allocation does not show", ws(&before), ws(&now));
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let memory = after.memory.as_ref().unwrap();
    assert!(memory.usage_bytes.as_ref().unwrap().value >= ws(&after));
    assert!(memory.rss_bytes.as_ref().unwrap().value >= 30_000_000, "{memory:?}");
    assert!(memory.available_bytes.is_none(), "no limit, nothing to be available against");

    // The writable layer grows with what the container writes.
    let layer = |s: &ContainerStats| s.writable_layer.clone().unwrap();
    let l0 = layer(&after);
    assert_eq!(PathBuf::from(&l0.fs_id.as_ref().unwrap().mountpoint), env.root.join("containers"));
    cri.exec_ok(&holder, &["dd", "if=/dev/zero", "of=/big", "bs=1M", "count=5"]).await;
    let l1 = layer(&cri.container_stats(&holder).await.unwrap());
    assert!(l1.used_bytes.unwrap().value >= l0.used_bytes.unwrap().value + 5_000_000);
    assert!(l1.inodes_used.unwrap().value > l0.inodes_used.unwrap().value);

    // Listing and its filters; exited containers have nothing to report.
    let done = cri.run_container(&pod_id, &pod, container_config("done", &image, &["true"])).await;
    cri.wait_exited(&done, 20).await;
    let ids = |stats: Vec<ContainerStats>| {
        let mut ids: Vec<String> = stats.into_iter().map(|s| s.attributes.unwrap().id).collect();
        ids.sort();
        ids
    };
    let mut running = vec![spin.clone(), holder.clone()];
    running.sort();
    assert_eq!(ids(cri.list_container_stats(None).await), running);
    let by_pod = ContainerStatsFilter { pod_sandbox_id: pod_id[..10].into(), ..Default::default() };
    assert_eq!(ids(cri.list_container_stats(Some(by_pod)).await), running);
    let by_id = ContainerStatsFilter { id: spin[..12].into(), ..Default::default() };
    assert_eq!(ids(cri.list_container_stats(Some(by_id)).await), vec![spin.clone()]);
    let by_label =
        ContainerStatsFilter { label_selector: [("role".into(), "spinner".into())].into(), ..Default::default() };
    assert_eq!(ids(cri.list_container_stats(Some(by_label)).await), vec![spin.clone()]);
    let streamed: Vec<ContainerStats> = {
        use tokio_stream::StreamExt;
        let mut stream =
            cri.runtime.stream_container_stats(StreamContainerStatsRequest::default()).await.unwrap().into_inner();
        let mut all = Vec::new();
        while let Some(chunk) = stream.next().await {
            all.extend(chunk.unwrap().container_stats);
        }
        all
    };
    assert_eq!(ids(streamed), running);
    let unknown = cri.container_stats("0123456789ab").await.unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);

    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn pod_stats_sum_their_containers_and_count_loopback_traffic_and_metrics_agree() {
    let Up { env, mut cri, image, pod, pod_id } = TestEnv::new("respod").up("podstats").await;
    let spin =
        cri.run_container(&pod_id, &pod, container_config("spin", &image, &["sh", "-c", "while :; do :; done"])).await;
    let idle = cri.run_container(&pod_id, &pod, container_config("idle", &image, &["sleep", "1000"])).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let stats = cri.pod_stats(&pod_id).await.unwrap();
    assert_eq!(stats.attributes.as_ref().unwrap().id, pod_id);
    let linux = stats.linux.clone().unwrap();
    let mut ids: Vec<&str> = linux.containers.iter().map(|c| c.attributes.as_ref().unwrap().id.as_str()).collect();
    ids.sort();
    let mut expected = vec![spin.as_str(), idle.as_str()];
    expected.sort();
    assert_eq!(ids, expected, "the pod's containers");
    let cpu = |c: &Option<CpuUsage>| c.as_ref().unwrap().usage_core_nano_seconds.as_ref().unwrap().value;
    let ws = |m: &Option<MemoryUsage>| m.as_ref().unwrap().working_set_bytes.as_ref().unwrap().value;
    let containers_cpu: u64 = linux.containers.iter().map(|c| cpu(&c.cpu)).sum();
    let containers_ws: u64 = linux.containers.iter().map(|c| ws(&c.memory)).sum();
    assert!(cpu(&linux.cpu) >= containers_cpu, "pod cpu {} ≥ its containers' {containers_cpu}", cpu(&linux.cpu));
    assert!(
        ws(&linux.memory) >= containers_ws,
        "pod working set {} ≥ its containers' {containers_ws}",
        ws(&linux.memory)
    );
    let processes = linux.process.unwrap().process_count.unwrap().value;
    assert!(processes >= 3, "pause and two containers at least: {processes}");

    // Traffic on the pod's loopback shows in its network stats.
    let lo_rx = |s: &PodSandboxStats| {
        let network = s.linux.as_ref().unwrap().network.clone().expect("network stats of the pod's namespace");
        assert!(network.default_interface.is_none(), "loopback only: no default interface");
        network.interfaces.iter().find(|i| i.name == "lo").expect("lo").rx_bytes.as_ref().unwrap().value
    };
    let rx0 = lo_rx(&stats);
    let out = cri.exec(&idle, &["ping", "-c", "3", "-W", "1", "127.0.0.1"], 10).await.unwrap();
    assert_eq!(out.exit_code, 0, "ping: {}", String::from_utf8_lossy(&out.stderr));
    let rx1 = lo_rx(&cri.pod_stats(&pod_id).await.unwrap());
    assert!(rx1 >= rx0 + 3 * 84, "lo received {rx0} → {rx1} bytes");

    // Listing with filters.
    assert_eq!(cri.list_pod_stats(None).await.len(), 1);
    let by_id = PodSandboxStatsFilter { id: pod_id[..12].into(), ..Default::default() };
    assert_eq!(cri.list_pod_stats(Some(by_id)).await.len(), 1);
    let by_label =
        PodSandboxStatsFilter { label_selector: [("app".into(), "podstats".into())].into(), ..Default::default() };
    assert_eq!(cri.list_pod_stats(Some(by_label)).await.len(), 1);
    let other = PodSandboxStatsFilter { label_selector: [("app".into(), "other".into())].into(), ..Default::default() };
    assert!(cri.list_pod_stats(Some(other)).await.is_empty());
    assert_eq!(cri.pod_stats("0123456789ab").await.unwrap_err().code(), tonic::Code::NotFound);

    // Metrics: every one described, with as many label values as keys.
    let descriptors =
        cri.runtime.list_metric_descriptors(ListMetricDescriptorsRequest {}).await.unwrap().into_inner().descriptors;
    let again =
        cri.runtime.list_metric_descriptors(ListMetricDescriptorsRequest {}).await.unwrap().into_inner().descriptors;
    assert_eq!(descriptors, again, "one descriptor set for the life of the daemon");
    let pods =
        cri.runtime.list_pod_sandbox_metrics(ListPodSandboxMetricsRequest {}).await.unwrap().into_inner().pod_metrics;
    let metrics = pods.iter().find(|p| p.pod_sandbox_id == pod_id).expect("the pod's metrics");
    let check = |m: &Metric| {
        let d = descriptors.iter().find(|d| d.name == m.name).unwrap_or_else(|| panic!("{} is not described", m.name));
        assert_eq!(m.label_values.len(), d.label_keys.len(), "{}", m.name);
    };
    metrics.metrics.iter().for_each(check);
    let lo_metric = metrics
        .metrics
        .iter()
        .find(|m| {
            m.name == "container_network_receive_bytes_total" && m.label_values.last().map(String::as_str) == Some("lo")
        })
        .expect("lo receive bytes");
    assert!(lo_metric.value.as_ref().unwrap().value >= rx0 + 3 * 84);
    assert_eq!(metrics.container_metrics.len(), 2);
    for container in &metrics.container_metrics {
        container.metrics.iter().for_each(check);
        let ws = container.metrics.iter().find(|m| m.name == "container_memory_working_set_bytes").unwrap();
        assert!(ws.value.as_ref().unwrap().value > 0);
    }

    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn pod_resources_and_overhead_limit_the_pod_cgroup() {
    let v2 = host::unified();
    let mut env = TestEnv::new("respodres");
    let mut cri = env.start().await;
    if !v2 {
        let mut raw = env.pod("raw");
        raw.linux.get_or_insert_with(Default::default).resources = Some(LinuxContainerResources {
            unified: [("memory.high".into(), "max".into())].into(),
            ..Default::default()
        });
        assert_invalid(cri.run_pod(raw).await.unwrap_err(), "config.linux.resources.unified");
        assert!(cri.list_pods(None).await.is_empty(), "a refused pod leaves nothing");
    }
    let mut pod = env.pod("sized");
    let linux = pod.linux.get_or_insert_with(Default::default);
    linux.resources = Some(LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 200_000,
        cpu_shares: 2048,
        memory_limit_in_bytes: mib(256),
        ..Default::default()
    });
    linux.overhead = Some(LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 10_000,
        memory_limit_in_bytes: mib(32),
        ..Default::default()
    });
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let pause = cri.pause_pid(&pod_id).await;
    let pod_dir = |controller: &str| host::cgroup_dir(pause, controller).parent().unwrap().to_path_buf();
    let (memory_file, quota_file) =
        if v2 { ("memory.max", "cpu.max") } else { ("memory.limit_in_bytes", "cpu.cfs_quota_us") };
    let quota = |d: &Path| host::read_cgroup_file(d, quota_file);
    assert_eq!(host::read_cgroup_file(&pod_dir("memory"), memory_file), mib(288).to_string(), "resources + overhead");
    assert_eq!(quota(&pod_dir("cpu")), if v2 { "210000 100000" } else { "210000" });

    let update =
        |overhead: LinuxContainerResources, resources: LinuxContainerResources| UpdatePodSandboxResourcesRequest {
            pod_sandbox_id: pod_id.clone(),
            overhead: Some(overhead),
            resources: Some(resources),
        };
    let bigger = LinuxContainerResources { memory_limit_in_bytes: mib(512), ..Default::default() };
    cri.runtime.update_pod_sandbox_resources(update(Default::default(), bigger.clone())).await.unwrap();
    assert_eq!(host::read_cgroup_file(&pod_dir("memory"), memory_file), mib(512).to_string());

    let bad = LinuxContainerResources { cpu_quota: 3, ..Default::default() };
    let err = cri.runtime.update_pod_sandbox_resources(update(Default::default(), bad)).await.unwrap_err();
    assert_invalid(err, "resources.cpu_quota");
    if !v2 {
        let raw =
            LinuxContainerResources { unified: [("memory.high".into(), "max".into())].into(), ..Default::default() };
        let err = cri.runtime.update_pod_sandbox_resources(update(Default::default(), raw)).await.unwrap_err();
        assert_invalid(err, "resources.unified");
    }
    cri.stop_pod(&pod_id).await.unwrap();
    let err = cri.runtime.update_pod_sandbox_resources(update(Default::default(), bigger)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

/// Kills and reaps a host process of the test's own.
fn reap(mut child: std::process::Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test]
async fn a_cgroup_that_cannot_be_removed_is_retried_and_reported() {
    let v2 = host::unified();
    let Up { env, mut cri, image, pod, pod_id } = TestEnv::new("resstale").up("stale").await;
    let id = cri.run_container(&pod_id, &pod, container_config("app", &image, &["sleep", "1000"])).await;
    let init = cri.container_pid(&id).await;

    // A frozen process in a child cgroup of the container's (v1: freezer; v2: cgroup.freeze).
    let container_dir = host::cgroup_dir(init, "freezer");
    let stuck = container_dir.join("stuck");
    fs::create_dir(&stuck).unwrap();
    let sleeper = std::process::Command::new("sleep").arg("1000").spawn().unwrap();
    fs::write(stuck.join("cgroup.procs"), sleeper.id().to_string()).unwrap();
    if v2 {
        fs::write(stuck.join("cgroup.freeze"), "1").unwrap();
    } else {
        fs::write(stuck.join("freezer.state"), "FROZEN").unwrap();
    }

    cri.remove_container(&id).await.expect("the container goes, whatever its cgroup does");
    assert!(cri.list_containers(None).await.is_empty());
    let stale = |info: serde_json::Value| -> Vec<String> {
        info["staleCgroups"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect()
    };
    if v2 {
        // cgroup.kill reaches frozen processes: nothing is left over.
        assert!(!container_dir.exists(), "the container cgroup is gone");
        assert!(stale(cri.runtime_info().await).is_empty());
        assert!(host::wait_gone(sleeper.id() as i32), "the frozen process was killed");
    } else {
        // A frozen v1 process cannot die: the cgroup is remembered and reported…
        let left = stale(cri.runtime_info().await);
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(left[0].ends_with(&id), "{left:?}");
        assert!(container_dir.exists());
        assert!(env.daemon_log().contains("cannot remove the cgroup now"), "and logged");
        // …and removed once the process can die.
        fs::write(stuck.join("freezer.state"), "THAWED").unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !stale(cri.runtime_info().await).is_empty() {
            assert!(Instant::now() < deadline, "the stale cgroup was not retried");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(!container_dir.exists(), "gone after the retry");
    }
    reap(sleeper);

    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn on_cgroup_v2_the_daemon_leaves_its_cgroup_so_that_it_can_delegate() {
    let mut env = TestEnv::new("resleaf");
    let mut cri = env.start().await;
    let pod = env.pod("leaf");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let daemon = env.daemon_pid().unwrap();
    let Some(start_cgroup) = env.daemon_cgroup.clone() else {
        // cgroup v1: no rule to follow; nidus stays where it was started.
        let me = std::process::id() as i32;
        assert_eq!(host::cgroup_of(daemon, "memory"), host::cgroup_of(me, "memory"));
        cri.remove_pod(&pod_id).await.unwrap();
        env.assert_no_leftovers();
        return;
    };
    let leaf = start_cgroup.join(nidus::cgroups::DAEMON_LEAF);
    assert_eq!(host::cgroup_dir(daemon, ""), leaf, "the daemon moved into its leaf");
    let delegated = host::read_cgroup_file(&start_cgroup, "cgroup.subtree_control");
    for controller in ["cpu", "memory", "pids"] {
        assert!(delegated.contains(controller), "{controller} delegated: {delegated:?}");
    }
    let pause = cri.pause_pid(&pod_id).await;
    assert!(host::cgroup_dir(pause, "").starts_with(start_cgroup.join(&env.cgroup_root)));

    // Restarted inside its leaf, it resolves the same root and finds its pod.
    env.kill_daemon();
    let mut cri = env.start().await;
    assert_eq!(host::cgroup_dir(env.daemon_pid().unwrap(), ""), leaf);
    assert_eq!(cri.pod_state(&pod_id).await, PodSandboxState::SandboxReady);
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();

    // Started in a cgroup another process shares, it cannot delegate: it says so.
    let shared = host::v2_test_home().join(format!("{}-shared", env.name));
    fs::create_dir(&shared).unwrap();
    let neighbour = std::process::Command::new("sleep").arg("1000").spawn().unwrap();
    fs::write(shared.join("cgroup.procs"), neighbour.id().to_string()).unwrap();
    let out = std::process::Command::new("sh")
        .args(["-c", "echo $$ > \"$0/cgroup.procs\" && exec \"$@\""])
        .arg(&shared)
        .arg(common::nidus_bin())
        .args(["serve", "--cgroup-root", "pods", "--root"])
        .arg(env.base.join("root2"))
        .arg("--state")
        .arg(env.base.join("state2"))
        .arg("--socket")
        .arg(env.base.join("state2/nidus.sock"))
        .output()
        .unwrap();
    reap(neighbour);
    host::remove_cgroup_tree(&shared);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "refused: {stderr}");
    assert!(stderr.contains("holds other processes") && stderr.contains("no internal processes"), "{stderr}");
}
