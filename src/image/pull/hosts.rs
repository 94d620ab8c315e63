//! The `[registry]` section of the config and what it means for one pull:
//! per-registry mirrors tried in order before the registry itself, plain-HTTP
//! and TLS settings, repository rewrites, loopback registries reached over
//! plain HTTP when they do not speak TLS, and the bounds of a pull (stall,
//! minimum rate, deadline, grace once its callers left).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::pace::Pace;

/// Registry settings of the daemon (`[registry]` in config.toml).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RegistrySettings {
    /// Layers of one pull downloaded at once.
    pub max_concurrent_downloads: usize,
    /// A pull whose download makes no progress for this long is cancelled.
    pub stall_timeout_secs: u64,
    /// A download (or a registry's answer) bringing fewer bytes a second
    /// than this over `min_rate_window_secs` fails the pull; 0: no minimum.
    pub min_bytes_per_sec: u64,
    pub min_rate_window_secs: u64,
    /// A pull not done this long after it began fails; 0: no deadline.
    pub pull_deadline_secs: u64,
    /// A pull every caller has left is cancelled when none came back for this long.
    pub abandoned_pull_grace_secs: u64,
    /// How often the daemon logs the progress of each pull in flight.
    pub progress_interval_secs: u64,
    /// Per registry (as images name it: `docker.io`, `registry.k8s.io`,
    /// `localhost:5000`), how to reach it; `"*"` applies to every registry
    /// without an entry of its own.
    pub hosts: BTreeMap<String, HostConfig>,
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
pub struct HostConfig {
    /// Tried in order before the registry itself.
    pub mirrors: Vec<MirrorConfig>,
    /// Only the mirrors are asked, never the registry itself.
    pub mirrors_only: bool,
    /// The registry speaks plain HTTP.
    pub plain_http: bool,
    #[serde(flatten)]
    pub tls: TlsConfig,
}

/// TLS settings of one endpoint.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// Extra CA certificates (PEM files) trusted besides the built-in roots.
    pub ca_certs: Vec<PathBuf>,
    /// Client certificate (PEM) presented to the endpoint, with `client_key`.
    pub client_cert: Option<PathBuf>,
    /// Private key (PEM) of `client_cert`.
    pub client_key: Option<PathBuf>,
}

/// A mirror of a registry.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MirrorConfig {
    /// `https://host[:port]` or `http://host[:port]`, optionally with a path
    /// prefix (`http://127.0.0.1:5000/k8s` serves `registry.k8s.io/pause`
    /// as `/v2/k8s/pause/...`).
    pub url: String,
    /// Repository prefixes replaced on this mirror, first match wins, e.g.
    /// `{ from = "library/", to = "dockerhub/" }`.
    pub rewrite: Vec<Rewrite>,
    #[serde(flatten)]
    pub tls: TlsConfig,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Rewrite {
    pub from: String,
    pub to: String,
}

/// One place a pull may fetch from.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// `http` or `https`.
    pub scheme: &'static str,
    /// `host[:port]`.
    pub host: String,
    /// The repository on this endpoint.
    pub repository: String,
    pub tls: TlsConfig,
    /// A mirror rather than the registry itself.
    pub mirror: bool,
}

impl Endpoint {
    pub fn base_url(&self) -> String {
        format!("{}://{}", self.scheme, self.host)
    }
}

/// Why a host configuration is unusable.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
#[error("registry.hosts.{host}: {why}")]
pub struct HostsError {
    pub host: String,
    pub why: String,
}

