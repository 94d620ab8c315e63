//! CRI ContainerConfig + image config → the container's OCI runtime spec
//! (written as `config.json` for inspection and read by the monitor). Pure: no
//! I/O here, so every Kubernetes rule it encodes is unit-tested.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use oci_spec::runtime::{
    Capability, LinuxBuilder, LinuxCapabilitiesBuilder, LinuxDeviceBuilder, LinuxDeviceType, LinuxIdMappingBuilder,
    LinuxNamespaceBuilder, LinuxNamespaceType, Mount, MountBuilder, PosixRlimitBuilder, PosixRlimitType,
    ProcessBuilder, RootBuilder, Spec, SpecBuilder, UserBuilder,
};

use super::user::ResolvedUser;
use crate::api::{self, MountPropagation};
use crate::monitor::plan::IMAGE_VOLUME_TYPE;

/// The paths masked in a non-privileged container when the config names none.
pub const DEFAULT_MASKED_PATHS: &[&str] = &[
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// The paths made read-only in a non-privileged container when the config names none.
pub const DEFAULT_READONLY_PATHS: &[&str] = &["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"];

/// The pod's side of a container: its files and namespaces.
#[derive(Debug, Clone, Default)]
pub struct PodFacts {
    pub(crate) sandbox_id: String,
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) uid: String,
    /// The pod's hostname (its config's, or the node's): HOSTNAME in the environment.
    pub(crate) hostname: String,
    pub(crate) hostname_file: PathBuf,
    pub(crate) hosts_file: PathBuf,
    pub(crate) resolv_conf_file: PathBuf,
    /// The pod's /dev/shm (None: the node's, for host IPC).
    pub(crate) shm: Option<PathBuf>,
    /// Namespace files of the pause process; None where the pod uses the node's.
    pub(crate) net_ns: Option<PathBuf>,
    pub(crate) ipc_ns: Option<PathBuf>,
    pub(crate) uts_ns: Option<PathBuf>,
    pub pid_ns: Option<PathBuf>,
    /// The pod's user namespace (its file and ID maps), when it has one.
    pub(crate) user_ns: Option<(PathBuf, crate::linux::userns::IdMaps)>,
}

impl PodFacts {
    /// The facts of `sandbox`, whose pause process is `pause_pid`.
    pub fn of(sandbox: &crate::pod::SandboxView, pause_pid: i32) -> Self {
        let ns = |own: bool, kind: &str| own.then(|| PathBuf::from(format!("/proc/{pause_pid}/ns/{kind}")));
        let own = sandbox.record.namespaces;
        let meta = sandbox.record.config.metadata.clone().unwrap_or_default();
        PodFacts {
            sandbox_id: sandbox.record.id.clone(),
            name: meta.name,
            namespace: meta.namespace,
            uid: meta.uid,
            hostname: sandbox.record.hostname.clone(),
            hostname_file: sandbox.paths.hostname(),
            hosts_file: sandbox.paths.hosts(),
            resolv_conf_file: sandbox.paths.resolv_conf(),
            shm: sandbox.record.own_shm.then(|| sandbox.paths.shm()),
            net_ns: ns(own.net, "net"),
            ipc_ns: ns(own.ipc, "ipc"),
            uts_ns: ns(own.uts, "uts"),
            pid_ns: ns(own.pid, "pid"),
            user_ns: sandbox.record.userns.map(|maps| (PathBuf::from(format!("/proc/{pause_pid}/ns/user")), maps)),
        }
    }
}

/// How the container's PID namespace is chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PidNamespace {
    /// Its own (NamespaceMode CONTAINER).
    Own,
    /// Join this one (POD: the pause's; TARGET: another container's).
    Join(PathBuf),
    /// The node's.
    Node,
}

/// What the image says about the process.
#[derive(Debug, Clone, Default)]
pub struct ImageDefaults {
    pub(crate) entrypoint: Vec<String>,
    pub(crate) cmd: Vec<String>,
    pub(crate) env: Vec<String>,
    pub(crate) working_dir: String,
}

