//! The CRI ImageService. The local image store arrives with the containers
//! issue and registry pulls after it; until then every RPC says so.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::api::image_service_server::ImageService;
use crate::api::*;
use crate::daemon::Daemon;

use super::errors::unimplemented;

pub struct ImageApi {
    #[allow(dead_code)]
    daemon: Arc<Daemon>,
}

impl ImageApi {
    pub fn new(daemon: Arc<Daemon>) -> Self {
        Self { daemon }
    }
}

type StreamOf<T> = std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl ImageService for ImageApi {
    async fn list_images(&self, _: Request<ListImagesRequest>) -> Result<Response<ListImagesResponse>, Status> {
        Err(unimplemented("ListImages"))
    }

    type StreamImagesStream = StreamOf<StreamImagesResponse>;

    async fn stream_images(
        &self,
        _: Request<StreamImagesRequest>,
    ) -> Result<Response<Self::StreamImagesStream>, Status> {
        Err(unimplemented("StreamImages"))
    }

    async fn image_status(&self, _: Request<ImageStatusRequest>) -> Result<Response<ImageStatusResponse>, Status> {
        Err(unimplemented("ImageStatus"))
    }

    async fn pull_image(&self, _: Request<PullImageRequest>) -> Result<Response<PullImageResponse>, Status> {
        Err(unimplemented("PullImage"))
    }

    async fn remove_image(&self, _: Request<RemoveImageRequest>) -> Result<Response<RemoveImageResponse>, Status> {
        Err(unimplemented("RemoveImage"))
    }

    async fn image_fs_info(&self, _: Request<ImageFsInfoRequest>) -> Result<Response<ImageFsInfoResponse>, Status> {
        Err(unimplemented("ImageFsInfo"))
    }
}
