//! A container's confinement as CRI asks for it: which seccomp profile it
//! gets (the container's setting over the pod's, the structured `seccomp`
//! field over the legacy `seccomp_profile_path` string, privileged =
//! unconfined as in Kubernetes, nothing set = `[container]
//! unset_seccomp_profile`, unconfined by default as in containerd), and what
//! it asked of AppArmor and SELinux (accepted and reported; nidus enforces
//! neither). Pure decisions, plus the status record they leave.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::api::{self, security_profile::ProfileType, SecurityProfile};
use crate::seccomp::choice::{field_error, localhost_path, LOCALHOST_PREFIX};
pub(crate) use crate::seccomp::choice::{from_legacy_path, FieldError, SeccompChoice};
use crate::seccomp::program::ProgramSummary;

/// The structured field.
fn from_profile(field: &str, profile: &SecurityProfile) -> Result<SeccompChoice, FieldError> {
    let kind = ProfileType::try_from(profile.profile_type)
        .map_err(|_| field_error(&format!("{field}.profile_type"), format!("unknown type {}", profile.profile_type)))?;
    match kind {
        ProfileType::Localhost => {
            Ok(SeccompChoice::Localhost(localhost_path(&format!("{field}.localhost_ref"), &profile.localhost_ref)?))
        }
        _ if !profile.localhost_ref.is_empty() => {
            Err(field_error(&format!("{field}.localhost_ref"), "may only be set when profile_type is Localhost"))
        }
        ProfileType::RuntimeDefault => Ok(SeccompChoice::RuntimeDefault),
        ProfileType::Unconfined => Ok(SeccompChoice::Unconfined),
    }
}

/// The pod's side of the decision (its sandbox security context).
pub(crate) fn pod_seccomp(sc: &api::LinuxSandboxSecurityContext) -> Result<Option<SeccompChoice>, FieldError> {
    const FIELD: &str = "config.linux.security_context";
    if let Some(profile) = &sc.seccomp {
        return from_profile(&format!("{FIELD}.seccomp"), profile).map(Some);
    }
    from_legacy_path(&format!("{FIELD}.seccomp_profile_path"), &sc.seccomp_profile_path)
}

/// Which profile a container gets, and which setting decided it.
pub(crate) fn seccomp_choice(
    container: &api::LinuxContainerSecurityContext,
    pod: Option<&api::LinuxSandboxSecurityContext>,
    unset_profile: &str,
) -> Result<(SeccompChoice, &'static str), FieldError> {
    const FIELD: &str = "config.linux.security_context";
    // Checked even when privileged, so a bad request is refused either way.
    let own = match &container.seccomp {
        Some(profile) => Some(from_profile(&format!("{FIELD}.seccomp"), profile)?),
        None => None,
    };
    let own_legacy = from_legacy_path(&format!("{FIELD}.seccomp_profile_path"), &container.seccomp_profile_path)?;
    if container.privileged {
        return Ok((SeccompChoice::Unconfined, "config.linux.security_context.privileged"));
    }
    if let Some(choice) = own {
        return Ok((choice, "config.linux.security_context.seccomp"));
    }
    if let Some(choice) = own_legacy {
        return Ok((choice, "config.linux.security_context.seccomp_profile_path"));
    }
    if let Some(sc) = pod {
        // The sandbox's config was checked when the pod was made.
        if let Ok(Some(choice)) = pod_seccomp(sc) {
            let source = if sc.seccomp.is_some() {
                "the pod's linux.security_context.seccomp"
            } else {
                "the pod's linux.security_context.seccomp_profile_path"
            };
            return Ok((choice, source));
        }
    }
    let default = from_legacy_path("container.unset_seccomp_profile (config)", unset_profile)?;
    Ok((default.unwrap_or(SeccompChoice::Unconfined), "container.unset_seccomp_profile (config)"))
}

