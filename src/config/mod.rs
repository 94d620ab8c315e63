//! The one configuration of nidus: every path and knob, with embedded defaults,
//! read from a TOML file (`/etc/nidus/config.toml` when present, or `--config`)
//! and overridden by the command-line flags of `nidus serve`. Every section's
//! type is here, the larger ones in a file each (`registry.rs`, `cdi.rs`,
//! `streaming.rs`, `network.rs` with `cidr.rs`, `metrics.rs`): config sits
//! below the modules it configures and names none of them.

pub(crate) mod cdi;
pub(crate) mod cidr;
pub(crate) mod metrics;
pub(crate) mod network;
pub(crate) mod registry;
pub(crate) mod streaming;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::paths::has_dot_dot;

pub(crate) const DEFAULT_CONFIG_PATH: &str = "/etc/nidus/config.toml";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("invalid config file {path}: {source}")]
    Parse { path: PathBuf, source: toml::de::Error },
    #[error("invalid config: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The CRI gRPC socket kubelet and crictl connect to.
    pub(crate) socket: PathBuf,
    /// Persistent state: images, sandbox and container metadata, upper dirs.
    pub(crate) root: PathBuf,
    /// Volatile state (gone at reboot): lock, pause records, /dev/shm mounts.
    pub(crate) state: PathBuf,
    /// Where every cgroup nidus makes is nested. Absolute: from the root of each
    /// cgroup hierarchy. Relative: under the daemon's own cgroup in each hierarchy.
    pub(crate) cgroup_root: String,
    /// tracing filter, e.g. `info` or `nidus=debug`.
    pub log_level: String,
    /// `text` or `json`.
    pub log_format: LogFormat,
    /// Who makes the cgroups of pods and containers: `[cgroup] driver`.
    pub(crate) cgroup: CgroupSettings,
    pub(crate) grpc: GrpcSettings,
    pub(crate) sandbox: SandboxSettings,
    pub(crate) container: ContainerSettings,
    pub(crate) image: ImageStoreSettings,
    /// Pulls from registries: mirrors, TLS, plain HTTP, parallelism, stalls,
    /// minimum rate, deadline, grace once every caller left.
    pub(crate) registry: registry::RegistrySettings,
    pub(crate) checkpoint: CheckpointSettings,
    pub(crate) limits: LimitsSettings,
    pub(crate) hooks: HooksSettings,
    /// CDI devices: the spec directories.
    pub(crate) cdi: cdi::CdiSettings,
    pub(crate) streaming: streaming::StreamingSettings,
    pub(crate) network: network::NetworkSettings,
    /// The Prometheus `/metrics` endpoint (off unless an address is set).
    pub(crate) metrics: metrics::MetricsSettings,
}

/// How pods' and containers' cgroups are made.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct CgroupSettings {
    pub(crate) driver: CgroupDriverSetting,
}

/// `auto`: systemd when PID 1 is systemd and answers on its private
/// socket, else cgroupfs. `systemd` on a node without a reachable systemd
/// stops the daemon at start, naming it; `cgroupfs` is nidus making the
/// directories itself.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CgroupDriverSetting {
    #[default]
    Auto,
    Cgroupfs,
    Systemd,
}

/// Bounds on what a request can make the daemon read: every file a request
/// names is opened without blocking, must be a regular file, and is refused
/// above these sizes (see `bounded_file`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct LimitsSettings {
    /// Largest Localhost seccomp profile, in bytes.
    pub(crate) seccomp_profile_bytes: u64,
    /// Largest checkpoint archive a restore reads, in bytes (it holds the
    /// container's memory).
    pub(crate) checkpoint_archive_bytes: u64,
}

