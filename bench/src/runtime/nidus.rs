//! nidus under test: `nidus serve` with a config the harness writes (root on
//! disk, state on the harness's tmpfs, a relative cgroup root so pod cgroups
//! nest under the daemon's harness-made cgroup), images imported with
//! `nidus image import`.

use std::fs;
use std::path::PathBuf;

use anyhow::{Context, Result};

use super::Runtime;
use crate::host;
use crate::images::Image;

/// nidus's cgroup root, relative to the daemon's own cgroup.
pub const CGROUP_ROOT: &str = "pods";

/// The leaf of its cgroup a nidus moves into on cgroup v2, so that the
/// cgroup can hand its controllers to the pods' (see nidus's
/// `cgroups::delegation`).
pub const DAEMON_LEAF: &str = "nidus-daemon";

/// The nidus binary: `NIDUS_BIN`, else `nidus` beside this harness (both in
/// `target/release` after `make bench`).
pub fn binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("NIDUS_BIN") {
        return Ok(PathBuf::from(path));
    }
    let me = std::env::current_exe().context("locating the harness binary")?;
    let beside = me.parent().context("harness binary without a directory")?.join("nidus");
    if !beside.is_file() {
        anyhow::bail!("{} is missing: build nidus first (`make bench` does) or set NIDUS_BIN", beside.display());
    }
    Ok(beside)
}

/// The binary of this runtime: `NIDUS_BIN_B` for the second build.
fn binary_of(rt: &Runtime) -> Result<PathBuf> {
    match rt.kind {
        super::Kind::NidusB => {
            std::env::var_os("NIDUS_BIN_B").map(PathBuf::from).context("the second nidus build needs NIDUS_BIN_B")
        }
        _ => binary(),
    }
}

fn config_path(rt: &Runtime) -> PathBuf {
    rt.dir.join("config.toml")
}

/// Writes the config; returns the daemon's command line.
pub fn prepare(rt: &Runtime) -> Result<(String, Vec<String>, bool)> {
    // The systemd driver makes scopes in the pods' slices, from the
    // hierarchy's root.
    let cgroup_root = match rt.kind {
        super::Kind::NidusSystemd => "/",
        _ => CGROUP_ROOT,
    };
    let config = format!(
        "socket = {:?}\nroot = {:?}\nstate = {:?}\ncgroup_root = {cgroup_root:?}\nlog_level = {:?}\n",
        rt.socket.display().to_string(),
        rt.dir.join("root").display().to_string(),
        rt.state.join("state").display().to_string(),
        std::env::var("BENCH_NIDUS_LOG").unwrap_or_else(|_| "info".into()),
    );
    let config = config + &extra_config(rt)? + &network_section(rt)? + &cgroup_section(rt);
    fs::write(config_path(rt), config)?;
    let program = binary_of(rt)?.display().to_string();
    Ok((program, vec!["serve".into(), "--config".into(), config_path(rt).display().to_string()], false))
}

/// TOML appended to this daemon's config: the file `BENCH_NIDUS_CONFIG`
/// names (`BENCH_NIDUS_B_CONFIG` for the second build), e.g. a `[hooks]`
/// section; nothing when unset.
fn extra_config(rt: &Runtime) -> Result<String> {
    let variable = match rt.kind {
        super::Kind::NidusB => "BENCH_NIDUS_B_CONFIG",
        _ => "BENCH_NIDUS_CONFIG",
    };
    match std::env::var_os(variable) {
        Some(path) => fs::read_to_string(&path).with_context(|| format!("reading {variable} {path:?}")),
        None => Ok(String::new()),
    }
}

/// The `[network]` section: no pod network (pods with their own namespace
/// get loopback only, as before networking existed), the bench's bridge CNI
/// list, or the built-in network; none for the second build.
fn network_section(rt: &Runtime) -> Result<String> {
    // The second build may predate the section (an A/B against an older
    // nidus): it gets none; `BENCH_NIDUS_B_CONFIG` can carry one.
    if rt.kind == super::Kind::NidusB {
        return Ok(String::new());
    }
    let conf_dir = rt.dir.join("cni-conf");
    fs::create_dir_all(&conf_dir)?;
    let builtin = match rt.kind {
        super::Kind::NidusBuiltin => "auto",
        super::Kind::NidusCni => {
            super::network::write_conflist(&conf_dir, &rt.dir.join("cni-leases"))?;
            "off"
        }
        _ => "off",
    };
    Ok(format!(
        "[network]\ncni_conf_dir = {:?}\ncni_bin_dirs = [{:?}]\nbuiltin = {builtin:?}\npod_cidr = \"10.88.0.0/16\"\n",
        conf_dir.display().to_string(),
        super::network::CNI_BIN_DIR,
    ))
}

/// The `[cgroup]` section: the systemd driver for `NidusSystemd`, none
/// otherwise (a relative cgroup root makes nidus's `auto` choose cgroupfs).
fn cgroup_section(rt: &Runtime) -> String {
    match rt.kind {
        super::Kind::NidusSystemd => "[cgroup]\ndriver = \"systemd\"\n".to_string(),
        _ => String::new(),
    }
}

pub fn import(rt: &Runtime, image: &Image) -> Result<()> {
    let source = image.layout.as_ref().unwrap_or(&image.archive).display().to_string();
    let config = config_path(rt).display().to_string();
    let program = binary_of(rt)?.display().to_string();
    host::run(&program, &["image", "import", &source, "--config", &config])?;
    Ok(())
}

/// Directories holding one entry per pod or container (or pod network
/// attachment and built-in address lease).
pub fn state_dirs(rt: &Runtime) -> Vec<PathBuf> {
    let (root, state) = (rt.dir.join("root"), rt.state.join("state"));
    vec![
        root.join("sandboxes"),
        root.join("containers"),
        state.join("sandboxes"),
        state.join("containers"),
        root.join("network/attachments"),
        root.join("network/builtin/leases"),
    ]
}
