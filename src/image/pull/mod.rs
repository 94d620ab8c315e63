//! Pulling images from OCI registries (distribution API v2) into the image
//! store: endpoints from the hosts configuration tried in order; the
//! manifest (an index resolved to this node's platform) and config fetched
//! with size bounds and verified; layers not yet stored fetched in parallel,
//! hashed, stored and unpacked as they arrive, each verified before it is
//! published; a blob the manifest's endpoint cannot serve asked of the
//! endpoints after it; pulls of one image and downloads of one layer
//! de-duplicated. Every pull is bounded: each transfer by its pace (stall,
//! minimum rate), the pull by an optional deadline, and by its callers (once
//! all left, it is cancelled after a grace period); what it stores is leased
//! from garbage collection until its image is in the index.

pub(crate) mod auth;
mod bridge;
pub mod cli;
mod client;
pub(crate) mod hosts;
mod inflight;
mod manifest;
mod pace;
pub(crate) mod progress;
mod sources;
mod stop;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use oci_spec::image::ImageManifest;
use tokio::sync::{mpsc, Semaphore};

use crate::config::registry::RegistrySettings;
pub(crate) use auth::Credentials;
pub(crate) use progress::PullSnapshot;

use self::client::{RegistryClient, RemoteError};
use self::inflight::InFlight;
use self::manifest::{Choice, Fetched, LayerDescriptor};
use self::pace::{Meter, Slow};
use self::progress::{LayerProgress, LayerState, Pulls};
use self::sources::BlobSources;
use self::stop::{Stop, StopSignal};
use super::content::MAX_JSON_BYTES;
use super::import::{Candidate, StoredLayer};
use super::{Digest, Image, ImageError, ImageStore, Reference};
use crate::undo::Undo;

/// Tries of one layer download whose connection fails.
const DOWNLOAD_ATTEMPTS: u32 = 3;

/// Times one download attempt resumes (a `Range` request for the rest)
/// after its connection is lost mid-body.
const RESUMES: u32 = 3;

/// Largest manifest or index accepted from a registry.
const MAX_MANIFEST_BYTES: u64 = 4 << 20;

/// Why a pull failed. Messages name the image (and layer), never credentials.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum PullError {
    #[error("{0}")]
    InvalidReference(String),
    #[error("image {image} not found: {why}")]
    NotFound { image: String, why: String },
    #[error("pulling {image}: {why}")]
    Unauthorized { image: String, why: String },
    #[error("image {image} has no manifest for this node's platform {platform} (it offers {offered})")]
    NoPlatform { image: String, platform: String, offered: String },
    /// `blob` says which: `layer sha256:…` or `config sha256:…`.
    #[error("pulling {image}: {blob} stalled: no data for {secs} s")]
    Stalled { image: String, blob: String, secs: u64 },
    /// Slower than the minimum rate, or past the pull's deadline.
    #[error("pulling {image}: {why}")]
    TooSlow { image: String, why: String },
    /// Refused for good: an answer over its size cap, an image laid out as
    /// nidus does not take it. Asking again gets the same answer.
    #[error("pulling {image}: {why}")]
    Refused { image: String, why: String },
    /// Nobody waited for it any more.
    #[error("pulling {image}: cancelled: {why}")]
    Cancelled { image: String, why: String },
    #[error("pulling {image}: {why}")]
    Registry { image: String, why: String },
    #[error("pulling {image}: {why}")]
    BadContent { image: String, why: String },
    #[error("pulling {image}: {why}")]
    Store { image: String, why: String },
    #[error("{0}")]
    Internal(String),
}

/// An image's manifest as `resolve_manifest` found it.
struct Resolved {
    /// Where its blobs come from: the endpoint that served it, then the ones after it.
    sources: BlobSources,
    /// The digest the reference resolves to (the index's for a multi-platform image).
    top: Digest,
    /// This platform's manifest: its digest, its bytes, and it parsed.
    digest: Digest,
    bytes: Bytes,
    manifest: Box<ImageManifest>,
}

