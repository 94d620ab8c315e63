//! TLS for the streaming server (rustls through tokio-rustls, ring
//! provider): the certificate chain and key from the configured PEM files,
//! read once at start.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
    #[error("streaming TLS certificate {path}: {why}")]
    Certificate { path: String, why: String },
    #[error("streaming TLS key {path}: {why}")]
    Key { path: String, why: String },
    #[error("streaming TLS: {0}")]
    Config(String),
}

/// An acceptor serving the chain in `cert` with the key in `key`.
pub(crate) fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, TlsError> {
    let cert_err = |why: String| TlsError::Certificate { path: cert.display().to_string(), why };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| cert_err(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| cert_err(e.to_string()))?;
    if chain.is_empty() {
        return Err(cert_err("no certificate in the file".into()));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| TlsError::Key { path: key.display().to_string(), why: e.to_string() })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}
