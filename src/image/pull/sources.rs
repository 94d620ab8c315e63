//! Where a pull's blobs come from: the endpoint that served its manifest,
//! then the endpoints after it in the hosts order (the registry itself
//! after its mirrors), each asked for a blob the ones before could not
//! serve, as containerd's fetcher does, so a pull-through mirror that lacks
//! a blob does not fail a pull the registry can serve. A blob that arrives
//! but is wrong (its digest, its size) is not fetched elsewhere: that fails
//! the pull. The later endpoints' clients are made when first needed.

use bytes::Bytes;
use tokio::sync::OnceCell;

use super::auth::Credentials;
use super::client::{RegistryClient, RemoteError};
use super::hosts::Endpoint;
use super::pace::Pace;

pub(crate) struct BlobSources {
    serving: RegistryClient,
    later: Vec<Later>,
    /// The registry the image names (for the later clients).
    registry: String,
    credentials: Credentials,
    pace: Pace,
}

/// What is asked of an endpoint, and what it answers.
trait Ask: Copy {
    type Answer;
    async fn of(self, client: &RegistryClient, digest: &str) -> Result<Self::Answer, RemoteError>;
}

/// The whole blob, at most this many bytes.
#[derive(Clone, Copy)]
struct Whole(u64);

/// The response, its body read as it arrives, from this byte on.
#[derive(Clone, Copy)]
struct Streamed(Option<u64>);

impl Ask for Whole {
    type Answer = Bytes;
    async fn of(self, client: &RegistryClient, digest: &str) -> Result<Bytes, RemoteError> {
        client.small_blob(digest, self.0).await
    }
}

impl Ask for Streamed {
    type Answer = reqwest::Response;
    async fn of(self, client: &RegistryClient, digest: &str) -> Result<reqwest::Response, RemoteError> {
        match self.0 {
            None => client.blob(digest).await,
            Some(from) => client.blob_from(digest, from).await,
        }
    }
}

/// An endpoint after the serving one, and its client once made.
struct Later {
    endpoint: Endpoint,
    client: OnceCell<RegistryClient>,
}

impl BlobSources {
    pub(crate) fn new(
        serving: RegistryClient,
        later: impl IntoIterator<Item = Endpoint>,
        registry: &str,
        credentials: Credentials,
        pace: Pace,
    ) -> Self {
        let later = later.into_iter().map(|endpoint| Later { endpoint, client: OnceCell::new() }).collect();
        Self { serving, later, registry: registry.to_string(), credentials, pace }
    }

    /// A blob small enough (`limit`) to be read whole: an image config.
    pub(crate) async fn small_blob(&self, digest: &str, limit: u64) -> Result<Bytes, RemoteError> {
        self.first_served(digest, Whole(limit)).await
    }

    /// A blob as a response whose body is read as it arrives.
    pub(crate) async fn blob(&self, digest: &str) -> Result<reqwest::Response, RemoteError> {
        self.first_served(digest, Streamed(None)).await
    }

    /// The rest of a blob from byte `from` on (a download resumed).
    pub(crate) async fn blob_from(&self, digest: &str, from: u64) -> Result<reqwest::Response, RemoteError> {
        self.first_served(digest, Streamed(Some(from))).await
    }

    /// What the first endpoint that serves `digest` answers; when none
    /// does, the serving endpoint's failure.
    async fn first_served<A: Ask>(&self, digest: &str, ask: A) -> Result<A::Answer, RemoteError> {
        let first = match ask.of(&self.serving, digest).await {
            Ok(answer) => return Ok(answer),
            Err(e) if !another_may_serve(&e) => return Err(e),
            Err(e) => e,
        };
        for later in &self.later {
            let made = later
                .client
                .get_or_try_init(|| async {
                    RegistryClient::new(later.endpoint.clone(), &self.registry, self.credentials.clone(), self.pace)
                })
                .await;
            let endpoint = later.endpoint.base_url();
            let client = match made {
                Ok(client) => client,
                Err(e) => {
                    tracing::debug!(blob = digest, endpoint, error = %e, "cannot reach the next endpoint");
                    continue;
                }
            };
            match ask.of(client, digest).await {
                Ok(answer) => {
                    tracing::info!(blob = digest, endpoint, failed = %first,
                        "blob fetched from a later endpoint than the manifest's");
                    return Ok(answer);
                }
                Err(e) => {
                    tracing::debug!(blob = digest, endpoint, error = %e, "the next endpoint cannot serve the blob")
                }
            }
        }
        Err(first)
    }
}

/// Whether a failure to get a blob from one endpoint leaves another worth
/// asking: it lacks the blob, refuses us, fails, or cannot be reached.
fn another_may_serve(e: &RemoteError) -> bool {
    matches!(
        e,
        RemoteError::NotFound(_)
            | RemoteError::Unauthorized { .. }
            | RemoteError::Status { .. }
            | RemoteError::Transport { .. }
            | RemoteError::TooSlow { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_failures_of_the_endpoint_itself_send_a_blob_elsewhere() {
        let what = || "blob".to_string();
        assert!(another_may_serve(&RemoteError::NotFound(what())));
        assert!(another_may_serve(&RemoteError::Status { what: what(), status: 502 }));
        assert!(another_may_serve(&RemoteError::Unauthorized { what: what(), why: String::new() }));
        assert!(another_may_serve(&RemoteError::Transport { what: what(), why: String::new(), timeout: true }));
        assert!(!another_may_serve(&RemoteError::TooLarge { what: what(), limit: 1 }));
        assert!(!another_may_serve(&RemoteError::Setup(what())));
    }
}
