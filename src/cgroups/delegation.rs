//! cgroup v2's "no internal processes" rule and a relative cgroup root: a v2
//! cgroup that hands controllers to its children cannot hold processes, so
//! the cgroup nidus was started in (the base of a relative root) is emptied by
//! moving nidus into the leaf `<base>/nidus-daemon`, and a nidus started in
//! that leaf (a restart) resolves its relative root against the leaf's parent.

use std::fs;
use std::io;
use std::path::Path;

use super::CgroupError;

/// The leaf a v2 daemon lives in, below the base of its relative root
/// (systemd: `DelegateSubgroup=nidus-daemon` starts it there directly).
pub const DAEMON_LEAF: &str = "nidus-daemon";

/// The cgroup (path in the hierarchy) a relative root is resolved against:
/// the daemon's own, or its parent when the daemon already lives in its leaf.
pub(crate) fn relative_root_base(own: &str) -> &str {
    match own.strip_suffix(DAEMON_LEAF) {
        Some(parent) if parent.ends_with('/') => match parent.trim_end_matches('/') {
            "" => "/",
            trimmed => trimmed,
        },
        _ => own,
    }
}

/// Makes `base` (a directory of the unified hierarchy) able to give its
/// controllers to children: when this process is the only one in it, it moves
/// into `base/nidus-daemon`; other processes there make that impossible.
/// Then every controller `base` has is enabled for its children.
pub(crate) fn make_delegatable(base: &Path, is_root: bool) -> Result<(), CgroupError> {
    let detect = |what: &Path| {
        let what = what.display().to_string();
        move |source| CgroupError::Detect { what, source }
    };
    if !is_root {
        let procs_file = base.join("cgroup.procs");
        let procs = fs::read_to_string(&procs_file).map_err(detect(&procs_file))?;
        let me = std::process::id() as i32;
        let others: Vec<i32> = procs.lines().filter_map(|l| l.trim().parse().ok()).filter(|p| *p != me).collect();
        if !others.is_empty() {
            return Err(CgroupError::NotDelegatable { dir: base.to_path_buf(), pids: others });
        }
        if procs.lines().any(|l| l.trim().parse::<i32>().ok() == Some(me)) {
            let leaf = base.join(DAEMON_LEAF);
            match fs::create_dir(&leaf) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(source) => return Err(CgroupError::Create { path: leaf, source }),
            }
            let leaf_procs = leaf.join("cgroup.procs");
            fs::write(&leaf_procs, me.to_string()).map_err(detect(&leaf_procs))?;
            tracing::info!(leaf = %leaf.display(), "moved into a leaf cgroup so that {} can delegate controllers (cgroup v2)", base.display());
        }
    }
    enable_controllers(base);
    Ok(())
}

/// Enables for `dir`'s children every controller `dir` has (best effort: a
/// controller that cannot be enabled is logged and left out).
pub(crate) fn enable_controllers(dir: &Path) {
    let available = fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    let enabled = fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    for controller in available.split_whitespace() {
        if enabled.split_whitespace().any(|c| c == controller) {
            continue;
        }
        if let Err(e) = fs::write(dir.join("cgroup.subtree_control"), format!("+{controller}")) {
            tracing::debug!(cgroup = %dir.display(), controller, error = %e, "cannot delegate controller");
        }
    }
}

/// Controllers a pod needs; without them limits fail at create.
const NEEDED: &[&str] = &["cpu", "memory", "pids"];

/// Says so at start when nidus's v2 root lacks a controller pods need (its
/// parents did not delegate it), rather than at every CreateContainer.
pub(crate) fn warn_about_missing_controllers(root: &Path) {
    let available = fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
    let missing: Vec<&str> =
        NEEDED.iter().copied().filter(|c| !available.split_whitespace().any(|a| a == *c)).collect();
    if !missing.is_empty() {
        tracing::warn!(
            root = %root.display(),
            ?missing,
            "cgroup v2: these controllers are not delegated to nidus's cgroup root; limits on them will fail"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_daemon_in_its_leaf_resolves_against_the_parent() {
        assert_eq!(relative_root_base("/tests/nidus-daemon"), "/tests");
        assert_eq!(relative_root_base("/nidus-daemon"), "/");
        assert_eq!(relative_root_base("/tests"), "/tests");
        assert_eq!(relative_root_base("/tests/not-nidus-daemon"), "/tests/not-nidus-daemon");
        assert_eq!(relative_root_base("/"), "/");
    }
}
