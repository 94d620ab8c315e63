//! State that survives crashes: a `kill -9` of the daemon leaves pods running
//! and READY after restart; a pause that died meanwhile is NOTREADY; after a
//! simulated node reboot every sandbox is NOTREADY, removable and re-creatable;
//! a RunPodSandbox or CreateContainer a crash interrupted is undone; a daemon
//! killed at any moment of a pod's lifecycle keeps every step it answered and
//! leaves nothing half-made.

mod common;

use common::client::{container_config, pod_config};
use common::{host, TestEnv, Up};
use nidus::api::PodSandboxState;

#[tokio::test]
async fn a_daemon_crash_does_not_disturb_pods() {
    let mut env = TestEnv::new("crash");
    let mut cri = env.start().await;
    let web = cri.run_pod(pod_config("web")).await.unwrap();
    let db = cri.run_pod(pod_config("db")).await.unwrap();
    let stopped = cri.run_pod(pod_config("old")).await.unwrap();
    cri.stop_pod(&stopped).await.unwrap();
    let web_pause = cri.pause_pid(&web).await;
    let db_pause = cri.pause_pid(&db).await;

    env.kill_daemon();
    assert!(host::process_running(web_pause) && host::process_running(db_pause), "pods must survive the daemon");
    // The db pod's pause dies while the daemon is down.
    host::signal(db_pause, libc::SIGKILL);
    assert!(host::wait_gone(db_pause));

    let mut cri = env.start().await;
    assert_eq!(cri.pod_state(&web).await, PodSandboxState::SandboxReady);
    assert_eq!(cri.pause_pid(&web).await, web_pause, "the same pause process");
    assert_eq!(cri.pod_state(&db).await, PodSandboxState::SandboxNotready);
    assert_eq!(cri.pod_state(&stopped).await, PodSandboxState::SandboxNotready);
    assert_eq!(cri.list_pods(None).await.len(), 3);
    // Names are still reserved after the restart.
    assert_eq!(cri.run_pod(pod_config("web")).await.unwrap_err().code(), tonic::Code::AlreadyExists);

    for id in [&web, &db, &stopped] {
        cri.stop_pod(id).await.unwrap();
        cri.remove_pod(id).await.unwrap();
    }
    assert!(host::wait_gone(web_pause));
    env.assert_no_leftovers();
}

