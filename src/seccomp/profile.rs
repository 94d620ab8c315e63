//! An OCI seccomp profile (runtime-spec `linux.seccomp`) as nidus reads it:
//! parsed with errors that say where and what is wrong, checked for what nidus
//! cannot honour (SCMP_ACT_NOTIFY and its flags), and resolved for one
//! container — the capability conditions nidus's own profiles may carry
//! (`ifCapabilities`, `unlessCapabilities`) are decided against the
//! container's bounding set and removed, leaving a plain OCI profile.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// What a syscall rule (or the default) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Action {
    /// libseccomp's old name for killing the thread.
    #[serde(rename = "SCMP_ACT_KILL")]
    Kill,
    #[serde(rename = "SCMP_ACT_KILL_THREAD")]
    KillThread,
    #[serde(rename = "SCMP_ACT_KILL_PROCESS")]
    KillProcess,
    #[serde(rename = "SCMP_ACT_TRAP")]
    Trap,
    #[serde(rename = "SCMP_ACT_ERRNO")]
    Errno,
    #[serde(rename = "SCMP_ACT_TRACE")]
    Trace,
    #[serde(rename = "SCMP_ACT_LOG")]
    Log,
    #[serde(rename = "SCMP_ACT_ALLOW")]
    Allow,
    /// Hands the call to a user-space agent: not supported by nidus.
    #[serde(rename = "SCMP_ACT_NOTIFY")]
    Notify,
}

impl Action {}

/// How an argument is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    #[serde(rename = "SCMP_CMP_NE")]
    Ne,
    #[serde(rename = "SCMP_CMP_LT")]
    Lt,
    #[serde(rename = "SCMP_CMP_LE")]
    Le,
    #[serde(rename = "SCMP_CMP_EQ")]
    Eq,
    #[serde(rename = "SCMP_CMP_GE")]
    Ge,
    #[serde(rename = "SCMP_CMP_GT")]
    Gt,
    /// `(arg & value) == valueTwo`.
    #[serde(rename = "SCMP_CMP_MASKED_EQ")]
    MaskedEq,
}

/// One argument condition of a rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Arg {
    pub index: u32,
    pub value: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_two: Option<u64>,
    pub op: Op,
}

/// One entry of `syscalls`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyscallRule {
    pub names: Vec<String>,
    pub action: Action,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno_ret: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<Arg>,
    /// nidus: the rule applies only when the container has all of these
    /// capabilities (in its bounding set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub if_capabilities: Vec<String>,
    /// nidus: the rule applies only when the container has none of these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unless_capabilities: Vec<String>,
}

/// A whole profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    pub default_action: Action,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_errno_ret: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) architectures: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) flags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) listener_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) listener_metadata: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub syscalls: Vec<SyscallRule>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProfileError {
    #[error("malformed JSON: {0}")]
    Malformed(String),
    #[error("{0} is not supported by nidus")]
    Unsupported(String),
    #[error("{0}")]
    Invalid(String),
}

/// Architecture names of the OCI runtime spec (libseccomp's).
pub(crate) const ARCHITECTURES: &[&str] = &[
    "SCMP_ARCH_NATIVE",
    "SCMP_ARCH_X86",
    "SCMP_ARCH_X86_64",
    "SCMP_ARCH_X32",
    "SCMP_ARCH_ARM",
    "SCMP_ARCH_AARCH64",
    "SCMP_ARCH_MIPS",
    "SCMP_ARCH_MIPS64",
    "SCMP_ARCH_MIPS64N32",
    "SCMP_ARCH_MIPSEL",
    "SCMP_ARCH_MIPSEL64",
    "SCMP_ARCH_MIPSEL64N32",
    "SCMP_ARCH_PPC",
    "SCMP_ARCH_PPC64",
    "SCMP_ARCH_PPC64LE",
    "SCMP_ARCH_S390",
    "SCMP_ARCH_S390X",
    "SCMP_ARCH_PARISC",
    "SCMP_ARCH_PARISC64",
    "SCMP_ARCH_RISCV64",
    "SCMP_ARCH_LOONGARCH64",
    "SCMP_ARCH_M68K",
    "SCMP_ARCH_SH",
    "SCMP_ARCH_SHEB",
];

/// Filter flags nidus passes to seccomp(2).
pub(crate) const SUPPORTED_FLAGS: &[(&str, u32)] =
    &[("SECCOMP_FILTER_FLAG_TSYNC", 1), ("SECCOMP_FILTER_FLAG_LOG", 2), ("SECCOMP_FILTER_FLAG_SPEC_ALLOW", 4)];

