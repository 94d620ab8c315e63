//! What the `[registry]` section of the config (`config::registry`) means
//! for one pull: per-registry mirrors tried in order before the registry
//! itself, plain-HTTP and TLS settings, repository rewrites, loopback
//! registries reached over plain HTTP when they do not speak TLS, and the
//! bounds of a pull (stall, minimum rate, deadline, grace once its callers
//! left).

use std::net::IpAddr;
use std::time::Duration;

use super::pace::Pace;
use crate::config::registry::{parse_url, HostsError, RegistrySettings, TlsConfig};

/// One place a pull may fetch from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Endpoint {
    /// `http` or `https`.
    pub(crate) scheme: &'static str,
    /// `host[:port]`.
    pub(crate) host: String,
    /// The repository on this endpoint.
    pub(crate) repository: String,
    pub(crate) tls: TlsConfig,
    /// A mirror rather than the registry itself.
    pub(crate) mirror: bool,
}

impl Endpoint {
    pub(crate) fn base_url(&self) -> String {
        format!("{}://{}", self.scheme, self.host)
    }
}

/// What `[registry]` means for one pull.
impl RegistrySettings {
    /// The rules every transfer of a pull keeps to.
    pub(crate) fn pace(&self) -> Pace {
        Pace {
            stall: Duration::from_secs(self.stall_timeout_secs.max(1)),
            min_bytes_per_sec: self.min_bytes_per_sec,
            window: Duration::from_secs(self.min_rate_window_secs),
        }
    }

    /// How long a pull may take in all, if that is bounded.
    pub(crate) fn pull_deadline(&self) -> Option<Duration> {
        (self.pull_deadline_secs > 0).then(|| Duration::from_secs(self.pull_deadline_secs))
    }

    /// Where to fetch `repository` of `registry` from, in order.
    pub(crate) fn endpoints(&self, registry: &str, repository: &str) -> Result<Vec<Endpoint>, HostsError> {
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

/// `localhost`, `127.0.0.0/8` or `[::1]`, with or without a port.
pub(crate) fn is_loopback(registry: &str) -> bool {
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
