//! The `[streaming]` config section: where the Exec/Attach/PortForward
//! server listens and the bounds on its sessions.

use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct StreamingSettings {
    /// The address the server listens on; loopback by default, so nothing is
    /// reachable from outside the node unless asked for.
    pub(crate) address: String,
    /// The port; 0 picks a free one at each start.
    pub(crate) port: u16,
    /// A session with no traffic either way for this long is closed
    /// (containerd's `stream_idle_timeout`).
    pub(crate) idle_timeout_secs: u64,
    /// How long the URL an Exec/Attach/PortForward call returns stays
    /// usable (once).
    pub(crate) token_ttl_secs: u64,
    /// Most sessions open at once; more are refused (HTTP 429).
    pub(crate) max_sessions: usize,
    /// Most connections at once that have not become a session yet; more
    /// are closed as they come. Each must send its whole request within
    /// `request_timeout_secs`.
    pub(crate) max_connections: usize,
    pub(crate) request_timeout_secs: u64,
    /// Most session URLs handed out and not used yet; an Exec, Attach or
    /// PortForward beyond them is refused (ResourceExhausted) until some
    /// are used or expire.
    pub(crate) max_pending_urls: usize,
    /// TLS: the server's certificate chain and private key (PEM files);
    /// both or neither. With them the URLs are `https://`.
    pub(crate) tls_cert_file: Option<PathBuf>,
    pub(crate) tls_key_file: Option<PathBuf>,
}

impl Default for StreamingSettings {
    fn default() -> Self {
        Self {
            address: "127.0.0.1".into(),
            port: 0,
            idle_timeout_secs: 4 * 3600,
            token_ttl_secs: 60,
            max_sessions: 256,
            max_connections: 128,
            request_timeout_secs: 5,
            max_pending_urls: 1024,
            tls_cert_file: None,
            tls_key_file: None,
        }
    }
}

impl StreamingSettings {
    pub(crate) fn validate(&self) -> Result<(), String> {
        self.ip()?;
        match (&self.tls_cert_file, &self.tls_key_file) {
            (None, None) => {}
            (Some(cert), Some(key)) => {
                for (name, path) in [("tls_cert_file", cert), ("tls_key_file", key)] {
                    if !path.is_absolute() || crate::paths::has_dot_dot(path) {
                        return Err(format!(
                            "streaming.{name} must be an absolute path without '..', got {}",
                            path.display()
                        ));
                    }
                }
            }
            _ => return Err("streaming.tls_cert_file and streaming.tls_key_file go together".into()),
        }
        let bounds = [
            self.idle_timeout_secs,
            self.token_ttl_secs,
            self.max_sessions as u64,
            self.max_connections as u64,
            self.request_timeout_secs,
            self.max_pending_urls as u64,
        ];
        if bounds.contains(&0) {
            return Err("streaming.idle_timeout_secs, token_ttl_secs, max_sessions, max_connections, \
                        request_timeout_secs and max_pending_urls must be at least 1"
                .into());
        }
        Ok(())
    }

    pub(crate) fn ip(&self) -> Result<IpAddr, String> {
        self.address
            .parse()
            .map_err(|_| format!("streaming.address must be an IP address, got {}", crate::quote::quote(&self.address)))
    }
}
