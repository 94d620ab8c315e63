//! A CRI runtime.v1alpha2 client as kubelet 1.20–1.25 and crictl up to 1.25
//! are: the service names of runtime.v1alpha2 and its own message types, both
//! generated from proto/v1alpha2/api.proto by build.rs (nothing of runtime.v1).

use std::path::Path;

use tonic::transport::Channel;

pub mod api {
    //! runtime.v1alpha2 messages and clients.
    #![allow(clippy::all)]
    include!(concat!(env!("OUT_DIR"), "/v1alpha2-client/runtime.v1alpha2.rs"));
}

use api::image_service_client::ImageServiceClient;
use api::runtime_service_client::RuntimeServiceClient;

pub struct CriV1alpha2 {
    pub runtime: RuntimeServiceClient<Channel>,
    pub images: ImageServiceClient<Channel>,
}

impl CriV1alpha2 {
    pub async fn connect(socket: &Path) -> Result<Self, String> {
        let channel = nidus::socket_client::socket_channel(socket).await?;
        Ok(Self {
            runtime: RuntimeServiceClient::new(channel.clone()).max_decoding_message_size(64 << 20),
            images: ImageServiceClient::new(channel).max_decoding_message_size(64 << 20),
        })
    }
}

/// A pod config like kubelet 1.20–1.25 sends, written with the runtime.v1alpha2
/// types: own network/PID/IPC namespaces, DNS, labels, annotations, a sysctl.
pub fn pod_config(name: &str) -> api::PodSandboxConfig {
    use api::*;
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: "legacy".into(),
            attempt: 1,
        }),
        hostname: format!("{name}-host"),
        log_directory: format!("/var/log/pods/legacy_{name}_uid-{name}"),
        dns_config: Some(DnsConfig {
            servers: vec!["10.96.0.10".into()],
            searches: vec!["legacy.svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        }),
        labels: [("app".into(), name.into()), ("api".into(), "v1alpha2".into())].into(),
        annotations: [("note".into(), "made through runtime.v1alpha2".into())].into(),
        linux: Some(LinuxPodSandboxConfig {
            sysctls: [("net.ipv4.ip_forward".into(), "1".into())].into(),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: NamespaceMode::Pod as i32,
                    pid: NamespaceMode::Pod as i32,
                    ipc: NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                // The deprecated string older kubelets still send beside `seccomp`.
                seccomp_profile_path: "runtime/default".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}
