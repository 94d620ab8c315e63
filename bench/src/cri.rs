//! The one CRI client both runtimes are driven by: nidus's generated tonic
//! client (`nidus::api`) over a Unix socket, every call bounded in time, and
//! the pod and container configs the benchmark sends (kubelet-like).

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use hyper_util::rt::TokioIo;
use nidus::api::image_service_client::ImageServiceClient;
use nidus::api::runtime_service_client::RuntimeServiceClient;
use nidus::api::*;
use tonic::transport::{Channel, Endpoint, Uri};

/// No single call may take longer than this; a hung runtime fails the run.
const CALL_LIMIT: Duration = Duration::from_secs(120);

#[derive(Clone)]
pub struct Cri {
    channel: Channel,
    runtime: RuntimeServiceClient<Channel>,
}

impl Cri {
    /// Subscribes to GetContainerEvents and reads every event in a task of
    /// its own (dropped with the handle); the count of events read so far.
    pub async fn drain_events(
        &self,
    ) -> Result<(tokio::task::JoinHandle<()>, std::sync::Arc<std::sync::atomic::AtomicU64>)> {
        let mut stream = self
            .runtime
            .clone()
            .get_container_events(GetEventsRequest {})
            .await
            .context("GetContainerEvents")?
            .into_inner();
        let count = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen = count.clone();
        let task = tokio::spawn(async move {
            while let Ok(Some(_)) = stream.message().await {
                seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
        Ok((task, count))
    }

    /// Connects to the CRI socket (the `:authority` is a placeholder, as for any UDS client).
    pub async fn connect(socket: &Path) -> Result<Self> {
        let socket = socket.to_path_buf();
        let channel = Endpoint::from_static("http://localhost")
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let socket = socket.clone();
                async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(socket).await?)) }
            }))
            .await?;
        let runtime = RuntimeServiceClient::new(channel.clone()).max_decoding_message_size(64 << 20);
        Ok(Self { channel, runtime })
    }

    pub async fn version(&self) -> Result<VersionResponse> {
        let mut c = self.runtime.clone();
        call("Version", c.version(VersionRequest::default())).await
    }

    /// RuntimeReady from Status.
    pub async fn runtime_ready(&self) -> Result<bool> {
        let mut c = self.runtime.clone();
        let status = call("Status", c.status(StatusRequest { verbose: false })).await?;
        Ok(status.status.is_some_and(|s| s.conditions.iter().any(|c| c.r#type == "RuntimeReady" && c.status)))
    }

    /// Exec (streaming): the session URL for `cmd` with stdout and stderr.
    pub async fn exec_url(&self, container_id: &str, cmd: &[&str]) -> Result<String> {
        let mut c = self.runtime.clone();
        let request = ExecRequest {
            container_id: container_id.into(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            stdout: true,
            stderr: true,
            ..Default::default()
        };
        Ok(call("Exec", c.exec(request)).await?.url)
    }

    pub async fn checkpoint_container(&self, id: &str, location: &Path) -> Result<()> {
        let mut c = self.runtime.clone();
        let request = CheckpointContainerRequest {
            container_id: id.into(),
            location: location.display().to_string(),
            timeout: 0,
        };
        call("CheckpointContainer", c.checkpoint_container(request)).await?;
        Ok(())
    }

    pub async fn checkpoint_pod(&self, id: &str, output: &Path) -> Result<()> {
        let mut c = self.runtime.clone();
        let request = CheckpointPodRequest {
            pod_sandbox_id: id.into(),
            output_path: output.display().to_string(),
            ..Default::default()
        };
        call("CheckpointPod", c.checkpoint_pod(request)).await?;
        Ok(())
    }

    /// RestorePod with `config` (the archived pod's, its own log directory).
    pub async fn restore_pod(&self, archive: &Path, config: &PodSandboxConfig) -> Result<RestorePodResponse> {
        let mut c = self.runtime.clone();
        let request = RestorePodRequest {
            checkpoint_path: archive.display().to_string(),
            config: Some(config.clone()),
            ..Default::default()
        };
        call("RestorePod", c.restore_pod(request)).await
    }

    pub async fn run_pod(&self, config: &PodSandboxConfig) -> Result<String> {
        let mut c = self.runtime.clone();
        let request = RunPodSandboxRequest { config: Some(config.clone()), runtime_handler: String::new() };
        Ok(call("RunPodSandbox", c.run_pod_sandbox(request)).await?.pod_sandbox_id)
    }

    pub async fn stop_pod(&self, id: &str) -> Result<()> {
        let mut c = self.runtime.clone();
        call("StopPodSandbox", c.stop_pod_sandbox(StopPodSandboxRequest { pod_sandbox_id: id.into() })).await?;
        Ok(())
    }

    pub async fn remove_pod(&self, id: &str) -> Result<()> {
        let mut c = self.runtime.clone();
        call("RemovePodSandbox", c.remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: id.into() })).await?;
        Ok(())
    }

    /// The pod's verbose info (`info` key) as JSON.
    pub async fn pod_info(&self, id: &str) -> Result<serde_json::Value> {
        let mut c = self.runtime.clone();
        let status = call(
            "PodSandboxStatus",
            c.pod_sandbox_status(PodSandboxStatusRequest { pod_sandbox_id: id.into(), verbose: true }),
        )
        .await?;
        verbose_info(&status.info)
    }

    /// PodSandboxStatus as kubelet's relist asks it (not verbose).
    pub async fn pod_status(&self, id: &str) -> Result<PodSandboxStatus> {
        let mut c = self.runtime.clone();
        let status = call(
            "PodSandboxStatus",
            c.pod_sandbox_status(PodSandboxStatusRequest { pod_sandbox_id: id.into(), verbose: false }),
        )
        .await?;
        status.status.ok_or_else(|| anyhow!("PodSandboxStatus of {id} has no status"))
    }

    /// ListContainerStats of every container.
    pub async fn list_container_stats(&self) -> Result<Vec<ContainerStats>> {
        let mut c = self.runtime.clone();
        Ok(call("ListContainerStats", c.list_container_stats(ListContainerStatsRequest { filter: None })).await?.stats)
    }

    /// ListPodSandboxStats of every pod.
    pub async fn list_pod_stats(&self) -> Result<Vec<PodSandboxStats>> {
        let mut c = self.runtime.clone();
        Ok(call("ListPodSandboxStats", c.list_pod_sandbox_stats(ListPodSandboxStatsRequest { filter: None }))
            .await?
            .stats)
    }

    /// ImageFsInfo: the image filesystems' usage.
    pub async fn image_fs_info(&self) -> Result<ImageFsInfoResponse> {
        let mut images = ImageServiceClient::new(self.channel.clone());
        call("ImageFsInfo", images.image_fs_info(ImageFsInfoRequest {})).await
    }

    pub async fn list_pods(&self) -> Result<Vec<PodSandbox>> {
        let mut c = self.runtime.clone();
        Ok(call("ListPodSandbox", c.list_pod_sandbox(ListPodSandboxRequest { filter: None })).await?.items)
    }

    pub async fn create_container(
        &self,
        pod_id: &str,
        pod: &PodSandboxConfig,
        config: &ContainerConfig,
    ) -> Result<String> {
        let mut c = self.runtime.clone();
        let request = CreateContainerRequest {
            pod_sandbox_id: pod_id.into(),
            config: Some(config.clone()),
            sandbox_config: Some(pod.clone()),
        };
        Ok(call("CreateContainer", c.create_container(request)).await?.container_id)
    }

    pub async fn start_container(&self, id: &str) -> Result<()> {
        let mut c = self.runtime.clone();
        call("StartContainer", c.start_container(StartContainerRequest { container_id: id.into() })).await?;
        Ok(())
    }

    pub async fn container_status(&self, id: &str) -> Result<ContainerStatus> {
        let mut c = self.runtime.clone();
        let status = call(
            "ContainerStatus",
            c.container_status(ContainerStatusRequest { container_id: id.into(), verbose: false }),
        )
        .await?;
        status.status.ok_or_else(|| anyhow!("ContainerStatus of {id} has no status"))
    }

    /// The container's verbose info (`info` key) as JSON.
    pub async fn container_info(&self, id: &str) -> Result<serde_json::Value> {
        let mut c = self.runtime.clone();
        let status = call(
            "ContainerStatus",
            c.container_status(ContainerStatusRequest { container_id: id.into(), verbose: true }),
        )
        .await?;
        verbose_info(&status.info)
    }

    pub async fn list_containers(&self) -> Result<Vec<Container>> {
        let mut c = self.runtime.clone();
        Ok(call("ListContainers", c.list_containers(ListContainersRequest { filter: None })).await?.containers)
    }

    pub async fn exec_sync(&self, id: &str, cmd: &[&str]) -> Result<ExecSyncResponse> {
        let mut c = self.runtime.clone();
        let request =
            ExecSyncRequest { container_id: id.into(), cmd: cmd.iter().map(|s| s.to_string()).collect(), timeout: 10 };
        call("ExecSync", c.exec_sync(request)).await
    }

    pub async fn stop_container(&self, id: &str, timeout: i64) -> Result<()> {
        let mut c = self.runtime.clone();
        call("StopContainer", c.stop_container(StopContainerRequest { container_id: id.into(), timeout })).await?;
        Ok(())
    }

    pub async fn remove_container(&self, id: &str) -> Result<()> {
        let mut c = self.runtime.clone();
        call("RemoveContainer", c.remove_container(RemoveContainerRequest { container_id: id.into() })).await?;
        Ok(())
    }

    /// Pulls `reference` from its registry (PullImage); answers the image id.
    pub async fn pull_image(&self, reference: &str) -> Result<String> {
        let mut images = ImageServiceClient::new(self.channel.clone());
        let request = PullImageRequest {
            image: Some(ImageSpec { image: reference.into(), ..Default::default() }),
            ..Default::default()
        };
        Ok(call("PullImage", images.pull_image(request)).await?.image_ref)
    }

    pub async fn remove_image(&self, reference: &str) -> Result<()> {
        let mut images = ImageServiceClient::new(self.channel.clone());
        let request = RemoveImageRequest { image: Some(ImageSpec { image: reference.into(), ..Default::default() }) };
        call("RemoveImage", images.remove_image(request)).await?;
        Ok(())
    }

    /// True when the runtime lists `reference` (ImageStatus).
    pub async fn image_present(&self, reference: &str) -> Result<bool> {
        let mut images = ImageServiceClient::new(self.channel.clone());
        let request = ImageStatusRequest {
            image: Some(ImageSpec { image: reference.into(), ..Default::default() }),
            verbose: false,
        };
        Ok(call("ImageStatus", images.image_status(request)).await?.image.is_some())
    }
}

async fn call<T>(what: &str, rpc: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>) -> Result<T> {
    match tokio::time::timeout(CALL_LIMIT, rpc).await {
        Ok(Ok(response)) => Ok(response.into_inner()),
        Ok(Err(status)) => Err(anyhow!("{what}: {:?}: {}", status.code(), status.message())),
        Err(_) => Err(anyhow!("{what}: no answer within {}s", CALL_LIMIT.as_secs())),
    }
}

fn verbose_info(info: &HashMap<String, String>) -> Result<serde_json::Value> {
    let text = info.get("info").context("verbose status without an `info` entry")?;
    serde_json::from_str(text).context("verbose `info` is not JSON")
}

/// How a pod's network is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodNetwork {
    /// The node's network namespace (the runtime's own, made by the harness).
    Node,
    /// A new, empty network namespace of the pod's own (nidus only: containerd
    /// 1.6 refuses it without a CNI config).
    Own,
    /// A network namespace of its own with one TCP host port (18500 → 80).
    OwnWithHostPort,
    /// A network namespace of its own and a user namespace of its own
    /// (`hostUsers: false`: 65,536 IDs from 3,000,000).
    OwnUserns,
}

