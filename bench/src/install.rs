//! Installs what the benchmark needs from Debian's packages when it is
//! missing: containerd with runc and crun (the references), the CNI plugins
//! and iptables (the networked variants), Debian's dynamic busybox (the test
//! image), gcc (the static pause program), iproute2, util-linux,
//! docker-registry and skopeo (the pull step); the cgroup-driver step needs
//! only containerd, runc, gcc, busybox and the tools. Nothing is started as a
//! service: while apt runs, a `policy-rc.d` that refuses service starts is in
//! place unless one exists.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::host;
use crate::options::OnlyStep;

/// (program that must be on PATH, Debian package providing it)
const NEEDED: &[(&str, &str)] = &[
    ("containerd", "containerd"),
    ("ctr", "containerd"),
    ("containerd-shim-runc-v2", "containerd"),
    ("runc", "runc"),
    ("crun", "crun"),
    ("gcc", "gcc"),
    ("ip", "iproute2"),
    ("nsenter", "util-linux"),
    ("unshare", "util-linux"),
    ("python3", "python3"),
    ("docker-registry", "docker-registry"),
    ("skopeo", "skopeo"),
];

/// What the cgroup-driver step needs (it runs where apt may have no
/// network: the node lane's VM image holds these).
const NEEDED_BY_DRIVERS: &[&str] = &[
    "containerd",
    "ctr",
    "containerd-shim-runc-v2",
    "runc",
    "gcc",
    "ip",
    "nsenter",
    "unshare",
    "python3",
    "systemctl",
];

const POLICY_RC_D: &str = "/usr/sbin/policy-rc.d";

/// Installs what the run (`only` a step of it, or all) needs and misses.
pub fn ensure_packages(only: Option<OnlyStep>) -> Result<()> {
    let drivers = only == Some(OnlyStep::Drivers);
    let mut missing: Vec<&str> = NEEDED
        .iter()
        .filter(|(bin, _)| !drivers || NEEDED_BY_DRIVERS.contains(bin))
        .filter(|(bin, _)| !host::on_path(bin))
        .map(|(_, pkg)| *pkg)
        .collect();
    if drivers && !host::on_path("systemctl") {
        missing.push("systemd");
    }
    if !dynamic_busybox() {
        missing.push("busybox");
    }
    if !drivers && (!Path::new("/usr/lib/cni/bridge").exists() || !Path::new("/usr/lib/cni/portmap").exists()) {
        missing.push("containernetworking-plugins");
    }
    if !drivers && !host::on_path("iptables") {
        missing.push("iptables");
    }
    if !Path::new("/usr/lib/x86_64-linux-gnu/libc.a").exists()
        && !Path::new("/usr/lib/aarch64-linux-gnu/libc.a").exists()
    {
        missing.push("libc6-dev");
    }
    missing.sort_unstable();
    missing.dedup();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("installing from Debian: {}", missing.join(" "));
    let guard = PolicyGuard::install()?;
    let update = Command::new("apt-get").arg("update").status().context("running apt-get update")?;
    if !update.success() {
        bail!("apt-get update failed");
    }
    let status = Command::new("apt-get")
        .args(["install", "-y", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .context("running apt-get install")?;
    drop(guard);
    if !status.success() {
        bail!("apt-get install {} failed", missing.join(" "));
    }
    Ok(())
}

fn dynamic_busybox() -> bool {
    let Ok(out) = Command::new("ldd").arg("/bin/busybox").output() else {
        return false;
    };
    Path::new("/bin/busybox").exists()
        && out.status.success()
        && !String::from_utf8_lossy(&out.stdout).contains("not a dynamic")
}

/// A `policy-rc.d` refusing every service start, removed on drop if we wrote it.
struct PolicyGuard {
    written: bool,
}

impl PolicyGuard {
    fn install() -> Result<Self> {
        if Path::new(POLICY_RC_D).exists() {
            return Ok(Self { written: false });
        }
        fs::write(POLICY_RC_D, "#!/bin/sh\n# written by nidus-bench while it installs packages\nexit 101\n")
            .with_context(|| format!("writing {POLICY_RC_D}"))?;
        fs::set_permissions(POLICY_RC_D, fs::Permissions::from_mode(0o755))?;
        Ok(Self { written: true })
    }
}

impl Drop for PolicyGuard {
    fn drop(&mut self) {
        if self.written {
            let _ = fs::remove_file(POLICY_RC_D);
        }
    }
}