/// Flags that only make sense with a user-space agent (SCMP_ACT_NOTIFY).
const AGENT_FLAGS: &[&str] =
    &["SECCOMP_FILTER_FLAG_NEW_LISTENER", "SECCOMP_FILTER_FLAG_TSYNC_ESRCH", "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV"];

/// Largest errno a filter can return (the kernel's MAX_ERRNO).
pub(crate) const MAX_ERRNO: u32 = 4095;

impl Profile {
    /// Parses and checks a profile.
    pub fn parse(json: &[u8]) -> Result<Self, ProfileError> {
        let profile: Profile = serde_json::from_slice(json).map_err(|e| ProfileError::Malformed(e.to_string()))?;
        profile.check()?;
        Ok(profile)
    }

    fn check(&self) -> Result<(), ProfileError> {
        let unsupported_action = |where_: &str, action: Action| -> Result<(), ProfileError> {
            if action == Action::Notify {
                return Err(ProfileError::Unsupported(format!(
                    "{where_}: SCMP_ACT_NOTIFY (a user-space seccomp agent)"
                )));
            }
            Ok(())
        };
        unsupported_action("defaultAction", self.default_action)?;
        check_errno("defaultErrnoRet", self.default_errno_ret)?;
        for arch in &self.architectures {
            if !ARCHITECTURES.contains(&arch.as_str()) {
                return Err(ProfileError::Invalid(format!(
                    "architectures: unknown architecture {}",
                    crate::quote::quote(arch)
                )));
            }
        }
        for flag in &self.flags {
            if AGENT_FLAGS.contains(&flag.as_str()) {
                return Err(ProfileError::Unsupported(format!("flags: {flag} (a user-space seccomp agent)")));
            }
            if !SUPPORTED_FLAGS.iter().any(|(name, _)| name == flag) {
                return Err(ProfileError::Invalid(format!("flags: unknown flag {}", crate::quote::quote(flag))));
            }
        }
        if self.listener_path.as_deref().is_some_and(|p| !p.is_empty()) {
            return Err(ProfileError::Unsupported("listenerPath (a user-space seccomp agent)".into()));
        }
        for (i, rule) in self.syscalls.iter().enumerate() {
            let at = format!("syscalls[{i}]");
            unsupported_action(&at, rule.action)?;
            if rule.names.is_empty() {
                return Err(ProfileError::Invalid(format!("{at}.names is empty")));
            }
            if rule.names.iter().any(|n| n.is_empty()) {
                return Err(ProfileError::Invalid(format!("{at}.names holds an empty name")));
            }
            check_errno(&format!("{at}.errnoRet"), rule.errno_ret)?;
            for (j, arg) in rule.args.iter().enumerate() {
                if arg.index > 5 {
                    return Err(ProfileError::Invalid(format!(
                        "{at}.args[{j}].index {} is out of range (a syscall has arguments 0 to 5)",
                        arg.index
                    )));
                }
            }
            for cap in rule.if_capabilities.iter().chain(&rule.unless_capabilities) {
                if crate::capabilities::number(cap).is_none() {
                    return Err(ProfileError::Invalid(format!("{at}: unknown capability {cap:?}")));
                }
            }
        }
        Ok(())
    }

    /// The plain OCI profile one container gets: rules whose capability
    /// conditions its `bounding` set (`CAP_…` names) does not meet are
    /// dropped, and the conditions removed.
    pub fn resolve(&self, bounding: &BTreeSet<String>) -> Profile {
        let has = |cap: &String| bounding.contains(cap);
        let syscalls = self
            .syscalls
            .iter()
            .filter(|r| r.if_capabilities.iter().all(has) && !r.unless_capabilities.iter().any(has))
            .map(|r| SyscallRule { if_capabilities: Vec::new(), unless_capabilities: Vec::new(), ..r.clone() })
            .collect();
        Profile { syscalls, ..self.clone() }
    }

    /// The profile as the OCI runtime spec's type (for `config.json`).
    pub fn to_oci(&self) -> Result<oci_spec::runtime::LinuxSeccomp, ProfileError> {
        let json = serde_json::to_value(self).map_err(|e| ProfileError::Invalid(e.to_string()))?;
        serde_json::from_value(json).map_err(|e| ProfileError::Invalid(format!("not expressible as OCI: {e}")))
    }