/// What a container's status says about its seccomp profile.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SeccompReport {
    /// `Unconfined`, `RuntimeDefault` or `Localhost`.
    pub(crate) profile: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) localhost_ref: Option<PathBuf>,
    /// The setting that decided it.
    pub(crate) source: String,
    /// The compiled program (none when unconfined).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) program: Option<ProgramSummary>,
}

/// What a container asked of a Linux security module nidus does not enforce.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LsmReport {
    /// What the config asked for ("" when nothing).
    pub(crate) requested: String,
    pub(crate) enforced: bool,
    /// Whether the node runs this security module at all.
    pub(crate) host_has_module: bool,
}

/// The confinement of a container, kept in its record for status.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SecurityReport {
    pub(crate) seccomp: SeccompReport,
    pub(crate) apparmor: LsmReport,
    pub(crate) selinux: LsmReport,
}

/// The AppArmor request of a container, as text ("" when none).
pub(crate) fn apparmor_request(sc: &api::LinuxContainerSecurityContext) -> String {
    match &sc.apparmor {
        Some(p) => match ProfileType::try_from(p.profile_type) {
            Ok(ProfileType::Localhost) => format!("localhost/{}", p.localhost_ref.trim_start_matches(LOCALHOST_PREFIX)),
            Ok(ProfileType::Unconfined) => "unconfined".into(),
            _ => "runtime/default".into(),
        },
        None => sc.apparmor_profile.clone(),
    }
}

