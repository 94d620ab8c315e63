//! Helpers of the security tests: running `/bin/probe` (tests/programs/probe.c)
//! in a container through ExecSync, seccomp settings on configs, and
//! Localhost profile files.

use std::path::{Path, PathBuf};

use nidus::api::{security_profile::ProfileType, ContainerConfig, SecurityProfile};

use super::client::{security, Cri};

/// What one probe run printed, and its exit code.
#[derive(Debug, Clone)]
pub struct Probe {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Probe {
    /// The probe's one-line verdict: "ok …" or "errno=N (…)".
    pub fn line(&self) -> &str {
        self.stdout.lines().next().unwrap_or("")
    }

    pub fn ok(&self) -> bool {
        self.exit_code == 0 && self.line().starts_with("ok")
    }

    /// The errno it reported, if any.
    pub fn errno(&self) -> Option<i32> {
        self.stdout.split("errno=").nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    }
}

/// Runs `/bin/probe ARGS` in a running container.
pub async fn probe(cri: &mut Cri, id: &str, args: &[&str]) -> Probe {
    let mut cmd = vec!["/bin/probe"];
    cmd.extend_from_slice(args);
    let out = cri.exec(id, &cmd, 20).await.unwrap_or_else(|e| panic!("ExecSync {cmd:?}: {e}"));
    Probe {
        exit_code: out.exit_code,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Asserts the probe reported exactly `errno`.
pub async fn expect_errno(cri: &mut Cri, id: &str, args: &[&str], errno: i32) {
    let p = probe(cri, id, args).await;
    assert_eq!(p.errno(), Some(errno), "probe {args:?} in {id}: expected errno {errno}, got {p:?}");
}

/// Asserts the probe reported one of `errnos`.
pub async fn expect_errno_in(cri: &mut Cri, id: &str, args: &[&str], errnos: &[i32]) {
    let p = probe(cri, id, args).await;
    assert!(
        p.errno().is_some_and(|e| errnos.contains(&e)),
        "probe {args:?} in {id}: expected one of errnos {errnos:?}, got {p:?}"
    );
}

/// Asserts the probe succeeded.
pub async fn expect_ok(cri: &mut Cri, id: &str, args: &[&str]) -> Probe {
    let p = probe(cri, id, args).await;
    assert!(p.ok(), "probe {args:?} in {id}: expected success, got {p:?}");
    p
}

pub fn profile(kind: ProfileType, localhost_ref: &str) -> SecurityProfile {
    SecurityProfile { profile_type: kind as i32, localhost_ref: localhost_ref.into() }
}

/// Sets the structured seccomp field of a container config.
pub fn with_seccomp(mut config: ContainerConfig, kind: ProfileType, localhost_ref: &str) -> ContainerConfig {
    security(&mut config).seccomp = Some(profile(kind, localhost_ref));
    config
}

/// Writes a Localhost profile file under `dir`; returns its absolute path.
pub fn profile_file(dir: &Path, name: &str, json: &str) -> PathBuf {
    std::fs::create_dir_all(dir).expect("profile dir");
    let path = dir.join(name);
    std::fs::write(&path, json).expect("writing a seccomp profile");
    path
}

/// A field of /proc/self/status as the container sees it, e.g. "CapEff".
pub async fn status_field(cri: &mut Cri, id: &str, field: &str) -> String {
    let status = cri.exec_ok(id, &["cat", "/proc/self/status"]).await;
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status:\n{status}"))
}