/// What a pull fetched before it stores anything.
struct Parts {
    manifest_digest: Digest,
    manifest_bytes: Bytes,
    config_digest: Digest,
    config: Bytes,
    layers: Vec<LayerDescriptor>,
    diff_ids: Vec<Digest>,
    /// The digest the reference resolves to.
    top_digest: Digest,
}

/// Pulls images for the daemon; one per daemon, shared by its services.
pub(crate) struct Puller {
    store: Arc<ImageStore>,
    config: RegistrySettings,
    images: InFlight<(String, Credentials), Image>,
    layers: InFlight<Digest, ()>,
    pulls: Arc<Pulls>,
    metrics: crate::metrics::Metrics,
}

/// Aborts a helper task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Puller {
    pub(crate) fn new(store: Arc<ImageStore>, config: RegistrySettings, metrics: crate::metrics::Metrics) -> Arc<Self> {
        Arc::new(Self {
            store,
            // A pull goes on for its grace period once every caller has left;
            // a layer download stops as soon as no pull waits for it.
            images: InFlight::new(Duration::from_secs(config.abandoned_pull_grace_secs)),
            layers: InFlight::new(Duration::ZERO),
            config,
            pulls: Arc::default(),
            metrics,
        })
    }

    /// The pulls in flight now.
    pub(crate) fn in_flight(&self) -> Vec<PullSnapshot> {
        self.pulls.snapshots()
    }

    /// Pulls `reference` (normalised as everywhere: `busybox` is
    /// `docker.io/library/busybox:latest`) and returns the image now stored.
    /// A pull of the same image with the same credentials already running
    /// is joined rather than repeated. A pull every caller has left is
    /// cancelled once none came back within `abandoned_pull_grace_secs`.
    pub(crate) async fn pull(self: &Arc<Self>, reference: &str, credentials: Credentials) -> Result<Image, PullError> {
        let reference = Reference::parse(reference).map_err(|e| PullError::InvalidReference(e.to_string()))?;
        if reference.digest.is_some() {
            // Content named by its digest cannot have changed: a present image needs no registry.
            let (shown, wanted) = (reference.to_string(), reference.to_string());
            if let Some(image) = self.blocking(&shown, move |store| store.find(&wanted)).await? {
                return Ok(image);
            }
        }
        let key = (reference.to_string(), credentials.clone());
        let this = self.clone();
        let ticket =
            self.images.run(key, move |stop| async move { this.pull_once(reference, credentials, stop).await });
        if ticket.joined {
            tracing::debug!("joined a pull of the same image in flight");
        }
        ticket.wait().await
    }

    async fn pull_once(
        self: Arc<Self>,
        reference: Reference,
        credentials: Credentials,
        stop: StopSignal,
    ) -> Result<Image, PullError> {
        let image = reference.to_string();
        let started = Instant::now();
        let pulls = self.pulls.clone();
        let listed = pulls.start(&image);
        let interval = Duration::from_secs(self.config.progress_interval_secs.max(1));
        let logging = AbortOnDrop(tokio::spawn(log_progress(listed.progress.clone(), interval)));
        let deadline = self.config.pull_deadline().map(|limit| {
            let stop = stop.clone();
            AbortOnDrop(tokio::spawn(async move {
                tokio::time::sleep(limit).await;
                stop.stop(Stop::Deadline);
            }))
        });
        let undo = Undo::new("PullImage").image(&image);
        let result = self.fetch_and_store(&reference, credentials, &listed.progress, &stop, &undo).await;
        drop((logging, deadline));
        let snapshot = listed.progress.snapshot();
        drop(listed);
        self.metrics.pull_ended(result.is_ok(), snapshot.bytes, started.elapsed());
        match &result {
            Ok(pulled) => tracing::info!(image = %image, id = %pulled.id, layers = snapshot.layers.len(),
                bytes = snapshot.bytes, ms = started.elapsed().as_millis() as u64, "image pulled"),
            Err(e) => {
                if stop.reason() == Some(Stop::Abandoned) {
                    tracing::info!(image = %image, bytes = snapshot.bytes, ms = started.elapsed().as_millis() as u64,
                        "pull cancelled: every caller left");
                } else {
                    tracing::warn!(image = %image, error = %e, "image pull failed");
                }
            }
        }
        if result.is_ok() {
            undo.commit();
        } else {
            undo.rollback().await;
        }
        result
    }

    /// The error of a pull asked to stop.
    fn stopped(&self, image: &str, why: Stop) -> PullError {
        let image = image.to_string();
        match why {
            Stop::Abandoned => PullError::Cancelled {
                image,
                why: format!("no caller waited for it for {} s", self.config.abandoned_pull_grace_secs),
            },
            Stop::Deadline => PullError::TooSlow {
                image,
                why: format!("not done within {} s (pull_deadline_secs)", self.config.pull_deadline_secs),
            },
        }
    }

    async fn fetch_and_store(
        self: &Arc<Self>,
        reference: &Reference,
        credentials: Credentials,
        progress: &progress::PullProgress,
        stop: &StopSignal,
        undo: &Undo<'_>,
    ) -> Result<Image, PullError> {
        let image = reference.to_string();
        let Resolved { sources, top: top_digest, digest: manifest_digest, bytes: manifest_bytes, manifest } = stop
            .unless_stopped(self.resolve_manifest(reference, &credentials))
            .await
            .map_err(|why| self.stopped(&image, why))??;
        let bad = |why: String| PullError::BadContent { image: image.clone(), why };
        let ((config_digest, config_size), layers) =
            manifest::image_parts(&manifest).map_err(|why| bad(format!("manifest {manifest_digest}: {why}")))?;
        if config_size > MAX_JSON_BYTES {
            return Err(PullError::Refused {
                image: image.clone(),
                why: format!("config {config_digest} is larger than {MAX_JSON_BYTES} bytes"),
            });
        }
        let config = stop
            .unless_stopped(sources.small_blob(&config_digest.to_string(), MAX_JSON_BYTES))
            .await
            .map_err(|why| self.stopped(&image, why))?
            .map_err(|e| remote_error(&image, &format!("config {config_digest}"), e, self.config.stall_timeout_secs))?;
        if Digest::of(&config) != config_digest {
            return Err(bad(format!("config blob does not match its digest {config_digest}")));
        }
        let (_, diff_ids) = super::store::checked_config(&config, &config_digest, &manifest_digest, layers.len())
            .map_err(|e| store_error(&image, e))?;

        // From before the first blob is stored until the image is in the
        // index, a lease keeps garbage collection off what this pull stores.
        let blobs =
            [&manifest_digest, &config_digest].into_iter().cloned().chain(layers.iter().map(|l| l.digest.clone()));
        let (blobs, held_layers) = (blobs.collect(), diff_ids.clone());
        let lease = self.blocking(&image, move |store| store.hold_for_pull(blobs, held_layers)).await?;
        // What this pull stores from here on goes if it fails: the
        // collection runs once the lease is gone (at the end of this
        // function, success or not), and keeps what images, containers and
        // other pulls hold.
        let store = self.store.clone();
        undo.push_async("blobs and layers stored", move || async move {
            tokio::task::spawn_blocking(move || store.collect_garbage_logged()).await
        });
        let parts = Parts { manifest_digest, manifest_bytes, config_digest, config, layers, diff_ids, top_digest };
        let stored = self.store_image(reference, parts, sources, progress, stop).await;
        // Released off the async threads (it takes the store lock).
        let _ = tokio::task::spawn_blocking(move || drop(lease)).await;
        stored
    }

    /// Stores what `fetch_and_store` fetched, downloads the layers not yet
    /// stored, and adds the image to the index.
    async fn store_image(
        self: &Arc<Self>,
        reference: &Reference,
        parts: Parts,
        sources: BlobSources,
        progress: &progress::PullProgress,
        stop: &StopSignal,
    ) -> Result<Image, PullError> {
        let image = reference.to_string();
        let Parts { manifest_digest, manifest_bytes, config_digest, config, layers, diff_ids, top_digest } = parts;
        let (m, c) = (manifest_bytes.clone(), config.clone());
        let (md, cd) = (manifest_digest.clone(), config_digest.clone());
        self.blocking(&image, move |store| {
            store.store_fetched(&m, &md)?;
            store.store_fetched(&c, &cd)
        })
        .await?;

        let counters = progress.set_layers(&layers.iter().map(|l| (l.digest.to_string(), l.size)).collect::<Vec<_>>());
        let limit = Arc::new(Semaphore::new(self.config.max_concurrent_downloads.max(1)));
        let sources = Arc::new(sources);
        let (mut results, mut waiters, mut waits) = (Vec::new(), Vec::new(), Vec::new());
        for ((layer, diff_id), counter) in layers.iter().zip(&diff_ids).zip(counters) {
            if self.store.has_blob(&layer.digest) {
                counter.set(LayerState::Present);
                continue;
            }
            let job = LayerJob {
                puller: self.clone(),
                sources: sources.clone(),
                image: image.clone(),
                layer: layer.clone(),
                diff_id: diff_id.clone(),
                counter: counter.clone(),
                limit: limit.clone(),
            };
            let ticket = self.layers.run(layer.digest.clone(), move |stop| job.run(stop));
            if ticket.joined {
                counter.set(LayerState::Shared);
            }
            let result = ticket.result.clone();
            waits.push(async move {
                let result = result.await;
                if result.is_ok() {
                    counter.set(LayerState::Done);
                }
                result
            });
            results.push(ticket.result);
            waiters.push(ticket.waiter);
        }
        // Every layer job of this pull ends before it answers: a failed pull
        // leaves no download behind it still writing.
        match stop.unless_stopped(futures_util::future::join_all(waits)).await {
            Ok(outcomes) => {
                drop(waiters);
                for result in outcomes {
                    result?;
                }
            }
            Err(why) => {
                // Stopped: the downloads no other pull waits for stop with
                // it, and it answers once they have.
                let stopping: Vec<_> = waiters
                    .into_iter()
                    .zip(results)
                    .filter_map(|(waiter, result)| waiter.leave().then_some(result))
                    .collect();
                futures_util::future::join_all(stopping).await;
                return Err(self.stopped(&image, why));
            }
        }

        let candidate = Candidate {
            manifest: manifest_digest,
            manifest_size: manifest_bytes.len() as u64,
            config: config_digest,
            config_size: config.len() as u64,
            layers: layers
                .iter()
                .map(|l| StoredLayer { digest: l.digest.clone(), size: l.size, media_type: l.media_type.clone() })
                .collect(),
            names: Vec::new(),
            registry_manifest: true,
        };
        let name = reference.clone();
        self.blocking(&image, move |store| store.add_pulled(candidate, &name, &top_digest)).await
    }

    /// Finds the endpoint that serves the image and fetches its manifest
    /// (through the index for this platform).
    async fn resolve_manifest(&self, reference: &Reference, credentials: &Credentials) -> Result<Resolved, PullError> {
        let image = reference.to_string();
        let endpoints = self
            .config
            .endpoints(&reference.domain, &reference.path)
            .map_err(|e| PullError::Internal(e.to_string()))?;
        let wanted = match (&reference.digest, &reference.tag) {
            (Some(digest), _) => digest.to_string(),
            (None, Some(tag)) => tag.clone(),
            (None, None) => super::reference::DEFAULT_TAG.to_string(),
        };
        let pace = self.config.pace();
        let mut failures: Vec<RemoteError> = Vec::new();
        let mut endpoints = endpoints.into_iter();
        while let Some(endpoint) = endpoints.next() {
            let client = match RegistryClient::new(endpoint, &reference.domain, credentials.clone(), pace) {
                Ok(client) => client,
                Err(e) => return Err(PullError::Registry { image, why: e.to_string() }),
            };
            match client.manifest(&wanted, manifest::ACCEPTED, MAX_MANIFEST_BYTES).await {
                Ok((body, media_type)) => {
                    let top = Digest::of(&body);
                    if let Some(want) = &reference.digest {
                        if *want != top {
                            return Err(PullError::BadContent {
                                image,
                                why: format!("the registry served a manifest with digest {top}"),
                            });
                        }
                    }
                    let fetched = manifest::parse(&body, media_type.as_deref())
                        .map_err(|why| PullError::BadContent { image: image.clone(), why: format!("{top}: {why}") })?;
                    let (digest, bytes, manifest) = match fetched {
                        Fetched::Manifest(manifest) => (top.clone(), body, manifest),
                        Fetched::Index(index) => {
                            let chosen = match manifest::choose(&index) {
                                Choice::Manifest(chosen) => chosen,
                                Choice::NestedIndex(nested) => {
                                    return Err(PullError::Refused {
                                        why: format!(
                                            "index {top} lists for {} another image index, {nested}, where an image \
                                             manifest belongs; nidus does not follow an index within an index \
                                             (pull {} to use that one)",
                                            manifest::node_platform(),
                                            reference.with_digest(&nested)
                                        ),
                                        image,
                                    })
                                }
                                Choice::None => {
                                    return Err(PullError::NoPlatform {
                                        image,
                                        platform: manifest::node_platform(),
                                        offered: manifest::offered(&index).join(", "),
                                    })
                                }
                            };
                            let (body, _) = client
                                .manifest(&chosen.to_string(), manifest::ACCEPTED, MAX_MANIFEST_BYTES)
                                .await
                                .map_err(|e| remote_error(&image, "the platform manifest", e, pace.stall.as_secs()))?;
                            let bad = |why: String| PullError::BadContent { image: image.clone(), why };
                            if Digest::of(&body) != chosen {
                                return Err(bad(format!("manifest {chosen} does not match its digest")));
                            }
                            match manifest::parse(&body, None)
                                .map_err(|why| bad(format!("manifest {chosen}: {why}")))?
                            {
                                Fetched::Manifest(manifest) => (chosen, body, manifest),
                                Fetched::Index(_) => {
                                    return Err(bad(format!("index {top} lists another index for this platform")))
                                }
                            }
                        }
                    };
                    tracing::debug!(image = %image, endpoint = %client.endpoint().base_url(), "manifest resolved");
                    let sources = BlobSources::new(client, endpoints, &reference.domain, credentials.clone(), pace);
                    return Ok(Resolved { sources, top, digest, bytes, manifest });
                }
                Err(e) => {
                    tracing::debug!(image = %image, endpoint = %client.endpoint().base_url(), error = %e,
                        "endpoint cannot serve the manifest; trying the next");
                    failures.push(e);
                }
            }
        }
        // Every endpoint failed. The most telling failure is the answer: a
        // refusal of credentials, else the last answer a registry gave (a
        // TLS attempt at a plain-HTTP loopback registry is no answer).
        let worst = failures
            .iter()
            .find(|e| matches!(e, RemoteError::Unauthorized { .. }))
            .or_else(|| failures.iter().rev().find(|e| !matches!(e, RemoteError::Transport { .. })))
            .or(failures.last())
            .cloned();
        let why = failures.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
        Err(match worst {
            Some(RemoteError::NotFound(_)) => PullError::NotFound { image, why },
            Some(RemoteError::Unauthorized { .. }) => PullError::Unauthorized { image, why },
            Some(RemoteError::TooLarge { .. }) => PullError::Refused { image, why },
            Some(RemoteError::TooSlow { .. }) => PullError::TooSlow { image, why },
            _ => PullError::Registry { image, why },
        })
    }

    /// Runs blocking store work off the async threads.
    async fn blocking<T: Send + 'static>(
        &self,
        image: &str,
        work: impl FnOnce(&Arc<ImageStore>) -> Result<T, ImageError> + Send + 'static,
    ) -> Result<T, PullError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || work(&store))
            .await
            .map_err(|e| PullError::Internal(format!("image store task: {e}")))?
            .map_err(|e| store_error(image, e))
    }
}

