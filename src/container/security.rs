//! A container's confinement as CRI asks for it: which seccomp profile it
//! gets (the container's setting over the pod's, the structured `seccomp`
//! field over the legacy `seccomp_profile_path` string, privileged =
//! unconfined as in Kubernetes, nothing set = `[container]
//! unset_seccomp_profile`, unconfined by default as in containerd), which
//! AppArmor profile it runs under (the structured `apparmor` field over the
//! legacy `apparmor_profile` string; see `apparmor_profile`), and what it
//! asked of SELinux (accepted and reported, not enforced). Pure decisions,
//! plus the status record they leave.

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

/// What a container asked of a Linux security module, and what it got.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LsmReport {
    /// What the config asked for ("" when nothing).
    pub(crate) requested: String,
    pub(crate) enforced: bool,
    /// Whether the node runs this security module at all.
    pub(crate) host_has_module: bool,
    /// The profile the container's processes run under (AppArmor; none
    /// when unconfined).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) profile: Option<String>,
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

/// The AppArmor and SELinux parts of a container's report: the AppArmor
/// profile it runs under (`applied`, None when unconfined); SELinux options
/// accepted, never enforced by nidus.
pub(crate) fn lsm_reports(
    sc: &api::LinuxContainerSecurityContext,
    host: HostModules,
    applied: Option<&str>,
) -> (LsmReport, LsmReport) {
    (
        LsmReport {
            requested: apparmor_request(sc),
            enforced: applied.is_some(),
            host_has_module: host.apparmor,
            profile: applied.map(String::from),
        },
        LsmReport { requested: selinux_request(sc), enforced: false, host_has_module: host.selinux, profile: None },
    )
}

/// The AppArmor profile a container asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AppArmorChoice {
    /// Neither field set.
    Unset,
    Unconfined,
    RuntimeDefault,
    /// A profile loaded on the node, by name.
    Localhost(String),
}

/// The container's AppArmor request and the field that made it (the
/// structured one wins when both are set, as kubelet sends both).
pub(crate) fn apparmor_choice(
    sc: &api::LinuxContainerSecurityContext,
) -> Result<(AppArmorChoice, &'static str), FieldError> {
    const FIELD: &str = "config.linux.security_context.apparmor";
    const LEGACY: &str = "config.linux.security_context.apparmor_profile";
    if let Some(p) = &sc.apparmor {
        let kind = ProfileType::try_from(p.profile_type)
            .map_err(|_| field_error(&format!("{FIELD}.profile_type"), format!("unknown type {}", p.profile_type)))?;
        let choice = match kind {
            ProfileType::Localhost => AppArmorChoice::Localhost(apparmor_name(
                "config.linux.security_context.apparmor.localhost_ref",
                p.localhost_ref.strip_prefix(LOCALHOST_PREFIX).unwrap_or(&p.localhost_ref),
            )?),
            _ if !p.localhost_ref.is_empty() => {
                return Err(field_error(
                    &format!("{FIELD}.localhost_ref"),
                    "may only be set when profile_type is Localhost",
                ))
            }
            ProfileType::RuntimeDefault => AppArmorChoice::RuntimeDefault,
            ProfileType::Unconfined => AppArmorChoice::Unconfined,
        };
        return Ok((choice, FIELD));
    }
    let choice = match sc.apparmor_profile.as_str() {
        "" => AppArmorChoice::Unset,
        "runtime/default" => AppArmorChoice::RuntimeDefault,
        "unconfined" => AppArmorChoice::Unconfined,
        other => match other.strip_prefix(LOCALHOST_PREFIX) {
            Some(name) => AppArmorChoice::Localhost(apparmor_name(LEGACY, name)?),
            None => {
                return Err(field_error(
                    LEGACY,
                    format!(
                        "{} is none of runtime/default, unconfined and localhost/<profile>",
                        crate::quote::quote(other)
                    ),
                ))
            }
        },
    };
    Ok((choice, LEGACY))
}

/// A profile's name as the kernel takes it in `exec <name>`.
fn apparmor_name(field: &str, name: &str) -> Result<String, FieldError> {
    if name.is_empty() {
        return Err(field_error(field, "a Localhost AppArmor profile needs the name of a loaded profile"));
    }
    if name.len() > 4096 || name.chars().any(char::is_control) {
        return Err(field_error(field, format!("{} is not an AppArmor profile name", crate::quote::quote(name))));
    }
    Ok(name.to_string())
}

