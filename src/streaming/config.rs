//! The `[streaming]` config section: where the Exec/Attach/PortForward
//! server listens and the bounds on its sessions.

use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StreamingConfig {
    /// The address the server listens on; loopback by default, so nothing is
    /// reachable from outside the node unless asked for.
    pub address: String,
    /// The port; 0 picks a free one at each start.
    pub port: u16,
    /// A session with no traffic either way for this long is closed
    /// (containerd's `stream_idle_timeout`).
    pub idle_timeout_secs: u64,
    /// How long the URL an Exec/Attach/PortForward call returns stays
    /// usable (once).
    pub token_ttl_secs: u64,
    /// Most sessions open at once; more are refused (HTTP 429).
    pub max_sessions: usize,
    /// TLS: the server's certificate chain and private key (PEM files);
    /// both or neither. With them the URLs are `https://`.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
}

impl Default for StreamingConfig {
    fn default() -> Self {
        Self {
            address: "127.0.0.1".into(),
            port: 0,
            idle_timeout_secs: 4 * 3600,
            token_ttl_secs: 60,
            max_sessions: 256,
            tls_cert_file: None,
            tls_key_file: None,
        }
    }
}

impl StreamingConfig {
    pub fn validate(&self) -> Result<(), String> {
        self.ip()?;
        match (&self.tls_cert_file, &self.tls_key_file) {
            (None, None) => {}
            (Some(cert), Some(key)) => {
                for (name, path) in [("tls_cert_file", cert), ("tls_key_file", key)] {
                    if !path.is_absolute() || crate::config::has_dot_dot(path) {
                        return Err(format!(
                            "streaming.{name} must be an absolute path without '..', got {}",
                            path.display()
                        ));
                    }
                }
            }
            _ => return Err("streaming.tls_cert_file and streaming.tls_key_file go together".into()),
        }
        if self.idle_timeout_secs == 0 || self.token_ttl_secs == 0 || self.max_sessions == 0 {
            return Err("streaming.idle_timeout_secs, token_ttl_secs and max_sessions must be at least 1".into());
        }
        Ok(())
    }

    pub fn ip(&self) -> Result<IpAddr, String> {
        self.address
            .parse()
            .map_err(|_| format!("streaming.address must be an IP address, got {}", crate::quote::quote(&self.address)))
    }
}