impl RegistrySettings {
    /// Checks what serde cannot.
    pub fn validate(&self) -> Result<(), HostsError> {
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

    /// The rules every transfer of a pull keeps to.
    pub fn pace(&self) -> Pace {
        Pace {
            stall: Duration::from_secs(self.stall_timeout_secs.max(1)),
            min_bytes_per_sec: self.min_bytes_per_sec,
            window: Duration::from_secs(self.min_rate_window_secs),
        }
    }

    /// How long a pull may take in all, if that is bounded.
    pub fn pull_deadline(&self) -> Option<Duration> {
        (self.pull_deadline_secs > 0).then(|| Duration::from_secs(self.pull_deadline_secs))
    }

    /// Where to fetch `repository` of `registry` from, in order.
    pub fn endpoints(&self, registry: &str, repository: &str) -> Result<Vec<Endpoint>, HostsError> {
        let config = self.hosts.get(registry).or_else(|| self.hosts.get("*"));
        let mut endpoints = Vec::new();
        if let Some(config) = config {
            for mirror in &config.mirrors {
                let (scheme, host, prefix) =
                    parse_url(&mirror.url).map_err(|why| HostsError { host: registry.to_string(), why })?;
                let rewritten = mirror
                    .rewrite
                    .iter()
                    .find_map(|r| repository.strip_prefix(r.from.as_str()).map(|rest| format!("{}{rest}", r.to)))
                    .unwrap_or_else(|| repository.to_string());
                let repository = if prefix.is_empty() { rewritten } else { format!("{prefix}/{rewritten}") };
                endpoints.push(Endpoint { scheme, host, repository, tls: mirror.tls.clone(), mirror: true });
            }
            if config.mirrors_only {
                return Ok(endpoints);
            }
        }
        let upstream_host = if registry == super::super::reference::DEFAULT_DOMAIN {
            "registry-1.docker.io".to_string()
        } else {
            registry.to_string()
        };
        let tls = config.map(|c| c.tls.clone()).unwrap_or_default();
        let plain = config.is_some_and(|c| c.plain_http);
        if !plain {
            endpoints.push(upstream("https", &upstream_host, repository, &tls));
        }
        // As docker and containerd do: a loopback registry is tried over
        // plain HTTP after HTTPS.
        if plain || is_loopback(registry) {
            endpoints.push(upstream("http", &upstream_host, repository, &tls));
        }
        Ok(endpoints)
    }
}

fn upstream(scheme: &'static str, host: &str, repository: &str, tls: &TlsConfig) -> Endpoint {
    Endpoint { scheme, host: host.to_string(), repository: repository.to_string(), tls: tls.clone(), mirror: false }
}

/// `scheme://host[:port][/prefix]` → (scheme, host, prefix).
fn parse_url(url: &str) -> Result<(&'static str, String, String), String> {
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

/// `localhost`, `127.0.0.0/8` or `[::1]`, with or without a port.
pub fn is_loopback(registry: &str) -> bool {
    let host = if let Some(rest) = registry.strip_prefix('[') {
        rest.split_once(']').map(|(h, _)| h).unwrap_or(rest)
    } else {
        registry.rsplit_once(':').map(|(h, _)| h).unwrap_or(registry)
    };
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(toml_text: &str) -> RegistrySettings {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn loopback_names() {
        assert!(is_loopback("localhost:5000"));
        assert!(is_loopback("127.0.0.1:5000"));
        assert!(is_loopback("127.3.0.1"));
        assert!(is_loopback("[::1]:5000"));
        assert!(!is_loopback("registry.k8s.io"));
        assert!(!is_loopback("10.0.0.1:5000"));
    }

    #[test]
    fn mirrors_come_first_with_rewrites_and_prefixes() {
        let c = config(
            r#"
            [hosts."registry.k8s.io"]
            mirrors = [{ url = "http://127.0.0.1:5000/k8s" },
                       { url = "https://m.example", rewrite = [{ from = "pause", to = "mirror/pause" }] }]
            "#,
        );
        let e = c.endpoints("registry.k8s.io", "pause").unwrap();
        let shown: Vec<String> = e.iter().map(|e| format!("{}/{}", e.base_url(), e.repository)).collect();
        assert_eq!(
            shown,
            ["http://127.0.0.1:5000/k8s/pause", "https://m.example/mirror/pause", "https://registry.k8s.io/pause"]
        );
    }

    #[test]
    fn star_applies_to_every_registry_and_docker_io_is_its_registry_host() {
        let c = config(r#"hosts."*" = { mirrors = [{ url = "http://127.0.0.1:5000" }], mirrors_only = true }"#);
        let e = c.endpoints("docker.io", "library/busybox").unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].repository, "library/busybox");
        let e = RegistrySettings::default().endpoints("docker.io", "library/busybox").unwrap();
        assert_eq!(e[0].base_url(), "https://registry-1.docker.io");
    }

    #[test]
    fn loopback_falls_back_to_plain_http() {
        let e = RegistrySettings::default().endpoints("127.0.0.1:5000", "x").unwrap();
        let urls: Vec<String> = e.iter().map(Endpoint::base_url).collect();
        assert_eq!(urls, ["https://127.0.0.1:5000", "http://127.0.0.1:5000"]);
    }

    #[test]
    fn bad_mirror_urls_are_refused() {
        let c = config(r#"hosts."docker.io" = { mirrors = [{ url = "127.0.0.1:5000" }] }"#);
        assert!(c.validate().is_err());
    }

    #[test]
    fn a_pull_is_bounded_by_default_except_in_its_total_time() {
        let c = RegistrySettings::default();
        let pace = c.pace();
        assert_eq!((pace.min_bytes_per_sec, pace.window.as_secs(), pace.stall.as_secs()), (1024, 60, 60));
        assert_eq!(c.pull_deadline(), None);
        assert_eq!(c.abandoned_pull_grace_secs, 60);
        let c = config("min_bytes_per_sec = 0\npull_deadline_secs = 600\n");
        assert!(!c.pace().has_minimum());
        assert_eq!(c.pull_deadline(), Some(Duration::from_secs(600)));
        assert!(config("min_rate_window_secs = 0\n").validate().is_err());
        config("min_rate_window_secs = 0\nmin_bytes_per_sec = 0\n").validate().unwrap();
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