/// One layer to download: stored and unpacked as its bytes arrive.
struct LayerJob {
    puller: Arc<Puller>,
    sources: Arc<BlobSources>,
    image: String,
    layer: LayerDescriptor,
    diff_id: Digest,
    counter: Arc<LayerProgress>,
    limit: Arc<Semaphore>,
}

impl LayerJob {
    /// Downloads the layer, until done or `stop` (no pull waits for it any more).
    async fn run(self, stop: StopSignal) -> Result<(), PullError> {
        let _permit = stop
            .unless_stopped(self.limit.acquire())
            .await
            .map_err(|_| self.nobody_waits())?
            .map_err(|e| PullError::Internal(e.to_string()))?;
        // What it stores is leased by each pull that waits for it.
        // A connection lost mid-download resumes where it stopped (`download`);
        // when the registry cannot resume, it is tried again from the start
        // (what the failed attempt wrote is gone with it); stalls, slowness
        // and bad content are not.
        for attempt in 1.. {
            match self.download(&stop).await {
                Err(PullError::Registry { why, .. }) if attempt < DOWNLOAD_ATTEMPTS && stop.reason().is_none() => {
                    tracing::warn!(image = %self.image, layer = %self.layer.digest, attempt, error = %why,
                        "layer download failed; trying again");
                    self.counter.restart();
                }
                outcome => return outcome,
            }
        }
        Ok(())
    }

