//! AppArmor on this node: whether the kernel enforces it
//! (`/sys/module/apparmor/parameters/enabled`), which profiles are loaded
//! (`/sys/kernel/security/apparmor/profiles`), loading nidus's default
//! profile (`profile.rs`) with `apparmor_parser`, and asking for a profile
//! at a process's next execve (the `exec` attribute under `/proc`).

pub(crate) mod profile;

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The profile RuntimeDefault containers get (and the unset ones, unless
/// privileged), written by nidus (`profile.rs`).
pub const DEFAULT_PROFILE: &str = "nidus-default";

const ENABLED: &str = "/sys/module/apparmor/parameters/enabled";
/// AppArmor's directory in securityfs: without it no profile can be listed or loaded.
const SECURITYFS_DIR: &str = "/sys/kernel/security/apparmor";
const PROFILES: &str = "/sys/kernel/security/apparmor/profiles";

#[derive(Debug, thiserror::Error)]
pub enum AppArmorError {
    #[error("reading the loaded AppArmor profiles ({PROFILES}): {0}")]
    Profiles(std::io::Error),
    #[error("loading the AppArmor profile {profile}: apparmor_parser is not installed (looked in $PATH, /usr/sbin and /sbin)")]
    NoParser { profile: String },
    #[error("loading the AppArmor profile {profile} with {parser}: {why}")]
    Load { profile: String, parser: String, why: String },
    #[error("the AppArmor profile {profile} is still not loaded after apparmor_parser loaded it")]
    NotLoadedAfter { profile: String },
    #[error("asking for the AppArmor profile {profile} at exec: {why}")]
    Exec { profile: String, why: String },
}

/// Whether the kernel runs AppArmor (its module parameter reads `Y`).
pub fn kernel_enabled() -> bool {
    std::fs::read_to_string(ENABLED).is_ok_and(|s| s.trim().eq_ignore_ascii_case("y"))
}

/// Whether AppArmor can confine containers here: the kernel runs it and
/// its securityfs directory is there to list and load profiles (runc's
/// test too; a system without securityfs mounted, such as a bare
/// initramfs, has AppArmor in the kernel but no way to use it).
pub fn enabled() -> bool {
    kernel_enabled() && Path::new(SECURITYFS_DIR).is_dir()
}

/// The loaded profiles and their modes (`name (mode)` lines), as listed.
pub fn loaded_profiles() -> Result<Vec<(String, String)>, AppArmorError> {
    let text = std::fs::read_to_string(PROFILES).map_err(AppArmorError::Profiles)?;
    Ok(parse_profiles(&text))
}

fn parse_profiles(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let (name, mode) = line.trim_end().rsplit_once(" (")?;
            Some((name.to_string(), mode.strip_suffix(')')?.to_string()))
        })
        .collect()
}

/// The mode a loaded profile runs in (`enforce`, `complain`, …), None when
/// it is not loaded.
pub fn loaded_mode(name: &str) -> Result<Option<String>, AppArmorError> {
    Ok(loaded_profiles()?.into_iter().find(|(n, _)| n == name).map(|(_, mode)| mode))
}

/// Loads nidus's default profile unless it is loaded already; true when it
/// was loaded now.
pub fn ensure_default_loaded() -> Result<bool, AppArmorError> {
    if loaded_mode(DEFAULT_PROFILE)?.is_some() {
        return Ok(false);
    }
    load(DEFAULT_PROFILE, &profile::default_profile(DEFAULT_PROFILE))?;
    if loaded_mode(DEFAULT_PROFILE)?.is_none() {
        return Err(AppArmorError::NotLoadedAfter { profile: DEFAULT_PROFILE.into() });
    }
    Ok(true)
}

/// `apparmor_parser`, from `$PATH` or the usual sbin directories.
fn parser() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|dir| dir.join("apparmor_parser"))
        .find(|candidate| candidate.is_file())
}

