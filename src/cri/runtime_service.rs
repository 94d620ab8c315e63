//! The CRI RuntimeService: version, status and runtime config, pod sandboxes;
//! pod checkpoints in `pod_checkpoint.rs`, events in `events.rs`.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::api::runtime_service_server::RuntimeService;
use crate::api::*;
use crate::cri::Daemon;
use crate::network::pod_cidr::PodCidrError;

use super::convert;
use super::detached;
use super::stats;
use super::validate;

/// Most items one message of a Stream* list RPC carries.
const STREAM_CHUNK: usize = 256;

pub(crate) struct RuntimeApi {
    daemon: Arc<Daemon>,
}

impl RuntimeApi {
    pub(crate) fn new(daemon: Arc<Daemon>) -> Self {
        Self { daemon }
    }

    fn list_containers(&self, filter: Option<&ContainerFilter>) -> Vec<Container> {
        self.daemon
            .containers
            .list()
            .iter()
            .filter(|v| filter.is_none_or(|f| convert::container_matches(f, v)))
            .map(convert::container)
            .collect()
    }

    fn list_sandboxes(&self, filter: Option<&PodSandboxFilter>) -> Vec<PodSandbox> {
        self.daemon
            .sandboxes
            .list()
            .iter()
            .filter(|v| filter.is_none_or(|f| convert::sandbox_matches(f, v)))
            .map(convert::pod_sandbox)
            .collect()
    }
}

pub(super) type StreamOf<T> = std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send>>;

pub(super) fn chunked<T: Send + 'static, M: Send + 'static>(items: Vec<T>, wrap: fn(Vec<T>) -> M) -> StreamOf<M> {
    let mut chunks = Vec::new();
    let mut items = items.into_iter().peekable();
    while items.peek().is_some() {
        chunks.push(Ok(wrap(items.by_ref().take(STREAM_CHUNK).collect())));
    }
    Box::pin(tokio_stream::iter(chunks))
}