/// Everything the spec is made of.
#[derive(Debug, Clone)]
pub struct SpecInput<'a> {
    pub container_id: &'a str,
    pub config: &'a api::ContainerConfig,
    pub pod: &'a PodFacts,
    pub pid: PidNamespace,
    pub image: &'a ImageDefaults,
    pub image_name: &'a str,
    pub user: &'a ResolvedUser,
    pub capabilities: &'a BTreeSet<String>,
    /// Where the rootfs is mounted (inside the container's mount namespace).
    pub rootfs: &'a Path,
    /// The container cgroup, for `linux.cgroupsPath`.
    pub cgroups_path: &'a str,
    /// The oom_score_adj to ask for (None: inherit).
    pub oom_score_adj: Option<i32>,
    /// Devices from the config, resolved on the host.
    pub devices: &'a [HostDevice],
    /// Resource limits from the runtime's config.
    pub rlimits: &'a [crate::config::Rlimit],
    /// A pids limit for the container cgroup (`[container] pids_limit`; 0: none).
    pub pids_limit: i64,
    /// The config's image volumes, resolved: their layers and sub paths.
    pub image_volumes: &'a [ImageVolume],
}

/// An image mounted read-only at `container_path` (KEP-4639), as the
/// container's init mounts it: the image's unpacked layers (lowest first),
/// and the sub path to show instead of its root, with the scratch directory
/// where the whole image is mounted first then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageVolume {
    pub(crate) container_path: String,
    pub(crate) image_id: String,
    pub(crate) layers: Vec<PathBuf>,
    pub(crate) sub_path: Option<String>,
    pub(crate) scratch: PathBuf,
}

impl ImageVolume {
    /// Its entry in the spec's mounts: one `lowerdir+=` option per layer
    /// (lowest first), and the sub path and scratch directory when it shows one.
    fn to_mount(&self) -> Result<Mount, SpecError> {
        let mut options = vec!["ro".to_string(), "nosuid".into(), "nodev".into()];
        options.extend(self.layers.iter().map(|l| format!("lowerdir+={}", l.display())));
        if let Some(sub) = &self.sub_path {
            options.push(format!("x-nidus-sub-path={sub}"));
            options.push(format!("x-nidus-scratch={}", self.scratch.display()));
        }
        MountBuilder::default()
            .destination(&self.container_path)
            .typ(IMAGE_VOLUME_TYPE)
            .source(&self.image_id)
            .options(options)
            .build()
            .map_err(err)
    }
}

/// A host device node a container gets (its type and numbers read on the host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostDevice {
    pub(crate) container_path: String,
    pub(crate) char_device: bool,
    pub(crate) major: i64,
    pub(crate) minor: i64,
    pub(crate) file_mode: u32,
    pub(crate) permissions: String,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot build the OCI spec: {0}")]
pub struct SpecError(String);

/// One of a pod's ID mappings as the OCI spec writes it.
fn oci_id_mapping(m: &crate::linux::userns::IdMap) -> Result<oci_spec::runtime::LinuxIdMapping, SpecError> {
    LinuxIdMappingBuilder::default().container_id(m.container_id).host_id(m.host_id).size(m.length).build().map_err(err)
}

fn err(e: impl std::fmt::Display) -> SpecError {
    SpecError(e.to_string())
}

fn mount(destination: &str, typ: &str, source: &str, options: &[&str]) -> Result<Mount, SpecError> {
    MountBuilder::default()
        .destination(destination)
        .typ(typ)
        .source(source)
        .options(options.iter().map(|o| o.to_string()).collect::<Vec<_>>())
        .build()
        .map_err(err)
}

fn security(config: &api::ContainerConfig) -> api::LinuxContainerSecurityContext {
    config.linux.as_ref().and_then(|l| l.security_context.clone()).unwrap_or_default()
}

