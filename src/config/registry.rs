//! `[registry]`: pulls from registries — per-registry mirrors tried in order
//! before the registry itself, plain-HTTP and TLS settings, repository
//! rewrites, and the bounds of a pull (parallelism, stall, minimum rate,
//! deadline, grace once its callers left). What they mean for one pull is
//! `image::pull::hosts`'s.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Registry settings of the daemon (`[registry]` in config.toml).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RegistrySettings {
    /// Layers of one pull downloaded at once.
    pub(crate) max_concurrent_downloads: usize,
    /// A pull whose download makes no progress for this long is cancelled.
    pub(crate) stall_timeout_secs: u64,
    /// A download (or a registry's answer) bringing fewer bytes a second
    /// than this over `min_rate_window_secs` fails the pull; 0: no minimum.
    pub(crate) min_bytes_per_sec: u64,
    pub(crate) min_rate_window_secs: u64,
    /// A pull not done this long after it began fails; 0: no deadline.
    pub(crate) pull_deadline_secs: u64,
    /// A pull every caller has left is cancelled when none came back for this long.
    pub(crate) abandoned_pull_grace_secs: u64,
    /// How often the daemon logs the progress of each pull in flight.
    pub(crate) progress_interval_secs: u64,
    /// Per registry (as images name it: `docker.io`, `registry.k8s.io`,
    /// `localhost:5000`), how to reach it; `"*"` applies to every registry
    /// without an entry of its own.
    pub(crate) hosts: BTreeMap<String, HostConfig>,
}

impl Default for RegistrySettings {
    fn default() -> Self {
        Self {
            max_concurrent_downloads: 3,
            stall_timeout_secs: 60,
            min_bytes_per_sec: 1024,
            min_rate_window_secs: 60,
            pull_deadline_secs: 0,
            abandoned_pull_grace_secs: 60,
            progress_interval_secs: 10,
            hosts: BTreeMap::new(),
        }
    }
}

/// How to reach one registry.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct HostConfig {
    /// Tried in order before the registry itself.
    pub(crate) mirrors: Vec<MirrorConfig>,
    /// Only the mirrors are asked, never the registry itself.
    pub(crate) mirrors_only: bool,
    /// The registry speaks plain HTTP.
    pub(crate) plain_http: bool,
    #[serde(flatten)]
    pub(crate) tls: TlsConfig,
}

/// TLS settings of one endpoint.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct TlsConfig {
    /// Extra CA certificates (PEM files) trusted besides the built-in roots.
    pub(crate) ca_certs: Vec<PathBuf>,
    /// Client certificate (PEM) presented to the endpoint, with `client_key`.
    pub(crate) client_cert: Option<PathBuf>,
    /// Private key (PEM) of `client_cert`.
    pub(crate) client_key: Option<PathBuf>,
}

/// A mirror of a registry.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct MirrorConfig {
    /// `https://host[:port]` or `http://host[:port]`, optionally with a path
    /// prefix (`http://127.0.0.1:5000/k8s` serves `registry.k8s.io/pause`
    /// as `/v2/k8s/pause/...`).
    pub(crate) url: String,
    /// Repository prefixes replaced on this mirror, first match wins, e.g.
    /// `{ from = "library/", to = "dockerhub/" }`.
    pub(crate) rewrite: Vec<Rewrite>,
    #[serde(flatten)]
    pub(crate) tls: TlsConfig,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct Rewrite {
    pub(crate) from: String,
    pub(crate) to: String,
}

/// Why a host configuration is unusable.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
#[error("registry.hosts.{host}: {why}")]
pub(crate) struct HostsError {
    pub(crate) host: String,
    pub(crate) why: String,
}

impl RegistrySettings {
    /// Checks what serde cannot.
    pub(crate) fn validate(&self) -> Result<(), HostsError> {
        if self.max_concurrent_downloads == 0 {
            return Err(HostsError { host: "-".into(), why: "max_concurrent_downloads must be at least 1".into() });
        }
        if self.min_bytes_per_sec > 0 && self.min_rate_window_secs == 0 {
            return Err(HostsError {
                host: "-".into(),
                why: "min_rate_window_secs must be at least 1 when min_bytes_per_sec is set".into(),
            });
        }
        for (host, config) in &self.hosts {
            for mirror in &config.mirrors {
                parse_url(&mirror.url).map_err(|why| HostsError { host: host.clone(), why })?;
            }
            if config.mirrors_only && config.mirrors.is_empty() {
                return Err(HostsError { host: host.clone(), why: "mirrors_only needs at least one mirror".into() });
            }
        }
        Ok(())
    }
}

/// `scheme://host[:port][/prefix]` → (scheme, host, prefix).
pub(crate) fn parse_url(url: &str) -> Result<(&'static str, String, String), String> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("https://") {
        ("https", rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        ("http", rest)
    } else {
        return Err(format!("mirror url {url:?} must start with https:// or http://"));
    };
    let (host, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if host.is_empty() || host.contains(['?', '#', '@']) {
        return Err(format!("mirror url {url:?} has no usable host"));
    }
    Ok((scheme, host.to_string(), prefix.trim_matches('/').to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(toml_text: &str) -> RegistrySettings {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn bad_mirror_urls_are_refused() {
        let c = config(r#"hosts."docker.io" = { mirrors = [{ url = "127.0.0.1:5000" }] }"#);
        assert!(c.validate().is_err());
    }
}

#[cfg(test)]
mod tls_config_tests {
    use super::*;

    #[test]
    fn tls_settings_parse_beside_the_other_fields_and_unknown_ones_are_refused() {
        let c: RegistrySettings = toml::from_str(
            r#"
            [hosts."r.example"]
            plain_http = false
            ca_certs = ["/etc/ca.pem"]
            client_cert = "/etc/c.pem"
            client_key = "/etc/k.pem"
            mirrors = [{ url = "https://m.example", ca_certs = ["/etc/m.pem"] }]
            "#,
        )
        .unwrap();
        let host = &c.hosts["r.example"];
        assert_eq!(host.tls.ca_certs, vec![PathBuf::from("/etc/ca.pem")]);
        assert_eq!(host.tls.client_key, Some(PathBuf::from("/etc/k.pem")));
        assert_eq!(host.mirrors[0].tls.ca_certs, vec![PathBuf::from("/etc/m.pem")]);
        assert!(toml::from_str::<RegistrySettings>("[hosts.\"r\"]\nca_cert = \"/x\"\n").is_err());
        assert!(toml::from_str::<RegistrySettings>("[hosts.\"r\"]\nmirrors = [{ url = \"http://x\", bogus = 1 }]\n")
            .is_err());
        // The default config prints as TOML and reads back.
        let text = toml::to_string(&c).unwrap();
        assert_eq!(toml::from_str::<RegistrySettings>(&text).unwrap(), c);
    }
}
