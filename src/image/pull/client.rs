//! One registry endpoint spoken to over the distribution API (v2): manifests
//! read with a size bound, blobs as byte streams, and the 401 challenge flow
//! (bearer tokens from the token service, or basic auth) answered with the
//! pull's credentials; every answer within the pull's pace. Errors name
//! URLs, never secrets.

use std::time::Instant;

use bytes::Bytes;
use reqwest::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_RANGE, CONTENT_TYPE, RANGE, WWW_AUTHENTICATE};
use reqwest::StatusCode;
use serde::Deserialize;

use super::auth::{Challenge, Credentials};
use super::hosts::Endpoint;
use super::pace::{Meter, Pace, Slow};

/// Largest token-service answer read.
const MAX_TOKEN_BYTES: u64 = 1 << 20;
const USER_AGENT: &str = concat!("nidus/", env!("CARGO_PKG_VERSION"));

#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum RemoteError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("{what}: access denied ({why})")]
    Unauthorized { what: String, why: String },
    #[error("{what}: the registry answered {status}")]
    Status { what: String, status: u16 },
    #[error("{what}: {why}")]
    Transport { what: String, why: String, timeout: bool },
    #[error("{what} is larger than {limit} bytes")]
    TooLarge { what: String, limit: u64 },
    /// The answer came slower than the pull's minimum rate.
    #[error("{what}: too slow: {why}")]
    TooSlow { what: String, why: String },
    #[error("{0}")]
    Setup(String),
    /// Asked for the rest of a blob, the registry answered otherwise.
    #[error("{what}: the registry cannot resume a download ({why})")]
    NoResume { what: String, why: String },
}

/// A client for one repository on one endpoint.
pub(crate) struct RegistryClient {
    http: reqwest::Client,
    endpoint: Endpoint,
    /// The registry the image names, sent to mirrors as `?ns=` (as containerd does).
    namespace: Option<String>,
    credentials: Credentials,
    authorization: tokio::sync::Mutex<Option<HeaderValue>>,
    pace: Pace,
}

fn transport(what: &str, e: &reqwest::Error) -> RemoteError {
    RemoteError::Transport { what: what.to_string(), why: error_chain(e), timeout: e.is_timeout() }
}

fn slow(what: &str, why: Slow) -> RemoteError {
    match why {
        Slow::Stalled { .. } => RemoteError::Transport { what: what.to_string(), why: why.to_string(), timeout: true },
        Slow::TooSlow { .. } => RemoteError::TooSlow { what: what.to_string(), why: why.to_string() },
    }
}

/// An HTTP error with its causes. reqwest's message can carry the URL
/// (never credentials: nidus never puts them in URLs).
pub(crate) fn error_chain(e: &reqwest::Error) -> String {
    let mut why = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        why = format!("{why}: {s}");
        source = s.source();
    }
    why
}

fn read_pem(path: &std::path::Path) -> Result<Vec<u8>, RemoteError> {
    crate::bounded_file::read(path, 1 << 20, crate::bounded_file::FinalLink::Follow)
        .map_err(|e| RemoteError::Setup(format!("reading {}: {e}", path.display())))
}

impl RegistryClient {
    pub(crate) fn new(
        endpoint: Endpoint,
        registry: &str,
        credentials: Credentials,
        pace: Pace,
    ) -> Result<Self, RemoteError> {
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .user_agent(USER_AGENT)
            .connect_timeout(pace.stall)
            .read_timeout(pace.stall);
        for ca in &endpoint.tls.ca_certs {
            let pem = read_pem(ca)?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| RemoteError::Setup(format!("CA certificates {}: {e}", ca.display())))?;
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        match (&endpoint.tls.client_cert, &endpoint.tls.client_key) {
            (Some(cert), Some(key)) => {
                let mut pem = read_pem(cert)?;
                pem.push(b'\n');
                pem.extend(read_pem(key)?);
                let identity = reqwest::Identity::from_pem(&pem)
                    .map_err(|e| RemoteError::Setup(format!("client certificate {}: {e}", cert.display())))?;
                builder = builder.identity(identity);
            }
            (None, None) => {}
            _ => return Err(RemoteError::Setup("client_cert and client_key go together".into())),
        }
        let http = builder.build().map_err(|e| RemoteError::Setup(format!("HTTP client: {e}")))?;
        let namespace = endpoint.mirror.then(|| registry.to_string());
        Ok(Self { http, endpoint, namespace, credentials, authorization: Default::default(), pace })
    }

    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Sends a request; its answer (status and headers) must come within
    /// the pace's window, besides the stall timeout on every read.
    async fn send(&self, request: reqwest::RequestBuilder, what: &str) -> Result<reqwest::Response, RemoteError> {
        let sending = request.send();
        let sent = match self.pace.answer_within() {
            Some(limit) => tokio::time::timeout(limit, sending).await.map_err(|_| RemoteError::TooSlow {
                what: what.to_string(),
                why: format!("no answer within {} s", limit.as_secs()),
            })?,
            None => sending.await,
        };
        sent.map_err(|e| transport(what, &e))
    }