/// The container's mounts, in the order they are made: the standard
/// filesystems, the pod's files, then the config's mounts, parents first.
pub(crate) fn mounts(input: &SpecInput) -> Result<Vec<Mount>, SpecError> {
    let sc = security(input.config);
    let ro_unless_privileged = if sc.privileged { "rw" } else { "ro" };
    let mut out = vec![
        mount("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"])?,
        mount("/dev", "tmpfs", "tmpfs", &["nosuid", "strictatime", "mode=755", "size=65536k"])?,
        mount(
            "/dev/pts",
            "devpts",
            "devpts",
            &["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"],
        )?,
        mount("/dev/mqueue", "mqueue", "mqueue", &["nosuid", "noexec", "nodev"])?,
        mount("/sys", "sysfs", "sysfs", &["nosuid", "noexec", "nodev", ro_unless_privileged])?,
        mount("/sys/fs/cgroup", "cgroup", "cgroup", &["nosuid", "noexec", "nodev", "relatime", ro_unless_privileged])?,
    ];
    let shm = input.pod.shm.clone().unwrap_or_else(|| PathBuf::from("/dev/shm"));
    out.push(mount("/dev/shm", "bind", &shm.to_string_lossy(), &["rbind", "nosuid", "nodev", "noexec"])?);

    let mut cri_mounts: Vec<&api::Mount> = input.config.mounts.iter().collect();
    cri_mounts.sort_by_key(|m| Path::new(&m.container_path).components().count());
    let taken = |dest: &str| cri_mounts.iter().any(|m| Path::new(&m.container_path) == Path::new(dest));
    let readonly_rootfs = sc.readonly_rootfs;
    for (dest, source) in [
        ("/etc/hostname", &input.pod.hostname_file),
        ("/etc/hosts", &input.pod.hosts_file),
        ("/etc/resolv.conf", &input.pod.resolv_conf_file),
    ] {
        if !taken(dest) {
            let mode = if readonly_rootfs { "ro" } else { "rw" };
            out.push(mount(dest, "bind", &source.to_string_lossy(), &["rbind", "rprivate", mode])?);
        }
    }
    for m in cri_mounts {
        if let Some(volume) = input.image_volumes.iter().find(|v| v.container_path == m.container_path) {
            out.push(volume.to_mount()?);
            continue;
        }
        let propagation =
            match MountPropagation::try_from(m.propagation).unwrap_or(MountPropagation::PropagationPrivate) {
                MountPropagation::PropagationPrivate => "rprivate",
                MountPropagation::PropagationHostToContainer => "rslave",
                MountPropagation::PropagationBidirectional => "rshared",
            };
        if propagation == "rshared" {
            if let Some((mount_point, false)) = crate::linux::mount::containing_mount(Path::new(&m.host_path)) {
                return Err(err(format!(
                    "config.mounts: host_path {} is on the mount {}, which is not shared; Bidirectional \
                     propagation needs a shared mount (mount --make-shared {})",
                    crate::quote::quote(&m.host_path),
                    mount_point.display(),
                    mount_point.display()
                )));
            }
        }
        let mut options = vec!["rbind", propagation, if m.readonly { "ro" } else { "rw" }];
        if m.recursive_read_only {
            options.push("rro");
        }
        // KEP-5855's bind mount options (validated: the ones a bind takes).
        options.extend(m.mount_options.iter().map(String::as_str));
        let mut bind = mount(&m.container_path, "bind", &m.host_path, &options)?;
        // Idmapped through the pod's user namespace (the mappings are its own).
        if let (false, Some((_, maps))) = (m.uid_mappings.is_empty(), &input.pod.user_ns) {
            bind.set_uid_mappings(Some(vec![oci_id_mapping(&maps.uids)?]));
            bind.set_gid_mappings(Some(vec![oci_id_mapping(&maps.gids)?]));
        }
        out.push(bind);
    }
    Ok(out)
}

