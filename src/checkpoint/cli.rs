//! `nidus checkpoint` and `nidus restore` for operators: CRI calls on the
//! daemon's socket (CheckpointContainer; CreateContainer from an archive +
//! StartContainer), so they run exactly the code kubelet's requests run.

use std::path::{Path, PathBuf};

use tonic::transport::Channel;

use crate::api::runtime_service_client::RuntimeServiceClient;
use crate::api::*;
use crate::socket_client::socket_channel;

async fn connect(socket: &Path) -> Result<RuntimeServiceClient<Channel>, String> {
    Ok(RuntimeServiceClient::new(socket_channel(socket).await?))
}

fn status_text(e: tonic::Status) -> String {
    format!("{:?}: {}", e.code(), e.message())
}

/// Checkpoints `container` into `location`.
pub async fn checkpoint(socket: &Path, container: &str, location: &Path, timeout_secs: i64) -> Result<(), String> {
    let location = std::path::absolute(location).map_err(|e| format!("{}: {e}", location.display()))?;
    let mut client = connect(socket).await?;
    client
        .checkpoint_container(CheckpointContainerRequest {
            container_id: container.into(),
            location: location.display().to_string(),
            timeout: timeout_secs,
        })
        .await
        .map_err(status_text)?;
    println!("{}", location.display());
    Ok(())
}

/// Restores the checkpoint `archive` into sandbox `pod` and starts it;
/// returns the new container's id. `name`: default the checkpointed one.
pub async fn restore(socket: &Path, archive: &Path, pod: &str, name: Option<&str>) -> Result<String, String> {
    let archive: PathBuf = std::path::absolute(archive).map_err(|e| format!("{}: {e}", archive.display()))?;
    let dump = {
        let path = archive.clone();
        tokio::task::spawn_blocking(move || {
            super::archive::read_config_dump(&path, crate::config::LimitsSettings::default().checkpoint_archive_bytes)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("{}: {e}", archive.display()))?
    };
    let mut client = connect(socket).await?;
    let mut metadata = dump.nidus.config.metadata.clone().unwrap_or_default();
    if let Some(name) = name {
        metadata.name = name.to_string();
    }
    let config = ContainerConfig {
        metadata: Some(metadata),
        image: Some(ImageSpec { image: archive.display().to_string(), ..Default::default() }),
        ..Default::default()
    };
    let id = client
        .create_container(CreateContainerRequest {
            pod_sandbox_id: pod.into(),
            config: Some(config),
            sandbox_config: None,
        })
        .await
        .map_err(status_text)?
        .into_inner()
        .container_id;
    client.start_container(StartContainerRequest { container_id: id.clone() }).await.map_err(status_text)?;
    Ok(id)
}
