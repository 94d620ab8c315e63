//! The integration-test harness: each test gets its own `nidus serve` with its
//! own state directories, socket and cgroup root (nested under this test
//! process's own cgroup), running inside a network namespace the test creates,
//! and talks to it only through a tonic CRI client. Everything is cleaned up
//! when the environment drops, also when a test fails.
//!
//! Most tests start from a daemon with busybox imported and one pod running:
//! `TestEnv::new(label).up(pod_name)` makes that (an [`Up`]), and the
//! environment then checks, as it drops, that the test's own clean-up left
//! nothing of any pod or container behind (see [`TestEnv::checking_leftovers`]).
#![allow(dead_code)]

pub mod apis;
pub mod client;
pub mod counter;
pub mod host;
pub mod images;
pub mod probe;
pub mod raw_h2;
pub mod spdy;
pub mod v1alpha2;
pub mod websocket;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub use client::Cri;

/// A started daemon with the busybox image and a ready pod (see
/// [`TestEnv::up`]). The environment comes first so that, bound by a `let`
/// pattern, it drops last: its leftover check runs once the test is done
/// with everything else.
pub struct Up {
    pub env: TestEnv,
    pub cri: Cri,
    /// The busybox image's reference.
    pub image: String,
    pub pod: nidus::api::PodSandboxConfig,
    pub pod_id: String,
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

pub fn nidus_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_nidus"))
}

/// One test's runtime: directories, network namespace, cgroup root, daemon.
pub struct TestEnv {
    pub name: String,
    pub base: PathBuf,
    pub root: PathBuf,
    pub state: PathBuf,
    pub socket: PathBuf,
    pub log: PathBuf,
    /// The relative cgroup root given to the daemon.
    pub cgroup_root: String,
    /// cgroup v2: the cgroup the daemon starts in, its own (the daemon then
    /// moves into `nidus-daemon` below it and nests its root beside that).
    pub daemon_cgroup: Option<PathBuf>,
    pub netns: String,
    daemon: Option<Child>,
    extra_args: Vec<String>,
    /// Environment variables the daemon gets beside this process's.
    extra_env: Vec<(String, String)>,
    umask: Option<u32>,
    /// The daemon's RLIMIT_NOFILE (soft and hard) when set.
    nofile: Option<u64>,
    /// Whether dropping the environment checks for leftovers first.
    check_leftovers: bool,
    /// The daemon runs the systemd cgroup driver (cgroup root `/`): its
    /// cgroups are systemd's units, not below a root of the test's.
    systemd_driver: bool,
}

impl TestEnv {
    /// Makes the directories and the network namespace; the daemon is not started.
    pub fn new(label: &str) -> Self {
        host::require_root();
        if host::unified() {
            // Before this thread spawns anything (see v2_test_home).
            host::v2_test_home();
        }
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("nidus-t{}-{}-{}", std::process::id(), n, label);
        let base = std::env::temp_dir().join(&name);
        fs::create_dir_all(&base).expect("create test dir");
        let netns = name.clone();
        host::run("ip", &["netns", "add", &netns]);
        // cgroup v2 forbids processes beside delegated controllers: the daemon
        // gets a cgroup of its own and its relative root below it.
        let daemon_cgroup = host::unified().then(|| {
            let dir = host::v2_test_home().join(&name);
            fs::create_dir_all(&dir).expect("create the daemon's cgroup");
            dir
        });
        let env = Self {
            root: base.join("root"),
            state: base.join("state"),
            socket: base.join("state").join("nidus.sock"),
            log: base.join("daemon.log"),
            cgroup_root: if daemon_cgroup.is_some() { "pods".into() } else { name.clone() },
            daemon_cgroup,
            netns,
            name,
            base,
            daemon: None,
            extra_args: Vec::new(),
            extra_env: Vec::new(),
            umask: None,
            nofile: None,
            check_leftovers: false,
            systemd_driver: false,
        };
        // No pod network unless a test asks for one (tests/network.rs passes its own --config).
        fs::write(
            env.default_config(),
            format!("[network]\ncni_conf_dir = \"{}\"\nbuiltin = \"off\"\n", env.base.join("net.d").display()),
        )
        .expect("write the test's config");
        // Whatever happens later, the loopback of the daemon's netns is up.
        host::run("ip", &["-n", &env.netns, "link", "set", "lo", "up"]);
        env
    }

