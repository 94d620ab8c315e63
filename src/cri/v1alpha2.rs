//! The CRI runtime.v1alpha2 RuntimeService and ImageService (kubelet 1.20–1.25,
//! crictl up to 1.25), answered by the very [`RuntimeApi`] and [`ImageApi`] that
//! serve runtime.v1: the v1alpha2 servers are generated with the runtime.v1
//! message types (the two APIs share the wire format), so every RPC hands its
//! request on untouched. `Version` alone differs: it names the API it was asked
//! through. RPCs that only runtime.v1 has do not exist here.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::api::image_service_server::ImageService as ImageServiceV1;
use crate::api::runtime_service_server::RuntimeService as RuntimeServiceV1;
use crate::api::*;
use crate::api_v1alpha2::image_service_server::ImageService;
use crate::api_v1alpha2::runtime_service_server::RuntimeService;

use super::{ImageApi, RuntimeApi};

/// runtime.v1alpha2.RuntimeService, served by a shared [`RuntimeApi`].
pub(crate) struct RuntimeApiV1alpha2(Arc<RuntimeApi>);

impl RuntimeApiV1alpha2 {
    pub(crate) fn new(v1: Arc<RuntimeApi>) -> Self {
        Self(v1)
    }
}

/// runtime.v1alpha2.ImageService, served by a shared [`ImageApi`].
pub(crate) struct ImageApiV1alpha2(Arc<ImageApi>);

impl ImageApiV1alpha2 {
    pub(crate) fn new(v1: Arc<ImageApi>) -> Self {
        Self(v1)
    }
}

/// Implements a v1alpha2 service trait by calling the runtime.v1 method of the
/// same name on the wrapped implementation, plus the methods written out after it.
macro_rules! forward_to_v1 {
    (impl $service:ident for $wrapper:ident => $v1:ident as $v1_service:ident {
        $($rpc:ident($request:ident) -> $response:ident;)*
    } $($own:tt)*) => {
        #[tonic::async_trait]
        impl $service for $wrapper {
            $(
                async fn $rpc(&self, request: Request<$request>) -> Result<Response<$response>, Status> {
                    <$v1 as $v1_service>::$rpc(&self.0, request).await
                }
            )*
            $($own)*
        }
    };
}

forward_to_v1! {
    impl RuntimeService for RuntimeApiV1alpha2 => RuntimeApi as RuntimeServiceV1 {
        run_pod_sandbox(RunPodSandboxRequest) -> RunPodSandboxResponse;
        stop_pod_sandbox(StopPodSandboxRequest) -> StopPodSandboxResponse;
        remove_pod_sandbox(RemovePodSandboxRequest) -> RemovePodSandboxResponse;
        pod_sandbox_status(PodSandboxStatusRequest) -> PodSandboxStatusResponse;
        list_pod_sandbox(ListPodSandboxRequest) -> ListPodSandboxResponse;
        create_container(CreateContainerRequest) -> CreateContainerResponse;
        start_container(StartContainerRequest) -> StartContainerResponse;
        stop_container(StopContainerRequest) -> StopContainerResponse;
        remove_container(RemoveContainerRequest) -> RemoveContainerResponse;
        list_containers(ListContainersRequest) -> ListContainersResponse;
        container_status(ContainerStatusRequest) -> ContainerStatusResponse;
        update_container_resources(UpdateContainerResourcesRequest) -> UpdateContainerResourcesResponse;
        reopen_container_log(ReopenContainerLogRequest) -> ReopenContainerLogResponse;
        exec_sync(ExecSyncRequest) -> ExecSyncResponse;
        exec(ExecRequest) -> ExecResponse;
        attach(AttachRequest) -> AttachResponse;
        port_forward(PortForwardRequest) -> PortForwardResponse;
        container_stats(ContainerStatsRequest) -> ContainerStatsResponse;
        list_container_stats(ListContainerStatsRequest) -> ListContainerStatsResponse;
        pod_sandbox_stats(PodSandboxStatsRequest) -> PodSandboxStatsResponse;
        list_pod_sandbox_stats(ListPodSandboxStatsRequest) -> ListPodSandboxStatsResponse;
        update_runtime_config(UpdateRuntimeConfigRequest) -> UpdateRuntimeConfigResponse;
        status(StatusRequest) -> StatusResponse;
    }

    async fn version(&self, request: Request<VersionRequest>) -> Result<Response<VersionResponse>, Status> {
        let mut response = <RuntimeApi as RuntimeServiceV1>::version(&self.0, request).await?;
        response.get_mut().runtime_api_version = super::CRI_V1ALPHA2_API_VERSION.into();
        Ok(response)
    }
}

forward_to_v1! {
    impl ImageService for ImageApiV1alpha2 => ImageApi as ImageServiceV1 {
        list_images(ListImagesRequest) -> ListImagesResponse;
        image_status(ImageStatusRequest) -> ImageStatusResponse;
        pull_image(PullImageRequest) -> PullImageResponse;
        remove_image(RemoveImageRequest) -> RemoveImageResponse;
        image_fs_info(ImageFsInfoRequest) -> ImageFsInfoResponse;
    }
}
