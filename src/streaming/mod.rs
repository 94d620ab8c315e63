//! The streaming server behind the CRI's Exec, Attach and PortForward: the
//! CRI call validates and leaves the session's needs under a single-use,
//! expiring token, and answers an absolute URL; the client connects there
//! and speaks remotecommand or port-forward over SPDY/3.1.

pub(crate) mod attach;
pub(crate) mod portforward;
pub(crate) mod queue;
pub(crate) mod remotecommand;
pub(crate) mod runtime;
pub(crate) mod server;
pub mod spdy;
pub(crate) mod status;
pub(crate) mod tls;
pub(crate) mod tokens;
pub(crate) mod websocket;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::config::streaming::StreamingSettings;
use portforward::PodNetwork;
use runtime::{ExecStdio, PreparedExec};

/// What a token stands for until its client connects.
pub(crate) enum Pending {
    Exec { launch: Box<dyn PreparedExec>, stdio: ExecStdio },
    Attach { launch: attach::AttachLaunch, stdio: ExecStdio },
    PortForward(PodNetwork),
}

impl Pending {
    /// The URL path segment that serves it.
    fn endpoint(&self) -> &'static str {
        match self {
            Pending::Exec { .. } => "exec",
            Pending::Attach { .. } => "attach",
            Pending::PortForward(_) => "portforward",
        }
    }
}

/// What the request handlers share.
pub(crate) struct Shared {
    tokens: tokens::Tokens<Pending>,
    sessions: server::Sessions,
    /// Connections that are not a session yet.
    connections: server::Sessions,
    request_timeout: Duration,
    idle_timeout: Duration,
    /// Counts sessions begun and open, by kind.
    metrics: crate::metrics::Metrics,
}

pub(crate) struct StreamingServer {
    /// `http://ADDRESS:PORT` (https with TLS), what URLs start with.
    base_url: String,
    shared: Arc<Shared>,
}

impl StreamingServer {
    /// Binds the configured address and serves in the background.
    pub(crate) async fn start(config: &StreamingSettings, metrics: crate::metrics::Metrics) -> std::io::Result<Self> {
        let ip = config.ip().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let tls = match (&config.tls_cert_file, &config.tls_key_file) {
            (Some(cert), Some(key)) => Some(tls::acceptor(cert, key).map_err(std::io::Error::other)?),
            _ => None,
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, config.port)).await?;
        let local = listener.local_addr()?;
        // A wildcard address is no place to connect to: the URL names loopback
        // (kubelet, the URL's user, runs on this node).
        let reachable = match local.ip() {
            std::net::IpAddr::V4(v4) if v4.is_unspecified() => SocketAddr::from(([127, 0, 0, 1], local.port())),
            std::net::IpAddr::V6(v6) if v6.is_unspecified() => {
                SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, local.port()))
            }
            _ => local,
        };
        let shared = Arc::new(Shared {
            tokens: tokens::Tokens::new(Duration::from_secs(config.token_ttl_secs), config.max_pending_urls),
            sessions: Arc::new(tokio::sync::Semaphore::new(config.max_sessions)),
            connections: Arc::new(tokio::sync::Semaphore::new(config.max_connections)),
            request_timeout: Duration::from_secs(config.request_timeout_secs),
            idle_timeout: Duration::from_secs(config.idle_timeout_secs),
            metrics,
        });
        server::spawn_accept_loop(listener, tls, shared.clone());
        tracing::info!(address = %local, scheme, "streaming server listening");
        Ok(Self { base_url: format!("{scheme}://{reachable}"), shared })
    }

    /// The URL of a new exec session.
    pub(crate) fn exec_url(&self, launch: Box<dyn PreparedExec>, stdio: ExecStdio) -> Result<String, tokens::Full> {
        self.url(Pending::Exec { launch, stdio })
    }

    /// The URL of a new attach session.
    pub(crate) fn attach_url(&self, launch: attach::AttachLaunch, stdio: ExecStdio) -> Result<String, tokens::Full> {
        self.url(Pending::Attach { launch, stdio })
    }

    /// The URL of a new port-forward session.
    pub(crate) fn port_forward_url(&self, network: PodNetwork) -> Result<String, tokens::Full> {
        self.url(Pending::PortForward(network))
    }

    fn url(&self, pending: Pending) -> Result<String, tokens::Full> {
        let endpoint = pending.endpoint();
        let token = self.shared.tokens.insert(pending)?;
        Ok(format!("{}/{endpoint}/{token}", self.base_url))
    }
}