/// The host port of `PodNetwork::OwnWithHostPort` pods (one at a time).
const BENCH_HOST_PORT: i32 = 18500;

/// How a pod's `cgroup_parent` is written for a runtime, as kubelet writes
/// it for each cgroup driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodCgroupParent {
    /// cgroupfs: the path `<prefix>pod<uid>`, relative (each runtime nests it
    /// under its own cgroup, see `Runtime::pod_cgroup_parent`).
    Path(String),
    /// systemd: the slice `<prefix>-pod<uid>.slice`, the uid's dashes written
    /// as underscores as kubelet does (a dash separates the levels of a slice
    /// name: `<prefix>.slice/<prefix>-pod<uid>.slice`).
    Slice(String),
}

impl PodCgroupParent {
    pub fn for_pod(&self, uid: &str) -> String {
        match self {
            PodCgroupParent::Path(prefix) => format!("{prefix}pod{uid}"),
            PodCgroupParent::Slice(prefix) => format!("{prefix}-pod{}.slice", uid.replace('-', "_")),
        }
    }
}

/// A pod config like kubelet's: the pod's log directory, a `cgroup_parent`
/// (see `PodCgroupParent`), the pod's IPC namespace, a PID namespace per
/// container.
pub fn pod_config(
    name: &str,
    log_directory: &Path,
    network: PodNetwork,
    cgroup_parent: &PodCgroupParent,
) -> PodSandboxConfig {
    let uid = format!("{name}-uid");
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: uid.clone(),
            namespace: "bench".into(),
            attempt: 0,
        }),
        // kubelet names the host only of pods with their own network (a
        // host-network pod shares the node's UTS namespace too).
        hostname: if network == PodNetwork::Node { String::new() } else { name.into() },
        port_mappings: if network == PodNetwork::OwnWithHostPort {
            vec![PortMapping {
                protocol: Protocol::Tcp as i32,
                container_port: 80,
                host_port: BENCH_HOST_PORT,
                host_ip: String::new(),
            }]
        } else {
            Vec::new()
        },
        log_directory: log_directory.display().to_string(),
        labels: HashMap::from([("bench".into(), "nidus-bench".into())]),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent.for_pod(&uid),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: match network {
                        PodNetwork::Node => NamespaceMode::Node,
                        PodNetwork::Own | PodNetwork::OwnWithHostPort | PodNetwork::OwnUserns => NamespaceMode::Pod,
                    } as i32,
                    userns_options: (network == PodNetwork::OwnUserns).then(|| {
                        let ids = vec![IdMapping { host_id: 3_000_000, container_id: 0, length: 65536 }];
                        UserNamespace { mode: NamespaceMode::Pod as i32, uids: ids.clone(), gids: ids }
                    }),
                    pid: NamespaceMode::Container as i32,
                    ipc: NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A container config like kubelet's, running `command` from the busybox image,
