//! One client interface over both CRI APIs nidus serves, so that a scenario is
//! written once and run through runtime.v1 and runtime.v1alpha2 alike. It speaks
//! in runtime.v1 types; the runtime.v1alpha2 side turns each request into the
//! runtime.v1alpha2 message (what a field of v1 has no place for in v1alpha2 is
//! dropped, as an older client could not send it), calls the v1alpha2 service,
//! and reads the v1alpha2 answer back into the v1 type.
//! It has exactly the RPCs runtime.v1alpha2 has.

use nidus::api::*;
use tonic::Status;

use super::v1alpha2::{api as v1alpha2, CriV1alpha2};
use super::Cri;

/// The same message as another API's type: encoded by one, decoded by the other.
pub fn transcode<From: prost::Message, To: prost::Message + Default>(message: &From) -> To {
    To::decode(message.encode_to_vec().as_slice()).expect("the message decodes as the other API's type")
}

macro_rules! cri_api {
    ($($service:ident . $rpc:ident ($request:ident) -> $response:ident;)*) => {
        /// Every runtime.v1alpha2 RPC, in runtime.v1 types, through either API.
        #[allow(async_fn_in_trait)]
        pub trait CriApi {
            /// The `runtime_api_version` this API's Version answers.
            fn api_version(&self) -> &'static str;
            $(async fn $rpc(&mut self, request: $request) -> Result<$response, Status>;)*
        }

        impl CriApi for Cri {
            fn api_version(&self) -> &'static str {
                "v1"
            }
            $(
                async fn $rpc(&mut self, request: $request) -> Result<$response, Status> {
                    Ok(self.$service.$rpc(request).await?.into_inner())
                }
            )*
        }

        impl CriApi for CriV1alpha2 {
            fn api_version(&self) -> &'static str {
                "v1alpha2"
            }
            $(
                async fn $rpc(&mut self, request: $request) -> Result<$response, Status> {
                    let request: v1alpha2::$request = transcode(&request);
                    Ok(transcode(&self.$service.$rpc(request).await?.into_inner()))
                }
            )*
        }
    };
}

cri_api! {
    runtime.version(VersionRequest) -> VersionResponse;
    runtime.run_pod_sandbox(RunPodSandboxRequest) -> RunPodSandboxResponse;
    runtime.stop_pod_sandbox(StopPodSandboxRequest) -> StopPodSandboxResponse;
    runtime.remove_pod_sandbox(RemovePodSandboxRequest) -> RemovePodSandboxResponse;
    runtime.pod_sandbox_status(PodSandboxStatusRequest) -> PodSandboxStatusResponse;
    runtime.list_pod_sandbox(ListPodSandboxRequest) -> ListPodSandboxResponse;
    runtime.create_container(CreateContainerRequest) -> CreateContainerResponse;
    runtime.start_container(StartContainerRequest) -> StartContainerResponse;
    runtime.stop_container(StopContainerRequest) -> StopContainerResponse;
    runtime.remove_container(RemoveContainerRequest) -> RemoveContainerResponse;
    runtime.list_containers(ListContainersRequest) -> ListContainersResponse;
    runtime.container_status(ContainerStatusRequest) -> ContainerStatusResponse;
    runtime.update_container_resources(UpdateContainerResourcesRequest) -> UpdateContainerResourcesResponse;
    runtime.reopen_container_log(ReopenContainerLogRequest) -> ReopenContainerLogResponse;
    runtime.exec_sync(ExecSyncRequest) -> ExecSyncResponse;
    runtime.exec(ExecRequest) -> ExecResponse;
    runtime.attach(AttachRequest) -> AttachResponse;
    runtime.port_forward(PortForwardRequest) -> PortForwardResponse;
    runtime.container_stats(ContainerStatsRequest) -> ContainerStatsResponse;
    runtime.list_container_stats(ListContainerStatsRequest) -> ListContainerStatsResponse;
    runtime.pod_sandbox_stats(PodSandboxStatsRequest) -> PodSandboxStatsResponse;
    runtime.list_pod_sandbox_stats(ListPodSandboxStatsRequest) -> ListPodSandboxStatsResponse;
    runtime.update_runtime_config(UpdateRuntimeConfigRequest) -> UpdateRuntimeConfigResponse;
    runtime.status(StatusRequest) -> StatusResponse;
    images.list_images(ListImagesRequest) -> ListImagesResponse;
    images.image_status(ImageStatusRequest) -> ImageStatusResponse;
    images.pull_image(PullImageRequest) -> PullImageResponse;
    images.remove_image(RemoveImageRequest) -> RemoveImageResponse;
    images.image_fs_info(ImageFsInfoRequest) -> ImageFsInfoResponse;
}
