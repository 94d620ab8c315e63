//! containerd + runc under test (Debian's packages): a containerd of the
//! harness's own, never the system's — its own config, root (on disk) and
//! state and runc root (on the harness's tmpfs), socket, network namespace
//! and a private mount namespace with its own `/run` (shim sockets live in
//! `/run/containerd/s`; with systemd cgroups only `/run/containerd` is its
//! own). CRI plugin: cgroupfs driver, overlayfs snapshotter,
//! no CNI config, `restrict_oom_score_adj` (root here lacks
//! CAP_SYS_RESOURCE), and the harness's pause image as `sandbox_image`.
//! Images are imported with `ctr images import` into the `k8s.io` namespace;
//! the pull step's registry (127.0.0.1, plain HTTP) is configured as a mirror.
//! Three more flavours: `containerd-cni` (the bench's bridge CNI list and
//! Debian's plugins), `containerd-crun` (crun instead of runc) and
//! `containerd-systemd` (runc's systemd cgroup driver, `SystemdCgroup =
//! true`: a scope per pause and container in the pod's slice).

use std::fs;
use std::path::PathBuf;

use anyhow::Result;

use super::Runtime;
use crate::host;
use crate::images::{Image, PAUSE};

/// Plugins this benchmark has no use for (and that would look at host paths).
const DISABLED_PLUGINS: &[&str] = &[
    "io.containerd.internal.v1.opt",
    "io.containerd.snapshotter.v1.aufs",
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.tracing.processor.v1.otlp",
    "io.containerd.internal.v1.tracing",
];

fn config_path(rt: &Runtime) -> PathBuf {
    rt.dir.join("config.toml")
}

fn root(rt: &Runtime) -> PathBuf {
    rt.dir.join("root")
}

fn state(rt: &Runtime) -> PathBuf {
    rt.state.join("state")
}

fn runc_root(rt: &Runtime) -> PathBuf {
    rt.state.join("runc")
}

fn toml_str(path: PathBuf) -> String {
    format!("{:?}", path.display().to_string())
}

/// Writes the config; returns the daemon's command line.
pub fn prepare(rt: &Runtime) -> Result<(String, Vec<String>, bool)> {
    let cni = rt.dir.join("cni");
    for dir in [cni.join("bin"), cni.join("conf")] {
        fs::create_dir_all(dir)?;
    }
    // The networked variant: the bench's bridge list and Debian's plugins.
    let cni_bin = match rt.kind {
        super::Kind::ContainerdCni => {
            super::network::write_conflist(&cni.join("conf"), &rt.dir.join("cni-leases"))?;
            PathBuf::from(super::network::CNI_BIN_DIR)
        }
        _ => cni.join("bin"),
    };
    // The second reference runs containers with crun through the same shim.
    let binary_name = match rt.kind {
        super::Kind::ContainerdCrun => {
            format!("\n        BinaryName = {}", toml_str(host::which("crun")?))
        }
        _ => String::new(),
    };
    let disabled: Vec<String> = DISABLED_PLUGINS.iter().map(|p| format!("{p:?}")).collect();
    let config = format!(
        r#"version = 2
root = {root}
state = {state}
disabled_plugins = [{disabled}]

[grpc]
  address = {socket}

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."127.0.0.1:{pull_port}"]
    endpoint = ["http://127.0.0.1:{pull_port}"]
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = {cni_bin}
    conf_dir = {cni_conf}
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = {systemd_cgroup}
        Root = {runc_root}{binary_name}
"#,
        root = toml_str(root(rt)),
        state = toml_str(state(rt)),
        disabled = disabled.join(", "),
        socket = toml_str(rt.socket.clone()),
        cni_bin = toml_str(cni_bin),
        cni_conf = toml_str(cni.join("conf")),
        runc_root = toml_str(runc_root(rt)),
        pull_port = crate::pull::REGISTRY_PORT,
        systemd_cgroup = rt.kind.is_systemd(),
    );
    fs::write(config_path(rt), config)?;
    Ok(("containerd".into(), vec!["--config".into(), config_path(rt).display().to_string()], true))
}

pub fn import(rt: &Runtime, image: &Image) -> Result<()> {
    let socket = rt.socket.display().to_string();
    let archive = image.archive.display().to_string();
    host::run("ctr", &["--address", &socket, "--namespace", "k8s.io", "images", "import", &archive])?;
    Ok(())
}

/// Runs containerd's garbage collection now: a lease removed with `--sync`
/// collects every unreferenced resource before the call returns.
pub fn collect_garbage(rt: &Runtime) -> Result<()> {
    let socket = rt.socket.display().to_string();
    let ctr = |args: &[&str]| {
        let mut all = vec!["--address", socket.as_str(), "--namespace", "k8s.io", "leases"];
        all.extend_from_slice(args);
        host::run("ctr", &all)
    };
    let created = ctr(&["create"])?;
    let id = created.split_whitespace().next().unwrap_or_default().to_string();
    if id.is_empty() {
        anyhow::bail!("ctr leases create printed no lease id");
    }
    ctr(&["rm", "--sync", &id])?;
    Ok(())
}

/// Directories holding one entry per pod, container, task or snapshot.
pub fn state_dirs(rt: &Runtime) -> Vec<PathBuf> {
    let cri_root = root(rt).join("io.containerd.grpc.v1.cri");
    let cri_state = state(rt).join("io.containerd.grpc.v1.cri");
    let mut dirs = vec![
        cri_root.join("sandboxes"),
        cri_root.join("containers"),
        cri_state.join("sandboxes"),
        cri_state.join("containers"),
        state(rt).join("io.containerd.runtime.v2.task/k8s.io"),
        root(rt).join("io.containerd.snapshotter.v1.overlayfs/snapshots"),
        runc_root(rt).join("k8s.io"),
    ];
    // Shim sockets, in the daemon's private /run.
    if let Some(pid) = rt.daemon_pid() {
        dirs.push(PathBuf::from(format!("/proc/{pid}/root/run/containerd/s")));
    }
    dirs
}
