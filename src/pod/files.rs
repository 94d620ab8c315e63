//! The files a sandbox gives its containers: /etc/resolv.conf from the pod's
//! DNS config, /etc/hosts and /etc/hostname. Content is built here; writing
//! them is the sandbox manager's job.

use std::net::IpAddr;

/// A pod's DNS settings, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DnsSpec {
    pub(crate) servers: Vec<String>,
    pub(crate) searches: Vec<String>,
    pub(crate) options: Vec<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{field}: {why}")]
pub(crate) struct FileError {
    pub(crate) field: String,
    pub(crate) why: String,
}

impl DnsSpec {
    /// Checks servers are IP addresses and searches/options are single tokens.
    pub(crate) fn validate(&self) -> Result<(), FileError> {
        let err = |field: String, why: &str| FileError { field, why: why.into() };
        if self.servers.len() > 16 || self.searches.len() > 64 || self.options.len() > 64 {
            return Err(err("dns_config".into(), "too many servers, searches or options"));
        }
        for (i, s) in self.servers.iter().enumerate() {
            if s.parse::<IpAddr>().is_err() {
                return Err(err(format!("dns_config.servers[{i}]"), "not an IP address"));
            }
        }
        for (i, s) in self.searches.iter().enumerate() {
            if s.is_empty() || s.len() > 253 || s.chars().any(|c| c.is_whitespace() || c.is_control() || c == '#') {
                return Err(err(format!("dns_config.searches[{i}]"), "not a domain name"));
            }
        }
        for (i, s) in self.options.iter().enumerate() {
            if s.is_empty() || s.len() > 256 || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(err(format!("dns_config.options[{i}]"), "not a resolver option"));
            }
        }
        Ok(())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.servers.is_empty() && self.searches.is_empty() && self.options.is_empty()
    }
}

/// /etc/resolv.conf for a pod: its DNS config, or the node's file when the
/// config is empty (what containerd and CRI-O do).
pub(crate) fn resolv_conf(dns: &DnsSpec, node_resolv_conf: &str) -> String {
    if dns.is_empty() {
        return node_resolv_conf.to_string();
    }
    let mut out = String::new();
    if !dns.searches.is_empty() {
        out.push_str(&format!("search {}\n", dns.searches.join(" ")));
    }
    for server in &dns.servers {
        out.push_str(&format!("nameserver {server}\n"));
    }
    if !dns.options.is_empty() {
        out.push_str(&format!("options {}\n", dns.options.join(" ")));
    }
    out
}

/// /etc/hosts for a pod with its own network namespace.
pub(crate) fn pod_hosts() -> String {
    "127.0.0.1\tlocalhost\n\
     ::1\tlocalhost ip6-localhost ip6-loopback\n\
     fe00::0\tip6-localnet\n\
     fe00::0\tip6-mcastprefix\n\
     fe00::1\tip6-allnodes\n\
     fe00::2\tip6-allrouters\n"
        .to_string()
}

/// Checks a pod hostname: an RFC 1123 name of at most 64 bytes.
pub(crate) fn validate_hostname(name: &str) -> Result<(), FileError> {
    let err = |why: &str| FileError { field: "hostname".into(), why: why.into() };
    if name.len() > 64 {
        return Err(err("longer than 64 bytes"));
    }
    if name.starts_with(['-', '.']) || name.ends_with(['-', '.']) || name.contains("..") {
        return Err(err("labels must start and end with a letter or digit"));
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.') {
        return Err(err("only letters, digits, '-' and '.' are allowed"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_from_dns_config() {
        let dns = DnsSpec {
            servers: vec!["10.96.0.10".into(), "fd00::a".into()],
            searches: vec!["default.svc.cluster.local".into(), "svc.cluster.local".into()],
            options: vec!["ndots:5".into(), "edns0".into()],
        };
        dns.validate().unwrap();
        assert_eq!(
            resolv_conf(&dns, "unused"),
            "search default.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\nnameserver fd00::a\noptions ndots:5 edns0\n"
        );
        assert_eq!(resolv_conf(&DnsSpec::default(), "nameserver 1.1.1.1\n"), "nameserver 1.1.1.1\n");
    }

    #[test]
    fn injection_and_garbage_are_refused() {
        let bad_server = DnsSpec { servers: vec!["1.2.3.4\nnameserver 6.6.6.6".into()], ..Default::default() };
        assert_eq!(bad_server.validate().unwrap_err().field, "dns_config.servers[0]");
        let bad_search = DnsSpec { searches: vec!["a b".into()], ..Default::default() };
        assert!(bad_search.validate().is_err());
        assert!(validate_hostname("ok-host.example").is_ok());
        assert!(validate_hostname("bad/host").is_err());
        assert!(validate_hostname(&"a".repeat(65)).is_err());
        assert!(validate_hostname("-x").is_err());
    }
}