/// Compiles and loads (or replaces) a profile from its text, without the
/// parser's cache (`apparmor_parser -K -r`, the text on stdin).
fn load(name: &str, text: &str) -> Result<(), AppArmorError> {
    let parser = parser().ok_or_else(|| AppArmorError::NoParser { profile: name.into() })?;
    let load_error =
        |why: String| AppArmorError::Load { profile: name.into(), parser: parser.display().to_string(), why };
    let mut child = Command::new(&parser)
        .args(["-K", "-r"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| load_error(e.to_string()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(text.as_bytes()).map_err(|e| load_error(format!("writing the profile: {e}")))?;
    }
    let out = child.wait_with_output().map_err(|e| load_error(e.to_string()))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        return Err(load_error(format!("{} ({})", out.status, said.trim())));
    }
    Ok(())
}

/// A profile to ask for at the next execve, with the procfs it is asked
/// through (opened while that procfs is trustworthy: the node's before an
/// exec joins a container, the container's own just after its init
/// mounted it).
pub struct ExecProfile {
    proc_dir: OwnedFd,
    profile: String,
}

impl ExecProfile {
    /// `proc` is the path of a procfs mount in reach now.
    pub fn open(proc: &Path, profile: &str) -> Result<Self, AppArmorError> {
        let exec_error = |why: String| AppArmorError::Exec { profile: profile.into(), why };
        let flags = nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC;
        let proc_dir = nix::fcntl::open(proc, flags, nix::sys::stat::Mode::empty())
            .map_err(|e| exec_error(format!("{}: {e}", proc.display())))?;
        let fs = nix::sys::statfs::fstatfs(&proc_dir).map_err(|e| exec_error(format!("{}: {e}", proc.display())))?;
        if fs.filesystem_type() != nix::sys::statfs::PROC_SUPER_MAGIC {
            return Err(exec_error(format!("{} is not a procfs", proc.display())));
        }
        Ok(Self { proc_dir, profile: profile.into() })
    }

    pub fn profile(&self) -> &str {
        &self.profile
    }

    /// Writes `exec <profile>` to this thread's exec attribute (the
    /// AppArmor one of kernels ≥ 5.8, else the legacy shared one): the
    /// kernel confines the process at its next execve. An unconfined
    /// process needs no capability for it.
    pub fn apply(&self) -> Result<(), AppArmorError> {
        let exec_error = |why: String| AppArmorError::Exec { profile: self.profile.clone(), why };
        let flags = nix::fcntl::OFlag::O_WRONLY | nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NOFOLLOW;
        let mut last = None;
        for attr in ["thread-self/attr/apparmor/exec", "thread-self/attr/exec"] {
            match nix::fcntl::openat(self.proc_dir.as_fd(), attr, flags, nix::sys::stat::Mode::empty()) {
                Ok(fd) => {
                    let fs = nix::sys::statfs::fstatfs(&fd).map_err(|e| exec_error(format!("/proc/{attr}: {e}")))?;
                    if fs.filesystem_type() != nix::sys::statfs::PROC_SUPER_MAGIC {
                        return Err(exec_error(format!("/proc/{attr} is not on procfs")));
                    }
                    let mut file = std::fs::File::from(fd);
                    return file
                        .write_all(format!("exec {}", self.profile).as_bytes())
                        .map_err(|e| exec_error(format!("writing /proc/{attr}: {e}")));
                }
                Err(e) => last = Some(format!("/proc/{attr}: {e}")),
            }
        }
        Err(exec_error(last.unwrap_or_default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profiles_list_gives_names_and_modes() {
        let text = "nidus-default (enforce)\n/usr/bin/man (complain)\nodd name (x) (enforce)\n\n";
        assert_eq!(
            parse_profiles(text),
            vec![
                ("nidus-default".into(), "enforce".into()),
                ("/usr/bin/man".into(), "complain".into()),
                ("odd name (x)".into(), "enforce".into()),
            ]
        );
    }
}
