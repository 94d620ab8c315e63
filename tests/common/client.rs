//! A small CRI client over the Unix socket, with builders for the requests
//! tests send most. Later issues extend it.

use std::collections::HashMap;
use std::path::Path;

use nidus::api::image_service_client::ImageServiceClient;
use nidus::api::runtime_service_client::RuntimeServiceClient;
use nidus::api::*;
use tonic::transport::Channel;

#[derive(Clone)]
pub struct Cri {
    pub runtime: RuntimeServiceClient<Channel>,
    pub images: ImageServiceClient<Channel>,
}

impl Cri {
    pub async fn connect(socket: &Path) -> Result<Self, String> {
        let channel = nidus::socket_client::socket_channel(socket).await?;
        Ok(Self {
            runtime: RuntimeServiceClient::new(channel.clone()).max_decoding_message_size(64 << 20),
            images: ImageServiceClient::new(channel).max_decoding_message_size(64 << 20),
        })
    }

    pub async fn version(&mut self) -> Result<VersionResponse, tonic::Status> {
        Ok(self.runtime.version(VersionRequest::default()).await?.into_inner())
    }

    pub async fn run_pod(&mut self, config: PodSandboxConfig) -> Result<String, tonic::Status> {
        Ok(self
            .runtime
            .run_pod_sandbox(RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() })
            .await?
            .into_inner()
            .pod_sandbox_id)
    }

    pub async fn stop_pod(&mut self, id: &str) -> Result<(), tonic::Status> {
        self.runtime.stop_pod_sandbox(StopPodSandboxRequest { pod_sandbox_id: id.into() }).await?;
        Ok(())
    }

    pub async fn remove_pod(&mut self, id: &str) -> Result<(), tonic::Status> {
        self.runtime.remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: id.into() }).await?;
        Ok(())
    }

    pub async fn pod_status(&mut self, id: &str) -> Result<PodSandboxStatusResponse, tonic::Status> {
        Ok(self
            .runtime
            .pod_sandbox_status(PodSandboxStatusRequest { pod_sandbox_id: id.into(), verbose: true })
            .await?
            .into_inner())
    }

    /// The verbose info JSON of a sandbox.
    pub async fn pod_info(&mut self, id: &str) -> serde_json::Value {
        let status = self.pod_status(id).await.expect("PodSandboxStatus");
        serde_json::from_str(status.info.get("info").expect("verbose info")).expect("info is JSON")
    }

    pub async fn pause_pid(&mut self, id: &str) -> i32 {
        self.pod_info(id).await["pid"].as_i64().expect("pause pid") as i32
    }

    pub async fn pod_state(&mut self, id: &str) -> PodSandboxState {
        let status = self.pod_status(id).await.expect("PodSandboxStatus");
        status.status.expect("status").state()
    }

    pub async fn image_status(&mut self, reference: &str) -> Result<ImageStatusResponse, tonic::Status> {
        Ok(self
            .images
            .image_status(ImageStatusRequest { image: Some(image_spec(reference)), verbose: true })
            .await?
            .into_inner())
    }

    /// The image `reference` names, `None` when absent.
    pub async fn image(&mut self, reference: &str) -> Option<Image> {
        self.image_status(reference).await.expect("ImageStatus").image
    }

    /// The verbose info JSON of an image.
    pub async fn image_info(&mut self, reference: &str) -> serde_json::Value {
        let status = self.image_status(reference).await.expect("ImageStatus");
        serde_json::from_str(status.info.get("info").expect("verbose image info")).expect("info is JSON")
    }

    pub async fn list_images(&mut self, filter: Option<&str>) -> Result<Vec<Image>, tonic::Status> {
        let filter = filter.map(|f| ImageFilter { image: Some(image_spec(f)) });
        Ok(self.images.list_images(ListImagesRequest { filter }).await?.into_inner().images)
    }

    pub async fn remove_image(&mut self, reference: &str) -> Result<(), tonic::Status> {
        self.images.remove_image(RemoveImageRequest { image: Some(image_spec(reference)) }).await?;
        Ok(())
    }

    pub async fn list_pods(&mut self, filter: Option<PodSandboxFilter>) -> Vec<PodSandbox> {
        self.runtime
            .list_pod_sandbox(ListPodSandboxRequest { filter })
            .await
            .expect("ListPodSandbox")
            .into_inner()
            .items
    }
}

pub fn image_spec(reference: &str) -> ImageSpec {
    ImageSpec { image: reference.into(), ..Default::default() }
}

