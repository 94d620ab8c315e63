//! Request validation at the CRI edge: every field a request may get wrong is
//! checked here, and a bad one is answered with InvalidArgument naming it.

use std::collections::HashMap;
use std::path::Path;

use tonic::Status;

use crate::api::{self, NamespaceMode, PodSandboxConfig};
use crate::cgroups::CgroupPath;
use crate::linux::namespaces::NewNamespaces;
use crate::linux::userns::{IdMap, IdMaps};
use crate::paths::has_dot_dot;
use crate::pod::files::{validate_hostname, DnsSpec};
use crate::pod::manager::pod_hostname;
use crate::pod::{sysctl, SandboxSpec};

use super::errors::invalid;
use crate::quote::quote;

const MAX_NAME: usize = 253;
const MAX_UID: usize = 256;
const MAX_MAP_BYTES: usize = 256 * 1024;
const MAX_PATH: usize = 4096;

/// An id field: required, an id or unique id prefix.
pub(crate) fn id<'a>(field: &str, value: &'a str) -> Result<&'a str, Status> {
    if value.is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    if !crate::ids::looks_like_id(value) {
        return Err(invalid(field, format!("{} is not an id (1 to 64 hexadecimal digits)", quote(value))));
    }
    super::instrument::record_id(field, value);
    Ok(value)
}

/// The id of a Stop or Remove call. These are idempotent: a string that
/// cannot be an id of ours (a UUID, say) names nothing, so `None` (done);
/// an empty one is still refused.
pub(crate) fn id_to_end<'a>(field: &str, value: &'a str) -> Result<Option<&'a str>, Status> {
    if value.is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    let id = crate::ids::looks_like_id(value).then_some(value);
    if let Some(id) = id {
        super::instrument::record_id(field, id);
    }
    Ok(id)
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

/// The `cmd` of ExecSync and Exec: a command named, no NUL byte anywhere.
pub(crate) fn exec_command(cmd: &[String]) -> Result<(), Status> {
    if cmd.first().is_none_or(|first| first.is_empty()) {
        return Err(invalid("cmd", "must name a command"));
    }
    if cmd.iter().any(|a| a.contains('\0')) {
        return Err(invalid("cmd", "must not contain a NUL byte"));
    }
    Ok(())
}