#[tokio::test]
async fn after_a_reboot_every_sandbox_is_notready_removable_and_recreatable() {
    let mut env = TestEnv::new("reboot");
    let mut cri = env.start().await;
    let mut config = pod_config("web");
    config.linux.as_mut().unwrap().cgroup_parent = "/kubepods/besteffort/poduid-web".into();
    let id = cri.run_pod(config.clone()).await.unwrap();
    let pause = cri.pause_pid(&id).await;

    env.simulate_reboot();
    assert!(host::wait_gone(pause));

    let mut cri = env.start().await;
    let status = cri.pod_status(&id).await.unwrap();
    assert_eq!(status.status.unwrap().state(), PodSandboxState::SandboxNotready);
    let info: serde_json::Value = serde_json::from_str(&status.info["info"]).unwrap();
    assert!(info["pid"].is_null(), "no pause process after a reboot");

    // kubelet's recovery: a new attempt while the old one is still listed...
    config.metadata.as_mut().unwrap().attempt = 1;
    let next = cri.run_pod(config).await.unwrap();
    assert_eq!(cri.pod_state(&next).await, PodSandboxState::SandboxReady);
    // ...then the old one is stopped and removed.
    cri.stop_pod(&id).await.unwrap();
    cri.remove_pod(&id).await.unwrap();
    assert_eq!(cri.list_pods(None).await.len(), 1);
    cri.remove_pod(&next).await.unwrap();
    env.remove_kubelet_cgroups();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn a_crash_in_the_middle_of_run_pod_sandbox_is_undone_at_restart() {
    let mut env = TestEnv::new("midrun");
    let mut cri = env.start().await;
    let id = cri.run_pod(pod_config("web")).await.unwrap();
    let pause = cri.pause_pid(&id).await;
    env.kill_daemon();

    // Make the disk look as if the daemon died before RunPodSandbox finished:
    // the record still says "creating" (fault injection on the record file).
    let record = env.root.join("sandboxes").join(&id).join("sandbox.json");
    let text = std::fs::read_to_string(&record).unwrap();
    assert!(text.contains("\"lifecycle\": \"created\""), "{text}");
    std::fs::write(&record, text.replace("\"lifecycle\": \"created\"", "\"lifecycle\": \"creating\"")).unwrap();
    // And a directory an interrupted creation left without any record.
    std::fs::create_dir_all(env.root.join("sandboxes").join("0123abcd")).unwrap();

    let mut cri = env.start().await;
    assert!(host::wait_gone(pause), "the half-made sandbox's pause must be killed");
    assert!(cri.list_pods(None).await.is_empty(), "a half-made sandbox is not listed");
    env.assert_no_leftovers();
    // Its name is free again.
    let again = cri.run_pod(pod_config("web")).await.unwrap();
    cri.remove_pod(&again).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn a_crash_while_the_monitor_builds_a_container_is_undone_at_restart() {
    let Up { mut env, mut cri, image, pod, pod_id } = TestEnv::new("midcreate").up("midcreate").await;
    let id = cri.create_container(&pod_id, &pod, container_config("c", &image, &["sleep", "60"])).await.unwrap();
    let pid = cri.container_pid(&id).await;
    env.kill_daemon();

    // Make the run dir look as if the daemon died while the monitor was
    // forking the init: the durable record is there (written meanwhile), and
    // the monitor's record of itself (written before `go`), but not yet its
    // record of the init.
    let run_dir = env.state.join("containers").join(&id);
    assert!(run_dir.join("monitor.json").exists());
    for file in ["init.json", "cgroup-join.json"] {
        std::fs::remove_file(run_dir.join(file)).unwrap();
    }

    let mut cri = env.start().await;
    assert!(host::wait_gone(pid), "the half-made container's init must be killed");
    assert!(cri.list_containers(None).await.is_empty(), "a half-made container is not listed");
    assert!(!run_dir.exists() && !env.root.join("containers").join(&id).exists(), "its directories are removed");
    // Its name is free again.
    let again = cri.run_container(&pod_id, &pod, container_config("c", &image, &["sleep", "60"])).await;
    assert!(!again.is_empty());
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

/// The image store's lease files (one per container holding layers), sorted.
fn lease_files(env: &TestEnv) -> Vec<String> {
    host::names_in(&env.root.join("images").join("leases"))
}

#[tokio::test]
async fn an_image_lease_whose_container_is_gone_is_released_at_restart() {
    let Up { mut env, mut cri, image, pod, pod_id } = TestEnv::new("orphanlease").up("orphanlease").await;
    let id = cri.create_container(&pod_id, &pod, container_config("c", &image, &["sleep", "60"])).await.unwrap();
    env.kill_daemon();

    // The disk as a daemon killed in RemoveContainer leaves it: the
    // container's directories gone, its lease not yet (fault injection: a
    // copy of the live container's lease for one that no longer exists).
    let leases = env.root.join("images").join("leases");
    let gone = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let lease = std::fs::read_to_string(leases.join(format!("{id}.json"))).unwrap();
    std::fs::write(leases.join(format!("{gone}.json")), lease.replace(&id, gone)).unwrap();

    let mut cri = env.start().await;
    assert_eq!(lease_files(&env), [format!("{id}.json")], "only the live container keeps a lease");
    cri.remove_pod(&pod_id).await.unwrap();
    assert!(lease_files(&env).is_empty(), "the pod's removal released its container's lease");
    env.assert_no_leftovers();
}

/// A pod's lifecycle as the test runs it, container first.
const CONTAINER_FIRST: &[&str] = &[
    "RunPodSandbox",
    "CreateContainer",
    "StartContainer",
    "ExecSync",
    "StopContainer",
    "RemoveContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
];

/// The same, leaving the container to StopPodSandbox and RemovePodSandbox.
const POD_FIRST: &[&str] =
    &["RunPodSandbox", "CreateContainer", "StartContainer", "ExecSync", "StopPodSandbox", "RemovePodSandbox"];

/// What a lifecycle task had been answered when the daemon died: the first
/// `done` of its `steps`; the next one may have been under way, and may or
/// may not have taken effect.
#[derive(Debug, Clone)]
struct Answered {
    steps: &'static [&'static str],
    done: usize,
    pod: Option<String>,
    container: Option<String>,
}

impl Answered {
    fn new(steps: &'static [&'static str]) -> Self {
        Self { steps, done: 0, pod: None, container: None }
    }

    /// Where the first of `steps` that this lifecycle has comes in it.
    fn index(&self, steps: &[&str]) -> usize {
        steps.iter().find_map(|name| self.steps.iter().position(|s| s == name)).expect("a step of the lifecycle")
    }

    fn under_way(&self) -> &'static str {
        self.steps.get(self.done).copied().unwrap_or("nothing")
    }
}

