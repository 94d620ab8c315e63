//! Pod sysctls: only namespaced ones are allowed, and only when the pod has its
//! own namespace of that kind; everything else is refused with the key named.

use crate::linux::namespaces::NewNamespaces;

/// IPC-namespaced sysctls besides the `fs.mqueue.` family.
const IPC_SYSCTLS: &[&str] = &[
    "kernel.msgmax",
    "kernel.msgmnb",
    "kernel.msgmni",
    "kernel.sem",
    "kernel.shmall",
    "kernel.shmmax",
    "kernel.shmmni",
    "kernel.shm_rmid_forced",
];

const UTS_SYSCTLS: &[&str] = &["kernel.domainname"];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("sysctl {}: {why}", crate::quote::quote(.key))]
pub(crate) struct SysctlError {
    pub(crate) key: String,
    pub(crate) why: String,
}

/// One sysctl as the pause process writes it: a path below /proc/sys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sysctl {
    pub(crate) key: String,
    pub(crate) proc_path: String,
    pub(crate) value: String,
}

/// Checks every sysctl against the pod's namespaces and returns them in a
/// stable order.
pub(crate) fn validate<'a>(
    sysctls: impl IntoIterator<Item = (&'a String, &'a String)>,
    new: NewNamespaces,
) -> Result<Vec<Sysctl>, SysctlError> {
    let mut out = Vec::new();
    for (key, value) in sysctls {
        let err = |why: &str| SysctlError { key: key.clone(), why: why.to_string() };
        if key.is_empty() || key.len() > 256 {
            return Err(err("name must be 1 to 256 characters"));
        }
        if !key.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b))
            || key.split(['.', '/']).any(|s| s.is_empty() || s == "..")
        {
            return Err(err("not a valid sysctl name"));
        }
        if value.len() > 4096 || value.contains(['\n', '\0']) {
            return Err(err("value must be one line of at most 4096 bytes"));
        }
        // Names with '/' keep their dots (e.g. net/ipv4/conf/eth0.100/rp_filter).
        let (dotted, proc_path) =
            if key.contains('/') { (key.replace('/', "."), key.clone()) } else { (key.clone(), key.replace('.', "/")) };
        let allowed = if dotted.starts_with("net.") {
            if !new.net {
                return Err(err("net.* sysctls need the pod's own network namespace (not host network)"));
            }
            true
        } else if IPC_SYSCTLS.contains(&dotted.as_str()) || dotted.starts_with("fs.mqueue.") {
            if !new.ipc {
                return Err(err("IPC sysctls need the pod's own IPC namespace (not host IPC)"));
            }
            true
        } else if UTS_SYSCTLS.contains(&dotted.as_str()) {
            if !new.uts {
                return Err(err("UTS sysctls need the pod's own UTS namespace"));
            }
            true
        } else {
            false
        };
        if !allowed {
            return Err(err("not a namespaced sysctl; it would change the whole node"));
        }
        out.push(Sysctl { key: key.clone(), proc_path, value: value.clone() });
    }
    out.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const ALL: NewNamespaces = NewNamespaces { net: true, ipc: true, uts: true, pid: false };

    fn check(pairs: &[(&str, &str)], new: NewNamespaces) -> Result<Vec<Sysctl>, SysctlError> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        validate(&map, new)
    }

    #[test]
    fn namespaced_sysctls_pass() {
        let ok = check(&[("net.ipv4.ip_forward", "1"), ("kernel.shmmax", "1000"), ("fs.mqueue.msg_max", "20")], ALL)
            .unwrap();
        assert_eq!(ok.len(), 3);
        assert_eq!(ok.iter().find(|s| s.key == "kernel.shmmax").unwrap().proc_path, "kernel/shmmax");
        let slash = check(&[("net/ipv4/conf/eth0.100/rp_filter", "1")], ALL).unwrap();
        assert_eq!(slash[0].proc_path, "net/ipv4/conf/eth0.100/rp_filter");
    }

    #[test]
    fn node_wide_and_host_namespace_sysctls_are_refused() {
        assert!(check(&[("kernel.panic", "1")], ALL).unwrap_err().why.contains("namespaced"));
        assert!(check(&[("vm.swappiness", "1")], ALL).is_err());
        let host_net = NewNamespaces { net: false, ..ALL };
        assert!(check(&[("net.ipv4.ip_forward", "1")], host_net).unwrap_err().why.contains("network"));
        let host_ipc = NewNamespaces { ipc: false, ..ALL };
        assert!(check(&[("kernel.shmmax", "1")], host_ipc).is_err());
    }

    #[test]
    fn malformed_names_and_values_are_refused() {
        assert!(check(&[("net..x", "1")], ALL).is_err());
        assert!(check(&[("net.ipv4/../../x", "1")], ALL).is_err());
        assert!(check(&[("net.core.somaxconn", "1\n2")], ALL).is_err());
        assert!(check(&[("", "1")], ALL).is_err());
    }
}