/// The SELinux options of a container, as text ("" when none).
pub(crate) fn selinux_request(sc: &api::LinuxContainerSecurityContext) -> String {
    sc.selinux_options
        .as_ref()
        .map(|o| [o.user.as_str(), o.role.as_str(), o.r#type.as_str(), o.level.as_str()].join(":"))
        .filter(|s| s != ":::")
        .unwrap_or_default()
}

/// The security modules the node runs (read from sysfs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct HostModules {
    pub(crate) apparmor: bool,
    pub(crate) selinux: bool,
}

impl HostModules {
    pub(crate) fn detect() -> Self {
        let apparmor = std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
            .map(|s| s.trim().eq_ignore_ascii_case("y"))
            .unwrap_or(false);
        let selinux = Path::new("/sys/fs/selinux/enforce").exists();
        Self { apparmor, selinux }
    }
}

/// The AppArmor and SELinux parts of a container's report: accepted, never
/// enforced by nidus.
pub(crate) fn lsm_reports(sc: &api::LinuxContainerSecurityContext, host: HostModules) -> (LsmReport, LsmReport) {
    (
        LsmReport { requested: apparmor_request(sc), enforced: false, host_has_module: host.apparmor },
        LsmReport { requested: selinux_request(sc), enforced: false, host_has_module: host.selinux },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(kind: ProfileType, reference: &str) -> Option<SecurityProfile> {
        Some(SecurityProfile { profile_type: kind as i32, localhost_ref: reference.into() })
    }

    fn container(seccomp: Option<SecurityProfile>, path: &str) -> api::LinuxContainerSecurityContext {
        api::LinuxContainerSecurityContext { seccomp, seccomp_profile_path: path.into(), ..Default::default() }
    }

    #[test]
    fn the_container_setting_wins_and_structured_beats_legacy() {
        let pod = api::LinuxSandboxSecurityContext {
            seccomp: profile(ProfileType::RuntimeDefault, ""),
            ..Default::default()
        };
        // v1alpha2 kubelets send both forms; the structured one decides.
        let c = container(profile(ProfileType::Localhost, "/p/a.json"), "runtime/default");
        assert_eq!(
            seccomp_choice(&c, Some(&pod), "").unwrap(),
            (SeccompChoice::Localhost("/p/a.json".into()), "config.linux.security_context.seccomp")
        );
        let c = container(None, "localhost//p/b.json");
        assert_eq!(seccomp_choice(&c, Some(&pod), "").unwrap().0, SeccompChoice::Localhost("/p/b.json".into()));
        let c = container(None, "");
        assert_eq!(
            seccomp_choice(&c, Some(&pod), "").unwrap(),
            (SeccompChoice::RuntimeDefault, "the pod's linux.security_context.seccomp")
        );
        let legacy_pod =
            api::LinuxSandboxSecurityContext { seccomp_profile_path: "unconfined".into(), ..Default::default() };
        assert_eq!(seccomp_choice(&c, Some(&legacy_pod), "runtime/default").unwrap().0, SeccompChoice::Unconfined);
    }

    #[test]
    fn unset_means_the_configured_default_unconfined_unless_changed() {
        let c = container(None, "");
        assert_eq!(
            seccomp_choice(&c, None, "").unwrap(),
            (SeccompChoice::Unconfined, "container.unset_seccomp_profile (config)")
        );
        assert_eq!(seccomp_choice(&c, None, "runtime/default").unwrap().0, SeccompChoice::RuntimeDefault);
        assert_eq!(seccomp_choice(&c, None, "docker/default").unwrap().0, SeccompChoice::RuntimeDefault);
        // An explicit RuntimeDefault message (profile_type 0) is not "unset".
        let c = container(profile(ProfileType::RuntimeDefault, ""), "");
        assert_eq!(seccomp_choice(&c, None, "").unwrap().0, SeccompChoice::RuntimeDefault);
    }

    #[test]
    fn privileged_runs_unconfined_but_bad_fields_are_still_refused() {
        let mut c = container(profile(ProfileType::RuntimeDefault, ""), "");
        c.privileged = true;
        assert_eq!(
            seccomp_choice(&c, None, "runtime/default").unwrap(),
            (SeccompChoice::Unconfined, "config.linux.security_context.privileged")
        );
        c.seccomp = profile(ProfileType::Localhost, "relative.json");
        assert!(seccomp_choice(&c, None, "").is_err());
    }

    #[test]
    fn bad_references_name_their_field() {
        let e = seccomp_choice(&container(profile(ProfileType::Localhost, ""), ""), None, "").unwrap_err();
        assert_eq!(e.field, "config.linux.security_context.seccomp.localhost_ref");
        let e = seccomp_choice(&container(profile(ProfileType::Localhost, "x/../y.json"), ""), None, "").unwrap_err();
        assert!(e.why.contains("absolute"));
        let e = seccomp_choice(&container(profile(ProfileType::Unconfined, "/a.json"), ""), None, "").unwrap_err();
        assert!(e.why.contains("only be set when profile_type is Localhost"));
        let e = seccomp_choice(&container(None, "localhost/rel.json"), None, "").unwrap_err();
        assert_eq!(e.field, "config.linux.security_context.seccomp_profile_path");
        let e = seccomp_choice(
            &container(Some(SecurityProfile { profile_type: 7, localhost_ref: String::new() }), ""),
            None,
            "",
        )
        .unwrap_err();
        assert_eq!(e.field, "config.linux.security_context.seccomp.profile_type");
    }

    #[test]
    fn apparmor_and_selinux_are_reported_not_enforced() {
        let sc = api::LinuxContainerSecurityContext {
            apparmor: profile(ProfileType::Localhost, "k8s-nginx"),
            apparmor_profile: "runtime/default".into(),
            selinux_options: Some(api::SeLinuxOption {
                user: "system_u".into(),
                role: "system_r".into(),
                r#type: "container_t".into(),
                level: "s0:c1,c2".into(),
            }),
            ..Default::default()
        };
        let (apparmor, selinux) = lsm_reports(&sc, HostModules::default());
        assert_eq!(apparmor.requested, "localhost/k8s-nginx");
        assert!(!apparmor.enforced && !apparmor.host_has_module);
        assert_eq!(selinux.requested, "system_u:system_r:container_t:s0:c1,c2");
        let legacy = api::LinuxContainerSecurityContext { apparmor_profile: "unconfined".into(), ..Default::default() };
        assert_eq!(apparmor_request(&legacy), "unconfined");
        assert_eq!(selinux_request(&legacy), "");
    }
}