#[tonic::async_trait]
impl RuntimeService for RuntimeApi {
    async fn version(&self, _: Request<VersionRequest>) -> Result<Response<VersionResponse>, Status> {
        Ok(Response::new(VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "nidus".into(),
            runtime_version: env!("CARGO_PKG_VERSION").into(),
            runtime_api_version: super::CRI_API_VERSION.into(),
        }))
    }

    async fn run_pod_sandbox(
        &self,
        request: Request<RunPodSandboxRequest>,
    ) -> Result<Response<RunPodSandboxResponse>, Status> {
        let request = request.into_inner();
        let spec = validate::sandbox_spec(request.config, &request.runtime_handler)?;
        if let (Some(_), Err(why)) = (&spec.userns, &self.daemon.user_namespaces) {
            return Err(Status::failed_precondition(format!(
                "config.linux.security_context.namespace_options.userns_options: pods with a user namespace of their own \
                 cannot work on this node: {why}"
            )));
        }
        let (daemon, owner) = (self.daemon.clone(), self.daemon.clone());
        let pod_sandbox_id =
            detached::made_or_undone(async move { daemon.sandboxes.run(spec).await }, |id: String| async move {
                tracing::warn!(pod_id = %id, "RunPodSandbox's caller left before its answer; removing the pod");
                if let Err(e) = crate::runtime::remove_pod(&owner.sandboxes, &owner.containers, &id).await {
                    tracing::error!(pod_id = %id, error = %e, "cannot remove a pod whose caller left");
                }
            })
            .await??;
        super::instrument::record_id("pod_sandbox_id", &pod_sandbox_id);
        Ok(Response::new(RunPodSandboxResponse { pod_sandbox_id }))
    }

    async fn stop_pod_sandbox(
        &self,
        request: Request<StopPodSandboxRequest>,
    ) -> Result<Response<StopPodSandboxResponse>, Status> {
        let Some(id) = validate::id_to_end("pod_sandbox_id", &request.get_ref().pod_sandbox_id)? else {
            return Ok(Response::new(StopPodSandboxResponse {}));
        };
        let id = id.to_string();
        let daemon = self.daemon.clone();
        detached::to_the_end(async move { crate::runtime::stop_pod(&daemon.sandboxes, &daemon.containers, &id).await })
            .await??;
        Ok(Response::new(StopPodSandboxResponse {}))
    }

    async fn remove_pod_sandbox(
        &self,
        request: Request<RemovePodSandboxRequest>,
    ) -> Result<Response<RemovePodSandboxResponse>, Status> {
        let Some(id) = validate::id_to_end("pod_sandbox_id", &request.get_ref().pod_sandbox_id)? else {
            return Ok(Response::new(RemovePodSandboxResponse {}));
        };
        let id = id.to_string();
        let daemon = self.daemon.clone();
        detached::to_the_end(
            async move { crate::runtime::remove_pod(&daemon.sandboxes, &daemon.containers, &id).await },
        )
        .await??;
        Ok(Response::new(RemovePodSandboxResponse {}))
    }

    async fn pod_sandbox_status(
        &self,
        request: Request<PodSandboxStatusRequest>,
    ) -> Result<Response<PodSandboxStatusResponse>, Status> {
        let request = request.into_inner();
        let id = validate::id("pod_sandbox_id", &request.pod_sandbox_id)?;
        let view = self.daemon.sandboxes.get(id)?;
        Ok(Response::new(PodSandboxStatusResponse {
            status: Some(convert::pod_sandbox_status(&view)),
            info: if request.verbose { convert::sandbox_info(&view) } else { Default::default() },
            containers_statuses: self
                .daemon
                .containers
                .of_sandbox(&view.record.id)
                .iter()
                .map(convert::container_status)
                .collect(),
            timestamp: crate::clock::now_ns(),
        }))
    }

    async fn list_pod_sandbox(
        &self,
        request: Request<ListPodSandboxRequest>,
    ) -> Result<Response<ListPodSandboxResponse>, Status> {
        let items = self.list_sandboxes(request.get_ref().filter.as_ref());
        Ok(Response::new(ListPodSandboxResponse { items }))
    }

    type StreamPodSandboxesStream = StreamOf<StreamPodSandboxesResponse>;

    async fn stream_pod_sandboxes(
        &self,
        request: Request<StreamPodSandboxesRequest>,
    ) -> Result<Response<Self::StreamPodSandboxesStream>, Status> {
        let items = self.list_sandboxes(request.get_ref().filter.as_ref());
        Ok(Response::new(chunked(items, |pod_sandboxes| StreamPodSandboxesResponse { pod_sandboxes })))
    }

    async fn create_container(
        &self,
        request: Request<CreateContainerRequest>,
    ) -> Result<Response<CreateContainerResponse>, Status> {
        let request = request.into_inner();
        let sandbox_id = validate::id("pod_sandbox_id", &request.pod_sandbox_id)?;
        let sandbox = self.daemon.sandboxes.get(sandbox_id)?;
        let create = validate::container_create(request, sandbox)?;
        let (daemon, owner) = (self.daemon.clone(), self.daemon.clone());
        let container_id = detached::made_or_undone(async move { daemon.containers.create(create).await }, |id: String| {
            async move {
                tracing::warn!(container_id = %id, "CreateContainer's caller left before its answer; removing the container");
                if let Err(e) = owner.containers.remove(&id).await {
                    tracing::error!(container_id = %id, error = %e, "cannot remove a container whose caller left");
                }
            }
        })
        .await??;
        super::instrument::record_id("container_id", &container_id);
        Ok(Response::new(CreateContainerResponse { container_id }))
    }

    async fn start_container(
        &self,
        request: Request<StartContainerRequest>,
    ) -> Result<Response<StartContainerResponse>, Status> {
        let id = validate::id("container_id", &request.get_ref().container_id)?.to_string();
        let daemon = self.daemon.clone();
        detached::to_the_end(async move { daemon.containers.start(&id).await }).await??;
        Ok(Response::new(StartContainerResponse {}))
    }

    async fn stop_container(
        &self,
        request: Request<StopContainerRequest>,
    ) -> Result<Response<StopContainerResponse>, Status> {
        let request = request.get_ref();
        let Some(id) = validate::id_to_end("container_id", &request.container_id)? else {
            return Ok(Response::new(StopContainerResponse {}));
        };
        let id = id.to_string();
        let timeout = std::time::Duration::from_secs(request.timeout.max(0) as u64);
        let daemon = self.daemon.clone();
        detached::to_the_end(async move { daemon.containers.stop(&id, timeout).await }).await??;
        Ok(Response::new(StopContainerResponse {}))
    }

    async fn remove_container(
        &self,
        request: Request<RemoveContainerRequest>,
    ) -> Result<Response<RemoveContainerResponse>, Status> {
        let Some(id) = validate::id_to_end("container_id", &request.get_ref().container_id)? else {
            return Ok(Response::new(RemoveContainerResponse {}));
        };
        let id = id.to_string();
        let daemon = self.daemon.clone();
        detached::to_the_end(async move { daemon.containers.remove(&id).await }).await??;
        Ok(Response::new(RemoveContainerResponse {}))
    }

    async fn list_containers(
        &self,
        request: Request<ListContainersRequest>,
    ) -> Result<Response<ListContainersResponse>, Status> {
        let containers = self.list_containers(request.get_ref().filter.as_ref());
        Ok(Response::new(ListContainersResponse { containers }))
    }

    type StreamContainersStream = StreamOf<StreamContainersResponse>;

    async fn stream_containers(
        &self,
        request: Request<StreamContainersRequest>,
    ) -> Result<Response<Self::StreamContainersStream>, Status> {
        let items = self.list_containers(request.get_ref().filter.as_ref());
        Ok(Response::new(chunked(items, |containers| StreamContainersResponse { containers })))
    }

    async fn container_status(
        &self,
        request: Request<ContainerStatusRequest>,
    ) -> Result<Response<ContainerStatusResponse>, Status> {
        let request = request.into_inner();
        let id = validate::id("container_id", &request.container_id)?;
        let view = self.daemon.containers.get(id)?;
        Ok(Response::new(ContainerStatusResponse {
            status: Some(convert::container_status(&view)),
            info: if request.verbose { convert::container_info(&view) } else { Default::default() },
        }))
    }

    async fn update_container_resources(
        &self,
        request: Request<UpdateContainerResourcesRequest>,
    ) -> Result<Response<UpdateContainerResourcesResponse>, Status> {
        let request = request.into_inner();
        let id = validate::id("container_id", &request.container_id)?.to_string();
        let linux = request.linux.ok_or_else(|| super::errors::invalid("linux", "is required"))?;
        validate::resources("linux", Some(&linux))?;
        let daemon = self.daemon.clone();
        detached::to_the_end(async move { daemon.containers.update_resources(&id, linux).await }).await??;
        Ok(Response::new(UpdateContainerResourcesResponse {}))
    }

    async fn reopen_container_log(
        &self,
        request: Request<ReopenContainerLogRequest>,
    ) -> Result<Response<ReopenContainerLogResponse>, Status> {
        let id = validate::id("container_id", &request.get_ref().container_id)?.to_string();
        let daemon = self.daemon.clone();
        detached::to_the_end(async move { daemon.containers.reopen_log(&id).await }).await??;
        Ok(Response::new(ReopenContainerLogResponse {}))
    }

    async fn exec_sync(&self, request: Request<ExecSyncRequest>) -> Result<Response<ExecSyncResponse>, Status> {
        let client_deadline = super::deadline::client_deadline(request.metadata());
        let request = request.into_inner();
        let id = validate::id("container_id", &request.container_id)?;
        validate::exec_command(&request.cmd)?;
        let timeout = (request.timeout > 0).then(|| std::time::Duration::from_secs(request.timeout as u64));
        // The client's deadline ends the command too, just before tonic would
        // answer Cancelled for it: a deadline is always DeadlineExceeded.
        let timeout = super::deadline::earliest(timeout, client_deadline);
        let out = self.daemon.containers.exec_sync(id, request.cmd, timeout).await?;
        Ok(Response::new(ExecSyncResponse { stdout: out.stdout, stderr: out.stderr, exit_code: out.exit_code }))
    }

    async fn exec(&self, request: Request<ExecRequest>) -> Result<Response<ExecResponse>, Status> {
        Ok(Response::new(super::streaming::exec(&self.daemon, request.into_inner())?))
    }

    async fn attach(&self, request: Request<AttachRequest>) -> Result<Response<AttachResponse>, Status> {
        Ok(Response::new(super::streaming::attach(&self.daemon, request.into_inner())?))
    }

    async fn port_forward(
        &self,
        request: Request<PortForwardRequest>,
    ) -> Result<Response<PortForwardResponse>, Status> {
        Ok(Response::new(super::streaming::port_forward(&self.daemon, request.into_inner())?))
    }

    async fn container_stats(
        &self,
        request: Request<ContainerStatsRequest>,
    ) -> Result<Response<ContainerStatsResponse>, Status> {
        let id = validate::id("container_id", &request.get_ref().container_id)?;
        let stats = stats::one_container(self.daemon.clone(), id).await?;
        Ok(Response::new(ContainerStatsResponse { stats: Some(stats) }))
    }

    async fn list_container_stats(
        &self,
        request: Request<ListContainerStatsRequest>,
    ) -> Result<Response<ListContainerStatsResponse>, Status> {
        let stats = stats::list_containers(self.daemon.clone(), request.into_inner().filter).await?;
        Ok(Response::new(ListContainerStatsResponse { stats }))
    }

    type StreamContainerStatsStream = StreamOf<StreamContainerStatsResponse>;

    async fn stream_container_stats(
        &self,
        request: Request<StreamContainerStatsRequest>,
    ) -> Result<Response<Self::StreamContainerStatsStream>, Status> {
        let items = stats::list_containers(self.daemon.clone(), request.into_inner().filter).await?;
        Ok(Response::new(chunked(items, |container_stats| StreamContainerStatsResponse { container_stats })))
    }

    async fn pod_sandbox_stats(
        &self,
        request: Request<PodSandboxStatsRequest>,
    ) -> Result<Response<PodSandboxStatsResponse>, Status> {
        let id = validate::id("pod_sandbox_id", &request.get_ref().pod_sandbox_id)?;
        let stats = stats::one_pod(self.daemon.clone(), id).await?;
        Ok(Response::new(PodSandboxStatsResponse { stats: Some(stats) }))
    }

    async fn list_pod_sandbox_stats(
        &self,
        request: Request<ListPodSandboxStatsRequest>,
    ) -> Result<Response<ListPodSandboxStatsResponse>, Status> {
        let stats = stats::list_pods(self.daemon.clone(), request.into_inner().filter).await?;
        Ok(Response::new(ListPodSandboxStatsResponse { stats }))
    }

    type StreamPodSandboxStatsStream = StreamOf<StreamPodSandboxStatsResponse>;

    async fn stream_pod_sandbox_stats(
        &self,
        request: Request<StreamPodSandboxStatsRequest>,
    ) -> Result<Response<Self::StreamPodSandboxStatsStream>, Status> {
        let items = stats::list_pods(self.daemon.clone(), request.into_inner().filter).await?;
        Ok(Response::new(chunked(items, |pod_sandbox_stats| StreamPodSandboxStatsResponse { pod_sandbox_stats })))
    }

    async fn update_runtime_config(
        &self,
        request: Request<UpdateRuntimeConfigRequest>,
    ) -> Result<Response<UpdateRuntimeConfigResponse>, Status> {
        let cidr = request
            .get_ref()
            .runtime_config
            .as_ref()
            .and_then(|c| c.network_config.as_ref())
            .map(|n| n.pod_cidr.as_str());
        if let Some(cidr) = cidr {
            self.daemon.network.set_pod_cidrs(cidr).map_err(|e| match e {
                PodCidrError::Invalid(why) => super::errors::invalid("runtime_config.network_config.pod_cidr", why),
                PodCidrError::Store(e) => Status::unavailable(e.to_string()),
            })?;
        }
        Ok(Response::new(UpdateRuntimeConfigResponse {}))
    }

    async fn status(&self, request: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        let health = self.daemon.health();
        let conditions = vec![
            RuntimeCondition {
                r#type: "RuntimeReady".into(),
                status: health.is_ok(),
                reason: if health.is_ok() { String::new() } else { "RuntimeNotReady".into() },
                message: health.err().unwrap_or_default(),
            },
            match self.daemon.network.readiness() {
                crate::network::Readiness::Ready => RuntimeCondition {
                    r#type: "NetworkReady".into(),
                    status: true,
                    reason: String::new(),
                    message: String::new(),
                },
                crate::network::Readiness::NotReady { reason, message } => {
                    RuntimeCondition { r#type: "NetworkReady".into(), status: false, reason, message }
                }
            },
        ];
        let info = if request.get_ref().verbose {
            [("config".to_string(), self.daemon.verbose_info().to_string())].into()
        } else {
            Default::default()
        };
        Ok(Response::new(StatusResponse {
            status: Some(RuntimeStatus { conditions }),
            info,
            runtime_handlers: vec![RuntimeHandler {
                name: String::new(),
                features: Some(RuntimeHandlerFeatures {
                    recursive_read_only_mounts: crate::linux::rootfs::has_mount_setattr(),
                    user_namespaces: self.daemon.user_namespaces.is_ok(),
                }),
            }],
            features: Some(RuntimeFeatures {
                supplemental_groups_policy: true,
                user_namespaces_host_network: false,
                mount_options: true,
            }),
        }))
    }

    async fn checkpoint_container(
        &self,
        request: Request<CheckpointContainerRequest>,
    ) -> Result<Response<CheckpointContainerResponse>, Status> {
        let request = request.get_ref();
        let id = validate::id("container_id", &request.container_id)?.to_string();
        let location =
            crate::checkpoint::location::check(&request.location).map_err(|e| super::errors::invalid("location", e))?;
        if request.timeout < 0 {
            return Err(super::errors::invalid("timeout", "must not be negative"));
        }
        let timeout = match request.timeout {
            0 => std::time::Duration::from_secs(self.daemon.config.checkpoint.default_timeout_secs),
            secs => std::time::Duration::from_secs(secs as u64),
        };
        let daemon = self.daemon.clone();
        detached::to_the_end(async move { daemon.containers.checkpoint(&id, &location, timeout).await }).await??;
        Ok(Response::new(CheckpointContainerResponse {}))
    }

    async fn checkpoint_pod(
        &self,
        request: Request<CheckpointPodRequest>,
    ) -> Result<Response<CheckpointPodResponse>, Status> {
        let daemon = self.daemon.clone();
        detached::to_the_end(super::pod_checkpoint::checkpoint(daemon, request.into_inner())).await??;
        Ok(Response::new(CheckpointPodResponse {}))
    }

    async fn restore_pod(&self, request: Request<RestorePodRequest>) -> Result<Response<RestorePodResponse>, Status> {
        let daemon = self.daemon.clone();
        Ok(Response::new(detached::to_the_end(super::pod_checkpoint::restore(daemon, request.into_inner())).await??))
    }

    type GetContainerEventsStream = StreamOf<ContainerEventResponse>;

    async fn get_container_events(
        &self,
        _: Request<GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        Ok(Response::new(super::events::stream(self.daemon.clone())))
    }

    async fn list_metric_descriptors(
        &self,
        _: Request<ListMetricDescriptorsRequest>,
    ) -> Result<Response<ListMetricDescriptorsResponse>, Status> {
        Ok(Response::new(ListMetricDescriptorsResponse { descriptors: stats::metric_descriptors(&self.daemon) }))
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _: Request<ListPodSandboxMetricsRequest>,
    ) -> Result<Response<ListPodSandboxMetricsResponse>, Status> {
        let pod_metrics = stats::list_pod_metrics(self.daemon.clone()).await?;
        Ok(Response::new(ListPodSandboxMetricsResponse { pod_metrics }))
    }

    type StreamPodSandboxMetricsStream = StreamOf<StreamPodSandboxMetricsResponse>;

    async fn stream_pod_sandbox_metrics(
        &self,
        _: Request<StreamPodSandboxMetricsRequest>,
    ) -> Result<Response<Self::StreamPodSandboxMetricsStream>, Status> {
        let items = stats::list_pod_metrics(self.daemon.clone()).await?;
        Ok(Response::new(chunked(items, |pod_sandbox_metrics| StreamPodSandboxMetricsResponse { pod_sandbox_metrics })))
    }

    async fn runtime_config(
        &self,
        _: Request<RuntimeConfigRequest>,
    ) -> Result<Response<RuntimeConfigResponse>, Status> {
        Ok(Response::new(RuntimeConfigResponse {
            linux: Some(LinuxRuntimeConfiguration { cgroup_driver: CgroupDriver::Cgroupfs as i32 }),
        }))
    }

    async fn update_pod_sandbox_resources(
        &self,
        request: Request<UpdatePodSandboxResourcesRequest>,
    ) -> Result<Response<UpdatePodSandboxResourcesResponse>, Status> {
        let request = request.into_inner();
        let id = validate::id("pod_sandbox_id", &request.pod_sandbox_id)?;
        validate::resources("overhead", request.overhead.as_ref())?;
        validate::resources("resources", request.resources.as_ref())?;
        let pod = crate::pod::record::PodResources {
            overhead: request.overhead.unwrap_or_default(),
            resources: request.resources.unwrap_or_default(),
        };
        self.daemon.sandboxes.update_resources(id, pod).await?;
        Ok(Response::new(UpdatePodSandboxResourcesResponse {}))
    }
}
