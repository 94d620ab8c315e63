//! `[metrics]`: where the Prometheus endpoint listens, if anywhere.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct MetricsSettings {
    /// `IP:PORT` (or a bare `PORT`, on loopback) of the `/metrics`
    /// endpoint; empty (the default): no endpoint, nothing recorded.
    pub(crate) address: String,
    /// Most scrapes served at once; more connections are closed at once.
    pub(crate) max_connections: usize,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        Self { address: String::new(), max_connections: 8 }
    }
}

impl MetricsSettings {
    /// Where to listen; None when the endpoint is off.
    pub(crate) fn listen_address(&self) -> Result<Option<SocketAddr>, String> {
        let address = self.address.trim();
        if address.is_empty() {
            return Ok(None);
        }
        if let Ok(port) = address.parse::<u16>() {
            return Ok(Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)));
        }
        address.parse::<SocketAddr>().map(Some).map_err(|_| {
            format!("metrics.address must be IP:PORT or a port number, got {}", crate::quote::quote(&self.address))
        })
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.max_connections == 0 {
            return Err("metrics.max_connections must be at least 1".into());
        }
        self.listen_address().map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_off_a_port_or_an_ip_and_port() {
        let at = |address: &str| MetricsSettings { address: address.into(), ..Default::default() }.listen_address();
        assert_eq!(at(""), Ok(None));
        assert_eq!(at("9101"), Ok(Some("127.0.0.1:9101".parse().unwrap())));
        assert_eq!(at("0.0.0.0:9101"), Ok(Some("0.0.0.0:9101".parse().unwrap())));
        assert_eq!(at("[::1]:9101"), Ok(Some("[::1]:9101".parse().unwrap())));
        assert!(at("localhost:9101").unwrap_err().contains("metrics.address"));
    }
}