/// The AppArmor profile a container's processes run under (None:
/// unconfined), or why the create is refused. With AppArmor enabled,
/// RuntimeDefault — and nothing set, unless privileged — is `default`
/// (nidus's profile), privileged RuntimeDefault is unconfined as in
/// Kubernetes, and a Localhost profile must be loaded (`loaded` says).
/// Without AppArmor, RuntimeDefault and Unconfined run unconfined and a
/// Localhost profile is refused: a profile asked for is never ignored.
pub(crate) fn apparmor_profile(
    sc: &api::LinuxContainerSecurityContext,
    enabled: bool,
    default: &str,
    loaded: impl FnOnce(&str) -> Result<bool, String>,
) -> Result<Option<String>, FieldError> {
    let (choice, field) = apparmor_choice(sc)?;
    match choice {
        AppArmorChoice::Localhost(name) if !enabled => Err(field_error(
            field,
            format!(
                "the AppArmor profile {} cannot be applied: AppArmor is not enabled on this node",
                crate::quote::quote(&name)
            ),
        )),
        AppArmorChoice::Localhost(name) => match loaded(&name) {
            Ok(true) => Ok(Some(name)),
            Ok(false) => Err(field_error(
                field,
                format!(
                    "the AppArmor profile {} is not loaded on this node (load it with apparmor_parser)",
                    crate::quote::quote(&name)
                ),
            )),
            Err(why) => Err(field_error(
                field,
                format!("cannot tell whether the AppArmor profile {} is loaded: {why}", crate::quote::quote(&name)),
            )),
        },
        AppArmorChoice::Unconfined => Ok(None),
        AppArmorChoice::RuntimeDefault | AppArmorChoice::Unset if !enabled || sc.privileged => Ok(None),
        AppArmorChoice::RuntimeDefault | AppArmorChoice::Unset => Ok(Some(default.to_string())),
    }
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
    fn selinux_is_reported_not_enforced_apparmor_as_applied() {
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
        let (apparmor, selinux) = lsm_reports(&sc, HostModules::default(), None);
        assert_eq!(apparmor.requested, "localhost/k8s-nginx");
        assert!(!apparmor.enforced && !apparmor.host_has_module && apparmor.profile.is_none());
        let host = HostModules { apparmor: true, selinux: false };
        let (apparmor, _) = lsm_reports(&sc, host, Some("k8s-nginx"));
        assert!(apparmor.enforced && apparmor.host_has_module);
        assert_eq!(apparmor.profile.as_deref(), Some("k8s-nginx"));
        assert_eq!(selinux.requested, "system_u:system_r:container_t:s0:c1,c2");
        let legacy = api::LinuxContainerSecurityContext { apparmor_profile: "unconfined".into(), ..Default::default() };
        assert_eq!(apparmor_request(&legacy), "unconfined");
        assert_eq!(selinux_request(&legacy), "");
    }

    fn apparmor(kind: Option<ProfileType>, reference: &str, legacy: &str) -> api::LinuxContainerSecurityContext {
        api::LinuxContainerSecurityContext {
            apparmor: kind.and_then(|k| profile(k, reference)),
            apparmor_profile: legacy.into(),
            ..Default::default()
        }
    }

    fn decide(sc: &api::LinuxContainerSecurityContext, enabled: bool) -> Result<Option<String>, FieldError> {
        apparmor_profile(sc, enabled, "nidus-default", |name| Ok(name == "loaded"))
    }

    #[test]
    fn apparmor_structured_beats_legacy_and_unset_is_the_default() {
        let sc = apparmor(Some(ProfileType::Unconfined), "", "localhost/loaded");
        assert_eq!(
            apparmor_choice(&sc).unwrap(),
            (AppArmorChoice::Unconfined, "config.linux.security_context.apparmor")
        );
        let sc = apparmor(Some(ProfileType::Localhost), "localhost/loaded", "unconfined");
        assert_eq!(decide(&sc, true).unwrap().as_deref(), Some("loaded"));
        assert_eq!(decide(&apparmor(None, "", "localhost/loaded"), true).unwrap().as_deref(), Some("loaded"));
        for sc in [
            apparmor(None, "", ""),
            apparmor(None, "", "runtime/default"),
            apparmor(Some(ProfileType::RuntimeDefault), "", ""),
        ] {
            assert_eq!(decide(&sc, true).unwrap().as_deref(), Some("nidus-default"));
            assert_eq!(decide(&sc, false).unwrap(), None, "without AppArmor, as before");
            let privileged = api::LinuxContainerSecurityContext { privileged: true, ..sc };
            assert_eq!(decide(&privileged, true).unwrap(), None);
        }
        assert_eq!(decide(&apparmor(None, "", "unconfined"), true).unwrap(), None);
        assert_eq!(decide(&apparmor(None, "", "unconfined"), false).unwrap(), None);
    }

    #[test]
    fn apparmor_localhost_is_refused_unless_loaded_and_enabled() {
        let e = decide(&apparmor(Some(ProfileType::Localhost), "gone", ""), true).unwrap_err();
        assert_eq!(e.field, "config.linux.security_context.apparmor");
        assert!(e.why.contains("\"gone\"") && e.why.contains("not loaded"), "{e}");
        let e = decide(&apparmor(None, "", "localhost/loaded"), false).unwrap_err();
        assert_eq!(e.field, "config.linux.security_context.apparmor_profile");
        assert!(e.why.contains("AppArmor is not enabled on this node"), "{e}");
        let e = apparmor_profile(&apparmor(None, "", "localhost/x"), true, "d", |_| Err("no securityfs".into()))
            .unwrap_err();
        assert!(e.why.contains("no securityfs"), "{e}");
    }

    #[test]
    fn apparmor_bad_requests_name_their_field() {
        let e = apparmor_choice(&apparmor(Some(ProfileType::Localhost), "", "")).unwrap_err();
        assert_eq!(e.field, "config.linux.security_context.apparmor.localhost_ref");
        let e = apparmor_choice(&apparmor(Some(ProfileType::RuntimeDefault), "x", "")).unwrap_err();
        assert_eq!(e.field, "config.linux.security_context.apparmor.localhost_ref");
        let e = apparmor_choice(&apparmor(None, "", "docker-default")).unwrap_err();
        assert_eq!(e.field, "config.linux.security_context.apparmor_profile");
        let e = apparmor_choice(&apparmor(None, "", "localhost/a\nb")).unwrap_err();
        assert!(e.why.contains("not an AppArmor profile name"), "{e}");
        let e = apparmor_choice(&apparmor(Some(ProfileType::Localhost), "localhost/", "")).unwrap_err();
        assert!(e.why.contains("needs the name"), "{e}");
    }
}
