//! The CRI ImageService over the local image store: list, status, remove,
//! filesystem usage, and pulls from registries (`image::pull`).

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::api::image_service_server::ImageService;
use crate::api::*;
use crate::cri::Daemon;
use crate::image::{self, pull, ImageError, ImageStore, ImageUser};

use super::errors::{image_error, pull_status};
use super::runtime_service::{chunked, StreamOf};

pub(crate) struct ImageApi {
    daemon: Arc<Daemon>,
}

impl ImageApi {
    pub(crate) fn new(daemon: Arc<Daemon>) -> Self {
        Self { daemon }
    }

    /// Runs blocking store work off the async threads.
    async fn with_store<T: Send + 'static>(
        &self,
        work: impl FnOnce(&ImageStore) -> Result<T, ImageError> + Send + 'static,
    ) -> Result<T, ImageError> {
        let images = self.daemon.images.clone();
        tokio::task::spawn_blocking(move || work(&images))
            .await
            .map_err(|e| ImageError::io("image store task", std::io::Error::other(e)))?
    }

    async fn list(&self, filter: Option<ImageFilter>) -> Result<Vec<Image>, Status> {
        const FIELD: &str = "filter.image.image";
        let wanted = filter.and_then(|f| f.image).map(|spec| spec.image).filter(|s| !s.is_empty());
        let images = self
            .with_store(move |store| match wanted {
                Some(reference) => store.find(&reference).map(|found| found.into_iter().collect()),
                None => store.list(),
            })
            .await
            .map_err(|e| image_error(FIELD, e))?;
        Ok(images.iter().map(cri_image).collect())
    }
}

/// The image reference of a request: `image.image`, required.
fn reference(spec: Option<ImageSpec>) -> Result<String, Status> {
    let spec = spec.ok_or_else(|| super::errors::invalid("image", "is required"))?;
    if spec.image.is_empty() {
        return Err(super::errors::invalid("image.image", "must not be empty"));
    }
    Ok(spec.image)
}

fn cri_image(image: &image::Image) -> Image {
    let (uid, username) = match image.config.image_user() {
        ImageUser::Unset => (None, String::new()),
        ImageUser::Uid(value) => (Some(Int64Value { value }), String::new()),
        ImageUser::Name(name) => (None, name),
    };
    Image {
        id: image.id.clone(),
        repo_tags: image.repo_tags.clone(),
        repo_digests: image.repo_digests.clone(),
        size: image.size,
        uid,
        username,
        spec: Some(ImageSpec { image: image.id.clone(), ..Default::default() }),
        pinned: false,
    }
}

#[tonic::async_trait]
impl ImageService for ImageApi {
    async fn list_images(&self, request: Request<ListImagesRequest>) -> Result<Response<ListImagesResponse>, Status> {
        let images = self.list(request.into_inner().filter).await?;
        Ok(Response::new(ListImagesResponse { images }))
    }

    type StreamImagesStream = StreamOf<StreamImagesResponse>;

    async fn stream_images(
        &self,
        request: Request<StreamImagesRequest>,
    ) -> Result<Response<Self::StreamImagesStream>, Status> {
        let images = self.list(request.into_inner().filter).await?;
        Ok(Response::new(chunked(images, |images| StreamImagesResponse { images })))
    }

    async fn image_status(
        &self,
        request: Request<ImageStatusRequest>,
    ) -> Result<Response<ImageStatusResponse>, Status> {
        let request = request.into_inner();
        let reference = reference(request.image)?;
        let verbose = request.verbose;
        let found = self
            .with_store(move |store| {
                Ok(store.find(&reference)?.map(|image| {
                    let info = verbose.then(|| store.verbose_info(&image).to_string());
                    (image, info)
                }))
            })
            .await
            .map_err(|e| image_error("image.image", e))?;
        // An absent image is an empty answer, not an error: kubelet pulls then.
        let Some((image, info)) = found else { return Ok(Response::new(ImageStatusResponse::default())) };
        Ok(Response::new(ImageStatusResponse {
            image: Some(cri_image(&image)),
            info: info.map(|info| [("info".to_string(), info)].into()).unwrap_or_default(),
        }))
    }

    async fn pull_image(&self, request: Request<PullImageRequest>) -> Result<Response<PullImageResponse>, Status> {
        let request = request.into_inner();
        let reference = reference(request.image)?;
        let credentials = match request.auth {
            Some(a) => {
                pull::Credentials::from_cri(&a.username, &a.password, &a.auth, &a.identity_token, &a.registry_token)
                    .map_err(|e| super::errors::invalid("auth.auth", e))?
            }
            None => pull::Credentials::Anonymous,
        };
        let image = self.daemon.puller.pull(&reference, credentials).await.map_err(pull_status)?;
        Ok(Response::new(PullImageResponse { image_ref: image.id }))
    }

    async fn remove_image(
        &self,
        request: Request<RemoveImageRequest>,
    ) -> Result<Response<RemoveImageResponse>, Status> {
        let reference = reference(request.into_inner().image)?;
        self.with_store(move |store| store.remove(&reference)).await.map_err(|e| image_error("image.image", e))?;
        Ok(Response::new(RemoveImageResponse {}))
    }

    async fn image_fs_info(&self, _: Request<ImageFsInfoRequest>) -> Result<Response<ImageFsInfoResponse>, Status> {
        let usage = self.with_store(|store| Ok(store.usage())).await.map_err(|e| Status::internal(e.to_string()))?;
        let filesystem = FilesystemUsage {
            timestamp: crate::clock::now_ns(),
            fs_id: Some(FilesystemIdentifier { mountpoint: usage.mountpoint.to_string_lossy().into_owned() }),
            used_bytes: Some(UInt64Value { value: usage.used_bytes }),
            inodes_used: Some(UInt64Value { value: usage.inodes }),
        };
        // The writable layers (and records) of every container, as of the
        // last walk (at most 10 s ago).
        let containers_dir = &self.daemon.stats.containers_dir;
        let containers = self.daemon.stats.containers_usage().await;
        let container_filesystem = FilesystemUsage {
            timestamp: crate::clock::now_ns(),
            fs_id: Some(FilesystemIdentifier { mountpoint: containers_dir.display().to_string() }),
            used_bytes: Some(UInt64Value { value: containers.bytes }),
            inodes_used: Some(UInt64Value { value: containers.inodes }),
        };
        Ok(Response::new(ImageFsInfoResponse {
            image_filesystems: vec![filesystem],
            container_filesystems: vec![container_filesystem],
        }))
    }
}