    /// The body `ip`:`port` serves over HTTP, fetched from the daemon's
    /// network namespace (the test's own) with busybox nc, retrying while
    /// the server starts.
    pub async fn fetch_from_node(&self, ip: &str, port: u16) -> String {
        let script = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | busybox nc -w 3 {ip} {port}");
        let mut last = String::new();
        for _ in 0..50 {
            let out = Command::new("nsenter")
                .args([format!("--net=/run/netns/{}", self.netns).as_str(), "--", "sh", "-c", &script])
                .output()
                .expect("nc");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if out.status.success() && text.contains("200 OK") {
                return text.rsplit("\r\n\r\n").next().unwrap_or_default().to_string();
            }
            last = format!("{text}{}", String::from_utf8_lossy(&out.stderr));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no answer from {ip}:{port} on the node: {last}");
    }

    /// The config file given to `nidus serve` unless the extra arguments name one.
    pub fn default_config(&self) -> PathBuf {
        self.base.join("default-config.toml")
    }

    /// Extra `nidus serve` arguments for the next start.
    pub fn with_args(mut self, args: &[&str]) -> Self {
        self.extra_args = args.iter().map(|s| s.to_string()).collect();
        self
    }

    /// An environment variable for the daemon's next starts (a service
    /// manager's `NOTIFY_SOCKET`, say).
    pub fn with_env(mut self, name: &str, value: &str) -> Self {
        self.extra_env.push((name.to_string(), value.to_string()));
        self
    }

    /// Runs the daemon and the `nidus` commands of this environment under
    /// this umask (an operator's shell or service manager may have any).
    pub fn with_umask(mut self, umask: u32) -> Self {
        self.umask = Some(umask);
        self
    }

    /// Starts the daemon with at most `limit` open files, soft and hard (a
    /// service manager's default is 1024 soft).
    /// The daemon gets `[cgroup] driver = "systemd"` and the cgroup root
    /// `/` (systemd places the slices). Its pods' scopes are systemd's: the
    /// test stops what it made (this environment's clean-up touches no
    /// cgroup then).
    pub fn with_systemd_driver(mut self) -> Self {
        let mut config = fs::read_to_string(self.default_config()).expect("read the test's config");
        config.push_str("[cgroup]\ndriver = \"systemd\"\n");
        fs::write(self.default_config(), config).expect("write the test's config");
        self.systemd_driver = true;
        self
    }

    pub fn with_nofile(mut self, limit: u64) -> Self {
        self.nofile = Some(limit);
        self
    }

    /// Makes dropping the environment a check that the test cleaned up after
    /// itself: the daemon is stopped (SIGTERM) and, once what it ran has had
    /// a few seconds to end, anything left is named in a panic (unless the
    /// test is failing already): a process that descends from the daemon or
    /// runs in the test's cgroups, a mount below the test's directories, a
    /// cgroup below the test's cgroup root, a network namespace named for
    /// the test, a file in root or state that only a pod, a container or an
    /// interrupted write leaves (see [`TestEnv::leftover_state_files`]).
    /// Everything is cleaned up all the same.
    pub fn checking_leftovers(mut self) -> Self {
        self.check_leftovers = true;
        self
    }

    /// Starts the daemon, imports busybox and runs a pod named `pod_name`:
    /// the set-up most tests start from. The environment checks for
    /// leftovers when it drops (see [`TestEnv::checking_leftovers`]).
    pub async fn up(self, pod_name: &str) -> Up {
        let pod = self.pod(pod_name);
        self.up_with(pod).await
    }

    /// `up` with a pod config of the test's own (made with [`TestEnv::pod`]
    /// and changed, say).
    pub async fn up_with(self, pod: nidus::api::PodSandboxConfig) -> Up {
        let mut env = self.checking_leftovers();
        let mut cri = env.start().await;
        let image = env.import_busybox(&mut cri).await;
        let pod_id = cri.run_pod(pod.clone()).await.expect("RunPodSandbox");
        Up { env, cri, image, pod, pod_id }
    }

    /// `cmd`, run under the environment's umask when it sets one.
    fn under_umask(&self, cmd: Command) -> Command {
        match self.umask {
            None => cmd,
            Some(umask) => {
                let mut wrapped = Command::new("sh");
                wrapped
                    .args(["-c", &format!("umask {umask:03o} && exec \"$@\""), "sh"])
                    .arg(cmd.get_program())
                    .args(cmd.get_args());
                wrapped
            }
        }
    }

    /// The command that runs `nidus serve` for this environment inside its netns.
    pub fn serve_command(&self) -> Command {
        let mut cmd = self.under_umask(self.serve_command_any_umask());
        cmd.envs(self.extra_env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    fn serve_command_any_umask(&self) -> Command {
        let mut cmd = match &self.daemon_cgroup {
            // Start in the daemon's cgroup (its leaf once it made one).
            Some(dir) => {
                let leaf = dir.join(nidus::cgroups::DAEMON_LEAF);
                let start_in = if leaf.is_dir() { leaf } else { dir.clone() };
                let mut cmd = Command::new("sh");
                cmd.args(["-c", "echo $$ > \"$0/cgroup.procs\" && exec \"$@\""]).arg(start_in).arg("nsenter");
                cmd
            }
            None => Command::new("nsenter"),
        };
        cmd.arg(format!("--net=/run/netns/{}", self.netns)).arg("--");
        if let Some(limit) = self.nofile {
            cmd.arg("prlimit").arg(format!("--nofile={limit}:{limit}")).arg("--");
        }
        cmd.arg(nidus_bin())
            .arg("serve")
            .arg("--root")
            .arg(&self.root)
            .arg("--state")
            .arg(&self.state)
            .arg("--socket")
            .arg(&self.socket)
            .arg("--cgroup-root")
            .arg(if self.systemd_driver { "/" } else { &self.cgroup_root })
            .arg("--log-level")
            .arg("nidus=debug,info")
            .args(&self.extra_args);
        if !self.extra_args.iter().any(|a| a == "--config") {
            cmd.arg("--config").arg(self.default_config());
        }
        cmd
    }

    /// Starts the daemon and connects a client once it answers.
    pub async fn start(&mut self) -> Cri {
        assert!(self.daemon.is_none(), "daemon already running");
        let log = fs::OpenOptions::new().create(true).append(true).open(&self.log).expect("daemon log");
        let child = self
            .serve_command()
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log)
            .spawn()
            .expect("spawn nidus serve");
        self.daemon = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.daemon.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.daemon = None;
                panic!("nidus serve exited early ({status}); log:\n{}", self.daemon_log());
            }
            if self.socket.exists() {
                if let Ok(mut cri) = Cri::connect(&self.socket).await {
                    if cri.version().await.is_ok() {
                        return cri;
                    }
                }
            }
            if Instant::now() > deadline {
                panic!("nidus serve did not answer within 20s; log:\n{}", self.daemon_log());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn daemon_pid(&self) -> Option<i32> {
        self.daemon.as_ref().map(|c| c.id() as i32)
    }

    /// The daemon's open descriptors and the processes in this test's
    /// cgroups, once two readings 300 ms apart agree (spare monitors are
    /// made in the background, with descriptors of their own in the
    /// daemon); the last reading after 9 s.
    pub async fn settled_fds_and_processes(&self) -> (usize, usize) {
        let read = || (self.daemon_fd_count(), self.cgroup_processes().len());
        let mut last = read();
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let now = read();
            if now == last {
                break;
            }
            last = now;
        }
        last
    }

    /// How many descriptors the daemon has open.
    pub fn daemon_fd_count(&self) -> usize {
        let daemon = self.daemon_pid().expect("the daemon runs");
        fs::read_dir(format!("/proc/{daemon}/fd")).map(|d| d.count()).unwrap_or(0)
    }

    pub fn daemon_log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILLs the daemon (a crash) and reaps it.
    pub fn kill_daemon(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            host::signal(child.id() as i32, libc::SIGKILL);
            let _ = child.wait();
        }
    }

    /// Sends SIGTERM and waits for a clean exit; returns the exit code.
    pub fn terminate_daemon(&mut self) -> Option<i32> {
        let mut child = self.daemon.take()?;
        host::signal(child.id() as i32, libc::SIGTERM);
        match host::wait_or_kill(&mut child, Duration::from_secs(10)) {
            Some(status) => status.code(),
            None => panic!("nidus serve ignored SIGTERM for 10s"),
        }
    }

    /// A node reboot as far as nidus can tell: the daemon and every process it
    /// started die, mounts vanish, and the volatile state directory is emptied.
    pub fn simulate_reboot(&mut self) {
        self.kill_daemon();
        self.kill_cgroup_processes();
        host::unmount_under(&self.base);
        let _ = fs::remove_dir_all(&self.state);
        // A reboot empties the cgroup filesystems too (the test's root stays).
        for dir in self.leftover_cgroups().iter().rev() {
            host::remove_cgroup_tree(dir);
        }
    }

    /// Runs `nidus image import PATH [--name NAME]` on this environment's
    /// root and socket, as an operator would beside the running daemon.
    pub fn image_import(&self, path: &Path, name: Option<&str>) -> Output {
        let mut cmd = Command::new(nidus_bin());
        cmd.args(["image", "import"]).arg(path).arg("--root").arg(&self.root).arg("--socket").arg(&self.socket);
        if let Some(name) = name {
            cmd.args(["--name", name]);
        }
        self.under_umask(cmd).output().expect("running nidus image import")
    }

    /// Imports a test image through the CLI, checks the daemon lists it, and
    /// returns its reference.
    pub async fn import_image(&self, cri: &mut Cri, image: &images::TestImage) -> String {
        let out = self.image_import(&image.layout, None);
        assert!(
            out.status.success(),
            "nidus image import {} failed: {}{}",
            image.layout.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let listed = cri.image(&image.reference).await;
        assert_eq!(listed.map(|i| i.id), Some(image.id.clone()), "the daemon lists {}", image.reference);
        image.reference.clone()
    }

    /// Imports the busybox test image ([`images::BUSYBOX`]); returns its reference.
    pub async fn import_busybox(&self, cri: &mut Cri) -> String {
        self.import_image(cri, images::busybox()).await
    }

    /// A pod config like kubelet's whose log directory is inside this test's directory.
    pub fn pod(&self, name: &str) -> nidus::api::PodSandboxConfig {
        let mut config = client::pod_config(name);
        config.log_directory = self.base.join("logs").join(name).display().to_string();
        config
    }

    /// Directories of this test's cgroup root, one per hierarchy.
    pub fn cgroup_dirs(&self) -> Vec<PathBuf> {
        if self.systemd_driver {
            return Vec::new();
        }
        match &self.daemon_cgroup {
            Some(dir) => vec![dir.join(&self.cgroup_root)],
            None => host::cgroup_root_dirs(&self.cgroup_root),
        }
    }

    /// The pod cgroup `pod_cgroup` (as PodSandboxStatus reports it) in every
    /// hierarchy, with the names of the cgroups in it, sorted.
    pub fn pod_child_cgroups(&self, pod_cgroup: &str) -> Vec<(PathBuf, Vec<String>)> {
        self.cgroup_dirs()
            .into_iter()
            .map(|dir| {
                let pod_dir = dir.join(pod_cgroup.trim_start_matches('/'));
                let mut names: Vec<String> = fs::read_dir(&pod_dir)
                    .unwrap_or_else(|e| panic!("{}: {e}", pod_dir.display()))
                    .flatten()
                    .filter(|e| e.path().is_dir())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort();
                (pod_dir, names)
            })
            .collect()
    }

    /// Every cgroup below the test's root (not the root itself).
    pub fn leftover_cgroups(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for dir in self.cgroup_dirs() {
            host::walk_dirs(&dir, &mut found);
        }
        found
    }

    /// Plays kubelet after its pods are gone: removes the cgroups it owns
    /// (`kubepods` and every QoS and `pod<uid>` cgroup below it), in every
    /// hierarchy, by rmdir alone and deepest first. It panics when nidus left
    /// a cgroup of its own (a sandbox's, a container's, one made ahead) below
    /// them, or when one of them still holds a process.
    pub fn remove_kubelet_cgroups(&self) {
        for root in self.cgroup_dirs() {
            let top = root.join("kubepods");
            if !top.exists() {
                continue;
            }
            let mut dirs = vec![top.clone()];
            host::walk_dirs(&top, &mut dirs);
            for dir in dirs.iter().rev() {
                let name = dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
                let kubelets = ["kubepods", "burstable", "besteffort", "guaranteed"].contains(&name.as_str())
                    || (name.starts_with("pod") && !name.starts_with("pods"));
                assert!(kubelets, "nidus left its cgroup {} below kubelet's", dir.display());
                if let Err(e) = fs::remove_dir(dir) {
                    panic!("kubelet cannot remove its cgroup {}: {e}", dir.display());
                }
            }
        }
    }

    /// Every process in this test's cgroups.
    pub fn cgroup_processes(&self) -> Vec<i32> {
        let mut dirs = Vec::new();
        for dir in self.cgroup_dirs() {
            dirs.push(dir.clone());
            host::walk_dirs(&dir, &mut dirs);
        }
        let mut pids: Vec<i32> = dirs
            .iter()
            .filter_map(|d| fs::read_to_string(d.join("cgroup.procs")).ok())
            .flat_map(|t| t.lines().filter_map(|l| l.parse().ok()).collect::<Vec<_>>())
            .collect();
        pids.sort_unstable();
        pids.dedup();
        if let Some(daemon) = self.daemon_pid() {
            pids.retain(|p| *p != daemon);
        }
        pids
    }

    pub fn kill_cgroup_processes(&self) {
        for _ in 0..50 {
            let pids = self.cgroup_processes();
            if pids.is_empty() {
                return;
            }
            for pid in pids {
                host::signal(pid, libc::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Mount points below this test's directories.
    pub fn leftover_mounts(&self) -> Vec<PathBuf> {
        host::mounts_under(&self.base)
    }

    /// Sandbox and container directories left in root and state.
    pub fn leftover_sandbox_dirs(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for dir in [
            self.root.join("sandboxes"),
            self.state.join("sandboxes"),
            self.root.join("containers"),
            self.state.join("containers"),
        ] {
            if let Ok(entries) = fs::read_dir(&dir) {
                found.extend(entries.flatten().map(|e| e.path()));
            }
        }
        found
    }

    /// Files in root and state that only a pod or container that was not
    /// removed, or a write that was interrupted, leaves: sandbox and
    /// container directories, image leases, pulls in flight, cgroups
    /// recorded as nidus's or as stale, and temp files (the spare
    /// directories, made ahead for the next container, are not leftovers).
    pub fn leftover_state_files(&self) -> Vec<PathBuf> {
        let mut found = self.leftover_sandbox_dirs();
        for dir in [self.root.join("images").join("leases"), self.root.join("images").join("pulling")] {
            found.extend(host::names_in(&dir).into_iter().map(|name| dir.join(name)));
        }
        for file in [self.state.join("owned-cgroups.json"), self.state.join("stale-cgroups.json")] {
            let listed = fs::read(&file).ok().and_then(|b| serde_json::from_slice::<Vec<serde_json::Value>>(&b).ok());
            if listed.is_some_and(|cgroups| !cgroups.is_empty()) {
                found.push(file);
            }
        }
        let spares = [self.root.join("spare-containers"), self.state.join("spare-monitors")];
        let mut dirs = Vec::new();
        for top in [&self.root, &self.state] {
            dirs.push(top.clone());
            host::walk_dirs(top, &mut dirs);
        }
        for dir in dirs.iter().filter(|d| !spares.iter().any(|s| d.starts_with(s))) {
            let temps = host::names_in(dir).into_iter().filter(|name| name.starts_with(".tmp-"));
            found.extend(temps.map(|name| dir.join(name)));
        }
        found
    }

    /// What the test's own clean-up left (see [`TestEnv::checking_leftovers`]),
    /// once the daemon is stopped, one line each.
    fn leftovers(&mut self) -> Vec<String> {
        let mut left = Vec::new();
        let descendants = self.daemon_pid().map(host::descendants).unwrap_or_default();
        if let Some(mut child) = self.daemon.take() {
            host::signal(child.id() as i32, libc::SIGTERM);
            if host::wait_or_kill(&mut child, Duration::from_secs(10)).is_none() {
                left.push("the daemon itself: it ignored SIGTERM for 10 s".to_string());
            }
        }
        // What the daemon ran that should end with it (spare monitors, their
        // inits made ahead) does so within moments; give it a bounded while.
        let deadline = Instant::now() + Duration::from_secs(10);
        let processes = loop {
            let mut pids: Vec<i32> = descendants
                .iter()
                .filter(|(pid, start)| host::still_running(*pid, start))
                .map(|(pid, _)| *pid)
                .collect();
            pids.extend(self.cgroup_processes());
            pids.sort_unstable();
            pids.dedup();
            if pids.is_empty() || Instant::now() > deadline {
                break pids;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        left.extend(processes.into_iter().map(|pid| format!("process {pid}: {}", host::cmdline(pid))));
        // Those not in the test's cgroups (which the clean-up empties) end here.
        for (pid, start) in &descendants {
            if host::still_running(*pid, start) {
                host::signal(*pid, libc::SIGKILL);
            }
        }
        left.extend(self.leftover_mounts().into_iter().map(|m| format!("mount {}", m.display())));
        left.extend(self.leftover_cgroups().into_iter().map(|c| format!("cgroup {}", c.display())));
        let namespaces = host::named_netns(&self.name).into_iter().filter(|n| *n != self.netns);
        left.extend(namespaces.map(|n| format!("network namespace {n}")));
        left.extend(self.leftover_state_files().into_iter().map(|f| format!("file {}", f.display())));
        left
    }

    /// Asserts nothing of any pod is left: processes, mounts, cgroups, directories.
    pub fn assert_no_leftovers(&self) {
        self.assert_no_leftovers_after("the test");
    }

    /// The same, naming `what` left them in a failure.
    pub fn assert_no_leftovers_after(&self, what: &str) {
        assert_eq!(self.cgroup_processes(), Vec::<i32>::new(), "processes left in the test cgroups after {what}");
        assert_eq!(self.leftover_mounts(), Vec::<PathBuf>::new(), "mounts left after {what}");
        assert_eq!(self.leftover_cgroups(), Vec::<PathBuf>::new(), "cgroups left after {what}");
        assert_eq!(self.leftover_sandbox_dirs(), Vec::<PathBuf>::new(), "sandbox directories left after {what}");
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        let left = if self.check_leftovers && !std::thread::panicking() { self.leftovers() } else { Vec::new() };
        self.kill_daemon();
        self.kill_cgroup_processes();
        host::unmount_under(&self.base);
        for dir in self.cgroup_dirs() {
            host::remove_cgroup_tree(&dir);
        }
        if let Some(dir) = &self.daemon_cgroup {
            host::remove_cgroup_tree(dir);
        }
        for netns in host::named_netns(&self.name) {
            let _ = Command::new("ip").args(["netns", "delete", &netns]).status();
        }
        let log = (std::thread::panicking() || !left.is_empty()).then(|| self.daemon_log());
        if let Some(log) = &log {
            eprintln!("--- daemon log of {} ---\n{log}", self.name);
        }
        let _ = fs::remove_dir_all(&self.base);
        if !left.is_empty() {
            panic!("{}: the test's clean-up left (all removed now):\n  {}", self.name, left.join("\n  "));
        }
    }
}