/// Labels and annotations: non-empty keys, bounded total size.
pub(crate) fn string_map(field: &str, map: &HashMap<String, String>) -> Result<(), Status> {
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
pub(crate) fn absolute_path(field: &str, value: &str) -> Result<(), Status> {
    if value.len() > MAX_PATH {
        return Err(invalid(field, format!("longer than {MAX_PATH} bytes")));
    }
    let path = Path::new(value);
    if !path.is_absolute() {
        return Err(invalid(field, format!("{} must be an absolute path", quote(value))));
    }
    if has_dot_dot(path) || value.contains('\0') {
        return Err(invalid(field, format!("{} must not contain '..'", quote(value))));
    }
    Ok(())
}

fn namespace_mode(field: &str, value: i32) -> Result<NamespaceMode, Status> {
    NamespaceMode::try_from(value).map_err(|_| invalid(field, format!("unknown namespace mode {value}")))
}

/// Builds the sandbox spec of a RunPodSandbox request.
pub(crate) fn sandbox_spec(config: Option<PodSandboxConfig>, runtime_handler: &str) -> Result<SandboxSpec, Status> {
    let config = config.ok_or_else(|| invalid("config", "is required"))?;
    if !runtime_handler.is_empty() {
        return Err(invalid(
            "runtime_handler",
            format!("{} is not configured; nidus has only the default handler \"\"", quote(runtime_handler)),
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
            return Err(invalid(&field, format!("host_ip {} is not an IP address", quote(&pm.host_ip))));
        }
    }

    let linux = config.linux.clone().unwrap_or_default();
    if let Some(sc) = &linux.security_context {
        crate::container::security::pod_seccomp(sc).map_err(|e| invalid(&e.field, e.why))?;
    }
    resources("config.linux.resources", linux.resources.as_ref())?;
    resources("config.linux.overhead", linux.overhead.as_ref())?;
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
    let userns = user_namespace(
        "config.linux.security_context.namespace_options.userns_options",
        options.userns_options.as_ref(),
    )?;
    let namespaces = NewNamespaces {
        net: net != NamespaceMode::Node,
        ipc: ipc != NamespaceMode::Node,
        uts: net != NamespaceMode::Node,
        pid: pid != NamespaceMode::Node,
    };
    let sysctls = sysctl::validate(&linux.sysctls, namespaces).map_err(|e| invalid("config.linux.sysctls", e))?;
    for s in &sysctls {
        if !Path::new("/proc/sys").join(&s.proc_path).exists() {
            return Err(invalid(
                "config.linux.sysctls",
                format!("sysctl {} does not exist on this node", quote(&s.key)),
            ));
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
        userns,
        dns,
        sysctls,
        cgroup_parent,
        config,
    })
}

/// A pod's user namespace: None for NODE (the node's) or none asked; POD
/// needs exactly one mapping of user IDs and one of group IDs, each mapping
/// container ID 0, of IDs this node has (the daemon's own user namespace
/// maps them: the kernel refuses others) and not the node's root (ID 0,
/// which would make the pod's root the node's). CONTAINER and TARGET are no
/// pod modes.
pub(crate) fn user_namespace(field: &str, options: Option<&api::UserNamespace>) -> Result<Option<IdMaps>, Status> {
    let Some(options) = options else { return Ok(None) };
    match namespace_mode(&format!("{field}.mode"), options.mode)? {
        NamespaceMode::Node => {
            if !options.uids.is_empty() || !options.gids.is_empty() {
                return Err(invalid(field, "mode NODE takes no uids or gids (the node's IDs are used)"));
            }
            Ok(None)
        }
        NamespaceMode::Pod => {
            let one = |kind: &str, maps: &[api::IdMapping]| -> Result<IdMap, Status> {
                let field = format!("{field}.{kind}");
                let [map] = maps else {
                    return Err(invalid(
                        &field,
                        format!("{} mappings given; a pod's user namespace takes exactly one", maps.len()),
                    ));
                };
                id_map(&field, map, kind)
            };
            Ok(Some(IdMaps { uids: one("uids", &options.uids)?, gids: one("gids", &options.gids)? }))
        }
        other => Err(invalid(
            &format!("{field}.mode"),
            format!("{other:?} is not supported for user namespaces (POD: one for the pod, or NODE)"),
        )),
    }
}

fn id_map(field: &str, map: &api::IdMapping, kind: &str) -> Result<IdMap, Status> {
    let (container_id, host_id, length) = (map.container_id, map.host_id, map.length);
    if length == 0 {
        return Err(invalid(field, "the length is 0"));
    }
    if container_id != 0 {
        return Err(invalid(field, format!("container ID 0 is not mapped (the range starts at {container_id})")));
    }
    let host_end = u64::from(host_id) + u64::from(length);
    if host_end > u64::from(u32::MAX) {
        return Err(invalid(field, format!("host IDs {host_id}..{host_end} pass the largest ID, {}", u32::MAX - 1)));
    }
    if host_id == 0 {
        return Err(invalid(field, "the range maps the node's root (host ID 0) into the pod"));
    }
    let own_map = if kind == "uids" { "/proc/self/uid_map" } else { "/proc/self/gid_map" };
    let own = std::fs::read_to_string(own_map).unwrap_or_default();
    if !crate::linux::userns::covered(&own, host_id, length) {
        return Err(invalid(
            field,
            format!(
                "host IDs {host_id}..{host_end} are not all IDs of this node's user namespace ({own_map}: {}); the kernel refuses to map them",
                own.split_whitespace().collect::<Vec<_>>().join(" ")
            ),
        ));
    }
    Ok(IdMap { container_id, host_id, length })
}

/// The options a bind mount takes (`Mount.mount_options`, KEP-5855).
pub(crate) const BIND_MOUNT_OPTIONS: &[&str] = &[
    "ro",
    "rw",
    "noexec",
    "exec",
    "nosuid",
    "suid",
    "nodev",
    "dev",
    "noatime",
    "atime",
    "relatime",
    "norelatime",
    "strictatime",
    "nostrictatime",
    "nodiratime",
    "diratime",
];

/// A container's user namespace is its pod's: the container may name it
/// (mode POD, with the pod's mappings or none) or leave it unsaid; a pod
/// without one has none to give (NODE, or nothing).
fn container_user_namespace(asked: Option<&api::UserNamespace>, pod: Option<&IdMaps>) -> Result<(), Status> {
    let field = "config.linux.security_context.namespace_options.userns_options";
    let Some(asked) = asked else { return Ok(()) };
    let mode = namespace_mode(&format!("{field}.mode"), asked.mode)?;
    match (mode, pod) {
        (NamespaceMode::Node, None) => Ok(()),
        (NamespaceMode::Node, Some(_)) => {
            Err(invalid(field, "the pod has a user namespace; its containers run in it, not in the node's"))
        }
        (NamespaceMode::Pod, None) => {
            Err(invalid(field, "the pod has no user namespace (it was made with the node's)"))
        }
        (NamespaceMode::Pod, Some(pod)) => {
            if asked.uids.is_empty() && asked.gids.is_empty() {
                return Ok(());
            }
            match user_namespace(field, Some(asked))? {
                Some(maps) if &maps == pod => Ok(()),
                _ => Err(invalid(field, "the mappings differ from the pod's user namespace")),
            }
        }
        (other, _) => Err(invalid(
            &format!("{field}.mode"),
            format!("{other:?} is not supported for user namespaces (a container runs in its pod's)"),
        )),
    }
}

/// A mount with ID mappings is idmapped through the pod's user namespace:
/// the pod must have one, and the mappings must be its own.
fn idmapped_mount(field: &str, mount: &api::Mount, pod: Option<&IdMaps>) -> Result<(), Status> {
    if mount.uid_mappings.is_empty() && mount.gid_mappings.is_empty() {
        return Ok(());
    }
    let Some(pod) = pod else {
        return Err(invalid(field, "uidMappings and gidMappings need a pod with a user namespace"));
    };
    let one = |kind: &str, maps: &[api::IdMapping]| -> Result<IdMap, Status> {
        match maps {
            [m] => Ok(IdMap { container_id: m.container_id, host_id: m.host_id, length: m.length }),
            _ => Err(invalid(&format!("{field}.{kind}"), format!("{} mappings given; one is supported", maps.len()))),
        }
    };
    let maps =
        IdMaps { uids: one("uidMappings", &mount.uid_mappings)?, gids: one("gidMappings", &mount.gid_mappings)? };
    if &maps != pod {
        return Err(invalid(field, "uidMappings and gidMappings must be the pod's user namespace's"));
    }
    Ok(())
}

/// Resource values (cpu, memory, hugepages, unified keys) below `field`.
pub(crate) fn resources(field: &str, r: Option<&api::LinuxContainerResources>) -> Result<(), Status> {
    match r {
        Some(r) => crate::resources::validate(r).map_err(|e| invalid(&format!("{field}.{}", e.field), e.why)),
        None => Ok(()),
    }
}

/// A relative path below a directory (the container's log_path): no `..`, not absolute.
fn relative_path(field: &str, value: &str) -> Result<(), Status> {
    if value.len() > MAX_PATH {
        return Err(invalid(field, format!("longer than {MAX_PATH} bytes")));
    }
    let path = Path::new(value);
    if path.is_absolute() || has_dot_dot(path) || value.contains('\0') {
        return Err(invalid(field, format!("{} must be a relative path without '..'", quote(value))));
    }
    Ok(())
}

/// Builds the container request of a CreateContainer call.
pub(crate) fn container_create(
    request: api::CreateContainerRequest,
    sandbox: crate::pod::SandboxView,
) -> Result<crate::container::ContainerCreate, Status> {
    use crate::capabilities;
    use crate::container::PidMode;
    let config = request.config.ok_or_else(|| invalid("config", "is required"))?;
    let meta = config.metadata.as_ref().ok_or_else(|| invalid("config.metadata", "is required"))?;
    name("config.metadata.name", &meta.name, MAX_NAME)?;
    let image = config.image.as_ref().map(|i| i.image.as_str()).unwrap_or_default();
    if image.is_empty() {
        return Err(invalid("config.image.image", "is required"));
    }
    if !config.working_dir.is_empty() {
        absolute_path("config.working_dir", &config.working_dir)?;
    }
    for (i, kv) in config.envs.iter().enumerate() {
        if kv.key.is_empty() || kv.key.contains(['=', '\0']) || kv.value.contains(&0) {
            return Err(invalid(
                &format!("config.envs[{i}]"),
                "keys must be non-empty without '=' and no NUL byte anywhere",
            ));
        }
    }
    for (i, arg) in config.command.iter().chain(&config.args).enumerate() {
        if arg.contains('\0') {
            return Err(invalid(&format!("config.command/args[{i}]"), "must not contain a NUL byte"));
        }
    }
    for (i, m) in config.mounts.iter().enumerate() {
        let field = format!("config.mounts[{i}]");
        absolute_path(&format!("{field}.container_path"), &m.container_path)?;
        let image_volume = m.image.as_ref().is_some_and(|img| !img.image.is_empty());
        if image_volume {
            // An image volume is read-only; its sub path is checked against the image at create.
            if !m.readonly {
                return Err(invalid(
                    &format!("{field}.readonly"),
                    "an image volume is read-only; readonly must be true",
                ));
            }
            if m.propagation != api::MountPropagation::PropagationPrivate as i32 {
                return Err(invalid(&format!("{field}.propagation"), "an image volume takes no propagation"));
            }
        } else if !m.image_sub_path.is_empty() {
            return Err(invalid(&format!("{field}.image_sub_path"), "is for image volumes (image) only"));
        }
        idmapped_mount(&field, m, sandbox.record.userns.as_ref())?;
        if m.recursive_read_only {
            if !m.readonly {
                return Err(invalid(&format!("{field}.recursive_read_only"), "needs readonly too"));
            }
            if m.propagation != api::MountPropagation::PropagationPrivate as i32 {
                return Err(invalid(
                    &format!("{field}.recursive_read_only"),
                    "needs propagation PRIVATE (what propagates into a read-only tree could not be read-only)",
                ));
            }
        }
        for (j, option) in m.mount_options.iter().enumerate() {
            if !BIND_MOUNT_OPTIONS.contains(&option.as_str()) {
                return Err(invalid(
                    &format!("{field}.mount_options[{j}]"),
                    format!("{} is not a bind mount option ({})", quote(option), BIND_MOUNT_OPTIONS.join(", ")),
                ));
            }
        }
        if !image_volume {
            absolute_path(&format!("{field}.host_path"), &m.host_path)?;
        }
        if api::MountPropagation::try_from(m.propagation).is_err() {
            return Err(invalid(&format!("{field}.propagation"), format!("unknown propagation {}", m.propagation)));
        }
    }
    for (i, d) in config.devices.iter().enumerate() {
        let field = format!("config.devices[{i}]");
        absolute_path(&format!("{field}.host_path"), &d.host_path)?;
        if !d.container_path.is_empty() {
            absolute_path(&format!("{field}.container_path"), &d.container_path)?;
        }
        if !d.permissions.chars().all(|c| "rwm".contains(c)) {
            return Err(invalid(&format!("{field}.permissions"), "only r, w and m are allowed"));
        }
    }
    // Names only; which devices they are is settled at create, against the spec files then.
    crate::cdi::requested(&config).map_err(|e| invalid(&e.field, e.why))?;
    string_map("config.labels", &config.labels)?;
    string_map("config.annotations", &config.annotations)?;
    if !config.log_path.is_empty() {
        relative_path("config.log_path", &config.log_path)?;
    }
    if api::Signal::try_from(config.stop_signal).is_err() {
        return Err(invalid("config.stop_signal", format!("unknown signal {}", config.stop_signal)));
    }
    resources("config.linux.resources", config.linux.as_ref().and_then(|l| l.resources.as_ref()))?;
    let sc = config.linux.as_ref().and_then(|l| l.security_context.clone()).unwrap_or_default();
    if let Some(c) = &sc.capabilities {
        for name in c.add_capabilities.iter().chain(&c.drop_capabilities).chain(&c.add_ambient_capabilities) {
            capabilities::normalize(name).map_err(|e| invalid("config.linux.security_context.capabilities", e))?;
        }
    }
    for (field, v) in [("run_as_user", sc.run_as_user.as_ref()), ("run_as_group", sc.run_as_group.as_ref())] {
        if let Some(v) = v {
            if u32::try_from(v.value).is_err() {
                return Err(invalid(
                    &format!("config.linux.security_context.{field}"),
                    format!("{} is not a valid id", v.value),
                ));
            }
        }
    }
    if sc.run_as_group.is_some() && sc.run_as_user.is_none() && sc.run_as_username.is_empty() {
        return Err(invalid(
            "config.linux.security_context.run_as_group",
            "is set without run_as_user or run_as_username (Kubernetes refuses it too)",
        ));
    }
    for g in &sc.supplemental_groups {
        if u32::try_from(*g).is_err() {
            return Err(invalid("config.linux.security_context.supplemental_groups", format!("{g} is not a valid id")));
        }
    }
    for (field, paths) in [("masked_paths", &sc.masked_paths), ("readonly_paths", &sc.readonly_paths)] {
        for p in paths {
            absolute_path(&format!("config.linux.security_context.{field}"), p)?;
        }
    }
    let pod_sc = sandbox.record.config.linux.as_ref().and_then(|l| l.security_context.as_ref());
    crate::container::security::seccomp_choice(&sc, pod_sc, "").map_err(|e| invalid(&e.field, e.why))?;
    let options = sc.namespace_options.clone().unwrap_or_default();
    let pid = match namespace_mode("config.linux.security_context.namespace_options.pid", options.pid)? {
        NamespaceMode::Container => PidMode::Own,
        NamespaceMode::Pod => PidMode::Pod,
        NamespaceMode::Node => PidMode::Node,
        NamespaceMode::Target => {
            let target = id("config.linux.security_context.namespace_options.target_id", &options.target_id)?;
            PidMode::Target(target.to_string())
        }
    };
    container_user_namespace(options.userns_options.as_ref(), sandbox.record.userns.as_ref())?;
    Ok(crate::container::ContainerCreate { name_key: format!("{}_{}", meta.name, meta.attempt), sandbox, pid, config })
}
