//! Request validation at the CRI edge: every field a request may get wrong is
//! checked here, and a bad one is answered with InvalidArgument naming it.

use std::collections::HashMap;
use std::path::Path;

use tonic::Status;

use crate::api::{self, NamespaceMode, PodSandboxConfig};
use crate::cgroups::CgroupPath;
use crate::config::has_dot_dot;
use crate::linux::namespaces::NewNamespaces;
use crate::pod::files::{validate_hostname, DnsSpec};
use crate::pod::manager::pod_hostname;
use crate::pod::{sysctl, SandboxSpec};

use super::errors::invalid;

const MAX_NAME: usize = 253;
const MAX_UID: usize = 256;
const MAX_MAP_BYTES: usize = 256 * 1024;
const MAX_PATH: usize = 4096;

/// An id field: required, an id or unique id prefix.
pub fn id<'a>(field: &str, value: &'a str) -> Result<&'a str, Status> {
    if value.is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    if !crate::ids::looks_like_id(value) {
        return Err(invalid(field, format!("{value:?} is not an id (1 to 64 hexadecimal digits)")));
    }
    Ok(value)
}

fn name(field: &str, value: &str, max: usize) -> Result<(), Status> {
    if value.is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    if value.len() > max {
        return Err(invalid(field, format!("longer than {max} bytes")));
    }
    if value.chars().any(|c| c.is_control() || c == '/' || c.is_whitespace()) {
        return Err(invalid(field, "must not contain '/', whitespace or control characters"));
    }
    Ok(())
}

/// Labels and annotations: non-empty keys, bounded total size.
pub fn string_map(field: &str, map: &HashMap<String, String>) -> Result<(), Status> {
    let mut total = 0;
    for (k, v) in map {
        if k.is_empty() {
            return Err(invalid(field, "keys must not be empty"));
        }
        total += k.len() + v.len();
    }
    if total > MAX_MAP_BYTES {
        return Err(invalid(field, format!("larger than {MAX_MAP_BYTES} bytes in total")));
    }
    Ok(())
}

/// An absolute host path without `..`.
pub fn absolute_path(field: &str, value: &str) -> Result<(), Status> {
    if value.len() > MAX_PATH {
        return Err(invalid(field, format!("longer than {MAX_PATH} bytes")));
    }
    let path = Path::new(value);
    if !path.is_absolute() {
        return Err(invalid(field, format!("{value:?} must be an absolute path")));
    }
    if has_dot_dot(path) || value.contains('\0') {
        return Err(invalid(field, format!("{value:?} must not contain '..'")));
    }
    Ok(())
}

fn namespace_mode(field: &str, value: i32) -> Result<NamespaceMode, Status> {
    NamespaceMode::try_from(value).map_err(|_| invalid(field, format!("unknown namespace mode {value}")))
}

/// Builds the sandbox spec of a RunPodSandbox request.
pub fn sandbox_spec(config: Option<PodSandboxConfig>, runtime_handler: &str) -> Result<SandboxSpec, Status> {
    let config = config.ok_or_else(|| invalid("config", "is required"))?;
    if !runtime_handler.is_empty() {
        return Err(invalid(
            "runtime_handler",
            format!("{runtime_handler:?} is not configured; nidus has only the default handler \"\""),
        ));
    }
    let meta = config.metadata.as_ref().ok_or_else(|| invalid("config.metadata", "is required"))?;
    name("config.metadata.name", &meta.name, MAX_NAME)?;
    name("config.metadata.namespace", &meta.namespace, MAX_NAME)?;
    name("config.metadata.uid", &meta.uid, MAX_UID)?;
    string_map("config.labels", &config.labels)?;
    string_map("config.annotations", &config.annotations)?;
    if !config.log_directory.is_empty() {
        absolute_path("config.log_directory", &config.log_directory)?;
    }
    if !config.hostname.is_empty() {
        validate_hostname(&config.hostname).map_err(|e| invalid("config.hostname", e.why))?;
    }
    let dns = config
        .dns_config
        .as_ref()
        .map(|d| DnsSpec { servers: d.servers.clone(), searches: d.searches.clone(), options: d.options.clone() })
        .unwrap_or_default();
    dns.validate().map_err(|e| invalid(&format!("config.{}", e.field), e.why))?;
    for (i, pm) in config.port_mappings.iter().enumerate() {
        let field = format!("config.port_mappings[{i}]");
        if !(0..=65535).contains(&pm.container_port) || !(0..=65535).contains(&pm.host_port) {
            return Err(invalid(&field, "ports must be between 0 and 65535"));
        }
        if api::Protocol::try_from(pm.protocol).is_err() {
            return Err(invalid(&field, format!("unknown protocol {}", pm.protocol)));
        }
        if !pm.host_ip.is_empty() && pm.host_ip.parse::<std::net::IpAddr>().is_err() {
            return Err(invalid(&field, format!("host_ip {:?} is not an IP address", pm.host_ip)));
        }
    }

    let linux = config.linux.clone().unwrap_or_default();
    let options = linux.security_context.as_ref().and_then(|sc| sc.namespace_options.clone()).unwrap_or_default();
    let net = namespace_mode("config.linux.security_context.namespace_options.network", options.network)?;
    let pid = namespace_mode("config.linux.security_context.namespace_options.pid", options.pid)?;
    let ipc = namespace_mode("config.linux.security_context.namespace_options.ipc", options.ipc)?;
    // A sandbox's namespace is its own unless NODE: kubelet sends CONTAINER for
    // the PID namespace of pods that do not share one (each container then
    // gets its own); TARGET only makes sense for containers.
    for (field, mode) in [("network", net), ("pid", pid), ("ipc", ipc)] {
        if mode == NamespaceMode::Target {
            return Err(invalid(
                &format!("config.linux.security_context.namespace_options.{field}"),
                "TARGET is not a sandbox namespace mode (use POD, CONTAINER or NODE)",
            ));
        }
    }
    if let Some(userns) = &options.userns_options {
        if namespace_mode("config.linux.security_context.namespace_options.userns_options.mode", userns.mode)?
            != NamespaceMode::Node
        {
            return Err(Status::unimplemented(
                "config.linux.security_context.namespace_options.userns_options: user namespaces are not supported by nidus yet",
            ));
        }
    }
    let namespaces = NewNamespaces {
        net: net != NamespaceMode::Node,
        ipc: ipc != NamespaceMode::Node,
        uts: net != NamespaceMode::Node,
        pid: pid != NamespaceMode::Node,
    };
    let sysctls = sysctl::validate(&linux.sysctls, namespaces).map_err(|e| invalid("config.linux.sysctls", e))?;
    for s in &sysctls {
        if !Path::new("/proc/sys").join(&s.proc_path).exists() {
            return Err(invalid("config.linux.sysctls", format!("sysctl {:?} does not exist on this node", s.key)));
        }
    }
    let cgroup_parent = if linux.cgroup_parent.is_empty() {
        None
    } else {
        Some(CgroupPath::parse(&linux.cgroup_parent).map_err(|e| invalid("config.linux.cgroup_parent", e))?)
    };
    Ok(SandboxSpec {
        name_key: format!("{}_{}_{}_{}", meta.name, meta.namespace, meta.uid, meta.attempt),
        hostname: pod_hostname(&config.hostname),
        runtime_handler: runtime_handler.to_string(),
        namespaces,
        dns,
        sysctls,
        cgroup_parent,
        config,
    })
}