/// logging to `<pod log dir>/<name>/0.log`.
/// For a container of a pod with a user namespace: the masks kubelet names
/// for procMount Default (in such a pod, empty lists would mean Unmasked).
pub fn as_kubelet_for(pod: &PodSandboxConfig, mut config: ContainerConfig) -> ContainerConfig {
    let userns = pod
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.as_ref())
        .is_some_and(|n| n.userns_options.is_some());
    if userns {
        if let Some(sc) = config.linux.as_mut().and_then(|l| l.security_context.as_mut()) {
            sc.masked_paths = nidus::container::spec::DEFAULT_MASKED_PATHS.iter().map(|p| p.to_string()).collect();
            sc.readonly_paths = nidus::container::spec::DEFAULT_READONLY_PATHS.iter().map(|p| p.to_string()).collect();
        }
    }
    config
}

pub fn container_config(name: &str, image: &str, command: &[&str]) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata { name: name.into(), attempt: 0 }),
        image: Some(ImageSpec { image: image.into(), ..Default::default() }),
        command: command.iter().map(|s| s.to_string()).collect(),
        log_path: format!("{name}/0.log"),
        labels: HashMap::from([("bench".into(), "nidus-bench".into())]),
        linux: Some(LinuxContainerConfig {
            security_context: Some(LinuxContainerSecurityContext {
                namespace_options: Some(NamespaceOption {
                    pid: NamespaceMode::Container as i32,
                    ipc: NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}