/// Builds the OCI runtime spec of a container.
pub fn build(input: &SpecInput) -> Result<Spec, SpecError> {
    let config = input.config;
    let sc = security(config);
    let argv = super::command::argv(&config.command, &config.args, &input.image.entrypoint, &input.image.cmd);
    let env_pairs: Vec<(String, String)> =
        config.envs.iter().map(|kv| (kv.key.clone(), String::from_utf8_lossy(&kv.value).into_owned())).collect();
    let env = super::command::env(&input.pod.hostname, &input.user.home, &input.image.env, &env_pairs);
    let cwd = super::command::working_dir(&config.working_dir, &input.image.working_dir);

    let caps: std::collections::HashSet<Capability> =
        input.capabilities.iter().filter_map(|c| c.strip_prefix("CAP_").and_then(|b| b.parse().ok())).collect();
    let ambient: std::collections::HashSet<Capability> = sc
        .capabilities
        .as_ref()
        .map(|c| {
            c.add_ambient_capabilities
                .iter()
                .filter_map(|a| crate::capabilities::normalize(a).ok()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let capabilities = LinuxCapabilitiesBuilder::default()
        .bounding(caps.clone())
        .effective(caps.clone())
        .permitted(caps)
        .inheritable(ambient.clone())
        .ambient(ambient)
        .build()
        .map_err(err)?;
    let user = UserBuilder::default()
        .uid(input.user.uid)
        .gid(input.user.gid)
        .additional_gids(input.user.additional_gids.clone())
        .build()
        .map_err(err)?;
    let mut process = ProcessBuilder::default()
        .terminal(config.tty)
        .user(user)
        .args(argv)
        .env(env)
        .cwd(cwd)
        .capabilities(capabilities)
        .no_new_privileges(sc.no_new_privs);
    if let Some(adj) = input.oom_score_adj {
        process = process.oom_score_adj(adj);
    }
    if !input.rlimits.is_empty() {
        let rlimits = input
            .rlimits
            .iter()
            .map(|l| {
                let kind: PosixRlimitType =
                    l.kind.parse().map_err(|_| SpecError(format!("unknown rlimit {}", l.kind)))?;
                PosixRlimitBuilder::default().typ(kind).soft(l.soft).hard(l.hard).build().map_err(err)
            })
            .collect::<Result<Vec<_>, _>>()?;
        process = process.rlimits(rlimits);
    }
    let process = process.build().map_err(err)?;

    let mut namespaces = vec![
        LinuxNamespaceBuilder::default().typ(LinuxNamespaceType::Mount).build().map_err(err)?,
        LinuxNamespaceBuilder::default().typ(LinuxNamespaceType::Cgroup).build().map_err(err)?,
    ];
    for (typ, path) in [
        (LinuxNamespaceType::Network, &input.pod.net_ns),
        (LinuxNamespaceType::Ipc, &input.pod.ipc_ns),
        (LinuxNamespaceType::Uts, &input.pod.uts_ns),
    ] {
        if let Some(path) = path {
            namespaces.push(LinuxNamespaceBuilder::default().typ(typ).path(path.clone()).build().map_err(err)?);
        }
    }
    match &input.pid {
        PidNamespace::Own => {
            namespaces.push(LinuxNamespaceBuilder::default().typ(LinuxNamespaceType::Pid).build().map_err(err)?)
        }
        PidNamespace::Join(path) => namespaces.push(
            LinuxNamespaceBuilder::default().typ(LinuxNamespaceType::Pid).path(path.clone()).build().map_err(err)?,
        ),
        PidNamespace::Node => {}
    }
    // The pod's user namespace, first of all: its IDs are the container's.
    let mut id_mappings = None;
    if let Some((path, maps)) = &input.pod.user_ns {
        namespaces.insert(
            0,
            LinuxNamespaceBuilder::default().typ(LinuxNamespaceType::User).path(path.clone()).build().map_err(err)?,
        );
        id_mappings = Some((vec![oci_id_mapping(&maps.uids)?], vec![oci_id_mapping(&maps.gids)?]));
    }

    let devices = input
        .devices
        .iter()
        .map(|d| {
            LinuxDeviceBuilder::default()
                .path(d.container_path.clone())
                .typ(if d.char_device { LinuxDeviceType::C } else { LinuxDeviceType::B })
                .major(d.major)
                .minor(d.minor)
                .file_mode(d.file_mode)
                .uid(0u32)
                .gid(0u32)
                .build()
                .map_err(err)
        })
        .collect::<Result<Vec<_>, _>>()?;
    // procMount Unmasked: kubelet sends both lists empty, which only a
    // container in a user namespace may have (kubelet refuses it to
    // others); an ordinary container's empty lists are the defaults left
    // unsaid (crictl, critest).
    let unmasked = input.pod.user_ns.is_some() && sc.masked_paths.is_empty() && sc.readonly_paths.is_empty();
    let (masked, readonly) = if sc.privileged || unmasked {
        (Vec::new(), Vec::new())
    } else {
        let or_default = |given: &[String], default: &[&str]| -> Vec<String> {
            if given.is_empty() {
                default.iter().map(|s| s.to_string()).collect()
            } else {
                given.to_vec()
            }
        };
        (or_default(&sc.masked_paths, DEFAULT_MASKED_PATHS), or_default(&sc.readonly_paths, DEFAULT_READONLY_PATHS))
    };
    let cri_resources = config.linux.as_ref().and_then(|l| l.resources.clone()).unwrap_or_default();
    let mut linux = LinuxBuilder::default()
        .resources(crate::resources::to_oci(&cri_resources, input.pids_limit))
        .namespaces(namespaces)
        .devices(devices)
        .masked_paths(masked)
        .readonly_paths(readonly)
        .cgroups_path(PathBuf::from(input.cgroups_path))
        .build()
        .map_err(err)?;
    if let Some((uids, gids)) = id_mappings {
        linux.set_uid_mappings(Some(uids));
        linux.set_gid_mappings(Some(gids));
    }

    let root = RootBuilder::default().path(input.rootfs).readonly(sc.readonly_rootfs).build().map_err(err)?;
    let mut annotations: HashMap<String, String> = config.annotations.clone();
    let meta = config.metadata.clone().unwrap_or_default();
    for (k, v) in [
        ("io.kubernetes.cri.container-type", "container"),
        ("io.kubernetes.cri.container-name", meta.name.as_str()),
        ("io.kubernetes.cri.sandbox-id", input.pod.sandbox_id.as_str()),
        ("io.kubernetes.cri.sandbox-name", input.pod.name.as_str()),
        ("io.kubernetes.cri.sandbox-namespace", input.pod.namespace.as_str()),
        ("io.kubernetes.cri.sandbox-uid", input.pod.uid.as_str()),
        ("io.kubernetes.cri.image-name", input.image_name),
    ] {
        annotations.insert(k.to_string(), v.to_string());
    }
    SpecBuilder::default()
        .version("1.2.0")
        .root(root)
        .process(process)
        .mounts(mounts(input)?)
        .linux(linux)
        .annotations(annotations)
        .build()
        .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input_with<'a>(
        config: &'a api::ContainerConfig,
        pod: &'a PodFacts,
        image: &'a ImageDefaults,
        user: &'a ResolvedUser,
        caps: &'a BTreeSet<String>,
    ) -> SpecInput<'a> {
        SpecInput {
            container_id: "c1",
            config,
            pod,
            pid: PidNamespace::Own,
            image,
            image_name: "busybox",
            user,
            capabilities: caps,
            rootfs: Path::new("/run/nidus/containers/c1/rootfs"),
            cgroups_path: "/nidus/pod/c1",
            oom_score_adj: Some(100),
            devices: &[],
            rlimits: &[],
            image_volumes: &[],
            pids_limit: 0,
        }
    }

    fn pod() -> PodFacts {
        PodFacts {
            sandbox_id: "s1".into(),
            hostname: "web-0".into(),
            hostname_file: "/var/lib/nidus/sandboxes/s1/hostname".into(),
            hosts_file: "/var/lib/nidus/sandboxes/s1/hosts".into(),
            resolv_conf_file: "/var/lib/nidus/sandboxes/s1/resolv.conf".into(),
            shm: Some("/run/nidus/sandboxes/s1/shm".into()),
            net_ns: Some("/proc/42/ns/net".into()),
            ipc_ns: Some("/proc/42/ns/ipc".into()),
            uts_ns: Some("/proc/42/ns/uts".into()),
            pid_ns: Some("/proc/42/ns/pid".into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_default_container_spec() {
        let config = api::ContainerConfig {
            metadata: Some(api::ContainerMetadata { name: "app".into(), attempt: 0 }),
            args: vec!["-c".into(), "echo hi".into()],
            envs: vec![api::KeyValue { key: "A".into(), value: b"1".to_vec() }],
            mounts: vec![api::Mount {
                container_path: "/data".into(),
                host_path: "/srv/data".into(),
                readonly: true,
                propagation: MountPropagation::PropagationHostToContainer as i32,
                ..Default::default()
            }],
            ..Default::default()
        };
        let image = ImageDefaults {
            entrypoint: vec!["/bin/sh".into()],
            cmd: vec!["-l".into()],
            env: vec!["PATH=/bin".into()],
            working_dir: "/work".into(),
        };
        let user = ResolvedUser {
            uid: 1000,
            gid: 1000,
            additional_gids: vec![2000],
            username: Some("app".into()),
            home: "/home/app".into(),
        };
        let caps = crate::capabilities::container_set(false, &[], &[]).unwrap();
        let pod = pod();
        let spec = build(&input_with(&config, &pod, &image, &user, &caps)).unwrap();
        let process = spec.process().as_ref().unwrap();
        assert_eq!(process.args().as_ref().unwrap(), &vec!["/bin/sh".to_string(), "-c".into(), "echo hi".into()]);
        assert_eq!(
            process.env().as_ref().unwrap(),
            &vec!["PATH=/bin".to_string(), "HOSTNAME=web-0".into(), "A=1".into(), "HOME=/home/app".into()]
        );
        assert_eq!(process.cwd(), Path::new("/work"));
        assert_eq!(process.user().uid(), 1000);
        assert_eq!(process.user().additional_gids().as_ref().unwrap(), &vec![2000]);
        assert_eq!(process.oom_score_adj(), Some(100));
        let bounding = process.capabilities().as_ref().unwrap().bounding().as_ref().unwrap();
        assert_eq!(bounding.len(), 14);
        assert!(bounding.contains(&Capability::NetRaw));

        let mounts = spec.mounts().as_ref().unwrap();
        let dests: Vec<String> = mounts.iter().map(|m| m.destination().display().to_string()).collect();
        assert_eq!(
            dests,
            vec![
                "/proc",
                "/dev",
                "/dev/pts",
                "/dev/mqueue",
                "/sys",
                "/sys/fs/cgroup",
                "/dev/shm",
                "/etc/hostname",
                "/etc/hosts",
                "/etc/resolv.conf",
                "/data"
            ]
        );
        let data = mounts.last().unwrap().options().as_ref().unwrap();
        assert!(data.contains(&"ro".to_string()) && data.contains(&"rslave".to_string()));
        let sys = &mounts[4];
        assert!(sys.options().as_ref().unwrap().contains(&"ro".to_string()));

        let linux = spec.linux().as_ref().unwrap();
        assert!(linux.masked_paths().as_ref().unwrap().contains(&"/proc/kcore".to_string()));
        assert!(linux.readonly_paths().as_ref().unwrap().contains(&"/proc/sys".to_string()));
        let ns: Vec<_> = linux.namespaces().as_ref().unwrap().iter().map(|n| (n.typ(), n.path().clone())).collect();
        assert!(ns.contains(&(LinuxNamespaceType::Network, Some("/proc/42/ns/net".into()))));
        assert!(ns.contains(&(LinuxNamespaceType::Pid, None)));
        assert_eq!(spec.annotations().as_ref().unwrap()["io.kubernetes.cri.sandbox-id"], "s1");
        assert!(linux.resources().as_ref().unwrap().memory().is_none(), "no limits asked for");
    }

    #[test]
    fn resources_go_to_linux_resources() {
        let config = api::ContainerConfig {
            linux: Some(api::LinuxContainerConfig {
                resources: Some(api::LinuxContainerResources {
                    cpu_quota: 20_000,
                    cpu_period: 100_000,
                    memory_limit_in_bytes: 64 << 20,
                    oom_score_adj: 500,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let image = ImageDefaults { cmd: vec!["sh".into()], ..Default::default() };
        let user = ResolvedUser { uid: 0, gid: 0, additional_gids: vec![], username: None, home: "/".into() };
        let caps = crate::capabilities::container_set(false, &[], &[]).unwrap();
        let pod = pod();
        let mut input = input_with(&config, &pod, &image, &user, &caps);
        input.pids_limit = 64;
        let spec = build(&input).unwrap();
        let resources = spec.linux().as_ref().unwrap().resources().clone().unwrap();
        assert_eq!(resources.memory().as_ref().unwrap().limit(), Some(64 << 20));
        assert_eq!(resources.cpu().as_ref().unwrap().quota(), Some(20_000));
        assert_eq!(resources.pids().as_ref().unwrap().limit(), 64);
    }

    #[test]
    fn privileged_lifts_masks_and_read_only_sys() {
        let config = api::ContainerConfig {
            linux: Some(api::LinuxContainerConfig {
                security_context: Some(api::LinuxContainerSecurityContext { privileged: true, ..Default::default() }),
                ..Default::default()
            }),
            mounts: vec![api::Mount {
                container_path: "/etc/hosts".into(),
                host_path: "/k/hosts".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let image = ImageDefaults { cmd: vec!["sh".into()], ..Default::default() };
        let user = ResolvedUser { uid: 0, gid: 0, additional_gids: vec![], username: None, home: "/".into() };
        let caps = crate::capabilities::container_set(true, &[], &[]).unwrap();
        let pod = pod();
        let spec = build(&input_with(&config, &pod, &image, &user, &caps)).unwrap();
        let linux = spec.linux().as_ref().unwrap();
        assert!(linux.masked_paths().as_ref().unwrap().is_empty());
        let mounts = spec.mounts().as_ref().unwrap();
        assert!(mounts[4].options().as_ref().unwrap().contains(&"rw".to_string()));
        // kubelet's own /etc/hosts mount replaces the sandbox's.
        let hosts: Vec<_> = mounts.iter().filter(|m| m.destination() == Path::new("/etc/hosts")).collect();
        assert_eq!(hosts.len(), 1);
        assert_eq!(hosts[0].source().as_ref().unwrap(), Path::new("/k/hosts"));
        assert_eq!(
            spec.process().as_ref().unwrap().capabilities().as_ref().unwrap().bounding().as_ref().unwrap().len(),
            41
        );
    }
}