/// One pod's lifecycle, its `steps` in order; each answered step is noted in `answered`.
async fn lifecycle(
    socket: std::path::PathBuf,
    pod: nidus::api::PodSandboxConfig,
    image: String,
    answered: std::sync::Arc<std::sync::Mutex<Answered>>,
) -> Result<(), tonic::Status> {
    let steps = answered.lock().unwrap().steps;
    let mut cri = common::Cri::connect(&socket).await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let (mut pod_id, mut id) = (String::new(), String::new());
    for step in steps {
        match *step {
            "RunPodSandbox" => pod_id = cri.run_pod(pod.clone()).await?,
            "CreateContainer" => {
                id = cri.create_container(&pod_id, &pod, container_config("c", &image, &["sleep", "60"])).await?
            }
            "StartContainer" => cri.start_container(&id).await?,
            "ExecSync" => {
                cri.exec(&id, &["sh", "-c", "sleep 0.02"], 10).await?;
            }
            "StopContainer" => cri.stop_container(&id, 0).await?,
            "RemoveContainer" => cri.remove_container(&id).await?,
            "StopPodSandbox" => cri.stop_pod(&pod_id).await?,
            "RemovePodSandbox" => cri.remove_pod(&pod_id).await?,
            other => panic!("no step {other}"),
        }
        let mut a = answered.lock().unwrap();
        a.done += 1;
        a.pod = Some(pod_id.clone()).filter(|p| !p.is_empty());
        a.container = Some(id.clone()).filter(|c| !c.is_empty());
    }
    Ok(())
}

/// After the restart: what `answered` says of one lifecycle holds for the
/// pod and container listed for it (`pods` and `containers`: at most one each).
async fn check_answered(
    cri: &mut common::Cri,
    answered: &Answered,
    pods: &[&nidus::api::PodSandbox],
    containers: &[&nidus::api::Container],
    what: &str,
) {
    use nidus::api::ContainerState::{ContainerCreated, ContainerExited, ContainerRunning};
    use std::cmp::Ordering::{Equal, Greater, Less};
    let done = answered.done;
    assert!(pods.len() <= 1 && containers.len() <= 1, "{what}: more listed than was asked for");
    // Nothing answered is lost, nothing removed comes back; the step under
    // way may have gone either way.
    if let Some(pod) = &answered.pod {
        match done.cmp(&answered.index(&["RemovePodSandbox"])) {
            Less => assert_eq!(pods.iter().map(|p| &p.id).collect::<Vec<_>>(), [pod], "{what}: the pod is lost"),
            Equal => {}
            Greater => assert!(pods.is_empty(), "{what}: a removed pod is back"),
        }
    }
    let Some(id) = &answered.container else { return };
    match done.cmp(&answered.index(&["RemoveContainer", "RemovePodSandbox"])) {
        Less => assert_eq!(containers.iter().map(|c| &c.id).collect::<Vec<_>>(), [id], "{what}: the container is lost"),
        Equal => {}
        Greater => assert!(containers.is_empty(), "{what}: a removed container is back"),
    }
    let Some(listed) = containers.first() else { return };
    let state = listed.state();
    let stopping = answered.index(&["StopContainer", "StopPodSandbox"]);
    let allowed = match done {
        d if d == answered.index(&["StartContainer"]) => &[ContainerCreated, ContainerRunning][..],
        d if d < stopping => &[ContainerRunning][..],
        d if d == stopping => &[ContainerRunning, ContainerExited][..],
        _ => &[ContainerExited][..],
    };
    assert!(allowed.contains(&state), "{what}: the container is {state:?}");
    if state == ContainerRunning {
        let pid = cri.container_pid(id).await;
        assert!(host::process_running(pid), "{what}: a running container without its process");
    }
}

