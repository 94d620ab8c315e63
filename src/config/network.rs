//! The `[network]` section of the configuration: where CNI network
//! configurations and plugins are, whether nidus's built-in network serves
//! pods when no CNI configuration exists, and the built-in network's pod CIDR.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Whether the built-in network is used when no CNI configuration is found.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum BuiltinMode {
    /// The built-in network serves pods while no CNI configuration exists.
    Auto,
    /// Never: without a CNI configuration a pod gets loopback only.
    Off,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct NetworkSettings {
    /// Directory of CNI network configurations (`.conflist`, `.conf`,
    /// `.json`); the first valid one by file name is used.
    pub(crate) cni_conf_dir: PathBuf,
    /// Directories searched, in order, for CNI plugin programs.
    pub(crate) cni_bin_dirs: Vec<PathBuf>,
    /// `auto` (default) or `off`.
    pub(crate) builtin: BuiltinMode,
    /// The built-in network's pod addresses, one CIDR per address family,
    /// comma-separated (`UpdateRuntimeConfig` overrides it).
    pub(crate) pod_cidr: String,
    /// How long one CNI plugin run may take, in seconds.
    pub(crate) plugin_timeout_secs: u64,
    /// The built-in network's Linux bridge.
    pub(crate) bridge_name: String,
    /// Whether the built-in network masquerades what its pods send off the
    /// node (an nftables table of its own, written with `nft`), as the CNI
    /// bridge plugin's `ipMasq` does.
    pub(crate) masquerade: bool,
}

impl Default for NetworkSettings {
    fn default() -> Self {
        Self {
            cni_conf_dir: PathBuf::from("/etc/cni/net.d"),
            cni_bin_dirs: vec![PathBuf::from("/opt/cni/bin"), PathBuf::from("/usr/lib/cni")],
            builtin: BuiltinMode::Auto,
            pod_cidr: "10.87.0.0/16".into(),
            plugin_timeout_secs: 60,
            bridge_name: "nidus0".into(),
            masquerade: true,
        }
    }
}

impl NetworkSettings {
    pub(crate) fn validate(&self) -> Result<(), String> {
        if !self.cni_conf_dir.is_absolute() {
            return Err(format!("network.cni_conf_dir must be absolute, got {}", self.cni_conf_dir.display()));
        }
        if let Some(dir) = self.cni_bin_dirs.iter().find(|d| !d.is_absolute()) {
            return Err(format!("network.cni_bin_dirs must be absolute paths, got {}", dir.display()));
        }
        super::cidr::parse_list(&self.pod_cidr).map_err(|e| format!("network.pod_cidr: {e}"))?;
        if self.plugin_timeout_secs == 0 {
            return Err("network.plugin_timeout_secs must be at least 1".into());
        }
        let name = &self.bridge_name;
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
        if name.is_empty() || name.len() > 15 || !name.chars().all(allowed) {
            return Err(format!(
                "network.bridge_name {name:?} is not a valid interface name (1-15 letters, digits, '_', '-' or '.')"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bridge_names_are_plain_interface_names() {
        let with = |name: &str| NetworkSettings { bridge_name: name.into(), ..NetworkSettings::default() }.validate();
        for good in ["nidus0", "br-pods.1", "a_b"] {
            assert!(with(good).is_ok(), "{good}");
        }
        // Names also go into the masquerade table's rules: nothing but plain characters.
        for bad in ["", "sixteen-chars-xx", "a b", "a/b", "a\"b", "a;b", "a}b"] {
            let error = with(bad).unwrap_err();
            assert!(error.contains("network.bridge_name"), "{bad}: {error}");
        }
    }
}