impl Default for LimitsSettings {
    fn default() -> Self {
        Self { seccomp_profile_bytes: 1 << 20, checkpoint_archive_bytes: 64 << 30 }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct GrpcSettings {
    /// Largest request or response message, in bytes (ExecSync output can be 2 × 16 MiB).
    pub(crate) max_message_bytes: usize,
    /// Also serve CRI runtime.v1alpha2 (kubelet 1.20–1.25, crictl up to 1.25)
    /// beside runtime.v1, on the same socket and by the same code.
    pub(crate) serve_v1alpha2: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct SandboxSettings {
    /// The program run as each pod's pause process; default: `nidus-pause`
    /// beside the nidus binary.
    pub(crate) pause_binary: Option<PathBuf>,
    /// Size of each pod's /dev/shm tmpfs, in bytes.
    pub(crate) shm_size_bytes: u64,
    /// Pod cgroup parent (under cgroup_root) when the request names none;
    /// the pod then gets `<this>/<sandbox id>`.
    pub(crate) default_cgroup_parent: String,
    /// How long the pause process may take to set the sandbox up, in seconds.
    pub(crate) pause_start_timeout_secs: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ContainerSettings {
    /// The per-container monitor (and exec helper); default: `nidus-monitor`
    /// beside the nidus binary.
    pub(crate) monitor_binary: Option<PathBuf>,
    /// Resource limits every container's process gets (CRI has no field for
    /// them); empty: inherit the runtime's. E.g.
    /// `rlimits = [{ type = "RLIMIT_NOFILE", soft = 1024, hard = 4096 }]`.
    pub(crate) rlimits: Vec<Rlimit>,
    /// The seccomp profile of a container whose config (and pod) sets none,
    /// in the legacy CRI form: "" (unconfined, as containerd),
    /// `runtime/default`, `unconfined` or `localhost/<absolute path>`.
    pub(crate) unset_seccomp_profile: String,
    /// Most processes a container's cgroup may hold (CRI has no field for it,
    /// as CRI-O's `pids_limit`); 0: no limit beyond the pod's.
    pub(crate) pids_limit: i64,
    /// Monitors started ahead of need, waiting for a container (each about
    /// 1 MB of RSS while it waits); 0: each starts with its CreateContainer.
    pub(crate) spare_monitors: usize,
}

impl Default for ContainerSettings {
    fn default() -> Self {
        Self {
            monitor_binary: None,
            rlimits: Vec::new(),
            unset_seccomp_profile: String::new(),
            pids_limit: 0,
            spare_monitors: 1,
        }
    }
}

/// One POSIX resource limit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Rlimit {
    /// `RLIMIT_NOFILE`, `RLIMIT_NPROC`, `RLIMIT_CORE`, …
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) soft: u64,
    pub(crate) hard: u64,
}

/// The resource limits Linux has, by name.
pub(crate) const RLIMITS: &[&str] = &[
    "RLIMIT_CPU",
    "RLIMIT_FSIZE",
    "RLIMIT_DATA",
    "RLIMIT_STACK",
    "RLIMIT_CORE",
    "RLIMIT_RSS",
    "RLIMIT_NPROC",
    "RLIMIT_NOFILE",
    "RLIMIT_MEMLOCK",
    "RLIMIT_AS",
    "RLIMIT_LOCKS",
    "RLIMIT_SIGPENDING",
    "RLIMIT_MSGQUEUE",
    "RLIMIT_NICE",
    "RLIMIT_RTPRIO",
    "RLIMIT_RTTIME",
];

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ImageStoreSettings {
    /// Image archives (OCI layout directories, OCI or docker-archive
    /// tarballs) imported at start when new or changed; default `<root>/import`.
    pub(crate) import_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct CheckpointSettings {
    /// The CRIU binary (4.1 or newer); default: the first `criu` in PATH,
    /// /usr/local/sbin or /usr/sbin.
    pub(crate) criu_binary: Option<PathBuf>,
    /// How long a CheckpointContainer may take when the request gives no
    /// timeout, in seconds.
    pub(crate) default_timeout_secs: u64,
}

impl Default for CheckpointSettings {
    fn default() -> Self {
        Self { criu_binary: None, default_timeout_secs: 300 }
    }
}

/// OCI hooks (`hooks.d` definitions, schema 1.0.0).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct HooksSettings {
    /// The directories read, in order: a later one's file overrides an
    /// earlier one's of the same name. Missing directories are skipped;
    /// `dirs = []` runs no hook.
    pub(crate) dirs: Vec<PathBuf>,
}

impl Default for HooksSettings {
    fn default() -> Self {
        Self {
            dirs: vec![
                PathBuf::from("/usr/share/containers/oci/hooks.d"),
                PathBuf::from("/etc/containers/oci/hooks.d"),
            ],
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            socket: PathBuf::from("/run/nidus/nidus.sock"),
            root: PathBuf::from("/var/lib/nidus"),
            state: PathBuf::from("/run/nidus"),
            cgroup_root: "/".into(),
            log_level: "info".into(),
            log_format: LogFormat::Text,
            cgroup: CgroupSettings::default(),
            grpc: GrpcSettings::default(),
            sandbox: SandboxSettings::default(),
            container: ContainerSettings::default(),
            image: ImageStoreSettings::default(),
            registry: Default::default(),
            checkpoint: CheckpointSettings::default(),
            limits: LimitsSettings::default(),
            hooks: HooksSettings::default(),
            cdi: Default::default(),
            streaming: Default::default(),
            network: network::NetworkSettings::default(),
            metrics: Default::default(),
        }
    }
}

impl Default for GrpcSettings {
    fn default() -> Self {
        Self { max_message_bytes: 64 << 20, serve_v1alpha2: true }
    }
}

impl Default for SandboxSettings {
    fn default() -> Self {
        Self {
            pause_binary: None,
            shm_size_bytes: 64 << 20,
            default_cgroup_parent: "nidus".into(),
            pause_start_timeout_secs: 10,
        }
    }
}

/// Command-line values that override the file.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub socket: Option<PathBuf>,
    pub root: Option<PathBuf>,
    pub state: Option<PathBuf>,
    pub cgroup_root: Option<String>,
    pub log_level: Option<String>,
}

impl Config {
    /// Reads the config: `explicit` must exist when given; otherwise
    /// /etc/nidus/config.toml is used when present, else the defaults.
    pub fn load(explicit: Option<&Path>, overrides: Overrides) -> Result<Self, ConfigError> {
        let path = match explicit {
            Some(p) => Some(p.to_path_buf()),
            None => Some(PathBuf::from(DEFAULT_CONFIG_PATH)).filter(|p| p.exists()),
        };
        let mut config = match path {
            Some(path) => {
                let text = std::fs::read_to_string(&path)
                    .map_err(|source| ConfigError::Read { path: path.clone(), source })?;
                Self::parse(&text).map_err(|source| ConfigError::Parse { path, source })?
            }
            None => Self::default(),
        };
        config.apply(overrides);
        config.validate()?;
        Ok(config)
    }

