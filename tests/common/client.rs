//! A small CRI client over the Unix socket, with builders for the requests
//! tests send most. Later issues extend it.

use std::collections::HashMap;
use std::path::Path;

use hyper_util::rt::TokioIo;
use nidus::api::image_service_client::ImageServiceClient;
use nidus::api::runtime_service_client::RuntimeServiceClient;
use nidus::api::*;
use tonic::transport::{Channel, Endpoint, Uri};

pub struct Cri {
    pub runtime: RuntimeServiceClient<Channel>,
    pub images: ImageServiceClient<Channel>,
}

impl Cri {
    pub async fn connect(socket: &Path) -> Result<Self, tonic::transport::Error> {
        let channel = channel(socket).await?;
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

    pub async fn list_pods(&mut self, filter: Option<PodSandboxFilter>) -> Vec<PodSandbox> {
        self.runtime
            .list_pod_sandbox(ListPodSandboxRequest { filter })
            .await
            .expect("ListPodSandbox")
            .into_inner()
            .items
    }
}

/// A gRPC channel over the CRI Unix socket.
pub async fn channel(socket: &Path) -> Result<Channel, tonic::transport::Error> {
    let socket = socket.to_path_buf();
    Endpoint::from_static("http://nidus.invalid")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(socket).await?)) }
        }))
        .await
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
