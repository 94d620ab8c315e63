//! Capabilities of a container: the default set (the one containerd and Docker
//! give), the CRI add/drop lists (with `ALL`), and privileged = every capability.

use std::collections::BTreeSet;

/// Every capability Linux defines, by name without the `CAP_` prefix, in number order.
pub(crate) const ALL: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// The default set of a non-privileged container.
pub const DEFAULT: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown capability {}", crate::quote::quote(.0))]
pub struct UnknownCapability(pub String);

/// Normalises `net_admin`, `CAP_NET_ADMIN` and `NET_ADMIN` to `NET_ADMIN`.
pub fn normalize(name: &str) -> Result<String, UnknownCapability> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    if bare == "ALL" || ALL.contains(&bare) {
        Ok(bare.to_string())
    } else {
        Err(UnknownCapability(name.to_string()))
    }
}

/// The capability set of a container, as `CAP_…` names. `add` applies after
/// `drop`, as in containerd: dropping ALL then adding one keeps that one.
pub fn container_set(privileged: bool, add: &[String], drop: &[String]) -> Result<BTreeSet<String>, UnknownCapability> {
    if privileged {
        return Ok(ALL.iter().map(|c| format!("CAP_{c}")).collect());
    }
    let add: Vec<String> = add.iter().map(|c| normalize(c)).collect::<Result<_, _>>()?;
    let drop: Vec<String> = drop.iter().map(|c| normalize(c)).collect::<Result<_, _>>()?;
    let mut set: BTreeSet<String> = DEFAULT.iter().map(|c| c.to_string()).collect();
    if drop.iter().any(|c| c == "ALL") {
        set.clear();
    }
    for c in &drop {
        set.remove(c);
    }
    if add.iter().any(|c| c == "ALL") {
        set.extend(ALL.iter().map(|c| c.to_string()));
    }
    set.extend(add.into_iter().filter(|c| c != "ALL"));
    Ok(set.into_iter().map(|c| format!("CAP_{c}")).collect())
}

/// Splits `wanted` into the capabilities this process holds (and so can give)
/// and those it lacks.
pub(crate) fn available(wanted: BTreeSet<String>) -> (BTreeSet<String>, Vec<String>) {
    let held: Vec<String> = ::caps::read(None, ::caps::CapSet::Permitted)
        .map(|set| set.iter().map(|c| c.to_string()).collect())
        .unwrap_or_default();
    let (kept, lacking): (BTreeSet<String>, BTreeSet<String>) = wanted.into_iter().partition(|c| held.contains(c));
    (kept, lacking.into_iter().collect())
}

/// The number of a capability named `CAP_…` (its bit in the kernel's masks).
pub(crate) fn number(name: &str) -> Option<u32> {
    let bare = name.strip_prefix("CAP_").unwrap_or(name);
    ALL.iter().position(|c| *c == bare).map(|i| i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn default_add_drop_and_all() {
        let default = container_set(false, &[], &[]).unwrap();
        assert_eq!(default.len(), 14);
        assert!(default.contains("CAP_NET_RAW"));
        let set = container_set(false, &strings(&["NET_ADMIN", "cap_sys_time"]), &strings(&["NET_RAW"])).unwrap();
        assert!(set.contains("CAP_NET_ADMIN") && set.contains("CAP_SYS_TIME") && !set.contains("CAP_NET_RAW"));
        let only = container_set(false, &strings(&["CHOWN"]), &strings(&["ALL"])).unwrap();
        assert_eq!(only.into_iter().collect::<Vec<_>>(), vec!["CAP_CHOWN"]);
        let everything = container_set(false, &strings(&["ALL"]), &[]).unwrap();
        assert_eq!(everything.len(), ALL.len());
        assert_eq!(container_set(true, &[], &strings(&["ALL"])).unwrap().len(), ALL.len());
        assert_eq!(container_set(false, &strings(&["BOGUS"]), &[]).unwrap_err(), UnknownCapability("BOGUS".into()));
    }

    #[test]
    fn numbers_match_the_kernel() {
        assert_eq!(number("CAP_CHOWN"), Some(0));
        assert_eq!(number("CAP_NET_RAW"), Some(13));
        assert_eq!(number("CAP_SYS_ADMIN"), Some(21));
        assert_eq!(number("CAP_CHECKPOINT_RESTORE"), Some(40));
        assert_eq!(number("CAP_NOPE"), None);
    }
}