    fn nobody_waits(&self) -> PullError {
        PullError::Cancelled {
            image: self.image.clone(),
            why: format!("no pull waits for layer {}", self.layer.digest),
        }
    }

    async fn download(&self, stop: &StopSignal) -> Result<(), PullError> {
        let digest = self.layer.digest.to_string();
        let stall_secs = self.puller.config.stall_timeout_secs.max(1);
        self.counter.set(LayerState::Downloading);
        let response = stop
            .unless_stopped(self.sources.blob(&digest))
            .await
            .map_err(|_| self.nobody_waits())?
            .map_err(|e| remote_error(&self.image, &format!("layer {digest}"), e, stall_secs))?;
        let (sender, receiver) = mpsc::channel(bridge::QUEUED_CHUNKS);
        let store = self.puller.store.clone();
        let (layer, diff_id) = (self.layer.clone(), self.diff_id.clone());
        let unpacking = tokio::task::spawn_blocking(move || {
            let mut reader = bridge::ChannelReader::new(receiver);
            store.store_layer(&mut reader, &layer.digest, layer.size, &diff_id)
        });
        let failure = match stop.unless_stopped(self.receive(response, &sender)).await {
            Ok(failure) => failure,
            Err(_) => Some(self.nobody_waits()),
        };
        if failure.is_some() {
            let _ = sender.send(Err(std::io::Error::other("download failed"))).await;
        }
        drop(sender);
        let stored = unpacking.await.map_err(|e| PullError::Internal(format!("layer task: {e}")))?;
        match (failure, stored) {
            (Some(failure), _) => Err(failure),
            (None, Err(e)) => Err(store_error(&self.image, e)),
            (None, Ok(())) => Ok(()),
        }
    }