    fn url(&self, kind: &str, reference: &str) -> String {
        let mut url = format!("{}/v2/{}/{kind}/{reference}", self.endpoint.base_url(), self.endpoint.repository);
        if let Some(ns) = &self.namespace {
            url.push_str("?ns=");
            url.push_str(ns);
        }
        url
    }

    /// GET with the challenge flow: a 401 is answered once with credentials.
    async fn get(&self, kind: &str, reference: &str, accept: &[&str]) -> Result<reqwest::Response, RemoteError> {
        self.get_from(kind, reference, accept, None).await
    }

    /// GET of what follows byte `from` (a `Range` request), or of everything.
    async fn get_from(
        &self,
        kind: &str,
        reference: &str,
        accept: &[&str],
        from: Option<u64>,
    ) -> Result<reqwest::Response, RemoteError> {
        let url = self.url(kind, reference);
        for attempt in 0..2 {
            let mut request = self.http.get(&url);
            if !accept.is_empty() {
                request = request.header(ACCEPT, accept.join(", "));
            }
            if let Some(from) = from {
                request = request.header(RANGE, format!("bytes={from}-"));
            }
            if let Some(value) = self.authorization.lock().await.clone() {
                request = request.header(AUTHORIZATION, value);
            }
            let response = self.send(request, &url).await?;
            match response.status() {
                StatusCode::UNAUTHORIZED if attempt == 0 => {
                    let challenge = response.headers().get(WWW_AUTHENTICATE).and_then(|v| v.to_str().ok());
                    let challenge = challenge.and_then(Challenge::parse).ok_or_else(|| RemoteError::Unauthorized {
                        what: url.clone(),
                        why: "401 without a usable WWW-Authenticate challenge".into(),
                    })?;
                    self.answer(&url, &challenge).await?;
                }
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                    return Err(RemoteError::Unauthorized {
                        what: url,
                        why: format!("the registry answered {} with the credentials given", response.status()),
                    })
                }
                StatusCode::NOT_FOUND => return Err(RemoteError::NotFound(url)),
                status if status.is_success() => return Ok(response),
                status => return Err(RemoteError::Status { what: url, status: status.as_u16() }),
            }
        }
        Err(RemoteError::Unauthorized { what: url, why: "still refused after authenticating".into() })
    }

    /// Gets the `Authorization` value a challenge asks for.
    async fn answer(&self, url: &str, challenge: &Challenge) -> Result<(), RemoteError> {
        let value = match challenge.scheme.as_str() {
            "basic" => self.credentials.basic_header().ok_or_else(|| RemoteError::Unauthorized {
                what: url.to_string(),
                why: "the registry asks for a username and password and none were given".into(),
            })?,
            "bearer" => format!("Bearer {}", self.bearer_token(url, challenge).await?),
            other => {
                return Err(RemoteError::Unauthorized {
                    what: url.to_string(),
                    why: format!("unsupported authentication scheme {other:?}"),
                })
            }
        };
        let value = HeaderValue::from_str(&value).map_err(|_| RemoteError::Unauthorized {
            what: url.to_string(),
            why: "the token service answered a token that is not a valid header value".into(),
        })?;
        *self.authorization.lock().await = Some(value);
        Ok(())
    }

    async fn bearer_token(&self, url: &str, challenge: &Challenge) -> Result<String, RemoteError> {
        if let Credentials::RegistryToken(token) = &self.credentials {
            return Ok(token.clone());
        }
        let realm = challenge.params.get("realm").ok_or_else(|| RemoteError::Unauthorized {
            what: url.to_string(),
            why: "the bearer challenge names no realm".into(),
        })?;
        if !realm.starts_with("https://") && !realm.starts_with("http://") {
            return Err(RemoteError::Unauthorized {
                what: url.to_string(),
                why: format!("the token realm {realm:?} is not an http(s) URL"),
            });
        }
        let scope = challenge
            .params
            .get("scope")
            .cloned()
            .unwrap_or_else(|| format!("repository:{}:pull", self.endpoint.repository));
        let service = challenge.params.get("service").cloned().unwrap_or_default();
        let request = match &self.credentials {
            Credentials::IdentityToken(refresh) => self.http.post(realm).form(&[
                ("grant_type", "refresh_token"),
                ("refresh_token", refresh.as_str()),
                ("service", service.as_str()),
                ("scope", scope.as_str()),
                ("client_id", "nidus"),
            ]),
            credentials => {
                let request = self.http.get(realm).query(&[("service", &service), ("scope", &scope)]);
                match credentials {
                    Credentials::Basic { username, password } => request.basic_auth(username, Some(password)),
                    _ => request,
                }
            }
        };
        let response = self.send(request, realm).await?;
        let status = response.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(RemoteError::Unauthorized {
                what: url.to_string(),
                why: format!("the token service {realm} refused the credentials ({status})"),
            });
        }
        if !status.is_success() {
            return Err(RemoteError::Status { what: realm.to_string(), status: status.as_u16() });
        }
        let answer = format!("the token service's answer ({realm})");
        let body = read_bounded(response, MAX_TOKEN_BYTES, &answer, self.pace).await?;
        #[derive(Deserialize)]
        struct TokenAnswer {
            token: Option<String>,
            access_token: Option<String>,
        }
        let answer: TokenAnswer = serde_json::from_slice(&body).map_err(|e| RemoteError::Unauthorized {
            what: url.to_string(),
            why: format!("the token service {realm} answered no JSON token: {e}"),
        })?;
        answer.token.or(answer.access_token).filter(|t| !t.is_empty()).ok_or_else(|| RemoteError::Unauthorized {
            what: url.to_string(),
            why: format!("the token service {realm} answered no token"),
        })
    }

    /// A manifest or index by tag or digest: its bytes (at most `limit`) and
    /// the media type the registry gives.
    pub(crate) async fn manifest(
        &self,
        reference: &str,
        accept: &[&str],
        limit: u64,
    ) -> Result<(Bytes, Option<String>), RemoteError> {
        let response = self.get("manifests", reference, accept).await?;
        let media_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or(v).trim().to_string());
        let what = self.url("manifests", reference);
        let body = read_bounded(response, limit, &what, self.pace).await?;
        Ok((body, media_type))
    }

    /// A blob, small enough (`limit`) to be read whole: an image config.
    pub(crate) async fn small_blob(&self, digest: &str, limit: u64) -> Result<Bytes, RemoteError> {
        let response = self.get("blobs", digest, &[]).await?;
        let what = self.url("blobs", digest);
        read_bounded(response, limit, &what, self.pace).await
    }

    /// A blob as a response whose body is read as it arrives.
    pub(crate) async fn blob(&self, digest: &str) -> Result<reqwest::Response, RemoteError> {
        self.get("blobs", digest, &[]).await
    }

    /// The rest of a blob from byte `from` on, as a response whose body is
    /// read as it arrives: a `206 Partial Content` whose `Content-Range`
    /// starts there, or `NoResume`.
    pub(crate) async fn blob_from(&self, digest: &str, from: u64) -> Result<reqwest::Response, RemoteError> {
        let response = self.get_from("blobs", digest, &[], Some(from)).await?;
        let no_resume = |why: String| RemoteError::NoResume { what: self.url("blobs", digest), why };
        if response.status() != StatusCode::PARTIAL_CONTENT {
            return Err(no_resume(format!("it answered {} to a range request", response.status())));
        }
        let range = response.headers().get(CONTENT_RANGE).and_then(|v| v.to_str().ok()).unwrap_or_default();
        if resumed_at(range) != Some(from) {
            return Err(no_resume(format!("Content-Range {range:?} does not start at byte {from}")));
        }
        Ok(response)
    }
}