    /// The canonical bytes of the profile (what its cache key hashes).
    pub fn canonical_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

fn check_errno(field: &str, value: Option<u32>) -> Result<(), ProfileError> {
    match value {
        Some(v) if v > MAX_ERRNO => Err(ProfileError::Invalid(format!("{field} {v} is larger than {MAX_ERRNO}"))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_plain_oci_profile() {
        let p = Profile::parse(
            br#"{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64"],
                 "syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO","errnoRet":13,
                              "args":[{"index":1,"value":448,"op":"SCMP_CMP_EQ"}]}]}"#,
        )
        .unwrap();
        assert_eq!(p.default_action, Action::Allow);
        assert_eq!(p.syscalls[0].errno_ret, Some(13));
        assert_eq!(p.syscalls[0].args[0].op, Op::Eq);
        // It round-trips through the OCI spec's own type.
        let oci = p.to_oci().unwrap();
        assert_eq!(oci.syscalls().as_ref().unwrap()[0].names(), &vec!["mkdir".to_string(), "mkdirat".into()]);
    }

    #[test]
    fn refuses_what_nidus_cannot_honour_naming_the_place() {
        let notify = Profile::parse(
            br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_NOTIFY"}]}"#,
        )
        .unwrap_err();
        assert!(matches!(&notify, ProfileError::Unsupported(m) if m.contains("syscalls[0]") && m.contains("NOTIFY")));
        let flag =
            Profile::parse(br#"{"defaultAction":"SCMP_ACT_ALLOW","flags":["SECCOMP_FILTER_FLAG_NEW_LISTENER"]}"#)
                .unwrap_err();
        assert!(matches!(flag, ProfileError::Unsupported(_)));
        let bad_flag = Profile::parse(br#"{"defaultAction":"SCMP_ACT_ALLOW","flags":["NOPE"]}"#).unwrap_err();
        assert!(matches!(bad_flag, ProfileError::Invalid(m) if m.contains("NOPE")));
        let index = Profile::parse(
            br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["read"],"action":"SCMP_ACT_ERRNO",
                 "args":[{"index":6,"value":0,"op":"SCMP_CMP_EQ"}]}]}"#,
        )
        .unwrap_err();
        assert!(matches!(index, ProfileError::Invalid(m) if m.contains("syscalls[0].args[0].index 6")));
        let errno = Profile::parse(br#"{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":70000}"#).unwrap_err();
        assert!(matches!(errno, ProfileError::Invalid(m) if m.contains("defaultErrnoRet")));
        let arch = Profile::parse(br#"{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_Z80"]}"#);
        assert!(matches!(arch, Err(ProfileError::Invalid(m)) if m.contains("SCMP_ARCH_Z80")));
    }

    #[test]
    fn malformed_json_says_where() {
        let e = Profile::parse(b"{\"defaultAction\": \"SCMP_ACT_ALLOW\",\n \"syscalls\": [}").unwrap_err();
        assert!(matches!(&e, ProfileError::Malformed(m) if m.contains("line 2")), "{e}");
        let e = Profile::parse(br#"{"defaultAction":"SCMP_ACT_MAYBE"}"#).unwrap_err();
        assert!(matches!(&e, ProfileError::Malformed(m) if m.contains("SCMP_ACT_MAYBE")), "{e}");
        let e = Profile::parse(br#"{"syscalls":[]}"#).unwrap_err();
        assert!(matches!(&e, ProfileError::Malformed(m) if m.contains("defaultAction")), "{e}");
    }

    #[test]
    fn capability_conditions_are_resolved_and_removed() {
        let p = Profile::parse(
            br#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[
                {"names":["read"],"action":"SCMP_ACT_ALLOW"},
                {"names":["mount"],"action":"SCMP_ACT_ALLOW","ifCapabilities":["CAP_SYS_ADMIN"]},
                {"names":["clone3"],"action":"SCMP_ACT_ERRNO","errnoRet":38,"unlessCapabilities":["CAP_SYS_ADMIN"]}]}"#,
        )
        .unwrap();
        let plain = p.resolve(&BTreeSet::from(["CAP_CHOWN".to_string()]));
        let names: Vec<&str> = plain.syscalls.iter().map(|r| r.names[0].as_str()).collect();
        assert_eq!(names, ["read", "clone3"]);
        assert!(plain.syscalls.iter().all(|r| r.unless_capabilities.is_empty()));
        let admin = p.resolve(&BTreeSet::from(["CAP_SYS_ADMIN".to_string()]));
        let names: Vec<&str> = admin.syscalls.iter().map(|r| r.names[0].as_str()).collect();
        assert_eq!(names, ["read", "mount"]);
        assert!(!String::from_utf8(admin.canonical_json()).unwrap().contains("Capabilities"));
        let bad = Profile::parse(
            br#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["x"],"action":"SCMP_ACT_ALLOW","ifCapabilities":["CAP_NOPE"]}]}"#,
        );
        assert!(matches!(bad, Err(ProfileError::Invalid(m)) if m.contains("CAP_NOPE")));
    }
}