#[tokio::test]
async fn a_daemon_killed_at_any_moment_of_three_lifecycles_keeps_what_it_answered_and_leaves_nothing_half_made() {
    let mut env = TestEnv::new("anykill");
    let mut cri = env.start().await;
    let image = env.import_busybox(&mut cri).await;
    // Three pods' lifecycles at once take tens to hundreds of milliseconds
    // (debug build, loaded machine): kills spread over 0.4 s land in every
    // step, and in the middle of most.
    let delays_ms = [
        0u64, 3, 6, 10, 14, 18, 23, 28, 34, 40, 47, 55, 64, 74, 85, 97, 110, 125, 140, 160, 180, 205, 230, 260, 300,
        350, 400,
    ];
    let mut landed = Vec::new();
    for (round, delay) in delays_ms.iter().enumerate() {
        let mut lifecycles = Vec::new();
        for k in 0..3 {
            let name = format!("r{round}-{k}");
            let mut pod = env.pod(&name);
            if k != 0 {
                // kubelet's layout: nidus makes the QoS and pod cgroups above the sandbox's.
                pod.linux.as_mut().unwrap().cgroup_parent = format!("/kubepods/besteffort/pod-{name}");
            }
            // The third leaves its container to StopPodSandbox and RemovePodSandbox.
            let steps = if k == 2 { POD_FIRST } else { CONTAINER_FIRST };
            let answered = std::sync::Arc::new(std::sync::Mutex::new(Answered::new(steps)));
            let task = tokio::spawn(lifecycle(env.socket.clone(), pod, image.clone(), answered.clone()));
            lifecycles.push((name, answered, task));
        }
        tokio::time::sleep(std::time::Duration::from_millis(*delay)).await;
        env.kill_daemon();
        let mut answers = Vec::new();
        for (name, answered, task) in lifecycles {
            let finished = task.await.unwrap().is_ok();
            let answered = answered.lock().unwrap().clone();
            let under_way = if finished { "nothing" } else { answered.under_way() };
            answers.push((name, answered, under_way));
        }
        let what = format!(
            "killed after {delay} ms ({})",
            answers
                .iter()
                .map(|(name, a, w)| format!("{name}: {} answered, {w} under way", a.done))
                .collect::<Vec<_>>()
                .join("; ")
        );
        landed.push(what.clone());

        let mut cri = env.start().await;
        let pods = cri.list_pods(None).await;
        let containers = cri.list_containers(None).await;
        for (name, answered, _) in &answers {
            let pods_of: Vec<_> =
                pods.iter().filter(|p| p.metadata.as_ref().is_some_and(|m| &m.name == name)).collect();
            let containers_of: Vec<_> =
                containers.iter().filter(|c| pods_of.iter().any(|p| p.id == c.pod_sandbox_id)).collect();
            check_answered(&mut cri, answered, &pods_of, &containers_of, &format!("{what}, {name}")).await;
        }
        assert!(
            containers.iter().all(|c| pods.iter().any(|p| p.id == c.pod_sandbox_id)),
            "{what}: a container is listed without its pod"
        );
        // Whatever is listed can be stopped and removed, after which nothing
        // of it is left: processes, mounts, cgroups, directories, leases.
        for c in &containers {
            cri.stop_container(&c.id, 0).await.unwrap_or_else(|e| panic!("{what}: StopContainer: {e}"));
            cri.remove_container(&c.id).await.unwrap_or_else(|e| panic!("{what}: RemoveContainer: {e}"));
        }
        for p in &pods {
            cri.stop_pod(&p.id).await.unwrap_or_else(|e| panic!("{what}: StopPodSandbox: {e}"));
            cri.remove_pod(&p.id).await.unwrap_or_else(|e| panic!("{what}: RemovePodSandbox: {e}"));
        }
        env.remove_kubelet_cgroups();
        env.assert_no_leftovers_after(&what);
        let leases = lease_files(&env);
        assert!(leases.is_empty(), "{what}: image leases left: {leases:?}");
    }
    eprintln!("where the kills landed:\n{}", landed.join("\n"));
}