    pub(crate) fn parse(text: &str) -> Result<Self, toml::de::Error> {
        toml::from_str(text)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }

    fn apply(&mut self, o: Overrides) {
        if let Some(v) = o.socket {
            self.socket = v;
        }
        if let Some(v) = o.root {
            self.root = v;
        }
        if let Some(v) = o.state {
            self.state = v;
        }
        if let Some(v) = o.cgroup_root {
            self.cgroup_root = v;
        }
        if let Some(v) = o.log_level {
            self.log_level = v;
        }
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        for (name, path) in [("socket", &self.socket), ("root", &self.root), ("state", &self.state)] {
            if !path.is_absolute() || has_dot_dot(path) {
                return Err(ConfigError::Invalid(format!(
                    "{name} must be an absolute path without '..', got {}",
                    path.display()
                )));
            }
        }
        if self.root == self.state {
            return Err(ConfigError::Invalid("root and state must be different directories".into()));
        }
        self.registry.validate().map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if has_dot_dot(Path::new(&self.cgroup_root)) || self.cgroup_root.is_empty() {
            return Err(ConfigError::Invalid(format!(
                "cgroup_root must be a non-empty path without '..', got {:?}",
                self.cgroup_root
            )));
        }
        if has_dot_dot(Path::new(&self.sandbox.default_cgroup_parent)) {
            return Err(ConfigError::Invalid("sandbox.default_cgroup_parent must not contain '..'".into()));
        }
        if self.sandbox.shm_size_bytes < 4096 {
            return Err(ConfigError::Invalid("sandbox.shm_size_bytes must be at least 4096".into()));
        }
        if let Some(dir) = &self.image.import_dir {
            if !dir.is_absolute() || has_dot_dot(dir) {
                return Err(ConfigError::Invalid(format!(
                    "image.import_dir must be an absolute path without '..', got {}",
                    dir.display()
                )));
            }
        }
        if let Some(dir) = self.hooks.dirs.iter().find(|d| !d.is_absolute() || has_dot_dot(d)) {
            return Err(ConfigError::Invalid(format!(
                "hooks.dirs must hold absolute paths without '..', got {}",
                dir.display()
            )));
        }
        self.cdi.validate().map_err(ConfigError::Invalid)?;
        self.metrics.validate().map_err(ConfigError::Invalid)?;
        for limit in &self.container.rlimits {
            if !RLIMITS.contains(&limit.kind.as_str()) {
                return Err(ConfigError::Invalid(format!("container.rlimits: unknown type {:?}", limit.kind)));
            }
            if limit.soft > limit.hard {
                return Err(ConfigError::Invalid(format!(
                    "container.rlimits: {} soft limit above hard limit",
                    limit.kind
                )));
            }
        }
        crate::seccomp::choice::from_legacy_path(
            "container.unset_seccomp_profile",
            &self.container.unset_seccomp_profile,
        )
        .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if self.container.pids_limit < 0 {
            return Err(ConfigError::Invalid("container.pids_limit must be 0 (no limit) or more".into()));
        }
        if let Some(criu) = &self.checkpoint.criu_binary {
            if !criu.is_absolute() || has_dot_dot(criu) {
                return Err(ConfigError::Invalid(format!(
                    "checkpoint.criu_binary must be an absolute path without '..', got {}",
                    criu.display()
                )));
            }
        }
        if self.checkpoint.default_timeout_secs == 0 {
            return Err(ConfigError::Invalid("checkpoint.default_timeout_secs must be at least 1".into()));
        }
        self.network.validate().map_err(ConfigError::Invalid)?;
        if self.grpc.max_message_bytes < 4 << 20 {
            return Err(ConfigError::Invalid("grpc.max_message_bytes must be at least 4 MiB".into()));
        }
        self.streaming.validate().map_err(ConfigError::Invalid)?;
        Ok(())
    }
}

impl Config {
    /// The image import directory scanned at start.
    pub(crate) fn import_dir(&self) -> PathBuf {
        self.image.import_dir.clone().unwrap_or_else(|| self.root.join("import"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_round_trip_through_toml() {
        let text = Config::default().to_toml();
        assert_eq!(Config::parse(&text).unwrap(), Config::default());
        assert!(text.contains("[grpc]") && text.contains("serve_v1alpha2 = true"), "{text}");
        // `nidus config default` shows a pull's bounds.
        for bound in [
            "min_bytes_per_sec = 1024",
            "min_rate_window_secs = 60",
            "pull_deadline_secs = 0",
            "abandoned_pull_grace_secs = 60",
        ] {
            assert!(text.contains(bound), "{bound} missing: {text}");
        }
    }

    #[test]
    fn v1alpha2_is_served_unless_switched_off() {
        assert!(Config::default().grpc.serve_v1alpha2);
        let config = Config::parse("[grpc]\nserve_v1alpha2 = false\n").unwrap();
        assert!(!config.grpc.serve_v1alpha2);
        assert_eq!(config.grpc.max_message_bytes, GrpcSettings::default().max_message_bytes);
        assert!(Config::parse("[grpc]\nserve_v1alpha2 = \"no\"\n").is_err());
    }

    #[test]
    fn file_values_and_flags_combine() {
        let mut config = Config::parse("root = \"/srv/nidus\"\n[sandbox]\nshm_size_bytes = 8192\n").unwrap();
        assert_eq!(config.root, PathBuf::from("/srv/nidus"));
        assert_eq!(config.sandbox.shm_size_bytes, 8192);
        assert_eq!(config.state, PathBuf::from("/run/nidus"));
        config.apply(Overrides { state: Some("/tmp/s".into()), ..Default::default() });
        assert_eq!(config.state, PathBuf::from("/tmp/s"));
        config.validate().unwrap();
    }

    #[test]
    fn unknown_keys_and_bad_paths_are_refused() {
        assert!(Config::parse("sockett = \"/x\"").is_err());
        let config = Config { root: "relative".into(), ..Default::default() };
        assert!(config.validate().unwrap_err().to_string().contains("root"));
        let config = Config { cgroup_root: "../escape".into(), ..Default::default() };
        assert!(config.validate().is_err());
        let config = Config::parse("[image]\nimport_dir = \"relative/dir\"\n").unwrap();
        assert!(config.validate().unwrap_err().to_string().contains("image.import_dir"));
        assert!(Config::parse("[image]\nimport_directory = \"/x\"\n").is_err());
        let config = Config::parse("[cdi]\nspec_dirs = [\"/etc/cdi\", \"run/cdi\"]\n").unwrap();
        assert!(config.validate().unwrap_err().to_string().contains("cdi.spec_dirs"));
    }

    #[test]
    fn cdi_spec_dirs_default_to_etc_then_var_run() {
        let text = Config::default().to_toml();
        assert!(
            text.contains("[cdi]") && text.contains("spec_dirs = [") && text.contains("\"/var/run/cdi\""),
            "{text}"
        );
        let config = Config::parse("[cdi]\nspec_dirs = []\n").unwrap();
        assert!(config.cdi.spec_dirs.is_empty());
        config.validate().unwrap();
    }

    #[test]
    fn import_dir_defaults_under_root() {
        let config = Config::parse("root = \"/srv/nidus\"\n").unwrap();
        assert_eq!(config.import_dir(), PathBuf::from("/srv/nidus/import"));
        let config = Config::parse("[image]\nimport_dir = \"/opt/images\"\n").unwrap();
        assert_eq!(config.import_dir(), PathBuf::from("/opt/images"));
        assert_eq!(Config::parse(&config.to_toml()).unwrap(), config);
    }
}