    /// Hands the body's chunks to the unpacker as they come, within the
    /// pull's pace, resuming a connection lost mid-body; the failure, if any.
    async fn receive(
        &self,
        response: reqwest::Response,
        sender: &mpsc::Sender<std::io::Result<Bytes>>,
    ) -> Option<PullError> {
        let digest = self.layer.digest.to_string();
        let pace = self.puller.config.pace();
        let slow = |why: Slow| match why {
            Slow::Stalled { secs } => {
                PullError::Stalled { image: self.image.clone(), blob: format!("layer {digest}"), secs }
            }
            Slow::TooSlow { .. } => PullError::TooSlow {
                image: self.image.clone(),
                why: format!("layer {digest} too slow: {why} (min_bytes_per_sec)"),
            },
        };
        let mut meter = Meter::new(pace, Instant::now());
        let mut body = response.bytes_stream();
        let mut resumes = 0u32;
        loop {
            let next = match meter.paced(body.next()).await {
                Ok(next) => next,
                Err(why) => return Some(slow(why)),
            };
            match next {
                None => return None,
                Some(Ok(chunk)) => {
                    let n = chunk.len() as u64;
                    self.counter.received(n);
                    if sender.send(Ok(chunk)).await.is_err() {
                        return None; // The unpacker has failed: its error is the answer.
                    }
                    // Counted once handed on: a slow disk is not the registry's stall.
                    if let Err(why) = meter.received(n, Instant::now()) {
                        return Some(slow(why));
                    }
                }
                Some(Err(e)) if !e.is_timeout() && meter.total() > 0 && resumes < RESUMES => {
                    // The hashing and unpacking go on with the rest, if the registry resumes.
                    resumes += 1;
                    match self.sources.blob_from(&digest, meter.total()).await {
                        Ok(rest) => {
                            tracing::info!(image = %self.image, layer = %digest, at = meter.total(), resumes,
                                error = %client::error_chain(&e), "layer download resumed");
                            body = rest.bytes_stream();
                        }
                        Err(why) => {
                            return Some(PullError::Registry {
                                image: self.image.clone(),
                                why: format!(
                                    "downloading layer {digest}: {}; resuming: {why}",
                                    client::error_chain(&e)
                                ),
                            })
                        }
                    }
                }
                Some(Err(e)) if e.is_timeout() => {
                    return Some(slow(Slow::Stalled { secs: pace.stall.as_secs() }));
                }
                Some(Err(e)) => {
                    return Some(PullError::Registry {
                        image: self.image.clone(),
                        why: format!("downloading layer {digest}: {}", client::error_chain(&e)),
                    })
                }
            }
        }
    }
}