/// Where a `Content-Range: bytes FIRST-LAST/SIZE` answer starts.
fn resumed_at(content_range: &str) -> Option<u64> {
    let (unit, rest) = content_range.trim().split_once(' ')?;
    if !unit.eq_ignore_ascii_case("bytes") {
        return None;
    }
    rest.split_once('-')?.0.trim().parse().ok()
}

/// Reads a response body, refusing it above `limit` bytes and when it comes
/// slower than `pace` allows.
async fn read_bounded(
    mut response: reqwest::Response,
    limit: u64,
    what: &str,
    pace: Pace,
) -> Result<Bytes, RemoteError> {
    if response.content_length().is_some_and(|n| n > limit) {
        return Err(RemoteError::TooLarge { what: what.to_string(), limit });
    }
    let mut body = Vec::new();
    let mut meter = Meter::new(pace, Instant::now());
    loop {
        let chunk = meter.paced(response.chunk()).await.map_err(|why| slow(what, why))?;
        match chunk.map_err(|e| transport(what, &e))? {
            Some(chunk) => {
                if body.len() as u64 + chunk.len() as u64 > limit {
                    return Err(RemoteError::TooLarge { what: what.to_string(), limit });
                }
                body.extend_from_slice(&chunk);
                meter.received(chunk.len() as u64, Instant::now()).map_err(|why| slow(what, why))?;
            }
            None => return Ok(Bytes::from(body)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_content_range_says_where_the_rest_starts() {
        assert_eq!(resumed_at("bytes 1000-1999/2000"), Some(1000));
        assert_eq!(resumed_at("bytes 0-9/*"), Some(0));
        assert_eq!(resumed_at("items 1000-1999/2000"), None);
        assert_eq!(resumed_at(""), None);
        assert_eq!(resumed_at("bytes */2000"), None);
    }
}