/// A pod config like kubelet's, with its own namespaces (network/pid/ipc = POD).
pub fn pod_config(name: &str) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: format!("/var/log/pods/default_{name}_uid-{name}"),
        dns_config: Some(DnsConfig {
            servers: vec!["10.96.0.10".into()],
            searches: vec!["default.svc.cluster.local".into(), "svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        }),
        labels: HashMap::from([("app".into(), name.into())]),
        annotations: HashMap::from([("note".into(), "made by a test".into())]),
        linux: Some(LinuxPodSandboxConfig {
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: NamespaceMode::Pod as i32,
                    pid: NamespaceMode::Pod as i32,
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

/// Sets the namespace modes of a pod config.
pub fn with_namespaces(
    mut config: PodSandboxConfig,
    network: NamespaceMode,
    pid: NamespaceMode,
    ipc: NamespaceMode,
) -> PodSandboxConfig {
    let linux = config.linux.get_or_insert_with(Default::default);
    let sc = linux.security_context.get_or_insert_with(Default::default);
    sc.namespace_options =
        Some(NamespaceOption { network: network as i32, pid: pid as i32, ipc: ipc as i32, ..Default::default() });
    config
}

/// A container config like kubelet's: its own PID namespace, a log file.
pub fn container_config(name: &str, image: &str, command: &[&str]) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata { name: name.into(), attempt: 0 }),
        image: Some(ImageSpec { image: image.into(), ..Default::default() }),
        command: command.iter().map(|s| s.to_string()).collect(),
        log_path: format!("{name}/0.log"),
        linux: Some(LinuxContainerConfig {
            security_context: Some(LinuxContainerSecurityContext {
                namespace_options: Some(NamespaceOption { pid: NamespaceMode::Container as i32, ..Default::default() }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The security context of a container config, created when missing.
pub fn security(config: &mut ContainerConfig) -> &mut LinuxContainerSecurityContext {
    config.linux.get_or_insert_with(Default::default).security_context.get_or_insert_with(Default::default)
}

/// One record of a CRI log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub timestamp: String,
    pub stream: String,
    pub tag: String,
    pub content: String,
}

/// Parses a CRI log file; panics on a malformed line.
pub fn parse_log(text: &str) -> Vec<LogRecord> {
    text.lines()
        .map(|line| {
            let mut parts = line.splitn(4, ' ');
            let record = LogRecord {
                timestamp: parts.next().unwrap_or_default().into(),
                stream: parts.next().unwrap_or_default().into(),
                tag: parts.next().unwrap_or_default().into(),
                content: parts.next().unwrap_or_default().into(),
            };
            assert!(record.timestamp.contains('T') && record.timestamp.ends_with('Z'), "bad timestamp in {line:?}");
            assert!(["stdout", "stderr"].contains(&record.stream.as_str()), "bad stream in {line:?}");
            assert!(["F", "P"].contains(&record.tag.as_str()), "bad tag in {line:?}");
            record
        })
        .collect()
}

/// The full lines of one stream of a CRI log (P parts joined).
pub fn log_lines(records: &[LogRecord], stream: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut partial = String::new();
    for r in records.iter().filter(|r| r.stream == stream) {
        partial.push_str(&r.content);
        if r.tag == "F" {
            lines.push(std::mem::take(&mut partial));
        }
    }
    lines
}

impl Cri {
    pub async fn create_container(
        &mut self,
        pod_id: &str,
        pod: &PodSandboxConfig,
        config: ContainerConfig,
    ) -> Result<String, tonic::Status> {
        Ok(self
            .runtime
            .create_container(CreateContainerRequest {
                pod_sandbox_id: pod_id.into(),
                config: Some(config),
                sandbox_config: Some(pod.clone()),
            })
            .await?
            .into_inner()
            .container_id)
    }

    pub async fn start_container(&mut self, id: &str) -> Result<(), tonic::Status> {
        self.runtime.start_container(StartContainerRequest { container_id: id.into() }).await?;
        Ok(())
    }

    /// Creates and starts a container.
    pub async fn run_container(&mut self, pod_id: &str, pod: &PodSandboxConfig, config: ContainerConfig) -> String {
        let id = self.create_container(pod_id, pod, config).await.expect("CreateContainer");
        self.start_container(&id).await.expect("StartContainer");
        id
    }

    pub async fn stop_container(&mut self, id: &str, timeout: i64) -> Result<(), tonic::Status> {
        self.runtime.stop_container(StopContainerRequest { container_id: id.into(), timeout }).await?;
        Ok(())
    }

    pub async fn remove_container(&mut self, id: &str) -> Result<(), tonic::Status> {
        self.runtime.remove_container(RemoveContainerRequest { container_id: id.into() }).await?;
        Ok(())
    }

    pub async fn container_status(&mut self, id: &str) -> Result<ContainerStatusResponse, tonic::Status> {
        Ok(self
            .runtime
            .container_status(ContainerStatusRequest { container_id: id.into(), verbose: true })
            .await?
            .into_inner())
    }

    pub async fn status_of(&mut self, id: &str) -> ContainerStatus {
        self.container_status(id).await.expect("ContainerStatus").status.expect("status")
    }

    /// The container's verbose info JSON.
    pub async fn container_info(&mut self, id: &str) -> serde_json::Value {
        let status = self.container_status(id).await.expect("ContainerStatus");
        serde_json::from_str(status.info.get("info").expect("verbose info")).expect("info is JSON")
    }

    pub async fn container_pid(&mut self, id: &str) -> i32 {
        self.container_info(id).await["pid"].as_i64().expect("container pid") as i32
    }

    /// Waits up to `secs` for the container to exit; returns its status.
    pub async fn wait_exited(&mut self, id: &str, secs: u64) -> ContainerStatus {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        loop {
            let status = self.status_of(id).await;
            if status.state() == ContainerState::ContainerExited {
                return status;
            }
            assert!(std::time::Instant::now() < deadline, "container {id} still {:?} after {secs}s", status.state());
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    pub async fn exec(&mut self, id: &str, cmd: &[&str], timeout: i64) -> Result<ExecSyncResponse, tonic::Status> {
        Ok(self
            .runtime
            .exec_sync(ExecSyncRequest {
                container_id: id.into(),
                cmd: cmd.iter().map(|s| s.to_string()).collect(),
                timeout,
            })
            .await?
            .into_inner())
    }

    /// Runs a command that must succeed; returns its stdout as text.
    pub async fn exec_ok(&mut self, id: &str, cmd: &[&str]) -> String {
        let out = self.exec(id, cmd, 10).await.expect("ExecSync");
        assert_eq!(out.exit_code, 0, "{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub async fn list_containers(&mut self, filter: Option<ContainerFilter>) -> Vec<Container> {
        self.runtime
            .list_containers(ListContainersRequest { filter })
            .await
            .expect("ListContainers")
            .into_inner()
            .containers
    }

    /// The log records of a container so far.
    pub async fn logs(&mut self, id: &str) -> Vec<LogRecord> {
        let path = self.status_of(id).await.log_path;
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        // Whole records only: one being written may be read in part.
        parse_log(&text[..text.rfind('\n').map_or(0, |end| end + 1)])
    }

    /// Waits up to `secs` for the container to print `line` on stdout: the
    /// way a test knows its shell got past a `trap` before it is signalled
    /// (a PID 1 drops a signal it has no handler for).
    pub async fn wait_for_line(&mut self, id: &str, line: &str, secs: u64) {
        self.wait_for_stdout(id, secs, &format!("print {line:?}"), |lines| lines.iter().any(|l| l == line)).await
    }

    /// Waits up to `secs` until the stdout lines of the container's current
    /// log file satisfy `done`; `what` names the wait in the failure.
    pub async fn wait_for_stdout(&mut self, id: &str, secs: u64, what: &str, done: impl Fn(&[String]) -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while !done(&log_lines(&self.logs(id).await, "stdout")) {
            assert!(std::time::Instant::now() < deadline, "container {id} did not {what} in {secs}s");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

impl Cri {
    pub async fn container_stats(&mut self, id: &str) -> Result<ContainerStats, tonic::Status> {
        let response = self.runtime.container_stats(ContainerStatsRequest { container_id: id.into() }).await?;
        Ok(response.into_inner().stats.expect("stats"))
    }

    pub async fn list_container_stats(&mut self, filter: Option<ContainerStatsFilter>) -> Vec<ContainerStats> {
        self.runtime
            .list_container_stats(ListContainerStatsRequest { filter })
            .await
            .expect("ListContainerStats")
            .into_inner()
            .stats
    }

    pub async fn pod_stats(&mut self, id: &str) -> Result<PodSandboxStats, tonic::Status> {
        let response = self.runtime.pod_sandbox_stats(PodSandboxStatsRequest { pod_sandbox_id: id.into() }).await?;
        Ok(response.into_inner().stats.expect("stats"))
    }

    pub async fn list_pod_stats(&mut self, filter: Option<PodSandboxStatsFilter>) -> Vec<PodSandboxStats> {
        self.runtime
            .list_pod_sandbox_stats(ListPodSandboxStatsRequest { filter })
            .await
            .expect("ListPodSandboxStats")
            .into_inner()
            .stats
    }

    pub async fn update_resources(&mut self, id: &str, linux: LinuxContainerResources) -> Result<(), tonic::Status> {
        let request =
            UpdateContainerResourcesRequest { container_id: id.into(), linux: Some(linux), ..Default::default() };
        self.runtime.update_container_resources(request).await?;
        Ok(())
    }

    /// The verbose Status info of the runtime (config, cgroups, stale cgroups).
    pub async fn runtime_info(&mut self) -> serde_json::Value {
        let status = self.runtime.status(StatusRequest { verbose: true }).await.expect("Status").into_inner();
        serde_json::from_str(status.info.get("config").expect("verbose info")).expect("info is JSON")
    }
}

/// The resources of a container config, created when missing.
pub fn resources(config: &mut ContainerConfig) -> &mut LinuxContainerResources {
    config.linux.get_or_insert_with(Default::default).resources.get_or_insert_with(Default::default)
}