fn remote_error(image: &str, what: &str, e: RemoteError, stall_secs: u64) -> PullError {
    let image = image.to_string();
    match e {
        RemoteError::NotFound(url) => PullError::NotFound { image, why: format!("{what}: {url} not found") },
        RemoteError::Unauthorized { .. } => PullError::Unauthorized { image, why: format!("{what}: {e}") },
        RemoteError::Transport { timeout: true, .. } => {
            PullError::Stalled { image, blob: what.to_string(), secs: stall_secs }
        }
        RemoteError::TooLarge { .. } => PullError::Refused { image, why: format!("{what}: {e}") },
        RemoteError::TooSlow { .. } => PullError::TooSlow { image, why: format!("{what}: {e} (min_bytes_per_sec)") },
        e => PullError::Registry { image, why: format!("{what}: {e}") },
    }
}

fn store_error(image: &str, e: ImageError) -> PullError {
    let image = image.to_string();
    match e {
        ImageError::BadContent(_) | ImageError::BadLayer { .. } => PullError::BadContent { image, why: e.to_string() },
        e => PullError::Store { image, why: e.to_string() },
    }
}

/// Logs a pull's progress every `interval` until aborted.
async fn log_progress(progress: Arc<progress::PullProgress>, interval: Duration) {
    let mut ticks = tokio::time::interval(interval);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let s = progress.snapshot();
        tracing::info!(image = %s.image, layers_done = s.layers_done, layers = s.layers.len(), bytes = s.bytes,
            total_bytes = s.total_bytes, bytes_per_sec = s.rate(), elapsed_ms = s.elapsed_ms, "pull progress");
    }
}
